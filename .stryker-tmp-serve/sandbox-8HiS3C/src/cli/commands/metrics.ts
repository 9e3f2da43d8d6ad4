/**
 * `switchyard metrics [--grep RE] [--follow [--interval S]] [--json]`:
 * GET /-/metrics (admin, Prometheus text format).
 */
// @ts-nocheck

import type { Context } from "../context.ts";
import { EdgeHttpError } from "../edge.ts";
import { CliError } from "../errors.ts";
import { SystemPath } from "../../protocol/paths.ts";
import { formatSample, parsePrometheusText, PrometheusParseError, SampleDiff, sampleJson, type Sample } from "../prometheus.ts";

export interface MetricsOptions {
  follow: boolean;
  intervalS: number;
  grep?: RegExp;
}

const METRICS_PATH = SystemPath.metrics;

/** Lines of the exposition that match (all of them without a pattern); no trailing newline handling surprises. */
export function filterLines(text: string, grep: RegExp | undefined): string {
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  const kept = grep ? lines.filter((l) => grep.test(l)) : lines;
  return kept.length ? `${kept.join("\n")}\n` : "";
}

function parse(text: string): Sample[] {
  try {
    return parsePrometheusText(text).samples;
  } catch (err) {
    if (err instanceof PrometheusParseError) throw new CliError(`the edge's metrics are not valid Prometheus text: ${err.message}`, 1);
    throw err;
  }
}

const matches = (grep: RegExp | undefined) => (s: Sample) => !grep || grep.test(formatSample(s));

/** `2024-05-01T12:00:00Z`: the time stamp of a --follow line. */
export const stamp = (d: Date) => `${d.toISOString().slice(0, 19)}Z`;

/** One --follow round: the samples that match and are new or changed since the last round. */
export function followRound(diff: SampleDiff, samples: readonly Sample[], grep: RegExp | undefined): Sample[] {
  return diff.changed(samples).filter(matches(grep));
}

/** What --follow prints for one round: stamped exposition lines, or one JSON line {time, samples}. */
export function renderFollow(changed: readonly Sample[], at: Date, json: boolean): string {
  if (json) return `${JSON.stringify({ time: at.toISOString(), samples: changed.map(sampleJson) })}\n`;
  const t = stamp(at);
  return changed.map((s) => `${t} ${formatSample(s)}\n`).join("");
}

export async function metricsCommand(ctx: Context, o: MetricsOptions): Promise<number> {
  const text = await ctx.edge.getText(METRICS_PATH, { admin: true });
  if (!o.follow) {
    if (ctx.json) ctx.outJson(parse(text).filter(matches(o.grep)).map(sampleJson));
    else ctx.out(filterLines(text, o.grep));
    return 0;
  }
  const diff = new SampleDiff();
  // The first round prints every (matching) sample.
  ctx.out(renderFollow(followRound(diff, parse(text), o.grep), ctx.now(), ctx.json));
  let failing = false;
  while (await ctx.sleep(o.intervalS * 1000)) {
    let next: string;
    try {
      next = await ctx.edge.getText(METRICS_PATH, { admin: true });
    } catch (err) {
      if (ctx.io.signal?.aborted) break;
      // A refused secret or a missing endpoint will not heal; an edge restarting will.
      if (err instanceof EdgeHttpError && err.status >= 400 && err.status < 500) throw err;
      if (!failing) ctx.io.stderr.write(`switchyard: ${(err as Error).message}; retrying every ${o.intervalS} s\n`);
      failing = true;
      continue;
    }
    if (failing) ctx.io.stderr.write("switchyard: the edge answers again\n");
    failing = false;
    const changed = followRound(diff, parse(next), o.grep);
    if (changed.length > 0) ctx.out(renderFollow(changed, ctx.now(), ctx.json));
  }
  return 0;
}
