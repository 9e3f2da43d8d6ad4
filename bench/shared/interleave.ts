/**
 * One bench run on several commits, interleaved (A, B, A, B, …), so that a change is
 * measured against its base in the same sitting and the machine's drift falls on both:
 * the A/B trials in bench/README.md.
 *
 *   npx tsx bench/shared/interleave.ts --refs 503fd9d,f64cf4c [--rounds 2] -- bench/state-cost/state-cost.ts --kinds plain
 *
 * Each ref gets a git worktree in a temporary folder, sharing this checkout's
 * node_modules; the bench runs there, `--out` pointed at
 * bench/results/interleave/<ref>-<round>.json, its output kept beside it as .log.
 * The worktrees are removed at the end. Prints which files each run wrote.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";

const root = resolve(import.meta.dirname, "../..");
const dash = process.argv.indexOf("--");
if (dash < 0 || dash === process.argv.length - 1) throw new Error("usage: bench/shared/interleave.ts --refs A,B [--rounds N] -- <bench script> [args…]");
const { values } = parseArgs({ args: process.argv.slice(2, dash), options: { refs: { type: "string" }, rounds: { type: "string", default: "2" } } });
const refs = (values.refs ?? "").split(",").map((r) => r.trim()).filter(Boolean);
if (refs.length < 2) throw new Error("--refs needs at least two commits");
const rounds = Math.max(1, Number(values.rounds) || 1);
const [script, ...args] = process.argv.slice(dash + 1);

/** The script in one ref's tree: benches before the folders per scenario (issue 53) were bench/<name>.ts, found by their name there. */
function scriptIn(dir: string): string {
  if (existsSync(join(dir, script!))) return script!;
  const flat = join("bench", basename(script!));
  if (existsSync(join(dir, flat))) return flat;
  throw new Error(`${script} is in neither ${dir} nor, as ${flat}, its flat bench/`);
}

const out = join(root, "bench/results/interleave");
mkdirSync(out, { recursive: true });
const work = mkdtempSync(join(tmpdir(), "switchyard-interleave-"));
const trees = refs.map((ref) => {
  const commit = execFileSync("git", ["rev-parse", "--short", ref], { cwd: root, encoding: "utf8" }).trim();
  const dir = join(work, commit);
  execFileSync("git", ["worktree", "add", "--detach", "--quiet", dir, commit], { cwd: root });
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
  return { ref, commit, dir };
});
try {
  for (let round = 1; round <= rounds; round++) {
    for (const t of trees) {
      const file = join(out, `${t.commit}-${round}.json`);
      console.log(`round ${round}: ${t.ref} (${t.commit}): npx tsx ${script} ${args.join(" ")}`);
      const r = spawnSync(process.execPath, ["--import", "tsx", scriptIn(t.dir), ...args, "--out", file], { cwd: t.dir, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
      writeFileSync(file.replace(/\.json$/, ".log"), `${r.stdout}\n${r.stderr}`);
      console.log(`  exit ${r.status ?? r.signal}; ${file.replace(`${root}/`, "")}`);
    }
  }
} finally {
  for (const t of trees) spawnSync("git", ["worktree", "remove", "--force", t.dir], { cwd: root });
  rmSync(work, { recursive: true, force: true });
}
