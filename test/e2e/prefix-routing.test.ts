// Prefix routing through the real stack, from two independent edge isolates (each its own routing view, balancer
// and memory): requests sharing a long prefix meet on one replica whichever isolate routes them, under prefix_hash
// (bytes tokenizer) and prefix_cache (tiny-lm tokenizer), on path-routed bodies and on /v1 with the tiny language
// model (whose replica then serves the shared prefix from its cache); and a session is placed by its prompt, then sticks.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { anchorKey, rendezvousOrder } from "../../src/policy/prefix-score.ts";
import { rendezvousWeight } from "../../src/protocol/hashing.ts";
import { requestPromptKeys } from "../../src/proxy/serve/choose.ts";
import pc from "./fixtures/prefix-routing/pc.ts";
import { signedFetch, startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
const auth = () => ({ authorization: `Bearer ${stack.adminSecret}` });

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/prefix-routing"), edgeIsolates: 2 });
  // Both isolates see all three replicas of both deployments before anything is measured.
  for (const url of stack.edgeUrls) {
    for (const [d, n] of [["ph", 3], ["pc", 3], ["pe", 3], ["llm", 2]] as const) {
      await until(`${d}'s ${n} replicas in ${url}'s view`, async () => {
        const res = await fetch(`${url}/-/deployments/${d}/view`, { headers: auth() });
        const view = (await res.json()) as { replicas: { state: string; expiresInMs: number }[] };
        return view.replicas.filter((r) => r.state === "ready" && r.expiresInMs > 0).length === n ? true : undefined;
      });
    }
  }
});
afterAll(async () => {
  await stack?.dispose();
});

/** A long system prompt per group (well over the 16-block anchor in both tokenizers: 16 × 64 bytes). */
const system = (group: number) => `Group ${group}: you are the assistant of team ${group}. ${"Answer briefly, cite the docs, and never guess. ".repeat(40)}`;
const chat = (group: number, question: string) => ({
  model: "any",
  messages: [
    { role: "system", content: system(group) },
    { role: "user", content: question },
  ],
});

