/**
 * The load a replica reports, both in load reports and in the `x-switchyard-load`
 * header of every response. The header form is a compact `key=value` list so the
 * proxy can parse it on the hot path without JSON:
 *
 *   x-switchyard-load: seq=42;ongoing=3;queued=0;max=5;state=ready;kv=0.31
 *   x-switchyard-load: seq=7;ongoing=1;queued=0;max=4;state=ready;models=a,b;loading=c
 *   x-switchyard-load: seq=9;ongoing=2;queued=0;max=8;state=ready;kv=0.4;prefill_wait=120;prefill_rate=9000
 *
 * `models`/`loading` appear on multiplexing replicas only (an empty value means
 * none); they let every response update the proxy's idea of who holds what.
 *
 * `ongoing` excludes the request the header is attached to (it is finishing, and
 * the proxy counts its own in-flight requests separately).
 */
import { MAX_LOAD_COUNT, MAX_LOAD_HEADER_BYTES, MAX_PREFILL_RATE, MAX_PREFILL_WAIT_MS, MAX_REPLICA_MODELS, MODEL_ID } from "./limits.ts";

export type ReplicaState = "ready" | "draining";

export interface Load {
  /** Monotonic per replica process; a view is replaced only by a higher seq. */
  seq: number;
  /** Requests being executed now. */
  ongoing: number;
  /** Requests accepted and waiting inside the replica (engines with a queue). */
  queued: number;
  /** Capacity: max_ongoing_requests. */
  max: number;
  state: ReplicaState;
  /** KV-cache usage as a fraction 0..1, when the engine has one. */
  kv?: number;
  /**
   * How long a new request's prefill would wait before it starts, ms, by the replica's
   * own count of the prefills ahead of it (engines with a prefill queue): the queueing
   * term of the edge's predicted time to first token (src/policy/latency-model.ts).
   */
  prefillWaitMs?: number;
  /** Uncached prompt tokens the replica prefills per second, as it measured them lately: the prefill term's rate. */
  prefillRate?: number;
  /** Loaded models, when the replica multiplexes. */
  models?: string[];
  /** Models being loaded, when the replica multiplexes. */
  loading?: string[];
}

/**
 * The header for `load`. Model sets too long for MAX_LOAD_HEADER_BYTES are left
 * out (the proxy then keeps the sets it has from reports), so a replica with many
 * models still sends a header every proxy accepts.
 */
export function formatLoadHeader(load: Load): string {
  let out = `seq=${load.seq};ongoing=${load.ongoing};queued=${load.queued};max=${load.max};state=${load.state}`;
  if (load.kv !== undefined) out += `;kv=${load.kv}`;
  if (load.prefillWaitMs !== undefined) out += `;prefill_wait=${load.prefillWaitMs}`;
  if (load.prefillRate !== undefined) out += `;prefill_rate=${load.prefillRate}`;
  let sets = "";
  if (load.models !== undefined) sets += `;models=${load.models.join(",")}`;
  if (load.loading !== undefined) sets += `;loading=${load.loading.join(",")}`;
  return out.length + sets.length <= MAX_LOAD_HEADER_BYTES ? out + sets : out;
}

function count(raw: string | undefined, min: number): number | undefined {
  if (raw === undefined || !/^\d{1,16}$/.test(raw)) return undefined;
  const n = Number(raw);
  return n >= min && Number.isSafeInteger(n) ? n : undefined;
}

/**
 * Parses a load header. Returns null for anything malformed: a replica that lies
 * with garbage must not poison the proxy's view.
 */
export function parseLoadHeader(value: string | null | undefined): Load | null {
  // Bounds what a (possibly lying) replica can make the proxy parse on every response.
  if (!value || value.length > MAX_LOAD_HEADER_BYTES) return null;
  // The known fields straight into variables (it runs on every response): a field
  // given twice counts with its last value, unknown ones are ignored.
  let seqRaw: string | undefined;
  let ongoingRaw: string | undefined;
  let queuedRaw: string | undefined;
  let maxRaw: string | undefined;
  let state: string | undefined;
  let kvRaw: string | undefined;
  let waitRaw: string | undefined;
  let rateRaw: string | undefined;
  let modelsRaw: string | undefined;
  let loadingRaw: string | undefined;
  for (let from = 0; from <= value.length; ) {
    let end = value.indexOf(";", from);
    if (end < 0) end = value.length;
    const eq = value.indexOf("=", from);
    if (eq < 0 || eq >= end || eq === from) return null;
    const v = value.slice(eq + 1, end).trim();
    switch (value.slice(from, eq).trim()) {
      case "seq":
        seqRaw = v;
        break;
      case "ongoing":
        ongoingRaw = v;
        break;
      case "queued":
        queuedRaw = v;
        break;
      case "max":
        maxRaw = v;
        break;
      case "state":
        state = v;
        break;
      case "kv":
        kvRaw = v;
        break;
      case "prefill_wait":
        waitRaw = v;
        break;
      case "prefill_rate":
        rateRaw = v;
        break;
      case "models":
        modelsRaw = v;
        break;
      case "loading":
        loadingRaw = v;
        break;
    }
    from = end + 1;
  }
  const seq = count(seqRaw, 0);
  const ongoing = count(ongoingRaw, 0);
  const queued = count(queuedRaw, 0);
  const max = count(maxRaw, 1);
  if (seq === undefined || ongoing === undefined || queued === undefined || max === undefined) return null;
  if (ongoing > MAX_LOAD_COUNT || queued > MAX_LOAD_COUNT || max > MAX_LOAD_COUNT) return null;
  if (state !== "ready" && state !== "draining") return null;
  const load: Load = { seq, ongoing, queued, max, state };
  if (kvRaw !== undefined) {
    const kv = Number(kvRaw);
    if (kvRaw === "" || !Number.isFinite(kv) || kv < 0 || kv > 1) return null;
    load.kv = kv;
  }
  if (waitRaw !== undefined) {
    const ms = count(waitRaw, 0);
    if (ms === undefined || ms > MAX_PREFILL_WAIT_MS) return null;
    load.prefillWaitMs = ms;
  }
  if (rateRaw !== undefined) {
    const rate = count(rateRaw, 1);
    if (rate === undefined || rate > MAX_PREFILL_RATE) return null;
    load.prefillRate = rate;
  }
  if (modelsRaw !== undefined) {
    const ids = modelList(modelsRaw);
    if (!ids) return null;
    load.models = ids;
  }
  if (loadingRaw !== undefined) {
    const ids = modelList(loadingRaw);
    if (!ids) return null;
    load.loading = ids;
  }
  return load;
}

function modelList(raw: string): string[] | null {
  if (raw === "") return [];
  const ids = raw.split(",");
  if (ids.length > MAX_REPLICA_MODELS) return null;
  for (const id of ids) if (!MODEL_ID.test(id)) return null;
  return ids;
}
