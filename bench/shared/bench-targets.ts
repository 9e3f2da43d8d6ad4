/**
 * The targets of the benches that have no targets module of their own (dispatch-quality,
 * proxy-agent, request-path, seed, state-cost, state-plane, streaming, tokenizer-engines,
 * tokenizers, view-refresh), each as a pure function over what the bench measured. Built on
 * judge.ts's rules: a target is judged only when what it names was measured (enough
 * answers, a reference that served, a count over enough requests to show a miss), so that
 * no bench prints MET over nothing. `test/unit/bench-judge.test.ts` feeds each its worst
 * input.
 */
import { judgeSeeds, judgeValue, ratioOver, sampled, MIN_SAMPLES, type Judgement, type Rule } from "./judge.ts";

/** A judgement with the value it judged (NaN when there was none), for the printed line. */
export interface Measured extends Judgement {
  value: number;
}

const notJudged = (why: string, value = NaN): Measured => ({ met: null, why, value });
const judged = (value: number, rule: Rule): Measured => ({ ...judgeValue(value, rule), value });

/**
 * Calls per 1,000 requests, at most `max` (Durable Object calls, relay calls). Judged only
 * over enough requests that the target could be missed by one call: at least 1,000 / max
 * of them (200 for "≤ 5 per 1,000"), and MIN_SAMPLES. Three requests and no call is not
 * "0 per 1,000".
 */
export function per1000Target(calls: number, requests: number, max: number): Measured {
  const floor = Math.max(MIN_SAMPLES, Math.ceil(1000 / max));
  if (!(requests >= floor)) return notJudged(`${Number.isFinite(requests) ? requests : 0} requests, fewer than ${floor}`);
  return judged((1000 * calls) / requests, { atLeast: false, threshold: max });
}

/** One arm's statistic and the answers it was taken over. */
export interface Sample {
  value: number;
  answers: number;
}

/**
 * What an arm adds over a reference (a latency percentile), at most `max`: judged only
 * when both answered MIN_SAMPLES requests. An arm that served nothing has no p50, and
 * "NaN − 30 ≤ 1" must not read as anything.
 */
export function addedTarget(arm: Sample, reference: Sample, max: number): Measured {
  const a = sampled(arm.value, arm.answers);
  const r = sampled(reference.value, reference.answers);
  if (a === null || r === null) return notJudged(`fewer than ${MIN_SAMPLES} answers (${arm.answers} against ${reference.answers})`);
  return judged(a - r, { atLeast: false, threshold: max });
}

/**
 * An arm's statistic over a reference's (a p99 over a p99, a rate over a rate) against a
 * rule: judged only when both answered MIN_SAMPLES requests and the reference's value is
 * at least `floor` and above 0.
 */
export function ratioTarget(arm: Sample, reference: Sample, rule: Rule, floor = 0): Measured {
  const a = sampled(arm.value, arm.answers);
  const r = sampled(reference.value, reference.answers);
  if (a === null || r === null) return notJudged(`fewer than ${MIN_SAMPLES} answers (${arm.answers} against ${reference.answers})`);
  const ratio = ratioOver(a, r, floor);
  if (ratio === null) return notJudged(`the reference measured ${r} (floor ${floor})`);
  return judged(ratio, rule);
}

/** What one arm sent and how many failed. */
export interface FailureCount {
  requests: number;
  failed: number;
}

/** "No failures": judged only when the arms sent requests (no arm ran: no result, not 0 failed). */
export function noFailuresTarget(arms: readonly FailureCount[]): Measured {
  const sent = arms.reduce((s, a) => s + (Number.isFinite(a.requests) ? a.requests : 0), 0);
  if (!(sent > 0)) return notJudged("no requests sent");
  const failed = arms.reduce((s, a) => s + a.failed, 0);
  return judged(failed, { atLeast: false, threshold: 0 });
}

/** A count at most `max` (the request path's files): a count of 0 means the count did not run. */
export function countTarget(count: number, max: number): Measured {
  if (!(count > 0)) return notJudged("nothing counted");
  return judged(count, { atLeast: false, threshold: max });
}

/**
 * A cost (CPU ms per 1,000 tokens, one per round or per size) at most `max` in every one,
 * and, where given, outputs identical to a reference's on every text compared: judged only
 * when there were rounds and texts.
 */
export function everyAtMost(values: readonly number[], max: number, identical?: { same: number; compared: number }): Measured {
  const every = judgeSeeds(values, { atLeast: false, threshold: max });
  const worst = every.max;
  if (identical !== undefined) {
    if (!(identical.compared > 0)) return notJudged("no texts compared", worst);
    if (identical.same < identical.compared) return { met: false, why: `${identical.compared - identical.same} of ${identical.compared} texts differ`, value: worst };
  }
  return { met: every.met, ...(every.why && { why: every.why }), value: worst };
}

/** A size at most `max` bytes (a bundle, a heap): a size of 0 was not measured. */
export function sizeTarget(bytes: number, max: number): Measured {
  if (!(bytes > 0)) return notJudged("no size measured");
  return judged(bytes, { atLeast: false, threshold: max });
}

/** A time at most `max` ms (a probe's wait): judged when it was measured. */
export function timeTarget(ms: number | null | undefined, max: number): Measured {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return notJudged("not measured");
  return judged(ms, { atLeast: false, threshold: max });
}

/** A cost over a reference cost (an attack's CPU per token over prose's): judged when the reference cost something. */
export function costRatioTarget(cost: number, reference: number, max: number): Measured {
  const ratio = ratioOver(cost, reference, Number.MIN_VALUE);
  if (ratio === null) return notJudged("no reference cost");
  return judged(ratio, { atLeast: false, threshold: max });
}

/** An arm's statistic (a drift, a percentile) against a rule, judged when the arm answered MIN_SAMPLES requests. */
export function sampledTarget(arm: Sample, rule: Rule): Measured {
  const a = sampled(arm.value, arm.answers);
  if (a === null) return notJudged(`fewer than ${MIN_SAMPLES} answers (${arm.answers})`);
  return judged(a, rule);
}