async function send(url: string, deployment: string, body: unknown, headers: Record<string, string> = {}): Promise<{ replica: string; token: string | null }> {
  const res = await fetch(`${url}/${deployment}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  expect(res.status).toBe(200);
  expect(await res.text()).toBe("ok");
  return { replica: res.headers.get("x-switchyard-replica")!, token: res.headers.get("x-switchyard-session-token") };
}

describe.each(["ph", "pc"])("%s: requests sharing a long prefix", (deployment) => {
  it("go to one replica from either isolate, whatever question follows", async () => {
    const homes = new Set<string>();
    for (let group = 0; group < 8; group++) {
      const seen = new Set<string>();
      for (let q = 0; q < 6; q++) seen.add((await send(stack.edgeUrls[q % 2]!, deployment, chat(group, `question ${q} of group ${group}?`))).replica);
      expect(seen.size, `group ${group} went to ${[...seen].join(", ")}`).toBe(1);
      homes.add([...seen][0]!);
    }
    // Different prefixes spread: eight groups do not all share one replica of three.
    expect(homes.size).toBeGreaterThan(1);
  });
});

describe("pc: a conversation's next turn through the other isolate", () => {
  const stats = async (url: string) => {
    const res = await fetch(`${url}/-/deployments/pc`, { headers: auth() });
    return (await res.json()) as { isolate: { snapshotRefreshes: number; peerDispatchesLearned: number }; relay: { dispatchNotesPosted: number } };
  };
  const isolate = async (url: string) => (await stats(url)).isolate;
  /** Asks `url`'s routing view (a refresh when due: the isolate posts its dispatches and learns its peers'). */
  const touch = (url: string) => fetch(`${url}/-/deployments/pc/view`, { headers: auth() }).then((r) => r.json());
  const keysOf = (body: unknown) => requestPromptKeys(pc, "/v1/chat/completions", new TextEncoder().encode(JSON.stringify(body)).buffer as ArrayBuffer, undefined)!.keys;

  it("follows the replica the first isolate sent its first turn to, learned through the relay before any report could say so", async () => {
    const [first, second] = stack.edgeUrls as [string, string];
    const ids = [...stack.replicas.values()].filter((r) => r.deployment === "pc").map((r) => ({ id: r.id, load: 0, capacity: 8, models: [], loading: [] }));
    // A short first turn (under the 16-block anchor) and its longer next turn, whose anchors rank different homes:
    // without word of the first dispatch, the second isolate would send the next turn elsewhere.
    let turn1: unknown;
    let turn2: unknown;
    for (let n = 0; n < 200 && turn2 === undefined; n++) {
      const opening = [{ role: "user", content: `Conversation ${n}-${Date.now()}: ${"tell me about the relay. ".repeat(8)}` }];
      const t1 = { model: "any", messages: opening };
      const t2 = { model: "any", messages: [...opening, { role: "assistant", content: "ok" }, { role: "user", content: "and the shards? ".repeat(40) }] };
      const k1 = keysOf(t1);
      if (k1.length === 0 || k1.length >= 16) continue;
      // On an idle fleet each goes to its rendezvous first.
      if (rendezvousOrder(ids, anchorKey(k1)!)[0]!.id !== rendezvousOrder(ids, anchorKey(keysOf(t2))!)[0]!.id) [turn1, turn2] = [t1, t2];
    }
    expect(turn2).toBeDefined();
    // The first isolate's balancer exists and has asked its relay once (from then on it keeps its dispatches for peers).
    await send(first, "pc", { model: "any", messages: [{ role: "user", content: "warm up" }] });
    const asked = (await isolate(first)).snapshotRefreshes;
    await until("a refresh of the first isolate's view", async () => ((await touch(first), await isolate(first)).snapshotRefreshes > asked ? true : undefined));

    const posted = (await stats(first)).relay.dispatchNotesPosted;
    const where = (await send(first, "pc", turn1)).replica;
    await until("the first isolate to post its dispatch to the relay", async () => ((await touch(first), await stats(first)).relay.dispatchNotesPosted > posted ? true : undefined));
    const learned = (await isolate(second)).peerDispatchesLearned;
    await until("the second isolate to learn it", async () => ((await touch(second), await isolate(second)).peerDispatchesLearned > learned ? true : undefined));
    expect((await send(second, "pc", turn2)).replica).toBe(where);
  });
});

describe("llm on /v1 under prefix_cache", () => {
  it("sends chats sharing a long system prompt to one replica from either isolate, which serves the prefix from its cache", async () => {
    const shared = `You are the Switchyard docs assistant. ${"Answer in one short line, from the docs only. ".repeat(16)}`;
    const seen = new Set<string>();
    for (let q = 0; q < 6; q++) {
      const res = await fetch(`${stack.edgeUrls[q % 2]}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "tiny-lm", max_tokens: 2, messages: [{ role: "system", content: shared }, { role: "user", content: `question ${q}?` }] }),
      });
      expect(res.status).toBe(200);
      await res.json();
      seen.add(res.headers.get("x-switchyard-replica")!);
    }
    expect(seen.size).toBe(1);
    const replica = stack.replicas.get([...seen][0]!)!;
    const metrics = await (await signedFetch(stack, "llm")(`${replica.url}/metrics`)).text();
    const hits = Number(/^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$/m.exec(metrics)?.[1] ?? "0");
    // Five of six prompts found the shared system prompt (~780 tokens) cached.
    expect(hits).toBeGreaterThanOrEqual(5 * 16 * 40);
  });
});

