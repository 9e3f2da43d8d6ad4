// @ts-nocheck
// Session affinity end to end: bindings in the SessionRouter Durable Objects,
// cached in the proxy isolate, rebinding when a replica dies or drains.
import { describe, expect, it } from "vitest";
import { fixtureFunctions, forEachRoutingDesign, sleep, type TestStack } from "./stack-fixture.ts";

let stack: TestStack;

forEachRoutingDesign({ functionsDir: fixtureFunctions, replicas: { tight: 0, secure: 0 } }, (s) => (stack = s), sessionTests);

interface Served {
  session: string;
  status: number;
  replica: string;
  body: string;
  /** ms since the run started, when the response head arrived. */
  at: number;
}

/** Sends `total` requests spread round-robin over `sessions`, `concurrency` at a time. */
async function sessionLoad(
  path: string,
  o: { sessions: string[]; total?: number; durationMs?: number; concurrency: number },
): Promise<Served[]> {
  const out: Served[] = [];
  const started = Date.now();
  let next = 0;
  const more = () => (o.total !== undefined ? next < o.total : Date.now() - started < o.durationMs!);
  const worker = async () => {
    while (more()) {
      const session = o.sessions[next++ % o.sessions.length]!;
      try {
        const res = await fetch(`${stack.url}${path}`, { headers: { "x-session-id": session } });
        const at = Date.now() - started;
        out.push({ session, status: res.status, replica: res.headers.get("x-switchyard-replica") ?? "?", body: await res.text(), at });
      } catch (err) {
        out.push({ session, status: 0, replica: "?", body: String(err), at: Date.now() - started });
      }
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, worker));
  return out;
}

function replicasBySession(served: Served[]): Map<string, Set<string>> {
  const m = new Map<string, Set<string>>();
  for (const s of served) {
    if (!m.has(s.session)) m.set(s.session, new Set());
    m.get(s.session)!.add(s.replica);
  }
  return m;
}

const sessionIds = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);




