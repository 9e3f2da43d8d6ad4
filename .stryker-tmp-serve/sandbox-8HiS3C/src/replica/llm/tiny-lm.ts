/**
 * tiny-lm, the reference replica's generative language model (docs/tiny-lm.md): a
 * character-level trigram model whose weights are an ONNX graph built by
 * scripts/build-tiny-lm.ts from models/tiny-lm/corpus.txt, run with onnxruntime-web
 * (wasm). Every next-token distribution is one `session.run`; sampling is done by the
 * caller (sampling.ts).
 *
 * Runtime-agnostic like the other models (src/models/onnx-runtime.ts): no Node
 * APIs here; load-tiny-lm.ts reads the files and creates the session in Node.
 */
// @ts-nocheck

import type { OnnxRuntime, OrtSession } from "../../models/onnx-runtime.ts";
import { END_OF_TURN, chatPrompt, continuationPrompt } from "../../prompt/tiny-lm-chat-template.ts";
import type { GenerativeModel } from "./engine.ts";
import { sampleToken } from "./sampling.ts";
import { BOS, VOCAB_SIZE, encode, tokenText } from "./tokenizer.ts";

export const TINY_LM_ID = "tiny-lm";

/** A language model that gives logits over tiny-lm's vocabulary (TinyLm, or a test's fake). */
export interface LanguageModel {
  readonly id: string;
  readonly vocabSize: number;
  /** Length of the vectors `embed` returns. */
  readonly embeddingSize: number;
  /** Logits (natural-log probabilities) of the next token after `prev2 prev1`: one model run. */
  nextLogits(prev2: number, prev1: number): Promise<Float32Array>;
  /** A unit-length embedding of a non-empty token sequence: one model run. */
  embed(ids: readonly number[]): Promise<Float32Array>;
  release(): Promise<void>;
}

export class TinyLm implements LanguageModel {
  readonly id = TINY_LM_ID;
  readonly vocabSize = VOCAB_SIZE;
  readonly embeddingSize = VOCAB_SIZE - 1;
  readonly #runtime: OnnxRuntime;
  readonly #session: OrtSession;

  constructor(runtime: OnnxRuntime, session: OrtSession) {
    this.#runtime = runtime;
    this.#session = session;
  }

  async nextLogits(prev2: number, prev1: number): Promise<Float32Array> {
    const context = new this.#runtime.Tensor("int64", BigInt64Array.of(BigInt(prev2), BigInt(prev1)), [1, 2]);
    const out = await this.#runtime.run(this.#session, { context });
    const logits = out["logits"]?.data;
    if (!(logits instanceof Float32Array) || logits.length !== VOCAB_SIZE) throw new Error("tiny-lm: unexpected logits output");
    return logits;
  }

  /**
   * The mean, over every position of `ids`, of the model's next-token log-probabilities
   * given the two tokens ending there (<s> before the start), without <s>'s column,
   * centred and L2-normalised: all computed in the graph, one run with batch = ids.length.
   */
  async embed(ids: readonly number[]): Promise<Float32Array> {
    if (ids.length === 0) throw new RangeError("tiny-lm: nothing to embed");
    const pairs = new BigInt64Array(ids.length * 2);
    for (let t = 0; t < ids.length; t++) {
      pairs[2 * t] = BigInt(t === 0 ? BOS : ids[t - 1]!);
      pairs[2 * t + 1] = BigInt(ids[t]!);
    }
    const out = await this.#runtime.run(this.#session, { context: new this.#runtime.Tensor("int64", pairs, [ids.length, 2]) });
    const embedding = out["embedding"]?.data;
    if (!(embedding instanceof Float32Array) || embedding.length !== this.embeddingSize) throw new Error("tiny-lm: unexpected embedding output");
    return embedding;
  }

  release(): Promise<void> {
    return this.#runtime.release(this.#session);
  }
}

/** A session on `bytes` (models/tiny-lm/tiny-lm.onnx), checked to have tiny-lm's inputs and outputs. */
export async function createTinyLm(runtime: OnnxRuntime, bytes: Uint8Array): Promise<TinyLm> {
  const session = await runtime.createSession(bytes);
  const missing = [...["context"].filter((n) => !session.inputNames.includes(n)), ...["logits", "embedding"].filter((n) => !session.outputNames.includes(n))];
  if (missing.length > 0) {
    await runtime.release(session);
    throw new Error(`tiny-lm: the graph lacks ${missing.join(", ")}`);
  }
  return new TinyLm(runtime, session);
}

/**
 * Warms a fresh model up: the first couple of thousand runs of a fresh wasm instance are
 * several times slower than the rest while V8 compiles the hot code with its optimising
 * tier. `yieldToLoop` is awaited every 100 runs: V8 installs that code at a task boundary,
 * which can block the event loop for a second, better during warm-up than on a request.
 */
export async function warmUpTinyLm(model: LanguageModel, runs: number, yieldToLoop: () => Promise<void>): Promise<void> {
  for (let i = 0; i < runs; i++) {
    await model.nextLogits(i % VOCAB_SIZE, (i * 7) % VOCAB_SIZE);
    if (i % 100 === 99) await yieldToLoop();
  }
  if (runs > 0) await model.embed([2, 3, 4]);
}

/**
 * A logits model as the engine's GenerativeModel: tiny-lm's tokenizer and chat template
 * (an answer ends at END_OF_TURN, a stop string), and each next token sampled from one
 * run over the last two tokens (BOS before the start, never generated).
 */
export function tinyLmGenerator(model: LanguageModel): GenerativeModel {
  return {
    id: model.id,
    prompts: {
      vocabSize: VOCAB_SIZE,
      firstId: BOS + 1,
      chat: (messages, extras) => encode(extras?.continueFinalMessage ? continuationPrompt(messages) : chatPrompt(messages)),
      text: encode,
      chatStop: [END_OF_TURN],
    },
    decoder(prompt, { sampling, rng }) {
      let prev2 = prompt.length >= 2 ? prompt[prompt.length - 2]! : BOS;
      let prev1 = prompt[prompt.length - 1] ?? BOS;
      const counts = new Map<number, number>();
      return {
        async next() {
          const token = sampleToken(await model.nextLogits(prev2, prev1), sampling, rng, { counts, exclude: [BOS] });
          counts.set(token, (counts.get(token) ?? 0) + 1);
          prev2 = prev1;
          prev1 = token;
          return { token, text: tokenText(token) };
        },
      };
    },
    embeddings: { size: model.embeddingSize, embed: (ids) => model.embed(ids) },
  };
}
