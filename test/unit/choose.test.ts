/**
 * The choose stage (src/proxy/serve/choose.ts): what the balancer reads and which
 * replicas it may pick among, on a real routing view and real balancers. The
 * balancers' own choices are tested with them (test/unit/balancers*.test.ts); here, what
 * the stage hands them: prompt keys only where they are read and a body is held, the
 * multiplexed model's holders, a session's first attempt, and the feedback.
 */
import { describe, expect, it, vi } from "vitest";
import { DEFAULT_PREFIX_POLICY, defineDeployment, type Deployment } from "../../src/config/deployment.ts";
import { createBalancer, type ActiveBalancer, type BalanceInput, type PrefixBelief } from "../../src/policy/balancers/index.ts";
import { chooseFor, requestPromptKeys, type ChoiceRequest } from "../../src/proxy/serve/choose.ts";
import { HeldBody } from "../../src/proxy/serve/request.ts";
import type { SessionAffinity } from "../../src/proxy/serve/session-affinity.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { Membership } from "../../src/state/membership.ts";
import { registerMessage, reportMessage, T0 } from "../fixtures/control-messages.ts";

const llm = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "llm" }, openai: { models: ["tiny-lm"] }, policy: { balancer: "prefix_cache" } });
const chat = new TextEncoder().encode(JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: "Tell me about the edge, at some length. ".repeat(20) }] })).slice().buffer;

/** A view of replicas `ids` (ready, idle), with `models` held where given. */
function viewOf(replicas: { id: string; models?: string[] }[]): RoutingView {
  const m = new Membership();
  for (const r of replicas) {
    m.register(registerMessage(r.id), T0);
    m.report(reportMessage(r.id, 1, { models: r.models ?? [] }), T0);
  }
  const view = new RoutingView();
  view.applySnapshot(m.snapshot("llm", T0), Date.now());
  return view;
}

/** The deployment's balancer, with every input it was handed kept. */
function watched(d: Deployment): { balancer: ActiveBalancer; inputs: BalanceInput[]; served: string[] } {
  const balancer = createBalancer(d.policy.balancer, d.policy.prefix ?? DEFAULT_PREFIX_POLICY);
  const inputs: BalanceInput[] = [];
  const served: string[] = [];
  const pick = balancer.pick.bind(balancer);
  vi.spyOn(balancer, "pick").mockImplementation((candidates, input) => {
    inputs.push(input);
    return pick(candidates, input);
  });
  const own = balancer.served?.bind(balancer);
  balancer.served = (replica, input) => {
    served.push(replica);
    own?.(replica, input);
  };
  return { balancer, inputs, served };
}

const request = (d: Deployment, view: RoutingView, balancer: ActiveBalancer, o: Partial<ChoiceRequest> = {}): ChoiceRequest => ({
  deployment: d,
  target: { path: "/v1/chat/completions" },
  view,
  balancer,
  client: "ip:1",
  background: () => undefined,
  ...o,
});

describe("choose: what the balancer reads", () => {
  it("keys the prompt for a balancer that reads it, from the body the edge holds, with the model as the extra key", async () => {
    const view = viewOf([{ id: "a" }, { id: "b" }]);
    const w = watched(llm);
    await chooseFor(request(llm, view, w.balancer), chat, "tiny-lm", undefined).next(1, new Set());
    expect(w.inputs[0]!.prompt!.keys).toEqual(requestPromptKeys(llm, "/v1/chat/completions", chat, "tiny-lm")!.keys);
    // Another extra key is another prompt.
    expect(w.inputs[0]!.prompt!.keys).not.toEqual(requestPromptKeys(llm, "/v1/chat/completions", chat, undefined)!.keys);

    // The route's held body is read as well (its one parse), when no bytes are passed.
    const held = watched(llm);
    await chooseFor(request(llm, view, held.balancer, { held: new HeldBody(chat) }), undefined, "tiny-lm", undefined).next(1, new Set());
    expect(held.inputs[0]!.prompt!.keys).toEqual(w.inputs[0]!.prompt!.keys);
  });

  it("keys nothing for a balancer that does not read the prompt, for a body still streaming, or for a path with no prompt", async () => {
    const view = viewOf([{ id: "a" }, { id: "b" }]);
    const rr = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "llm" }, openai: { models: ["tiny-lm"] }, policy: { balancer: "round_robin" } });
    for (const [d, body, path] of [
      [rr, chat, "/v1/chat/completions"],
      [llm, new ReadableStream<Uint8Array>(), "/v1/chat/completions"],
      [llm, chat, "/llm/generate"],
    ] as const) {
      const w = watched(d);
      await chooseFor(request(d, view, w.balancer, { target: { path } }), body, undefined, undefined).next(1, new Set());
      expect(w.inputs[0]!.prompt, `${d.policy.balancer} ${path}`).toBeUndefined();
    }
  });

  it("says why a prompt fell back to bytes keys, in the trace", async () => {
    const view = viewOf([{ id: "a" }]);
    const qwen = { ...llm, backend: { kind: "external" as const }, policy: { ...llm.policy, prefix: { tokenizer: "qwen3" as const, loadFactor: 0.25, prefillWeight: 1 } } } as Deployment;
    const image = new TextEncoder().encode(JSON.stringify({ model: "m", messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, { type: "image_url", image_url: { url: "data:," } }] }] })).slice().buffer;
    const trace: { promptFallback?: string } = {};
    const w = watched(qwen);
    await chooseFor(request(qwen, view, w.balancer, { trace }), image, undefined, undefined).next(1, new Set());
    expect(trace.promptFallback).toBe("non_text_content");
    expect(w.inputs[0]!.prompt).toBeDefined();
  });
});

