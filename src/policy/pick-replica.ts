/**
 * Replica choice: power of two random choices on load, as Ray Serve and most
 * LLM routers do. Pure: the caller supplies the candidates and the randomness.
 */
export interface ReplicaChoice {
  id: string;
  /** Reported ongoing + queued, plus this isolate's own in-flight dispatches to it. */
  load: number;
  /** max_ongoing_requests. */
  capacity: number;
}

function better(a: ReplicaChoice, b: ReplicaChoice): ReplicaChoice {
  // Compare relative load (fleets may mix capacities), then absolute load.
  const ra = a.load / a.capacity;
  const rb = b.load / b.capacity;
  if (ra !== rb) return ra < rb ? a : b;
  return a.load <= b.load ? a : b;
}

function twoChoices<T extends ReplicaChoice>(pool: readonly T[], random: () => number): T {
  if (pool.length === 1) return pool[0]!;
  const i = Math.floor(random() * pool.length);
  let j = Math.floor(random() * (pool.length - 1));
  if (j >= i) j++;
  return better(pool[i]!, pool[j]!) as T;
}

/**
 * Picks among `candidates` (already filtered to ready, fresh, not excluded).
 * Prefers replicas this view believes have headroom; when it believes all are
 * full it still picks one, because the view lags and the replica's own
 * admission check is authoritative (it rejects before accepting).
 */
export function pickReplica<T extends ReplicaChoice>(candidates: readonly T[], random: () => number = Math.random): T | undefined {
  if (candidates.length === 0) return undefined;
  const withRoom = candidates.filter((c) => c.load < c.capacity);
  return twoChoices(withRoom.length > 0 ? withRoom : candidates, random);
}

/** Full-jitter exponential backoff before retry number `retry` (1-based). */
export function backoffMs(retry: number, baseMs: number, capMs: number, random: () => number = Math.random): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.max(0, retry - 1));
  return Math.floor(random() * ceiling);
}
