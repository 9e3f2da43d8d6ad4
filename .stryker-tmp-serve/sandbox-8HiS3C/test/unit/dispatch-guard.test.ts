/**
 * Signed dispatches (docs/protocol.md §2): what the edge signs (WebCrypto, as in
 * the Worker) and what the replica accepts (DispatchGuard, Node's HMAC): a test
 * vector, then every way a request can fail to come from the edge.
 */
// @ts-nocheck

import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import {
  DISPATCH_SIGNATURE_WINDOW_MS,
  Header,
  bodySha256,
  deriveReplicaKey,
  dispatchStringToSign,
  importReplicaKey,
  signDispatch,
  verifyDispatch,
  type DispatchParts,
} from "../../src/protocol/index.ts";
import { DispatchGuard } from "../../src/replica/dispatch-guard.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { ReplicaServer } from "../../src/replica/server.ts";
import { clock as clockFrom } from "../fixtures/clock.ts";

const T0 = 1_764_511_200_000;
const clock = () => clockFrom(T0);
const MASTER = "correct horse battery staple";
const BODY = new TextEncoder().encode('{"prompt":"hi"}');
const VECTOR: DispatchParts = {
  timestamp: T0,
  nonce: 4503599627370496,
  method: "POST",
  deployment: "hello",
  target: "/hello/v1/completions?x=1",
  requestId: "req-1",
  replica: "hello-1",
  bodySha256: "", // filled in below: the digest of BODY
};


/** A request as the replica's server hands it to the guard. */
async function signed(key: string, over: Partial<DispatchParts> = {}, tamper: Partial<DispatchParts> = {}) {
  const parts = { ...VECTOR, ...over };
  const signature = await signDispatch(await importReplicaKey(key), parts);
  const seen = { ...parts, ...tamper };
  const headers: Record<string, string> = {
    [Header.timestamp]: String(seen.timestamp),
    [Header.nonce]: String(seen.nonce),
    [Header.signature]: signature,
    [Header.requestId]: seen.requestId,
    [Header.deployment]: seen.deployment,
  };
  if (seen.bodySha256 !== "") headers[Header.bodySha256] = seen.bodySha256;
  return { method: seen.method, target: seen.target, header: (n: string) => headers[n], headers };
}

beforeAll(async () => {
  VECTOR.bodySha256 = await bodySha256(BODY);
});

describe("dispatch signatures", () => {
  it("match the documented test vector", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    expect(key).toBe("f8eaeb68a8c16704eb39aa7f9be49d34c01e7201f57666458486f2a633eb4a2f");
    expect(VECTOR.bodySha256).toBe(createHash("sha256").update(BODY).digest("hex"));
    expect(new TextDecoder().decode(dispatchStringToSign(VECTOR))).toBe(
      `switchyard-dispatch/v2\n1764511200000\n4503599627370496\nPOST\nhello\nreq-1\n/hello/v1/completions?x=1\nhello-1\n${VECTOR.bodySha256}`,
    );
    const sig = await signDispatch(await importReplicaKey(key), VECTOR);
    expect(sig).toBe("v2=26ad93ab39b952cc31dbee09bd20497cbb4443845fc5f564b7d4ffa164129ed5");
    expect(await verifyDispatch(await importReplicaKey(key), VECTOR, sig)).toBe(true);
  });

  it("can never be taken for a control-message signature (those sign digits first)", () => {
    expect(new TextDecoder().decode(dispatchStringToSign(VECTOR))).toMatch(/^switchyard-dispatch\/v2\n/);
  });
});

