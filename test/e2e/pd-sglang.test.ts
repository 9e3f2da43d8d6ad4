// Prefill/decode disaggregation routed by the edge in SGLang's protocol (issue 56), on the
// real stack: workerd, two `--role prefill` and one `--role decode` reference replicas
// (each prefill registers its bootstrap port), the deployment in functions-pd-sglang. A
// long prompt's legs go at once to a prefill replica and the decode replica, both with
// bootstrap_host, bootstrap_port and bootstrap_room; the decode reads the prompt's blocks
// from the prefill by room. Text equals the unsplit path's. Then the failures: a client
// that leaves ends both legs; a prefill killed mid-request or refusing its leg leaves the
// request whole on the decode replica, with the same text.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Header } from "../../src/protocol/index.ts";
import { answerOf, sseData, type AnswerUsage } from "../fixtures/sse.ts";
import { startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
const LLM = ["--backend", "llm", "--model", "tiny-lm", "--kv-blocks", "512", "--enable-prompt-tokens-details"];

const viewOf = async () =>
  ((await (await fetch(`${stack.workerdUrl}/-/deployments/pd/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).json()) as { replicas: { id: string; state: string; roles?: string[]; bootstrapPort?: number }[] }).replicas;

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-pd-sglang") });
  await stack.startReplica("pd", { id: "sg-p1", backendArgs: [...LLM, "--role", "prefill"] });
  await stack.startReplica("pd", { id: "sg-p2", backendArgs: [...LLM, "--role", "prefill"] });
  await stack.startReplica("pd", { id: "sg-d1", backendArgs: [...LLM, "--role", "decode"] });
  await until("3 ready replicas in the edge's view", async () => ((await viewOf()).filter((r) => r.state === "ready").length === 3 ? true : undefined), 60_000);
}, 300_000);

afterAll(async () => {
  await stack?.dispose();
});

type Json = Record<string, unknown>;
type Usage = AnswerUsage;
const SYSTEM = "You answer questions about a harbour: its cranes, its quays, the pilot boats, and the ships that wait there for the tide. ";
const chat = (question: string, more: Json = {}): Json => ({ model: "tiny-lm", messages: [{ role: "system", content: SYSTEM.repeat(3) }, { role: "user", content: question }], max_tokens: 20, temperature: 0, ...more });

/** A request to the OpenAI route (split when long) or to the deployment's path route (never split). */
async function ask(route: "openai" | "path", path: string, body: Json, requestId?: string): Promise<{ replica: string | null; text: string; usage: Usage }> {
  const headers: Record<string, string> = { "content-type": "application/json", ...(requestId && { [Header.requestId]: requestId }) };
  const res = await fetch(`${stack.url}${route === "openai" ? "" : "/pd"}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
  expect(res.status, await res.clone().text()).toBe(200);
  const { text, usage } = await answerOf(res, path.endsWith("/chat/completions"));
  return { replica: res.headers.get(Header.replica), text, usage: usage! };
}

const healthz = async (url: string) => (await (await fetch(`${url}/-/healthz`)).json()) as { admitted: number; ongoing: number; kv_transfer_waiters?: number };
const admitted = async (id: string) => (await healthz(stack.replicas.get(id)!.url)).admitted;
/** The edge's request log line for `requestId` (its output comes as it writes it). */
const logLine = async (requestId: string) => {
  let line: string | undefined;
  await until(`the edge's log line for ${requestId}`, async () => (line = stack.logLines.find((l) => l.includes(`"request_id":"${requestId}"`) && l.includes('"pd_prefill"'))) ?? undefined, 20_000);
  return JSON.parse(line!.slice(line!.indexOf("{"))) as { pd_prefill: string | null; pd_fallback?: string; replica?: string };
};

/** Requests a replica's engine counted aborted (vLLM's request_success_total{finished_reason="abort"}). */
async function aborts(url: string): Promise<number> {
  const line = (await (await fetch(`${url}/metrics`)).text()).split("\n").find((l) => l.startsWith("vllm:request_success_total{") && l.includes('finished_reason="abort"'));
  return Number(line?.slice(line.lastIndexOf(" ") + 1) ?? 0);
}

async function kill(id: string): Promise<void> {
  // The stack forgets a replica once its process has exited.
  const r = stack.replicas.get(id);
  if (!r) return;
  if (r.child.exitCode === null && r.child.signalCode === null) process.kill(r.child.pid!, "SIGKILL");
  await r.exited;
}

async function startPrefill(id: string, args: string[]): Promise<string> {
  const r = await stack.startReplica("pd", { id, backendArgs: [...LLM, "--role", "prefill", ...args] });
  await until(`${id} in the edge's view`, async () => ((await viewOf()).some((v) => v.id === id && v.state === "ready") ? true : undefined), 30_000);
  return r.url;
}

describe("P/D through the edge (SGLang's protocol)", () => {
  it("registers each prefill's bootstrap port (the reference replica's own port): the routing state and the edge's view show it", async () => {
    const ports = (list: { id: string; roles?: string[]; bootstrapPort?: number }[]) => Object.fromEntries(list.map((r) => [r.id, [r.roles, r.bootstrapPort]]));
    const port = (id: string) => Number(new URL(stack.replicas.get(id)!.url).port);
    const expected = { "sg-p1": [["prefill"], port("sg-p1")], "sg-p2": [["prefill"], port("sg-p2")], "sg-d1": [["decode"], undefined] };
    expect(ports((await stack.deploymentState("pd")).snapshot.replicas as never)).toEqual(expected);
    expect(ports(await viewOf())).toEqual(expected);
  });

  it("splits a long greedy chat: both legs at once, the decode answers holding the prompt's blocks read by room; its text is the unsplit path's", async () => {
    const before = (await admitted("sg-p1")) + (await admitted("sg-p2"));
    const body = chat("Which crane unloads the grain ships?");
    const split = await ask("openai", "/v1/chat/completions", body, "sg-split-1");
    expect(split.replica).toBe("sg-d1");
    expect(split.usage.prompt_tokens_details!.cached_tokens).toBe(Math.floor(split.usage.prompt_tokens / 16) * 16);
    expect(split.usage.completion_tokens).toBe(20);
    expect((await admitted("sg-p1")) + (await admitted("sg-p2"))).toBe(before + 1);
    const line = await logLine("sg-split-1");
    expect(["sg-p1", "sg-p2"]).toContain(line.pd_prefill);
    expect(line.pd_fallback).toBeUndefined();
    const whole = await ask("path", "/v1/chat/completions", body);
    expect(split.text).toBe(whole.text);
  });

  it("splits a seeded, streamed completion: the same text as the unsplit path's", async () => {
    const body: Json = { model: "tiny-lm", prompt: `${SYSTEM.repeat(3)}When the fog lifted the harbour master`, max_tokens: 24, temperature: 0.8, seed: 99, stream: true, stream_options: { include_usage: true } };
    const split = await ask("openai", "/v1/completions", body);
    expect(split.usage.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    const whole = await ask("path", "/v1/completions", body);
    expect(split.text).toBe(whole.text);
    expect(split.usage.completion_tokens).toBe(whole.usage.completion_tokens);
  });

  it("sends a short prompt whole to the decode replica: no prefill leg", async () => {
    const before = (await admitted("sg-p1")) + (await admitted("sg-p2"));
    const short = await ask("openai", "/v1/chat/completions", { model: "tiny-lm", messages: [{ role: "user", content: "Tide?" }], max_tokens: 5, temperature: 0 });
    expect(short.replica).toBe("sg-d1");
    // Under one block: the choice keys no block of it, and believes nothing; not split either.
    const tiny = await ask("openai", "/v1/completions", { model: "tiny-lm", prompt: "Tide", max_tokens: 5, temperature: 0 });
    expect(tiny.usage.prompt_tokens).toBeLessThan(16);
    expect(tiny.replica).toBe("sg-d1");
    expect((await admitted("sg-p1")) + (await admitted("sg-p2"))).toBe(before);
  });

  it("a body the engines refuse (400) costs at most one pair and the whole request: 3 dispatches, not 5", async () => {
    const admittedAll = async (): Promise<[number, number, number]> => [await admitted("sg-p1"), await admitted("sg-p2"), await admitted("sg-d1")];
    const [p1, p2, d1] = await admittedAll();
    const body = chat("Which quay is the deepest?", { max_tokens: 0 });
    const res = await fetch(`${stack.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("bad_request");
    const [p1After, p2After, d1After] = await admittedAll();
    expect(p1After + p2After - p1 - p2).toBeLessThanOrEqual(1);
    expect(d1After - d1).toBeLessThanOrEqual(2);
  });
});

describe("each leg's own balancer", () => {
  it("a decode leg on load_aware (no prompt read, no cache belief) splits a prompt under the threshold too", async () => {
    const args = ["--backend", "llm", "--model", "qwen3", "--kv-blocks", "256"];
    await stack.startReplica("pd-lb", { id: "lb-p1", backendArgs: [...args, "--role", "prefill"] });
    await stack.startReplica("pd-lb", { id: "lb-d1", backendArgs: [...args, "--role", "decode"] });
    await until("pd-lb's 2 replicas in the edge's view", async () => {
      const res = await fetch(`${stack.workerdUrl}/-/deployments/pd-lb/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
      return ((await res.json()) as { replicas: { state: string }[] }).replicas.filter((r) => r.state === "ready").length === 2 ? true : undefined;
    }, 30_000);
    const res = await fetch(`${stack.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", [Header.requestId]: "lb-short-1" },
      // A full block or more of Qwen3's tokens, under the threshold: a prompt-reading decode choice would not split it.
      body: JSON.stringify({ model: "qwen3", messages: [{ role: "user", content: "When does the tide turn at the north quay tonight, and which pilot boat goes out first?" }], max_tokens: 5 }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(res.headers.get(Header.replica)).toBe("lb-d1");
    const { usage } = (await res.json()) as { usage: Usage };
    expect(usage.prompt_tokens).toBeGreaterThanOrEqual(16);
    expect(usage.prompt_tokens).toBeLessThan(64);
    expect((await logLine("lb-short-1")).pd_prefill).toBe("lb-p1");
    for (const id of ["lb-p1", "lb-d1"]) await stack.stopReplica(id);
  });
});

describe("failures, with both legs in flight", () => {
  /** Stops a replica gracefully (it deregisters: out of the edge's view at once) and waits until the view shows it gone. */
  async function stop(id: string): Promise<void> {
    await stack.stopReplica(id);
    await until(`${id} out of the edge's view`, async () => ((await viewOf()).every((r) => r.id !== id) ? true : undefined), 30_000);
  }

  it("a client that leaves during the prefill ends both legs: the prefill counts an abort, the decode's wait for the room ends", async () => {
    for (const id of ["sg-p1", "sg-p2"]) await stop(id);
    // A prefill replica whose prefill takes 20 ms a token: this prompt's, seconds.
    const slow = await startPrefill("sg-p3", ["--prefill-token-us", "20000"]);
    const aborted = () => aborts(slow);
    const decode = stack.replicas.get("sg-d1")!.url;
    const client = new AbortController();
    const body = { model: "tiny-lm", messages: [{ role: "user", content: `${"The pilot boat waits by the breakwater until a ship signals for a pilot. ".repeat(5)}What does the pilot boat wait for?` }], max_tokens: 10 };
    const request = fetch(`${stack.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: client.signal }).catch((e: unknown) => e);
    // Both legs in flight: the prefill computing, the decode waiting at it for the room.
    await until("the prefill leg running and the decode waiting for its room", async () => {
      const h = await healthz(slow);
      return h.ongoing === 1 && h.kv_transfer_waiters === 1 ? true : undefined;
    }, 20_000);
    const abortsBefore = await aborted();
    client.abort();
    await request;
    await until("the prefill replica to see its leg aborted", async () => ((await aborted()) === abortsBefore + 1 ? true : undefined), 20_000);
    await until("the decode's wait and both slots to end", async () => {
      const [p, d] = [await healthz(slow), await healthz(decode)];
      return p.ongoing === 0 && p.kv_transfer_waiters === 0 && d.ongoing === 0 ? true : undefined;
    }, 20_000);
    await stop("sg-p3");
  });

  it("a prefill that refuses its leg: the edge ends the decode's wait and tries a new pair on another prefill; with none left, the request goes whole (pd_fallback prefill_refused)", async () => {
    // It claims to be idle and refuses every dispatch; its KV bootstrap still answers (the decode waits there).
    const liar = await startPrefill("sg-p4", ["--fault", "lie"]);
    await startPrefill("sg-p6", []);
    // Prompts no replica holds go first where rendezvous places them: some on the liar. Each is split on the other all the same.
    for (let i = 0; i < 6; i++) {
      const body: Json = { model: "tiny-lm", messages: [{ role: "user", content: `${`Quay ${i} has a bollard for every ship that ties up there at high tide. `.repeat(5)}How many bollards?` }], max_tokens: 8, temperature: 0 };
      const got = await ask("openai", "/v1/chat/completions", body, `sg-pair-${i}`);
      expect(got.replica).toBe("sg-d1");
      expect(got.usage.prompt_tokens_details!.cached_tokens).toBe(Math.floor(got.usage.prompt_tokens / 16) * 16);
      const line = await logLine(`sg-pair-${i}`);
      expect(line.pd_prefill).toBe("sg-p6");
      expect(line.pd_fallback).toBeUndefined();
    }
    expect(((await healthz(liar)) as { fault_refusals?: number }).fault_refusals).toBeGreaterThan(0);
    await stop("sg-p6");
    const body: Json = { model: "tiny-lm", messages: [{ role: "user", content: `${"The lighthouse keeper climbs one hundred and twelve steps each evening to light the lamp. ".repeat(5)}How many steps?` }], max_tokens: 12, temperature: 0 };
    const decodeAborts = () => aborts(stack.replicas.get("sg-d1")!.url);
    const abortsBefore = await decodeAborts();
    const got = await ask("openai", "/v1/chat/completions", body, "sg-refused-1");
    expect(got.replica).toBe("sg-d1");
    expect(await logLine("sg-refused-1")).toMatchObject({ pd_prefill: "sg-p4", pd_fallback: "prefill_refused" });
    // The decode leg was ended while it waited for the room (not left to time out there and answer).
    await until("the decode replica to count its leg aborted", async () => ((await decodeAborts()) === abortsBefore + 1 ? true : undefined), 20_000);
    await until("the aborted decode leg's wait to end at the prefill", async () => ((await healthz(liar)).kv_transfer_waiters === 0 ? true : undefined), 20_000);
    const whole = await ask("path", "/v1/chat/completions", body);
    expect(got.text).toBe(whole.text);
    await stop("sg-p4");
  });

  it("a prefill killed mid-request: the request completes on the decode replica, with the unsplit path's text", async () => {
    const slow = await startPrefill("sg-p5", ["--prefill-token-us", "20000"]);
    const body: Json = { model: "tiny-lm", messages: [{ role: "user", content: `${"Every crane on the north quay is painted yellow and numbered from one to nine. ".repeat(5)}Which colour are the cranes?` }], max_tokens: 12, temperature: 0 };
    const answer = ask("openai", "/v1/chat/completions", body, "sg-killed-1");
    await until("the legs in flight", async () => {
      const h = await healthz(slow);
      return h.ongoing === 1 && h.kv_transfer_waiters === 1 ? true : undefined;
    }, 20_000);
    await kill("sg-p5");
    const got = await answer;
    expect(got.replica).toBe("sg-d1");
    expect((await logLine("sg-killed-1")).pd_prefill).toBe("sg-p5");
    const whole = await ask("path", "/v1/chat/completions", body);
    expect(got.text).toBe(whole.text);
  });
  it("a decode replica SIGKILLed mid-stream: the stream is continued whole on another decode replica (never a prefill one), as one stream with the unsplit text", async () => {
    const args = (role: string, more: string[] = []) => ({ backendArgs: [...LLM, "--role", role, ...more] });
    await stack.startReplica("pd", { id: "sg-p7", ...args("prefill") });
    for (const id of ["sg-d2", "sg-d3"]) await stack.startReplica("pd", { id, ...args("decode", ["--decode-ms", "40"]) });
    await stop("sg-d1");
    await until("the new replicas in the edge's view", async () => {
      const ready = new Set((await viewOf()).filter((r) => r.state === "ready").map((r) => r.id));
      return ["sg-p7", "sg-d2", "sg-d3"].every((id) => ready.has(id)) ? true : undefined;
    }, 30_000);
    const generated = async (id: string) => Number(/^vllm:generation_tokens_total\{[^}]*\} (\S+)$/m.exec(await (await fetch(`${stack.replicas.get(id)!.url}/metrics`)).text())![1]);
    const prefillBefore = await admitted("sg-p7");
    const body: Json = { model: "tiny-lm", messages: [{ role: "user", content: `${"The ferry crosses the harbour every hour from the stone steps by the fish market. ".repeat(5)}When does the ferry cross?` }], max_tokens: 40, temperature: 0, stream: true };
    const res = await fetch(`${stack.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", [Header.requestId]: "sg-migrate-1" }, body: JSON.stringify(body) });
    expect(res.status).toBe(200);
    const victim = res.headers.get(Header.replica)!;
    expect(["sg-d2", "sg-d3"]).toContain(victim);
    const before = await generated(victim);
    const reading = (async () => {
      let text = "";
      for await (const data of sseData(res.body!)) {
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data) as { choices: { delta?: { content?: string } }[] };
        for (const c of chunk.choices) text += c.delta?.content ?? "";
      }
      return text;
    })();
    // Killed by its own progress (10 of 40 tokens), not by the client's reading.
    await until(`${victim} a quarter through`, async () => ((await generated(victim)) >= before + 10 ? true : undefined), 30_000);
    await kill(victim);
    const text = await reading;
    await until("the edge's log of the migration", async () => (stack.logLines.some((l) => l.includes('"msg":"stream migrated"') && l.includes(`"from":"${victim}"`)) ? true : undefined), 20_000);
    // The prefill replica took the split's prefill leg only: the continuation went to the other decode replica.
    expect(await admitted("sg-p7")).toBe(prefillBefore + 1);
    // The unsplit text (the path route does not retry a POST whose replica's connection was lost: it may still pick the dead one once).
    let whole = await fetch(`${stack.url}/pd/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: false }) });
    for (let i = 0; whole.status === 502 && i < 3; i++) whole = await fetch(`${stack.url}/pd/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: false }) });
    expect(whole.status).toBe(200);
    expect(text).toBe(((await whole.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content);
  });
});
