/**
 * Signed control messages (docs/protocol.md §1). Every register, report and
 * deregister carries an HMAC-SHA256 signature over its timestamp, nonce, path
 * and raw body, keyed by the deployment's replica key. The key is derived from
 * the Worker's master secret (SWITCHYARD_REPLICA_SECRET, which never leaves
 * the edge), so a key for deployment A cannot sign for B.
 *
 * WebCrypto only (crypto.subtle): the Worker, the Node replica and the local
 * stack run this same code.
 */

import { Header } from "./headers.ts";
import { bytesOfHex, hexOf } from "./hex.ts";

/** Epoch milliseconds at which the message was signed. */
export const TIMESTAMP_HEADER = Header.timestamp;
/** Decimal integer: strictly increasing per replica id (control messages), unique per dispatch (dispatches). */
export const NONCE_HEADER = Header.nonce;
/** `v1=` + lowercase hex HMAC-SHA256. */
export const SIGNATURE_HEADER = Header.signature;

export const SIGNATURE_SCHEME = "v1";
/** A signed message is accepted while its timestamp is within this of the edge's clock (either way). */
export const SIGNATURE_WINDOW_MS = 30_000;
/** Key derivation label: replica key = HMAC-SHA256(master, label + deployment name). */
export const REPLICA_KEY_LABEL = "switchyard/v1/replica-key/";
/** A replica key: 32 bytes as 64 lowercase hex digits. */
export const REPLICA_KEY_PATTERN = /^[0-9a-f]{64}$/;

/** Why a control message was refused with 401 (counted per deployment at the edge). */
export type ControlRejectReason = "unsigned" | "bad_signature" | "stale_timestamp" | "replayed";
export const CONTROL_REJECT_REASONS: readonly ControlRejectReason[] = ["unsigned", "bad_signature", "stale_timestamp", "replayed"];

const HMAC = { name: "HMAC", hash: "SHA-256" } as const;
const encoder = new TextEncoder();

function subtle(): SubtleCrypto {
  return crypto.subtle;
}

/**
 * The replica key of a deployment: hex(HMAC-SHA256(master, "switchyard/v1/replica-key/" + name)).
 * The edge derives it from its master secret; operators hand it to the deployment's replicas
 * (`npm run replica -- --print-key --deployment NAME`).
 */
export async function deriveReplicaKey(master: string, deployment: string): Promise<string> {
  if (!master) throw new Error("the master secret (SWITCHYARD_REPLICA_SECRET) is empty");
  const k = await subtle().importKey("raw", encoder.encode(master), HMAC, false, ["sign"]);
  return hexOf(new Uint8Array(await subtle().sign("HMAC", k, encoder.encode(REPLICA_KEY_LABEL + deployment))));
}

/** Imports a replica key (64 hex digits; the HMAC key is the 32 bytes they spell). */
export async function importReplicaKey(key: string): Promise<CryptoKey> {
  const bytes = REPLICA_KEY_PATTERN.test(key) ? bytesOfHex(key) : null;
  if (!bytes) throw new Error("a replica key is 64 lowercase hex digits");
  return subtle().importKey("raw", bytes, HMAC, false, ["sign", "verify"]);
}

/** What a signature covers. */
export interface SignedParts {
  /** Epoch ms, as sent in x-switchyard-timestamp. */
  timestamp: number;
  /** As sent in x-switchyard-nonce. */
  nonce: number;
  /** Request path, e.g. "/-/replicas/report" (no query). */
  path: string;
  /** The exact body bytes sent (a string is taken as its UTF-8 bytes). */
  body: string | Uint8Array;
}

/** The bytes signed: `${timestamp}\n${nonce}\n${path}\n` followed by the raw body. */
export function stringToSign(p: SignedParts): Uint8Array<ArrayBuffer> {
  const head = encoder.encode(`${p.timestamp}\n${p.nonce}\n${p.path}\n`);
  const body = typeof p.body === "string" ? encoder.encode(p.body) : p.body;
  const out = new Uint8Array(head.byteLength + body.byteLength);
  out.set(head, 0);
  out.set(body, head.byteLength);
  return out;
}

