/**
 * Signed dispatches (docs/protocol.md §2): what the edge signs (WebCrypto, as in
 * the Worker) and what the replica accepts (DispatchGuard, Node's HMAC): a test
 * vector, then every way a request can fail to come from the edge.
 */
import { describe, expect, it } from "vitest";
import {
  DISPATCH_SIGNATURE_WINDOW_MS,
  Header,
  deriveReplicaKey,
  dispatchStringToSign,
  importReplicaKey,
  signDispatch,
  verifyDispatch,
  type DispatchParts,
} from "../../src/protocol/index.ts";
import { DispatchGuard } from "../../src/replica/dispatch-guard.ts";

const T0 = 1_764_511_200_000;
const MASTER = "correct horse battery staple";
const VECTOR: DispatchParts = { timestamp: T0, nonce: 4503599627370496, method: "POST", deployment: "hello", target: "/hello/v1/completions?x=1", requestId: "req-1" };

function clock(start = T0) {
  let t = start;
  return { now: () => t, advance: (ms: number) => void (t += ms) };
}

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
  return { method: seen.method, target: seen.target, header: (n: string) => headers[n], headers };
}

describe("dispatch signatures", () => {
  it("match the documented test vector", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    expect(key).toBe("f8eaeb68a8c16704eb39aa7f9be49d34c01e7201f57666458486f2a633eb4a2f");
    expect(new TextDecoder().decode(dispatchStringToSign(VECTOR))).toBe(
      "switchyard-dispatch/v1\n1764511200000\n4503599627370496\nPOST\nhello\nreq-1\n/hello/v1/completions?x=1",
    );
    const sig = await signDispatch(await importReplicaKey(key), VECTOR);
    expect(sig).toBe("v1=502a3b489571773ae8806dee0865c5fe7eaa227730eeef80caf9fd3011050850");
    expect(await verifyDispatch(await importReplicaKey(key), VECTOR, sig)).toBe(true);
  });

  it("can never be taken for a control-message signature (those sign digits first)", () => {
    expect(new TextDecoder().decode(dispatchStringToSign(VECTOR))).toMatch(/^switchyard-dispatch\/v1\n/);
  });
});

describe("DispatchGuard", () => {
  it("accepts what the edge signed, once", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const c = clock();
    const guard = new DispatchGuard(key, "hello", c.now);
    const req = await signed(key);
    expect(guard.check(req)).toBeNull();
    expect(guard.check(req)).toBe("replayed");
    expect(guard.refused).toEqual({ unsigned: 0, bad_signature: 0, stale_timestamp: 0, replayed: 1 });
  });

  it("refuses a request without the three headers as unsigned", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const guard = new DispatchGuard(key, "hello", clock().now);
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
    const guard = new DispatchGuard(key, "hello", clock().now);
    expect(guard.check(await signed(await deriveReplicaKey(MASTER, "other"), {}, {}))).toBe("bad_signature");
    expect(guard.check(await signed(await deriveReplicaKey(MASTER, "other"), { deployment: "other" }))).toBe("bad_signature");
    const tampered: Partial<DispatchParts>[] = [
      { method: "DELETE" },
      { target: "/hello/admin" },
      { target: "/hello/v1/completions?x=2" },
      { requestId: "req-2" },
      { timestamp: T0 + 1 },
      { nonce: VECTOR.nonce + 1 },
    ];
    for (const t of tampered) expect(guard.check(await signed(key, {}, t)), JSON.stringify(t)).toBe("bad_signature");
    expect(guard.refused.bad_signature).toBe(2 + tampered.length);
  });

  it("refuses malformed signature headers as bad signatures", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const guard = new DispatchGuard(key, "hello", clock().now);
    const req = await signed(key);
    for (const [name, value] of [
      [Header.signature, "v1=zz"],
      [Header.signature, `v2=${"0".repeat(64)}`],
      [Header.signature, `v1=${"0".repeat(64)}`],
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
    const guard = new DispatchGuard(key, "hello", c.now);
    expect(guard.check(await signed(key, { timestamp: T0 - DISPATCH_SIGNATURE_WINDOW_MS - 1, nonce: 1 }))).toBe("stale_timestamp");
    expect(guard.check(await signed(key, { timestamp: T0 + DISPATCH_SIGNATURE_WINDOW_MS + 1, nonce: 2 }))).toBe("stale_timestamp");
    expect(guard.check(await signed(key, { timestamp: T0 - DISPATCH_SIGNATURE_WINDOW_MS, nonce: 3 }))).toBeNull();
    expect(guard.check(await signed(key, { timestamp: T0 + DISPATCH_SIGNATURE_WINDOW_MS, nonce: 4 }))).toBeNull();
  });

  it("a copy of a served request stays refused until its timestamp is stale, and the nonces it remembers stay bounded", async () => {
    const key = await deriveReplicaKey(MASTER, "hello");
    const c = clock();
    const guard = new DispatchGuard(key, "hello", c.now);
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
});
