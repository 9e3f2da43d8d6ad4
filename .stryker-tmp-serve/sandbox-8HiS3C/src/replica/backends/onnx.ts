/**
 * ONNX models on the reference replica: one (--model, loaded before registering)
 * or several multiplexed (--models, loaded on demand, LRU). onnxruntime is
 * loaded only for onnx replicas: its wasm is not free.
 */
// @ts-nocheck

import { ModelCache } from "../../models/model-cache.ts";
import { modelHandler } from "../handlers.ts";
import type { ReplicaBackend, ReplicaBackendContext } from "./context.ts";

interface OnnxPlan {
  /** The ids this replica serves. */
  models: string[];
  maxModels: number;
  defaultModel?: string;
  /** Single-model mode: the model to load before registering. */
  preload?: string;
}

/** Validates the onnx flags (exits 2 on a bad one). */
function onnxPlan(args: ReplicaBackendContext["flags"], known: readonly string[], fail: (msg: string) => never): OnnxPlan {
  const check = (id: string, flag: string) => {
    if (!known.includes(id)) fail(`${flag}: unknown model "${id}"; known models: ${known.join(", ")}`);
  };
  if (args.model !== undefined) {
    if (args.models !== undefined || args["max-models-per-replica"] !== undefined || args["default-model"] !== undefined) {
      fail("--model serves one model; use --models (with --max-models-per-replica, --default-model) to multiplex");
    }
    check(args.model, "--model");
    return { models: [args.model], maxModels: 1, defaultModel: args.model, preload: args.model };
  }
  if (args.models === undefined) fail(`--backend onnx needs --model ID or --models ID,ID,...; known models: ${known.join(", ")}`);
  const models = args.models.split(",").map((m) => m.trim());
  if (models.some((m) => m === "")) fail("--models: empty model id");
  if (new Set(models).size !== models.length) fail("--models: a model is listed twice");
  for (const m of models) check(m, "--models");
  const rawMax = args["max-models-per-replica"];
  if (rawMax === undefined) fail("--models needs --max-models-per-replica N");
  const maxModels = Number(rawMax);
  if (!/^\d+$/.test(rawMax) || !Number.isSafeInteger(maxModels) || maxModels < 1 || maxModels > 1024) {
    fail("--max-models-per-replica must be an integer from 1 to 1024");
  }
  const defaultModel = args["default-model"];
  if (defaultModel !== undefined && !models.includes(defaultModel)) {
    fail(`--default-model "${defaultModel}" is not in --models (${models.join(", ")})`);
  }
  return defaultModel === undefined ? { models, maxModels } : { models, maxModels, defaultModel };
}

export const onnx: ReplicaBackend = async ({ flags, admission, log, fail, reportNow }) => {
  const { modelIds, createModelById } = await import("../../models/index.ts");
  const plan = onnxPlan(flags, modelIds, fail);
  const cache: ModelCache = new ModelCache({
    maxModels: plan.maxModels,
    create: createModelById,
    allowed: plan.models,
    onChange: () => admission.setModels(cache.loaded(), cache.loading()),
    // The "loading" report goes out before the load blocks the event loop (bounded: a slow edge must not delay loads).
    beforeLoad: () => Promise.race([reportNow(), new Promise<void>((r) => setTimeout(r, 500))]),
  });
  admission.setModels([], []);
  if (!plan.preload) {
    // The first session of a process instantiates onnxruntime's wasm, which holds the
    // event loop for 1.5-3.5 s on this machine kind: done now, before registering, or the
    // first model load would silence this replica's reports long enough for the edge
    // to drop it from routing (with the model it was loading). Later loads hold it ~0.1-0.5 s.
    const started = Date.now();
    const warm = await createModelById(plan.models[0]!);
    await warm.release();
    log(`onnx runtime ready in ${Date.now() - started} ms`);
  }
  if (plan.preload) {
    // Single model: load it before registering, like a replica that is ready when it joins.
    const started = Date.now();
    const lease = await cache.acquire(plan.preload);
    lease.release();
    log(`loaded ${plan.preload} in ${Date.now() - started} ms`);
  }
  return { handler: modelHandler(cache, plan.defaultModel === undefined ? {} : { defaultModel: plan.defaultModel }), cache };
};
