/**
 * One model per isolate, created on first use: the first acquire starts the
 * creation, concurrent acquires wait for that same creation, later ones get the
 * model at once. A failed creation is not kept: the next acquire tries again.
 * Pure (no onnxruntime import), so it is tested in Node. Also the isolate's
 * registry of such models by id (runtime.ts registers; the request path serves).
 */
// @ts-nocheck

import type { InferenceModel } from "../models/model.ts";

export interface EdgeModelLease {
  model: InferenceModel;
  /** The model already existed; false when this acquire waited for its creation. */
  hit: boolean;
}

export interface EdgeModelHost {
  acquire(): Promise<EdgeModelLease>;
  /** Whether the model has been created in this isolate. */
  readonly ready: boolean;
}

export function lazyModel(create: () => Promise<InferenceModel>): EdgeModelHost {
  let model: InferenceModel | undefined;
  let creating: Promise<InferenceModel> | undefined;
  return {
    get ready() {
      return model !== undefined;
    },
    async acquire() {
      if (model) return { model, hit: true };
      creating ??= (async () => create())().then(
        (m) => {
          model = m;
          creating = undefined;
          return m;
        },
        (err: unknown) => {
          creating = undefined;
          throw err;
        },
      );
      return { model: await creating, hit: false };
    },
  };
}

const hosts = new Map<string, EdgeModelHost>();

/** Makes a model servable at the edge in this isolate (src/edge/runtime.ts; tests). */
export function provideEdgeModel(id: string, host: EdgeModelHost): void {
  hosts.set(id, host);
}

/** The model registered under `id` in this isolate, if any. */
export function edgeModelHost(id: string): EdgeModelHost | undefined {
  return hosts.get(id);
}
