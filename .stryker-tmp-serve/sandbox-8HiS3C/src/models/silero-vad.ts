/**
 * Silero VAD v4, v5 and v6: pre-trained voice-activity detectors (MIT licence,
 * snakers4/silero-vad), run with onnxruntime-web (wasm). The ONNX weights ship
 * inside the npm package `@ricky0123/vad-web` (dist/silero_vad_legacy.onnx = v4,
 * silero_vad_v5.onnx, silero_vad_v6.onnx).
 *
 * Runtime-agnostic: the ONNX runtime and the weights are passed in
 * (`createSileroVad(spec, runtime, bytes)`), so the same code serves in the Node
 * replica (index.ts: weights read from node_modules, onnx-session.ts) and inside
 * the edge Worker (src/edge/: weights and wasm are modules of the Worker).
 *
 * All three versions share one JSON contract:
 * Input (JSON):  { "samples": number[], "sampleRate"?: 16000 | 8000, "threshold"?: number }
 *   `samples` is mono float PCM in [-1, 1] at `sampleRate` (default 16000), at least one
 *   frame (512 samples at 16 kHz, 256 at 8 kHz) and at most 30 s.
 * Output (JSON): per-32 ms-frame speech probabilities, the speech segments above
 *   `threshold` (default 0.5), and a summary (`speech`, `maxProbability`, ...); `model`
 *   names the version ("silero-vad-v4" | "silero-vad-v5" | "silero-vad-v6").
 *
 * The versions differ only in their graph's recurrent interface, captured by a small
 * `SileroVadSpec` (checked against the session's input/output names at load):
 *   v4:     inputs input/sr/h/c, outputs output/hn/cn; LSTM states h and c, 2x1x64 each;
 *           each frame is fed alone (no context).
 *   v5, v6: inputs input/state/sr, outputs output/stateN; one state 2x1x128; each frame
 *           is fed with the 64-sample (32 at 8 kHz) tail of the previous frame prepended
 *           as context, exactly as silero-vad's reference wrapper (OnnxWrapper) does.
 *
 * Each call starts from a zeroed state and walks the frames in order, so a call is a
 * pure function of its input (same input, same output); calls are serialised per model.
 */
// @ts-nocheck

import { z } from "zod";
import { ModelInputError, type InferenceModel } from "./model.ts";
import type { OnnxRuntime, OrtSession } from "./onnx-runtime.ts";

const MAX_SECONDS = 30;
const MAX_SAMPLES = MAX_SECONDS * 16000;
const MAX_ISSUES = 20;

type SampleRate = 16000 | 8000;
const FRAME_SAMPLES: Record<SampleRate, number> = { 16000: 512, 8000: 256 };

/** One recurrent state tensor: fed as `input`, read back from `output` after each frame. */
interface RecurrentState {
  readonly input: string;
  readonly output: string;
  readonly dims: readonly number[];
}

/** What differs between Silero VAD versions. */
export interface SileroVadSpec {
  readonly id: SileroVadId;
  readonly version: string;
  /** npm specifier of the ONNX weights. */
  readonly file: string;
  readonly states: readonly RecurrentState[];
  /** Samples of the previous frame prepended to each frame (0: none). */
  readonly contextSamples: Readonly<Record<SampleRate, number>>;
}

export type SileroVadId = "silero-vad-v4" | "silero-vad-v5" | "silero-vad-v6";

const V5_STATE: readonly RecurrentState[] = [{ input: "state", output: "stateN", dims: [2, 1, 128] }];
const V5_CONTEXT = { 16000: 64, 8000: 32 } as const;

