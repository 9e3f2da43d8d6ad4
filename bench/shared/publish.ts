/**
 * Publishes full benchmark runs: copies bench/results/<name>.json (a full run:
 * never a --quick one, never one from a tree with uncommitted changes) into
 * bench/published/<name>/, where the README's figures (bench/shared/readme-figures.ts)
 * and the charts (bench/shared/chart.ts) are drawn from. Commit what it adds.
 *
 *   npx tsx bench/shared/publish.ts seed state-cost …   [--replace] [--from DIR]
 *     --replace: drop the scenario's older runs first
 *     --from DIR: take DIR/<name>.json instead of bench/results/<name>.json (a run made in another checkout)
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { publishedFileName } from "./published.ts";
import { PUBLISHED_DIR, RESULTS_DIR, type RunMeta } from "./result-file.ts";

const { values, positionals } = parseArgs({ allowPositionals: true, options: { replace: { type: "boolean", default: false }, from: { type: "string" } } });
if (positionals.length === 0) {
  console.error("usage: npx tsx bench/shared/publish.ts NAME… [--replace] [--from DIR]");
  process.exit(2);
}
let failed = false;
for (const name of positionals) {
  const from = join(values.from ? resolve(values.from) : RESULTS_DIR, `${name}.json`);
  if (!existsSync(from)) {
    console.error(`${name}: no full run (${from}); run the bench without --quick first`);
    failed = true;
    continue;
  }
  const meta = (JSON.parse(readFileSync(from, "utf8")) as { meta?: RunMeta }).meta;
  const why = !meta ? "it has no meta (an old result file)" : meta.quick ? "it is a --quick run" : meta.dirty ? `the tree at ${meta.commit} had uncommitted changes` : undefined;
  if (why || !meta) {
    console.error(`${name}: not published: ${why}`);
    failed = true;
    continue;
  }
  const folder = join(PUBLISHED_DIR, name);
  if (values.replace) rmSync(folder, { recursive: true, force: true });
  mkdirSync(folder, { recursive: true });
  const to = join(folder, publishedFileName(meta));
  copyFileSync(from, to);
  console.log(`${name}: published ${to.slice(PUBLISHED_DIR.length + 1)} (${meta.date}, ${meta.commit}, load ${meta.loadavgAtStart.join(" ")})`);
}
process.exit(failed ? 1 : 0);
