// @ts-nocheck
// Prefix-cache summaries through the Durable Objects inside workerd: routing
// shards keep each replica's latest (memory only, no SQLite row per report), the
// relay of a location merges them and hands each isolate only the summaries it
// does not hold, and without relays the isolate asks the shards the same way.
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary, type CacheSummaryWire } from "../../src/prefix/cache-summary.ts";
import type { RegisterMessage, ReportMessage } from "../../src/protocol/index.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";
import { routingShardName } from "../../src/state/routing-shards.ts";
import { mergedSnapshot } from "../../src/state/routing-plane.ts";
import { RELAY_TTL_MS } from "../../src/state/snapshot-relay.ts";
import { VIEW_SUMMARY_BYTES, decodeDigests, summaryDigest } from "../../src/state/summary-delta.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";

let lastNonce = 10_000_000;
const nonce = () => ++lastNonce;

const register = (deployment: string, id: string): RegisterMessage => registerMessage(id, { deployment, url: `http://127.0.0.1:9/${id}`, max_ongoing_requests: 4 });
const report = (deployment: string, id: string, seq: number, prefix_cache?: CacheSummaryWire | null): ReportMessage =>
  reportMessage(id, seq, { deployment, ts: Date.now(), ...(prefix_cache !== undefined && { prefix_cache }) });

const shard = (deployment: string, k: number) => env.ROUTER.get(env.ROUTER.idFromName(routingShardName(deployment, k)));
const relay = (deployment: string, location: string) => env.RELAYS.get(env.RELAYS.idFromName(`${deployment}@${location}`));
const keysOf = (seed: number) => blockKeys(Array.from({ length: 500 * 16 }, (_, i) => (i * 13 + seed * 104_729) % 50_000));
const summaryOf = (seed: number) => buildCacheSummary(keysOf(seed), 16);

