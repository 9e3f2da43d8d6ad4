/**
 * bench/regions/regions.ts's targets (issue 57, "Prove it"), judged per seed on the arms
 * of one run, apart from the bench so that they can be judged on any input. Each is
 * judged only over what it names (judge.ts): a percentile over MIN_SAMPLES answers, a
 * ratio against a reference that answered as many, a failover only where replicas were
 * killed and requests were sent after the kill, a return only where they were restarted.
 */
import { judgeSeeds, MIN_SAMPLES, ratioOver, sampled, type SeedJudgement } from "../shared/judge.ts";

/** The arms, in one run: the latency term, nearest-only (the trip alone), load-only, and today's prefix profile. */
export const REGION_ARMS = ["latency", "nearest_only", "load_aware", "prefix_cache"] as const;
export type RegionArmName = (typeof REGION_ARMS)[number];

/** One phase of one arm: client-side TTFT over the requests sent in its window. */
export interface PhaseFigures {
  sent: number;
  /** Answered whole (200, every token). */
  ok: number;
  failed: number;
  p50: number;
  p90: number;
  p99: number;
  /** Answered requests per region of the replica that served them. */
  byRegion: Record<string, number>;
}

/** The near region killed (SIGKILL) and restarted, at the unsaturated rate. */
export interface KillFigures {
  /** Replicas killed; 0: the kill did not happen. */
  killed: number;
  /** Requests sent after the kill, before the restart, and how many of them failed. */
  sentAfterKill: number;
  failedAfterKill: number;
  /**
   * From the kill to the first token of the first request, sent after it, that the next
   * region served at its first attempt (the edge chose the next region, not fell back to
   * it after a dead replica); null when none did.
   */
  failoverMs: number | null;
  /** The same for any request served in the next region (a retry after a dead replica included). */
  firstNextMs: number | null;
  /** Requests sent after the kill whose edge log says more than one attempt (a dead replica tried first). */
  retriedAfterKill: number;
  /** When the last request that tried a dead replica (retried or failed) was sent, ms after the kill; null: none. */
  lastTouchedDeadMs: number | null;
  /** Replicas restarted; 0: no restart. */
  restarted: number;
  /** From the restart's start to the replicas' registration, ms. */
  registeredMs: number;
  /** From the registration to the first token of the first request, sent after it, served in the near region; null: none. */
  backMs: number | null;
  /** Requests sent in the phase's last seconds, and the share of them served in the near region. */
  endSent: number;
  endNearShare: number;
}

/** One length of the prefix held far away: one request per group through the edge. */
export interface PrefixCase {
  /** The prefill its cached prefix saves on the holder (its tokens at the replicas' prefill rate), ms. */
  savedMs: number;
  sent: number;
  ok: number;
  /** Answered by the replica holding the prefix. */
  toHolder: number;
  p50: number;
}

/** A prefix held by a far replica, at two lengths, against the extra round trip to it. */
export interface PrefixFigures {
  /** The holder's round trip less the near region's, ms (the relays' delays). */
  extraTripMs: number;
  short: PrefixCase;
  long: PrefixCase;
}

/** One arm of one seed as the targets read it. */
export interface RegionArm {
  arm: RegionArmName;
  seed: number;
  /** The latency arm's: a near replica's TTFT served directly, one request at a time (no queue, no edge hop). */
  directNear?: { n: number; p50: number };
  unsat?: PhaseFigures;
  overload?: PhaseFigures;
  kill?: KillFigures;
  prefix?: PrefixFigures;
}

/** Requests of a prefix case below which its share says nothing. */
export const MIN_PREFIX_REQUESTS = 3;

export interface RegionTarget {
  name: string;
  judged: SeedJudgement;
}

/** A phase's percentile, or null when it answered fewer than MIN_SAMPLES. */
const p = (f: PhaseFigures | undefined, which: "p50" | "p99"): number | null => (f === undefined ? null : sampled(f[which], f.ok));

/**
 * The scenarios' targets (unsaturated, near region at 2× its capacity, near region
 * killed), per seed of the latency arm; a seed whose reference arm is missing is not judged.
 */
