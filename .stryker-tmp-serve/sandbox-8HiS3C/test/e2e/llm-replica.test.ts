// @ts-nocheck
// The reference replica's language model backend end to end: the real replica process
// (`--backend llm --model tiny-lm --standalone`), real ONNX inference per token, spoken
// to as an OpenAI client and a Prometheus scraper would: streaming token by token,
// non-streaming, embeddings, /v1/models, vLLM's /metrics under load (read by the replica
// agent's parser too), KV-cache waiting, seeds, errors, and a client that disconnects.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { engineLoad, isEngineMetricsError, type EngineLoad } from "../../src/agent/engine-metrics.ts";
import { Header, parseLoadHeader } from "../../src/protocol/index.ts";
import { parsePrometheusText } from "../../src/telemetry/prometheus-parse.ts";

const ROOT = join(import.meta.dirname, "../..");
const DECODE_MS = 20;
const MAX_ONGOING = 4;
const KV_BLOCKS = 64; // 1,024 tokens

let child: ChildProcess;
let url: string;
const logs: string[] = [];

/** The real replica process with `args` after the common ones; resolves with its URL once it listens. */
async function spawnReplica(args: string[], logs: string[]): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", "src/replica-entry.ts", "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "llm", "--port", "0", ...args], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, SWITCHYARD_REPLICA_KEY: "" },
  });
  child.stderr!.on("data", (d: Buffer) => logs.push(d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`replica did not start: ${logs.join("")}`)), 60_000);
    child.once("exit", (code) => reject(new Error(`replica exited (${code}): ${logs.join("")}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const ev = JSON.parse(line) as { event?: string; url?: string };
      if (ev.event === "listening" && ev.url) {
        clearTimeout(timer);
        resolve(ev.url);
      }
    });
  });
  return { child, url };
}

async function stopReplica(child: ChildProcess | undefined): Promise<void> {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  }
}

beforeAll(async () => {
  ({ child, url } = await spawnReplica(["--decode-ms", String(DECODE_MS), "--kv-blocks", String(KV_BLOCKS), "--max-ongoing", String(MAX_ONGOING)], logs));
});

afterAll(() => stopReplica(child));

const post = (path: string, body: unknown, init: RequestInit = {}) =>
  fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: typeof body === "string" ? body : JSON.stringify(body), ...init });

async function metrics(): Promise<{ text: string; load: EngineLoad; value: (name: string, labels?: Record<string, string>) => number }> {
  const res = await fetch(`${url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  const load = engineLoad(text);
  if (isEngineMetricsError(load)) throw new Error(load.error);
  const samples = parsePrometheusText(text).samples;
  const value = (name: string, labels: Record<string, string> = {}) => {
    const s = samples.find((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
    if (!s) throw new Error(`no ${name} in /metrics`);
    return s.value;
  };
  return { text, load, value };
}

async function until<T>(probe: () => Promise<T>, ok: (v: T) => boolean, ms = 5000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms; last: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

interface SseEvent {
  at: number;
  data: string;
}

/** A server-sent event stream's events as they arrive, one at a time (the caller decides when to read on). */
async function* sseEvents(res: Response): AsyncGenerator<SseEvent> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      const at = performance.now();
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        expect(block.startsWith("data: ")).toBe(true);
        yield { at, data: block.slice("data: ".length) };
      }
    }
  } finally {
    reader.releaseLock();
  }
}

/** Reads a server-sent event stream, timing each event's arrival; stops reading (leaving the stream open) after `limit` events if given. */
async function readSse(res: Response, limit = Infinity): Promise<SseEvent[]> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const events: SseEvent[] = [];
  let buffer = "";
  while (events.length < limit) {
    const { value, done } = await reader.read();
    if (done) break;
    const at = performance.now();
    buffer += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      expect(block.startsWith("data: ")).toBe(true);
      events.push({ at, data: block.slice("data: ".length) });
    }
  }
  reader.releaseLock();
  return events;
}

