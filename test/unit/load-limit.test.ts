/**
 * The bounded-load line checked by the replica (Header.loadLimit, issue 54 item 3): the
 * limit the edge sends is exactly the line its load_line filter draws; a replica admits
 * up to it and refuses over it (`over_limit`, with its exact load); and a request whose
 * chosen replica is over the line moves to the next choice within the same request, on
 * real replicas on loopback, where the edge's view still says the replica is idle.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import fc from "fast-check";
import { DEFAULT_PREFIX_POLICY, defineDeployment } from "../../src/config/deployment.ts";
import { createBalancer } from "../../src/policy/balancers/index.ts";
import { loadLineLimit, underLoadBound } from "../../src/policy/prefix-score.ts";
import { deriveReplicaKey, dispatchLoadLimit, dispatchSignature, Header } from "../../src/protocol/index.ts";
import { judgeAnswer, sessionFollowsRetry, type DispatchContext, type DispatchTrace } from "../../src/proxy/serve/dispatch.ts";
import { attempts } from "../../src/proxy/serve/serve.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { DispatchGuard } from "../../src/replica/dispatch-guard.ts";
import { echoHandler } from "../../src/replica/handlers.ts";
import { ReplicaServer } from "../../src/replica/server.ts";
import { Membership } from "../../src/state/membership.ts";
import { registerMessage, reportMessage, T0 } from "../fixtures/control-messages.ts";
import "../fixtures/workerd-streams.ts";

describe("loadLineLimit", () => {
  const candidate = fc.record({ load: fc.nat(40), capacity: fc.integer({ min: 1, max: 32 }) });
  it("a candidate is under the load line exactly when its load is at most its limit", () => {
    fc.assert(
      fc.property(fc.array(candidate, { minLength: 2, maxLength: 8 }), fc.double({ min: 0, max: 3, noNaN: true }), (cs, epsilon) => {
        const pool = cs.map((c, i) => ({ id: `r${i}`, ...c }));
        const under = new Set(underLoadBound(pool, epsilon).map((c) => c.id));
        for (const c of pool) expect(c.load <= loadLineLimit(pool, c, epsilon)!).toBe(under.has(c.id));
      }),
      { numRuns: 500 },
    );
  });

  it("agrees on the line itself, where floating point once put a replica on both sides (a CI run's counterexample)", () => {
    const pool = [
      { id: "a", load: 17, capacity: 12 },
      { id: "b", load: 3, capacity: 3 },
    ];
    // Mean fullness with this request (18/12 + 4/3) / 2 = 17/12: a is exactly at the line, 17 of 12 slots.
    expect(loadLineLimit(pool, pool[0]!, 0)).toBe(17);
    expect(underLoadBound(pool, 0).map((c) => c.id)).toContain("a");
  });

  it("none with fewer than two candidates: there is nowhere else to go", () => {
    const only = { id: "a", load: 3, capacity: 4 };
    expect(loadLineLimit([only], only)).toBeUndefined();
  });
});

describe("a balancer's load limit", () => {
  const pool = [
    { id: "a", load: 0, capacity: 8, models: [], loading: [] },
    { id: "b", load: 3, capacity: 8, models: [], loading: [] },
  ];
  const input = { random: () => 0.5, now: T0 };
  it("is the load line's where a profile has it, and only where that rule chose", () => {
    const lined = createBalancer({ filters: ["load_line"], picker: "two_choices" }, DEFAULT_PREFIX_POLICY);
    expect(lined.loadLimit?.(pool, pool[0]!, input)).toBe(5);
    // A multiplexed model is placed by its own rule (pickReplicaForModel), not the line.
    expect(lined.loadLimit?.(pool, pool[0]!, { ...input, model: "m" })).toBeUndefined();
    // A prompt-reading profile without the prompt's keys chooses as load_aware: no line either.
    const prefix = createBalancer("prefix_cache", DEFAULT_PREFIX_POLICY);
    expect(prefix.loadLimit?.(pool, pool[0]!, input)).toBeUndefined();
    expect(prefix.loadLimit?.(pool, pool[0]!, { ...input, prompt: { keys: ["0123456789abcdef"], blockSize: 16 } })).toBe(5);
    // No load rule, no limit.
    expect(createBalancer("load_aware", DEFAULT_PREFIX_POLICY).loadLimit).toBeUndefined();
  });
});

describe("a replica's admission under a load limit", () => {
  it("admits while its load is at most the limit, and refuses over it as over_limit", () => {
    const a = new AdmissionControl(8);
    expect(a.tryAdmit(0, 0)).toEqual({ admitted: true });
    expect(a.tryAdmit(0, 1)).toEqual({ admitted: true });
    expect(a.tryAdmit(0, 1)).toEqual({ admitted: false, reason: "over_limit" });
    // No limit: only capacity counts.
    expect(a.tryAdmit()).toEqual({ admitted: true });
    expect(a.counts).toEqual({ admitted: 3, rejected: 1 });
  });

  it("counts queued requests as load, and a limit over capacity still leaves capacity's refusal", () => {
    const a = new AdmissionControl(1, 4);
    expect(a.admitOrQueue(0, 10)).toEqual({ admitted: true });
    expect(a.admitOrQueue(0, 10)).toMatchObject({ admitted: "queued" });
    // ongoing 1 + queued 1 = 2: over a limit of 1, under one of 2.
    expect(a.admitOrQueue(0, 1)).toEqual({ admitted: false, reason: "over_limit" });
    expect(a.admitOrQueue(0, 2)).toMatchObject({ admitted: "queued" });
    const full = new AdmissionControl(1);
    full.tryAdmit();
    expect(full.tryAdmit(0, 100)).toEqual({ admitted: false, reason: "capacity" });
  });

  it("draining is said before over_limit", () => {
    const a = new AdmissionControl(4);
    a.tryAdmit();
    a.drain();
    expect(a.tryAdmit(0, 0)).toEqual({ admitted: false, reason: "draining" });
  });

  it("reads the header as a count, ignoring anything else", () => {
    expect(dispatchLoadLimit({ [Header.loadLimit]: "5" })).toBe(5);
    expect(dispatchLoadLimit({ [Header.loadLimit]: ["0", "9"] })).toBe(0);
    for (const bad of [undefined, "", "-1", "1.5", "x", "99999999", "1e3"]) expect(dispatchLoadLimit({ [Header.loadLimit]: bad })).toBeUndefined();
  });

  it("the edge reads over_limit as a live replica to pass by, not a fault, and a session keeps its replica", () => {
    const load = { seq: 3, ongoing: 6, queued: 0, max: 8, state: "ready" as const };
    expect(judgeAnswer({ status: 503, rejected: "over_limit", load, engineKey: false })).toEqual({ kind: "rejected", why: "over_limit", lying: false });
    // A capacity refusal with room in its header is still a lie.
    expect(judgeAnswer({ status: 503, rejected: "capacity", load, engineKey: false })).toMatchObject({ why: "full", lying: true });
    expect(sessionFollowsRetry("over_limit")).toBe(false);
  });
});

const MASTER = "unit-test-master-secret";
const deployment = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "echo" }, policy: { balancer: "round_robin", requestTimeoutMs: 30_000, backoffBaseMs: 10_000, backoffCapMs: 10_000 } });
const servers = new Map<string, { url: string; server: ReplicaServer; admission: AdmissionControl }>();

beforeAll(async () => {
  const key = await deriveReplicaKey(MASTER, "hello");
  for (const id of ["holder", "other"]) {
    const admission = new AdmissionControl(8);
    const server = new ReplicaServer({ replicaId: id, admission, guard: new DispatchGuard(key, "hello", id), handler: echoHandler() });
    const { port } = await server.listen(0, "127.0.0.1");
    servers.set(id, { url: `http://127.0.0.1:${port}`, server, admission });
  }
});

afterAll(async () => {
  for (const s of servers.values()) await s.server.close();
});

describe("a chosen replica over the line, on real replicas", () => {
  it("refuses at once and the request moves to the next choice within the same request, not after a refresh", async () => {
    // The view, from reports: `holder` idle, `other` with 3 requests. The edge's rule (load_line, then two choices) picks `holder`.
    const m = new Membership();
    for (const id of ["holder", "other"]) {
      m.register(registerMessage(id, { deployment: "hello", url: servers.get(id)!.url, max_ongoing_requests: 8 }), T0);
      m.report(reportMessage(id, 1, { deployment: "hello", ongoing: id === "other" ? 3 : 0 }), T0);
    }
    const view = new RoutingView();
    view.applySnapshot(m.snapshot("hello", T0), Date.now());
    // What the view has not heard yet: other isolates filled `holder` with 6 requests.
    const holder = servers.get("holder")!.admission;
    for (let i = 0; i < 6; i++) expect(holder.tryAdmit()).toEqual({ admitted: true });
    // The line: 2 × mean((0 + 1) / 8, (3 + 1) / 8) = 0.625, so `holder` takes at most 0.625 × 8 = 5.
    const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
    const background: Promise<unknown>[] = [];
    const ctx: DispatchContext = {
      deployment,
      routePrefix: "/hello",
      target: { path: "/hello/x", search: "" },
      headers: new Headers(),
      sign: (p) => dispatchSignature(MASTER, p),
      view,
      balancer: createBalancer({ filters: ["load_line"], picker: "two_choices" }, DEFAULT_PREFIX_POLICY),
      requestId: crypto.randomUUID(),
      background: (p) => background.push(p),
      client: "ip:127.0.0.1",
      trace,
    };
    // A backoff would be 9.9 s (full jitter at 0.99 of 10 s): past the test's own timeout.
    const random = vi.spyOn(Math, "random").mockReturnValue(0.99);
    const res = await attempts(new Request("http://edge/hello/x"), ctx, undefined).finally(() => random.mockRestore());
    expect(await res.text()).toBe("chunk 0\n");
    await Promise.allSettled(background);
    // Refused by `holder` (over its limit of 5 with 6), served by `other` on the second attempt;
    // the backoff was skipped, or the test would time out.
    expect(res.headers.get(Header.replica)).toBe("other");
    expect(trace).toMatchObject({ attempts: 2, rejections: 1 });
    expect(holder.counts.rejected).toBe(1);
    // The refusal's load header told the view what the reports had not.
    expect(view.get("holder")!.load).toBe(6);
    // The next request sees `holder` over the line in the view and goes to `other` at once.
    const again: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
    const res2 = await attempts(new Request("http://edge/hello/x"), { ...ctx, headers: new Headers(), requestId: crypto.randomUUID(), trace: again }, undefined);
    await res2.text();
    expect(res2.headers.get(Header.replica)).toBe("other");
    expect(again).toMatchObject({ attempts: 1, rejections: 0 });
  });
});
