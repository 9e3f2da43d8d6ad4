// Choice by predicted time to first token (issue 57) on the real stack: workerd, and two
// reference replicas of the `lat` deployment (functions-latency), one near (loopback) and
// one far (behind a TCP relay that delays each direction by FAR_ONE_WAY_MS). The edge
// learns each replica's round trip from its answers (x-switchyard-replica-ms), sends the
// requests to the near one, refuses early a request whose TTFT objective no replica is
// predicted to meet, fails over to the far region when the near replica is gone, and
// comes back when a near one returns. Orders and lower bounds only: the relay's delay is
// a floor the far trip cannot go below, whatever the machine's load.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Header } from "../../src/protocol/index.ts";
import { startDelayRelay, type DelayRelay } from "../fixtures/delay-relay.ts";
import { freePort, startStack, until } from "./stack-fixture.ts";

const FAR_ONE_WAY_MS = 40;
let stack: Awaited<ReturnType<typeof startStack>>;
let relay: DelayRelay;

interface ViewReplica {
  id: string;
  state: string;
  region?: string;
  coordinates?: { lat: number; lon: number };
  tripMs?: number;
}
/** The deployment's routing view in an edge isolate (the first by default). */
const viewOf = async (isolate = stack.workerdUrl) =>
  ((await (await fetch(`${isolate}/-/deployments/lat/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).json()) as { replicas: ViewReplica[] }).replicas;
const ready = async (ids: string[]) => {
  const v = await viewOf();
  return ids.every((id) => v.some((r) => r.id === id && r.state === "ready")) ? v : undefined;
};

async function startNear(id: string): Promise<void> {
  await stack.startReplica("lat", { id, backendArgs: ["--backend", "text", "--text", "hi", "--region", "near-1", "--coordinates", "50.11,8.68"] });
  await until(`${id} in the edge's view`, () => ready([id]), 30_000);
}

/** One request to the deployment: its status, the replica that served it, its body. */
async function ask(headers: Record<string, string> = {}): Promise<{ status: number; replica: string | null; body: string }> {
  const res = await fetch(`${stack.url}/lat`, { headers });
  return { status: res.status, replica: res.headers.get(Header.replica), body: await res.text() };
}

beforeAll(async () => {
  // Two edge isolates in one location: the second learns the first one's trips through their relay.
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-latency"), edgeIsolates: 2 });
  // The far replica listens on a port of its own and registers the relay's address: the edge reaches it only through the relay.
  const port = await freePort();
  relay = await startDelayRelay(FAR_ONE_WAY_MS, port);
  await stack.startReplica("lat", { id: "far-1", backendArgs: ["--backend", "text", "--text", "hi", "--port", String(port), "--advertise-url", relay.url, "--region", "far-1", "--coordinates", "39.04,-77.49"] });
  await startNear("near-1");
  await until("both replicas in the edge's view", () => ready(["near-1", "far-1"]), 30_000);
}, 120_000);

afterAll(async () => {
  await stack?.dispose();
  await relay?.close();
});

describe("choice by predicted time to first token", () => {
  it("shows where each replica declared it is", async () => {
    const v = await viewOf();
    expect(v.find((r) => r.id === "near-1")).toMatchObject({ region: "near-1", coordinates: { lat: 50.11, lon: 8.68 } });
    expect(v.find((r) => r.id === "far-1")).toMatchObject({ region: "far-1", coordinates: { lat: 39.04, lon: -77.49 } });
  });

  it("learns each replica's round trip from its answers, and sends the requests to the near one", async () => {
    // Unmeasured replicas look near (each is tried once, then measured): after two requests both are.
    const served: (string | null)[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await ask();
      expect(r.status, r.body).toBe(200);
      served.push(r.replica);
    }
    const v = await viewOf();
    const trip = (id: string) => v.find((r) => r.id === id)?.tripMs;
    // The relay holds each direction FAR_ONE_WAY_MS: the far trip cannot be shorter than the round trip it adds.
    expect(trip("far-1")).toBeGreaterThanOrEqual(2 * FAR_ONE_WAY_MS);
    expect(trip("near-1")).toBeLessThan(trip("far-1")!);
    expect(served.slice(0, 2).sort()).toEqual(["far-1", "near-1"]);
    expect(served.slice(2)).toEqual(Array(10).fill("near-1"));
  });

  it("hands the trips one isolate measured to the other isolates of its location, before they send a request", async () => {
    const second = stack.edgeUrls[1]!;
    // The first isolate posts its trips with its view asks (its requests make them); the second gets them with its own.
    const farTrip = await until(
      "the far trip in the second isolate's view",
      async () => {
        await ask();
        const t = (await viewOf(second)).find((r) => r.id === "far-1")?.tripMs;
        return t !== undefined ? t : undefined;
      },
      20_000,
    );
    expect(farTrip).toBeGreaterThanOrEqual(2 * FAR_ONE_WAY_MS);
  });

  it("takes a request's TTFT objective: met by the near replica, refused early when none is predicted to meet it, refused as bad input when malformed", async () => {
    expect((await ask({ "x-slo-ttft-ms": "5000" })).replica).toBe("near-1");
    for (const bad of ["0", "-3", "soon", "1.5"]) {
      const r = await ask({ "x-slo-ttft-ms": bad });
      expect(r.status).toBe(400);
      expect(JSON.parse(r.body)).toMatchObject({ error: { code: "bad_request" } });
    }
  });

  it("fails over to the far region when the near replica is gone, refuses what the far one cannot meet, and comes back when a near one returns", async () => {
    await stack.stopReplica("near-1");
    await until("the near replica out of the edge's view", async () => ((await viewOf()).some((r) => r.id === "near-1" && r.state === "ready") ? undefined : true), 30_000);
    const moved = await ask();
    expect(moved).toMatchObject({ status: 200, replica: "far-1" });
    // The far trip alone is over 2 × FAR_ONE_WAY_MS: an objective under it cannot be met, and the deployment refuses early.
    const refused = await ask({ "x-slo-ttft-ms": String(FAR_ONE_WAY_MS) });
    expect(refused.status).toBe(503);
    const body = JSON.parse(refused.body) as { error: { code: string; details: { slo_ttft_ms: number; predicted_ttft_ms: number } } };
    expect(body.error.code).toBe("slo_unattainable");
    expect(body.error.details.slo_ttft_ms).toBe(FAR_ONE_WAY_MS);
    expect(body.error.details.predicted_ttft_ms).toBeGreaterThanOrEqual(2 * FAR_ONE_WAY_MS);
    // A generous objective is served there.
    expect(await ask({ "x-slo-ttft-ms": "10000" })).toMatchObject({ status: 200, replica: "far-1" });
    // Both counted by what their prediction said (the metrics reach the telemetry object within a flush).
    const count = (text: string, outcome: string) => Number(text.match(new RegExp(`^switchyard_slo_requests_total\\{deployment="lat",outcome="${outcome}"\\} (\\d+)$`, "m"))?.[1] ?? 0);
    await until("the SLO outcomes in /-/metrics", async () => {
      const text = await (await fetch(`${stack.url}/-/metrics`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).text();
      return count(text, "refused") >= 1 && count(text, "predicted_met") >= 2 ? true : undefined;
    }, 20_000);
    // A near replica again: the next requests go back to it (once measured).
    await startNear("near-2");
    await until("requests back in the near region", async () => ((await ask()).replica === "near-2" ? true : undefined), 20_000);
    const after: (string | null)[] = [];
    for (let i = 0; i < 5; i++) after.push((await ask()).replica);
    expect(after).toEqual(Array(5).fill("near-2"));
  });
});
