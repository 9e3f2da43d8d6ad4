/**
 * Where a benchmark's results go, and what every result file says about its run:
 * the date, the commit (and whether the tree had changes), the machine, its load
 * average when the run started, and the command. One writer for every bench.
 *
 * Full runs write bench/results/<name>.json; quick runs (--quick, `npm run bench`)
 * write bench/results/quick/<name>.json, so a quick run never stands in for a full
 * one. Both folders are working output (ignored by git). The figures the README and
 * docs/ state, and the charts in docs/, come from bench/published/ (committed):
 * `npx tsx bench/shared/publish.ts NAME…` copies a full run's file there.
 */
import { execSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { servedShortfall, type ArmCount as JudgedArm } from "./judge.ts";

/** bench/ (this file is in bench/shared/). */
export const BENCH_DIR = resolve(import.meta.dirname, "..");
export const RESULTS_DIR = join(BENCH_DIR, "results");
export const QUICK_RESULTS_DIR = join(RESULTS_DIR, "quick");
export const PUBLISHED_DIR = join(BENCH_DIR, "published");

export interface RunMeta {
  /** When the run started (ISO). */
  date: string;
  commit: string;
  /** The tree had uncommitted changes to tracked files. */
  dirty: boolean;
  machine: { cpus: number; cpuModel: string; memGiB: number; node: string };
  /** 1, 5 and 15 minute load averages when the run started. */
  loadavgAtStart: number[];
  /** How it was run: the script and its arguments. */
  command: string;
  quick: boolean;
}

const startedAt = new Date().toISOString();
const loadAtStart = loadavg().map((x) => Math.round(x * 100) / 100);

function git(args: string): string {
  try {
    return execSync(`git ${args}`, { cwd: BENCH_DIR, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return "";
  }
}

/** What this run is: taken when the bench started (this module's load), with the commit read now. */
export function runMeta(quick: boolean): RunMeta {
  const script = process.argv[1] ? process.argv[1].replace(`${resolve(BENCH_DIR, "..")}/`, "") : "?";
  return {
    date: startedAt,
    commit: git("rev-parse --short HEAD") || "unknown",
    dirty: git("status --porcelain --untracked-files=no") !== "",
    machine: { cpus: cpus().length, cpuModel: cpus()[0]?.model ?? "?", memGiB: Math.round(totalmem() / 2 ** 30), node: process.version },
    loadavgAtStart: loadAtStart,
    command: ["npx tsx", script, ...process.argv.slice(2)].join(" "),
    quick,
  };
}

/** The file a bench's results go to: `out` when given, else by name in the full or the quick folder. */
export function resultPath(name: string, quick: boolean, out?: string): string {
  return out ? resolve(out) : join(quick ? QUICK_RESULTS_DIR : RESULTS_DIR, `${name}.json`);
}

/**
 * How much of what an arm was sent may go unanswered before the run is no result: 1 %.
 * An arm whose failures are part of what it measures (a third-party server under the
 * seed's load, a model-blind arm sent to replicas without the model) states its own
 * `tolerance` in its ArmCount, and the bench prints its failures beside its figures.
 */
export const SERVED_TOLERANCE = 0.01;

/** One arm's count, with the share of it that may go unanswered (SERVED_TOLERANCE unless stated). */
export interface ArmCount extends JudgedArm {
  tolerance?: number;
}

/**
 * Refuses a run with an arm that did not serve what it was sent: no requests at all (its
 * load tool missing or broken), none answered as expected, or more unanswered than its
 * tolerance. Such a run once printed a full table of zeros and a verdict (state-cost on
 * a machine without wrk: "4000.00 calls per 1,000 (MISS)", exit 0), and an arm with one
 * 2xx answer in 280 passed; it is an error, never a result.
 */
export function requireServed(arms: readonly ArmCount[]): void {
  const short = arms.flatMap((a) => servedShortfall([a], a.tolerance ?? SERVED_TOLERANCE));
  if (short.length === 0) return;
  throw new Error(`no result: an arm did not serve what it was sent (${short.join("; ")})`);
}

/** Writes `data` with this run's `meta` first; returns the path. `arms` are checked first (requireServed, each within its tolerance). */
export function writeResult(name: string, data: object, o: { quick?: boolean; out?: string; arms?: readonly ArmCount[] } = {}): string {
  if (o.arms) requireServed(o.arms);
  const quick = o.quick ?? false;
  const path = resultPath(name, quick, o.out);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${JSON.stringify({ meta: runMeta(quick), ...data }, null, 2)}\n`);
  return path;
}
