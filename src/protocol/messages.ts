/**
 * Control-plane messages, replica → edge (membership and load reports), and the
 * routing snapshot, edge Durable Object → proxy isolates. Validated with zod at
 * every boundary; unknown fields are rejected so typos surface as errors.
 */
import { z } from "zod";
import { PROTOCOL_VERSION } from "./headers.ts";
import {
  MODEL_ID,
  MAX_CACHE_SUMMARY_BITS_CHARS,
  MAX_CACHE_SUMMARY_FILTER_BYTES,
  MAX_CACHE_SUMMARY_KEYS,
  MAX_DISPATCH_NOTE_KEYS,
  MAX_DISPATCH_NOTES_PER_POST,
  MAX_LOAD_COUNT,
  MAX_NODE_REPLICAS,
  MAX_REPLICA_MODELS,
  MAX_CONTROL_BODY_BYTES,
  MAX_DEMAND_FLOWS,
  MAX_NODE_REPORT_BYTES,
  MAX_DRAIN_DEADLINE_MS,
  MAX_PREFILL_RATE,
  MAX_PREFILL_WAIT_MS,
  MAX_TRIP_MS,
  MAX_TRIP_NOTES,
} from "./limits.ts";
import { SystemPath } from "./paths.ts";
import type { Load } from "./load.ts";

export const DEPLOYMENT_NAME = /^[a-z][a-z0-9-]{0,62}$/;
export const REPLICA_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

const deploymentName = z.string().regex(DEPLOYMENT_NAME, "deployment names are lowercase letters, digits and '-'");
const replicaId = z.string().regex(REPLICA_ID, "replica ids are 1-128 of [A-Za-z0-9._:-]");
/**
 * The node (machine) a replica runs on, same characters as replica ids. A
 * deployment's routing shards own nodes: every replica of a node lives in the
 * same shard, so one node report reaches one object. Without it, the replica
 * id is the node.
 */
const nodeId = z.string().regex(REPLICA_ID, "node ids are 1-128 of [A-Za-z0-9._:-]");
const count = z.number().int().min(0).max(MAX_LOAD_COUNT);
const modelId = z.string().regex(MODEL_ID, "model ids are 1-128 of [A-Za-z0-9._:@/+-], starting with a letter or digit");

const replicaUrl = z
  .string()
  .max(2048)
  .url()
  .refine((raw) => {
    // zod runs refinements even after .url() failed, so parse defensively.
    if (raw.includes("?") || raw.includes("#")) return false;
    let u: URL;
    try {
      u = new URL(raw);
    } catch {
      return false;
    }
    return (u.protocol === "http:" || u.protocol === "https:") && !u.username && !u.password;
  }, "replica url must be http(s), without credentials, query or fragment");

/**
 * An engine's own API key (vLLM `--api-key`), which the edge sends as
 * `Authorization: Bearer <key>` on every dispatch to that replica: visible
 * ASCII, as a header value must be.
 */
export const ENGINE_KEY = /^[\x21-\x7e]{1,512}$/;

/** A form of stream continuation (docs/migration.md): a chat's, or a text completion's. */
export const ContinuationForm = z.enum(["chat", "completion"]);
export type ContinuationForm = z.infer<typeof ContinuationForm>;

/**
 * A replica's parts in prefill/decode disaggregation (§2d): `prefill` takes a request's
 * prefill leg, `decode` its decode leg (and whole requests the edge does not split).
 */
export const ReplicaRole = z.enum(["prefill", "decode"]);
export type ReplicaRole = z.infer<typeof ReplicaRole>;

/** How a replica's or an agent's flag names its roles (`--role`, `--engine-role`): one of them, or both. */
export const REPLICA_ROLE_FLAGS = ["prefill", "decode", "both"] as const;
export type ReplicaRoleFlag = (typeof REPLICA_ROLE_FLAGS)[number];

/** The roles a role flag declares. */
export function rolesOf(flag: ReplicaRoleFlag): ReplicaRole[] {
  return flag === "both" ? ["prefill", "decode"] : [flag];
}

