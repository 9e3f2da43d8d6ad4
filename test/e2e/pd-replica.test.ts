// Prefill/decode disaggregation on the reference replica (issue 56), end to end in vLLM's
// protocol with NixlConnector: real replica processes (`--role prefill`, `--role decode`, and
// a unified one), real tiny-lm inference, and a router written here as vLLM's toy proxy
// (examples/online_serving/disaggregated_serving) writes it: the request to the prefill with
// kv_transfer_params {do_remote_decode: true, ...null}, stream off, max_tokens 1, both legs
// under one X-Request-Id; then the original request to the decode with the
// kv_transfer_params the prefill answered. The decode reads the prefill's KV blocks over
// HTTP and computes only the rest. Its text equals the unified replica's, greedy and seeded.
// Then SGLang's protocol with a router written as sgl-router's mini_lb: both legs at once
// with bootstrap_host, bootstrap_port and bootstrap_room, the decode reading the prefill's
// blocks by room. Then the signed read between registered replicas (in this process, the
// replica's own server): refused unsigned or signed for another replica.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Header, KV_TRANSFER_PATH, importReplicaKey, signedDispatchHeaders } from "../../src/protocol/index.ts";
import { parseReplicaArgs, startReplica, UsageError } from "../../src/replica/cli.ts";
import { answerOf, type AnswerUsage } from "../fixtures/sse.ts";
import { waitFor } from "../fixtures/wait.ts";

const ROOT = join(import.meta.dirname, "../..");
const children: ChildProcess[] = [];
const logs = new Map<string, string[]>();
const urls = new Map<string, string>();

