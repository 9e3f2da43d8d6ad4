// @ts-nocheck
// Session binding tokens end to end: a client that sends back the token each
// response carries is routed with no SessionRouter call; one that ignores it
// keeps the lookup path; bad tokens are ignored; a dead replica's session moves
// and the next response names the new replica.
import { describe, expect, it } from "vitest";
import { deriveSessionTokenKey, readSessionToken, signSessionToken } from "../../src/proxy/serve/session-token.ts";
import { fixtureFunctions, forEachRoutingDesign, until, type TestStack } from "./stack-fixture.ts";

const TOKEN = "x-switchyard-session-token";

let stack: TestStack;

forEachRoutingDesign({ functionsDir: fixtureFunctions, replicas: { tight: 0, secure: 0 } }, (s) => (stack = s), tokenTests);

interface Turn {
  status: number;
  body: string;
  replica: string | null;
  token: string | null;
}

async function turn(session: string, token?: string | null): Promise<Turn> {
  const headers: Record<string, string> = { "x-session-id": session };
  if (token) headers[TOKEN] = token;
  const res = await fetch(`${stack.url}/hello`, { headers });
  return { status: res.status, body: await res.text(), replica: res.headers.get("x-switchyard-replica"), token: res.headers.get(TOKEN) };
}

/** A replica of "hello" other than `id`. */
const helloReplicaOtherThan = (id: string | null) => [...stack.replicas.values()].find((r) => r.deployment === "hello" && r.id !== id)!.id;

/** The session objects' and this isolate's call counters for "hello". */
async function counters(): Promise<{ resolves: number; rebinds: number; storeCalls: number }> {
  const s = (await stack.deploymentState("hello")) as unknown as { sessions: { resolves: number; rebinds: number }; isolate: { sessionStoreCalls: number } };
  return { resolves: s.sessions.resolves, rebinds: s.sessions.rebinds, storeCalls: s.isolate.sessionStoreCalls };
}

/** The tests, run once per routing design. */
function tokenTests(): void {
  describe("session binding tokens", () => {
    it("a client that returns the token gets every turn on one replica, and the session objects see no call for it", async () => {
      const first = await turn("tok-steady");
      expect(first).toMatchObject({ status: 200, body: "hi" });
      expect(first.token).toMatch(/^st1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
      expect(first.token!.length).toBeLessThan(512);
      expect(readSessionToken(first.token!)?.replica).toBe(first.replica);
      const before = await counters();
      let token = first.token;
      for (let n = 0; n < 30; n++) {
        const t = await turn("tok-steady", token);
        expect(t).toMatchObject({ status: 200, body: "hi", replica: first.replica });
        expect(t.token).not.toBeNull();
        token = t.token;
      }
      expect(await counters()).toEqual(before);
    });

    it("a client that ignores the token still sticks, through the session objects", async () => {
      const before = await counters();
      const turns: Turn[] = [];
      for (let n = 0; n < 20; n++) turns.push(await turn("tok-ignored"));
      expect(turns.filter((t) => t.status !== 200 || t.body !== "hi")).toEqual([]);
      expect(new Set(turns.map((t) => t.replica)).size).toBe(1);
      for (const t of turns) expect(readSessionToken(t.token!)?.replica).toBe(turns[0]!.replica);
      // Bound on its second request: a lookup the token client never needed.
      const after = await counters();
      expect(after.resolves).toBeGreaterThan(before.resolves);
      expect(after.storeCalls).toBeGreaterThan(before.storeCalls);
    });

    it("a token minted under the edge's key routes to the replica it names; forged, foreign and expired tokens are ignored", async () => {
      const key = await deriveSessionTokenKey(stack.replicaSecret);
      const home = (await turn("tok-named")).replica;
      const other = helloReplicaOtherThan(home);
      // Valid for the deployment's TTL (600 s): the response hands the same token back.
      const named = await signSessionToken(key, "hello", "tok-named", { replica: other, expiresAt: Math.floor(Date.now() / 1000) + 590 });
      expect(await turn("tok-named", named)).toMatchObject({ status: 200, body: "hi", replica: other, token: named });

      const plain = await turn("tok-forged");
      const elsewhere = helloReplicaOtherThan(plain.replica);
      const inAMinute = Math.floor(Date.now() / 1000) + 60;
      const good = await signSessionToken(key, "hello", "tok-forged", { replica: elsewhere, expiresAt: inAMinute });
      const forged = [
        "garbage",
        "st1..",
        good.slice(0, -2) + (good.endsWith("AA") ? "BA" : "AA"),
        await signSessionToken(key, "hello", "someone-else", { replica: elsewhere, expiresAt: inAMinute }),
        await signSessionToken(key, "other-deployment", "tok-forged", { replica: elsewhere, expiresAt: inAMinute }),
        await signSessionToken(key, "hello", "tok-forged", { replica: elsewhere, expiresAt: Math.floor(Date.now() / 1000) - 1 }),
        await signSessionToken(await deriveSessionTokenKey("not the edge's secret"), "hello", "tok-forged", { replica: elsewhere, expiresAt: inAMinute }),
      ];
      for (const t of forged) {
        const r = await turn("tok-forged", t);
        expect(r, t).toMatchObject({ status: 200, body: "hi", replica: plain.replica });
        expect(r.token).not.toBe(t);
        expect(readSessionToken(r.token!)?.replica).toBe(plain.replica);
      }
    });

    it("when the bound replica is killed, the session moves with no failed request and the next response names the new replica", async () => {
      const first = await turn("tok-kill");
      let token = first.token;
      for (let n = 0; n < 3; n++) token = (await turn("tok-kill", token)).token;
      const victimId = first.replica!;
      const victim = stack.replicas.get(victimId)!;
      const beforeKill = await counters();
      victim.child.kill("SIGKILL");
      await victim.exited;

      const moved = await turn("tok-kill", token);
      expect(moved).toMatchObject({ status: 200, body: "hi" });
      expect(moved.replica).not.toBe(victimId);
      expect(moved.token).not.toBe(token);
      expect(readSessionToken(moved.token!)?.replica).toBe(moved.replica);
      // The move reaches the session object (compare-and-set rebind; from a retry it is sent in the background)...
      const settled = await until("the move to reach the session object", async () => {
        const c = await counters();
        return c.rebinds > beforeKill.rebinds ? c : undefined;
      });
      // ...and from then on the new token holds the session there, with no further object call.
      token = moved.token;
      for (let n = 0; n < 10; n++) {
        const t = await turn("tok-kill", token);
        expect(t).toMatchObject({ status: 200, body: "hi", replica: moved.replica });
        token = t.token;
      }
      expect(await counters()).toEqual(settled);
    });
  });

}