describe("a prompt whose replica fills up behind this isolate's back", () => {
  it("moves to another replica within its own dispatch, not after a refresh, and answers while that replica stays full", async () => {
    const url = stack.edgeUrls[0]!;
    const ask = async (question: string) => {
      const body = JSON.stringify(chat(3, question));
      const id = `pe-${question}-${Date.now()}`;
      const res = await fetch(`${url}/pe/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-request-id": id }, body });
      expect(res.status).toBe(200);
      // The echo replica answers the body it got.
      expect(await res.text()).toBe(body);
      return { replica: res.headers.get("x-switchyard-replica")!, id };
    };
    const home = (await ask("first")).replica;
    expect((await ask("second")).replica).toBe(home);
    const replica = stack.replicas.get(home)!;
    // Other isolates' requests take both of its slots: uploads kept open, sent to it directly.
    const ends: (() => void)[] = [];
    const held = [0, 1].map(() =>
      signedFetch(stack, "pe")(`${replica.url}/pe/hold`, {
        method: "POST",
        body: new ReadableStream<Uint8Array>({
          start(c) {
            c.enqueue(new TextEncoder().encode("held"));
            ends.push(() => c.close());
          },
        }),
        duplex: "half",
      } as RequestInit).then(async (r) => {
        expect(r.status).toBe(200);
        await r.text();
      }),
    );
    const counts = async () => (await (await fetch(`${replica.url}/-/healthz`)).json()) as { ongoing: number };
    await until("both of the home's slots taken", async () => ((await counts()).ongoing === 2 ? true : undefined));
    // The next prompt of the group is answered while both slots are still taken: it did not wait for them.
    const moved = await ask("third");
    expect(moved.replica).not.toBe(home);
    expect((await counts()).ongoing).toBe(2);
    // Either the replica's refusal moved it (two attempts: the load limit, checked against its exact load) or the view had learnt already (one).
    const line = await until("the request's log line", async () => stack.logLines.find((l) => l.includes(`"request_id":"${moved.id}"`)));
    expect(Number(/"attempts":(\d+)/.exec(line)![1])).toBeLessThanOrEqual(2);
    ends.forEach((end) => end());
    await Promise.all(held);
  });
});

describe("a session under prefix_hash", () => {
  it("is placed by its prompt, then sticks when its prompt would go elsewhere (in its isolate, and with its token in another)", async () => {
    const [first, second] = stack.edgeUrls as [string, string];
    // Where plain requests of each group go.
    const home = new Map<number, string>();
    for (let group = 0; group < 12; group++) home.set(group, (await send(first, "ph", chat(group, "where?"))).replica);
    const a = 0;
    const b = [...home.keys()].find((g) => home.get(g) !== home.get(a))!;
    expect(b).toBeDefined();
    const replicas = [...new Set(home.values())].sort();
    // A session id whose rendezvous placement is not group a's home, so the prompt, not the id, must place it.
    const session = Array.from({ length: 100 }, (_, i) => `chat-${i}`).find((s) => {
      const byHash = [...stack.replicas.values()].filter((r) => r.deployment === "ph").map((r) => r.id).sort((x, y) => rendezvousWeight(s, y) - rendezvousWeight(s, x))[0];
      return byHash !== home.get(a);
    })!;
    expect(replicas.length).toBeGreaterThan(1);

    const s1 = await send(first, "ph", chat(a, "turn 1"), { "x-session-id": session });
    expect(s1.replica).toBe(home.get(a));
    // The next turns' prompts would go to group b's home: the session stays (and binds on its 2nd request).
    const s2 = await send(first, "ph", chat(b, "turn 2"), { "x-session-id": session });
    expect(s2.replica).toBe(home.get(a));
    const s3 = await send(first, "ph", chat(b, "turn 3"), { "x-session-id": session });
    expect(s3.replica).toBe(home.get(a));
    // In the other isolate the binding token carries the session there with no object call.
    expect(s3.token).not.toBeNull();
    const s4 = await send(second, "ph", chat(b, "turn 4"), { "x-session-id": session, "x-switchyard-session-token": s3.token! });
    expect(s4.replica).toBe(home.get(a));
  });
});
