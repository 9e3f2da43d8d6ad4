/**
 * The whole local stack on loopback: the edge Worker and its Durable Objects on
 * workerd, the HTTP/1.0 front on the public port, and reference replicas as
 * separate OS processes that register themselves through the protocol.
 * Used by `npm start`, the end-to-end tests and the benchmarks.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { createInterface } from "node:readline";
import type { Plugin } from "esbuild";
import { bundleReplica, bundleWorker, deploymentPaths, functionsDirsFromEnv, type FunctionsDirs } from "./build.ts";
import { replicaFlags } from "../backends/index.ts";
import type { Deployment } from "../config/deployment.ts";
import { ControlPath, NonceCounter, PROTOCOL_VERSION, deriveReplicaKey, importReplicaKey, signedHeaders } from "../protocol/index.ts";
import { startHttp10Front } from "./http10-front.ts";
import { LocalActuator } from "./actuator.ts";
import { workerdConfig } from "./workerd-config.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

export interface StackOptions {
  /** Public port (the HTTP/1.0-safe front). Default 8787; 0 picks a free one. */
  port?: number;
  /**
   * Directory with the deployment files, or several (their deployments together).
   * Default: the folders SWITCHYARD_FUNCTIONS names (comma-separated), else functions/.
   */
  functionsDir?: FunctionsDirs;
  /** Replica count per deployment, overriding each file's localReplicas. */
  replicas?: Record<string, number>;
  /** Where the bundle, workerd config and Durable Object storage go. Default .switchyard/local. */
  stateDir?: string;
  /** Start with empty Durable Object storage. */
  freshState?: boolean;
  /** Progress and child output; default silent. */
  log?: (line: string) => void;
  /**
   * Benchmarks only: replicas also serve requests without the edge's signature
   * (replica --accept-unsigned), for arms that reach them directly or through
   * another proxy. Signed requests are still checked.
   */
  acceptUnsignedDispatches?: boolean;
  /**
   * Edge isolates in workerd (default 1): each runs the same bundle as its own
   * Worker service on its own loopback port (stack.edgeUrls), with its own module
   * state (routing views, caches), and all share one set of Durable Objects, as
   * a deployed Worker's isolates do. The public port fronts the first.
   */
  edgeIsolates?: number;
  /**
   * The location (`cf.colo`) of each edge isolate, in order; default: none, all in one
   * location. Each location has its own relays, as on Cloudflare (admission across
   * locations, bench/admission/admission.ts).
   */
  edgeLocations?: readonly string[];
  /**
   * Where each edge isolate is, in order (its SWITCHYARD_COORDINATES: what cf.latitude and
   * cf.longitude give a deployed isolate); default: unknown. Latency choice estimates the
   * trip to a replica it has not measured from it (bench/regions/regions.ts).
   */
  edgeCoordinates?: readonly ({ lat: number; lon: number } | undefined)[];
  /**
   * Run the local actuator (src/local/actuator.ts): the replica count of each
   * deployment with `autoscaling` follows its desired count, from zero where its
   * minReplicas is 0. Deployments whose count `replicas` sets stay fixed. `npm start`
   * turns it on; tests and benchmarks that count replicas themselves leave it off.
   */
  autoscale?: boolean;
  /** New secrets instead of the ones kept with the state (localSecrets): `npm start -- --rotate-secrets`. */
  rotateSecrets?: boolean;
  /** Benchmarks only: more esbuild plugins for the Worker's bundle (bench/request-path/request-path.ts instruments it). */
  bundlePlugins?: readonly Plugin[];
}

export interface ReplicaProcess {
  id: string;
  deployment: string;
  url: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}

export interface StartReplicaOptions {
  id?: string;
  maxOngoing?: number;
  /** Override the backend (e.g. tests start an echo replica in another deployment). */
  backendArgs?: string[];
  drainTimeoutMs?: number;
}

