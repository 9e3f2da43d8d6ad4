/**
 * Draws the benchmarks' result files as SVG charts for the docs: plain,
 * hand-written SVG (no library), one horizontal bar chart per result file.
 *
 *   npx tsx bench/shared/chart.ts [--from bench/published] [--into docs] [--only seed,dispatch]
 *
 * The charts in docs/ are drawn from the committed result files in
 * bench/published/ (the same files the README's figures are rendered from:
 * bench/shared/readme-figures.ts), so a chart and a figure cannot disagree. `npm run
 * bench` draws its quick runs' charts with --from bench/results/quick --into
 * bench/results/charts, never into docs/. This script reads whichever of these
 * exist in --from and (re)writes, in --into:
 *   seed.json             → docs/bench-seed.svg        req/s per target (wrk, ab)
 *   dispatch-quality.json → docs/bench-dispatch.svg    p50/p90/p99 per balancer
 *   state-cost.json       → docs/bench-state-cost.svg  proxy CPU per request, DO calls per 1,000
 *   streaming.json        → docs/bench-streaming.svg   TTFT and TPOT, direct vs through Switchyard
 *   prefix-cache.json     → docs/bench-prefix-cache.svg TTFT p50/p99 and hit ratio per balancer and isolate count
 *                           (prefix-cache-quick.json, --quick's file, when there is no full run)
 * `--only seed,dispatch` redraws only those charts (the names above without
 * "bench-" and ".svg"), leaving the others as committed.
 * A missing or unreadable file is skipped with a line saying so. Every chart
 * names its run's date and the machine caveat (a shared 2-core machine:
 * compare bars within one chart, not across runs).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { RunMeta } from "./result-file.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const argAfter = (flag: string) => {
  const at = process.argv.indexOf(flag);
  return at >= 0 ? process.argv[at + 1] : undefined;
};
const results = resolve(root, argAfter("--from") ?? "bench/published");
const into = resolve(root, argAfter("--into") ?? "docs");

// --- a small horizontal bar chart in SVG -----------------------------------------

interface Bar {
  label: string;
  /** NaN or null: not measured; `note` says why. */
  value: number | null;
  note?: string;
  /** Bars of the system under test are drawn in the accent colour. */
  accent?: boolean;
}

interface Group {
  heading: string;
  unit: string;
  bars: Bar[];
  /** Digits after the decimal point for values below 10 (default 1). */
  digits?: number;
}

interface Chart {
  title: string;
  subtitle: string;
  groups: Group[];
  footer: string[];
}

const W = 960;
const LABEL_W = 380;
const BAR_X = LABEL_W + 20;
const BAR_W = 420;
const ROW = 24;
const ACCENT = "#e8590c";
const PLAIN = "#5c7080";

const esc = (s: string) => s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll('"', "&quot;");
const measured = (v: number | null | undefined): v is number => typeof v === "number" && Number.isFinite(v);

