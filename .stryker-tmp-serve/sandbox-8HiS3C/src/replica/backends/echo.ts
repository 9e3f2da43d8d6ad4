// @ts-nocheck
import { echoHandler } from "../handlers.ts";
import type { ReplicaBackend } from "./context.ts";

export const echo: ReplicaBackend = async () => ({ handler: echoHandler() });
