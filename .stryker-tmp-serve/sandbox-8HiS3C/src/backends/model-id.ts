/** A model id as deployments and replicas name it (the protocol's MODEL_ID). */
// @ts-nocheck

import { z } from "zod";
import { MODEL_ID } from "../protocol/limits.ts";

export const ModelId = z.string().regex(MODEL_ID, "model ids are 1-128 of [A-Za-z0-9._:@/+-]");