export function regionTargets(arms: readonly RegionArm[]): RegionTarget[] {
  const seeds = [...new Set(arms.filter((a) => a.arm === "latency").map((a) => a.seed))].sort((x, y) => x - y);
  const of = (arm: RegionArmName, seed: number) => arms.find((a) => a.arm === arm && a.seed === seed);
  const each = (fn: (seed: number) => number | null) => seeds.map(fn);
  const ratio = (n: number | null, d: number | null) => (n === null || d === null ? null : ratioOver(n, d, 1));
  return [
    {
      name: "unsaturated (30 % of the near region): latency TTFT p50 within 10 % of the nearest region's ideal (the lower of nearest-only's p50 and a near replica's served directly)",
      judged: judgeSeeds(
        each((s) => {
          const near = p(of("nearest_only", s)?.unsat, "p50");
          const d = of("latency", s)?.directNear;
          const direct = d === undefined ? null : sampled(d.p50, d.n);
          // Both references, else not judged: either alone may be the easier one.
          if (near === null || direct === null) return null;
          return ratio(p(of("latency", s)?.unsat, "p50"), Math.min(near, direct));
        }),
        { atLeast: false, threshold: 1.1 },
      ),
    },
    {
      name: "near region at 2× its capacity: nearest-only TTFT p99 / latency p99 ≥ 2",
      judged: judgeSeeds(each((s) => ratio(p(of("nearest_only", s)?.overload, "p99"), p(of("latency", s)?.overload, "p99"))), { atLeast: true, threshold: 2 }),
    },
    {
      name: "near region at 2× its capacity: load-only TTFT p50 / latency p50 ≥ 2",
      judged: judgeSeeds(each((s) => ratio(p(of("load_aware", s)?.overload, "p50"), p(of("latency", s)?.overload, "p50"))), { atLeast: true, threshold: 2 }),
    },
    {
      name: "near region at 2× its capacity: latency arm's failed requests = 0",
      judged: judgeSeeds(
        each((s) => {
          const o = of("latency", s)?.overload;
          return o === undefined || !(o.sent >= MIN_SAMPLES) ? null : o.failed;
        }),
        { atLeast: false, threshold: 0 },
      ),
    },
    {
      name: "near region killed: latency arm's traffic chosen in the next region within 3 s (ms from the kill to the first token of its first request sent there at the first attempt)",
      judged: judgeSeeds(
        each((s) => {
          const k = of("latency", s)?.kill;
          // No kill, or nothing sent after it: nothing to judge. Sent but never in the next region: a miss (Infinity).
          if (k === undefined || !(k.killed > 0) || !(k.sentAfterKill > 0)) return null;
          return k.failoverMs ?? Number.MAX_VALUE;
        }),
        { atLeast: false, threshold: 3000 },
      ),
    },
    {
      name: "near region restarted: latency arm's traffic back in the near region (share of the phase's last requests served there ≥ 0.5)",
      judged: judgeSeeds(
        each((s) => {
          const k = of("latency", s)?.kill;
          if (k === undefined || !(k.restarted > 0) || !(k.endSent >= 5)) return null;
          return k.endNearShare;
        }),
        { atLeast: true, threshold: 0.5 },
      ),
    },
    ...(["short", "long"] as const).map((which): RegionTarget => {
      // The rule follows the case: sent to the far holder where its prefix saves more prefill than the extra trip costs, else not.
      const sample = arms.find((a) => a.arm === "latency" && a.prefix)?.prefix;
      const saves = sample ? sample[which].savedMs > sample.extraTripMs : which === "long";
      return {
        name: `prefix held in the far region, ${which} prompt (saves ${sample ? Math.round(sample[which].savedMs) : "?"} ms of prefill, the extra trip ${sample ? Math.round(sample.extraTripMs) : "?"} ms): latency arm's share sent to the holder ${saves ? "≥ 0.8" : "≤ 0.2"}`,
        judged: judgeSeeds(
          each((s) => {
            const c = of("latency", s)?.prefix?.[which];
            return c === undefined || !(c.ok >= MIN_PREFIX_REQUESTS) ? null : c.toHolder / c.ok;
          }),
          saves ? { atLeast: true, threshold: 0.8 } : { atLeast: false, threshold: 0.2 },
        ),
      };
    }),
  ];
}

/** SLO attainment on mixed replicas: requests of two TTFT objectives (x-slo-ttft-ms). */
export interface SloFigures {
  sent: number;
  ok: number;
  /** Answered with the first token within the request's objective. */
  met: number;
  /** Answers that ended within the window, per second. */
  throughputRps: number;
  classes: { name: string; ttftMs: number; sent: number; met: number; toFast: number; p50: number }[];
}

/** One SLO arm of one seed. */
export interface SloArm {
  arm: RegionArmName;
  seed: number;
  slo: SloFigures;
}

/** The latency arm's SLO attainment against today's prefix profile's, ≥ 1.3×, with throughput within 5 %; per seed. */
export function sloTargets(arms: readonly SloArm[]): RegionTarget[] {
  const seeds = [...new Set(arms.filter((a) => a.arm === "latency").map((a) => a.seed))].sort((x, y) => x - y);
  const of = (arm: RegionArmName, seed: number) => arms.find((a) => a.arm === arm && a.seed === seed)?.slo;
  const attainment = (f: SloFigures | undefined) => (f === undefined || !(f.sent >= MIN_SAMPLES) ? null : f.met / f.sent);
  return [
    {
      name: "SLO attainment at 90 % load (two classes, replicas of two prefill rates): latency / prefix_cache ≥ 1.3",
      judged: judgeSeeds(
        seeds.map((s) => {
          const l = attainment(of("latency", s));
          const p = attainment(of("prefix_cache", s));
          // A reference that met (next to) nothing: no ratio (judge.ts); 1 % of its requests is the floor.
          return l === null || p === null ? null : ratioOver(l, p, 0.01);
        }),
        { atLeast: true, threshold: 1.3 },
      ),
    },
    {
      name: "SLO scenario throughput: latency / prefix_cache ≥ 0.95 (within 5 %)",
      judged: judgeSeeds(
        seeds.map((s) => {
          const l = of("latency", s);
          const p = of("prefix_cache", s);
          return l === undefined || p === undefined || !(l.sent >= MIN_SAMPLES) ? null : ratioOver(l.throughputRps, p.throughputRps, Number.MIN_VALUE);
        }),
        { atLeast: true, threshold: 0.95 },
      ),
    },
  ];
}