/** The x-switchyard-signature value: "v1=" + hex(HMAC-SHA256(key, stringToSign)). */
export async function signControl(key: CryptoKey, p: SignedParts): Promise<string> {
  return `${SIGNATURE_SCHEME}=${hexOf(new Uint8Array(await subtle().sign("HMAC", key, stringToSign(p))))}`;
}

/** Checks a signature header value in constant time (crypto.subtle.verify). */
export function verifyControl(key: CryptoKey, p: SignedParts, signature: string): Promise<boolean> {
  return verifyMac(key, stringToSign(p), signature, SIGNATURE_SCHEME);
}

/** Whether `signature` (`${scheme}=` + 64 hex digits) is the HMAC of `signed`, in constant time. */
async function verifyMac(key: CryptoKey, signed: Uint8Array<ArrayBuffer>, signature: string, scheme: string): Promise<boolean> {
  const prefix = `${scheme}=`;
  if (!signature.startsWith(prefix)) return false;
  const mac = bytesOfHex(signature.slice(prefix.length));
  if (!mac || mac.byteLength !== 32) return false;
  return subtle().verify("HMAC", key, mac, signed);
}

/** The three headers of a signed control POST. */
export async function signedHeaders(key: CryptoKey, p: SignedParts): Promise<Record<string, string>> {
  return {
    [TIMESTAMP_HEADER]: String(p.timestamp),
    [NONCE_HEADER]: String(p.nonce),
    [SIGNATURE_HEADER]: await signControl(key, p),
  };
}

export type SignatureHeaders =
  | { kind: "unsigned" }
  | { kind: "malformed"; problem: string }
  | { kind: "present"; timestamp: number; nonce: number; signature: string };

/**
 * Reads the signature headers. Any of the three missing: unsigned. Present but not
 * well-formed (timestamp or nonce not a decimal safe integer, signature not
 * `${scheme}=` + 64 hex digits): malformed, which the receiver answers like a wrong
 * signature. Control messages are scheme "v1"; dispatches "v2" (DISPATCH_SIGNATURE_SCHEME).
 */
export function readSignatureHeaders(headers: { get(name: string): string | null }, scheme: string = SIGNATURE_SCHEME): SignatureHeaders {
  const ts = headers.get(TIMESTAMP_HEADER);
  const nonce = headers.get(NONCE_HEADER);
  const signature = headers.get(SIGNATURE_HEADER);
  if (ts === null || nonce === null || signature === null) return { kind: "unsigned" };
  const int = (s: string) => (/^(0|[1-9][0-9]{0,15})$/.test(s) && Number.isSafeInteger(Number(s)) ? Number(s) : null);
  const t = int(ts);
  if (t === null) return { kind: "malformed", problem: `${TIMESTAMP_HEADER} is not epoch milliseconds` };
  const n = int(nonce);
  if (n === null) return { kind: "malformed", problem: `${NONCE_HEADER} is not a decimal integer` };
  if (signature.length !== scheme.length + 65 || !signature.startsWith(`${scheme}=`) || !/^[0-9a-f]{64}$/.test(signature.slice(scheme.length + 1))) {
    return { kind: "malformed", problem: `${SIGNATURE_HEADER} is not "${scheme}=" and 64 lowercase hex digits` };
  }
  return { kind: "present", timestamp: t, nonce: n, signature };
}

/** Whether a signed timestamp is within the window of the receiver's clock. */
export function timestampFresh(timestamp: number, now: number): boolean {
  return Math.abs(now - timestamp) <= SIGNATURE_WINDOW_MS;
}