/** A standalone tiny-lm replica process; resolves with its URL once it listens. */
async function spawnReplica(id: string, args: string[]): Promise<string> {
  const out: string[] = [];
  logs.set(id, out);
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "src/replica-entry.ts", "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "pd", "--id", id, "--port", "0", "--kv-blocks", "256", "--enable-prompt-tokens-details", ...args],
    { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: "" } },
  );
  children.push(child);
  child.stderr!.on("data", (d: Buffer) => out.push(d.toString()));
  return new Promise<string>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`replica ${id} exited (${code}): ${out.join("")}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const ev = JSON.parse(line) as { event?: string; url?: string };
      if (ev.event === "listening" && ev.url) resolve(ev.url);
    });
  });
}

beforeAll(async () => {
  const [p, d, u] = await Promise.all([spawnReplica("pd-prefill", ["--role", "prefill"]), spawnReplica("pd-decode", ["--role", "decode"]), spawnReplica("pd-unified", [])]);
  urls.set("prefill", p);
  urls.set("decode", d);
  urls.set("unified", u);
}, 120_000);

afterAll(() => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
});

type Json = Record<string, unknown>;
const post = (url: string, path: string, body: Json, requestId: string, headers: Record<string, string> = {}) =>
  fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json", [Header.requestId]: requestId, ...headers }, body: JSON.stringify(body) });

/** vLLM's toy proxy: the prefill leg, then the decode leg with what the prefill answered. */
async function throughPd(path: string, body: Json, requestId: string): Promise<{ prefill: Json; decode: Response }> {
  const leg: Json = { ...body, kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null }, stream: false, max_tokens: 1 };
  if ("max_completion_tokens" in leg) leg.max_completion_tokens = 1;
  delete leg.stream_options;
  delete leg.min_tokens;
  const res = await post(urls.get("prefill")!, path, leg, requestId);
  expect(res.status).toBe(200);
  const prefill = (await res.json()) as Json;
  const decodeBody = prefill.kv_transfer_params ? { ...body, kv_transfer_params: prefill.kv_transfer_params } : body;
  return { prefill, decode: await post(urls.get("decode")!, path, decodeBody, requestId) };
}

/** The text and usage of an answer, streamed (SSE) or not, which must be a 200. */
async function textOf(res: Response, chat: boolean): Promise<{ text: string; usage?: AnswerUsage }> {
  expect(res.status).toBe(200);
  const { text, usage } = await answerOf(res, chat);
  return { text, ...(usage && { usage }) };
}

const health = async (which: string) =>
  (await (await fetch(`${urls.get(which)}/-/healthz`)).json()) as { kv_transfers_held?: number; kv_transfer_blocks_held?: number; kv_transfer_waiters?: number; role?: string };

const SYSTEM = "You are a careful assistant who answers in short sentences about trains, tracks, switches and the yards where they meet. ";
const chatBody = (question: string, more: Json = {}): Json => ({ model: "tiny-lm", messages: [{ role: "system", content: SYSTEM.repeat(2) }, { role: "user", content: question }], max_tokens: 24, ...more });

describe("P/D in vLLM's NixlConnector protocol, on reference replicas", () => {
  it("a greedy chat through prefill and decode answers the unified replica's text; the decode computed only what the blocks did not hold, and the prefill freed them on read", async () => {
    const body = chatBody("Which switch sends a train to the yard?", { temperature: 0 });
    const { prefill, decode } = await throughPd("/v1/chat/completions", body, "pd-greedy-1");
    // The prefill answered where its blocks are, in NixlConnector's fields.
    const params = prefill.kv_transfer_params as Json;
    expect(params).toMatchObject({ do_remote_prefill: true, do_remote_decode: false, remote_engine_id: "pd-prefill", remote_host: "127.0.0.1", remote_port: Number(new URL(urls.get("prefill")!).port), tp_size: 1 });
    expect((prefill.usage as { completion_tokens: number }).completion_tokens).toBe(1);
    const blocks = (params.remote_block_ids as number[]).length;
    expect(blocks).toBeGreaterThan(3);
    const split = await textOf(decode, true);
    const unified = await textOf(await post(urls.get("unified")!, "/v1/chat/completions", body, "pd-greedy-u"), true);
    expect(split.text).toBe(unified.text);
    expect(split.text.length).toBeGreaterThan(0);
    // The decode replica had never seen the prompt: every full block came from the prefill.
    expect(split.usage!.prompt_tokens).toBe(unified.usage!.prompt_tokens);
    expect(split.usage!.prompt_tokens_details!.cached_tokens).toBe(blocks * 16);
    expect(unified.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    expect(await health("prefill")).toMatchObject({ role: "prefill", kv_transfers_held: 0, kv_transfer_blocks_held: 0 });
  });

  it("a seeded, streamed completion through prefill and decode answers the unified replica's text", async () => {
    const body: Json = { model: "tiny-lm", prompt: `${SYSTEM.repeat(2)}The yard master said`, max_tokens: 20, temperature: 0.9, seed: 1234, stream: true, stream_options: { include_usage: true } };
    const { prefill, decode } = await throughPd("/v1/completions", body, "pd-seeded-1");
    expect(prefill.kv_transfer_params).toMatchObject({ do_remote_prefill: true });
    const split = await textOf(decode, false);
    const unified = await textOf(await post(urls.get("unified")!, "/v1/completions", body, "pd-seeded-u"), false);
    expect(split.text).toBe(unified.text);
    expect(split.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
  });

  it("a decode whose blocks cannot be read (read already, or the prefill is gone) computes the prompt itself: the same text, nothing cached", async () => {
    const body = chatBody("How many tracks meet at the yard switch?", { temperature: 0 });
    const { prefill, decode } = await throughPd("/v1/chat/completions", body, "pd-twice-1");
    const first = await textOf(decode, true);
    // The same parameters again, with a prompt the decode has not cached: the prefill freed those blocks on the first read.
    const other: Json = { model: "tiny-lm", messages: [{ role: "user", content: "Tell me about the old signal box by the river crossing, and the keeper who lived there for forty years." }], max_tokens: 24, temperature: 0 };
    const second = await textOf(await post(urls.get("decode")!, "/v1/chat/completions", { ...other, kv_transfer_params: prefill.kv_transfer_params }, "pd-twice-2"), true);
    expect(second.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    const unified = await textOf(await post(urls.get("unified")!, "/v1/chat/completions", other, "pd-twice-u"), true);
    expect(second.text).toBe(unified.text);
    expect(first.text.length).toBeGreaterThan(0);
    // The replica's log comes on its stderr, which may arrive after its answer.
    await waitFor("the decode's log of the unread transfer", () => /KV transfer [0-9a-f-]+ from pd-prefill: not read; computing the prompt here/.test(logs.get("pd-decode")!.join("")));
    // Parameters of another prompt's prefill: its blocks are read (and freed there), but not taken as this prompt's.
    const third = { model: "tiny-lm", messages: [{ role: "user", content: "What did the keeper of the signal box by the river crossing write in his log every morning?" }], max_tokens: 24, temperature: 0 };
    const p3 = (await (await post(urls.get("prefill")!, "/v1/chat/completions", { ...chatBody("Which way does the night freight go?", { temperature: 0 }), max_tokens: 1, stream: false, kv_transfer_params: { do_remote_decode: true } }, "pd-mixed-3")).json()) as Json;
    const mixed = await textOf(await post(urls.get("decode")!, "/v1/chat/completions", { ...third, kv_transfer_params: p3.kv_transfer_params }, "pd-mixed-3"), true);
    expect(mixed.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    expect(mixed.text).toBe((await textOf(await post(urls.get("unified")!, "/v1/chat/completions", third, "pd-mixed-u"), true)).text);
    await waitFor("the decode's log of another prompt's blocks", () => /KV transfer [0-9a-f-]+ from pd-prefill: blocks of another prompt; computing the prompt here/.test(logs.get("pd-decode")!.join("")));
    expect(await health("prefill")).toMatchObject({ kv_transfers_held: 0 });
    // A read of blocks never kept: 404 in the protocol's error shape.
    const res = await post(urls.get("prefill")!, KV_TRANSFER_PATH, { transfer_id: "nothing", block_ids: [1] }, "pd-read-none");
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("kv_blocks_not_found");
  });

  it("a replica without --role ignores kv_transfer_params (as vLLM without a KV connector): no blocks kept", async () => {
    const res = await post(urls.get("unified")!, "/v1/chat/completions", { ...chatBody("Where do the tracks end?"), kv_transfer_params: { do_remote_decode: true }, max_tokens: 1 }, "pd-ignored");
    const b = (await res.json()) as Json;
    expect(res.status).toBe(200);
    expect(b).not.toHaveProperty("kv_transfer_params");
    expect(await health("unified")).not.toHaveProperty("kv_transfers_held");
  });
});

/**
 * SGLang's router (sgl-router's mini_lb): one body to the prefill and the decode server at
 * once, the client's with bootstrap_host (the prefill URL's host), bootstrap_port (its
 * bootstrap port: the reference replica's own) and a random bootstrap_room; the answer is
 * the decode's. `decodeFirst`: the decode leg is sent first and the prefill's only once
 * the decode waits for the room there.
 */
async function throughSglang(path: string, body: Json, requestId: string, decodeFirst = false): Promise<{ prefill: Response; decode: Response; room: number }> {
  const p = new URL(urls.get("prefill")!);
  const room = Math.floor(Math.random() * 2 ** 53);
  const leg: Json = { ...body, bootstrap_host: p.hostname, bootstrap_port: Number(p.port), bootstrap_room: room };
  if (!decodeFirst) {
    const [prefill, decode] = await Promise.all([post(urls.get("prefill")!, path, leg, requestId), post(urls.get("decode")!, path, leg, requestId)]);
    return { prefill, decode, room };
  }
  const decode = post(urls.get("decode")!, path, leg, requestId);
  await waitFor("the decode waiting for its room at the prefill", async () => (await health("prefill")).kv_transfer_waiters === 1);
  const prefill = await post(urls.get("prefill")!, path, leg, requestId);
  return { prefill, decode: await decode, room };
}

describe("P/D in SGLang's protocol (both legs at once), on reference replicas", () => {
  it("a greedy chat: the decode's text is the unified replica's, its prompt's full blocks came from the prefill, which answered one token and holds nothing after", async () => {
    const body = chatBody("Which switch does the SGLang router set?", { temperature: 0 });
    const { prefill, decode } = await throughSglang("/v1/chat/completions", body, "sg-greedy-1");
    const split = await textOf(decode, true);
    const prefillAnswer = (await prefill.json()) as { usage: { completion_tokens: number } };
    expect(prefill.status).toBe(200);
    expect(prefillAnswer.usage.completion_tokens).toBe(1);
    const unified = await textOf(await post(urls.get("unified")!, "/v1/chat/completions", body, "sg-greedy-u"), true);
    expect(split.text).toBe(unified.text);
    expect(split.text.length).toBeGreaterThan(0);
    expect(split.usage!.prompt_tokens_details!.cached_tokens).toBe(Math.floor(unified.usage!.prompt_tokens / 16) * 16);
    expect(await health("prefill")).toMatchObject({ kv_transfers_held: 0, kv_transfer_blocks_held: 0, kv_transfer_waiters: 0 });
  });

  it("a seeded, streamed completion whose decode leg comes first (it waits for the room): the unified replica's text", async () => {
    const body: Json = { model: "tiny-lm", prompt: `${SYSTEM.repeat(2)}The night shift began when`, max_tokens: 20, temperature: 0.9, seed: 4321, stream: true, stream_options: { include_usage: true } };
    const { prefill, decode } = await throughSglang("/v1/completions", body, "sg-seeded-1", true);
    await prefill.text();
    const split = await textOf(decode, false);
    const unified = await textOf(await post(urls.get("unified")!, "/v1/completions", body, "sg-seeded-u"), false);
    expect(split.text).toBe(unified.text);
    expect(split.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    expect(await health("prefill")).toMatchObject({ kv_transfers_held: 0, kv_transfer_waiters: 0 });
  });

  it("a decode whose prefill never comes holds its wait only while its client stays; a replica of both roles ignores the fields (SGLang's null mode)", async () => {
    const p = new URL(urls.get("prefill")!);
    const left = new AbortController();
    const body = { ...chatBody("Who waits at the crossing?", { temperature: 0 }), bootstrap_host: p.hostname, bootstrap_port: Number(p.port), bootstrap_room: 1 };
    const orphan = fetch(`${urls.get("decode")}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: left.signal }).catch((e: unknown) => e);
    await waitFor("the orphan decode waiting at the prefill", async () => (await health("prefill")).kv_transfer_waiters === 1);
    left.abort();
    await orphan;
    await waitFor("the prefill to let the wait go", async () => (await health("prefill")).kv_transfer_waiters === 0);
    // Not a prefill (one token, blocks held) nor a decode (a read): the whole request, as without the fields.
    const withFields = (await (await post(urls.get("unified")!, "/v1/chat/completions", { ...body, bootstrap_room: 2 }, "sg-null-mode")).json()) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } };
    const without = await textOf(await post(urls.get("unified")!, "/v1/chat/completions", chatBody("Who waits at the crossing?", { temperature: 0 }), "sg-null-mode-u"), true);
    expect(withFields.usage.completion_tokens).toBeGreaterThan(1);
    expect(withFields.choices[0]!.message.content).toBe(without.text);
  });
});

