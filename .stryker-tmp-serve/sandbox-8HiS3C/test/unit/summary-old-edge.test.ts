/**
 * A replica with a prefix-cache summary in front of an edge from before summaries:
 * that edge refuses the unknown field (400 invalid_message naming prefix_cache),
 * and the replica goes on reporting without it, alone (EdgeClient) or in node
 * reports (NodeReporter).
 */
// @ts-nocheck

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary } from "../../src/prefix/cache-summary.ts";
import { NodeReportMessage, ReportMessage } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { EdgeClient } from "../../src/replica/edge-client.ts";
import { NodeReporter } from "../../src/replica/node-reporter.ts";

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const summary = buildCacheSummary(blockKeys(Array.from({ length: 64 }, (_, i) => i)), 16);

/** An edge whose schemas know no prefix_cache (strict, as version 1 was before it). */
async function oldEdge() {
  const oldReport = ReportMessage.omit({ prefix_cache: true }).strict();
  const accepted: Record<string, unknown>[] = [];
  let refused = 0;
  const server = createServer(async (req, res) => {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    const raw = JSON.parse(text) as Record<string, unknown>;
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.url === "/-/replicas/register") return answer(200, { ok: true, report_interval_ms: 30 });
    const node = req.url === "/-/replicas/report-node";
    const entries = node ? (raw.reports as Record<string, unknown>[]) : [raw];
    const valid = node ? NodeReportMessage.safeParse(raw).success : oldReport.safeParse(raw).success;
    if (!valid || entries.some((e) => "prefix_cache" in e)) {
      refused++;
      return answer(400, { error: { code: "invalid_message", message: "control message does not match its schema", details: [{ code: "unrecognized_keys", keys: ["prefix_cache"], path: [], message: 'Unrecognized key: "prefix_cache"' }] } });
    }
    accepted.push(...entries);
    answer(200, req.url === "/-/replicas/report-node" ? { ok: true, outcomes: entries.map(() => "ok") } : { ok: true, outcome: "ok" });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, accepted, refused: () => refused };
}

async function until(what: string, cond: () => boolean, limitMs = 10_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("an edge from before prefix-cache summaries", () => {
  it("EdgeClient: one refusal, then reports without the field", async () => {
    const edge = await oldEdge();
    const logs: string[] = [];
    const client = new EdgeClient({
      edgeUrl: edge.url,
      key: "ab".repeat(32),
      deployment: "llm",
      replicaId: "llm-1",
      advertiseUrl: "http://127.0.0.1:9",
      admission: new AdmissionControl(4),
      cacheSummary: () => summary,
      log: (m) => logs.push(m),
    });
    cleanup.push(() => client.stop());
    await client.start();
    await until("three accepted reports", () => edge.accepted.length >= 3);
    expect(edge.refused()).toBe(1);
    expect(edge.accepted.every((r) => !("prefix_cache" in r))).toBe(true);
    expect(logs.some((l) => /does not take prefix-cache summaries/.test(l))).toBe(true);
  });

  it("NodeReporter: one refusal, then node reports without the field", async () => {
    const edge = await oldEdge();
    const reporter = new NodeReporter({ edgeUrl: edge.url, key: "ab".repeat(32), deployment: "llm", node: "gpu-1" });
    cleanup.push(() => reporter.stop());
    const clients = [0, 1].map(
      (i) =>
        new EdgeClient({
          edgeUrl: edge.url,
          key: "ab".repeat(32),
          deployment: "llm",
          replicaId: `gpu-1-${i}`,
          advertiseUrl: `http://127.0.0.1:${9000 + i}`,
          admission: new AdmissionControl(4),
          nodeReporter: reporter,
          cacheSummary: () => summary,
        }),
    );
    for (const c of clients) cleanup.push(() => c.stop());
    await Promise.all(clients.map((c) => c.start()));
    await until("accepted entries of both replicas", () => new Set(edge.accepted.map((e) => e.replica_id)).size === 2 && edge.accepted.length >= 4);
    expect(edge.refused()).toBeGreaterThanOrEqual(1);
    expect(edge.refused()).toBeLessThanOrEqual(2);
    expect(edge.accepted.every((r) => !("prefix_cache" in r))).toBe(true);
  });
});
