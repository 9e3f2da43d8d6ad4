/**
 * The replica agent: puts an external OpenAI-compatible engine (vLLM, SGLang)
 * behind the edge without sitting on the token path. The engine's own URL is what
 * it registers, so proxies dispatch straight to the engine; the agent only
 * registers, turns the engine's Prometheus /metrics into load reports, and drains.
 *
 *   start     (the CLI spawns the engine, if given) → wait for GET /health 200
 *             (GET /v1/models where there is no /health) → base models (--models,
 *             else GET /v1/models) → first scrape → register → scrape every ≤ 100 ms
 *   reports   on every load change (coalesced; over ~1 s while the engine is busy),
 *             at once on state and model-set changes, and a heartbeat at the edge's
 *             report interval (EdgeClient); with a NodeReporter, one node report
 *             carries every engine of the node (node batching)
 *   trouble   no usable metrics for ~1 s: report "draining" (proxies stop choosing
 *             it) until they are back; the engine process exiting: leave, exit 1
 *   prefix    with the engine's KV events endpoint (vLLM --kv-events-config): subscribe,
 *             keep an index of its prefix cache under Switchyard's block keys
 *             (engine-prefix-index.ts), and report its summary when it changed
 *   drain     (SIGTERM, SIGINT, or the edge's admin drain) announce "draining"
 *             → wait until the engine is idle (running + waiting = 0 on consecutive
 *             scrapes, and at least the grace time proxies need to see the drain),
 *             bounded by the drain timeout → deregister → stop the engine process
 *
 * docs/agent.md describes it for operators.
 */
import { MAX_LOAD_COUNT as MAX_COUNT, MAX_PREFILL_RATE, MAX_PREFILL_WAIT_MS, MAX_REPLICA_MODELS as MAX_MODELS, MODEL_ID, OpenAIPath, type ContinuationForm, type ReplicaRole, type ReplicaCoordinates, type Load, type ReplicaState } from "../protocol/index.ts";
import { EdgeClient, keyRefusedMessage } from "../replica/edge-client.ts";
import type { LoadSource } from "../replica/edge-control.ts";
import type { NodeReporter } from "../replica/node-reporter.ts";
import { engineLoad, isEngineMetricsError, maxLoraAdapters, type EngineLoad, type EngineMetricsError, type PrefillCounters } from "./engine-metrics.ts";
import { EnginePrefixIndex } from "./engine-prefix-index.ts";
import { KvEventsSubscriber, type KvEventsSource } from "./kv-events-subscriber.ts";

export type EngineKind = "vllm" | "sglang" | "auto";

/** Scrapes are at most this far apart (the issue's bound). */
export const MAX_SCRAPE_INTERVAL_MS = 100;
/** A KV-cache usage move at least this large (a fraction) is a change worth a report; smaller ones ride on the next report. */
export const KV_REPORT_STEP = 0.05;
/** Consecutive idle scrapes (running + waiting = 0) that make a draining engine idle. */
export const IDLE_SCRAPES = 2;

export const AGENT_DEFAULTS = {
  engine: "auto" as EngineKind,
  maxOngoing: 256,
  scrapeIntervalMs: 100,
  drainTimeoutMs: 30_000,
  /**
   * A proxy isolate may route with a routing view fetched just before the drain was
   * announced until that view's replicas go stale (2.5 s after their last report,
   * docs/protocol.md "Cadence and liveness"). An engine, unlike the reference replica,
   * cannot refuse such a request, so it stays up at least this long after the drain.
   */
  drainGraceMs: 3_000,
  engineStartTimeoutMs: 600_000,
  engineStopTimeoutMs: 30_000,
  /** Scrapes failing (or unusable) this long make the engine unhealthy. */
  unhealthyAfterMs: 1_000,
  /** Coalescing window of load-change reports (the protocol allows up to 250 ms). */
  changeReportDelayMs: 100,
};

