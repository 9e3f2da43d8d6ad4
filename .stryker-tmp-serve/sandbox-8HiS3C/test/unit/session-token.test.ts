/**
 * Session binding tokens: the pure sign/verify (round trip, every field
 * covered, expiry, malformed input never throws) and the isolate's cache of
 * them (a repeated token costs no HMAC). Real WebCrypto; the clock is injected.
 */
// @ts-nocheck

import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { deriveReplicaKey, importReplicaKey, REPLICA_KEY_LABEL } from "../../src/protocol/index.ts";
import {
  deriveSessionTokenKey,
  readSessionToken,
  SESSION_TOKEN_KEY_LABEL,
  SESSION_TOKEN_MAX_BYTES,
  SESSION_TOKEN_VERSION,
  SESSION_TOKENS_CACHED_MAX,
  SessionTokens,
  sessionTokenKeyFor,
  signSessionToken,
  verifySessionToken,
} from "../../src/proxy/serve/session-token.ts";
import { T0 } from "../fixtures/clock.ts";

const MASTER = "test-master-secret";
const key = await deriveSessionTokenKey(MASTER);
const claim = { replica: "r1", expiresAt: T0 / 1000 + 600 };

const b64url = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url");
const payloadOf = (fields: unknown) => b64url(new TextEncoder().encode(JSON.stringify(fields)));

afterEach(() => {
  vi.restoreAllMocks();
});