describe("tiny-lm on the reference replica", () => {
  it("lists the model, answers /health, and reports KV usage in the load header", async () => {
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { object: string; data: { id: string; object: string; owned_by: string; max_model_len: number }[] };
    expect(models).toMatchObject({ object: "list", data: [{ id: "tiny-lm", object: "model", owned_by: "switchyard", max_model_len: KV_BLOCKS * 16 }] });
    const health = await fetch(`${url}/health`);
    expect(health.status).toBe(200);
    expect(parseLoadHeader(health.headers.get("x-switchyard-load"))).toMatchObject({ ongoing: 0, kv: 0, state: "ready" });
  });

  it("streams a completion token by token, as each token is produced", async () => {
    const generatedBefore = (await metrics()).value("vllm:generation_tokens_total");
    // 50 tokens at 20 ms: a second of generation, so the check below has time even on a busy machine.
    const res = await post("/v1/completions", { model: "tiny-lm", prompt: "The replica", max_tokens: 50, seed: 1, stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    // Causality, not timing: when the first token has arrived, the replica has not yet generated the
    // last (a replica that buffered its answer would have generated all of them by then).
    const reader = sseEvents(res);
    const first = (await reader.next()).value!;
    const generatedAtFirst = (await metrics()).value("vllm:generation_tokens_total") - generatedBefore;
    expect(generatedAtFirst).toBeLessThan(50);
    const events = [first];
    for await (const e of reader) events.push(e);
    expect(events.at(-1)!.data).toBe("[DONE]");
    const chunks = events.slice(0, -1).map((e) => ({ at: e.at, chunk: JSON.parse(e.data) as { id: string; object: string; created: number; model: string; choices: { index: number; text: string; logprobs: null; finish_reason: string | null }[] } }));
    const tokens = chunks.filter((c) => c.chunk.choices[0]!.finish_reason === null);
    expect(tokens).toHaveLength(50);
    for (const { chunk } of chunks) {
      expect(chunk).toMatchObject({ object: "text_completion", model: "tiny-lm", id: chunks[0]!.chunk.id });
      expect(chunk.id).toMatch(/^cmpl-/);
      expect(Object.keys(chunk.choices[0]!).sort()).toEqual(["finish_reason", "index", "logprobs", "text"]);
    }
    for (const { chunk } of tokens) expect(chunk.choices[0]!.text).toHaveLength(1);
    expect(chunks.at(-1)!.chunk.choices[0]).toEqual({ index: 0, text: "", logprobs: null, finish_reason: "length" });
  });

  it("streams a chat completion in OpenAI's chunk format, with usage when asked", async () => {
    const res = await post("/v1/chat/completions", {
      model: "tiny-lm",
      messages: [{ role: "system", content: "Be brief." }, { role: "user", content: [{ type: "text", text: "What is a replica?" }] }],
      max_completion_tokens: 5,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
      user: "someone",
    });
    expect(res.status).toBe(200);
    const events = await readSse(res);
    expect(events.at(-1)!.data).toBe("[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data) as { id: string; object: string; choices: { delta: { role?: string; content?: string }; finish_reason: string | null }[]; usage: unknown });
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.id.startsWith("chatcmpl-"))).toBe(true);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" });
    const content = chunks.slice(1, 6);
    expect(content.every((c) => c.choices[0]!.delta.content?.length === 1 && c.choices[0]!.finish_reason === null && c.usage === null)).toBe(true);
    expect(chunks[6]!.choices[0]).toMatchObject({ delta: {}, finish_reason: "length" });
    // "system: Be brief.\nuser: What is a replica?\nassistant: " is 54 characters.
    expect(chunks[7]).toMatchObject({ choices: [], usage: { prompt_tokens: 54, completion_tokens: 5, total_tokens: 59 } });
  });

  it("answers without streaming, in OpenAI's completion and chat.completion shapes", async () => {
    const completion = (await (await post("/v1/completions", { model: "tiny-lm", prompt: ["Hello"], max_tokens: 6, temperature: 0 })).json()) as Record<string, unknown>;
    expect(completion).toMatchObject({ object: "text_completion", model: "tiny-lm", usage: { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 } });
    expect(completion.choices).toEqual([{ index: 0, text: expect.stringMatching(/^.{6}$/s), logprobs: null, finish_reason: "length" }]);
    const chat = (await (await post("/v1/chat/completions", { model: "tiny-lm", messages: [{ role: "user", content: "hi" }], max_tokens: 4, stop: "\n" })).json()) as Record<string, unknown>;
    expect(chat).toMatchObject({ object: "chat.completion", model: "tiny-lm", choices: [{ index: 0, message: { role: "assistant" }, logprobs: null }] });
    expect((chat.id as string).startsWith("chatcmpl-")).toBe(true);
    expect(typeof chat.created).toBe("number");
  });

  it("ends a chat that sets no budget at its end of turn, as vLLM's default (the rest of the context) does (issue 52)", async () => {
    // With a default of 64 tokens, 6 of 20 such chats (43 of 100 measured) ended on `length`, the README's curl among them.
    const chat = async (seed: number) =>
      ((await (await post("/v1/chat/completions", { model: "tiny-lm", messages: [{ role: "user", content: "What does the proxy do?" }], seed })).json()) as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason;
    for (let batch = 0; batch < 3; batch++) {
      const seeds = [0, 1, 2, 3].map((i) => batch * 4 + i);
      expect(await Promise.all(seeds.map(chat)), `seeds ${seeds.join(", ")}`).toEqual(["stop", "stop", "stop", "stop"]);
    }
  });

  it("gives the same text for the same seed", async () => {
    const text = async (seed: number) => {
      const body = (await (await post("/v1/completions", { model: "tiny-lm", prompt: "Switchyard", max_tokens: 15, temperature: 1, seed })).json()) as { choices: { text: string }[] };
      return body.choices[0]!.text;
    };
    const [a, b, c] = await Promise.all([text(42), text(42), text(43)]);
    expect(a).toHaveLength(15);
    expect(b).toBe(a);
    expect(c).not.toBe(a);
  });

  it("embeds strings into unit vectors, as floats or base64", async () => {
    const res = await post("/v1/embeddings", { model: "tiny-lm", input: ["the replica reports its load", "x"] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; model: string; data: { object: string; index: number; embedding: number[] }[]; usage: unknown };
    expect(body).toMatchObject({ object: "list", model: "tiny-lm", usage: { prompt_tokens: 29, total_tokens: 29 } });
    expect(body.data.map((d) => [d.object, d.index, d.embedding.length])).toEqual([["embedding", 0, 96], ["embedding", 1, 96]]);
    for (const d of body.data) expect(Math.hypot(...d.embedding)).toBeCloseTo(1, 4);
    const b64 = (await (await post("/v1/embeddings", { model: "tiny-lm", input: "x", encoding_format: "base64" })).json()) as { data: { embedding: string }[] };
    const decoded = new Float32Array(Uint8Array.from(Buffer.from(b64.data[0]!.embedding, "base64")).buffer);
    expect(Array.from(decoded)).toEqual(body.data[1]!.embedding.map((x) => Math.fround(x)));
  });

  it("answers errors as OpenAI error objects with the right status", async () => {
    const cases: [unknown, number, string][] = [
      ["{not json", 400, "bad_request"],
      [{ model: "gpt-4o", prompt: "x" }, 404, "model_not_found"],
      [{ model: "tiny-lm", prompt: "x", n: 2 }, 400, "bad_request"],
      [{ model: "tiny-lm", prompt: "x", max_tokens: 5000 }, 400, "bad_request"],
      [{ model: "tiny-lm", prompt: "x", temperature: 3 }, 400, "bad_request"],
      [{ model: "tiny-lm", prompt: "x".repeat(KV_BLOCKS * 16) }, 400, "bad_request"], // can never fit
      [{ prompt: "x" }, 400, "bad_request"],
    ];
    for (const [body, status, code] of cases) {
      const res = await post("/v1/completions", body);
      expect(res.status, JSON.stringify(body).slice(0, 60)).toBe(status);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      const err = (await res.json()) as { error: { code: string; type: string; message: string } };
      expect(err.error).toMatchObject({ code, type: expect.any(String), message: expect.any(String) });
    }
    const chatN = await post("/v1/chat/completions", { model: "tiny-lm", messages: [{ role: "user", content: "x" }], n: 2 });
    expect(chatN.status).toBe(400);
    expect(((await chatN.json()) as { error: { message: string } }).error.message).toMatch(/n=1/);
    expect((await fetch(`${url}/v1/completions`)).status).toBe(405);
    expect((await post("/v1/nothing", {})).status).toBe(404);
  });

  it("reports running requests and KV usage in vLLM's /metrics while they run, outside admission, and 0 after", async () => {
    const before = await metrics();
    expect(before.load).toEqual({ engine: "vllm", running: 0, waiting: 0, kvCacheUsage: 0, loraAdapters: [] });
    const generatedBefore = before.value("vllm:generation_tokens_total", { model_name: "tiny-lm" });
    const ttftBefore = before.value("vllm:time_to_first_token_seconds_count");
    // Fill every admission slot with a stream of ~40 tokens (~0.8 s each); distinct prompts, so no blocks are shared (prefix caching).
    const streams = Array.from({ length: MAX_ONGOING }, (_, i) => post("/v1/completions", { model: "tiny-lm", prompt: String.fromCharCode(0x61 + i).repeat(40), max_tokens: 40, stream: true }).then((r) => readSse(r)));
    const during = await until(metrics, (m) => m.load.running === MAX_ONGOING);
    expect(during.load.kvCacheUsage).toBeGreaterThan(0);
    expect(during.load.kvCacheUsage).toBeCloseTo((MAX_ONGOING * 3) / KV_BLOCKS, 1); // 40-80 tokens: 3-5 blocks each
    expect(during.value("vllm:kv_cache_usage_perc")).toBe(during.load.kvCacheUsage);
    // A full replica still answers /metrics and /health, and rejects a new POST before accepting it.
    const health = await fetch(`${url}/health`);
    expect(health.status).toBe(200);
    const header = parseLoadHeader(health.headers.get("x-switchyard-load"));
    expect(header?.ongoing).toBe(MAX_ONGOING);
    expect(header?.kv).toBeGreaterThan(0);
    const refused = await post("/v1/completions", { model: "tiny-lm", prompt: "x", max_tokens: 1 });
    expect(refused.status).toBe(503);
    expect(refused.headers.get("x-switchyard-rejected")).toBe("capacity");
    await refused.text();
    await Promise.all(streams);
    const after = await metrics();
    expect(after.load).toEqual({ engine: "vllm", running: 0, waiting: 0, kvCacheUsage: 0, loraAdapters: [] });
    expect(after.value("vllm:generation_tokens_total", { model_name: "tiny-lm" }) - generatedBefore).toBe(MAX_ONGOING * 40);
    expect(after.value("vllm:time_to_first_token_seconds_count") - ttftBefore).toBe(MAX_ONGOING);
    expect(after.text).toContain('vllm:cache_config_info{block_size="16"');
  });

  it("makes a request wait while the KV cache is full (vllm:num_requests_waiting), then serves it", async () => {
    // 38 blocks each with their first tokens: two do not fit in 64. Two prompts, since the same one twice would share its cached blocks.
    const first = post("/v1/completions", { model: "tiny-lm", prompt: "y".repeat(600), max_tokens: 25 }).then((r) => r.json() as Promise<{ usage: { completion_tokens: number } }>);
    await until(metrics, (m) => m.load.running === 1);
    const secondStarted = performance.now();
    const second = post("/v1/completions", { model: "tiny-lm", prompt: "w".repeat(600), max_tokens: 3 }).then((r) => r.json() as Promise<{ usage: { completion_tokens: number } }>);
    const waiting = await until(metrics, (m) => m.load.waiting === 1);
    expect(waiting.load.running).toBe(1);
    expect(waiting.load.kvCacheUsage).toBeGreaterThan(0.5);
    expect((await first).usage.completion_tokens).toBe(25);
    expect((await second).usage.completion_tokens).toBe(3);
    expect(performance.now() - secondStarted).toBeGreaterThan(10 * DECODE_MS); // it waited for the first
    expect((await metrics()).load).toMatchObject({ running: 0, waiting: 0, kvCacheUsage: 0 });
  });

  it("stops generating at once when the client disconnects mid-stream, freeing its KV blocks and admission slot", async () => {
    const abortsBefore = (await metrics()).value("vllm:request_success_total", { finished_reason: "abort" });
    const client = new AbortController();
    const res = await post("/v1/completions", { model: "tiny-lm", prompt: "Hello", max_tokens: 1000, stream: true }, { signal: client.signal });
    const firstChunks = await readSse(res, 3);
    expect(firstChunks).toHaveLength(3);
    expect((await metrics()).load.running).toBe(1);
    const generatedBefore = (await metrics()).value("vllm:generation_tokens_total");
    client.abort();
    const idle = await until(metrics, (m) => m.load.running === 0, 30_000);
    // It stopped because the client left, far short of the 1,000 tokens asked (not timed: a busy machine only slows both).
    expect(idle.value("vllm:generation_tokens_total") - generatedBefore).toBeLessThan(500);
    expect(idle.load.kvCacheUsage).toBe(0);
    expect(idle.value("vllm:request_success_total", { finished_reason: "abort" })).toBe(abortsBefore + 1);
    const generated = idle.value("vllm:generation_tokens_total");
    await new Promise((r) => setTimeout(r, 5 * DECODE_MS));
    expect((await metrics()).value("vllm:generation_tokens_total")).toBe(generated); // nothing generated since
    const healthz = (await (await fetch(`${url}/-/healthz`)).json()) as { ongoing: number; running: number };
    expect(healthz).toMatchObject({ ongoing: 0, running: 0 });
  });
});

describe("a full batch and a critical dispatch (priority preemption)", () => {
  // Streams far longer than the test (1,024 tokens at 100 ms), in a KV cache that holds them all: they end only when aborted.
  let own: { child: ChildProcess; url: string } | undefined;
  beforeAll(async () => {
    own = await spawnReplica(["--decode-ms", "100", "--kv-blocks", "2048", "--max-ongoing", "2"], []);
  });
  afterAll(() => stopReplica(own?.child));

  it("admits a critical dispatch past the full batch, pausing a standard stream for it; a standard dispatch is refused", async () => {
    const at = (path: string, body: unknown, headers: Record<string, string>, signal?: AbortSignal) =>
      fetch(`${own!.url}${path}`, { method: "POST", headers: { "content-type": "application/json", [Header.protocol]: "1", ...headers }, body: JSON.stringify(body), ...(signal && { signal }) });
    const preemptions = async () => parsePrometheusText(await (await fetch(`${own!.url}/metrics`)).text()).samples.find((x) => x.name === "vllm:num_preemptions_total")!.value;
    const batch = [new AbortController(), new AbortController()];
    const streams = await Promise.all(batch.map((c, i) => at("/v1/completions", { model: "tiny-lm", prompt: `batch ${i}`, max_tokens: 1024, ignore_eos: true, stream: true }, {}, c.signal)));
    for (const r of streams) {
      expect(r.status).toBe(200);
      expect((await readSse(r, 1)).length).toBe(1);
    }
    const refused = await at("/v1/completions", { model: "tiny-lm", prompt: "standard", max_tokens: 5 }, { [Header.priority]: "0" });
    expect(refused.status).toBe(503);
    expect(refused.headers.get(Header.rejected)).toBe("capacity");
    await refused.text();
    const critical = await at("/v1/completions", { model: "tiny-lm", prompt: "critical", max_tokens: 5 }, { [Header.priority]: "1" });
    expect(critical.status).toBe(200);
    // Admitted with both batch streams in flight (its own load header leaves it out): past max_ongoing_requests.
    expect(parseLoadHeader(critical.headers.get(Header.load)!)).toMatchObject({ ongoing: 2, max: 2 });
    expect(((await critical.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(5);
    expect(await preemptions()).toBe(1); // the engine paused a standard stream for it
    // The paused stream is rescheduled once the critical one ends: both run again.
    await until(async () => (await (await fetch(`${own!.url}/-/healthz`)).json()) as { ongoing: number; running: number }, (h) => h.ongoing === 2 && h.running === 2);
    for (const c of batch) c.abort();
  });
});

describe("the replica CLI's llm flags", () => {
  const runToExit = (args: string[]) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const c = spawn(process.execPath, ["--import", "tsx", "src/replica-entry.ts", "--deployment", "llm", "--standalone", "--port", "0", ...args], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
      let stderr = "";
      c.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
      c.once("exit", (code) => resolve({ code, stderr }));
    });

  it("exits 2 with a clear message on a bad llm flag", async () => {
    const [knob, model, value, perToken, events, replay] = await Promise.all([
      runToExit(["--backend", "text", "--kv-blocks", "4"]),
      runToExit(["--backend", "llm", "--model", "gpt-2"]),
      runToExit(["--backend", "llm", "--decode-ms", "fast"]),
      runToExit(["--backend", "llm", "--prefill-token-us", "2.5"]),
      runToExit(["--backend", "llm", "--kv-events-endpoint", "127.0.0.1:5557"]),
      runToExit(["--backend", "llm", "--kv-events-replay-endpoint", "tcp://127.0.0.1:5558"]),
    ]);
    expect(knob).toMatchObject({ code: 2, stderr: expect.stringMatching(/--kv-blocks is a knob of --backend llm/) });
    expect(model).toMatchObject({ code: 2, stderr: expect.stringMatching(/unknown language model "gpt-2"/) });
    expect(value).toMatchObject({ code: 2, stderr: expect.stringMatching(/--decode-ms must be an integer/) });
    expect(perToken).toMatchObject({ code: 2, stderr: expect.stringMatching(/--prefill-token-us must be an integer from 0 to 1000000/) });
    expect(events).toMatchObject({ code: 2, stderr: expect.stringMatching(/--kv-events-endpoint must be a ZMQ address/) });
    expect(replay).toMatchObject({ code: 2, stderr: expect.stringMatching(/need --kv-events-endpoint/) });
  });
});
