/**
 * Control-message signing (src/protocol/signing.ts): key derivation and signatures
 * against values computed independently (node:crypto createHmac; the literals were
 * also checked with `openssl dgst -sha256 -hmac`), tampering, header parsing, the
 * nonce counter, the routing object's replay guard, and the CLI's --print-key.
 */
// @ts-nocheck

import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  NONCE_HEADER,
  NonceCounter,
  REPLICA_KEY_LABEL,
  SIGNATURE_HEADER,
  SIGNATURE_WINDOW_MS,
  TIMESTAMP_HEADER,
  deriveReplicaKey,
  importReplicaKey,
  readSignatureHeaders,
  signControl,
  signedHeaders,
  stringToSign,
  timestampFresh,
  verifyControl,
  type SignedParts,
} from "../../src/protocol/index.ts";
import { NONCE_MEMORY_MS, NonceGuard } from "../../src/state/membership.ts";

const MASTER = "correct horse battery staple";
const HELLO_KEY = "f8eaeb68a8c16704eb39aa7f9be49d34c01e7201f57666458486f2a633eb4a2f";
const BODY = JSON.stringify({ protocol: 1, deployment: "hello", replica_id: "hello-1" });
const PARTS: SignedParts = { timestamp: 1764511200000, nonce: 1764511200000000, path: "/-/replicas/deregister", body: BODY };
const SIGNATURE = "v1=a92d69ac5f54d3f9cdc171fe5b927ee7250978853433eb41d1db6ce181f92f22";

const nodeHmac = (key: string | Buffer, data: string) => createHmac("sha256", key).update(data).digest("hex");

describe("replica keys", () => {
  it("are HMAC-SHA256(master, label + deployment) in hex (known answer)", async () => {
    expect(await deriveReplicaKey(MASTER, "hello")).toBe(HELLO_KEY);
    expect(nodeHmac(MASTER, `${REPLICA_KEY_LABEL}hello`)).toBe(HELLO_KEY);
  });

  it("differ per deployment and per master", async () => {
    const a = await deriveReplicaKey(MASTER, "a");
    expect(a).toBe(nodeHmac(MASTER, `${REPLICA_KEY_LABEL}a`));
    expect(await deriveReplicaKey(MASTER, "b")).not.toBe(a);
    expect(await deriveReplicaKey(`${MASTER}!`, "a")).not.toBe(a);
  });

  it("refuse an empty master and keys that are not 64 lowercase hex digits", async () => {
    await expect(deriveReplicaKey("", "hello")).rejects.toThrow(/empty/);
    for (const bad of ["", "abc", HELLO_KEY.toUpperCase(), `${HELLO_KEY}00`, `${HELLO_KEY.slice(0, 63)}g`]) {
      await expect(importReplicaKey(bad), bad).rejects.toThrow(/64 lowercase hex/);
    }
  });
});

