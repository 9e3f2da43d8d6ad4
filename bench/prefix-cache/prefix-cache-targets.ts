/**
 * bench/prefix-cache/prefix-cache.ts's targets, apart from the bench so that they can be judged on
 * any input (test/unit/bench-judge.test.ts feeds them empty and degenerate runs).
 *
 * Each target is a ratio between arms of one seed, judged in every seed (judge.ts): a miss
 * in any seed is a MISS. A ratio against a reference arm (the oracle, one isolate) needs
 * that reference to have hit something, and a TTFT percentile needs MIN_SAMPLES answers.
 *
 * Gone: "throughput ≥ load_aware's within 1 %". The arms share one open-loop arrival
 * sequence, so that ratio was 1.000 in every run and could fail only through drops, which
 * requireServed already refuses; queueing shows in the TTFT targets.
 */
import { judgeSeeds, MIN_SAMPLES, ratioOver, sampled, type Rule, type SeedJudgement } from "../shared/judge.ts";

/** What a target reads of one arm of one seed (a subset of the bench's PhaseResult). */
export interface TargetArm {
  arm: string;
  isolates: number;
  ok: number;
  requests: number;
  ttft: { p50: number; p90: number; p99: number };
  hitRatio: number;
  doCalls: { per1000: number; routing: number; telemetryEstimated: number; total: number; perIsolatePerS: number };
}

/** A hit ratio under this (as the reference of a ratio) is no reference: not judged. */
export const HIT_RATIO_FLOOR = 0.05;

/** One target of one seed: its ratio (null: not judged) and how it was measured. */
export interface SeedTarget extends Rule {
  target: string;
  value: number | null;
  measured: string;
}

const f = (x: number, d = 0) => (Number.isFinite(x) ? x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }) : "–");

/** Offered load from which a run is past saturation (issue 54's targets; the runs use 1.5). */
export const PAST_SATURATION = 1.2;

/**
 * The targets of one seed's arms. `isolates`: the many-isolate round; `seconds`: the measured
 * window; `utilization`: the offered load as a share of load_aware's saturation throughput
 * (undefined: a fixed --rate, judged as below saturation).
 */
