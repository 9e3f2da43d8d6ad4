/**
 * Per-key values an isolate keeps and refreshes from a Durable Object in the
 * background (stale-while-revalidate): routing views and API key sets. A value
 * older than `ttlMs` is refreshed after the response (`background`), so requests
 * do not wait; only when the caller says the value is unusable (none yet, or no
 * ready replica) does a request wait, for the refresh already in flight or a
 * new one. A failed refresh keeps the old value and backs off before retrying.
 */
export interface BackgroundRefreshOptions<T, S> {
  /** Fetches a fresh copy (a Durable Object call); `current` is the value it will be folded into. */
  source: (key: string, current: T) => Promise<S>;
  /** The value before the first successful fetch. */
  initial: () => T;
  /** Folds a fetched copy into the value (returns the new value, or the same one updated). */
  apply: (value: T, fetched: S, now: number) => T;
  /** How long a value serves before a refresh, ms: one figure, or one per key. */
  ttlMs: number | ((key: string) => number);
  failureBackoffMs: number;
  /**
   * How long after a refresh starts a request that finds the value `stale` (see
   * get) may wait for it; later ones use the old value. Bounds what a slow or
   * hung source costs. Default 0: never wait for a stale value.
   */
  staleWaitMs?: number;
  /** Named in the log line of a failed refresh. */
  what: string;
  now?: () => number;
}

export interface Refreshed<T> {
  value: T;
  /** Epoch ms of the last successful refresh (0: never). */
  fetchedAt: number;
}

interface Slot<T> extends Refreshed<T> {
  /** Epoch ms before which no new refresh starts. */
  nextRefreshAt: number;
  refreshing: Promise<void> | null;
  /** Epoch ms the refresh in flight started. */
  refreshStartedAt: number;
}

export class BackgroundRefresh<T, S> {
  readonly #o: BackgroundRefreshOptions<T, S>;
  readonly #now: () => number;
  readonly #slots = new Map<string, Slot<T>>();
  /** Durable Object calls made (observability and tests). */
  refreshes = 0;

  constructor(options: BackgroundRefreshOptions<T, S>) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The key's value. Waits for a refresh when `unusable` says the current one
   * cannot serve; when `stale` says it can but a fresher one would serve better,
   * waits for the refresh only while it is younger than `staleWaitMs`.
   */
  async get(
    key: string,
    background: (p: Promise<unknown>) => void,
    unusable: (s: Refreshed<T>, now: number) => boolean,
    stale?: (s: Refreshed<T>, now: number) => boolean,
  ): Promise<T> {
    const s = this.#slot(key);
    const answer = this.#answer(key, s, background, unusable, stale);
    if (answer === UNUSABLE) {
      if (s.refreshing) await s.refreshing;
      else if (this.#now() >= s.nextRefreshAt) await this.#refresh(key, s);
    } else if (answer !== NOW) {
      await settledWithin(s.refreshing!, answer);
    }
    return s.value;
  }

  /**
   * What get() answers without waiting, with no promise; undefined when get() would
   * wait (then call get(), which waits as it would have). The usual case on the hot
   * path: a value that serves, its refresh (when due) handed to `background`.
   */
  now(
    key: string,
    background: (p: Promise<unknown>) => void,
    unusable: (s: Refreshed<T>, now: number) => boolean,
    stale?: (s: Refreshed<T>, now: number) => boolean,
  ): T | undefined {
    const s = this.#slot(key);
    return this.#answer(key, s, background, unusable, stale) === NOW ? s.value : undefined;
  }

  #slot(key: string): Slot<T> {
    let s = this.#slots.get(key);
    if (!s) {
      s = { value: this.#o.initial(), fetchedAt: 0, nextRefreshAt: 0, refreshing: null, refreshStartedAt: 0 };
      this.#slots.set(key, s);
    }
    return s;
  }

  /**
   * Whether the slot's value serves now (NOW; a due refresh is handed to `background`),
   * is UNUSABLE (wait for a refresh), or is stale while a refresh younger than
   * `staleWaitMs` runs (the ms left to wait for it).
   */
  #answer(
    key: string,
    s: Slot<T>,
    background: (p: Promise<unknown>) => void,
    unusable: (s: Refreshed<T>, now: number) => boolean,
    stale: ((s: Refreshed<T>, now: number) => boolean) | undefined,
  ): typeof NOW | typeof UNUSABLE | number {
    const now = this.#now();
    if (unusable(s, now)) return UNUSABLE;
    if (!s.refreshing && now >= s.nextRefreshAt) background(this.#refresh(key, s));
    // The time left is checked before `stale`, which may walk the whole value.
    const left = s.refreshStartedAt + (this.#o.staleWaitMs ?? 0) - now;
    return s.refreshing && left > 0 && stale?.(s, now) ? left : NOW;
  }

  /** Forgets the key's value (and its back-off): the next get fetches afresh. */
  forget(key: string): void {
    this.#slots.delete(key);
  }

  #refresh(key: string, s: Slot<T>): Promise<void> {
    this.refreshes++;
    const p = this.#o
      .source(key, s.value)
      .then((fetched) => {
        const now = this.#now();
        s.value = this.#o.apply(s.value, fetched, now);
        s.fetchedAt = now;
        const ttl = this.#o.ttlMs;
        s.nextRefreshAt = now + (typeof ttl === "number" ? ttl : ttl(key));
      })
      .catch((err: unknown) => {
        // Keep serving the old value (the Durable Object may be restarting).
        s.nextRefreshAt = this.#now() + this.#o.failureBackoffMs;
        console.error(JSON.stringify({ msg: `${this.#o.what} refresh failed`, deployment: key, error: String(err) }));
      })
      .finally(() => {
        s.refreshing = null;
      });
    s.refreshing = p;
    s.refreshStartedAt = this.#now();
    return p;
  }
}

// #answer's verdicts besides a wait in ms.
const NOW = Symbol("now");
const UNUSABLE = Symbol("unusable");

/** Waits for `p` (which never rejects) or `ms`, whichever comes first. */
function settledWithin(p: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<void>((r) => (timer = setTimeout(r, ms)));
  return Promise.race([p, timeout]).finally(() => {
    if (timer !== undefined) clearTimeout(timer);
  });
}
