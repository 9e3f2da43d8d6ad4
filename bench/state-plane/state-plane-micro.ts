/**
 * The in-process part of bench/state-plane/state-plane.ts: what one routing-view refresh
 * costs an isolate at 100, 2,000 and 10,000 replicas, for both designs, with no
 * network. The snapshots are built by the code the objects run (Membership per
 * shard, mergeSnapshots and the relay's agedSnapshot + boundedView), and applied
 * with the isolate's own RoutingView.applySnapshot.
 *
 * - single object: the isolate receives the object's whole snapshot;
 * - shards + relay: `shards` Membership objects own the nodes (8 replicas a
 *   node, shardOfNode); as the relay asks them, each sends a bounded sample of
 *   its share (RELAY_MAX_REPLICAS over the shards), the relay merges them and
 *   hands the isolate a bounded view (at most VIEW_MAX_REPLICAS) of the merge,
 *   aged by half its TTL (an average answer).
 *
 * Bytes are the JSON of what the isolate receives (and, for reference, its V8
 * serialization: Durable Object RPC carries structured-clone data). The
 * isolate's CPU per refresh is v8.deserialize of that payload plus
 * applySnapshot into a view that already holds the replicas (the steady state),
 * each timed with process.cpuUsage over many repetitions (Node's V8 standing in
 * for workerd's).
 */
import { deserialize, serialize } from "node:v8";
import { PROTOCOL_VERSION, type RoutingSnapshot } from "../../src/protocol/index.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { agedSnapshot, boundedView } from "../../src/state/bounded-view.ts";
import { Membership } from "../../src/state/membership.ts";
import { RELAY_MAX_REPLICAS, RELAY_TTL_MS } from "../../src/state/relay-cadence.ts";
import { mergeSnapshots, shardOfNode } from "../../src/state/routing-shards.ts";

export interface MicroRow {
  design: "single" | "sharded";
  replicas: number;
  /** Replicas in what the isolate receives. */
  viewReplicas: number;
  jsonBytes: number;
  v8Bytes: number;
  /** Isolate CPU per refresh, µs: deserializeUs + applyUs. */
  isolateCpuUs: number;
  /** v8.deserialize of the payload (the RPC's structured clone, receiving side), µs. */
  deserializeUs: number;
  /** RoutingView.applySnapshot into a view that already holds the replicas, µs. */
  applyUs: number;
  /** Sender's CPU per refresh: the object's snapshot (single), or the relay's view of its merged snapshot (sharded), µs. */
  senderCpuUs: number;
  /** Sharded only: a relay refresh, once per RELAY_TTL_MS: the shards' samples and their merge, µs. */
  mergeCpuUs?: number;
  repetitions: number;
}

const NAME = "bench";
const RELAY_SEED = 777;
const ISOLATE_SEED = 12345;

function members(n: number, shards: number, perNode: number, now: number): Membership[] {
  const out = Array.from({ length: shards }, () => new Membership());
  for (let i = 0; i < n; i++) {
    const node = `simnode-${NAME}-${Math.floor(i / perNode)}`;
    const id = `sim-${NAME}-${i}`;
    const m = out[shardOfNode(node, shards)]!;
    m.register({ protocol: PROTOCOL_VERSION, deployment: NAME, replica_id: id, url: `http://127.0.0.1:40123/sim/${id}`, max_ongoing_requests: 5, node }, now - 5_000);
    m.report({ protocol: PROTOCOL_VERSION, deployment: NAME, replica_id: id, seq: 1 + (i % 7), ts: now, state: "ready", ongoing: i % 5, queued: 0, models: [], loading: [] }, now - 200);
  }
  return out;
}

/** CPU µs per call of `fn`, over enough repetitions for ~`budgetMs` of CPU (at least 5). */
function cpuPerCall(fn: () => void, budgetMs: number): { us: number; reps: number } {
  fn(); // warm (JIT, allocation sites)
  const probe = process.cpuUsage();
  fn();
  const one = process.cpuUsage(probe);
  const oneUs = Math.max(1, one.user + one.system);
  const reps = Math.max(5, Math.min(20_000, Math.round((budgetMs * 1000) / oneUs)));
  const t = process.cpuUsage();
  for (let i = 0; i < reps; i++) fn();
  const used = process.cpuUsage(t);
  return { us: (used.user + used.system) / reps, reps };
}

export function measureRefresh(sizes: readonly number[], shards: number, perNode: number, budgetMs = 300): MicroRow[] {
  const rows: MicroRow[] = [];
  for (const n of sizes) {
    const now = Date.now();
    for (const design of ["single", "sharded"] as const) {
      const objects = members(n, design === "single" ? 1 : shards, perNode, now);
      let received: RoutingSnapshot;
      let sender: () => unknown;
      let mergeCpuUs: number | undefined;
      if (design === "single") {
        sender = () => serialize(objects[0]!.snapshot(NAME, now));
        received = objects[0]!.snapshot(NAME, now);
      } else {
        // What SnapshotRelay's refresh asks each shard for (DeploymentRouter.snapshot with a sample).
        const max = Math.ceil(RELAY_MAX_REPLICAS / objects.length);
        const refresh = () => mergeSnapshots(NAME, objects.map((m) => boundedView(m.snapshot(NAME, now), RELAY_SEED, now, max, Math.ceil(max / 4))));
        const merged = refresh();
        mergeCpuUs = cpuPerCall(refresh, budgetMs).us;
        const age = RELAY_TTL_MS / 2;
        sender = () => serialize(boundedView(agedSnapshot(merged, age), ISOLATE_SEED, now));
        received = boundedView(agedSnapshot(merged, age), ISOLATE_SEED, now);
      }
      const payload = serialize(received);
      const view = new RoutingView();
      view.applySnapshot(deserialize(payload) as RoutingSnapshot, now);
      const decode = cpuPerCall(() => deserialize(payload), budgetMs);
      const decoded = deserialize(payload) as RoutingSnapshot;
      const apply = cpuPerCall(() => view.applySnapshot(decoded, now), budgetMs);
      rows.push({
        design,
        replicas: n,
        viewReplicas: received.replicas.length,
        jsonBytes: Buffer.byteLength(JSON.stringify(received)),
        v8Bytes: payload.byteLength,
        isolateCpuUs: decode.us + apply.us,
        deserializeUs: decode.us,
        applyUs: apply.us,
        senderCpuUs: cpuPerCall(sender, budgetMs).us,
        ...(mergeCpuUs !== undefined ? { mergeCpuUs } : {}),
        repetitions: Math.min(decode.reps, apply.reps),
      });
    }
  }
  return rows;
}