export const SILERO_VAD_SPECS: readonly SileroVadSpec[] = Object.freeze([
  {
    id: "silero-vad-v4",
    version: "v4",
    file: "@ricky0123/vad-web/dist/silero_vad_legacy.onnx",
    states: [
      { input: "h", output: "hn", dims: [2, 1, 64] },
      { input: "c", output: "cn", dims: [2, 1, 64] },
    ],
    contextSamples: { 16000: 0, 8000: 0 },
  },
  { id: "silero-vad-v5", version: "v5", file: "@ricky0123/vad-web/dist/silero_vad_v5.onnx", states: V5_STATE, contextSamples: V5_CONTEXT },
  { id: "silero-vad-v6", version: "v6", file: "@ricky0123/vad-web/dist/silero_vad_v6.onnx", states: V5_STATE, contextSamples: V5_CONTEXT },
]);

const inputSchema = z
  .object({
    samples: z.array(z.number().min(-1).max(1)),
    sampleRate: z.union([z.literal(16000), z.literal(8000)]).default(16000),
    threshold: z.number().gt(0).lt(1).default(0.5),
  })
  .strict()
  .superRefine((value, ctx) => {
    const frame = FRAME_SAMPLES[value.sampleRate];
    if (value.samples.length < frame) {
      ctx.addIssue({
        code: "custom",
        path: ["samples"],
        message: `need at least ${frame} samples (one 32 ms frame at ${value.sampleRate} Hz), got ${value.samples.length}`,
      });
    }
    const max = MAX_SECONDS * value.sampleRate;
    if (value.samples.length > max) {
      ctx.addIssue({
        code: "custom",
        path: ["samples"],
        message: `at most ${max} samples (${MAX_SECONDS} s at ${value.sampleRate} Hz), got ${value.samples.length}`,
      });
    }
  });

export type SileroVadInput = z.input<typeof inputSchema>;

export interface SpeechSegment {
  startMs: number;
  endMs: number;
  maxProbability: number;
}

export interface SileroVadOutput {
  model: SileroVadId;
  /** True when at least one frame's probability is >= threshold. */
  speech: boolean;
  threshold: number;
  sampleRate: SampleRate;
  frameSamples: number;
  frameMs: number;
  durationMs: number;
  maxProbability: number;
  meanProbability: number;
  /** Fraction of frames with probability >= threshold. */
  speechRatio: number;
  segments: SpeechSegment[];
  /** Speech probability of each 32 ms frame, in order (4 decimals). */
  probabilities: number[];
}

const round4 = (x: number): number => Math.round(x * 1e4) / 1e4;

/**
 * A deterministic, speech-like test signal: a glottal pulse train (f0 ~120 Hz falling
 * slowly, with vibrato and a little seeded jitter) through four formant resonators whose
 * frequencies step through the vowels /a/, /i/, /e/, /u/, one 200 ms syllable each,
 * shaped by a syllable envelope with a 40 ms pause between syllables. All three Silero
 * versions score it as speech (v6 rejects a single steady vowel after a few hundred ms
 * at 16 kHz), while silence, white noise and pure tones score near 0. Used for
 * `inputExample` and tests.
 */
