/**
 * How a bench judges a target, in one place so that no bench can print MET for
 * something that did not happen. Three rules, each a defect found in a published run:
 *
 *  - per seed: a target over several seeds is MET only when every seed meets it; the
 *    mean is printed beside it, never judged (a mean of 0.781 once hid a seed at 1.088);
 *  - floors: a ratio against a reference is judged only when the reference measured
 *    something (a reference router at 0 hits would make any arm "≥ 0.95× of it"), and a
 *    percentile only over enough answers;
 *  - causes: a fault arm is judged only when its fault happened and its effect was
 *    observed (a stream bench with no kill printed "0 failed: MET").
 *
 * Everything here is pure; `test/unit/bench-judge.test.ts` feeds each function (and each
 * bench's target function built on them) empty input and asserts that nothing is MET.
 */

/** A target's rule: the value must be at least (or at most) `threshold`. */
export interface Rule {
  atLeast: boolean;
  threshold: number;
}

/** A verdict: MET, MISS, or null (not judged), with the reason it was not judged. */
export interface Judgement {
  met: boolean | null;
  /** Why it was not judged (met null), for the printed line. */
  why?: string;
}

/** A percentile over fewer answers than this says nothing about a tail: not judged. */
export const MIN_SAMPLES = 20;

/** A value against a rule; a value that is missing or not finite is not judged. */
export function judgeValue(value: number | null | undefined, rule: Rule): Judgement {
  if (value === null || value === undefined || !Number.isFinite(value)) return { met: null, why: "no value" };
  return { met: rule.atLeast ? value >= rule.threshold : value <= rule.threshold };
}

/** What a per-seed target measured: each seed's value, their mean, min and max. */
export interface SeedJudgement extends Judgement {
  each: (number | null)[];
  mean: number;
  min: number;
  max: number;
  /** The seeds (by index) that missed. */
  missed: number[];
}

/**
 * A target over seeds: MISS when any seed misses, not judged when there are no seeds or
 * any seed could not be judged (its arm missing, its reference under the floor), MET
 * only when every seed meets it.
 */
export function judgeSeeds(each: readonly (number | null | undefined)[], rule: Rule): SeedJudgement {
  const values = each.map((v) => (v === undefined || v === null || !Number.isFinite(v) ? null : v));
  const finite = values.filter((v): v is number => v !== null);
  const mean = finite.length ? finite.reduce((a, b) => a + b, 0) / finite.length : NaN;
  const base = { each: values, mean, min: finite.length ? Math.min(...finite) : NaN, max: finite.length ? Math.max(...finite) : NaN };
  const missed = values.flatMap((v, i) => (v !== null && !judgeValue(v, rule).met ? [i] : []));
  if (values.length === 0) return { ...base, missed, met: null, why: "no seeds" };
  // A seed that missed is a miss even when another could not be judged.
  if (missed.length) return { ...base, missed, met: false };
  if (finite.length < values.length) return { ...base, missed, met: null, why: `${values.length - finite.length} of ${values.length} seeds not judged` };
  return { ...base, missed, met: true };
}

/**
 * `numerator / reference`, or null when the reference is under `floor` (or either is not
 * finite): a ratio against a reference that measured (next to) nothing is no result.
 */
export function ratioOver(numerator: number, reference: number, floor: number): number | null {
  if (!Number.isFinite(numerator) || !Number.isFinite(reference) || reference < floor || reference <= 0) return null;
  return numerator / reference;
}

/** A percentile of an arm, or null when the arm answered fewer than MIN_SAMPLES requests. */
export function sampled(value: number, answers: number, min = MIN_SAMPLES): number | null {
  return answers >= min && Number.isFinite(value) ? value : null;
}

/** What a fault arm caused and saw. */
export interface FaultCount {
  /** Faults the bench caused (processes killed). */
  faults: number;
  /** Effects of the fault observed where they happen (migrations in the edge's log). */
  observed: number;
  /** Requests that the fault touched (streams on the victim). */
  touched: number;
  /** Requests that failed. */
  failed: number;
}

/** "0 failed under the fault": judged only when the fault happened, touched requests, and its effect was seen. */
export function judgeFault(c: FaultCount): Judgement {
  if (!(c.faults > 0)) return { met: null, why: "no fault happened" };
  if (!(c.touched > 0)) return { met: null, why: "the fault touched no request" };
  if (!(c.observed > 0)) return { met: null, why: "no effect of the fault observed" };
  return { met: c.failed === 0 };
}

/**
 * "None served after X": judged only when requests were sent in the window where the
 * thing could have served them (after X, while it still ran).
 */
export function judgeNoneServed(served: number, sentInWindow: number): Judgement {
  if (!(sentInWindow > 0)) return { met: null, why: "nothing sent in the window" };
  return { met: served === 0 };
}

/** What one arm of a run served: every request it sent, and those answered as the arm expects (2xx). */
export interface ArmCount {
  arm: string;
  requests: number;
  ok: number;
}

/**
 * The arms that served less than they were sent, beyond `tolerance` (a fraction: 0.01
 * lets 1 % go unanswered), or nothing at all; each as a line saying why.
 */
export function servedShortfall(arms: readonly ArmCount[], tolerance: number): string[] {
  return arms.flatMap((a) => {
    if (!(a.requests > 0)) return [`${a.arm}: no requests`];
    if (!(a.ok > 0)) return [`${a.arm}: none of ${a.requests} requests answered 2xx`];
    if (a.ok < (1 - tolerance) * a.requests) return [`${a.arm}: ${a.ok} of ${a.requests} answered 2xx (${((100 * (a.requests - a.ok)) / a.requests).toFixed(1)} % unanswered, tolerance ${(100 * tolerance).toFixed(1)} %)`];
    return [];
  });
}
