/**
 * Replica choice: power of two random choices on load, as Ray Serve and most
 * LLM routers do. Pure: the caller supplies the candidates and the randomness.
 */
// @ts-nocheck

export interface ReplicaChoice {
  id: string;
  /** Reported ongoing + queued, plus this isolate's own in-flight dispatches to it. */
  load: number;
  /** max_ongoing_requests. */
  capacity: number;
  /** KV-cache usage 0..1 as the replica last reported it (LLM engines); absent otherwise. */
  kv?: number;
}

/**
 * How full a replica is, 0..1 and beyond: the larger of its request slots in
 * use and its KV cache in use. An LLM engine with few requests but long
 * contexts fills its KV cache first (vLLM then queues or preempts), so requests
 * alone would call it idle.
 */
export function fullness(c: ReplicaChoice): number {
  const slots = c.load / c.capacity;
  return c.kv !== undefined && c.kv > slots ? c.kv : slots;
}

function better(a: ReplicaChoice, b: ReplicaChoice): ReplicaChoice {
  // Compare fullness (fleets may mix capacities), then absolute load.
  const ra = fullness(a);
  const rb = fullness(b);
  if (ra !== rb) return ra < rb ? a : b;
  return a.load <= b.load ? a : b;
}

/** Whether the view believes `c` has a free slot (and KV room). */
export const hasRoom = (c: ReplicaChoice): boolean => fullness(c) < 1;

/** Power of two random choices over `pool` (non-empty): two distinct draws, the less full kept (ties: less load, then the first). */
export function pickTwoChoices<T extends ReplicaChoice>(pool: readonly T[], random: () => number): T {
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
  const withRoom = candidates.filter(hasRoom);
  return pickTwoChoices(withRoom.length > 0 ? withRoom : candidates, random);
}

/**
 * Round robin, load-blind (a baseline, `policy.balancer: "round_robin"`): the
 * candidate at position `turn` (modulo their number) in a stable order, sorted
 * by id, so the order does not depend on when replicas joined the view. The
 * caller keeps the counter (one per isolate and deployment) and increments it
 * per pick. Load is ignored; the replica's own admission check decides.
 */
export function pickRoundRobin<T extends { id: string }>(candidates: readonly T[], turn: number): T | undefined {
  if (candidates.length === 0) return undefined;
  const ordered = candidates.length === 1 ? candidates : [...candidates].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const n = ordered.length;
  // Safe for any integer turn, negative or past 2^53 included.
  const i = ((Math.trunc(turn) % n) + n) % n;
  return ordered[Number.isFinite(i) ? i : 0];
}

/** Uniformly random, load-blind (a baseline, `policy.balancer: "random"`). */
export function pickRandom<T>(candidates: readonly T[], random: () => number = Math.random): T | undefined {
  if (candidates.length === 0) return undefined;
  // min(): a random() of exactly 1 (outside its contract) must not overrun.
  return candidates[Math.min(candidates.length - 1, Math.floor(random() * candidates.length))];
}

/** A candidate that may hold multiplexed models. */
export interface ModelHolderChoice extends ReplicaChoice {
  /** Loaded models. */
  models: readonly string[];
  /** Models being loaded (requests for them wait on that load rather than start another). */
  loading: readonly string[];
}

const holds = (c: ModelHolderChoice, model: string) => c.models.includes(model) || c.loading.includes(model);
const modelCount = (c: ModelHolderChoice) => c.models.length + c.loading.length;

/**
 * Multiplexed choice for `model` (Ray Serve's rule, made load-aware):
 * 1. replicas holding the model (loaded or loading) with room: two choices on load;
 * 2. none of those (nobody holds it, or every holder is full): the replica with
 *    room that has the fewest models, ties by relative load then load — so a new
 *    model lands on the emptiest, least-loaded replica, and a hot model whose
 *    holders are all full spreads to one more replica instead of queueing;
 * 3. nobody has room (in this view): two choices among holders, else among all;
 *    the replica's own admission check decides.
 */
export function pickReplicaForModel<T extends ModelHolderChoice>(
  candidates: readonly T[],
  model: string,
  random: () => number = Math.random,
): T | undefined {
  if (candidates.length === 0) return undefined;
  const holders = candidates.filter((c) => holds(c, model));
  const holdersWithRoom = holders.filter(hasRoom);
  if (holdersWithRoom.length > 0) return pickTwoChoices(holdersWithRoom, random);
  let best: T | undefined;
  for (const c of candidates) {
    if (!hasRoom(c) || holds(c, model)) continue;
    if (!best || fewerModelsThenLessLoad(c, best)) best = c;
  }
  if (best) return best;
  return pickTwoChoices(holders.length > 0 ? holders : candidates, random);
}

function fewerModelsThenLessLoad(a: ModelHolderChoice, b: ModelHolderChoice): boolean {
  const ma = modelCount(a);
  const mb = modelCount(b);
  if (ma !== mb) return ma < mb;
  const ra = fullness(a);
  const rb = fullness(b);
  return ra !== rb ? ra < rb : a.load < b.load;
}

/** Full-jitter exponential backoff before retry number `retry` (1-based). */
export function backoffMs(retry: number, baseMs: number, capMs: number, random: () => number = Math.random): number {
  // The exponent is bounded so 0 × 2^1024 cannot turn into NaN.
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(40, Math.max(0, retry - 1)));
  return Math.floor(random() * ceiling);
}