export function synthesizeVowel(sampleCount: number, sampleRate: SampleRate = 16000): number[] {
  const vowels: ReadonlyArray<readonly number[]> = [
    [700, 1220, 2600, 3500], // a
    [300, 2300, 3000, 3700], // i
    [500, 1900, 2500, 3600], // e
    [320, 900, 2400, 3400], // u
  ];
  const bandwidths = [90, 110, 170, 250];
  const syllable = Math.round(0.2 * sampleRate);
  const pause = 0.2; // fraction of each syllable that is silent
  let seed = 7;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  let signal = new Float64Array(sampleCount);
  let phase = 0;
  for (let i = 0; i < sampleCount; i++) {
    const f0 = 120 * (1 - 0.15 * (i / Math.max(sampleCount, 1))) * (1 + 0.15 * Math.sin((2 * Math.PI * 3 * i) / sampleRate));
    phase += (f0 * (1 + 0.05 * (random() - 0.5))) / sampleRate;
    if (phase >= 1) {
      phase -= 1;
      signal[i] = 1;
    }
  }
  for (let f = 0; f < bandwidths.length; f++) {
    const r = Math.exp((-Math.PI * bandwidths[f]!) / sampleRate);
    const out = new Float64Array(sampleCount);
    for (let i = 0; i < sampleCount; i++) {
      const freq = vowels[Math.floor(i / syllable) % vowels.length]![f]!;
      const a1 = 2 * r * Math.cos((2 * Math.PI * freq) / sampleRate);
      out[i] = (1 - r) * (signal[i] ?? 0) + a1 * (out[i - 1] ?? 0) - r * r * (out[i - 2] ?? 0);
    }
    signal = out;
  }
  let peak = 0;
  for (const v of signal) peak = Math.max(peak, Math.abs(v));
  const result: number[] = new Array<number>(sampleCount);
  for (let i = 0; i < sampleCount; i++) {
    const pos = (i % syllable) / syllable;
    const envelope = pos >= 1 - pause ? 0 : Math.sqrt(Math.sin((Math.PI * pos) / (1 - pause)));
    result[i] = round4((0.5 * (signal[i] ?? 0) * envelope) / (peak || 1));
  }
  return result;
}

/** A loaded Silero VAD version: one ORT session, runs serialised. */
class SileroVad implements InferenceModel {
  readonly id: SileroVadId;
  readonly description: string;
  readonly inputExample: SileroVadInput;

  readonly #spec: SileroVadSpec;
  readonly #runtime: OnnxRuntime;
  readonly #session: OrtSession;
  #queue: Promise<unknown> = Promise.resolve();
  #released: Promise<void> | undefined;

  constructor(spec: SileroVadSpec, runtime: OnnxRuntime, session: OrtSession) {
    this.#spec = spec;
    this.#runtime = runtime;
    this.#session = session;
    this.id = spec.id;
    this.description = `Silero VAD ${spec.version} voice-activity detector (pre-trained, MIT, snakers4/silero-vad); ONNX weights from npm @ricky0123/vad-web; mono float PCM at 16/8 kHz -> speech probability per 32 ms frame`;
    // 0.5 s: v4's LSTM needs a few frames before it commits to speech.
    this.inputExample = { sampleRate: 16000, samples: synthesizeVowel(8000) };
  }

