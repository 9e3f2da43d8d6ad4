// Prefill/decode disaggregation routed by the edge (issue 56), on the real stack: workerd,
// two `--role prefill` and one `--role decode` reference replicas registered with their
// roles, the deployment in functions-pd. A long prompt's prefill goes to a prefill
// replica and its decode leg to the decode replica with the kv_transfer_params the
// prefill answered (the decode then holds the prompt's blocks without computing them); a
// short one goes whole to the decode replica. Text equals the unsplit path's, greedy and
// seeded, streamed or not. With both prefill replicas killed, requests still complete:
// the edge falls back to the decode replica doing both.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Header } from "../../src/protocol/index.ts";
import { answerOf, type AnswerUsage } from "../fixtures/sse.ts";
import { startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
const LLM = ["--backend", "llm", "--model", "tiny-lm", "--kv-blocks", "512", "--enable-prompt-tokens-details"];

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-pd") });
  await stack.startReplica("pd", { id: "pd-p1", backendArgs: [...LLM, "--role", "prefill"] });
  await stack.startReplica("pd", { id: "pd-p2", backendArgs: [...LLM, "--role", "prefill"] });
  await stack.startReplica("pd", { id: "pd-d1", backendArgs: [...LLM, "--role", "decode"] });
  await until("3 ready replicas in the edge's view", async () => {
    const res = await fetch(`${stack.workerdUrl}/-/deployments/pd/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
    return ((await res.json()) as { replicas: { state: string }[] }).replicas.filter((r) => r.state === "ready").length === 3 ? true : undefined;
  }, 60_000);
}, 300_000);

afterAll(async () => {
  await stack?.dispose();
});

type Json = Record<string, unknown>;
type Usage = AnswerUsage;
const SYSTEM = "You answer questions about a railway yard: its switches, its tracks, the signal box, and the trains that wait there overnight. ";
const chat = (question: string, more: Json = {}): Json => ({ model: "tiny-lm", messages: [{ role: "system", content: SYSTEM.repeat(3) }, { role: "user", content: question }], max_tokens: 20, temperature: 0, ...more });

/** A request to the OpenAI route (split when long) or to the deployment's path route (never split). */
async function ask(route: "openai" | "path", path: string, body: Json): Promise<{ replica: string | null; text: string; usage: Usage }> {
  const res = await fetch(`${stack.url}${route === "openai" ? "" : "/pd"}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  expect(res.status, await res.clone().text()).toBe(200);
  const { text, usage } = await answerOf(res, path.endsWith("/chat/completions"));
  return { replica: res.headers.get(Header.replica), text, usage: usage! };
}

const admitted = async (id: string) => ((await (await fetch(`${stack.replicas.get(id)!.url}/-/healthz`)).json()) as { admitted: number }).admitted;

describe("P/D through the edge (vLLM's protocol)", () => {
  it("registers each replica's roles: the routing state and the edge's view show them", async () => {
    const roles = Object.fromEntries((await stack.deploymentState("pd")).snapshot.replicas.map((r) => [r.id, (r as { roles?: string[] }).roles]));
    const expected = { "pd-p1": ["prefill"], "pd-p2": ["prefill"], "pd-d1": ["decode"] };
    expect(roles).toEqual(expected);
    const view = (await (await fetch(`${stack.workerdUrl}/-/deployments/pd/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).json()) as { replicas: { id: string; roles?: string[] }[] };
    expect(Object.fromEntries(view.replicas.map((r) => [r.id, r.roles]))).toEqual(expected);
  });

  it("splits a long greedy chat: the decode replica answers, holding the prompt's blocks from a prefill replica; its text is the unsplit path's", async () => {
    const before = (await admitted("pd-p1")) + (await admitted("pd-p2"));
    const body = chat("Which switch leads to track four?");
    const split = await ask("openai", "/v1/chat/completions", body);
    expect(split.replica).toBe("pd-d1");
    // The decode replica never computed this prompt: its full blocks came from the prefill.
    expect(split.usage.prompt_tokens_details!.cached_tokens).toBe(Math.floor(split.usage.prompt_tokens / 16) * 16);
    expect((await admitted("pd-p1")) + (await admitted("pd-p2"))).toBe(before + 1);
    // One answer's usage: the decode's, not the prefill's token too.
    expect(split.usage.completion_tokens).toBe(20);
    // The path route is not split (any replica may serve it whole): the same greedy text.
    const whole = await ask("path", "/v1/chat/completions", body);
    expect(split.text).toBe(whole.text);
  });

  it("splits a seeded, streamed completion: the same text as the unsplit path's", async () => {
    const body: Json = { model: "tiny-lm", prompt: `${SYSTEM.repeat(3)}At midnight the yard master`, max_tokens: 24, temperature: 0.8, seed: 77, stream: true, stream_options: { include_usage: true } };
    const split = await ask("openai", "/v1/completions", body);
    expect(split.usage.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    const whole = await ask("path", "/v1/completions", body);
    expect(split.text).toBe(whole.text);
    expect(split.usage.completion_tokens).toBe(whole.usage.completion_tokens);
  });

  it("sends a short prompt whole to the decode replica: no prefill leg", async () => {
    const before = (await admitted("pd-p1")) + (await admitted("pd-p2"));
    const short = await ask("openai", "/v1/chat/completions", { model: "tiny-lm", messages: [{ role: "user", content: "Hi?" }], max_tokens: 5, temperature: 0 });
    expect(short.replica).toBe("pd-d1");
    expect(short.usage.prompt_tokens).toBeLessThan(64);
    expect((await admitted("pd-p1")) + (await admitted("pd-p2"))).toBe(before);
  });

  it("falls back to the decode replica doing both when every prefill replica is gone: the same text", async () => {
    // SIGKILL: no drain, no deregister; the edge's view still lists them until they go stale.
    for (const id of ["pd-p1", "pd-p2"]) {
      const r = stack.replicas.get(id)!;
      process.kill(r.child.pid!, "SIGKILL");
      await r.exited;
    }
    // A prompt the decode replica has not seen (no block of it cached there).
    const body: Json = { model: "tiny-lm", messages: [{ role: "user", content: `${"The night freight waits on the siding until the signal clears and the yard master waves it on. ".repeat(4)}What waits on the siding?` }], max_tokens: 20, temperature: 0 };
    const split = await ask("openai", "/v1/chat/completions", body);
    expect(split.replica).toBe("pd-d1");
    expect(split.usage.prompt_tokens_details!.cached_tokens).toBe(0);
    const whole = await ask("path", "/v1/chat/completions", body);
    expect(split.text).toBe(whole.text);
  });
});

describe("a client that leaves during the prefill", () => {
  it("aborts the prefill leg on the prefill replica, and the decode replica never gets the request", async () => {
    // The prefill replicas (killed by the test before, when it ran) leave the edge's view first.
    for (const id of ["pd-p1", "pd-p2"]) {
      // The stack forgets a replica once its process has exited.
      const r = stack.replicas.get(id);
      if (!r) continue;
      if (r.child.exitCode === null && r.child.signalCode === null) process.kill(r.child.pid!, "SIGKILL");
      await r.exited;
    }
    await until("only the decode replica in the edge's view", async () => {
      const res = await fetch(`${stack.workerdUrl}/-/deployments/pd/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
      return ((await res.json()) as { replicas: { id: string }[] }).replicas.every((r) => r.id === "pd-d1") ? true : undefined;
    }, 30_000);
    // A prefill replica whose prefill takes 20 ms a token: this prompt's, seconds.
    const slow = await stack.startReplica("pd", { id: "pd-p3", backendArgs: [...LLM, "--role", "prefill", "--prefill-token-us", "20000"] });
    await until("the slow prefill replica in the edge's view", async () => {
      const res = await fetch(`${stack.workerdUrl}/-/deployments/pd/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
      return ((await res.json()) as { replicas: { id: string; state: string }[] }).replicas.some((r) => r.id === "pd-p3" && r.state === "ready") ? true : undefined;
    }, 30_000);
    const aborted = async () => {
      const line = (await (await fetch(`${slow.url}/metrics`)).text()).split("\n").find((l) => l.startsWith("vllm:request_success_total{") && l.includes('finished_reason="abort"'));
      return Number(line?.slice(line.lastIndexOf(" ") + 1) ?? 0);
    };
    const ongoing = async () => ((await (await fetch(`${slow.url}/-/healthz`)).json()) as { ongoing: number }).ongoing;
    const decodeBefore = await admitted("pd-d1");
    const client = new AbortController();
    const body = { model: "tiny-lm", messages: [{ role: "user", content: `${"The signal box keeper writes the time of every train in a long ledger. ".repeat(5)}What does he write?` }], max_tokens: 10 };
    const request = fetch(`${stack.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: client.signal }).catch((e: unknown) => e);
    await until("the prefill leg running on the slow replica", async () => ((await ongoing()) === 1 ? true : undefined), 20_000);
    const abortsBefore = await aborted();
    client.abort();
    await request;
    await until("the prefill replica to see the leg aborted", async () => ((await aborted()) === abortsBefore + 1 ? true : undefined), 20_000);
    // Its slot frees once the handler has returned (just after the engine counted the abort).
    await until("the prefill replica's slot to free", async () => ((await ongoing()) === 0 ? true : undefined), 20_000);
    expect(await admitted("pd-d1")).toBe(decodeBefore);
  });
});
