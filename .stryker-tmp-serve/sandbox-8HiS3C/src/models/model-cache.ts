/**
 * The replica's model cache: Ray Serve's @serve.multiplexed semantics for the reference
 * replica. An LRU of at most `maxModels` loaded models, loaded on demand.
 *
 * Rules:
 * - Hit or miss: `hit` is true when the model was loaded (ready) at the moment of the
 *   acquire. Every acquire that had to wait for a load is a miss, whether it started the
 *   load or joined one already under way (one load at a time per model: concurrent
 *   acquires of the same id share it).
 * - Recency: every acquire marks its model most recently used; a model that finishes
 *   loading enters as the most recently used.
 * - Room: when a load starts, the least recently used loaded models are evicted until
 *   loaded + loading <= maxModels, and again when a load finishes. Loads under way are
 *   never evicted nor cancelled, so when more distinct models are being loaded at once
 *   than maxModels the limit is exceeded until the loads land.
 * - In-use eviction: an evicted model leaves the loaded set at once (it is no longer
 *   reported), but its `release()` runs only when its last user releases it. Acquiring
 *   such a model again before that takes it back (a hit: it is still in memory, and
 *   it needs a slot like a load does) instead of creating a second instance.
 * - Unknown ids (not in `allowed` when given) are rejected with UnknownModelError
 *   without touching the cache. When `create` itself rejects with UnknownModelError
 *   (no `allowed` list), the error is passed on and no load, miss or failure is
 *   counted, but an eviction made to start that load stands: pass `allowed` to avoid it.
 * - A failed load is not cached: the error goes to every acquire waiting on it, the
 *   loading set is cleaned, and the next acquire tries again.
 *
 * `onChange` fires whenever the loaded or loading SET changes (not on a mere change of
 * recency order, which would turn every request into an urgent report).
 */
// @ts-nocheck

import { UnknownModelError, type InferenceModel } from "./model.ts";

export interface ModelCacheOptions {
  /** How many models may be loaded (or loading) at once; a positive integer. */
  maxModels: number;
  /** Creates a fresh model instance; may reject with UnknownModelError. */
  create: (id: string) => Promise<InferenceModel>;
  /** The ids this cache serves; others are rejected with UnknownModelError. */
  allowed?: readonly string[];
  /** Called (synchronously) whenever the loaded or loading set changes. */
  onChange?: () => void;
  /**
   * Awaited after a load is announced (onChange) and before `create` runs. A load
   * can hold the event loop for seconds (onnxruntime-web compiles and initialises
   * synchronously), so the replica's report that says "loading" must be on the wire
   * first: otherwise its heartbeat falls silent meanwhile and the edge drops it from
   * routing, with the models it holds. Should settle quickly; a rejection is ignored.
   */
  beforeLoad?: () => Promise<void>;
}

export interface ModelLease {
  model: InferenceModel;
  /** The model was already loaded; false when this acquire waited for a load. */
  hit: boolean;
  /** Ends this use of the model; idempotent. Must be called exactly once per acquire. */
  release: () => void;
}

export interface ModelCacheStats {
  /** Acquires served by an already loaded model. */
  hits: number;
  /** Acquires that waited for a load (successful or not). */
  misses: number;
  /** Successful loads. */
  loads: number;
  /** Loads that failed (create rejected with something other than UnknownModelError). */
  failedLoads: number;
  /** Models dropped from the loaded set to make room. */
  evictions: number;
}

interface Entry {
  readonly id: string;
  model: InferenceModel | undefined;
  /** Acquires holding (or waiting for) this instance. */
  refs: number;
  state: "loading" | "loaded" | "evicted";
  /** Settles when the load does; only set while loading. */
  load?: Promise<InferenceModel>;
}

export class ModelCache {
  readonly maxModels: number;
  readonly allowed: readonly string[] | undefined;
  readonly #create: (id: string) => Promise<InferenceModel>;
  readonly #onChange: (() => void) | undefined;
  readonly #beforeLoad: (() => Promise<void>) | undefined;
  /** Loaded models, least recently used first (Map keeps insertion order). */
  readonly #loaded = new Map<string, Entry>();
  /** Loads under way, oldest first. */
  readonly #loading = new Map<string, Entry>();
  /** Evicted models still in use: released when their last user is done. */
  readonly #retiring = new Map<string, Entry>();
  readonly #stats: ModelCacheStats = { hits: 0, misses: 0, loads: 0, failedLoads: 0, evictions: 0 };