describe("DispatchGuard", () => {
  it("accepts what the edge signed, once", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const c = clock();
    const guard = new DispatchGuard(key, "hello", "hello-1", c.now);
    const req = await signed(key);
    expect(guard.check(req)).toBeNull();
    expect(guard.check(req)).toBe("replayed");
    expect(guard.refused).toEqual({ unsigned: 0, bad_signature: 0, stale_timestamp: 0, replayed: 1 });
  });

  it("refuses a request without the three headers as unsigned", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const guard = new DispatchGuard(key, "hello", "hello-1", clock().now);
    const req = await signed(key);
    for (const drop of [Header.timestamp, Header.nonce, Header.signature]) {
      const headers = { ...req.headers };
      delete headers[drop];
      expect(guard.check({ ...req, header: (n) => headers[n] }), drop).toBe("unsigned");
    }
    expect(guard.check({ method: "GET", target: "/priv", header: () => undefined })).toBe("unsigned");
    expect(guard.refused.unsigned).toBe(4);
  });

  it("refuses another deployment's key, and any change to what was signed", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const guard = new DispatchGuard(key, "hello", "hello-1", clock().now);
    expect(guard.check(await signed(await deriveReplicaKey(MASTER, "other"), {}, {}))).toBe("bad_signature");
    expect(guard.check(await signed(await deriveReplicaKey(MASTER, "other"), { deployment: "other" }))).toBe("bad_signature");
    const tampered: Partial<DispatchParts>[] = [
      { method: "DELETE" },
      { target: "/hello/admin" },
      { target: "/hello/v1/completions?x=2" },
      { requestId: "req-2" },
      { timestamp: T0 + 1 },
      { nonce: VECTOR.nonce + 1 },
      // The digest changed, or dropped so that the body would go unchecked.
      { bodySha256: "0".repeat(64) },
      { bodySha256: "" },
    ];
    for (const t of tampered) expect(guard.check(await signed(key, {}, t)), JSON.stringify(t)).toBe("bad_signature");
    // Signed for another replica of the same deployment, and replayed to this one.
    expect(guard.check(await signed(key, { replica: "hello-2" }))).toBe("bad_signature");
    expect(guard.refused.bad_signature).toBe(3 + tampered.length);
  });

  it("refuses malformed signature headers as bad signatures", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const guard = new DispatchGuard(key, "hello", "hello-1", clock().now);
    const req = await signed(key);
    for (const [name, value] of [
      [Header.signature, "v1=zz"],
      [Header.signature, `v2=${"0".repeat(64)}`],
      [Header.signature, `v1=${"0".repeat(64)}`],
      // A v1 dispatch signature (no replica, no body) is not accepted any more, even if it verified.
      [Header.signature, `v1=${"a".repeat(64)}`],
      [Header.timestamp, "soon"],
      [Header.nonce, "-1"],
    ] as const) {
      const headers = { ...req.headers, [name]: value };
      expect(guard.check({ ...req, header: (n) => headers[n] }), `${name}: ${value}`).toBe("bad_signature");
    }
  });

  it(`refuses a timestamp more than ${DISPATCH_SIGNATURE_WINDOW_MS} ms off its clock, either way`, async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const c = clock();
    const guard = new DispatchGuard(key, "hello", "hello-1", c.now);
    expect(guard.check(await signed(key, { timestamp: T0 - DISPATCH_SIGNATURE_WINDOW_MS - 1, nonce: 1 }))).toBe("stale_timestamp");
    expect(guard.check(await signed(key, { timestamp: T0 + DISPATCH_SIGNATURE_WINDOW_MS + 1, nonce: 2 }))).toBe("stale_timestamp");
    expect(guard.check(await signed(key, { timestamp: T0 - DISPATCH_SIGNATURE_WINDOW_MS, nonce: 3 }))).toBeNull();
    expect(guard.check(await signed(key, { timestamp: T0 + DISPATCH_SIGNATURE_WINDOW_MS, nonce: 4 }))).toBeNull();
  });

  it("a copy of a served request stays refused until its timestamp is stale, and the nonces it remembers stay bounded", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const c = clock();
    const guard = new DispatchGuard(key, "hello", "hello-1", c.now);
    const first = await signed(key, { nonce: 1 });
    expect(guard.check(first)).toBeNull();
    for (let i = 2; i <= 100; i++) {
      c.advance(100);
      expect(guard.check(await signed(key, { nonce: i, timestamp: c.now() }))).toBeNull();
    }
    expect(guard.remembered).toBe(100);
    c.advance(DISPATCH_SIGNATURE_WINDOW_MS - 100 * 99);
    expect(guard.check(first)).toBe("replayed");
    c.advance(100 * 99 + 1);
    // Past the window the copy is refused for its timestamp, and the old nonces are gone.
    expect(guard.check(first)).toBe("stale_timestamp");
    expect(guard.check(await signed(key, { nonce: 1000, timestamp: c.now() }))).toBeNull();
    expect(guard.remembered).toBeLessThan(100);
  });

  it("checks a held body against the digest it was signed with: the body sent passes, any other is refused and counted", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const guard = new DispatchGuard(key, "hello", "hello-1", clock().now);
    const req = await signed(key);
    expect(guard.check(req)).toBeNull();
    expect(guard.checkBody(BODY, VECTOR.bodySha256)).toBe(true);
    expect(guard.checkBody(new TextEncoder().encode("TAMPERED-BODY"), VECTOR.bodySha256)).toBe(false);
    expect(guard.checkBody(null, VECTOR.bodySha256)).toBe(false);
    expect(guard.refused.bad_signature).toBe(2);
  });
});

describe("the replica's server checks a held body against its signed digest (issue 51)", () => {
  it("serves the body that was signed, and refuses another with 401 before its handler reads it", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const seen: string[] = [];
    const server = new ReplicaServer({
      replicaId: "hello-1",
      admission: new AdmissionControl(4),
      guard: new DispatchGuard(key, "hello", "hello-1"),
      handler: async (req, res) => {
        let text = "";
        for await (const chunk of req) text += String(chunk);
        seen.push(text);
        res.writeHead(200);
        res.end(text);
      },
    });
    const { port } = await server.listen(0, "127.0.0.1");
    try {
      const send = async (body: Uint8Array, nonce: number) => {
        const parts: DispatchParts = { ...VECTOR, timestamp: Date.now(), nonce, target: "/hello/v1/completions?x=1" };
        const h = await signed(key, parts);
        return fetch(`http://127.0.0.1:${port}${parts.target}`, { method: "POST", headers: { ...h.headers, [Header.protocol]: "1", [Header.replica]: "hello-1" }, body });
      };
      const good = await send(BODY, 11);
      expect(good.status).toBe(200);
      expect(await good.text()).toBe(new TextDecoder().decode(BODY));
      // The same signature and digest, another body (a party on the path changed it): refused, unread by the handler.
      const tampered = await send(new TextEncoder().encode('{"prompt":"evil"}'), 12);
      expect(tampered.status).toBe(401);
      expect(await tampered.json()).toMatchObject({ error: { code: "unauthorized", details: { reason: "bad_signature" } } });
      expect(seen).toEqual([new TextDecoder().decode(BODY)]);
    } finally {
      await server.close();
    }
  });
});