describe("signatures", () => {
  it("match HMAC-SHA256(key bytes, `${timestamp}\\n${nonce}\\n${path}\\n${body}`) (known answer)", async () => {
    const key = await importReplicaKey(HELLO_KEY);
    expect(await signControl(key, PARTS)).toBe(SIGNATURE);
    expect(`v1=${nodeHmac(Buffer.from(HELLO_KEY, "hex"), `${PARTS.timestamp}\n${PARTS.nonce}\n${PARTS.path}\n${BODY}`)}`).toBe(SIGNATURE);
    expect(new TextDecoder().decode(stringToSign(PARTS))).toBe(`1764511200000\n1764511200000000\n/-/replicas/deregister\n${BODY}`);
  });

  it("sign the body's bytes: a string and its UTF-8 encoding sign alike", async () => {
    const key = await importReplicaKey(HELLO_KEY);
    const body = JSON.stringify({ note: "naïve ☃" });
    expect(await signControl(key, { ...PARTS, body: new TextEncoder().encode(body) })).toBe(await signControl(key, { ...PARTS, body }));
  });

  it("verify, and fail when any signed part or the key changes", async () => {
    const key = await importReplicaKey(HELLO_KEY);
    expect(await verifyControl(key, PARTS, SIGNATURE)).toBe(true);
    const tampered: SignedParts[] = [
      { ...PARTS, timestamp: PARTS.timestamp + 1 },
      { ...PARTS, nonce: PARTS.nonce + 1 },
      { ...PARTS, path: "/-/replicas/register" },
      { ...PARTS, body: BODY.replace("hello-1", "hello-2") },
      { ...PARTS, body: `${BODY} ` },
    ];
    for (const p of tampered) expect(await verifyControl(key, p, SIGNATURE), JSON.stringify(p)).toBe(false);
    const other = await importReplicaKey(await deriveReplicaKey(MASTER, "echo"));
    expect(await verifyControl(other, PARTS, SIGNATURE)).toBe(false);
    for (const sig of ["", SIGNATURE.slice(3), `v2=${SIGNATURE.slice(3)}`, SIGNATURE.slice(0, -2), `${SIGNATURE}00`, SIGNATURE.replace(/.$/, "0")]) {
      expect(await verifyControl(key, PARTS, sig), sig).toBe(false);
    }
  });

  it("signedHeaders gives the three headers, readSignatureHeaders reads them back", async () => {
    const key = await importReplicaKey(HELLO_KEY);
    const headers = new Headers(await signedHeaders(key, PARTS));
    expect(headers.get(SIGNATURE_HEADER)).toBe(SIGNATURE);
    expect(readSignatureHeaders(headers)).toEqual({ kind: "present", timestamp: PARTS.timestamp, nonce: PARTS.nonce, signature: SIGNATURE });
  });
});

describe("readSignatureHeaders", () => {
  const h = (over: Record<string, string | null>) => {
    const base: Record<string, string | null> = { [TIMESTAMP_HEADER]: "1764511200000", [NONCE_HEADER]: "7", [SIGNATURE_HEADER]: SIGNATURE, ...over };
    const headers = new Headers();
    for (const [k, v] of Object.entries(base)) if (v !== null) headers.set(k, v);
    return readSignatureHeaders(headers);
  };

  it("any header missing: unsigned", () => {
    expect(h({ [TIMESTAMP_HEADER]: null })).toEqual({ kind: "unsigned" });
    expect(h({ [NONCE_HEADER]: null })).toEqual({ kind: "unsigned" });
    expect(h({ [SIGNATURE_HEADER]: null })).toEqual({ kind: "unsigned" });
  });

  it("ill-formed values: malformed", () => {
    for (const ts of ["", "-1", "1.5", "1e12", "0x10", "01", "99999999999999999"]) expect(h({ [TIMESTAMP_HEADER]: ts }).kind, ts).toBe("malformed");
    for (const n of ["", "-1", "abc", "7 8", "007", "9007199254740993"]) expect(h({ [NONCE_HEADER]: n }).kind, n).toBe("malformed");
    for (const s of ["", "v1=", SIGNATURE.toUpperCase(), `sha256=${SIGNATURE.slice(3)}`, `${SIGNATURE},v1=00`]) {
      expect(h({ [SIGNATURE_HEADER]: s }).kind, s).toBe("malformed");
    }
    expect(h({ [NONCE_HEADER]: "0" }).kind).toBe("present");
  });
});

describe("timestamp window", () => {
  it("is ±30 s of the receiver's clock, inclusive", () => {
    const now = 1_800_000_000_000;
    expect(SIGNATURE_WINDOW_MS).toBe(30_000);
    expect(timestampFresh(now, now)).toBe(true);
    expect(timestampFresh(now - 30_000, now)).toBe(true);
    expect(timestampFresh(now + 30_000, now)).toBe(true);
    expect(timestampFresh(now - 30_001, now)).toBe(false);
    expect(timestampFresh(now + 30_001, now)).toBe(false);
  });
});

