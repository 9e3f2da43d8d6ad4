/**
 * The typed API a user's `functions/*.ts` files use to declare a served
 * deployment: its route, its backend pool, its dispatch policy and limits.
 * Everything a user may set is defined and documented here, with its default.
 */
import { z } from "zod";
import { DEPLOYMENT_NAME } from "../protocol/messages.ts";

/** What the reference replica runs for this deployment (`npm start` and tests). */
const Backend = z.discriminatedUnion("kind", [
  /** Answers every request with a fixed text: the seed's "hi" deployment. */
  z.object({ kind: z.literal("text"), text: z.string() }).strict(),
  /** Runs an ONNX model (onnxruntime-web) on a JSON body. */
  z.object({ kind: z.literal("onnx"), model: z.string().min(1) }).strict(),
  /** Echoes the request body back as a stream (tests and benchmarks of the byte path). */
  z.object({ kind: z.literal("echo") }).strict(),
  /** Replicas are started elsewhere (e.g. GPU servers running the replica CLI); none locally. */
  z.object({ kind: z.literal("external") }).strict(),
]);

const DeploymentInput = z
  .object({
    /** Deployment name: lowercase letters, digits, '-'. Also the routing Durable Object's name. */
    name: z.string().regex(DEPLOYMENT_NAME),
    /** Longest-prefix route, e.g. "/hello". "/" catches everything no other prefix takes. */
    routePrefix: z
      .string()
      .regex(/^\/([A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*)?$/, "route prefixes look like /a/b, without a trailing slash"),
    backend: Backend,
    /** Replicas `npm start` launches for this deployment on this machine. */
    localReplicas: z.number().int().min(0).max(256).default(2),
    /** Requests a replica executes at once before it rejects (Ray Serve's max_ongoing_requests). */
    maxOngoingRequests: z.number().int().min(1).max(100_000).default(5),
    policy: z
      .object({
        /** Dispatch attempts per request, counting the first (retries happen only before a replica accepted). */
        maxAttempts: z.number().int().min(1).max(10).default(3),
        /** Backoff before retry k is min(cap, base * 2^(k-1)) with full jitter, ms. */
        backoffBaseMs: z.number().int().min(0).max(10_000).default(5),
        backoffCapMs: z.number().int().min(0).max(60_000).default(250),
        /** Time a replica has to start answering (response headers), ms; then 504. */
        requestTimeoutMs: z.number().int().min(1).max(600_000).default(60_000),
        /** Forward the path with the route prefix removed (Ray's root_path style) instead of unchanged. */
        stripPrefix: z.boolean().default(false),
        /**
         * Requests have no side effects, so one whose connection to a replica was
         * lost may run again elsewhere. workerd reports a refused connection and a
         * connection lost after the request was sent the same way, so without this
         * only idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE) or requests with
         * an Idempotency-Key are retried after a connection loss (nginx's rule).
         * Rejections (503 + x-switchyard-rejected) are always retried.
         */
        idempotent: z.boolean().default(false),
      })
      .strict()
      .default({ maxAttempts: 3, backoffBaseMs: 5, backoffCapMs: 250, requestTimeoutMs: 60_000, stripPrefix: false, idempotent: false }),
    limits: z
      .object({
        /** Largest request body accepted, bytes; larger gets 413 before any replica sees it. */
        maxRequestBodyBytes: z.number().int().min(0).max(100 * 1024 * 1024).default(10 * 1024 * 1024),
        /**
         * Bodies with a Content-Length up to this size are held by the proxy so a
         * dispatch a replica rejected can be replayed on another one. Larger or
         * chunked bodies stream straight through and get a single attempt.
         */
        replayableBodyBytes: z.number().int().min(0).max(1024 * 1024).default(64 * 1024),
      })
      .strict()
      .default({ maxRequestBodyBytes: 10 * 1024 * 1024, replayableBodyBytes: 64 * 1024 }),
  })
  .strict();

export type DeploymentInput = z.input<typeof DeploymentInput>;
export type Deployment = z.output<typeof DeploymentInput>;
export type BackendSpec = z.output<typeof Backend>;

/** Declares a served deployment; validates it at build time and at Worker start. */
export function defineDeployment(input: DeploymentInput): Deployment {
  const parsed = DeploymentInput.safeParse(input);
  if (!parsed.success) {
    const name = typeof input === "object" && input && "name" in input ? String(input.name) : "?";
    throw new Error(`invalid deployment "${name}": ${z.prettifyError(parsed.error)}`);
  }
  return parsed.data;
}

/** Checks a whole set of deployments for clashes the router cannot resolve. */
export function checkDeployments(deployments: readonly Deployment[]): void {
  const names = new Set<string>();
  const prefixes = new Set<string>();
  for (const d of deployments) {
    if (names.has(d.name)) throw new Error(`two deployments are named "${d.name}"`);
    if (prefixes.has(d.routePrefix)) throw new Error(`two deployments use route prefix "${d.routePrefix}"`);
    if (d.routePrefix.startsWith("/-/") || d.routePrefix === "/-") throw new Error(`route prefix "${d.routePrefix}" is reserved for system routes`);
    names.add(d.name);
    prefixes.add(d.routePrefix);
  }
}
