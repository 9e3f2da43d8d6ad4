/**
 * The edge's replica keys, one per deployment, derived from the master secret
 * (SWITCHYARD_REPLICA_SECRET) once per isolate: the control plane verifies
 * replicas' messages with them, and dispatch signs every request to a replica
 * with them (docs/protocol.md §1 and §2).
 */
import { Header, deriveReplicaKey, importReplicaKey, signDispatch } from "../protocol/index.ts";

/** Derived keys of this isolate, per deployment (reset if the master secret changes). */
let keyCache: { master: string; keys: Map<string, Promise<CryptoKey>> } | undefined;

/** The deployment's replica key as an HMAC key; rejects when the master secret is empty. */
export function replicaKeyFor(master: string, deployment: string): Promise<CryptoKey> {
  if (keyCache?.master !== master) keyCache = { master, keys: new Map() };
  const keys = keyCache.keys;
  let key = keys.get(deployment);
  if (!key) {
    key = deriveReplicaKey(master, deployment).then(importReplicaKey);
    key.catch(() => keys.delete(deployment));
    keys.set(deployment, key);
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
  p: { method: string; deployment: string; target: string; requestId: string },
): Promise<[string, string][]> {
  const key = await replicaKeyFor(master, p.deployment);
  const timestamp = Date.now();
  const nonce = nextNonce;
  nextNonce = nonce >= Number.MAX_SAFE_INTEGER ? 0 : nonce + 1;
  const signature = await signDispatch(key, { ...p, timestamp, nonce });
  return [
    [Header.timestamp, String(timestamp)],
    [Header.nonce, String(nonce)],
    [Header.signature, signature],
  ];
}