/** A replica's region name (register's `region`): "us-east-1", "eu-central", "fra". */
export const REPLICA_REGION = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * Where a replica is, in degrees (register's `coordinates`): latitude -90..90, longitude
 * -180..180 (zod 4's numbers are finite: NaN and infinities are refused).
 */
export const ReplicaCoordinates = z
  .object({
    lat: z.number().min(-90).max(90),
    lon: z.number().min(-180).max(180),
  })
  .strict();
export type ReplicaCoordinates = z.infer<typeof ReplicaCoordinates>;

/** The fields every control message starts with: the protocol's version and the deployment it is about. */
const MessageHead = {
  protocol: z.literal(PROTOCOL_VERSION),
  deployment: deploymentName,
};

export const RegisterMessage = z
  .object({
    ...MessageHead,
    replica_id: replicaId,
    url: replicaUrl,
    max_ongoing_requests: z.number().int().min(1).max(100_000),
    /** Multiplexing: how many models the replica keeps loaded at once (informational). */
    max_models: z.number().int().min(1).max(MAX_REPLICA_MODELS).optional(),
    /**
     * The engine's bearer key (replica agent in front of vLLM or SGLang): the edge
     * sends it with every dispatch. A register with another key replaces it (rotation).
     */
    engine_key: z.string().regex(ENGINE_KEY, "engine keys are 1-512 visible ASCII characters").optional(),
    /**
     * The stream continuations the replica's engine takes (§2c): `chat` (vLLM's
     * continue_final_message), `completion` (the prompt followed by the text). Absent:
     * both, as vLLM, SGLang and the reference replica do; the edge sends a continuation
     * only to a replica that takes its form.
     */
    continues: z.array(ContinuationForm).max(2).optional(),
    /**
     * Its parts in prefill/decode disaggregation (§2d): the edge sends a split request's
     * prefill leg only to a `prefill` replica, its decode leg (and an unsplit request of a
     * P/D deployment) only to a `decode` one. Absent: both, as a unified engine.
     */
    roles: z
      .array(ReplicaRole)
      .min(1)
      .max(2)
      .refine((r) => new Set(r).size === r.length, "a role is listed twice")
      .optional(),
    /**
     * A prefill replica's KV bootstrap port, for SGLang's protocol (§2d): a split's legs
     * name it (`bootstrap_port`) with the host of `url`, and the decode fetches the KV
     * there. Absent: none (the legs say null, as SGLang's router does).
     */
    bootstrap_port: z.number().int().min(1).max(65_535).optional(),
    /**
     * The replica's region, a free-form name ("us-east-1", "fra"): an edge weighs a
     * replica's distance when it chooses (issue 57), and a region names where it is
     * for views and for edges that group replicas by it. Absent: not declared.
     */
    region: z.string().regex(REPLICA_REGION, "a region is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit").optional(),
    /**
     * Where the replica is (degrees): an edge that has not measured its distance to the
     * replica yet estimates it from geography (issue 57). Absent: not declared.
     */
    coordinates: ReplicaCoordinates.optional(),
    node: nodeId.optional(),
  })
  .strict();
export type RegisterMessage = z.infer<typeof RegisterMessage>;

/** Canonical base64 (padded), as btoa writes it. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Bytes a padded base64 string decodes to. */
function base64Bytes(text: string): number {
  return (text.length / 4) * 3 - (text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0);
}

/** A prefix-cache summary as it travels (JSON inside a report, a snapshot, a relayed view). */
export interface CacheSummaryWire {
  /** Format version. */
  v: 1;
  /** Number of hash functions. */
  k: number;
  /** Keys the filter holds. */
  n: number;
  /** Tokens per block the keys were made with. */
  block: number;
  /** The filter's bits, base64 (length × 8 bits; a multiple of 8 bytes). */
  bits: string;
}

/**
 * A replica's prefix-cache summary (src/prefix/cache-summary.ts): a Bloom filter
 * over the block keys it holds, at most MAX_CACHE_SUMMARY_FILTER_BYTES before
 * base64, a multiple of 8 bytes. Bounded here so a report stays small
 * (MAX_REPORT_WITH_SUMMARY_BYTES) and an edge never parses a large one.
 */
export const PrefixCacheSummary: z.ZodType<CacheSummaryWire> = z
  .object({
    /** Format version of the summary. */
    v: z.literal(1),
    /** Hash functions. */
    k: z.number().int().min(1).max(16),
    /** Keys the filter holds. */
    n: z.number().int().min(0).max(MAX_CACHE_SUMMARY_KEYS),
    /** Tokens per block the keys were made with (vLLM's block_size). */
    block: z.number().int().min(1).max(1024),
    /** The filter, base64. */
    bits: z
      .string()
      .max(MAX_CACHE_SUMMARY_BITS_CHARS)
      .regex(BASE64, "bits must be padded base64")
      .refine((b) => {
        const n = base64Bytes(b);
        return n >= 8 && n <= MAX_CACHE_SUMMARY_FILTER_BYTES && n % 8 === 0;
      }, `bits must decode to a multiple of 8 bytes, 8 to ${MAX_CACHE_SUMMARY_FILTER_BYTES}`),
  })
  .strict();

/** One replica's load, as a report carries it (alone, or as an entry of a node report). */
const ReportFields = {
  replica_id: replicaId,
  seq: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  /** Sender's clock, epoch ms: lets the edge log clock skew; freshness uses the edge's clock. */
  ts: z.number().int().min(0),
  state: z.enum(["ready", "draining"]),
  ongoing: count,
  queued: count,
  kv_cache_usage: z.number().min(0).max(1).optional(),
  /** How long a new request's prefill would wait now, ms (Load.prefillWaitMs; the load header's `prefill_wait`). */
  prefill_wait_ms: z.number().int().min(0).max(MAX_PREFILL_WAIT_MS).optional(),
  /** Uncached prompt tokens prefilled per second, measured lately (Load.prefillRate; the load header's `prefill_rate`). */
  prefill_rate: z.number().int().min(1).max(MAX_PREFILL_RATE).optional(),
  /** Models loaded and ready to serve (multiplexing). */
  models: z.array(modelId).max(MAX_REPLICA_MODELS).default([]),
  /** Models being loaded now; requests for them wait on the load instead of starting another elsewhere. */
  loading: z.array(modelId).max(MAX_REPLICA_MODELS).default([]),
  /**
   * The replica's prefix-cache summary, sent only when it changed since the last
   * report the edge accepted and at least every SUMMARY_RESEND_MS; absent: unchanged;
   * null: the replica holds no summary now (the edge drops the one it has).
   */
  prefix_cache: PrefixCacheSummary.nullable().optional(),
  /**
   * While draining with a deadline (the drain timeout, a spot notice): milliseconds
   * from this report until the replica stops serving. The edge moves the streams it
   * can continue elsewhere before then (docs/migration.md, "Drain deadlines").
   */
  drain_deadline_ms: z.number().int().min(0).max(MAX_DRAIN_DEADLINE_MS).optional(),
};

export const ReportMessage = z
  .object({
    ...MessageHead,
    ...ReportFields,
    /** The node named at register, if any: it picks the routing shard. */
    node: nodeId.optional(),
  })
  .strict();
export type ReportMessage = z.infer<typeof ReportMessage>;

export const DeregisterMessage = z
  .object({
    ...MessageHead,
    replica_id: replicaId,
    node: nodeId.optional(),
  })
  .strict();
export type DeregisterMessage = z.infer<typeof DeregisterMessage>;

/**
 * Node batching: one agent per node reports for all its replicas in one signed
 * message, at one replica's cadence. Every entry is a report of a replica that
 * registered with this `node`; the edge applies each as if sent alone.
 */
export const NodeReportMessage = z
  .object({
    ...MessageHead,
    node: nodeId,
    reports: z.array(z.object(ReportFields).strict()).min(1).max(MAX_NODE_REPLICAS),
  })
  .strict()
  .refine((m) => new Set(m.reports.map((r) => r.replica_id)).size === m.reports.length, "a replica appears twice in one node report");
export type NodeReportMessage = z.infer<typeof NodeReportMessage>;
/** One entry of a node report. */
export type NodeReportEntry = NodeReportMessage["reports"][number];

/** Answer of the edge to a node report: one outcome per entry, in order. */
export interface NodeReportAck {
  ok: true;
  outcomes: ("ok" | "stale_seq" | "unknown_replica" | "drain")[];
}

/** One replica as the routing snapshot shows it to proxies. */
export interface ReplicaView {
  id: string;
  url: string;
  /** Changes when the replica registers again (a new process): its seq starts over. */
  epoch: number;
  load: Load;
  /** Loaded models (multiplexing). */
  models: string[];
  /** Models being loaded. */
  loading: string[];
  /** Milliseconds until the replica's last report goes stale; proxies stop choosing it then. */
  expiresInMs: number;
  /** Draining with a deadline: milliseconds until it stops serving (its report's drain_deadline_ms, aged). */
  drainsInMs?: number;
  /** The continuation forms it takes, where it declared them (absent: both). */
  continues?: ContinuationForm[];
  /** Its parts in prefill/decode disaggregation, where it declared them (absent: both). */
  roles?: ReplicaRole[];
  /** Its KV bootstrap port (SGLang's protocol), where it declared one. */
  bootstrapPort?: number;
  /** Its region's name, where it declared one (issue 57). */
  region?: string;
  /** Where it is (degrees), where it declared it (issue 57). */
  coordinates?: ReplicaCoordinates;
  /** The engine's bearer key, sent with every dispatch (never shown outside the edge: admin answers redact it). */
  engineKey?: string;
  /**
   * Content digest (16 hex digits) of the replica's prefix-cache summary; absent
   * when it reports none. An asker that holds a summary with this digest is sent
   * the digest only (src/state/summary-delta.ts).
   */
  cacheDigest?: string;
  /** The summary itself: present only when the asker did not hold `cacheDigest` and the answer's summary budget had room. */
  cache?: CacheSummaryWire;
}

/**
 * What an asker of a snapshot (a relay, or an isolate) says about summaries: the
 * digests it holds (concatenated 16-hex digests, src/state/summary-delta.ts), whose
 * summaries the answer leaves out, and how many summary bytes the answer may carry.
 */
export interface SummaryAsk {
  have: string;
  maxBytes: number;
}

/** What a proxy isolate caches per deployment (refreshed on a short TTL). */
export interface RoutingSnapshot {
  deployment: string;
  /** Replicas with a fresh report, ready or draining (proxies never pick draining ones). */
  replicas: ReplicaView[];
  /**
   * Set when `replicas` is a bounded sample of a larger deployment (a relay's
   * answer to one isolate, src/state/bounded-view.ts): how many replicas the
   * whole deployment has in view.
   */
  total?: number;
  /**
   * Other isolates' dispatches in this location since the asker's cursor, newest
   * last: only in a relay's answer to an isolate that posted its own (RelayDispatchPost).
   */
  peers?: PeerDispatches;
  /**
   * The asker's budget of requests in flight (src/policy/admission-shares.ts): only in a
   * relay's answer to an isolate that posted its admission demand, and only while the
   * location's demand, with the higher bands' headroom, exceeds the replicas' slots.
   */
  admissionBudget?: number;
  /**
   * With the budget: caps for the asker's flows that ask more than their max-min share
   * across the location, by flow key: requests in flight, whole (the isolates' parts
   * are rounded together, so they sum to the flow's share).
   */
  admissionFlowCaps?: Record<string, number>;
  /**
   * With the budget: requests at this priority or above are not held to it (their
   * bands got all they ask; the lower bands leave them headroom).
   */
  admissionOpenFrom?: number;
  /**
   * The other locations' admission demand (src/policy/location-demand.ts): only in the
   * leader shard's answer to a relay that posted its location's: a LocationDemand,
   * typed loosely as it crosses the RPC (which does not keep tuples) and parsed there.
   */
  admissionElsewhere?: { bands: number[][]; flows: (string | number)[][] };
}

/**
 * What an isolate tells its relay of its admission demand with each view ask: per
 * priority band, its requests in flight plus those it holds (`bands`), and how many
 * it holds (`held`: demand the replicas cannot report, which the relay passes on to
 * the autoscaler). docs/admission.md.
 */
export const AdmissionDemandPost = z
  .object({
    bands: z.array(z.tuple([z.number().int().min(-1000).max(1000), z.number().int().min(0).max(1_000_000)])).max(64),
    held: z.number().int().min(0).max(1_000_000),
    /**
     * The same demand per flow: [priority, flow key (16 hex digits, a hash of the flow),
     * requests]; the largest first, the rest summed into one key of the isolate's own.
     */
    flows: z
      .array(z.tuple([z.number().int().min(-1000).max(1000), z.string().regex(/^[0-9a-f]{16}$/), z.number().int().min(0).max(1_000_000)]))
      .max(MAX_DEMAND_FLOWS)
      .optional(),
  })
  .strict();
export type AdmissionDemandPost = z.infer<typeof AdmissionDemandPost>;

/**
 * A location's admission demand, summed over its isolates' posts (AdmissionDemandPost),
 * as its relay tells the deployment's leader shard with the snapshot ask it makes anyway
 * (once per refresh), and the other locations' sum in the leader's answer: per band,
 * and per flow (the largest; the rest of a band summed under a key of the sender's own).
 * So the relays share the deployment's slots across locations with no call of their
 * own (docs/admission.md, "Across locations").
 */
export const LocationDemand = z
  .object({
    bands: z.array(z.tuple([z.number().int().min(-1000).max(1000), z.number().int().min(0).max(1_000_000_000)])).max(64),
    flows: z
      .array(z.tuple([z.number().int().min(-1000).max(1000), z.string().regex(/^[0-9a-f]{16}$/), z.number().int().min(0).max(1_000_000_000)]))
      .max(2 * MAX_DEMAND_FLOWS),
  })
  .strict();
export type LocationDemand = z.infer<typeof LocationDemand>;
/** A relay's LocationDemand as it rides on its snapshot ask to the leader shard: `location` names the relay. */
export interface LocationDemandAsk {
  location: string;
  demand: LocationDemand;
}

/**
 * One dispatch as an isolate tells its peers (src/state/dispatch-board.ts): replica
 * `r` accepted a prompt whose kept block keys are `k` (src/policy/recent-prefixes.ts:
 * every RECENT_PREFIX_STRIDE-th block's and the last's). The replica very likely holds
 * that prefix now; its own summary says so a second or two later.
 */
export const DispatchNoteMessage = z
  .object({
    r: z.string().regex(REPLICA_ID),
    k: z
      .array(z.string().regex(/^[0-9a-f]{16}$/))
      .min(1)
      .max(MAX_DISPATCH_NOTE_KEYS),
  })
  .strict();
export type DispatchNote = z.infer<typeof DispatchNoteMessage>;

/**
 * A round trip an isolate measured to replica `r`, ms (src/policy/latency-model.ts), as it
 * tells the other isolates of its location (src/state/trip-board.ts): a new isolate starts
 * with its peers' trips instead of guessing from geography.
 */
export const TripNoteMessage = z
  .object({
    r: z.string().regex(REPLICA_ID),
    ms: z.number().min(0).max(MAX_TRIP_MS),
  })
  .strict();
export type TripNote = z.infer<typeof TripNoteMessage>;

/** What an isolate sends its relay with each view ask: its dispatches since the last ask, and the cursor of the peers' it has seen. */
export const RelayDispatchPost = z
  .object({
    /** The `cursor` of the last answer (0 at first): the answer carries only later notes. */
    after: z.number().int().nonnegative(),
    notes: z.array(DispatchNoteMessage).max(MAX_DISPATCH_NOTES_PER_POST),
    /** Trips this isolate measured that changed since it last posted them. */
    trips: z.array(TripNoteMessage).max(MAX_TRIP_NOTES).optional(),
    /** The `tripCursor` of the last answer (0 at first). */
    tripsAfter: z.number().int().nonnegative().optional(),
  })
  .strict();
export type RelayDispatchPost = z.infer<typeof RelayDispatchPost>;

/** The peers' side of a relay's answer. */
export interface PeerDispatches {
  /** Send it back as `after` next time. */
  cursor: number;
  notes: DispatchNote[];
  /** The trips other isolates of the location posted after `tripsAfter` (the newest per replica), when the ask posted a cursor. */
  trips?: TripNote[];
  /** Send it back as `tripsAfter` next time. */
  tripCursor?: number;
}

/** The control plane's paths (POST, signed: docs/protocol.md §1). */
export const ControlPath = {
  register: `${SystemPath.replicas}/register`,
  report: `${SystemPath.replicas}/report`,
  deregister: `${SystemPath.replicas}/deregister`,
  /** Node batching: one report for all of a node's replicas (NodeReportMessage). */
  nodeReport: `${SystemPath.replicas}/report-node`,
} as const;

/**
 * Every control message: its schema, the path it is POSTed to and its largest
 * body. A new message is one entry here: scripts/protocol-schema.ts writes the
 * JSON Schema of each, and the control routes (src/proxy/routes/control.ts) take
 * path, schema and bound from it.
 */
export const CONTROL_MESSAGES = {
  RegisterMessage: { path: ControlPath.register, schema: RegisterMessage, maxBytes: MAX_CONTROL_BODY_BYTES },
  ReportMessage: { path: ControlPath.report, schema: ReportMessage, maxBytes: MAX_CONTROL_BODY_BYTES },
  DeregisterMessage: { path: ControlPath.deregister, schema: DeregisterMessage, maxBytes: MAX_CONTROL_BODY_BYTES },
  NodeReportMessage: { path: ControlPath.nodeReport, schema: NodeReportMessage, maxBytes: MAX_NODE_REPORT_BYTES },
} as const;

/** Answer of the edge to a register. */
export interface ControlAck {
  ok: true;
  /** How often the edge wants load reports, ms. */
  report_interval_ms: number;
}

/** Answer of the edge to a report (a report from a replica it does not know gets 409 unknown_replica instead). */
export interface ReportAck {
  ok: true;
  /** "stale_seq": accepted as proof of life, but older than the load held. */
  outcome: "ok" | "stale_seq";
  /** An operator asked this replica to drain (admin API): it should, and then leave. */
  drain?: true;
}

/** Answer of the edge to a deregister. */
export interface DeregisterAck {
  ok: true;
  /** Whether the replica was a member. */
  removed: boolean;
}