/**
 * A replica's nonces: max(last + 1, Date.now() * 1000). Strictly increasing within
 * a process, and a restarted process starts above its predecessor (unless the
 * predecessor sent more than 1,000 messages a millisecond, or the clock stepped back).
 * Date.now() * 1000 stays a safe integer until the year 2255.
 */
export class NonceCounter {
  #last = 0;
  readonly #now: () => number;
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  next(): number {
    this.#last = Math.max(this.#last + 1, this.#now() * 1000);
    return this.#last;
  }
}

/**
 * Signed dispatches (docs/protocol.md §2, "Signed dispatches"): every request
 * the edge sends to a replica carries the same three headers, with an HMAC of
 * the replica key over what identifies that one dispatch: the replica it is
 * sent to, and the digest of the body when the edge holds it. A replica that
 * checks them serves only the edge: a direct request, a forged one, an old one,
 * a copy of one already served, one meant for another replica or one whose
 * body was changed is refused with 401.
 *
 * Scheme "v2" (2026-12). The "v1" dispatch signature covered neither the replica
 * nor the body, and replicas remember nonces each for themselves, so a captured
 * dispatch could be replayed once to every other replica of the deployment, with
 * any body. A replica that checks signatures accepts "v2" only.
 */
export const DISPATCH_SIGNATURE_WINDOW_MS = 15_000;
export const DISPATCH_SIGNATURE_SCHEME = "v2";
const DISPATCH_LABEL = "switchyard-dispatch/v2";

/** What a dispatch signature covers. */
export interface DispatchParts {
  timestamp: number;
  /** Unique per dispatch (a replica refuses a nonce it has seen). */
  nonce: number;
  method: string;
  deployment: string;
  /** The request target as the replica receives it: path and query ("/v1/completions?x=1"). */
  target: string;
  requestId: string;
  /** The id of the replica the dispatch is sent to (as it registered): another replica refuses it. */
  replica: string;
  /**
   * Lowercase hex SHA-256 of the body, as sent in x-switchyard-body-sha256, when the
   * edge holds the body (sized and small, or read to route); "" when the body is
   * streamed (or there is none), which the signature then does not cover.
   */
  bodySha256: string;
}

/**
 * The bytes signed: the label, then timestamp, nonce, method, deployment, request
 * id, target, replica id and body digest, one per line. The label keeps a dispatch
 * signature from ever being a control-message signature (those start with the
 * timestamp's digits).
 */
export function dispatchStringToSign(p: DispatchParts): Uint8Array<ArrayBuffer> {
  return encoder.encode(
    `${DISPATCH_LABEL}\n${p.timestamp}\n${p.nonce}\n${p.method}\n${p.deployment}\n${p.requestId}\n${p.target}\n${p.replica}\n${p.bodySha256}`,
  ) as Uint8Array<ArrayBuffer>;
}

/** The x-switchyard-signature value of a dispatch. */
export async function signDispatch(key: CryptoKey, p: DispatchParts): Promise<string> {
  return `${DISPATCH_SIGNATURE_SCHEME}=${hexOf(new Uint8Array(await subtle().sign("HMAC", key, dispatchStringToSign(p))))}`;
}

/**
 * The headers that sign one dispatch of `body` (empty: none) to `replica`, for a sender
 * that holds the replica key itself rather than the master secret (a bench's own router,
 * a decode replica reading a prefill replica's blocks): the deployment, request id,
 * timestamp, `nonce`, the body's digest when it has one, and the signature over them.
 */
export async function signedDispatchHeaders(
  key: CryptoKey,
  p: { method: string; deployment: string; target: string; requestId: string; replica: string; body: string; nonce: number },
): Promise<Record<string, string>> {
  const timestamp = Date.now();
  const digest = p.body === "" ? "" : await bodySha256(encoder.encode(p.body));
  const signature = await signDispatch(key, { timestamp, nonce: p.nonce, method: p.method, deployment: p.deployment, target: p.target, requestId: p.requestId, replica: p.replica, bodySha256: digest });
  return {
    [Header.requestId]: p.requestId,
    [Header.deployment]: p.deployment,
    [Header.timestamp]: String(timestamp),
    [Header.nonce]: String(p.nonce),
    [Header.signature]: signature,
    ...(digest !== "" && { [Header.bodySha256]: digest }),
  };
}