/** The engine process the agent owns (spawned by the CLI from the command after `--`). */
export interface EngineProcess {
  /** Resolves when the process has exited, with how ("code 0", "signal SIGKILL"). */
  readonly exited: Promise<string>;
  /** Asks it to stop (SIGTERM). */
  terminate(): void;
  /** Stops it now (SIGKILL). */
  kill(): void;
}

export interface AgentOptions {
  deployment: string;
  edgeUrl: string;
  /** The deployment's replica key (64 hex digits). */
  key: string;
  replicaId: string;
  /** Where the agent reaches the engine (health, models, metrics). */
  engineUrl: string;
  /** The URL registered for proxies to dispatch to; default engineUrl. */
  advertiseUrl?: string;
  /**
   * The engine's own API key (vLLM `--api-key`): registered through the signed
   * control plane, sent by the edge with every dispatch, and by the agent on its
   * own calls to the engine's /v1 routes. setEngineKey rotates it.
   */
  engineKey?: string;
  /**
   * The stream continuations the engine takes (`--engine-continues`), declared at
   * register: the edge continues a broken stream only on replicas that take its form.
   * Absent: both (vLLM and SGLang take continue_final_message and text prompts).
   */
  continues?: ContinuationForm[];
  /** Its prefill/decode roles (`--engine-role`, or the engine's kv_role), declared at register; absent: both. */
  roles?: ReplicaRole[];
  /** A prefill engine's KV bootstrap port (`--engine-bootstrap-port`, or SGLang's in its command), declared at register. */
  bootstrapPort?: number;
  /** The engine's region (`--region`; issue 57), declared at register; absent: not sent. */
  region?: string;
  /** Where the engine is (`--coordinates`, degrees; issue 57), declared at register; absent: not sent. */
  coordinates?: ReplicaCoordinates;
  /** Which metric names to read; "auto" takes whichever engine's names are present. Default auto. */
  engine?: EngineKind;
  /** The engine's concurrency budget (vLLM's --max-num-seqs): max_ongoing_requests and the reports' max. */
  maxOngoing?: number;
  /** Base model ids served; default: the engine's GET /v1/models ids (LoRA adapters there excluded). */
  models?: string[];
  scrapeIntervalMs?: number;
  drainTimeoutMs?: number;
  drainGraceMs?: number;
  engineStartTimeoutMs?: number;
  engineStopTimeoutMs?: number;
  unhealthyAfterMs?: number;
  changeReportDelayMs?: number;
  /** The engine process, when the agent owns it. */
  engineProcess?: EngineProcess;
  /** The node (machine) the engine runs on: sent with every control message, it picks the routing shard. */
  node?: string;
  /**
   * Node batching: the agents of one node's engines share one reporter, which sends
   * one node report for all of them; each agent still registers, drains and
   * deregisters its own engine.
   */
  nodeReporter?: NodeReporter;
  /**
   * The engine's KV events (vLLM's ZMQ publisher, SGLang's): the agent indexes its
   * prefix cache from them and reports a summary (docs/agent.md, "Prefix-cache
   * summaries"). Without it, reports carry none.
   */
  kvEvents?: KvEventsSource;
  /** Called once the edge accepted the registration. */
  onRegistered?: () => void;
  log?: (msg: string) => void;
  /** For tests: how the agent fetches from the engine (not the edge). */
  fetch?: typeof fetch;
  /** For tests: the clock (epoch ms). */
  now?: () => number;
}

/**
 * The engine's load as the edge client reports it. Counts and KV usage come from
 * the latest scrape; models are the base models and the LoRA adapters the engine
 * is running or queueing. Changes notify listeners (urgent: state and models).
 */
export class EngineLoadSource implements LoadSource {
  readonly maxOngoing: number;
  readonly #log: (msg: string) => void;
  #seq: number;
  #running = 0;
  #waiting = 0;
  #kv: number | undefined;
  /** The last scrape's prefill counters, and what their differences gave: uncached tokens a second, ms a prefill. */
  #prefill: PrefillCounters | undefined;
  #prefillRate: number | undefined;
  #prefillMs: number | undefined;
  /** The KV usage of the last change notified: smaller moves than KV_REPORT_STEP are not a change. */
  #kvNotified: number | undefined;
  #base: string[] = [];
  #adapters: string[] = [];
  #models: string[] = [];
  readonly #refused = new Set<string>();
  #drainDeadline: number | undefined;
  #draining = false;
  #unhealthy = false;
  readonly #listeners: ((urgent: boolean) => void)[] = [];

