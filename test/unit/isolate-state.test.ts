/**
 * What one isolate keeps between requests (src/proxy/serve/isolate-state.ts), with
 * its state-plane calls given as IsolateSources: the pending-request caps and their
 * release, the telemetry flush and its one timer, and the per-deployment balancers
 * and gates kept for the isolate's life. The Durable Object paths run in the
 * workers and e2e tests.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { defineDeployment, type Deployment } from "../../src/config/deployment.ts";
import { registerServedDeployments } from "../../src/config/served.ts";
import type { Env } from "../../src/env.ts";
import { pendingShareOf } from "../../src/proxy/serve/admit.ts";
import { IsolateState } from "../../src/proxy/serve/isolate-state.ts";
import { FLUSH_INTERVAL_MS } from "../../src/telemetry/proxy-metrics.ts";
import { RELAYED_SNAPSHOT_TTL_MS, SNAPSHOT_TTL_MS } from "../../src/proxy/serve/view.ts";
import { Membership } from "../../src/state/membership.ts";
import { HELD_DEMAND_INTERVAL_MS } from "../../src/state/routing-shards.ts";
import type { TelemetryFlush } from "../../src/telemetry/types.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";

const env = { SWITCHYARD_REPLICA_SECRET: "isolate-state-secret" } as unknown as Env;
const deployment = (maxPendingRequests: number, perClient?: number): Deployment =>
  defineDeployment({
    name: "d",
    routePrefix: "/d",
    backend: { kind: "echo" },
    access: { public: true },
    limits: { maxPendingRequests, ...(perClient === undefined ? {} : { maxPendingRequestsPerClient: perClient }) },
  });

describe("pending requests: the isolate's cap and each client's share of it", () => {
  it("admits up to the deployment's cap, not one more, and counts each release once", () => {
    const state = new IsolateState(env);
    const d = deployment(2, 2);
    const a = state.admit(d, "c1");
    const b = state.admit(d, "c2");
    expect(typeof a).toBe("function");
    expect(typeof b).toBe("function");
    expect(state.pending.get("d")).toBe(2);
    expect(state.admit(d, "c3")).toBe("isolate");
    (a as () => void)();
    (a as () => void)();
    expect(state.pending.get("d")).toBe(1);
    expect(typeof state.admit(d, "c3")).toBe("function");
    expect(state.admit(d, "c4")).toBe("isolate");
  });

  it("caps a client at its share, whose requests count down one by one as they end", () => {
    const state = new IsolateState(env);
    const d = deployment(16, 3);
    expect(pendingShareOf(d)).toBe(3);
    const mine = [state.admit(d, "c"), state.admit(d, "c"), state.admit(d, "c")] as (() => void)[];
    expect(mine.every((m) => typeof m === "function")).toBe(true);
    expect(state.admit(d, "c")).toBe("client");
    mine[0]!();
    // One of three ended: one more fits, and then the share is full again.
    expect(typeof state.admit(d, "c")).toBe("function");
    expect(state.admit(d, "c")).toBe("client");
    expect(state.pendingClients).toBe(1);
  });

  it("forgets a client once its last request ends: a thousand one-off clients leave nothing behind", () => {
    const state = new IsolateState(env);
    const d = deployment(4, 1);
    for (let i = 0; i < 1_000; i++) (state.admit(d, `198.51.100.${i}`) as () => void)();
    expect(state.pendingClients).toBe(0);
    expect(state.pending.get("d")).toBe(0);
    const held = state.admit(d, "a") as () => void;
    expect(state.pendingClients).toBe(1);
    held();
    expect(state.pendingClients).toBe(0);
  });
});

describe("telemetry: counts sent when due, and by one timer when a quiet isolate would keep them", () => {
  afterEach(() => {
    vi.useRealTimers();
    vi.restoreAllMocks();
  });

  const outcome = { status: 200, attempts: 1, rejections: 0, ejections: 0, ttfbMs: 5 };

  it("sends what is due at once, arms one timer for what is not, and sends it when it comes due", async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const flushes: TelemetryFlush[] = [];
    const state = new IsolateState(env, { flush: async (f) => void flushes.push(f) });
    const background: Promise<unknown>[] = [];
    const bg = (p: Promise<unknown>) => void background.push(p);

    state.flushMetrics(bg);
    expect(background).toHaveLength(0); // nothing counted: nothing to send, no timer
    state.metrics.recordResponse("d", outcome);
    state.flushMetrics(bg);
    expect(background).toHaveLength(1);
    await background[0];
    expect(flushes).toHaveLength(1);
    expect(flushes[0]!.deltas.map((x) => x.deployment)).toEqual(["d"]);

    // Not due for FLUSH_INTERVAL_MS: one timer, however many requests end meanwhile.
    state.metrics.recordResponse("d", outcome);
    state.flushMetrics(bg);
    state.flushMetrics(bg);
    expect(background).toHaveLength(2);
    vi.advanceTimersByTime(FLUSH_INTERVAL_MS);
    await Promise.resolve();
    expect(flushes).toHaveLength(1); // the timer waits past the due time, not up to it
    vi.advanceTimersByTime(1);
    await background[1];
    expect(flushes).toHaveLength(2);

    // The timer is spent: the next quiet spell arms another.
    state.metrics.recordResponse("d", outcome);
    state.flushMetrics(bg);
    expect(background).toHaveLength(3);
    vi.advanceTimersByTime(FLUSH_INTERVAL_MS + 1);
    await background[2];
    expect(flushes).toHaveLength(3);
    expect(flushes.every((f) => f.deltas.length === 1)).toBe(true);
  });

  it("logs a flush that fails, and the request's background work still ends", async () => {
    const errors: string[] = [];
    vi.spyOn(console, "error").mockImplementation((l: string) => void errors.push(l));
    const state = new IsolateState(env, { flush: async () => Promise.reject(new Error("telemetry shard gone")) });
    const background: Promise<unknown>[] = [];
    state.metrics.recordResponse("d", outcome);
    state.flushMetrics((p) => void background.push(p));
    await expect(background[0]).resolves.toBeUndefined();
    expect(errors.map((e) => JSON.parse(e) as unknown)).toEqual([{ msg: "telemetry flush failed", error: "Error: telemetry shard gone" }]);
  });
});

describe("per-deployment state kept for the isolate's life", () => {
  it("one balancer and one admission gate per deployment, the same on every request", () => {
    const state = new IsolateState(env);
    const d = deployment(4);
    expect(state.balancerFor(d)).toBe(state.balancerFor(d));
    expect(state.gateFor("d")).toBe(state.gateFor("d"));
    expect(state.gateFor("d")).not.toBe(state.gateFor("e"));
  });

  it("a split request's legs take their own balancers where openai.disaggregation names them, else the deployment's", () => {
    const state = new IsolateState(env);
    const pd = (legs: object) =>
      defineDeployment({ name: "pd", routePrefix: "/pd", backend: { kind: "llm", model: "tiny-lm" }, openai: { models: ["tiny-lm"], disaggregation: { protocol: "sglang", ...legs } }, policy: { balancer: "prefix_cache" } });
    const own = pd({ prefill: "prefix_cache", decode: { filters: [], picker: "two_choices" } });
    expect(state.balancerFor(own).name).toBe("prefix_cache");
    expect(state.balancerFor(own, "decode").name).toBe("custom");
    expect(state.balancerFor(own, "decode").readsPrompt).toBe(false);
    expect(state.balancerFor(own, "prefill")).not.toBe(state.balancerFor(own));
    expect(state.balancerFor(own, "decode")).toBe(state.balancerFor(own, "decode"));
    const plain = pd({});
    expect(state.balancerFor(plain, "prefill")).toBe(state.balancerFor(plain));
    expect(state.balancerFor(plain, "decode")).toBe(state.balancerFor(plain));
    // Checked as policy.balancer is: the field at fault is named.
    expect(() => pd({ decode: "nearest" })).toThrow(/disaggregation.*decode/s);
  });

  it("names its relay's location 'local' until a request tells it Cloudflare's colo", () => {
    expect(new IsolateState(env).location).toBe("local");
  });
});

describe("how often the view is asked again: the deployment's routing settings", () => {
  afterEach(() => {
    vi.useRealTimers();
    registerServedDeployments([]);
  });

  /** An isolate whose snapshots come from one Membership with a live replica, counting the asks. */
  function counted() {
    const asks: string[] = [];
    const membership = new Membership();
    const state = new IsolateState(env, {
      snapshots: async (name) => {
        asks.push(name);
        const now = Date.now();
        membership.register(registerMessage("r1", { deployment: name, url: "http://127.0.0.1:9", max_ongoing_requests: 4 }), now);
        membership.report(reportMessage("r1", asks.length, { deployment: name, ts: now, ongoing: 0 }), now);
        return membership.snapshot(name, now);
      },
    });
    const bg = (p: Promise<unknown>) => void p;
    const view = async (name: string, times = 1) => {
      for (let i = 0; i < times; i++) await state.snapshots.view(name, bg);
      await vi.advanceTimersByTimeAsync(0);
    };
    return { asks, state, view };
  }

  const routed = (name: string, relay: boolean, refreshEveryRequests: number) =>
    defineDeployment({ name, routePrefix: `/${name}`, backend: { kind: "echo" }, access: { public: true }, routing: { shards: 1, relay, refreshEveryRequests } });

  it("through a relay: past its shorter TTL, every refreshEveryRequests requests; without one, past the longer TTL", async () => {
    vi.useFakeTimers({ now: 2_000_000 });
    registerServedDeployments([routed("relayed", true, 3), routed("direct", false, 3)]);
    const { asks, view } = counted();
    await view("relayed");
    await view("direct");
    expect(asks).toEqual(["relayed", "direct"]);
    vi.advanceTimersByTime(RELAYED_SNAPSHOT_TTL_MS + 10);
    await view("relayed", 2);
    await view("direct", 3);
    // The relayed view is past its TTL, two requests of three; the direct one is within its own.
    expect(asks).toEqual(["relayed", "direct"]);
    await view("relayed");
    expect(asks).toEqual(["relayed", "direct", "relayed"]);
    vi.advanceTimersByTime(SNAPSHOT_TTL_MS);
    await view("direct");
    expect(asks.filter((a) => a === "direct")).toHaveLength(2);
  });

  it("a deployment this Worker does not list refreshes past the TTL at every request", async () => {
    vi.useFakeTimers({ now: 2_000_000 });
    const { asks, view } = counted();
    await view("unlisted");
    vi.advanceTimersByTime(SNAPSHOT_TTL_MS + 10);
    await view("unlisted");
    expect(asks).toEqual(["unlisted", "unlisted"]);
  });

  it("while admission keeps a budget here, at the TTL whatever the count of requests", async () => {
    vi.useFakeTimers({ now: 2_000_000 });
    registerServedDeployments([routed("budgeted", true, 1_000)]);
    const { asks, state, view } = counted();
    await view("budgeted");
    vi.advanceTimersByTime(RELAYED_SNAPSHOT_TTL_MS + 10);
    await view("budgeted");
    expect(asks).toHaveLength(1);
    state.gateFor("budgeted").setBudget(8);
    vi.advanceTimersByTime(RELAYED_SNAPSHOT_TTL_MS + 10);
    await view("budgeted");
    expect(asks).toHaveLength(2);
  });
});

describe("held demand told to the autoscaler", () => {
  afterEach(() => vi.useRealTimers());

  it("at most once a HELD_DEMAND_INTERVAL_MS per deployment, under one id for the isolate", async () => {
    vi.useFakeTimers({ now: 3_000_000 });
    const told: [string, string, number][] = [];
    const state = new IsolateState(env, { demand: async (d, isolate, held) => void told.push([d, isolate, held]) });
    const background: Promise<unknown>[] = [];
    const bg = (p: Promise<unknown>) => void background.push(p);
    state.tellDemand("a", 3, bg);
    state.tellDemand("a", 4, bg);
    state.tellDemand("b", 1, bg);
    vi.advanceTimersByTime(HELD_DEMAND_INTERVAL_MS - 1);
    state.tellDemand("a", 5, bg);
    vi.advanceTimersByTime(1);
    state.tellDemand("a", 6, bg);
    await Promise.all(background);
    expect(told.map(([d, , held]) => [d, held])).toEqual([["a", 3], ["b", 1], ["a", 6]]);
    expect(new Set(told.map(([, isolate]) => isolate)).size).toBe(1);
    expect(background).toHaveLength(3);
  });
});
