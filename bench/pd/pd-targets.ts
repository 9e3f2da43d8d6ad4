/**
 * bench/pd/pd.ts's targets (issue 56), judged per seed on the unified and P/D arms of
 * one run: a P/D arm that split nothing measured no P/D and is not judged, nor is a
 * percentile over too few answers or a ratio against a reference under its floor.
 */
import { judgeSeeds, ratioOver, sampled, type SeedJudgement } from "../shared/judge.ts";

/** The P/D arms: vLLM's protocol ("pd") and SGLang's. */
export type PdArmName = "pd" | "pd-sglang";

/** One arm of one seed as the targets read it. */
export interface PdArm {
  arm: "unified" | PdArmName;
  seed: number;
  /** Requests answered whole, in the window. */
  ok: number;
  /** Requests whose prefill went to a prefill replica. */
  splits: number;
  ttftP50: number;
  /** Short prompts' TTFT p50, and how many short prompts were answered. */
  shortTtftP50: number;
  shortOk: number;
  tpotP99: number;
}

export interface PdTarget {
  name: string;
  judged: SeedJudgement;
}

/** The targets of P/D arm `pd` against the unified arm. */
export function pdTargets(arms: readonly PdArm[], pd: PdArmName = "pd"): PdTarget[] {
  const unified = arms.filter((a) => a.arm === "unified");
  const label = pd === "pd" ? "P/D" : "P/D (SGLang's protocol)";
  const each = (fn: (u: PdArm, p: PdArm) => number | null) =>
    unified.map((u) => {
      const p = arms.find((a) => a.arm === pd && a.seed === u.seed);
      return p && p.splits > 0 ? fn(u, p) : null;
    });
  const all = (a: PdArm, v: number) => sampled(v, a.ok);
  const short = (a: PdArm, v: number) => sampled(v, a.shortOk);
  const ratio = (n: number | null, d: number | null, floor: number) => (n === null || d === null ? null : ratioOver(n, d, floor));
  return [
    { name: `TPOT p99: unified / ${label} ≥ 1.5 (decoding not stalled by long prefills)`, judged: judgeSeeds(each((u, p) => ratio(all(u, u.tpotP99), all(p, p.tpotP99), 0.5)), { atLeast: true, threshold: 1.5 }) },
    { name: `TTFT p50: ${label} / unified ≤ 1.2`, judged: judgeSeeds(each((u, p) => ratio(all(p, p.ttftP50), all(u, u.ttftP50), 1)), { atLeast: false, threshold: 1.2 }) },
    { name: `short prompts' TTFT p50: ${label} / unified ≤ 1.05 (not split: no second hop)`, judged: judgeSeeds(each((u, p) => ratio(short(p, p.shortTtftP50), short(u, u.shortTtftP50), 1)), { atLeast: false, threshold: 1.05 }) },
  ];
}
