/**
 * The edge's replica keys, one per deployment, derived from the master secret
 * (SWITCHYARD_REPLICA_SECRET) once per isolate: the control plane (routes/control.ts)
 * verifies replicas' messages with them, and dispatch (serve/dispatch.ts) signs every
 * request to a replica with them (docs/protocol.md §1 and §2). Below both.
 */
import { Header, deriveReplicaKey, importReplicaKey, signDispatch } from "../protocol/index.ts";

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