export function seedTargets(rs: readonly TargetArm[], o: { isolates: number; seconds: number; utilization?: number }): SeedTarget[] {
  const find = (arm: string, isolates: number) => rs.find((r) => r.arm === arm && (arm === "oracle" || r.isolates === isolates));
  const oracleFor = (isolates: number) => rs.filter((r) => r.arm === "oracle").at(isolates === 1 ? 0 : -1);
  const N = o.isolates;
  const pcN = find("prefix_cache", N);
  const pc1 = find("prefix_cache", 1);
  const laN = find("load_aware", N);
  const la1 = find("load_aware", 1);
  const apN = find("approximate", N);
  const aloneN = find("alone", N);
  const oracleN = oracleFor(N);
  const out: SeedTarget[] = [];
  const t = (target: string, value: number | null, atLeast: boolean, threshold: number, measured: string) => out.push({ target, value, atLeast, threshold, measured });
  // A TTFT percentile over enough answers; the reference's (the denominator) must be above 0.
  const ttft = (r: TargetArm, p: "p50" | "p90" | "p99") => sampled(r.ttft[p], r.ok) ?? NaN;
  const ttftRatio = (num: TargetArm, den: TargetArm, p: "p50" | "p90" | "p99") => ratioOver(ttft(num, p), ttft(den, p), Number.MIN_VALUE);
  if (pcN && apN) t(`precise TTFT p90 ≥ 3× better than approximate's (${N} isolates)`, ttftRatio(apN, pcN, "p90"), true, 3, `${f(apN.ttft.p90)} / ${f(pcN.ttft.p90)} ms`);
  // The same target against llm-d's kind of approximate tier: each router's memory of its own dispatches.
  if (pcN && aloneN) t(`precise TTFT p90 ≥ 3× better than approximate's with each isolate alone (${N} isolates)`, ttftRatio(aloneN, pcN, "p90"), true, 3, `${f(aloneN.ttft.p90)} / ${f(pcN.ttft.p90)} ms`);
  // A hit ratio over fewer than MIN_SAMPLES answers is noise; the reference's must be above the floor.
  const hits = (r: TargetArm) => sampled(r.hitRatio, r.ok) ?? NaN;
  // Issue 54: as well as a router that sees every request, below saturation and past it.
  const past = o.utilization !== undefined && o.utilization >= PAST_SATURATION;
  if (pcN && oracleN) {
    const atLoad = past ? "past saturation" : "below saturation";
    t(`prefix_cache hit ratio at ${N} isolates ≥ ${past ? "0.85" : "0.95"} × the oracle's (${atLoad})`, ratioOver(hits(pcN), hits(oracleN), HIT_RATIO_FLOOR), true, past ? 0.85 : 0.95, `${f(pcN.hitRatio, 3)} / ${f(oracleN.hitRatio, 3)}`);
    if (past) t(`prefix_cache TTFT p50 ≤ 2× the oracle's (${N} isolates, past saturation)`, ttftRatio(pcN, oracleN, "p50"), false, 2, `${f(pcN.ttft.p50)} vs ${f(oracleN.ttft.p50)} ms`);
    t(`prefix_cache TTFT p90 ≤ ${past ? "1.3" : "1.1"}× the oracle's (${N} isolates, ${atLoad})`, ttftRatio(pcN, oracleN, "p90"), false, past ? 1.3 : 1.1, `${f(pcN.ttft.p90)} vs ${f(oracleN.ttft.p90)} ms`);
  }
  if (pcN && pc1) t(`prefix_cache hit ratio at ${N} isolates ≥ 0.9 × at 1 isolate`, ratioOver(hits(pcN), hits(pc1), HIT_RATIO_FLOOR), true, 0.9, `${f(pcN.hitRatio, 3)} / ${f(pc1.hitRatio, 3)}`);
  for (const [pc, la, n] of [
    [pc1, la1, 1],
    [pcN, laN, N],
  ] as const) {
    if (!pc || !la) continue;
    const s = n > 1 ? "s" : "";
    t(`prefix_cache TTFT p50 ≤ 1/3 of load_aware's (${n} isolate${s})`, ttftRatio(la, pc, "p50"), true, 3, `${f(la.ttft.p50)} / ${f(pc.ttft.p50)} ms (× lower)`);
    t(`prefix_cache TTFT p99 ≤ load_aware's (${n} isolate${s})`, ttftRatio(pc, la, "p99"), false, 1, `${f(pc.ttft.p99)} vs ${f(la.ttft.p99)} ms`);
  }
  for (const r of rs.filter((x) => x.arm === "prefix_cache")) {
    // Calls per 1,000 requests over fewer than MIN_SAMPLES requests is no rate.
    t(
      `prefix_cache ≤ 5 Durable Object calls per 1,000 requests (${r.isolates} isolate${r.isolates > 1 ? "s" : ""})`,
      r.requests >= MIN_SAMPLES ? r.doCalls.per1000 : null,
      false,
      5,
      `${f(r.doCalls.per1000, 1)} per 1,000 (${r.doCalls.routing} routing calls + ~${r.doCalls.telemetryEstimated} telemetry flushes over ${r.requests} requests; ${f(r.doCalls.perIsolatePerS, 2)} routing calls/s per isolate: ≤ 5 per 1,000 from ~${f((1000 * (r.doCalls.total / o.seconds / r.isolates)) / 5)} req/s per isolate)`,
    );
  }
  return out;
}

/** A target over all seeds: every seed's ratio, judged per seed. */
export interface Target extends SeedJudgement, Rule {
  target: string;
  /** Each seed's measured text, in seed order. */
  measuredBySeed: string[];
}

/**
 * Every target over the seeds (`bySeed[i]`: seed i's arms). A target that some seed could
 * not produce (its arm missing) counts as not judged in that seed.
 */
export function judgeTargets(bySeed: readonly (readonly TargetArm[])[], o: { isolates: number; seconds: number; utilization?: number }): Target[] {
  const perSeed = bySeed.map((rs) => seedTargets(rs, o));
  const names = [...new Set(perSeed.flat().map((t) => t.target))];
  return names.map((name) => {
    const each = perSeed.map((ts) => ts.find((t) => t.target === name));
    const rule = each.find((t) => t !== undefined)!;
    return { target: name, atLeast: rule.atLeast, threshold: rule.threshold, ...judgeSeeds(each.map((t) => t?.value ?? null), rule), measuredBySeed: each.map((t) => (t ? `${t.measured}${t.value === null ? " (not judged)" : ""}` : "not run")) };
  });
}
