/**
 * What a model needs from an ONNX runtime, so that the model code (silero-vad.ts)
 * runs unchanged wherever onnxruntime-web is set up: in the Node replica
 * (onnx-session.ts: wasm file from node_modules) or inside the edge Worker
 * (src/edge/ort-workerd.ts: wasm imported as a compiled module). Pure: only a
 * type import of onnxruntime-web, no runtime dependency on it or on Node.
 */
// @ts-nocheck

import type * as Ort from "onnxruntime-web";

export type OrtSession = Ort.InferenceSession;
export type OrtFeeds = Ort.InferenceSession.FeedsType;
export type OrtResults = Ort.InferenceSession.ReturnType;

export interface OnnxRuntime {
  /** The runtime's Tensor class (tensors must come from the same onnxruntime-web instance as the session). */
  readonly Tensor: typeof Ort.Tensor;
  /** Creates a session on the wasm execution provider from the model's bytes. */
  createSession(bytes: Uint8Array): Promise<OrtSession>;
  /** `session.run(feeds)`, never overlapping another run or release on the same wasm instance. */
  run(session: OrtSession, feeds: OrtFeeds): Promise<OrtResults>;
  /** `session.release()`, never in the middle of another session's run. */
  release(session: OrtSession): Promise<void>;
}

/**
 * A FIFO of async tasks: each runs after every task queued before it has settled
 * (whatever its outcome). One per wasm instance: see onnx-session.ts for why runs
 * on one onnxruntime-web instance must not overlap.
 */
export function serialQueue(): <T>(task: () => Promise<T>) => Promise<T> {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(task: () => Promise<T>): Promise<T> => {
    const result = tail.then(task);
    tail = result.catch(() => undefined);
    return result;
  };
}