/** Checks a dispatch signature in constant time (crypto.subtle.verify). */
export function verifyDispatch(key: CryptoKey, p: DispatchParts, signature: string): Promise<boolean> {
  return verifyMac(key, dispatchStringToSign(p), signature, DISPATCH_SIGNATURE_SCHEME);
}

/** The x-switchyard-body-sha256 value of a held body: lowercase hex SHA-256. */
export async function bodySha256(body: ArrayBuffer | Uint8Array): Promise<string> {
  return hexOf(new Uint8Array(await subtle().digest("SHA-256", body as ArrayBuffer | Uint8Array<ArrayBuffer>)));
}

/** Whether a dispatch's timestamp is within DISPATCH_SIGNATURE_WINDOW_MS of the replica's clock. */
export function dispatchTimestampFresh(timestamp: number, now: number): boolean {
  return Math.abs(now - timestamp) <= DISPATCH_SIGNATURE_WINDOW_MS;
}

// --- The edge's replica keys and dispatch signatures ------------------------------------
//
// The edge's replica keys, one per deployment, derived from the master secret
// (SWITCHYARD_REPLICA_SECRET) once per isolate: the control plane verifies replicas'
// messages with them, and dispatch signs every request to a replica with them (§1, §2).

/**
 * Derived keys of this isolate, per deployment (reset if the master secret changes):
 * `keys` as they are derived, `ready` once imported, so a dispatch signs without
 * awaiting the key again.
 */
let keyCache: { master: string; keys: Map<string, Promise<CryptoKey>>; ready: Map<string, CryptoKey> } | undefined;

/** The deployment's replica key as an HMAC key; rejects when the master secret is empty. */
export function replicaKeyFor(master: string, deployment: string): Promise<CryptoKey> {
  if (keyCache?.master !== master) keyCache = { master, keys: new Map(), ready: new Map() };
  const { keys, ready } = keyCache;
  let key = keys.get(deployment);
  if (!key) {
    const derived = deriveReplicaKey(master, deployment).then(importReplicaKey);
    derived.then(
      (k) => {
        if (keys.get(deployment) === derived) ready.set(deployment, k);
      },
      () => keys.delete(deployment),
    );
    keys.set(deployment, (key = derived));
  }
  return key;
}

/**
 * Dispatch nonces: a random start per isolate, then one more per dispatch. Two
 * isolates collide only if their starts lie within the number of dispatches
 * either makes (odds about n / 2^52), and a collision costs one retry elsewhere
 * (the replica refuses it as a replay), never a wrong answer.
 */
let nextNonce = Math.floor(Math.random() * 2 ** 52);

/** The three signature headers of one dispatch (docs/protocol.md §2, "Signed dispatches"). */
export async function dispatchSignature(
  master: string,
  p: { method: string; deployment: string; target: string; requestId: string; replica: string; bodySha256: string },
): Promise<[string, string][]> {
  const key = (keyCache?.master === master ? keyCache.ready.get(p.deployment) : undefined) ?? (await replicaKeyFor(master, p.deployment));
  const timestamp = Date.now();
  const nonce = nextNonce;
  nextNonce = nonce >= Number.MAX_SAFE_INTEGER ? 0 : nonce + 1;
  const signature = await signDispatch(key, {
    timestamp,
    nonce,
    method: p.method,
    deployment: p.deployment,
    target: p.target,
    requestId: p.requestId,
    replica: p.replica,
    bodySha256: p.bodySha256,
  });
  return [
    [Header.timestamp, String(timestamp)],
    [Header.nonce, String(nonce)],
    [Header.signature, signature],
  ];
}