/** The tests, run once per routing design. */
function sessionTests(): void {
  describe("session affinity on a healthy fleet", () => {
    it("keeps each of 50 sessions on one replica over 1,000 requests, with one binding call per session", async () => {
      const before = await stack.deploymentState("hello");
      // 4 in flight at most, below one replica's capacity (5): no replica can fill up, so
      // no session has a reason to move or spill. (At 6, five consecutive sessions bound
      // to one replica fill it now and then, and that request rightly spills.)
      const served = await sessionLoad("/hello", { sessions: sessionIds("steady", 50), total: 1_000, concurrency: 4 });
      const after = (await stack.deploymentState("hello")) as unknown as { sessions: { resolves: number; rebinds: number; bindings: number } };
      expect(served.filter((s) => s.status !== 200 || s.body !== "hi")).toEqual([]);
      const bySession = replicasBySession(served);
      const spread = new Map<string, number>();
      for (const r of bySession.values()) for (const id of r) spread.set(id, (spread.get(id) ?? 0) + 1);
      console.log(`sessions per replica: ${JSON.stringify(Object.fromEntries(spread))}; rebinds ${after.sessions.rebinds}`);
      expect(bySession.size).toBe(50);
      const moved = [...bySession.entries()].filter(([, replicas]) => replicas.size !== 1);
      expect(moved).toEqual([]);
      // Sessions are spread over the fleet, not piled on one replica.
      const used = new Set([...bySession.values()].map((r) => [...r][0]));
      expect(used.size).toBe(3);
      const calls = after.sessions.resolves - (before as unknown as typeof after).sessions.resolves;
      console.log(`sessions: 1000 requests, 50 sessions, stickiness 100%, ${calls} binding resolves, ${after.sessions.bindings} bindings stored`);
      // One resolve per session, plus one more per session for each 5 s cache TTL that passed.
      expect(calls).toBeGreaterThanOrEqual(50);
      expect(calls).toBeLessThanOrEqual(150);
      expect(after.sessions.rebinds).toBe(0);
    });
  });

  describe("session affinity when a replica dies", () => {
    it("rebinds the dead replica's sessions and fails no request under load", async () => {
      const sessions = sessionIds("kill", 30);
      // Below one replica's capacity (5), so no warm request spills, and each session's home is the replica of its
      // last warm request: its binding. (At 6 a second request could spill and bind elsewhere than the first went,
      // and a home read from the first request then named a replica the session had left.)
      const warm = await sessionLoad("/hello", { sessions, total: 60, concurrency: 4 });
      const home = new Map(warm.map((s) => [s.session, s.replica]));
      // The victim: the replica holding the most sessions.
      const counts = new Map<string, number>();
      for (const r of home.values()) counts.set(r, (counts.get(r) ?? 0) + 1);
      const victimId = [...counts.entries()].sort((a, b) => b[1] - a[1])[0]![0];
      const victim = stack.replicas.get(victimId)!;
      const orphaned = [...home.entries()].filter(([, r]) => r === victimId).map(([s]) => s);
      expect(orphaned.length).toBeGreaterThan(0);

      const load = sessionLoad("/hello", { sessions, durationMs: 5_000, concurrency: 4 });
      await sleep(1_000);
      const killedAt = 1_000;
      victim.child.kill("SIGKILL");
      const served = await load;
      await victim.exited;

      const failed = served.filter((s) => s.status !== 200 || s.body !== "hi");
      console.log(`session kill: ${served.length} requests, ${failed.length} failed, ${orphaned.length} sessions orphaned`);
      expect(failed).toEqual([]);
      // After the kill no request is served by the dead replica...
      expect(served.filter((s) => s.at > killedAt + 500 && s.replica === victimId)).toEqual([]);
      // ...its sessions moved, and each settled on one new replica.
      const late = replicasBySession(served.filter((s) => s.at > killedAt + 3_000));
      for (const s of orphaned) {
        expect(late.get(s)?.size).toBe(1);
        expect(late.get(s)!.has(victimId)).toBe(false);
      }
      // Sessions on surviving replicas never moved.
      for (const [s, r] of home) {
        if (r === victimId) continue;
        expect([...(replicasBySession(served).get(s) ?? [])]).toEqual([r]);
      }
    });
  });

  describe("session affinity when a replica drains", () => {
    it("moves the draining replica's sessions after their in-flight streams finish", async () => {
      const sessions = sessionIds("drain", 20);
      const warm = await sessionLoad("/stream?chunks=1", { sessions, total: 40, concurrency: 4 });
      const home = new Map([...replicasBySession(warm)].map(([s, r]) => [s, [...r][0]!]));
      const victimId = [...home.values()][0]!;
      const victim = stack.replicas.get(victimId)!;
      const onVictim = [...home.entries()].filter(([, r]) => r === victimId).map(([s]) => s);
      // At most 6 long streams: they must all fit within the victim's capacity (8).
      const streaming = onVictim.slice(0, 6);

      // One 1.5 s stream per session of the victim, in flight when it is told to drain.
      const full = Array.from({ length: 15 }, (_, i) => `chunk ${i}\n`).join("");
      const streams = streaming.map((session) =>
        fetch(`${stack.url}/stream?chunks=15&interval_ms=100`, { headers: { "x-session-id": session } }).then(async (r) => ({
          session,
          status: r.status,
          replica: r.headers.get("x-switchyard-replica"),
          body: await r.text(),
        })),
      );
      await sleep(300);
      victim.child.kill("SIGTERM");
      await sleep(100);
      const after = await sessionLoad("/stream?chunks=1", { sessions, durationMs: 2_500, concurrency: 4 });
      const streamed = await Promise.all(streams);
      expect(await victim.exited).toBe(0);

      for (const s of streamed) {
        expect(s).toMatchObject({ status: 200, replica: victimId, body: full });
      }
      expect(after.filter((s) => s.status !== 200 || s.body !== "chunk 0\n")).toEqual([]);
      expect(after.filter((s) => s.replica === victimId)).toEqual([]);
      const moved = replicasBySession(after);
      for (const s of onVictim) expect(moved.get(s)?.size).toBe(1);
      // Sessions elsewhere stayed where they were.
      for (const [s, r] of home) if (r !== victimId) expect([...moved.get(s)!]).toEqual([r]);
      console.log(`session drain: ${onVictim.length} sessions moved off ${victimId}; ${streamed.length} in-flight streams completed; ${after.length} requests after, 0 failed`);
    });
  });

}