describe("signSessionToken / verifySessionToken", () => {
  it("round trip: a token verifies for its deployment and session until it expires", async () => {
    const token = await signSessionToken(key, "chat", "s1", claim);
    expect(await verifySessionToken(key, token, "chat", "s1", T0)).toEqual(claim);
    expect(readSessionToken(token)).toEqual(claim);
  });

  it("is compact: version, base64url payload and a 32-byte MAC, well under the limit even at the longest ids", async () => {
    const token = await signSessionToken(key, "chat", "s1", claim);
    expect(token).toMatch(new RegExp(`^${SESSION_TOKEN_VERSION}\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]{43}$`));
    const longest = await signSessionToken(key, "d".repeat(63), "s".repeat(256), { replica: "r".repeat(128), expiresAt: 99_999_999_999 });
    expect(longest.length).toBeLessThan(260);
    expect(longest.length).toBeLessThan(SESSION_TOKEN_MAX_BYTES);
    expect(await verifySessionToken(key, longest, "d".repeat(63), "s".repeat(256), T0)).toBeDefined();
  });

  it("does not carry the deployment or the session id", async () => {
    const token = await signSessionToken(key, "secret-deployment", "user-4711@example.com", claim);
    const decoded = token
      .split(".")
      .map((p) => Buffer.from(p, "base64url").toString("latin1"))
      .join(" ");
    expect(decoded).not.toContain("secret-deployment");
    expect(decoded).not.toContain("user-4711");
  });

  it("is refused for another deployment, another session, or under another key", async () => {
    const token = await signSessionToken(key, "chat", "s1", claim);
    expect(await verifySessionToken(key, token, "other", "s1", T0)).toBeUndefined();
    expect(await verifySessionToken(key, token, "chat", "s2", T0)).toBeUndefined();
    expect(await verifySessionToken(key, token, "chat", "s1 ", T0)).toBeUndefined();
    expect(await verifySessionToken(await deriveSessionTokenKey("another master"), token, "chat", "s1", T0)).toBeUndefined();
  });

  it("expires at its expiry second", async () => {
    const token = await signSessionToken(key, "chat", "s1", claim);
    expect(await verifySessionToken(key, token, "chat", "s1", claim.expiresAt * 1000 - 1)).toEqual(claim);
    expect(await verifySessionToken(key, token, "chat", "s1", claim.expiresAt * 1000)).toBeUndefined();
    expect(await verifySessionToken(key, token, "chat", "s1", claim.expiresAt * 1000 + 60_000)).toBeUndefined();
  });

  it("is refused when any field is tampered with", async () => {
    const token = await signSessionToken(key, "chat", "s1", claim);
    const [version, payload, mac] = token.split(".") as [string, string, string];
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
    const tampered = [
      `st2.${payload}.${mac}`,
      `${version}.${payloadOf(["r2", claim.expiresAt])}.${mac}`,
      `${version}.${payloadOf(["r1", claim.expiresAt + 3600])}.${mac}`,
      ...Array.from({ length: payload.length }, (_, i) => `${version}.${flip(payload, i)}.${mac}`),
      ...Array.from({ length: mac.length }, (_, i) => `${version}.${payload}.${flip(mac, i)}`),
    ];
    for (const t of tampered) expect(await verifySessionToken(key, t, "chat", "s1", T0), t).toBeUndefined();
  });

  it("a replica key cannot mint a token (the token key has its own label)", async () => {
    expect(SESSION_TOKEN_KEY_LABEL.startsWith(REPLICA_KEY_LABEL)).toBe(false);
    const replicaKey = await importReplicaKey(await deriveReplicaKey(MASTER, "chat"));
    const forged = await signSessionToken(replicaKey, "chat", "s1", claim);
    expect(await verifySessionToken(key, forged, "chat", "s1", T0)).toBeUndefined();
  });

  it("refuses malformed tokens of every kind, without throwing", async () => {
    const good = await signSessionToken(key, "chat", "s1", claim);
    const mac = good.split(".")[2]!;
    const cases = [
      "",
      ".",
      "..",
      "st1",
      "st1.",
      "st1..",
      `st1.${mac}`,
      `${good}.`,
      `${good}.extra`,
      `.${good}`,
      good.replace("st1.", "ST1."),
      good + "A".repeat(SESSION_TOKEN_MAX_BYTES),
      `st1.${"A".repeat(SESSION_TOKEN_MAX_BYTES)}.${mac}`,
      `st1.not+base64/.${mac}`,
      `st1.${payloadOf(["r1", claim.expiresAt])}=.${mac}`,
      `st1.A.${mac}`,
      `st1.${payloadOf(["r1", claim.expiresAt])}.${mac.slice(0, 42)}`,
      `st1.${payloadOf(["r1", claim.expiresAt])}.${mac}AA`,
      `st1.${b64url(new Uint8Array([0xff, 0xfe, 0x80]))}.${mac}`,
      `st1.${b64url(new TextEncoder().encode("not json"))}.${mac}`,
      `st1.${payloadOf({ r: "r1", e: claim.expiresAt })}.${mac}`,
      `st1.${payloadOf("r1")}.${mac}`,
      `st1.${payloadOf(null)}.${mac}`,
      `st1.${payloadOf([])}.${mac}`,
      `st1.${payloadOf(["r1"])}.${mac}`,
      `st1.${payloadOf(["r1", claim.expiresAt, "http://r1.test"])}.${mac}`,
      `st1.${payloadOf([1, claim.expiresAt])}.${mac}`,
      `st1.${payloadOf(["", claim.expiresAt])}.${mac}`,
      `st1.${payloadOf(["bad id", claim.expiresAt])}.${mac}`,
      `st1.${payloadOf(["r".repeat(129), claim.expiresAt])}.${mac}`,
      `st1.${payloadOf(["r1", "1700000600"])}.${mac}`,
      `st1.${payloadOf(["r1", 1.5e9 + 0.5])}.${mac}`,
      `st1.${payloadOf(["r1", 2 ** 60])}.${mac}`,
      `st1.${payloadOf(["r1", null])}.${mac}`,
      `st1.${payloadOf([["r1"], claim.expiresAt])}.${mac}`,
      "st1.\u00e9\u00e9.\u00e9",
      "st1.\u0000.\u0000",
    ];
    for (const t of cases) {
      expect(await verifySessionToken(key, t, "chat", "s1", T0), JSON.stringify(t)).toBeUndefined();
      expect(readSessionToken(t), JSON.stringify(t)).toBeNull();
    }
    // Not even a string (a caller that is not TypeScript).
    expect(await verifySessionToken(key, undefined as unknown as string, "chat", "s1", T0)).toBeUndefined();
  });

  it("refuses arbitrary strings and corruptions of a good token, without throwing (fuzz)", async () => {
    const good = await signSessionToken(key, "chat", "s1", claim);
    const corrupted = fc
      .tuple(fc.nat({ max: good.length }), fc.nat({ max: 4 }), fc.string({ maxLength: 4 }))
      .map(([at, drop, insert]) => good.slice(0, at) + insert + good.slice(at + drop))
      .filter((t) => t !== good);
    const segments = fc.array(fc.oneof(fc.constant("st1"), fc.base64String(), fc.string()), { maxLength: 5 }).map((p) => p.join("."));
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.string(), fc.string({ unit: "binary" }), segments, corrupted), async (t) => {
        expect(await verifySessionToken(key, t, "chat", "s1", T0)).toBeUndefined();
      }),
      { seed: 4242, numRuns: 400 },
    );
  });
});

describe("sessionTokenKeyFor", () => {
  it("derives once per master secret, and refuses an empty one", async () => {
    const a = sessionTokenKeyFor(MASTER);
    expect(sessionTokenKeyFor(MASTER)).toBe(a);
    const token = await signSessionToken(await a, "chat", "s1", claim);
    expect(await verifySessionToken(key, token, "chat", "s1", T0)).toEqual(claim);
    await expect(sessionTokenKeyFor("")).rejects.toThrow(/master secret/);
    // A failed derivation is not cached.
    expect(sessionTokenKeyFor("")).not.toBe(sessionTokenKeyFor(MASTER));
  });
});

