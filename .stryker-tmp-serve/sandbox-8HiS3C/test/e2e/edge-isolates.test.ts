// @ts-nocheck
// Several edge isolates in one local stack (StackOptions.edgeIsolates): separate
// Worker services on their own ports, each with its own module state, sharing
// one set of Durable Objects, in the locations the stack gives them (StackOptions.edgeLocations).
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
const auth = () => ({ authorization: `Bearer ${stack.adminSecret}` });

interface View {
  snapshotRefreshes: number;
  replicas: { id: string }[];
}
const view = async (url: string): Promise<View> => {
  const res = await fetch(`${url}/-/deployments/hello/view`, { headers: auth() });
  expect(res.status).toBe(200);
  return (await res.json()) as View;
};

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/edge-isolates"), edgeIsolates: 3, edgeLocations: ["AMS", "AMS", "SIN"] });
});
afterAll(async () => {
  await stack?.dispose();
});

describe("edge isolates", () => {
  it("runs three, each answering on its own port, the first being workerdUrl", async () => {
    expect(stack.edgeUrls).toHaveLength(3);
    expect(stack.edgeUrls[0]).toBe(stack.workerdUrl);
    expect(new Set(stack.edgeUrls).size).toBe(3);
    for (const url of stack.edgeUrls) expect(await (await fetch(`${url}/-/routes`)).json()).toEqual({ "/hello": "hello" });
  });

  it("keeps a routing view per isolate: refreshes are counted by each isolate alone", async () => {
    // The replica registered through the public port (isolate 1); no request has reached isolates 2 and 3 yet.
    const [first, second, third] = stack.edgeUrls as [string, string, string];
    const busy = await until("three refreshes in the first isolate", async () => {
      const v = await view(first);
      return v.snapshotRefreshes >= 3 ? v : undefined;
    });
    const a = await view(second);
    const b = await view(third);
    expect(a.snapshotRefreshes).toBe(1);
    expect(b.snapshotRefreshes).toBe(1);
    expect((await view(first)).snapshotRefreshes).toBeGreaterThanOrEqual(busy.snapshotRefreshes);
    const [replica] = [...stack.replicas.keys()];
    for (const v of [busy, a, b]) expect(v.replicas.map((r) => r.id)).toEqual([replica]);
  });

  it("serves each isolate from the location its service gives it, whatever a client's headers say", async () => {
    const located = async (url: string, claim?: string) => {
      const res = await fetch(`${url}/-/deployments/hello`, { headers: { ...auth(), ...(claim ? { "cf-ipcountry": claim, "cf-ray": `0-${claim}` } : {}) } });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { isolate: { location: string }; relay: { calls: number } | null };
      return body.isolate.location;
    };
    const [first, second, third] = stack.edgeUrls as [string, string, string];
    // A client's headers do not place an isolate: its service's location does.
    expect(await located(third, "EVIL")).toBe("SIN");
    expect(await located(first)).toBe("AMS");
    expect(await located(second)).toBe("AMS");
  });

  it("routes to a replica registered once from every isolate", async () => {
    const [replica] = [...stack.replicas.keys()];
    for (const url of stack.edgeUrls) {
      const res = await fetch(`${url}/hello`);
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("hi");
      expect(res.headers.get("x-switchyard-replica")).toBe(replica);
    }
    const state = await stack.deploymentState("hello");
    expect(state.router.registrations).toBe(1);
  });
});