describe("choose: what the choice believed, in the trace", () => {
  it("the prompt's blocks and the prefix believed on the chosen replica: none on a fresh view, all after this isolate sent it there", async () => {
    const view = viewOf([{ id: "a" }, { id: "b" }]);
    const w = watched(llm);
    const first: { trace: { prefix?: PrefixBelief } } = { trace: {} };
    const choice = chooseFor(request(llm, view, w.balancer, first), chat, "tiny-lm", undefined);
    const replica = (await choice.next(1, new Set()))!;
    const blocks = requestPromptKeys(llm, "/v1/chat/completions", chat, "tiny-lm")!.keys.length;
    expect(first.trace.prefix).toEqual({ blocks, blockSize: 16, held: 0, most: 0 });
    await choice.served(replica, new Response("ok"), false);
    const again: { trace: { prefix?: PrefixBelief } } = { trace: {} };
    expect(await chooseFor(request(llm, view, w.balancer, again), chat, "tiny-lm", undefined).next(1, new Set())).toBe(replica);
    expect(again.trace.prefix).toEqual({ blocks, blockSize: 16, held: blocks, most: blocks });
  });
});

describe("choose: the load limit a dispatch carries", () => {
  const lined = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "echo" } });
  const viewLoaded = (loads: Record<string, number>) => {
    const m = new Membership();
    for (const [id, ongoing] of Object.entries(loads)) {
      m.register(registerMessage(id), T0);
      m.report(reportMessage(id, 1, { ongoing }), T0);
    }
    const view = new RoutingView();
    view.applySnapshot(m.snapshot("llm", T0), Date.now());
    return view;
  };

  it("is drawn over every candidate of the request, a tried one included, and not for a session's own replica nor where nowhere else is left", async () => {
    // a: 7 of 8, b and c idle. Line: 2 × mean((8 + 1 + 1) / 24) = 0.833, so 6 requests on a replica of 8.
    const view = viewLoaded({ a: 7, b: 0, c: 0 });
    const balancer = createBalancer({ filters: ["load_line"], picker: "two_choices" }, DEFAULT_PREFIX_POLICY);
    const choice = chooseFor(request(lined, view, balancer), undefined, undefined, undefined);
    const first = (await choice.next(1, new Set()))!;
    expect(first.id).not.toBe("a");
    expect(choice.loadLimit(first)).toBe(6);
    // The first refused: the line for the next is still over a, b and c (over a and the other alone it would be 9).
    const second = (await choice.next(2, new Set([first.id])))!;
    expect(choice.loadLimit(second)).toBe(6);
    // With only one candidate left, nowhere else to go: no limit.
    const third = (await choice.next(3, new Set(["b", "c"])))!;
    expect(third.id).toBe("a");
    expect(choice.loadLimit(third)).toBeUndefined();
    // A session's first attempt goes to its own replica without one.
    const affinity = { choose: async (_d: unknown, _id: unknown, candidates: { id: string }[]) => candidates.find((c) => c.id === "b") } as unknown as SessionAffinity;
    const bound = chooseFor(request(lined, view, balancer, { session: { id: "s", affinity } }), undefined, undefined, undefined);
    const own = (await bound.next(1, new Set()))!;
    expect(own.id).toBe("b");
    expect(bound.loadLimit(own)).toBeUndefined();
  });
});