describe("SessionTokens", () => {
  function setup() {
    let t = T0;
    const tokens = new SessionTokens(() => Promise.resolve(key), () => t);
    const sign = vi.spyOn(crypto.subtle, "sign");
    const verify = vi.spyOn(crypto.subtle, "verify");
    return { tokens, sign, verify, advance: (ms: number) => (t += ms) };
  }

  it("an issued token verifies, and repeating it costs no HMAC", async () => {
    const { tokens, sign, verify } = setup();
    const token = await tokens.issue("chat", "s1", "r1", 600);
    expect(sign).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 100; i++) expect(await tokens.verify("chat", "s1", token)).toBe("r1");
    expect(verify).not.toHaveBeenCalled();
    expect(sign).toHaveBeenCalledTimes(1);
  });

  it("a token minted elsewhere (another isolate) costs one HMAC, then none", async () => {
    const { tokens, verify } = setup();
    const token = await signSessionToken(key, "chat", "s1", claim);
    for (let i = 0; i < 10; i++) expect(await tokens.verify("chat", "s1", token)).toBe("r1");
    expect(verify).toHaveBeenCalledTimes(1);
    // And a response naming the same replica hands it back unchanged.
    expect(await tokens.issue("chat", "s1", "r1", 600)).toBe(token);
  });

  it("reuses a session's token while more than half its life is left, then mints a fresh one", async () => {
    const { tokens, sign, advance } = setup();
    const first = await tokens.issue("chat", "s1", "r1", 600);
    advance(299_000);
    expect(await tokens.issue("chat", "s1", "r1", 600)).toBe(first);
    expect(sign).toHaveBeenCalledTimes(1);
    advance(1_000);
    const second = await tokens.issue("chat", "s1", "r1", 600);
    expect(second).not.toBe(first);
    expect(readSessionToken(second)).toEqual({ replica: "r1", expiresAt: (T0 + 300_000) / 1000 + 600 });
    // The older one stays valid until it expires.
    expect(await tokens.verify("chat", "s1", first)).toBe("r1");
  });

  it("mints a new token when the session's replica changes", async () => {
    const { tokens } = setup();
    const r1 = await tokens.issue("chat", "s1", "r1", 600);
    const r2 = await tokens.issue("chat", "s1", "r2", 600);
    expect(r2).not.toBe(r1);
    expect(await tokens.verify("chat", "s1", r2)).toBe("r2");
    expect(await tokens.verify("chat", "s1", r1)).toBe("r1");
  });

  it("ignores invalid, foreign and expired tokens, the remembered one included", async () => {
    const { tokens, advance } = setup();
    const token = await tokens.issue("chat", "s1", "r1", 600);
    expect(await tokens.verify("chat", "s2", token)).toBeUndefined();
    expect(await tokens.verify("other", "s1", token)).toBeUndefined();
    expect(await tokens.verify("chat", "s1", "forged")).toBeUndefined();
    expect(await tokens.verify("chat", "s1", token)).toBe("r1");
    advance(600_000);
    expect(await tokens.verify("chat", "s1", token)).toBeUndefined();
  });

  it("a key that cannot be had makes verify answer undefined and issue reject", async () => {
    const tokens = new SessionTokens(() => sessionTokenKeyFor(""), () => T0);
    expect(await tokens.verify("chat", "s1", await signSessionToken(key, "chat", "s1", claim))).toBeUndefined();
    await expect(tokens.issue("chat", "s1", "r1", 600)).rejects.toThrow();
  });

  it(`remembers at most SESSION_TOKENS_CACHED_MAX (${SESSION_TOKENS_CACHED_MAX}) sessions, dropping the oldest`, async () => {
    const { tokens, sign, verify } = setup();
    const first = await tokens.issue("chat", "s0", "r1", 600);
    for (let i = 1; i <= SESSION_TOKENS_CACHED_MAX; i++) await tokens.issue("chat", `s${i}`, "r1", 600);
    expect(tokens.cached).toBe(SESSION_TOKENS_CACHED_MAX);
    sign.mockClear();
    // The oldest was dropped: its token still verifies, with one HMAC.
    expect(await tokens.verify("chat", "s0", first)).toBe("r1");
    expect(verify).toHaveBeenCalledTimes(1);
    expect(tokens.cached).toBe(SESSION_TOKENS_CACHED_MAX);
  });
});