async function freePort(): Promise<number> {
  const srv: Server = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

export async function loadDeployments(dirs: FunctionsDirs): Promise<Deployment[]> {
  const out: Deployment[] = [];
  for (const path of deploymentPaths(dirs)) out.push((await import(pathToFileURL(path).href)).default as Deployment);
  return out;
}

/** The reference replica's flags for the deployment's backend kind (src/backends/); [] when the stack starts none. */
function backendArgs(d: Deployment): string[] {
  return replicaFlags(d.backend, d) ?? [];
}

/**
 * The local stack's secrets, kept with its state (`secrets.json`, owner-only) so they
 * stay the same across restarts: an agent started by hand, an exported replica key or
 * admin secret keep working. Made on the first start, and again only when asked
 * (`rotate`: `npm start -- --rotate-secrets`).
 */
export function localSecrets(stateDir: string, rotate = false): { replicaSecret: string; adminSecret: string } {
  const file = join(stateDir, "secrets.json");
  if (!rotate && existsSync(file)) {
    try {
      const kept = JSON.parse(readFileSync(file, "utf8")) as { replicaSecret?: unknown; adminSecret?: unknown };
      const hex = (v: unknown): v is string => typeof v === "string" && /^[0-9a-f]{32,}$/.test(v);
      if (hex(kept.replicaSecret) && hex(kept.adminSecret)) return { replicaSecret: kept.replicaSecret, adminSecret: kept.adminSecret };
    } catch {}
  }
  const made = { replicaSecret: randomBytes(16).toString("hex"), adminSecret: randomBytes(16).toString("hex") };
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  writeFileSync(file, `${JSON.stringify(made)}\n`, { mode: 0o600 });
  return made;
}

export class LocalStack {
  /** The edge's master secret (SWITCHYARD_REPLICA_SECRET); replicas get only their deployment's key. Kept across restarts (localSecrets). */
  readonly replicaSecret: string;
  readonly adminSecret: string;
  readonly replicas = new Map<string, ReplicaProcess>();
  /** The deployments whose replica count follows their autoscaler (set by start). */
  readonly autoscaled = new Set<string>();
  deployments: Deployment[] = [];
  /** Public URL (through the HTTP/1.0 front). */
  url = "";
  /** workerd's own URL (HTTP/1.1 clients may use it directly). */
  workerdUrl = "";
  /** Every edge isolate's workerd URL (StackOptions.edgeIsolates), the first being workerdUrl. */
  edgeUrls: string[] = [];
  readonly #o: StackOptions;
  readonly #stateDir: string;
  #workerd: ChildProcess | undefined;
  #front: Server | undefined;
  #replicaScript = "";
  #actuator: LocalActuator | undefined;
  /** Every replica this run started (the next run deregisters them: #forgetPreviousReplicas). */
  readonly #started: { id: string; deployment: string }[] = [];
  /** The last replica number given per deployment. */
  readonly #seq = new Map<string, number>();

  /** The next free id of a deployment's replica: `<deployment>-<n>`, n counting from 1 per deployment. */
  #nextId(deployment: string): string {
    let n = this.#seq.get(deployment) ?? 0;
    do n++;
    while (this.replicas.has(`${deployment}-${n}`));
    this.#seq.set(deployment, n);
    return `${deployment}-${n}`;
  }

  constructor(options: StackOptions = {}) {
    this.#o = options;
    this.#stateDir = resolve(options.stateDir ?? join(root, ".switchyard/local"));
    ({ replicaSecret: this.replicaSecret, adminSecret: this.adminSecret } = localSecrets(this.#stateDir, options.rotateSecrets));
  }

  async start(): Promise<void> {
    const given = this.#o.functionsDir;
    const functionsDir = given === undefined ? functionsDirsFromEnv() : typeof given === "string" ? resolve(given) : given.map((d) => resolve(d));
    this.deployments = await loadDeployments(functionsDir);
    if (this.#o.freshState) rmSync(join(this.#stateDir, "do"), { recursive: true, force: true });
    // Owner-only: the state holds workerd.capnp (with the secrets) and the Durable Objects' data.
    mkdirSync(join(this.#stateDir, "do"), { recursive: true, mode: 0o700 });
    const workerPath = join(this.#stateDir, "worker.js");
    this.#replicaScript = join(root, "dist/replica.mjs");
    const [bundle] = await Promise.all([bundleWorker(workerPath, functionsDir, this.#o.bundlePlugins), bundleReplica(this.#replicaScript)]);

    const isolates = this.#o.edgeIsolates ?? 1;
    if (!Number.isInteger(isolates) || isolates < 1) throw new Error(`edgeIsolates must be a positive integer (got ${isolates})`);
    const locations = this.#o.edgeLocations;
    if (locations && (locations.length !== isolates || !locations.every((l) => /^[A-Za-z0-9-]{1,16}$/.test(l)))) {
      throw new Error(`edgeLocations must name one location (letters, digits, '-') per edge isolate (${isolates})`);
    }
    const workerdPort = await freePort();
    const morePorts: number[] = [];
    while (morePorts.length < isolates - 1) {
      const p = await freePort();
      if (p !== workerdPort && !morePorts.includes(p)) morePorts.push(p);
    }
    const configPath = join(this.#stateDir, "workerd.capnp");
    writeFileSync(
      configPath,
      workerdConfig({
        workerPath,
        configDir: this.#stateDir,
        storageDir: join(this.#stateDir, "do"),
        address: `127.0.0.1:${workerdPort}`,
        // Edge models' wasm runtime and weights (none unless a deployment has backend kind "edge").
        modules: bundle.modules,
        moreEdges: morePorts.map((p) => `127.0.0.1:${p}`),
        ...(this.#o.edgeLocations ? { locations: this.#o.edgeLocations } : {}),
        ...(this.#o.edgeCoordinates ? { coordinates: this.#o.edgeCoordinates } : {}),
        // Local mode: replicas may register loopback and private addresses.
        vars: {
          SWITCHYARD_REPLICA_SECRET: this.replicaSecret,
          SWITCHYARD_ADMIN_SECRET: this.adminSecret,
          SWITCHYARD_MODE: "local",
          // Passed through when set in the environment (e.g. SWITCHYARD_REQUEST_LOGS=off for benchmarks).
          ...(process.env.SWITCHYARD_REQUEST_LOGS ? { SWITCHYARD_REQUEST_LOGS: process.env.SWITCHYARD_REQUEST_LOGS } : {}),
        },
      }),
      { mode: 0o600 },
    );
    // It holds SWITCHYARD_REPLICA_SECRET and SWITCHYARD_ADMIN_SECRET; `mode` applies only when the
    // file is created, so one left world-readable by an earlier run is tightened here.
    chmodSync(configPath, 0o600);
    this.workerdUrl = `http://127.0.0.1:${workerdPort}`;
    this.edgeUrls = [workerdPort, ...morePorts].map((p) => `http://127.0.0.1:${p}`);
    const workerdBin = (createRequire(import.meta.url)("workerd") as { default: string }).default;
    this.#workerd = spawn(workerdBin, ["serve", configPath, "--experimental", ...inspectorArgs()], { stdio: ["ignore", "pipe", "pipe"] });
    this.#pipeLog(this.#workerd, "workerd");
    for (const url of this.edgeUrls) await this.#waitFor(`${url}/-/routes`, 15_000);
    // Before the public port opens: the previous run's replicas are dead (they were this
    // stack's children), but their routing objects restored them as live.
    await this.#forgetPreviousReplicas();

    const port = this.#o.port ?? 8787;
    this.#front = await startHttp10Front({ host: "127.0.0.1", port, targetHost: "127.0.0.1", targetPort: workerdPort });
    this.url = `http://127.0.0.1:${(this.#front.address() as { port: number }).port}`;

    const starts: Promise<ReplicaProcess>[] = [];
    const scaled: string[] = [];
    for (const d of this.deployments) {
      if (d.backend.kind === "external" || d.backend.kind === "edge") continue;
      const fixed = this.#o.replicas?.[d.name];
      const a = this.#o.autoscale && fixed === undefined ? d.autoscaling : undefined;
      if (a) {
        scaled.push(d.name);
        this.autoscaled.add(d.name);
      }
      const n = fixed ?? (a ? Math.min(a.maxReplicas, Math.max(a.minReplicas, d.localReplicas)) : d.localReplicas);
      for (let i = 0; i < n; i++) starts.push(this.startReplica(d.name));
    }
    await Promise.all(starts);
    this.#actuator = new LocalActuator(
      {
        desired: async (name) => {
          const res = await fetch(`${this.workerdUrl}/-/deployments/${name}/autoscale`, { headers: { authorization: `Bearer ${this.adminSecret}` } });
          if (!res.ok) throw new Error(`autoscale: ${res.status}`);
          const d = (await res.json()) as { desired: number; settled: boolean };
          return d.settled ? d.desired : null;
        },
        running: (name) => [...this.replicas.values()].filter((r) => r.deployment === name).map((r) => r.id),
        start: (name) => this.startReplica(name),
        stop: (id) => this.stopReplica(id),
      },
      scaled,
      this.#o.log,
    );
    this.#actuator.start();
  }

  /** Sends the replica SIGTERM (it drains, deregisters and exits) and waits for its exit code. */
  async stopReplica(id: string): Promise<number | null> {
    const r = this.replicas.get(id);
    if (!r) return null;
    r.child.kill("SIGTERM");
    return r.exited;
  }

  /** Starts one reference replica process and waits until it has registered. */
  async startReplica(deploymentName: string, o: StartReplicaOptions = {}): Promise<ReplicaProcess> {
    const d = this.deployments.find((x) => x.name === deploymentName);
    if (!d) throw new Error(`no deployment "${deploymentName}"`);
    // Ids count per deployment (hello-1, hello-2, …, vad-1): what the README's examples name.
    const id = o.id ?? this.#nextId(d.name);
    const args = [
      this.#replicaScript,
      "--deployment", d.name,
      ...(o.backendArgs ?? backendArgs(d)),
      "--edge", this.url,
      "--id", id,
      "--max-ongoing", String(o.maxOngoing ?? d.maxOngoingRequests),
      "--drain-timeout-ms", String(o.drainTimeoutMs ?? 30_000),
      ...(this.#o.acceptUnsignedDispatches ? ["--accept-unsigned"] : []),
    ];
    // The replica gets its deployment's key, never the master secret (not even one inherited from this shell).
    const env: NodeJS.ProcessEnv = { ...process.env, SWITCHYARD_REPLICA_KEY: await this.replicaKey(d.name) };
    delete env.SWITCHYARD_REPLICA_SECRET;
    const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], env });
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    this.#pipeLog(child, id, true);
    const url = await new Promise<string>((resolveUrl, reject) => {
      let url = "";
      const lines = createInterface({ input: child.stdout! });
      lines.on("line", (line) => {
        let ev: { event?: string; url?: string };
        try {
          ev = JSON.parse(line) as typeof ev;
        } catch {
          return;
        }
        if (ev.event === "listening" && ev.url) url = ev.url;
        if (ev.event === "registered") resolveUrl(url);
      });
      void exited.then((code) => reject(new Error(`replica ${id} exited with ${code} before registering`)));
    });
    const rp: ReplicaProcess = { id, deployment: d.name, url, child, exited };
    this.replicas.set(id, rp);
    this.#started.push({ id, deployment: d.name });
    this.#recordReplicas();
    void exited.then(() => this.replicas.delete(id));
    return rp;
  }

  /** Where this stack lists the replicas it started, so the next start can take them out of routing. */
  get #replicasFile(): string {
    return join(this.#stateDir, "replicas.json");
  }

  #recordReplicas(): void {
    writeFileSync(this.#replicasFile, JSON.stringify(this.#started), { mode: 0o600 });
  }

  /**
   * Deregisters the replicas the previous run of this stack started. A routing object
   * that restarts keeps its members (in production their replicas are usually alive),
   * so without this a restarted local stack routed to the previous run's dead replicas
   * for 2.5 s, and /-/healthz counted them as ready. Signed like any replica's
   * deregister (the stack holds the master secret); replicas started elsewhere (an
   * agent in another terminal) are left alone.
   */
  async #forgetPreviousReplicas(): Promise<void> {
    let previous: { id: string; deployment: string }[];
    try {
      previous = JSON.parse(readFileSync(this.#replicasFile, "utf8")) as typeof previous;
    } catch {
      return; // first run, or fresh state
    }
    const nonces = new NonceCounter();
    await Promise.all(
      previous
        .filter((r) => this.deployments.some((d) => d.name === r.deployment))
        .map(async (r) => {
          const body = new TextEncoder().encode(JSON.stringify({ protocol: PROTOCOL_VERSION, deployment: r.deployment, replica_id: r.id }));
          const key = await importReplicaKey(await this.replicaKey(r.deployment));
          const headers = await signedHeaders(key, { timestamp: Date.now(), nonce: nonces.next(), path: ControlPath.deregister, body });
          await fetch(`${this.workerdUrl}${ControlPath.deregister}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body }).then(
            (res) => res.body?.cancel(),
            () => undefined,
          );
        }),
    );
    rmSync(this.#replicasFile, { force: true });
  }

  /** A deployment's replica key, derived from this stack's master secret (what `replica --print-key` prints). */
  replicaKey(deployment: string): Promise<string> {
    return deriveReplicaKey(this.replicaSecret, deployment);
  }

  /** Routing state of a deployment as the routing Durable Object sees it (admin route). */
  async deploymentState(name: string): Promise<{ snapshot: { replicas: { id: string; load: { state: string } }[] }; router: Record<string, number | string> }> {
    const res = await fetch(`${this.workerdUrl}/-/deployments/${name}`, { headers: { authorization: `Bearer ${this.adminSecret}` } });
    if (!res.ok) throw new Error(`deployment state: ${res.status} ${await res.text()}`);
    return (await res.json()) as never;
  }

  async stop(): Promise<void> {
    await this.#actuator?.stop();
    const exits = [...this.replicas.values()].map((r) => {
      r.child.kill("SIGTERM");
      return Promise.race([r.exited, sleep(5_000).then(() => r.child.kill("SIGKILL"))]);
    });
    await Promise.all(exits);
    await new Promise<void>((r) => (this.#front ? this.#front.close(() => r()) : r()));
    if (this.#workerd && this.#workerd.exitCode === null) {
      const w = this.#workerd;
      const gone = new Promise((r) => w.once("exit", r));
      w.kill("SIGTERM");
      await Promise.race([gone, sleep(3_000).then(() => w.kill("SIGKILL"))]);
    }
  }

  /** Kills every child at once, synchronously (for process exit). */
  killAll(): void {
    void this.#actuator?.stop();
    for (const r of this.replicas.values()) r.child.kill("SIGKILL");
    this.#workerd?.kill("SIGKILL");
  }

  /** Kills every child at once, as a terminal's Ctrl-C may, and waits until they are gone (tests). */
  async kill(): Promise<void> {
    const gone = [...this.replicas.values()].map((r) => r.exited);
    const w = this.#workerd;
    if (w && w.exitCode === null && w.signalCode === null) gone.push(new Promise((r) => w.once("exit", r)));
    this.killAll();
    await Promise.all(gone);
    await new Promise<void>((r) => (this.#front ? this.#front.close(() => r()) : r()));
  }

  #pipeLog(child: ChildProcess, name: string, stderrOnly = false): void {
    const log = this.#o.log;
    if (!log) {
      if (!stderrOnly) child.stdout?.resume();
      child.stderr?.resume();
      return;
    }
    const forward = (s: NodeJS.ReadableStream) => createInterface({ input: s }).on("line", (l) => log(`[${name}] ${l}`));
    if (!stderrOnly && child.stdout) forward(child.stdout);
    if (child.stderr) forward(child.stderr);
  }

  async #waitFor(url: string, timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      if (this.#workerd?.exitCode !== null) throw new Error(`workerd exited with ${this.#workerd?.exitCode}`);
      try {
        if ((await fetch(url)).ok) return;
      } catch {
        // not up yet
      }
      await sleep(100);
    }
    throw new Error(`${url} did not answer within ${timeoutMs} ms`);
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** SWITCHYARD_WORKERD_INSPECTOR=host:port opens workerd's V8 inspector there (bench/profile/profile-proxy.ts). */
function inspectorArgs(): string[] {
  const addr = process.env.SWITCHYARD_WORKERD_INSPECTOR;
  return addr ? ["--inspector-addr", addr] : [];
}
