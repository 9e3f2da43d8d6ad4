/**
 * bench/admission/admission.ts's targets, apart from the bench so that they can be judged on any
 * input (test/unit/bench-judge.test.ts). Each is judged only over enough of what it
 * names (judge.ts): a p99 over MIN_SAMPLES answers, a reference "alone" from an arm that
 * had as many, fairness over flows that each served MIN_SAMPLES requests (four flows that
 * served one request each have a Jain's index of 1), bounds over the number of requests
 * asked to be held, every one of them seen, released and answered.
 */
import { judgeValue, MIN_SAMPLES, ratioOver, sampled, type Judgement } from "../shared/judge.ts";

export interface FloodResult {
  capacity: number;
  uncontended: { p50: number; p99: number; n: number; failed: number };
  flooded: { p50: number; p99: number; n: number; failed: number };
  /** The same for the interactive requests sent ONSET_MS or more after the flood began (the steady state). */
  steady: { p50: number; p99: number; n: number; failed: number };
  /** The flooded interactive requests' slowest TTFTs, with when each was sent after the flood began (ms). */
  slowest: { atMs: number; ttftMs: number }[];
  batch: { sent: number; completed: number; statuses: Record<string, number> };
}

export interface FairResult {
  flows: { flow: string; clients: number; served: number; share: number }[];
  jain: number;
  maxDeviation: number;
  /** The same over the requests that ended ONSET_MS or more into the window (before then, no budget had come yet). */
  steady: { served: number[]; jain: number; maxDeviation: number };
  failed: number;
}

export interface ZeroResult {
  replicaStartMs: number;
  cycles: { failed: number; firstAnswerMs: number; lastAnswerMs: number; backToZeroMs: number }[];
}

export interface BoundsResult {
  held: number;
  heldSeenByIsolate: number;
  rssBeforeMiB: number;
  rssHeldMiB: number;
  /** The isolate's V8 heap in use, garbage included (workerd's inspector): what Workers' 128 MB per isolate bounds. */
  heapBeforeMiB: number;
  heapHeldMiB: number;
  overCap: { sent: number; refusedJson: number; statuses: Record<string, number>; p99Ms: number };
  released: { ok: number; failed: number; statuses: Record<string, number>; lastMs: number };
}

/** A target's verdict and the figure it judged. */
export interface AdmissionTarget extends Judgement {
  value: number;
}

/** The interactive p99 over the lower of the arms' uncontended p99s; null when no arm had enough uncontended answers. */
export function aloneP99(floods: readonly FloodResult[]): number | null {
  const enough = floods.map((f) => sampled(f.uncontended.p99, f.uncontended.n - f.uncontended.failed)).filter((v): v is number => v !== null);
  return enough.length ? Math.min(...enough) : null;
}

/** Priority under the flood, admission on against the reference alone: ≤ 1.5× (all of it, and its steady part), and nothing lost. */
export function floodTargets(on: FloodResult, off: FloodResult): { priority: AdmissionTarget; steady: AdmissionTarget; noLoss: AdmissionTarget } {
  const alone = aloneP99([off, on]);
  const ratio = (p: { p99: number; n: number; failed: number }) => (alone === null ? null : ratioOver(sampled(p.p99, p.n - p.failed) ?? NaN, alone, Number.MIN_VALUE));
  const judged = (v: number | null, rule: { atLeast: boolean; threshold: number }, why: string): AdmissionTarget => (v === null ? { met: null, why, value: NaN } : { ...judgeValue(v, rule), value: v });
  const under = `fewer than ${MIN_SAMPLES} answers alone or flooded`;
  const completed = on.batch.sent > 0 ? on.batch.completed / on.batch.sent : null;
  const noLoss: AdmissionTarget =
    completed === null || on.flooded.n < MIN_SAMPLES ? { met: null, why: "no batch sent or too few interactive requests", value: NaN } : { met: on.flooded.failed === 0 && completed >= 0.99, value: completed };
  return { priority: judged(ratio(on.flooded), { atLeast: false, threshold: 1.5 }, under), steady: judged(ratio(on.steady), { atLeast: false, threshold: 1.5 }, under), noLoss };
}

/** Each flow within ±10 % of its fair share and Jain's index ≥ 0.95, over flows that each served MIN_SAMPLES; `failed` must be 0 when `noneFailed`. */
export function fairTarget(served: readonly number[], jain: number, maxDeviation: number, o: { maxDeviation?: number; failed?: number } = {}): AdmissionTarget {
  if (served.length === 0 || served.some((n) => !(n >= MIN_SAMPLES))) return { met: null, why: `a flow served fewer than ${MIN_SAMPLES}`, value: NaN };
  const within = o.maxDeviation === undefined || maxDeviation <= o.maxDeviation;
  const none = o.failed === undefined || o.failed === 0;
  const j = judgeValue(jain, { atLeast: true, threshold: 0.95 });
  return { met: j.met === null ? null : j.met && within && none, value: jain };
}

/** Scale from zero: every cycle ran, none failed, each first answer within the replica's start time + 1 s. */
export function zeroTarget(z: ZeroResult, cycles: number): AdmissionTarget {
  if (!(cycles > 0) || z.cycles.length !== cycles) return { met: null, why: `${z.cycles.length} of ${cycles} cycles ran`, value: NaN };
  return { met: z.cycles.every((c) => c.failed === 0 && c.firstAnswerMs <= z.replicaStartMs + 1000), value: Math.max(...z.cycles.map((c) => c.firstAnswerMs)) };
}

/** Bounds: `asked` held and seen by the isolate, every one beyond the cap refused with JSON, every held one answered, the heap under 128 MB. */
export function boundsTarget(b: BoundsResult, asked: number): AdmissionTarget {
  if (!(asked > 0) || b.held !== asked || !(b.overCap.sent > 0)) return { met: null, why: `held ${b.held} of ${asked}, ${b.overCap.sent} sent beyond the cap`, value: NaN };
  return { met: b.heldSeenByIsolate === asked && b.overCap.refusedJson === b.overCap.sent && b.released.ok === asked && b.released.failed === 0 && b.heapHeldMiB < 128, value: b.heapHeldMiB };
}