describe("the read between registered replicas is signed with the deployment's replica key", () => {
  it("reads with the decode's signature for the prefill's id; refuses an unsigned read and one signed for another replica", async () => {
    const key = randomBytes(32).toString("hex");
    const started: Awaited<ReturnType<typeof startReplica>>[] = [];
    const start = async (id: string) => {
      const command = parseReplicaArgs(["--deployment", "pd", "--edge", "http://127.0.0.1:9", "--id", id, "--port", "0", "--backend", "llm", "--kv-blocks", "128", "--role", "both", "--enable-prompt-tokens-details"], { SWITCHYARD_REPLICA_KEY: key });
      if (command.kind !== "serve") throw new Error(command.kind);
      const r = await startReplica(command.options, { log: () => undefined, fail: (m) => { throw new UsageError(m); }, reportNow: () => Promise.resolve() });
      started.push(r);
      return r.url;
    };
    try {
      const [p, d] = [await start("pd-keyed-p"), await start("pd-keyed-d")];
      const hmac = await importReplicaKey(key);
      let nonce = 1;
      // The router's dispatch, signed as the edge signs it for `replica`.
      const dispatch = async (url: string, replica: string, path: string, body: Json, requestId: string) => {
        const text = JSON.stringify(body);
        const signed = await signedDispatchHeaders(hmac, { method: "POST", deployment: "pd", target: path, requestId, replica, body: text, nonce: nonce++ });
        return fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...signed }, body: text });
      };
      const body = chatBody("Which track is signed?", { temperature: 0 });
      const first = await dispatch(p, "pd-keyed-p", "/v1/chat/completions", { ...body, max_tokens: 1, kv_transfer_params: { do_remote_decode: true } }, "pd-keyed-1");
      expect(first.status).toBe(200);
      const params = ((await first.json()) as Json).kv_transfer_params as Json;
      // Unsigned, and signed for the decode's own id: refused, the blocks stay.
      const read = { transfer_id: params.remote_request_id, block_ids: params.remote_block_ids };
      expect((await post(p, KV_TRANSFER_PATH, read, "pd-keyed-unsigned")).status).toBe(401);
      expect((await dispatch(p, "pd-keyed-d", KV_TRANSFER_PATH, read, "pd-keyed-other")).status).toBe(401);
      // The decode's own signed read: its answer holds the prefill's blocks.
      const decoded = await dispatch(d, "pd-keyed-d", "/v1/chat/completions", { ...body, kv_transfer_params: params }, "pd-keyed-1");
      const answer = (await decoded.json()) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
      expect(decoded.status).toBe(200);
      expect(answer.usage.prompt_tokens_details.cached_tokens).toBe((params.remote_block_ids as number[]).length * 16);
    } finally {
      for (const r of started) await r.server.close();
    }
  });
});