describe("choose: the candidates", () => {
  it("a multiplexed model's request goes to a replica holding it, which then counts it as loading where it was sent", async () => {
    const view = viewOf([{ id: "a" }, { id: "b", models: ["m1"] }, { id: "c" }]);
    const w = watched(llm);
    const choice = chooseFor(request(llm, view, w.balancer, { model: "m1" }), undefined, undefined, undefined);
    expect(w.inputs).toEqual([]);
    const first = await choice.next(1, new Set());
    expect(first!.id).toBe("b");
    expect(w.inputs[0]!.model).toBe("m1");
    // Past the holder, another replica: it is now counted as loading the model.
    const second = await choice.next(2, new Set(["b"]));
    expect(second!.id).not.toBe("b");
    expect(second!.loading).toContain("m1");
  });

  it("a replica whose liveness lapsed here is still tried when it holds the request's model, and only then", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      const view = viewOf([{ id: "a", models: ["m1"] }, { id: "b" }]);
      // Long past every entry's liveness in this view (no refresh: the view is as fetched).
      vi.setSystemTime(Date.now() + 60_000);
      const w = watched(llm);
      expect((await chooseFor(request(llm, view, w.balancer, { model: "m1" }), undefined, undefined, undefined).next(1, new Set()))!.id).toBe("a");
      expect(await chooseFor(request(llm, view, w.balancer, { model: "m2" }), undefined, undefined, undefined).next(1, new Set())).toBeUndefined();
      expect(await chooseFor(request(llm, view, w.balancer), undefined, undefined, undefined).next(1, new Set())).toBeUndefined();
      // A session's binding is offered the lapsed replicas too (its bound one may be among them).
      let lapsed: string[] = [];
      const affinity = {
        choose: async (_d: unknown, _id: unknown, _c: unknown, _p: unknown, _client: unknown, late: () => { id: string }[]) => {
          lapsed = late().map((e) => e.id).sort();
          return undefined;
        },
      } as unknown as SessionAffinity;
      await chooseFor(request(llm, view, w.balancer, { session: { id: "s", affinity } }), undefined, undefined, undefined).next(1, new Set(["b"]));
      expect(lapsed).toEqual(["a"]);
    } finally {
      vi.useRealTimers();
    }
  });

  it("nothing left to try: undefined", async () => {
    const view = viewOf([{ id: "a" }]);
    const w = watched(llm);
    expect(await chooseFor(request(llm, view, w.balancer), undefined, undefined, undefined).next(2, new Set(["a"]))).toBeUndefined();
  });

  it("a session's first attempt asks its binding (with the prompt's pick for a new session); later attempts pick", async () => {
    const view = viewOf([{ id: "a" }, { id: "b" }]);
    const w = watched(llm);
    const calls: { placeNew: boolean; token: string | undefined }[] = [];
    const affinity = {
      choose: async (_d: Deployment, _id: string, candidates: readonly { id: string }[], pick: (c: readonly { id: string }[]) => unknown, _client: string, _lapsed: unknown, token: string | undefined, placeNew: unknown) => {
        calls.push({ placeNew: placeNew !== undefined, token });
        return candidates.find((c) => c.id === "b") ?? pick(candidates);
      },
    } as unknown as SessionAffinity;
    const choice = chooseFor(request(llm, view, w.balancer, { session: { id: "s1", affinity } }), chat, undefined, "tok");
    expect((await choice.next(1, new Set()))!.id).toBe("b");
    expect(calls).toEqual([{ placeNew: true, token: "tok" }]);
    // The second attempt does not ask the binding again.
    expect((await choice.next(2, new Set(["b"])))!.id).toBe("a");
    expect(calls).toHaveLength(1);
    // Without a prompt (no body held), a new session is placed by the binding alone.
    const bare = chooseFor(request(llm, view, watched(llm).balancer, { session: { id: "s2", affinity } }), undefined, undefined, undefined);
    await bare.next(1, new Set());
    expect(calls[1]).toEqual({ placeNew: false, token: undefined });
  });

  it("tells the balancer which replica accepted the request", async () => {
    const view = viewOf([{ id: "a" }]);
    const w = watched(llm);
    const choice = chooseFor(request(llm, view, w.balancer), chat, undefined, undefined);
    const r = await choice.next(1, new Set());
    expect(w.served).toEqual([]);
    await choice.served(r!, new Response("ok"), false);
    expect(w.served).toEqual(["a"]);
  });
});
