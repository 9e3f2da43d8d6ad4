/**
 * The local actuator: keeps the number of reference replicas the local stack runs
 * for each autoscaled deployment at the autoscaler's desired count, as Ray Serve's
 * controller does on one node. It asks the edge for the count (the admin route
 * GET /-/deployments/NAME/autoscale) every few hundred milliseconds, starts
 * replicas while there are too few (from zero, one first: it answers sooner alone),
 * and stops the newest ones with SIGTERM (they
 * drain: finish what they hold, deregister, exit) while there are too many. So a
 * deployment with `autoscaling.minReplicas: 0` scales to zero and back on a laptop.
 * In production the autoscaler's webhook tells the platform (docs/admission.md).
 */

/** What the actuator needs of the stack. */
export interface ReplicaFleet {
  /** The deployment's desired replica count now, per its autoscaler; null while it is not settled (nothing to do yet). */
  desired(deployment: string): Promise<number | null>;
  /** The ids of the deployment's running replicas, oldest first. */
  running(deployment: string): string[];
  /** Starts one replica and resolves once it has registered. */
  start(deployment: string): Promise<unknown>;
  /** Sends the replica SIGTERM and resolves when it has exited. */
  stop(replicaId: string): Promise<unknown>;
}

/** How often the actuator asks for the desired counts, ms. */
export const ACTUATOR_INTERVAL_MS = 250;
/** After a replica failed to start, the deployment gets no new one for this long (no crash loop at 4 Hz). */
const START_BACKOFF_MS = 5_000;

export class LocalActuator {
  readonly #fleet: ReplicaFleet;
  readonly #deployments: readonly string[];
  readonly #log: (line: string) => void;
  /** Replicas being started, per deployment. */
  readonly #starting = new Map<string, number>();
  /** Per deployment, when a replica last failed to start. */
  readonly #failedAt = new Map<string, number>();
  /** Replicas told to stop and not yet gone. */
  readonly #stopping = new Set<string>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;
  /** Resolves when the tick in progress (if any) is done. */
  #tick: Promise<void> = Promise.resolve();

  constructor(fleet: ReplicaFleet, deployments: readonly string[], log: (line: string) => void = () => undefined) {
    this.#fleet = fleet;
    this.#deployments = deployments;
    this.#log = log;
  }

  start(): void {
    if (this.#deployments.length === 0) return;
    const loop = () => {
      if (this.#stopped) return;
      this.#tick = this.tick().finally(() => {
        if (!this.#stopped) this.#timer = setTimeout(loop, ACTUATOR_INTERVAL_MS);
      });
    };
    loop();
  }

  /** Stops acting (the replicas it started stay; the stack stops them). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#tick;
  }

  /** One look at every deployment: start or stop replicas to meet its desired count. */
  async tick(): Promise<void> {
    await Promise.all(this.#deployments.map((d) => this.#act(d)));
  }

  async #act(deployment: string): Promise<void> {
    let desired: number | null;
    try {
      desired = await this.#fleet.desired(deployment);
    } catch (err) {
      // The edge is starting or stopping; the next tick asks again.
      this.#log(`[actuator] ${deployment}: desired count unavailable (${String(err)})`);
      return;
    }
    // Unsettled: the routing object restarted and counts replicas it has not heard from
    // yet (they may be dead); acting on that count started 6 replicas nobody wanted.
    if (desired === null) return;
    const starting = this.#starting.get(deployment) ?? 0;
    const running = this.#fleet.running(deployment).filter((id) => !this.#stopping.has(id));
    const have = running.length + starting;
    if (desired > have) {
      if (Date.now() - (this.#failedAt.get(deployment) ?? -Infinity) < START_BACKOFF_MS) return;
      // From zero, one replica first and the rest once it has registered: replicas
      // started together on one machine share its cores, and four at once on two
      // cores took the first answer after a burst from ~1 s to 2–3.5 s (bench/admission/admission.ts).
      if (running.length === 0) {
        if (starting === 0) void this.#startOne(deployment);
        return;
      }
      for (let i = have; i < desired; i++) void this.#startOne(deployment);
    } else if (desired < have && starting === 0) {
      // The newest go first: the oldest hold the warmest caches.
      for (const id of running.slice(desired).reverse()) void this.#stopOne(deployment, id);
    }
  }

  async #startOne(deployment: string): Promise<void> {
    this.#starting.set(deployment, (this.#starting.get(deployment) ?? 0) + 1);
    this.#log(`[actuator] ${deployment}: starting a replica`);
    try {
      await this.#fleet.start(deployment);
    } catch (err) {
      this.#failedAt.set(deployment, Date.now());
      this.#log(`[actuator] ${deployment}: a replica failed to start (${String(err)})`);
    } finally {
      this.#starting.set(deployment, (this.#starting.get(deployment) ?? 1) - 1);
    }
  }

  async #stopOne(deployment: string, id: string): Promise<void> {
    this.#stopping.add(id);
    this.#log(`[actuator] ${deployment}: stopping ${id} (drains first)`);
    try {
      await this.#fleet.stop(id);
    } finally {
      this.#stopping.delete(id);
    }
  }
}
