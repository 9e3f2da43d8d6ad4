// @ts-nocheck
import { textHandler } from "../handlers.ts";
import type { ReplicaBackend } from "./context.ts";

export const text: ReplicaBackend = async (ctx) => ({ handler: textHandler(ctx.flags.text ?? "hi", { serviceMs: ctx.knobs.serviceMs }) });