  constructor(options: ModelCacheOptions) {
    if (!Number.isInteger(options.maxModels) || options.maxModels < 1) {
      throw new RangeError(`maxModels must be a positive integer, got ${options.maxModels}`);
    }
    this.maxModels = options.maxModels;
    this.#create = options.create;
    this.#beforeLoad = options.beforeLoad;
    this.allowed = options.allowed ? Object.freeze([...options.allowed]) : undefined;
    this.#onChange = options.onChange;
  }

  /** Whether `id` passes the `allowed` list (always true without one). */
  allows(id: string): boolean {
    return this.allowed === undefined || this.allowed.includes(id);
  }

  /** Gets the model, loading it if needed; see the module comment for the rules. */
  acquire(id: string): Promise<ModelLease> {
    if (!this.allows(id)) return Promise.reject(new UnknownModelError(id, this.allowed ?? []));

    const loaded = this.#loaded.get(id);
    if (loaded) {
      this.#loaded.delete(id);
      this.#loaded.set(id, loaded); // most recently used
      return Promise.resolve(this.#lease(loaded, true));
    }

    const retiring = this.#retiring.get(id);
    if (retiring) {
      this.#retiring.delete(id);
      this.#makeRoom(1);
      retiring.state = "loaded";
      this.#loaded.set(id, retiring);
      this.#changed();
      return Promise.resolve(this.#lease(retiring, true));
    }

    const entry = this.#loading.get(id) ?? this.#startLoad(id);
    entry.refs++; // reserved now, so the model is in use from the moment it lands
    return entry.load!.then(
      () => {
        this.#stats.misses++;
        return this.#lease(entry, false, true);
      },
      (err: unknown) => {
        if (!(err instanceof UnknownModelError)) this.#stats.misses++;
        throw err;
      },
    );
  }

  /** Loaded model ids, most recently used first. */
  loaded(): string[] {
    return [...this.#loaded.keys()].reverse();
  }

  /** Ids being loaded, most recently started first. */
  loading(): string[] {
    return [...this.#loading.keys()].reverse();
  }

  stats(): ModelCacheStats {
    return { ...this.#stats };
  }

  #lease(entry: Entry, hit: boolean, reserved = false): ModelLease {
    if (!reserved) entry.refs++;
    if (hit) this.#stats.hits++;
    let done = false;
    return {
      model: entry.model!,
      hit,
      release: () => {
        if (done) return;
        done = true;
        entry.refs--;
        if (entry.refs === 0 && entry.state === "evicted") this.#dispose(entry);
      },
    };
  }

  #startLoad(id: string): Entry {
    const entry: Entry = { id, model: undefined, refs: 0, state: "loading" };
    this.#makeRoom(1);
    this.#loading.set(id, entry);
    this.#changed();
    const create = () => {
      try {
        return this.#create(id);
      } catch (err) {
        return Promise.reject(err);
      }
    };
    const before = this.#beforeLoad;
    const created: Promise<InferenceModel> = before
      ? before()
          .catch(() => undefined)
          .then(create)
      : create();
    entry.load = created.then(
      (model) => {
        this.#loading.delete(id);
        this.#stats.loads++;
        entry.model = model;
        entry.state = "loaded";
        delete entry.load;
        this.#loaded.set(id, entry);
        this.#makeRoom(0);
        this.#changed();
        return model;
      },
      (err: unknown) => {
        this.#loading.delete(id);
        if (!(err instanceof UnknownModelError)) this.#stats.failedLoads++;
        this.#changed();
        throw err;
      },
    );
    // Waiters handle the error; this keeps an unobserved rejection from being reported.
    entry.load.catch(() => undefined);
    return entry;
  }

  /**
   * Evicts least recently used loaded models until `extra` more fit (loads are never
   * evicted). Callers report the change (onChange) together with their own.
   */
  #makeRoom(extra: number): void {
    for (const [id, entry] of this.#loaded) {
      if (this.#loaded.size + this.#loading.size + extra <= this.maxModels) break;
      this.#loaded.delete(id);
      this.#stats.evictions++;
      entry.state = "evicted";
      if (entry.refs === 0) this.#dispose(entry);
      else this.#retiring.set(id, entry);
    }
  }

  #dispose(entry: Entry): void {
    this.#retiring.delete(entry.id);
    // A failing release leaves nothing to retry: the instance is gone either way.
    void entry.model?.release().catch(() => undefined);
  }

  #changed(): void {
    this.#onChange?.();
  }
}