describe("NonceCounter", () => {
  it("is max(last + 1, now * 1000): strictly increasing even when the clock stands still or steps back", () => {
    let now = 1_764_511_200_000;
    const c = new NonceCounter(() => now);
    const a = c.next();
    expect(a).toBe(now * 1000);
    expect(c.next()).toBe(a + 1);
    now -= 5_000;
    expect(c.next()).toBe(a + 2);
    now += 10_000;
    expect(c.next()).toBe(now * 1000);
  });

  it("a restarted process starts above its predecessor", () => {
    let now = 1_764_511_200_000;
    const first = new NonceCounter(() => now);
    let last = 0;
    for (let i = 0; i < 500; i++) last = first.next();
    now += 1;
    expect(new NonceCounter(() => now).next()).toBeGreaterThan(last);
    expect(Number.isSafeInteger(new NonceCounter(() => Date.UTC(2250, 0)).next())).toBe(true);
  });
});

describe("NonceGuard (the routing object's replay memory)", () => {
  const T = 1_800_000_000_000;

  it("accepts only nonces above the last accepted one, per replica", () => {
    const g = new NonceGuard();
    expect(g.accept("a", 10, T)).toBe(true);
    expect(g.accept("a", 10, T)).toBe(false);
    expect(g.accept("a", 9, T)).toBe(false);
    expect(g.accept("a", 11, T)).toBe(true);
    expect(g.accept("b", 1, T)).toBe(true);
    // A refused nonce does not move the mark.
    expect(g.accept("a", 12, T)).toBe(true);
  });

  it("forgets a replica only after its old messages are stale at the edge (2 × window + margin)", () => {
    expect(NONCE_MEMORY_MS).toBeGreaterThanOrEqual(2 * SIGNATURE_WINDOW_MS);
    const g = new NonceGuard();
    g.accept("a", 10, T);
    g.accept("b", 10, T + 30_000);
    g.prune(T + NONCE_MEMORY_MS);
    expect(g.accept("a", 10, T + NONCE_MEMORY_MS)).toBe(false);
    g.prune(T + NONCE_MEMORY_MS + 1);
    expect(g.size).toBe(1);
    expect(g.accept("a", 10, T + NONCE_MEMORY_MS + 1)).toBe(true);
    expect(g.accept("b", 10, T + NONCE_MEMORY_MS + 1)).toBe(false);
  });
});

describe("replica CLI --print-key", () => {
  const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
  const run = (args: string[], env: Record<string, string>) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, ["--import", "tsx", CLI, ...args], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, SWITCHYARD_REPLICA_SECRET: "", SWITCHYARD_REPLICA_KEY: "", ...env },
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      child.once("exit", (code) => resolve({ code, stdout, stderr }));
    });

  it("prints the deployment's key derived from SWITCHYARD_REPLICA_SECRET", async () => {
    const out = await run(["--print-key", "--deployment", "hello"], { SWITCHYARD_REPLICA_SECRET: MASTER });
    expect(out).toMatchObject({ code: 0, stdout: `${HELLO_KEY}\n` });
  }, 30_000);

  it("exits 2 without the master secret, and a replica exits 2 without a well-formed key", async () => {
    expect((await run(["--print-key", "--deployment", "hello"], {})).code).toBe(2);
    const noKey = await run(["--deployment", "hello", "--backend", "text", "--edge", "http://127.0.0.1:9"], { SWITCHYARD_REPLICA_SECRET: MASTER });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toMatch(/SWITCHYARD_REPLICA_KEY is not set/);
    const badKey = await run(["--deployment", "hello", "--backend", "text", "--edge", "http://127.0.0.1:9"], { SWITCHYARD_REPLICA_KEY: MASTER });
    expect(badKey.code).toBe(2);
    expect(badKey.stderr).toMatch(/64 lowercase hex/);
  }, 30_000);
});
