/**
 * The replica's check that a request was dispatched by its deployment's edge
 * (docs/protocol.md §2, "Signed dispatches"): the signature over the method,
 * target, deployment, request id, timestamp, nonce, this replica's id and the
 * body's digest (when the edge held the body) must verify with the replica key,
 * the timestamp must be within DISPATCH_SIGNATURE_WINDOW_MS of this clock, and
 * the nonce must not have been seen before; a body with a signed digest must
 * then hash to it (checkBody). Refusals are counted by reason. No I/O: the server
 * hands it the request's parts; time is injectable.
 *
 * Node's synchronous HMAC (node:crypto), not WebCrypto: it runs on every request
 * before admission, and an async WebCrypto job would add a thread-pool round
 * trip to each. The bytes signed are the protocol's (dispatchStringToSign).
 */
// @ts-nocheck

import { createHash, createHmac, createSecretKey, timingSafeEqual, type KeyObject } from "node:crypto";
import {
  CONTROL_REJECT_REASONS,
  DISPATCH_SIGNATURE_WINDOW_MS,
  Header,
  REPLICA_KEY_PATTERN,
  DISPATCH_SIGNATURE_SCHEME,
  dispatchStringToSign,
  dispatchTimestampFresh,
  readSignatureHeaders,
  type ControlRejectReason,
} from "../protocol/index.ts";

/** Why a dispatch was refused (the control plane's reasons, the same words). */
export type DispatchRefusal = ControlRejectReason;

export interface DispatchRequestParts {
  method: string;
  /** The request target as received (path and query). */
  target: string;
  /** Header lookup (lowercase names). */
  header(name: string): string | undefined;
}

export class DispatchGuard {
  /** A KeyObject made once: createHmac with a Buffer makes one per call (12 µs against 3 µs per request, measured). */
  readonly #key: KeyObject;
  readonly #deployment: string;
  readonly #replicaId: string;
  readonly #now: () => number;
  /** Nonces accepted, with when they may be forgotten (their timestamp is stale by then). In arrival order. */
  readonly #seen = new Map<number, number>();
  readonly #refused: Record<DispatchRefusal, number> = Object.fromEntries(CONTROL_REJECT_REASONS.map((r) => [r, 0])) as Record<DispatchRefusal, number>;

  /** `replicaId`: this replica's id as it registers; a dispatch signed for another replica is refused. */
  constructor(replicaKey: string, deployment: string, replicaId: string, now: () => number = Date.now) {
    if (!REPLICA_KEY_PATTERN.test(replicaKey)) throw new Error("a replica key is 64 lowercase hex digits");
    this.#key = createSecretKey(Buffer.from(replicaKey, "hex"));
    this.#deployment = deployment;
    this.#replicaId = replicaId;
    this.#now = now;
  }

  /** null: the request comes from the edge; else why not (and it is counted). */
  check(req: DispatchRequestParts): DispatchRefusal | null {
    const sig = readSignatureHeaders({ get: (name) => req.header(name) ?? null }, DISPATCH_SIGNATURE_SCHEME);
    if (sig.kind === "unsigned") return this.#refuse("unsigned");
    if (sig.kind === "malformed") return this.#refuse("bad_signature");
    const requestId = req.header(Header.requestId) ?? "";
    const deployment = req.header(Header.deployment) ?? "";
    // Another deployment's name cannot verify (it is signed), but saying so costs nothing.
    if (deployment !== this.#deployment) return this.#refuse("bad_signature");
    const bodySha256 = req.header(Header.bodySha256) ?? "";
    const parts = { timestamp: sig.timestamp, nonce: sig.nonce, method: req.method, deployment, target: req.target, requestId, replica: this.#replicaId, bodySha256 };
    const expected = createHmac("sha256", this.#key).update(dispatchStringToSign(parts)).digest();
    // readSignatureHeaders checked the form: "v2=" and 64 hex digits.
    const given = Buffer.from(sig.signature.slice(DISPATCH_SIGNATURE_SCHEME.length + 1), "hex");
    if (!timingSafeEqual(expected, given)) return this.#refuse("bad_signature");
    const now = this.#now();
    if (!dispatchTimestampFresh(sig.timestamp, now)) return this.#refuse("stale_timestamp");
    this.#forgetStale(now);
    if (this.#seen.has(sig.nonce)) return this.#refuse("replayed");
    // Past this, the timestamp check refuses any copy: the nonce need not be kept longer.
    this.#seen.set(sig.nonce, sig.timestamp + DISPATCH_SIGNATURE_WINDOW_MS);
    return null;
  }

  /**
   * Whether a body hashes to the digest its (verified) dispatch signed, in constant
   * time; a mismatch (the body was changed on the way), or a body too large to have
   * been held (null), is counted as bad_signature.
   */
  checkBody(body: Uint8Array | null, signedSha256: string): boolean {
    const given = Buffer.from(signedSha256, "hex");
    const actual = body === null ? null : createHash("sha256").update(body).digest();
    if (actual && given.byteLength === actual.byteLength && timingSafeEqual(given, actual)) return true;
    this.#refuse("bad_signature");
    return false;
  }

  /** Requests refused since start, by reason. */
  get refused(): Record<DispatchRefusal, number> {
    return { ...this.#refused };
  }

  /** Nonces held against replays now (bounded by the dispatch rate × the window). */
  get remembered(): number {
    return this.#seen.size;
  }

  #refuse(reason: DispatchRefusal): DispatchRefusal {
    this.#refused[reason]++;
    return reason;
  }

  /**
   * Drops nonces from the oldest while they are past their time. Arrival order is
   * close to timestamp order (every edge signs just before sending), so this is
   * amortised O(1) per request; one that arrived out of order is dropped a little
   * later, which only keeps it longer than needed.
   */
  #forgetStale(now: number): void {
    for (const [nonce, until] of this.#seen) {
      if (until >= now) break;
      this.#seen.delete(nonce);
    }
  }
}
