/**
 * The committed benchmark runs the README's figures and the charts in docs/ come
 * from: bench/published/<name>/<date>.json, each a full run's result file as its
 * bench wrote it (bench/shared/result-file.ts: meta with date, commit, machine, load
 * average). `npx tsx bench/shared/publish.ts NAME…` adds the latest full runs. Figures
 * state the range over a scenario's published runs; charts draw the newest.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { PUBLISHED_DIR, type RunMeta } from "./result-file.ts";

/** A published result file: its run's meta, then the bench's own fields. */
export type PublishedRun<T = Record<string, unknown>> = T & { meta: RunMeta };

/** Every published run of a scenario, oldest first; none: an empty list. */
export function publishedRuns<T = Record<string, unknown>>(name: string, dir = PUBLISHED_DIR): PublishedRun<T>[] {
  const folder = join(dir, name);
  if (!existsSync(folder)) return [];
  return readdirSync(folder)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => JSON.parse(readFileSync(join(folder, f), "utf8")) as PublishedRun<T>);
}

/** The newest published run of a scenario, or undefined. */
export function latestRun<T = Record<string, unknown>>(name: string, dir = PUBLISHED_DIR): PublishedRun<T> | undefined {
  return publishedRuns<T>(name, dir).at(-1);
}

/** The file name a run is published under: its start time, sortable, without characters file systems dislike. */
export function publishedFileName(meta: RunMeta): string {
  return `${meta.date.replace(/[:.]/g, "-")}.json`;
}