  /**
   * `seqStart`: the first seq. The agent starts at its clock (epoch ms), so a seq is never
   * below one of an earlier agent process, nor below the load headers of an engine that
   * happens to send them (the reference replica does): the agent's reports decide.
   */
  constructor(maxOngoing: number, seqStart = 0, log: (msg: string) => void = () => undefined) {
    this.maxOngoing = maxOngoing;
    this.#seq = seqStart;
    this.#log = log;
  }

  onChange(listener: (urgent: boolean) => void): void {
    this.#listeners.push(listener);
  }

  setBaseModels(ids: readonly string[]): void {
    this.#base = this.#valid(ids, "model");
    this.#refreshModels();
  }

  /** Folds one scrape in; notifies only when something a proxy cares about changed. */
  update(e: EngineLoad): void {
    let changed = false;
    const running = Math.min(e.running, MAX_COUNT);
    const waiting = Math.min(e.waiting, MAX_COUNT);
    if (running !== this.#running || waiting !== this.#waiting) changed = true;
    this.#running = running;
    this.#waiting = waiting;
    this.#kv = e.kvCacheUsage;
    this.#foldPrefill(e.prefill);
    if (this.#kv === undefined ? this.#kvNotified !== undefined : this.#kvNotified === undefined || Math.abs(this.#kv - this.#kvNotified) >= KV_REPORT_STEP) {
      changed = true;
    }
    const adapters = this.#valid(e.loraAdapters, "LoRA adapter");
    const urgent = !sameList(adapters, this.#adapters);
    this.#adapters = adapters;
    if (urgent) this.#refreshModels();
    if (urgent || changed) this.#changed(urgent);
  }

  /**
   * The engine's prefill rate and mean prefill time over the last scrape interval with any
   * prefill ended (a restarted engine's counters start over: that scrape is the new base).
   * The rate is computed tokens per second of prefill time, summed over requests: where the
   * engine batches prefills it reads low, by the batch's overlap.
   */
  #foldPrefill(now: PrefillCounters | undefined): void {
    const before = this.#prefill;
    this.#prefill = now;
    if (!now || !before) return;
    const tokens = now.computedTokens - before.computedTokens;
    const seconds = now.seconds - before.seconds;
    const requests = now.requests - before.requests;
    if (tokens < 0 || seconds < 0 || requests < 0 || requests === 0 || seconds === 0) return;
    this.#prefillRate = Math.max(1, tokens / seconds);
    this.#prefillMs = (seconds * 1000) / requests;
  }

  /** For good: the agent is leaving, by `deadlineAt` (epoch ms) where given. */
  setDraining(deadlineAt?: number): void {
    if (deadlineAt !== undefined) this.#drainDeadline = deadlineAt;
    if (this.#draining) return;
    this.#draining = true;
    this.#changed(true);
  }

  /** When a drain stops the engine at the latest (reported as drain_deadline_ms): the proxies move the streams they can before then. */
  drainDeadline(): number | undefined {
    return this.#draining ? this.#drainDeadline : undefined;
  }

  /** The engine cannot be seen (no usable metrics): reported as draining until it can. */
  setUnhealthy(unhealthy: boolean): void {
    if (this.#unhealthy === unhealthy) return;
    this.#unhealthy = unhealthy;
    this.#changed(true);
  }

  get state(): ReplicaState {
    return this.#draining || this.#unhealthy ? "draining" : "ready";
  }

  get running(): number {
    return this.#running;
  }

  get waiting(): number {
    return this.#waiting;
  }

  get models(): string[] {
    return [...this.#models];
  }

  get baseModels(): string[] {
    return [...this.#base];
  }

  /** vLLM loads adapters inside a request; nothing is reported as loading. */
  get loading(): string[] {
    return [];
  }

  load(): Load {
    const load: Load = { seq: this.#seq, ongoing: this.#running, queued: this.#waiting, max: this.maxOngoing, state: this.state };
    if (this.#kv !== undefined) load.kv = this.#kv;
    // The prefills waiting ahead of a new request, each the engine's recent mean prefill time.
    if (this.#prefillMs !== undefined) load.prefillWaitMs = Math.min(MAX_PREFILL_WAIT_MS, Math.round(this.#waiting * this.#prefillMs));
    if (this.#prefillRate !== undefined) load.prefillRate = Math.min(MAX_PREFILL_RATE, Math.round(this.#prefillRate));
    return load;
  }

  #changed(urgent: boolean): void {
    this.#seq++;
    this.#kvNotified = this.#kv;
    for (const l of this.#listeners) l(urgent);
  }

  #refreshModels(): void {
    this.#models = [...new Set([...this.#base, ...this.#adapters])].slice(0, MAX_MODELS);
  }

  /** Ids a report can carry (MODEL_ID); others are left out, said once each. */
  #valid(ids: readonly string[], what: string): string[] {
    const out: string[] = [];
    for (const id of ids) {
      if (MODEL_ID.test(id)) out.push(id);
      else if (!this.#refused.has(id)) {
        this.#refused.add(id);
        this.#log(`${what} "${id}" left out of reports: model ids are 1-128 of [A-Za-z0-9._:@/+-], starting with a letter or digit`);
      }
    }
    return out;
  }
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function describeError(err: unknown): string {
  if (err instanceof Error) {
    const cause = (err as Error & { cause?: unknown }).cause;
    const code = cause && typeof cause === "object" && "code" in cause ? ` (${String((cause as { code: unknown }).code)})` : "";
    return `${err.name === "TimeoutError" ? "timed out" : err.message}${code}`;
  }
  return String(err);
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

type Scrape = { load: EngineLoad; text: string } | EngineMetricsError;

export type AgentPhase = "starting" | "serving" | "draining" | "done";

export class ReplicaAgent {
  readonly source: EngineLoadSource;
  readonly #o: AgentOptions & typeof AGENT_DEFAULTS;
  readonly #log: (msg: string) => void;
  readonly #fetch: typeof fetch;
  readonly #now: () => number;
  readonly #engineBase: string;
  #edge: EdgeClient | undefined;
  #phase: AgentPhase = "starting";
  #exitCode = 0;
  #shutdown: Promise<void> | undefined;
  #resolveDone!: (code: number) => void;
  readonly #done = new Promise<number>((r) => (this.#resolveDone = r));
  #engineGone = false;
  #engineStopping = false;
  #detected: EngineLoad["engine"] | undefined;
  #scraping = false;
  #scrapeTimer: ReturnType<typeof setTimeout> | undefined;
  #lastOkAt = 0;
  #unhealthy = false;
  #lastError = "";
  #idleScrapes = 0;
  #engineKey: string | undefined;
  /** The engine's prefix cache as its KV events tell it (with AgentOptions.kvEvents). */
  #prefix: EnginePrefixIndex | undefined;
  #kvEvents: KvEventsSubscriber | undefined;
  /** Scrapes since start (tests and logs). */
  scrapes = 0;

  constructor(options: AgentOptions) {
    const o = { ...AGENT_DEFAULTS, ...stripUndefined(options) } as AgentOptions & typeof AGENT_DEFAULTS;
    if (!(o.scrapeIntervalMs >= 1 && o.scrapeIntervalMs <= MAX_SCRAPE_INTERVAL_MS)) {
      throw new Error(`scrape interval must be from 1 to ${MAX_SCRAPE_INTERVAL_MS} ms, not ${o.scrapeIntervalMs}`);
    }
    this.#o = o;
    this.#log = options.log ?? (() => undefined);
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
    this.#now = options.now ?? Date.now;
    this.#engineBase = o.engineUrl.replace(/\/+$/, "");
    this.source = new EngineLoadSource(o.maxOngoing, Math.floor(this.#now()), this.#log);
    this.#engineKey = o.engineKey;
  }

  /**
   * Rotates the engine key: the agent registers again with the new one, and the edge
   * sends it from its next snapshot on. The engine must take both keys meanwhile.
   */
  async setEngineKey(key: string): Promise<void> {
    if (key === this.#engineKey) return;
    this.#engineKey = key;
    this.#log("engine key changed: registering again with the new one");
    await this.#edge?.setEngineKey(key);
  }

  get phase(): AgentPhase {
    return this.#phase;
  }

  /** The engine's prefix-cache index (with AgentOptions.kvEvents). */
  get prefixIndex(): EnginePrefixIndex | undefined {
    return this.#prefix;
  }

  /** The KV events subscription's counters (with AgentOptions.kvEvents). */
  get kvEventStats(): KvEventsSubscriber["stats"] | undefined {
    return this.#kvEvents?.stats;
  }

  /** The engine seen in the metrics ("auto" resolves on the first usable scrape). */
  get engine(): EngineLoad["engine"] | undefined {
    return this.#detected;
  }

  /** Runs until the agent has left; resolves with the process exit code (0: drained as asked). */
  run(): Promise<number> {
    void this.#o.engineProcess?.exited.then((how) => this.#engineExited(how));
    this.#start().catch((err: unknown) => {
      // Leaving already (a signal, the engine exiting) explains it.
      if (!this.#shutdown) void this.shutdown(`start failed: ${describeError(err)}`, 1);
    });
    return this.#done;
  }

  /**
   * Drains and leaves: announce draining, wait for the engine to go idle (bounded),
   * deregister, stop the engine process. Idempotent; the exit code is the highest asked.
   */
  shutdown(reason: string, exitCode = 0): Promise<void> {
    this.#exitCode = Math.max(this.#exitCode, exitCode);
    if (this.#shutdown) {
      this.#log(`${reason} (already leaving)`);
      return this.#shutdown;
    }
    this.#shutdown = this.#leave(reason);
    return this.#shutdown;
  }

  async #start(): Promise<void> {
    const o = this.#o;
    const deadline = this.#now() + o.engineStartTimeoutMs;
    this.#log(`waiting for the engine at ${this.#engineBase} (GET /health, up to ${Math.round(o.engineStartTimeoutMs / 1000)} s)`);
    await this.#waitForEngine(deadline);
    if (this.#shutdown) return;
    const models = o.models ?? (await this.#engineModels());
    if (this.#shutdown) return;
    this.#log(`engine is up; base models: ${models.length > 0 ? models.join(", ") : "(none)"}`);
    this.source.setBaseModels(models);
    // Before the register: the first reports then carry what the engine's replay buffer told.
    await this.#subscribeKvEvents();
    if (this.#shutdown) return;

    const first = await this.#firstScrape(deadline);
    if (this.#shutdown) return;
    this.#log(
      `first scrape (${first.load.engine}): running ${first.load.running}, waiting ${first.load.waiting}` +
        (first.load.kvCacheUsage !== undefined ? `, KV cache ${Math.round(first.load.kvCacheUsage * 1000) / 10} %` : "") +
        (first.load.loraAdapters.length > 0 ? `, LoRA adapters ${first.load.loraAdapters.join(",")}` : ""),
    );
    this.source.update(first.load);
    this.#lastOkAt = this.#now();
    const maxLora = maxLoraAdapters(first.text);
    // Adapters reported: the engine multiplexes its base models and up to max_lora adapters.
    const maxModels = maxLora === undefined ? undefined : Math.min(MAX_MODELS, this.source.baseModels.length + maxLora);

    const edge = new EdgeClient({
      edgeUrl: o.edgeUrl,
      key: o.key,
      deployment: o.deployment,
      replicaId: o.replicaId,
      advertiseUrl: o.advertiseUrl ?? o.engineUrl,
      source: this.source,
      changeReportDelayMs: o.changeReportDelayMs,
      log: this.#log,
      ...(maxModels !== undefined && { maxModels }),
      ...(this.#engineKey !== undefined && { engineKey: this.#engineKey }),
      ...(o.continues !== undefined && { continues: o.continues }),
      ...(o.roles !== undefined && { roles: o.roles }),
      ...(o.bootstrapPort !== undefined && { bootstrapPort: o.bootstrapPort }),
      ...(o.region !== undefined && { region: o.region }),
      ...(o.coordinates !== undefined && { coordinates: o.coordinates }),
      ...(o.node !== undefined && { node: o.node }),
      ...(o.nodeReporter !== undefined && { nodeReporter: o.nodeReporter }),
      ...(this.#prefix && { cacheSummary: () => this.#prefix?.summary() }),
      onDrainRequested: () => void this.shutdown("drain requested by the edge (admin API)"),
      onKeyRefused: (why) => void this.shutdown(keyRefusedMessage(o.deployment, why), 1),
    });
    this.#edge = edge;
    this.#startScraping();
    const node = o.nodeReporter?.node ?? o.node;
    this.#log(
      `registering ${o.replicaId} (${o.advertiseUrl ?? o.engineUrl}, max_ongoing_requests ${o.maxOngoing}${maxModels !== undefined ? `, max_models ${maxModels}` : ""}` +
        `${node !== undefined ? `, node ${node}${o.nodeReporter ? ", node reports" : ""}` : ""}) at ${o.edgeUrl}`,
    );
    await edge.start();
    if (this.#shutdown) return;
    this.#phase = "serving";
    this.#log(`registered; scraping ${this.#engineBase}/metrics every ${o.scrapeIntervalMs} ms`);
    o.onRegistered?.();
  }

  /** Subscribes to the engine's KV events into the prefix index (with AgentOptions.kvEvents). */
  async #subscribeKvEvents(): Promise<void> {
    const source = this.#o.kvEvents;
    if (!source) return;
    const index = new EnginePrefixIndex({ log: this.#log });
    const sub = new KvEventsSubscriber({
      ...source,
      log: this.#log,
      onBatch: (batch) => index.apply(batch),
      onRestart: () => index.clear(),
    });
    this.#prefix = index;
    this.#kvEvents = sub;
    try {
      await sub.start();
    } catch (err) {
      // The engine still serves: it is reported without a summary.
      this.#log(`KV events: cannot subscribe (${describeError(err)}); reporting no prefix-cache summary`);
      this.#prefix = undefined;
      this.#kvEvents = undefined;
    }
  }

  /** GET /health answers 200 (or, where the engine has no /health, GET /v1/models does). */
  async #waitForEngine(deadline: number): Promise<void> {
    let problem = "";
    let nextNote = this.#now() + 10_000;
    for (;;) {
      if (this.#shutdown) return;
      if (this.#engineGone) throw new Error("the engine process exited before it was up");
      problem = await this.#engineHealthy();
      if (problem === "") return;
      if (this.#now() >= deadline) throw new Error(`the engine at ${this.#engineBase} was not up within ${this.#o.engineStartTimeoutMs} ms (${problem})`);
      if (this.#now() >= nextNote) {
        this.#log(`still waiting for the engine (${problem})`);
        nextNote = this.#now() + 10_000;
      }
      await sleep(Math.min(250, Math.max(1, deadline - this.#now())));
    }
  }

  /** "" when healthy, else why not. */
  async #engineHealthy(): Promise<string> {
    try {
      const health = await this.#get("/health");
      await health.body?.cancel();
      if (health.ok) return "";
      if (health.status !== 404 && health.status !== 405) return `GET /health answered ${health.status}`;
      const models = await this.#get(OpenAIPath.models);
      await models.body?.cancel();
      return models.ok ? "" : `no /health, and GET /v1/models answered ${models.status}`;
    } catch (err) {
      return `GET /health: ${describeError(err)}`;
    }
  }

  /** The base models in GET /v1/models (vLLM lists LoRA adapters there too, with a `parent`). */
  async #engineModels(): Promise<string[]> {
    const res = await this.#get(OpenAIPath.models);
    if (!res.ok) {
      await res.body?.cancel();
      throw new Error(`GET /v1/models answered ${res.status}; name the models with --models`);
    }
    const body = (await res.json()) as { data?: { id?: unknown; parent?: unknown }[] };
    if (!Array.isArray(body.data)) throw new Error("GET /v1/models has no data list; name the models with --models");
    return body.data.filter((m) => typeof m.id === "string" && (m.parent === undefined || m.parent === null)).map((m) => m.id as string);
  }

  async #firstScrape(deadline: number): Promise<{ load: EngineLoad; text: string }> {
    for (;;) {
      const s = await this.#scrapeOnce();
      if (!("error" in s)) return s;
      if (this.#shutdown || this.#engineGone) throw new Error(`no usable metrics: ${s.error}`);
      if (this.#now() >= deadline) throw new Error(`no usable metrics within the engine start timeout: ${s.error}`);
      if (s.error !== this.#lastError) this.#log(`metrics not usable yet: ${s.error}`);
      this.#lastError = s.error;
      await sleep(Math.min(250, Math.max(1, deadline - this.#now())));
    }
  }

  #get(path: string, timeoutMs = 5_000): Promise<Response> {
    const headers: Record<string, string> = this.#engineKey !== undefined ? { authorization: `Bearer ${this.#engineKey}` } : {};
    return this.#fetch(`${this.#engineBase}${path}`, { headers, signal: AbortSignal.timeout(timeoutMs) });
  }

  async #scrapeOnce(): Promise<Scrape> {
    this.scrapes++;
    let text: string;
    try {
      const res = await this.#get("/metrics", this.#o.unhealthyAfterMs);
      if (!res.ok) {
        await res.body?.cancel();
        return { error: `GET /metrics answered ${res.status}` };
      }
      text = await res.text();
    } catch (err) {
      return { error: `GET /metrics: ${describeError(err)}` };
    }
    const load = engineLoad(text);
    if (isEngineMetricsError(load)) return load;
    if (this.#o.engine !== "auto" && load.engine !== this.#o.engine) return { error: `expected ${this.#o.engine} metrics, found ${load.engine} metrics (see --engine)` };
    if (this.#detected === undefined && this.#o.engine === "auto") this.#log(`engine detected from its metric names: ${load.engine}`);
    this.#detected = load.engine;
    return { load, text };
  }

  #startScraping(): void {
    this.#scraping = true;
    const tick = async () => {
      const started = this.#now();
      await this.#scrape();
      if (!this.#scraping) return;
      this.#scrapeTimer = setTimeout(() => void tick(), Math.max(0, this.#o.scrapeIntervalMs - (this.#now() - started)));
    };
    this.#scrapeTimer = setTimeout(() => void tick(), this.#o.scrapeIntervalMs);
  }

  #stopScraping(): void {
    this.#scraping = false;
    clearTimeout(this.#scrapeTimer);
  }

  async #scrape(): Promise<void> {
    const s = await this.#scrapeOnce();
    if (!this.#scraping) return;
    const now = this.#now();
    if ("error" in s) {
      this.#idleScrapes = 0;
      if (s.error !== this.#lastError) this.#log(`scrape failed: ${s.error}`);
      this.#lastError = s.error;
      if (!this.#unhealthy && now - this.#lastOkAt >= this.#o.unhealthyAfterMs) {
        this.#unhealthy = true;
        this.#log(`no usable metrics for ${now - this.#lastOkAt} ms: reporting draining so proxies stop sending`);
        this.source.setUnhealthy(true);
        // The engine may have restarted with an empty cache: start the index over from its replay buffer.
        if (this.#prefix && this.#kvEvents) {
          this.#prefix.clear();
          this.#kvEvents.resync();
        }
      }
      return;
    }
    this.#lastOkAt = now;
    this.#lastError = "";
    if (this.#unhealthy) {
      this.#unhealthy = false;
      this.#log("metrics are back: reporting ready");
      this.source.setUnhealthy(false);
    }
    this.#idleScrapes = s.load.running + s.load.waiting === 0 ? this.#idleScrapes + 1 : 0;
    this.source.update(s.load);
  }

  #engineExited(how: string): void {
    this.#engineGone = true;
    if (this.#engineStopping) return;
    void this.shutdown(`the engine process exited on its own (${how})`, 1);
  }

  async #leave(reason: string): Promise<void> {
    this.#phase = "draining";
    const edge = this.#edge;
    this.#log(`${reason}: draining (last scrape: engine running ${this.source.running}, waiting ${this.source.waiting})`);
    // 1. Announce draining at once (an urgent report), so proxies stop choosing the engine,
    // and its deadline: the engine stops within drainTimeoutMs, so proxies move the streams
    // they can continue elsewhere before then (docs/migration.md, "Drain deadlines").
    this.source.setDraining(Date.now() + this.#o.drainTimeoutMs);
    if (edge?.registered) {
      await edge.report();
      this.#log("announced draining to the edge");
      // 2. Let the engine finish what it has, and what proxies still send before they see the drain.
      if (!this.#engineGone) await this.#waitUntilIdle();
    }
    // 3. Leave the routing table.
    this.#stopScraping();
    if (this.#kvEvents) {
      const st = this.#kvEvents.stats;
      this.#log(`KV events: ${st.batches} batches (${st.replayed} replayed, ${st.lost} lost, ${st.gaps} gaps, ${st.restarts} restarts); ${this.#prefix?.size ?? 0} blocks indexed`);
      await this.#kvEvents.close();
    }
    if (edge) {
      await edge.deregister().then(
        () => this.#log("deregistered"),
        (err: unknown) => this.#log(`deregister failed: ${describeError(err)}`),
      );
    }
    // 4. Only then let the engine go.
    await this.#stopEngine();
    this.#phase = "done";
    this.#log(`done (exit ${this.#exitCode})`);
    this.#resolveDone(this.#exitCode);
  }

  async #waitUntilIdle(): Promise<void> {
    const started = this.#now();
    const until = started + this.#o.drainTimeoutMs;
    const graceUntil = started + Math.min(this.#o.drainGraceMs, this.#o.drainTimeoutMs);
    // Only scrapes after the announcement count.
    this.#idleScrapes = 0;
    let nextNote = started + 5_000;
    this.#log(`waiting for the engine to go idle (at least ${this.#o.drainGraceMs} ms for proxies to see the drain, at most ${this.#o.drainTimeoutMs} ms)`);
    for (;;) {
      const now = this.#now();
      if (this.#engineGone) {
        this.#log("the engine process is gone; leaving");
        return;
      }
      if (this.#idleScrapes >= IDLE_SCRAPES && now >= graceUntil) {
        this.#log(`engine idle (running + waiting = 0 on ${this.#idleScrapes} scrapes) after ${now - started} ms`);
        return;
      }
      if (now >= until) {
        this.#log(`drain timeout (${this.#o.drainTimeoutMs} ms) with running ${this.source.running}, waiting ${this.source.waiting}: leaving anyway`);
        return;
      }
      if (now >= nextNote) {
        this.#log(`draining: engine running ${this.source.running}, waiting ${this.source.waiting}`);
        nextNote = now + 5_000;
      }
      await sleep(Math.max(1, Math.min(this.#o.scrapeIntervalMs, until - now)));
    }
  }

  async #stopEngine(): Promise<void> {
    const p = this.#o.engineProcess;
    if (!p) return;
    if (this.#engineGone) return;
    this.#engineStopping = true;
    this.#log("stopping the engine (SIGTERM)");
    p.terminate();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const how = await Promise.race([
      p.exited,
      new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), this.#o.engineStopTimeoutMs))),
    ]);
    clearTimeout(timer);
    if (how !== undefined) {
      this.#log(`engine exited (${how})`);
      return;
    }
    this.#log(`engine still running after ${this.#o.engineStopTimeoutMs} ms: SIGKILL`);
    p.kill();
    this.#log(`engine exited (${await p.exited})`);
  }
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