/** A round step giving 3–6 gridlines up to `max`. */
function tickStep(max: number): number {
  const raw = max / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

function fmt(v: number, digits = 1): string {
  if (v === 0) return "0";
  if (v >= 1000) return Math.round(v).toLocaleString("en-US");
  if (v >= 10) return v.toFixed(0);
  return v.toFixed(digits);
}

/** Cuts a label to fit the label column (about 6.6 px per character at 12 px). */
const fit = (s: string, px = LABEL_W - 10) => (s.length * 6.6 > px ? `${s.slice(0, Math.floor(px / 6.6) - 1)}…` : s);

function svg(c: Chart): string {
  const parts: string[] = [];
  let y = 34;
  parts.push(`<text x="20" y="${y}" class="title">${esc(c.title)}</text>`);
  y += 22;
  parts.push(`<text x="20" y="${y}" class="sub">${esc(c.subtitle)}</text>`);
  y += 18;
  for (const g of c.groups) {
    y += 20;
    parts.push(`<text x="20" y="${y}" class="heading">${esc(g.heading)}</text>`);
    y += 10;
    const max = Math.max(0, ...g.bars.map((b) => (measured(b.value) ? b.value : 0)));
    const step = max > 0 ? tickStep(max) : 1;
    const top = max > 0 ? Math.ceil(max / step) * step : 1;
    const scale = (v: number) => (BAR_W * v) / top;
    const gridTop = y;
    const gridBottom = y + g.bars.length * ROW + 4;
    for (let t = 0; t <= top + step / 2; t += step) {
      const x = BAR_X + scale(t);
      parts.push(`<line x1="${x.toFixed(1)}" y1="${gridTop}" x2="${x.toFixed(1)}" y2="${gridBottom}" class="grid"/>`);
      parts.push(`<text x="${x.toFixed(1)}" y="${gridBottom + 13}" class="tick" text-anchor="middle">${esc(fmt(t, g.digits))}</text>`);
    }
    parts.push(`<text x="${BAR_X + BAR_W}" y="${gridBottom + 27}" class="tick" text-anchor="end">${esc(g.unit)}</text>`);
    for (const b of g.bars) {
      const cy = y + ROW / 2 + 4;
      parts.push(`<text x="${LABEL_W}" y="${cy + 4}" class="label${b.accent ? " accent" : ""}" text-anchor="end"><title>${esc(b.label)}</title>${esc(fit(b.label))}</text>`);
      if (measured(b.value)) {
        const w = Math.max(1, scale(b.value));
        parts.push(`<rect x="${BAR_X}" y="${cy - 8}" width="${w.toFixed(1)}" height="16" rx="2" fill="${b.accent ? ACCENT : PLAIN}"/>`);
        const value = `${fmt(b.value, g.digits)}${b.note ? `  (${b.note})` : ""}`;
        parts.push(`<text x="${(BAR_X + w + 6).toFixed(1)}" y="${cy + 4}" class="value">${esc(value)}</text>`);
      } else {
        parts.push(`<text x="${BAR_X + 4}" y="${cy + 4}" class="skipped">${esc(`not measured${b.note ? `: ${b.note}` : ""}`.slice(0, 90))}</text>`);
      }
      y += ROW;
    }
    y = gridBottom + 36;
  }
  y += 6;
  for (const line of c.footer) {
    parts.push(`<text x="20" y="${y}" class="foot">${esc(line)}</text>`);
    y += 16;
  }
  const h = y + 10;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${h}" viewBox="0 0 ${W} ${h}" font-family="system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif">
<!-- Generated by bench/shared/chart.ts from bench/published/; regenerate with: npx tsx bench/shared/chart.ts -->
<style>
  .title { font-size: 18px; font-weight: 600; fill: #1f2933; }
  .sub { font-size: 13px; fill: #52606d; }
  .heading { font-size: 14px; font-weight: 600; fill: #1f2933; }
  .label { font-size: 12px; fill: #323f4b; }
  .label.accent { font-weight: 600; fill: #1f2933; }
  .value { font-size: 12px; fill: #1f2933; }
  .skipped { font-size: 12px; font-style: italic; fill: #7b8794; }
  .tick { font-size: 10px; fill: #7b8794; }
  .grid { stroke: #e4e7eb; stroke-width: 1; }
  .foot { font-size: 11px; fill: #616e7c; }
</style>
<rect width="100%" height="100%" fill="#ffffff"/>
${parts.join("\n")}
</svg>
`;
}

// --- the result files ----------------------------------------------------------------

function read<T>(file: string): T | undefined {
  // bench/published/<name>/ holds a scenario's published runs (bench/shared/published.ts): draw the newest.
  // A results folder (bench/results, bench/results/quick) holds <name>.json, the last run.
  const runs = join(results, file.replace(/\.json$/, ""));
  const newest = existsSync(runs) && statSync(runs).isDirectory() ? readdirSync(runs).filter((f) => f.endsWith(".json")).sort().at(-1) : undefined;
  const path = newest ? join(runs, newest) : join(results, file);
  if (!existsSync(path)) {
    console.log(`${file}: missing, skipped`);
    return undefined;
  }
  try {
    const data = JSON.parse(readFileSync(path, "utf8")) as T & { meta?: RunMeta; when?: string; machine?: { cpus?: number; loadavg1mAtStart?: number; commit?: string } };
    // Result files name their run in `meta` (bench/shared/result-file.ts); the charts read when and where from it.
    if (data.meta) {
      data.when = data.meta.date;
      data.machine = { ...data.machine, cpus: data.meta.machine.cpus, loadavg1mAtStart: data.meta.loadavgAtStart[0]!, commit: data.meta.commit };
    }
    return data;
  } catch (err) {
    console.log(`${file}: unreadable (${String(err)}), skipped`);
    return undefined;
  }
}

const when = (iso: string | undefined) => (iso ? `${iso.slice(0, 16).replace("T", " ")} UTC` : "date unknown");
const machineLine = (m: { cpus?: number; loadavg1mAtStart?: number; commit?: string } | undefined) =>
  `${m?.cpus ?? "?"} CPUs shared by the load generator, the proxies and the replicas${m?.loadavg1mAtStart !== undefined ? ` (load average ${m.loadavg1mAtStart} at start)` : ""}${m?.commit ? `; commit ${m.commit}` : ""}`;
const CAVEAT = "Loopback on one small machine: absolute figures move ±20 % between runs and say nothing of a deployed edge; compare bars within this chart.";

/** --only a,b: redraw only these charts. */
const onlyArg = argAfter("--only");
const only = onlyArg !== undefined ? new Set(onlyArg.split(",").filter(Boolean)) : undefined;

function write(name: string, chart: Chart): void {
  if (only && !only.has(name.replace(/^bench-/, "").replace(/\.svg$/, ""))) {
    console.log(`${name}: not redrawn (--only)`);
    return;
  }
  mkdirSync(into, { recursive: true });
  const out = join(into, name);
  writeFileSync(out, svg(chart));
  console.log(`wrote ${relative(root, out)}`);
}

interface SeedRow {
  target: string;
  tool: string;
  rps: number | null;
  note?: string;
  requests?: number;
}
interface SeedResult {
  when?: string;
  machine?: { cpus?: number; loadavg1mAtStart?: number };
  options?: { replicas?: number; seconds?: number; abN?: number; quick?: boolean };
  rows: SeedRow[];
  ratios?: { name: string; value: number }[];
}

function seedChart(s: SeedResult): Chart {
  const accent = (t: string) => t.startsWith("Switchyard");
  const bars = (tool: string) =>
    s.rows
      .filter((r) => r.tool.startsWith(tool) || (tool === "ab" && r.tool === "wrk, ab"))
      // ab against workerd's own port is skipped by design (HTTP/1.0 stall); a row saying so is enough in the table.
      .filter((r) => !(tool === "ab" && r.note?.startsWith("skipped: workerd's HTTP/1.0")))
      .map((r): Bar => {
        const stalled = r.note?.startsWith("HTTP/1.0: workerd never closes");
        return {
          label: r.target,
          value: r.rps,
          accent: accent(r.target),
          ...(r.note ? { note: stalled ? "HTTP/1.0 stall, bounded at 3 s" : r.note.replace(/^skipped: /, "") } : {}),
        };
      });
  const wrkTool = s.rows.find((r) => r.tool.startsWith("wrk "))?.tool ?? "wrk";
  const abTool = s.rows.find((r) => r.tool.startsWith("ab "))?.tool ?? "ab";
  const ratio = (prefix: string) => s.ratios?.find((r) => r.name.startsWith(prefix))?.value;
  const rayMeasured = ratio("Switchyard (public port) / Ray Serve, ab (the seed's command), measured");
  const raySeed = ratio("Switchyard (public port) / Ray Serve, ab, vs the seed");
  const rayText =
    rayMeasured !== undefined
      ? `; Switchyard / Ray Serve (ab) ${rayMeasured.toFixed(1)}×`
      : raySeed !== undefined
        ? `; Switchyard / the seed notes' ~50 req/s for Ray Serve (not measured here) ${raySeed.toFixed(1)}×`
        : "";
  const bare = ratio("Switchyard (workerd port) / bare workerd Worker");
  const cProxies = (["HAProxy", "nginx"] as const)
    .map((p) => {
      const ab = ratio(`Switchyard (public port) / ${p}`);
      const w = ratio(`Switchyard (workerd port) / ${p}`);
      return ab === undefined && w === undefined ? "" : `Switchyard / ${p}${p === "HAProxy" ? " (Ray Serve's ingress settings)" : ""} ${ab?.toFixed(2) ?? "–"} (ab), ${w?.toFixed(2) ?? "–"} (wrk)`;
    })
    .filter(Boolean);
  const o = s.options ?? {};
  return {
    title: `The Ray Serve seed: ${o.replicas ?? 48} replicas answering "hi"`,
    subtitle: `Requests per second per target, one run${o.quick ? " (--quick)" : ""}${
      bare !== undefined ? `; Switchyard / bare workerd Worker ${bare.toFixed(2)}` : ""
    }${rayText}`,
    groups: [
      { heading: `${wrkTool}, ${o.seconds ?? "?"} s (HTTP/1.1 keep-alive)`, unit: "req/s", bars: bars("wrk") },
      { heading: `${abTool} (HTTP/1.0, one connection per request: the seed's command)`, unit: "req/s", bars: bars("ab") },
    ],
    footer: [
      `Run ${when(s.when)} by bench/seed/seed.ts. ${machineLine(s.machine)}.`,
      ...(cProxies.length ? [`${cProxies.join("; ")}: context, not targets (one local workerd process against C proxies, per core).`] : []),
      CAVEAT,
      "Regenerate: npx tsx bench/seed/seed.ts, then npx tsx bench/shared/chart.ts --only seed.",
    ],
  };
}

interface DispatchResult {
  when?: string;
  setup?: { load?: { mode?: string; rps?: number; utilization?: number }; seconds?: number; fleetCapacityRps?: number };
  arms: { label?: string; balancer?: string; p50ms?: number; p90ms?: number; p99ms?: number; failed?: number; requests?: number }[];
}

function dispatchChart(d: DispatchResult): Chart {
  const name = (a: DispatchResult["arms"][number]) => a.label ?? a.balancer ?? "?";
  const group = (key: "p50ms" | "p90ms" | "p99ms", heading: string): Group => ({
    heading,
    unit: "ms",
    bars: d.arms.map((a) => ({
      label: name(a),
      value: a[key] ?? null,
      accent: (a.balancer ?? a.label ?? "").includes("load_aware"),
      ...(key === "p99ms" && a.failed ? { note: `${a.failed} of ${a.requests} failed` } : {}),
    })),
  });
  const l = d.setup?.load;
  const groups = [group("p50ms", "p50 latency"), ...(d.arms.some((a) => measured(a.p90ms)) ? [group("p90ms", "p90 latency")] : []), group("p99ms", "p99 latency")];
  return {
    title: "Dispatch quality: replicas of unequal speed",
    subtitle: `Latency of successful requests per balancer${l ? `, ${l.mode ?? ""} load at ${l.utilization !== undefined ? `${Math.round(100 * l.utilization)} %` : "?"} of fleet capacity (${l.rps !== undefined ? Math.round(l.rps) : "?"} req/s)` : ""}; lower is better`,
    groups,
    footer: [`Run ${when(d.when)} by bench/dispatch-quality/dispatch-quality.ts. 2 CPUs shared by the load generator, the proxy and the replicas.`, CAVEAT, "Regenerate: npx tsx bench/dispatch-quality/dispatch-quality.ts, then npx tsx bench/shared/chart.ts."],
  };
}

interface StateCostResult {
  when?: string;
  machine?: { cpus?: number; loadavg1mAtStart?: number };
  kinds: {
    kind: string;
    rps: number;
    cpu: { usPerRequest: number };
    doCallsPer1000: { total: number };
    ratioToBare?: { median: number } | null;
    twin?: { usPerRequest: number; rps: number } | null;
    ratioToTwin?: { median: number } | null;
  }[];
  bare?: { usPerRequest: number; rps: number } | null;
  rebuilt?: { usPerRequest: number; rps: number; ratioToBare: { median: number } } | null;
  target?: { value: number; max: number } | null;
}

function stateCostChart(s: StateCostResult): Chart {
  return {
    title: "Hot-path state cost",
    subtitle: `Proxy CPU per request and Durable Object calls per 1,000 requests, by kind of request${s.target ? ` (target ≤ ${s.target.max} per 1,000 plain: ${s.target.value.toFixed(2)})` : ""}`,
    groups: [
      {
        heading: "workerd CPU per request (the Worker and, locally, its Durable Objects)",
        unit: "µs",
        bars: [
          ...(s.bare ? [{ label: "bare workerd Worker, one fetch() (GET /hello)", value: s.bare.usPerRequest, note: `${Math.round(s.bare.rps)} req/s` }] : []),
          ...(s.rebuilt
            ? [{ label: "rebuilt Worker: headers copied and set both ways", value: s.rebuilt.usPerRequest, note: `${s.rebuilt.ratioToBare.median.toFixed(2)}× bare` }]
            : []),
          ...s.kinds.flatMap((k) => [
            // The kind's bare twin: the same requests through a bare Worker, right before the kind in each round.
            ...(k.twin ? [{ label: `bare twin: ${k.kind}'s requests`, value: k.twin.usPerRequest, note: `${Math.round(k.twin.rps)} req/s` }] : []),
            {
              label: `Switchyard, ${k.kind}`,
              value: k.cpu.usPerRequest,
              accent: true,
              // With --rounds, each round's ratio is against its own bare Worker: the median says more than the bars' ratio.
              // Kept short: the longest bar's note must fit the chart's width (req/s are in the bench's table).
              note: k.ratioToTwin
                ? `${k.ratioToTwin.median.toFixed(2)}× twin${k.ratioToBare ? `, ${k.ratioToBare.median.toFixed(2)}× GET /hello` : ""}`
                : `${Math.round(k.rps)} req/s${k.ratioToBare ? `, ${k.ratioToBare.median.toFixed(2)}×` : ""}`,
            },
          ]),
        ],
      },
      {
        heading: "Durable Object calls per 1,000 requests (telemetry estimated: 1 flush / 2 s)",
        unit: "calls per 1,000 requests",
        digits: 2,
        bars: s.kinds.map((k) => ({ label: `Switchyard, ${k.kind}`, value: k.doCallsPer1000.total, accent: true })),
      },
    ],
    footer: [
      `Run ${when(s.when)} by bench/state-cost/state-cost.ts. ${machineLine(s.machine)}.`,
      ...(s.kinds.some((k) => k.ratioToTwin)
        ? ["n× twin: CPU per request × the kind's bare twin's (the same requests through a bare Worker), the median of the rounds' ratios, each against the twin of the same round."]
        : []),
      ...(s.kinds.some((k) => k.ratioToBare) ? ["n× GET /hello: × the bare Worker's GET /hello, the issue's comparison; the median of the rounds' ratios (--rounds)."] : []),
      "Calls per 1,000 depend on the request rate: the caches cost calls per second (≈1 snapshot + 0.5 flush per isolate), not per request.",
      CAVEAT,
    ],
  };
}

interface StreamingResult {
  when?: string;
  rows: { arm: string; ttft?: { mean?: number; p50?: number; p90?: number }; tpot?: { mean?: number; p50?: number; p90?: number } }[];
}

/** An arm's row name, short enough for the chart's label column. */
function streamingArmLabel(arm: string): string {
  if (arm.startsWith("direct")) return "direct to the replicas";
  if (arm.startsWith("bare")) return "bare Worker (fetch only)";
  if (arm.includes("/llm/v1")) return "Switchyard /llm/v1 (native pipe)";
  if (arm.includes("/v1")) return "Switchyard /v1 (OpenAI, error events)";
  return arm.length > 38 ? `${arm.slice(0, 37)}…` : arm;
}

function streamingChart(s: StreamingResult): Chart {
  const direct = s.rows.find((r) => r.arm.startsWith("direct"));
  const proxied = s.rows.filter((r) => r !== direct);
  const bars = (metric: "ttft" | "tpot", stat: "p50" | "p90") =>
    s.rows.map((r) => ({ label: `${streamingArmLabel(r.arm)}, ${stat}`, value: r[metric]?.[stat] ?? null, accent: r.arm.includes("Switchyard") }));
  // The absolute TTFT is the replicas' prefill (~570 ms): what each hop adds is the figure that matters.
  const added = (stat: "p50" | "mean") =>
    proxied.map((r) => {
      const a = r.ttft?.[stat];
      const d = direct?.ttft?.[stat];
      return { label: `${streamingArmLabel(r.arm)}, ${stat}`, value: a !== undefined && d !== undefined ? a - d : null, accent: r.arm.includes("Switchyard") };
    });
  return {
    title: "Streaming through the dispatcher (the Llumnix seed)",
    subtitle: "Time to first token and time per output token, directly against the replicas and through Switchyard",
    groups: [
      ...(direct ? [{ heading: "TTFT added over direct (target ≤ 1 ms at p50)", unit: "ms", digits: 2, bars: [...added("p50"), ...added("mean")] }] : []),
      { heading: "Time to first token (TTFT)", unit: "ms", bars: [...bars("ttft", "p50"), ...bars("ttft", "p90")] },
      { heading: "Time per output token (TPOT)", unit: "ms", bars: [...bars("tpot", "p50"), ...bars("tpot", "p90")] },
    ],
    footer: [`Run ${when(s.when)} by bench/streaming/streaming.ts (paced reference replicas). 2 CPUs shared by the load generator, the proxy and the replicas.`, CAVEAT],
  };
}

interface PrefixCacheResult {
  when?: string;
  quick?: boolean;
  machine?: { cpus?: number; loadavg1mAtStart?: number };
  setup?: { replicas?: number; isolates?: number; offeredRps?: number; utilization?: number; seconds?: number };
  arms: { arm: string; label: string; isolates: number; round?: number; ttft: { p50: number; p99: number }; hitRatio: number; failed: number; requests: number; warning?: string }[];
  targets?: { target: string; met: boolean | null }[];
}

function prefixCacheChart(p: PrefixCacheResult): Chart {
  const name = (a: PrefixCacheResult["arms"][number]) =>
    a.arm === "oracle" ? `oracle: exact-index longest prefix (reference)${a.round ? `, ${a.round}-isolate round` : ""}` : `${a.label}, ${a.isolates} isolate${a.isolates > 1 ? "s" : ""}`;
  const accent = (a: PrefixCacheResult["arms"][number]) => a.arm.startsWith("prefix_");
  const bars = (value: (a: PrefixCacheResult["arms"][number]) => number, note?: (a: PrefixCacheResult["arms"][number]) => string | undefined): Bar[] =>
    p.arms.map((a) => {
      const n = note?.(a);
      return { label: name(a), value: value(a), accent: accent(a), ...(n ? { note: n } : {}) };
    });
  const s = p.setup ?? {};
  const met = p.targets?.filter((t) => t.met !== null) ?? [];
  return {
    title: "Prefix-cache-aware routing: shared system prompts, multi-turn chats",
    subtitle: `${s.replicas ?? "?"} prefill-bound LLM replicas, open loop at ${s.offeredRps !== undefined ? s.offeredRps.toFixed(1) : "?"} req/s (${s.utilization !== undefined ? Math.round(100 * s.utilization) : "?"} % of load_aware's saturation), ${s.seconds ?? "?"} s per arm${p.quick ? " (--quick)" : ""}; targets met ${met.filter((t) => t.met).length} of ${met.length}`,
    groups: [
      { heading: "Time to first token, p50 (lower is better)", unit: "ms", bars: bars((a) => a.ttft.p50, (a) => (a.failed ? `${a.failed} of ${a.requests} failed` : undefined)) },
      { heading: "Time to first token, p99 (*: measured while other work took the machine)", unit: "ms", bars: bars((a) => a.ttft.p99, (a) => (a.warning ? "*" : undefined)) },
      { heading: "The replicas' own prefix-cache hit ratio (tokens, vllm:prefix_cache_hits / queries)", unit: "hit ratio", digits: 2, bars: bars((a) => a.hitRatio) },
    ],
    footer: [
      `Run ${when(p.when)} by bench/prefix-cache/prefix-cache.ts. ${machineLine(p.machine)}.`,
      "The oracle is a reference, not an upper bound: a longest-prefix router with an exact index of every replica's cache (their KV events), under the same load line, dispatching from the bench without the edge hop (~1–2 ms).",
      CAVEAT,
      "Regenerate: npx tsx bench/prefix-cache/prefix-cache.ts, then npx tsx bench/shared/chart.ts.",
    ],
  };
}

const seed = read<SeedResult>("seed.json");
if (seed?.rows) write("bench-seed.svg", seedChart(seed));
const dispatch = read<DispatchResult>("dispatch-quality.json");
if (dispatch?.arms?.length) write("bench-dispatch.svg", dispatchChart(dispatch));
else if (dispatch) console.log("dispatch-quality.json: no arms, skipped");
const stateCost = read<StateCostResult>("state-cost.json");
if (stateCost?.kinds?.length) write("bench-state-cost.svg", stateCostChart(stateCost));
const streaming = read<StreamingResult>("streaming.json");
if (streaming?.rows?.length && streaming.rows.every((r) => r.ttft && r.tpot)) write("bench-streaming.svg", streamingChart(streaming));
else if (streaming) console.log("streaming.json: unexpected shape, skipped");
for (const f of ["affinity.json", "hello.json"]) if (existsSync(join(results, f))) console.log(`${f}: no chart (its tables are in the README)`);
const prefixCache = read<PrefixCacheResult>("prefix-cache.json");
if (prefixCache?.arms?.length) write("bench-prefix-cache.svg", prefixCacheChart(prefixCache));