  infer(input: unknown): Promise<SileroVadOutput> {
    if (this.#released) return Promise.reject(new Error(`${this.id}: model was released`));
    // Refuse oversized arrays before zod walks every element.
    const samples: unknown = typeof input === "object" && input !== null ? Reflect.get(input, "samples") : undefined;
    if (Array.isArray(samples) && samples.length > MAX_SAMPLES) {
      const message = `at most ${MAX_SAMPLES} samples (${MAX_SECONDS} s at 16000 Hz), got ${samples.length}`;
      return Promise.reject(
        new ModelInputError(`invalid input for ${this.id}: ${message}`, [{ code: "too_big", path: ["samples"], message }]),
      );
    }
    const parsed = inputSchema.safeParse(input);
    if (!parsed.success) {
      // One bad element per sample could mean hundreds of thousands of issues: keep the first few.
      const issues = parsed.error.issues.slice(0, MAX_ISSUES);
      const more = parsed.error.issues.length - issues.length;
      const text = z.prettifyError(new z.ZodError(issues)) + (more > 0 ? `\n(${more} more issues)` : "");
      return Promise.reject(new ModelInputError(`invalid input for ${this.id}: ${text}`, issues));
    }
    const run = this.#queue.then(() => this.#run(parsed.data.samples, parsed.data.sampleRate, parsed.data.threshold));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  /** Frees the ORT session once the runs already queued have finished; idempotent. */
  release(): Promise<void> {
    this.#released ??= this.#queue.then(() => this.#runtime.release(this.#session));
    return this.#released;
  }

  async #run(samples: readonly number[], sampleRate: SampleRate, threshold: number): Promise<SileroVadOutput> {
    const spec = this.#spec;
    const { Tensor } = this.#runtime;
    const frameSamples = FRAME_SAMPLES[sampleRate];
    const contextSamples = spec.contextSamples[sampleRate];
    const frameCount = Math.ceil(samples.length / frameSamples);
    const audio = new Float32Array(frameCount * frameSamples); // last frame zero-padded
    audio.set(samples);

    const sr = new Tensor("int64", BigInt64Array.from([BigInt(sampleRate)]), []);
    const feeds: Record<string, InstanceType<typeof Tensor>> = { sr };
    for (const s of spec.states) {
      feeds[s.input] = new Tensor("float32", new Float32Array(s.dims.reduce((a, b) => a * b, 1)), s.dims);
    }
    const probabilities: number[] = [];

    for (let f = 0; f < frameCount; f++) {
      const start = f * frameSamples;
      // window = [tail of the previous frame (zeros for the first) | this frame]
      const window = new Float32Array(contextSamples + frameSamples);
      if (f > 0 && contextSamples > 0) window.set(audio.subarray(start - contextSamples, start), 0);
      window.set(audio.subarray(start, start + frameSamples), contextSamples);
      feeds["input"] = new Tensor("float32", window, [1, window.length]);
      const out = await this.#runtime.run(this.#session, feeds);
      const prob = out["output"]?.data[0];
      if (typeof prob !== "number") throw new Error(`${this.id}: unexpected model outputs`);
      for (const s of spec.states) {
        const next = out[s.output];
        if (!next) throw new Error(`${this.id}: missing output ${s.output}`);
        feeds[s.input] = next;
      }
      probabilities.push(prob);
    }

    const frameMs = (frameSamples / sampleRate) * 1000;
    const durationMs = round4((samples.length / sampleRate) * 1000);
    const segments: SpeechSegment[] = [];
    let open: SpeechSegment | undefined;
    let speechFrames = 0;
    probabilities.forEach((p, i) => {
      if (p >= threshold) {
        speechFrames++;
        if (!open) {
          open = { startMs: round4(i * frameMs), endMs: 0, maxProbability: 0 };
          segments.push(open);
        }
        open.endMs = round4(Math.min((i + 1) * frameMs, durationMs));
        open.maxProbability = Math.max(open.maxProbability, round4(p));
      } else {
        open = undefined;
      }
    });
    const max = Math.max(...probabilities);
    const mean = probabilities.reduce((a, b) => a + b, 0) / probabilities.length;
    return {
      model: this.id,
      speech: speechFrames > 0,
      threshold,
      sampleRate,
      frameSamples,
      frameMs,
      durationMs,
      maxProbability: round4(max),
      meanProbability: round4(mean),
      speechRatio: round4(speechFrames / probabilities.length),
      segments,
      probabilities: probabilities.map(round4),
    };
  }
}

/**
 * Creates a fresh session for one Silero VAD version from its ONNX weights (`bytes`,
 * the file `spec.file`) on `runtime`, and checks that the graph has the inputs and
 * outputs its spec expects.
 */
export async function createSileroVad(spec: SileroVadSpec, runtime: OnnxRuntime, bytes: Uint8Array): Promise<InferenceModel> {
  const session = await runtime.createSession(bytes);
  const inputs = ["input", "sr", ...spec.states.map((s) => s.input)];
  const outputs = ["output", ...spec.states.map((s) => s.output)];
  const missing = [...inputs.filter((n) => !session.inputNames.includes(n)), ...outputs.filter((n) => !session.outputNames.includes(n))];
  if (missing.length > 0) {
    await runtime.release(session);
    throw new Error(`${spec.id}: ${spec.file} lacks ${missing.join(", ")} (has inputs ${session.inputNames.join(", ")}; outputs ${session.outputNames.join(", ")})`);
  }
  return new SileroVad(spec, runtime, session);
}
