/**
 * The reference replica's admission queue over real HTTP (ReplicaServer on a
 * loopback port, --max-queued): FIFO order, the bound (503 capacity beyond it),
 * `queued` in the load header and healthz, a client that disconnects while
 * queued, and draining with a queue. One CLI run checks the flag.
 */
// @ts-nocheck

import { spawn, type ChildProcess } from "node:child_process";
import { request, type ClientRequest, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { parseLoadHeader } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import type { RequestHandler } from "../../src/replica/handlers.ts";
import { ReplicaServer } from "../../src/replica/server.ts";

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const waitFor = async (cond: () => boolean | Promise<boolean>, what = "condition") => {
  for (let i = 0; i < 400; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
};

/** A replica whose handler holds each request until the test opens its gate. */
async function gatedReplica(maxOngoing: number, maxQueued: number) {
  const admission = new AdmissionControl(maxOngoing, maxQueued);
  const started: string[] = [];
  const gates: (() => void)[] = [];
  const handler: RequestHandler = async (req, res, loadHeaders) => {
    const id = String(req.headers["x-id"]);
    let body = "";
    for await (const chunk of req) body += String(chunk);
    started.push(id);
    await new Promise<void>((r) => gates.push(r));
    if (res.destroyed) return;
    const text = `${id}:${body.length}`;
    res.writeHead(200, { ...loadHeaders(), "content-type": "text/plain", "content-length": Buffer.byteLength(text) });
    res.end(text);
  };
  const server = new ReplicaServer({ replicaId: "q1", admission, handler });
  const { port } = (await server.listen(0, "127.0.0.1")) as AddressInfo;
  const open: ClientRequest[] = [];
  cleanup.push(async () => {
    for (const g of gates.splice(0)) g();
    for (const r of open) r.destroy();
    await server.close();
  });

  interface Answer {
    status: number;
    headers: IncomingMessage["headers"];
    body: string;
  }
  /** One request on its own connection; `req` lets the test cut it. */
  const send = (id: string, body = "") => {
    const req = request({ host: "127.0.0.1", port, path: "/", method: body ? "POST" : "GET", agent: false, headers: { "x-id": id, ...(body ? { "content-length": Buffer.byteLength(body) } : {}) } });
    open.push(req);
    const answer = new Promise<Answer>((resolve, reject) => {
      req.once("response", (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c.toString()));
        res.once("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      });
      req.once("error", reject);
    });
    req.end(body);
    return { req, answer };
  };
  /** Opens the oldest gate (the request that started first finishes). */
  const finishOne = async () => {
    await waitFor(() => gates.length > 0, "a started request");
    gates.shift()!();
  };
  /** Opens every gate (requests whose clients are gone finish too). */
  const finishAll = () => {
    for (const g of gates.splice(0)) g();
  };
  const healthResponse = () => fetch(`http://127.0.0.1:${port}/-/healthz`);
  const health = async () => (await (await healthResponse()).json()) as Record<string, number | string>;
  return { admission, started, send, finishOne, finishAll, health, healthResponse };
}

describe("ReplicaServer with a queue (--max-queued)", () => {
  it("queues beyond max_ongoing in FIFO order, rejects beyond max_queued, and reports queued", async () => {
    const r = await gatedReplica(1, 3);
    const first = r.send("a");
    await waitFor(() => r.started.length === 1, "a to start");
    const queued = [];
    // One after another, so that arrival order is known.
    for (const id of ["b", "c", "d"]) {
      queued.push(r.send(id, `body of ${id}`));
      await waitFor(() => r.admission.queued === queued.length, `${id} to queue`);
    }
    expect(await r.health()).toMatchObject({ ongoing: 1, queued: 3, max_ongoing_requests: 1, max_queued_requests: 3 });

    // Beyond the bound: rejected before accepting, as without a queue.
    const over = await r.send("e", "x".repeat(1000)).answer;
    expect(over.status).toBe(503);
    expect(over.headers["x-switchyard-rejected"]).toBe("capacity");
    expect(parseLoadHeader(String(over.headers["x-switchyard-load"]))).toMatchObject({ ongoing: 1, queued: 3, max: 1 });

    await r.finishOne();
    const a = await first.answer;
    expect(a.body).toBe("a:0");
    // The header of the first answer counts the queue (its own request excluded from ongoing).
    expect(parseLoadHeader(String(a.headers["x-switchyard-load"]))).toMatchObject({ ongoing: 0, queued: 3 });
    for (let i = 0; i < 3; i++) await r.finishOne();
    const bodies = await Promise.all(queued.map((q) => q.answer.then((x) => x.body)));
    expect(bodies).toEqual(["b:9", "c:9", "d:9"]);
    expect(r.started).toEqual(["a", "b", "c", "d"]);
    expect(r.admission.ongoing).toBe(0);
    expect(r.admission.counts).toEqual({ admitted: 4, rejected: 1 });
  });

  it("a client that disconnects while queued leaves the queue and never runs", async () => {
    const r = await gatedReplica(1, 2);
    const first = r.send("a");
    await waitFor(() => r.started.length === 1, "a to start");
    const gone = r.send("b");
    gone.answer.catch(() => undefined);
    await waitFor(() => r.admission.queued === 1, "b to queue");
    const kept = r.send("c");
    await waitFor(() => r.admission.queued === 2, "c to queue");
    gone.req.destroy();
    await waitFor(() => r.admission.queued === 1, "b to leave the queue");
    expect((await r.health()).queued).toBe(1);
    await r.finishOne();
    await first.answer;
    await r.finishOne();
    expect((await kept.answer).body).toBe("c:0");
    expect(r.started).toEqual(["a", "c"]);
    await waitFor(() => r.admission.ongoing === 0, "the slot to free");
    expect(r.admission.counts).toEqual({ admitted: 2, rejected: 0 });
  });

  it("a client that disconnects just as its slot comes frees the slot", async () => {
    const r = await gatedReplica(1, 1);
    const first = r.send("a");
    await waitFor(() => r.started.length === 1, "a to start");
    const gone = r.send("b");
    gone.answer.catch(() => undefined);
    await waitFor(() => r.admission.queued === 1, "b to queue");
    // The slot passes to b and b's client goes away in the same turn.
    await r.finishOne();
    gone.req.destroy();
    await first.answer;
    // Whether b's handler got to start depends on which the server saw first; either
    // way the slot comes free (a started handler finishes into a closed response).
    await waitFor(() => r.admission.queued === 0, "b to leave the queue or start");
    r.finishAll();
    await waitFor(() => r.admission.ongoing === 0, "the slot to free");
    const after = r.send("c");
    await r.finishOne();
    expect((await after.answer).body).toBe("c:0");
  });

  it("draining rejects new requests but runs the ones already queued", async () => {
    const r = await gatedReplica(1, 2);
    const first = r.send("a");
    await waitFor(() => r.started.length === 1, "a to start");
    const b = r.send("b");
    await waitFor(() => r.admission.queued === 1, "b to queue");
    r.admission.drain();
    const late = await r.send("c").answer;
    expect(late.status).toBe(503);
    expect(late.headers["x-switchyard-rejected"]).toBe("draining");
    let idle = false;
    void r.admission.idle().then(() => (idle = true));
    await r.finishOne();
    expect((await first.answer).status).toBe(200);
    expect(idle).toBe(false);
    await r.finishOne();
    const answer = await b.answer;
    expect(answer.status).toBe(200);
    expect(parseLoadHeader(String(answer.headers["x-switchyard-load"]))).toMatchObject({ state: "draining", queued: 0 });
    await waitFor(() => idle, "idle");
  });
});

describe("ReplicaServer's /-/healthz (what HAProxy's check and orchestrators' probes read)", () => {
  it("answers 200 while ready and 503 with state draining once draining, with the load header either way", async () => {
    const r = await gatedReplica(2, 0);
    const ready = await r.healthResponse();
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: "ready" });
    r.admission.drain();
    const draining = await r.healthResponse();
    expect(draining.status).toBe(503);
    expect(await draining.json()).toMatchObject({ status: "draining" });
    expect(parseLoadHeader(draining.headers.get("x-switchyard-load"))).toMatchObject({ state: "draining" });
  });
});

describe("replica CLI --max-queued", () => {
  const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
  const spawnCli = (args: string[]): ChildProcess => {
    const child = spawn(process.execPath, ["--import", "tsx", CLI, "--deployment", "q", "--standalone", "--port", "0", "--backend", "text", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, SWITCHYARD_REPLICA_SECRET: "" },
    });
    cleanup.push(() => void child.kill("SIGKILL"));
    return child;
  };

  it("rejects a bad value with exit 2", async () => {
    const child = spawnCli(["--max-queued", "1.5"]);
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise((r) => child.once("exit", r));
    expect(code).toBe(2);
    expect(stderr).toMatch(/--max-queued must be an integer/);
  }, 30_000);

  it("queues requests beyond --max-ongoing", async () => {
    const child = spawnCli(["--max-ongoing", "1", "--max-queued", "2", "--service-ms", "300"]);
    const url = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on("line", (line) => {
        const ev = JSON.parse(line) as { event: string; url: string };
        if (ev.event === "listening") resolve(ev.url);
      });
      child.once("exit", (code) => reject(new Error(`replica exited ${code}`)));
    });
    const answers = [fetch(url), fetch(url), fetch(url)];
    await waitFor(async () => ((await (await fetch(`${url}/-/healthz`)).json()) as { queued: number }).queued === 2, "two queued");
    const over = await fetch(url);
    expect(over.status).toBe(503);
    expect(over.headers.get("x-switchyard-rejected")).toBe("capacity");
    const statuses = await Promise.all(answers.map(async (p) => (await p).status));
    expect(statuses).toEqual([200, 200, 200]);
  }, 30_000);
});
