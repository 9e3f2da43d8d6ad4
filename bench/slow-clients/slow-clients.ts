/**
 * Slow and abandoning clients against the local stack as `npm start` runs it (the
 * shipped functions/), the security review's attacks of issue 28 measured:
 *
 *  - held bodies: N connections each declaring a 10 MiB /v1 body, sending 10.4 MB of it
 *    and stopping: workerd's RSS (before, peak, and after they are answered), and what
 *    each got (408, 429) and when;
 *  - stalls: sized bodies that stop early on /v1 (200 bytes of 10 MiB), on a path route
 *    (64 KiB declared, none sent) and on /-/replicas/report-node (256 KiB declared, 100
 *    bytes sent, unsigned): how long each stays open;
 *  - tapped streams: /v1/responses streams closed ~100 ms in (the tokens the replicas
 *    still generated) and streams that never read (workerd's RSS);
 *  - drip: 16 connections of POST /echo, Content-Length 100000, a byte every 2 s,
 *    reopened when cut, while probes GET /echo every second: how many probes failed.
 *
 *   npx tsx bench/slow-clients/slow-clients.ts [--held 10] [--drip-seconds 32] [--out FILE]
 *
 * Prints one line per figure and writes them as JSON (bench/results/slow-clients.json by
 * default). Every figure is bounded in time: a connection the edge does not answer is
 * given up after the cap named in its line.
 */
import { mkdtempSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { writeResult } from "../shared/result-file.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { rssBytes, workerdPid } from "../shared/load-tools.ts";

const { values } = parseArgs({
  options: { held: { type: "string", default: "10" }, "drip-seconds": { type: "string" }, quick: { type: "boolean", default: false }, out: { type: "string" } },
});
const quick = values.quick;
const HELD = Number(values.held);
const DRIP_SECONDS = Number(values["drip-seconds"] ?? (quick ? 12 : 32));
const MiB = 1024 * 1024;

interface Exchange {
  status: number;
  /** Seconds from the first byte sent to the answer (or the close, or the cap). */
  seconds: number;
  answered: boolean;
}

/** A raw HTTP/1.1 exchange: `head`, then `body`, then `drip` pieces; the status and when it came (0 when none came before `capMs`). */
function exchange(port: number, head: string, o: { body?: Buffer | string; capMs: number; drip?: { piece: string; everyMs: number }; onOpen?: (s: () => void) => void }): Promise<Exchange> {
  return new Promise((resolve) => {
    const started = Date.now();
    const s = connect(port, "127.0.0.1");
    let out = "";
    let finished = false;
    let timer: ReturnType<typeof setInterval> | undefined;
    const finish = (answered: boolean) => {
      if (finished) return;
      finished = true;
      if (timer) clearInterval(timer);
      s.destroy();
      resolve({ status: Number(out.slice(9, 12)) || 0, seconds: (Date.now() - started) / 1000, answered });
    };
    s.setEncoding("latin1");
    s.on("data", (d: string) => {
      out += d;
      if (out.includes("\r\n\r\n")) finish(true);
    });
    s.on("close", () => finish(out.length > 0));
    s.on("error", () => finish(false));
    s.write(head);
    if (o.body !== undefined) s.write(o.body);
    if (o.drip) timer = setInterval(() => !s.destroyed && s.write(o.drip!.piece), o.drip.everyMs);
    setTimeout(() => finish(false), o.capMs);
    o.onOpen?.(() => finish(false));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mib = (bytes: number) => Math.round((bytes / MiB) * 10) / 10;

const stateDir = mkdtempSync(join(tmpdir(), "switchyard-bench-slow-"));
const stack = new LocalStack({ port: 0, stateDir, freshState: true });
process.on("SIGINT", () => {
  stack.killAll();
  process.exit(130);
});
const results: Record<string, unknown> = {};
try {
  await stack.start();
  const port = Number(new URL(stack.url).port);
  const pid = workerdPid(join(stateDir, "workerd.capnp"));
  // The shipped llm replicas generate 1,024 tokens in ~0.3 s, about as long as a cancel takes to reach them, so
  // "tokens generated after the client left" would not tell a cancelled stream from one run to its end. They are
  // replaced by two paced at 2 ms a token (a 1,024-token stream lasts 2 s); the figures compare routes in one run.
  const shipped = [...stack.replicas.values()].filter((r) => r.deployment === "llm");
  const llmReplicas = await Promise.all([1, 2].map((i) => stack.startReplica("llm", { id: `llm-paced-${i}`, backendArgs: ["--backend", "llm", "--model", "tiny-lm", "--decode-ms", "2"] })));
  for (const r of shipped) r.child.kill("SIGTERM");
  await Promise.all(shipped.map((r) => r.exited));
  // Warm the isolate (the routes, the routing view, the body readers) before measuring.
  for (let i = 0; i < 20; i++) await (await fetch(`${stack.url}/v1/completions`, { method: "POST", body: JSON.stringify({ model: "tiny-lm", prompt: "warm", max_tokens: 2 }) })).text();
  await sleep(2_000);

  // --- held bodies ------------------------------------------------------------------
  {
    const before = rssBytes(pid);
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, rssBytes(pid))), 100);
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10485660\r\n\r\n`;
    const body = Buffer.from(`{"model":"tiny-lm","pad":"${"a".repeat(10_400_000)}`);
    const held = await Promise.all(Array.from({ length: HELD }, () => exchange(port, head, { body, capMs: 60_000 })));
    clearInterval(sampler);
    await sleep(2_000);
    const after = rssBytes(pid);
    // "reset": closed without an answer (a refusal sent while the client was still writing), "open": no answer by the cap.
    const statuses = held.map((h) => (h.answered ? h.status : h.seconds < 59 ? "reset" : "open"));
    results.held = { connections: HELD, rss_before_mib: mib(before), rss_peak_mib: mib(peak), rss_growth_mib: mib(peak - before), rss_after_mib: mib(after), statuses, seconds: held.map((h) => Math.round(h.seconds * 10) / 10) };
    console.log(`held bodies: ${HELD} × 10 MiB /v1, 10.4 MB sent then stopped: RSS +${mib(peak - before)} MiB at peak (${mib(before)} → ${mib(peak)} MiB), ${mib(after)} MiB 2 s after; answers ${JSON.stringify(statuses)} after ${held.map((h) => h.seconds.toFixed(1)).join(", ")} s (cap 60 s)`);
  }

  // --- stalls -----------------------------------------------------------------------
  {
    const [small1, small2, path, control] = await Promise.all([
      ...[0, 1].map(() =>
        exchange(port, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10485660\r\n\r\n`, { body: `{"model":"tiny-lm","pad":"${"a".repeat(174)}`, capMs: 45_000 }),
      ),
      exchange(port, `POST /echo/held HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n`, { capMs: 90_000 }),
      exchange(port, `POST /-/replicas/report-node HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 262144\r\n\r\n`, { body: `{"deployment":"llm","x":"${"c".repeat(74)}`, capMs: 75_000 }),
    ]);
    const line = (e: Exchange, cap: number) => (e.answered ? `${e.status} after ${e.seconds.toFixed(1)} s` : `still open at the cap (${cap} s)`);
    results.stalls = { v1_200_bytes: [small1, small2], path_64kib_no_bytes: path, report_node_100_bytes: control };
    console.log(`stalls: /v1 200 bytes of 10 MiB: ${line(small1!, 45)}, ${line(small2!, 45)}; path route 64 KiB declared, none sent: ${line(path!, 90)}; report-node 256 KiB declared, 100 sent: ${line(control!, 75)}`);
  }

  // --- tapped streams ---------------------------------------------------------------
  {
    const metric = async (name: string) => {
      let n = 0;
      for (const r of llmReplicas) {
        const text = await (await fetch(`${r.url}/metrics`)).text();
        n += Number(text.split("\n").find((l) => l.startsWith(name))?.split(" ").at(-1) ?? NaN);
      }
      return n;
    };
    const idle = async () => {
      const end = Date.now() + 120_000;
      while ((await metric("vllm:num_requests_running")) > 0 && Date.now() < end) await sleep(50);
    };
    // Each closed ~100 ms in; the tapped routes (the edge reads their usage) beside untapped ones, same run.
    const routes: [string, string, Record<string, unknown>][] = [
      ["responses (tapped)", "/v1/responses", { model: "tiny-lm", input: "The replica", max_output_tokens: 1024, stream: true, ignore_eos: true }],
      ["chat with include_usage (tapped)", "/v1/chat/completions", { model: "tiny-lm", messages: [{ role: "user", content: "The replica" }], max_tokens: 1024, stream: true, stream_options: { include_usage: true }, ignore_eos: true }],
      ["completions (untapped)", "/v1/completions", { model: "tiny-lm", prompt: "The replica", max_tokens: 1024, stream: true }],
      ["path-routed completions (untapped)", "/llm/v1/completions", { model: "tiny-lm", prompt: "The replica", max_tokens: 1024, stream: true }],
    ];
    const closedEarly: Record<string, number[]> = {};
    for (let run = 0; run < 3; run++) {
      for (const [name, path, body] of routes) {
        await idle();
        const before = await metric("vllm:generation_tokens_total");
        const abort = new AbortController();
        const res = await fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: abort.signal });
        await res.body!.getReader().read();
        await sleep(100);
        abort.abort();
        await sleep(50);
        await idle();
        (closedEarly[name] ??= []).push((await metric("vllm:generation_tokens_total")) - before);
      }
    }
    // Streams nobody reads: opened, their heads read, their bodies never; tapped, then untapped, twice,
    // after a round of each that is not counted (the isolate's heap grows once, on the first JS-heavy load).
    const unreadGrowth: Record<string, number[]> = {};
    for (const [round, [name, path, body]] of [routes[0]!, routes[2]!, routes[0]!, routes[2]!, routes[0]!, routes[2]!].entries()) {
      await idle();
      await sleep(1_000);
      const rssBefore = rssBytes(pid);
      const unread = await Promise.all(
        Array.from({ length: 30 }, async () => {
          const abort = new AbortController();
          await fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: abort.signal });
          return abort;
        }),
      );
      await sleep(10_000);
      if (round >= 2) (unreadGrowth[name] ??= []).push(mib(rssBytes(pid) - rssBefore));
      for (const a of unread) a.abort();
    }
    await idle();
    results.tapped = { tokens_generated_after_close_of_1024: closedEarly, unread_30_for_10s_rss_growth_mib: unreadGrowth };
    for (const [name, tokens] of Object.entries(closedEarly)) console.log(`closed ~100 ms in: ${name}: the replicas generated ${tokens.join(", ")} of 1,024 tokens`);
    console.log(`30 streams never read, 10 s: workerd RSS ${Object.entries(unreadGrowth).map(([n, g]) => `${n} ${g.map((x) => `${x >= 0 ? "+" : ""}${x}`).join(", ")} MiB`).join("; ")}`);
  }

  // --- drip ---------------------------------------------------------------------------
  {
    let stop = false;
    let cut = 0;
    const dripper = async () => {
      while (!stop) {
        const e = await exchange(port, `POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n`, { body: "x", drip: { piece: "x", everyMs: 2_000 }, capMs: (DRIP_SECONDS + 5) * 1000 });
        if (e.answered) cut++;
      }
    };
    const drippers = Array.from({ length: 16 }, dripper);
    const statuses: number[] = [];
    const end = Date.now() + DRIP_SECONDS * 1000;
    await sleep(1_000);
    while (Date.now() < end) {
      const res = await fetch(`${stack.url}/echo?chunks=1`);
      await res.arrayBuffer();
      statuses.push(res.status);
      await sleep(1_000);
    }
    stop = true;
    await Promise.race([Promise.all(drippers), sleep(15_000)]);
    const failed = statuses.filter((s) => s !== 200).length;
    results.drip = { seconds: DRIP_SECONDS, probes: statuses.length, failed, statuses, uploads_cut: cut };
    console.log(`drip: 16 uploads of POST /echo at a byte every 2 s for ${DRIP_SECONDS} s (cut and reopened ${cut} times): ${failed} of ${statuses.length} probes failed (${[...new Set(statuses)].join(", ")})`);
  }
} finally {
  await stack.stop();
}
console.log(`wrote ${writeResult("slow-clients", results, { quick, ...(values.out ? { out: values.out } : {}), arms: [{ arm: "drip probes", requests: (results.drip as { probes: number }).probes, ok: (results.drip as { probes: number; failed: number }).probes - (results.drip as { failed: number }).failed }] })}`);
process.exit(0);