async function until(what: string, check: () => Promise<boolean>, limitMs = 20_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Four replicas over two shards, each with a summary of its own. */
async function fleet(d: string): Promise<string[]> {
  const ids = ["a", "b", "c", "e"];
  for (const [i, id] of ids.entries()) {
    const s = shard(d, i % 2);
    await s.register(register(d, id), nonce(), { index: i % 2, count: 2 });
    expect(await s.report(report(d, id, 1, summaryOf(i)), nonce())).toBe("ok");
  }
  return ids;
}

describe("prefix-cache summaries in the routing objects", () => {
  it("a shard keeps a replica's summary from its report and counts it; a later report without one keeps it, null drops it", async () => {
    const d = "sum-a";
    await shard(d, 0).register(register(d, "a"), nonce(), { index: 0, count: 1 });
    await shard(d, 0).report(report(d, "a", 1, summaryOf(1)), nonce());
    await shard(d, 0).report(report(d, "a", 2), nonce());
    const full = await shard(d, 0).snapshot(undefined, { have: "", maxBytes: VIEW_SUMMARY_BYTES });
    expect(full.replicas[0]!.cache).toEqual(summaryOf(1));
    expect(full.replicas[0]!.cacheDigest).toBe(summaryDigest(summaryOf(1)));
    // Asked without an ask (admin, metrics): digests only.
    const light = await shard(d, 0).snapshot();
    expect(light.replicas[0]!.cacheDigest).toBe(summaryDigest(summaryOf(1)));
    expect(light.replicas[0]!.cache).toBeUndefined();
    expect(await shard(d, 0).stats()).toMatchObject({ summaries: 1, summaryReports: 1 });
    await shard(d, 0).report(report(d, "a", 3, null), nonce());
    expect((await shard(d, 0).snapshot()).replicas[0]!.cacheDigest).toBeUndefined();
  });

  it("the relay sends an isolate each summary once: the next view, asked with the digests it holds, carries digests only", async () => {
    const d = "sum-b";
    const ids = await fleet(d);
    const r = relay(d, "TEST");
    const view = new RoutingView();
    const first = await r.view(d, 2, 1, view.cacheDigests());
    expect(first.replicas.filter((x) => x.cache).length).toBe(ids.length);
    view.applySnapshot(first, Date.now());
    for (const [i, id] of ids.entries()) expect(view.get(id)!.cache!.matchedBlocks(keysOf(i), 16)).toBe(500);
    const firstBytes = JSON.stringify(first).length;
    const second = await r.view(d, 2, 1, view.cacheDigests());
    expect(second.replicas.filter((x) => x.cache).length).toBe(0);
    expect(second.replicas.every((x) => x.cacheDigest !== undefined)).toBe(true);
    view.applySnapshot(second, Date.now());
    expect(view.summaryParses).toBe(ids.length);
    const secondBytes = JSON.stringify(second).length;
    console.log(`relay view of 4 replicas with summaries: ${firstBytes} bytes first, ${secondBytes} bytes once held`);
    expect(secondBytes).toBeLessThan(firstBytes / 4);
    expect(await r.stats()).toMatchObject({ summaries: ids.length });
  });

  it("a changed summary reaches the isolate through the relay's next refresh, alone", async () => {
    const d = "sum-c";
    await fleet(d);
    const r = relay(d, "TEST");
    const view = new RoutingView();
    view.applySnapshot(await r.view(d, 2, 1, view.cacheDigests()), Date.now());
    await shard(d, 0).report(report(d, "a", 2, summaryOf(99)), nonce());
    let carried = 0;
    await until(
      "the new summary of a in the isolate's view",
      async () => {
        const v = await r.view(d, 2, 1, view.cacheDigests());
        carried = Math.max(carried, v.replicas.filter((x) => x.cache).length);
        view.applySnapshot(v, Date.now());
        return view.get("a")?.cache?.matchedBlocks(keysOf(99), 16) === 500;
      },
      20 * RELAY_TTL_MS,
    );
    expect(carried).toBe(1);
  });

  it("without relays (routing.relay false), the isolate asks the shards with its digests and gets the same", async () => {
    const d = "sum-d";
    const ids = await fleet(d);
    const view = new RoutingView();
    const first = await mergedSnapshot(env, d, 2, undefined, { have: view.cacheDigests(), maxBytes: VIEW_SUMMARY_BYTES });
    expect(first.replicas.filter((x) => x.cache).length).toBe(ids.length);
    view.applySnapshot(first, Date.now());
    const second = await mergedSnapshot(env, d, 2, undefined, { have: view.cacheDigests(), maxBytes: VIEW_SUMMARY_BYTES });
    expect(second.replicas.filter((x) => x.cache).length).toBe(0);
    view.applySnapshot(second, Date.now());
    expect(ids.every((id) => view.get(id)?.cache !== undefined)).toBe(true);
    // What an ask naming every digest looks like: 16 characters each.
    expect(view.cacheDigests()).toHaveLength(16 * ids.length);
    expect(decodeDigests(view.cacheDigests())).toEqual(new Set(ids.map((_, i) => summaryDigest(summaryOf(i)))));
  });

  it("a restarted shard has no summaries until replicas send them again (they are never written to storage)", async () => {
    const d = "sum-e";
    await shard(d, 0).register(register(d, "a"), nonce(), { index: 0, count: 1 });
    await shard(d, 0).report(report(d, "a", 1, summaryOf(3)), nonce());
    await shard(d, 0).restart().catch(() => undefined);
    await until("the restarted shard to answer", async () => (await shard(d, 0).snapshot().catch(() => null)) !== null);
    const after = await shard(d, 0).snapshot();
    expect(after.replicas.map((x) => x.id)).toEqual(["a"]);
    expect(after.replicas[0]!.cacheDigest).toBeUndefined();
    await shard(d, 0).report(report(d, "a", 2, summaryOf(3)), nonce());
    expect((await shard(d, 0).snapshot()).replicas[0]!.cacheDigest).toBe(summaryDigest(summaryOf(3)));
  });
});
