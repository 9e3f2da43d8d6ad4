/**
 * Writes a workerd configuration (Cap'n Proto text) that serves the bundled
 * edge Worker with its routing Durable Objects on SQLite-backed local storage.
 * Raw workerd rather than `wrangler dev`: the same runtime as production with
 * none of wrangler's dev proxies in the request path (design notes: ~30x faster).
 */
import { relative } from "node:path";
import { compatibilityDate, compatibilityFlags, durableObjects } from "../config/runtime.ts";

export interface WorkerdConfigOptions {
  /** Absolute path of the bundled Worker (dist/worker.js). */
  workerPath: string;
  /** Directory the config file is written to: capnp resolves `embed` paths relative to it. */
  configDir: string;
  /** Absolute path of the Durable Object storage directory. */
  storageDir: string;
  /** host:port workerd listens on. */
  address: string;
  /** Plain-text bindings (secrets and vars). */
  vars: Record<string, string>;
  /**
   * The Worker's other modules, imported by the bundle by `name` (src/local/build.ts,
   * WorkerBundle.modules): compiled WebAssembly and data (ONNX weights) of edge models.
   */
  modules?: readonly { name: string; type: "wasm" | "data"; path: string }[];
  /**
   * host:port of each further edge isolate (services "edge-2".."edge-N"): the same
   * bundle and bindings, each service its own isolate (own module state: routing
   * views, caches), all bound to the Durable Objects of the first service, as
   * isolates on Cloudflare share one deployment's objects. Empty: one isolate.
   */
  moreEdges?: readonly string[];
  /**
   * The location each edge service serves from, the first and then moreEdges in order
   * (its own SWITCHYARD_LOCATION var: local workerd gives no `cf.colo`, and a cf blob
   * header would let a client name one); none: location "local". Tests and benches of
   * admission across locations give isolates different ones.
   */
  locations?: readonly string[];
  /**
   * Where each edge service is, in the same order (its SWITCHYARD_COORDINATES var, "lat,lon":
   * what Cloudflare's cf.latitude/longitude give a deployed isolate); none: unknown. Benches
   * of latency choice across regions place isolates with it.
   */
  coordinates?: readonly ({ lat: number; lon: number } | undefined)[];
}


const str = (s: string) => JSON.stringify(s);

/** Binding name → Durable Object class, for every edge service: wrangler.toml's [[durable_objects.bindings]]. */
const OBJECTS = durableObjects.map((o) => [o.name, o.className] as const);

/**
 * A Durable Object class's storage key in workerd ("switchyard-" and the class name in
 * kebab case, e.g. switchyard-deployment-router): it names the objects' files under
 * the storage directory, so it must stay the same from one run to the next.
 */
export function uniqueKeyOf(className: string): string {
  return `switchyard-${className.replace(/([a-z0-9])([A-Z])/g, "$1-$2").toLowerCase()}`;
}

export function workerdConfig(o: WorkerdConfigOptions): string {
  const vars = Object.entries(o.vars).map(([name, value]) => `(name = ${str(name)}, text = ${str(value)})`);
  const modules = [
    `(name = "worker.js", esModule = embed ${str(relative(o.configDir, o.workerPath))})`,
    ...(o.modules ?? []).map((m) => `(name = ${str(m.name)}, ${m.type} = embed ${str(relative(o.configDir, m.path))})`),
  ];
  const more = (o.moreEdges ?? []).map((address, i) => ({ n: i + 2, address }));
  const moreServices = more.map(({ n }) => `    (name = "edge-${n}", worker = .edgeWorker${n}),\n`).join("");
  const moreSockets = more.map(({ n, address }) => `    (name = "http-${n}", address = ${str(address)}, http = ${httpOptions(address)}, service = "edge-${n}"),\n`).join("");
  // The other edge services name the first one's namespaces, so every isolate reaches the same objects.
  const located = (n: number) => {
    const location = o.locations?.[n - 1];
    const at = o.coordinates?.[n - 1];
    return [
      ...(location === undefined ? [] : [`(name = "SWITCHYARD_LOCATION", text = ${str(location)})`]),
      ...(at === undefined ? [] : [`(name = "SWITCHYARD_COORDINATES", text = ${str(`${at.lat},${at.lon}`)})`]),
    ];
  };
  const sharedBindings = [...vars, ...OBJECTS.map(([name, cls]) => `(name = ${str(name)}, durableObjectNamespace = (className = ${str(cls)}, serviceName = "edge"))`)];
  const moreWorkers = more
    .map(({ n }) => `\nconst edgeWorker${n} :Workerd.Worker = (\n${workerBody(modules, [...sharedBindings, ...located(n)])}  globalOutbound = "internet",\n);\n`)
    .join("");
  return `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "edge", worker = .edgeWorker),
${moreServices}    # Replicas are on loopback or private addresses in local mode.
    # Link-local (cloud metadata) is never reachable, even if a replica's hostname resolves there.
    (name = "internet", network = (allow = ["public", "private", "local"], deny = ["169.254.0.0/16", "fe80::/10"], tlsOptions = (trustBrowserCas = true))),
    (name = "do-storage", disk = (path = ${str(o.storageDir)}, writable = true)),
  ],
  sockets = [
    (name = "http", address = ${str(o.address)}, http = ${httpOptions(o.address)}, service = "edge"),
${moreSockets}  ],
);

const edgeWorker :Workerd.Worker = (
${workerBody(modules, [...vars, ...located(1), ...OBJECTS.map(([name, cls]) => `(name = ${str(name)}, durableObjectNamespace = ${str(cls)})`)])}  durableObjectNamespaces = [
${durableObjects.map((o) => `    (className = ${str(o.className)}, uniqueKey = ${str(uniqueKeyOf(o.className))}${o.sqlite ? ", enableSql = true" : ""}),\n`).join("")}  ],
  durableObjectStorage = (localDisk = "do-storage"),
  globalOutbound = "internet",
);
${moreWorkers}`;
}

/**
 * A socket's HTTP options. workerd does not set `cf-connecting-ip` (Cloudflare
 * does), so a client could name any address it liked, and per-client budgets
 * (session bindings, unauthenticated bodies) would trust it: 600 of 600 sessions
 * were bound with a new value each. The socket replaces it, whatever the client
 * sent, with the host it listens on: on loopback, every local client is the same
 * client, which is what it is.
 */
function httpOptions(address: string): string {
  const host = address.slice(0, address.lastIndexOf(":")).replace(/^\[|\]$/g, "");
  return `(injectRequestHeaders = [(name = "cf-connecting-ip", value = ${str(host)})])`;
}

/** A Worker's modules, compatibility and bindings: the same bundle in every edge service. */
function workerBody(modules: readonly string[], bindings: readonly string[]): string {
  return `  modules = [
    ${modules.join(",\n    ")},
  ],
  compatibilityDate = ${str(compatibilityDate)},
  compatibilityFlags = [${compatibilityFlags.map(str).join(", ")}],
  bindings = [
    ${bindings.join(",\n    ")},
  ],
`;
}
