/**
 * The proxy kind (src/replica/backends/proxy.ts) and the agent's proxy mode's
 * command line (src/agent/proxy-mode.ts): the app's queue read from Triton's
 * documented metrics, counted in the load only beyond what the replica sent; the
 * handler's hop on real loopback sockets (headers, streaming, a cancel, an app that
 * is down). The whole path, with a real Python app and the edge, is
 * test/e2e/proxy-agent.test.ts.
 */
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { splitProxyArgs } from "../../src/agent/proxy-mode.ts";
import { proxy, proxyHandler, upstreamPending } from "../../src/replica/backends/proxy.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { Header } from "../../src/protocol/index.ts";

const triton = readFileSync(join(import.meta.dirname, "../fixtures/engine-metrics/triton.txt"), "utf8");
const vllm = readFileSync(join(import.meta.dirname, "../fixtures/engine-metrics/vllm.txt"), "utf8");

/** Loopback servers a test starts, closed after it. */
const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});
const listen = async (handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> => {
  const s = createServer(handler);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
};

describe("the app's own queue", () => {
  it("sums Triton's pending requests over its models, and finds none where the app reports none", () => {
    expect(upstreamPending(triton)).toBe(5);
    expect(upstreamPending(vllm)).toBeUndefined();
    expect(upstreamPending("")).toBeUndefined();
  });

  it("reads a sample with or without labels and any spacing; a zero is a queue of none, a negative, infinite or malformed sample is skipped", () => {
    expect(upstreamPending("nv_inference_pending_request_count 12\n")).toBe(12);
    expect(upstreamPending('nv_inference_pending_request_count{model="a"}  4\nnv_inference_pending_request_count{model="b"}\t1.4e1')).toBe(18);
    expect(upstreamPending("nv_inference_pending_request_count 0")).toBe(0);
    expect(upstreamPending("nv_inference_pending_request_count -3\nnv_inference_pending_request_count 1e999\nnv_inference_pending_request_count 2")).toBe(2);
    expect(upstreamPending('nv_inference_pending_request_count{model="a" 3\nnv_inference_pending_request_count_total 9\nnv_inference_pending_request_count')).toBeUndefined();
    expect(upstreamPending("# nv_inference_pending_request_count 4\nx_nv_inference_pending_request_count 4")).toBeUndefined();
  });

  it("counts as queued only what the app holds beyond the requests in flight here", () => {
    const a = new AdmissionControl(4, 0);
    a.tryAdmit();
    a.tryAdmit();
    let changes = 0;
    a.onChange(() => changes++);
    a.setExternalQueue(5); // 2 of them ours, 3 from other clients of the same server
    expect(a.load(0)).toMatchObject({ ongoing: 2, queued: 3 });
    expect(changes).toBe(1);
    a.setExternalQueue(1); // fewer than ours: nothing beyond our own count
    expect(a.load(0)).toMatchObject({ ongoing: 2, queued: 0 });
    a.setExternalQueue(undefined);
    expect(a.load(0).queued).toBe(0);
  });
});

describe("agent --proxy's command line", () => {
  it("keeps its own flags, passes the replica's on, and splits off the app's command", () => {
    expect(splitProxyArgs(["--proxy", "--deployment", "s", "--app-url", "http://127.0.0.1:8001", "--max-ongoing=4", "--app-metrics=http://127.0.0.1:8002/metrics", "--", "uvicorn", "app:app", "--port", "8001"])).toEqual({
      own: { "--app-url": "http://127.0.0.1:8001", "--app-metrics": "http://127.0.0.1:8002/metrics" },
      replica: ["--deployment", "s", "--max-ongoing=4"],
      command: ["uvicorn", "app:app", "--port", "8001"],
    });
    expect(() => splitProxyArgs(["--proxy", "--backend", "llm"])).toThrow(/set by --proxy/);
    expect(() => splitProxyArgs(["--app-url"])).toThrow(/needs a value/);
  });
});

describe("the proxy handler", () => {
  const front = (upstream: string) => {
    const handle = proxyHandler(new URL(upstream));
    return listen((req, res) => void handle(req, res, () => ({ [Header.load]: "load" })));
  };

  it("passes the request on without the edge's signature or hop-by-hop headers, and the answer back with the load header", async () => {
    let seen: IncomingMessage | undefined;
    let body = "";
    const app = await listen((req, res) => {
      seen = req;
      req.on("data", (d: Buffer) => (body += d.toString()));
      req.on("end", () => {
        res.writeHead(201, { "content-type": "application/json", "x-app": "1" });
        res.end('{"ok":true}');
      });
    });
    const res = await fetch(`${await front(app)}/predict?x=1`, { method: "POST", headers: { "content-type": "application/json", [Header.signature]: "sig", [Header.nonce]: "7", "x-request-id": "r1" }, body: '{"text":"hi"}' });
    expect(res.status).toBe(201);
    expect(await res.json()).toEqual({ ok: true });
    expect(res.headers.get("x-app")).toBe("1");
    expect(res.headers.get(Header.load)).toBe("load");
    expect(seen!.url).toBe("/predict?x=1");
    expect(seen!.method).toBe("POST");
    expect(body).toBe('{"text":"hi"}');
    expect(seen!.headers[Header.signature]).toBeUndefined();
    expect(seen!.headers[Header.nonce]).toBeUndefined();
    expect(seen!.headers["x-request-id"]).toBe("r1");
  });

  it("streams each chunk as the app writes it, and ends the app's request when the client leaves", async () => {
    let next!: () => void;
    let appClosed!: Promise<void>;
    const app = await listen((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: 1\n\n");
      next = () => res.write("data: 2\n\n");
      appClosed = new Promise((resolve) => res.on("close", () => resolve()));
    });
    const cancel = new AbortController();
    const res = await fetch(`${await front(app)}/explain`, { signal: cancel.signal });
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("data: 1\n\n"); // before the app wrote more
    next();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("data: 2\n\n");
    cancel.abort();
    await appClosed; // the app's side of the stream closes after the client's cancel
  });

  it("cuts the client's answer when the app's is cut mid-stream, never ends it as if whole", async () => {
    const app = await listen((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write("data: 1\n\n", () => res.destroy());
    });
    const res = await fetch(`${await front(app)}/explain`);
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
  });

  it("cuts the client's answer when the app's connection ends before its declared length (a clean close, not a reset)", async () => {
    const app = await listen((req, res) => {
      res.writeHead(200, { "content-length": "100" });
      res.write("0123456789", () => res.socket!.end());
    });
    const res = await fetch(`${await front(app)}/predict`);
    expect(res.status).toBe(200);
    await expect(res.text()).rejects.toThrow();
  });

  it("answers 502 JSON when the app does not answer", async () => {
    const dead = await listen(() => undefined);
    const url = new URL(dead);
    await new Promise((r) => servers.pop()!.close(r));
    const res = await fetch(`${await front(url.origin)}/predict`);
    expect(res.status).toBe(502);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(res.headers.get(Header.load)).toBe("load");
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("upstream_failed");
    expect(body.error.message).toMatch(new RegExp(`^the app at ${url.origin.replace(/[.]/g, "\\.")} did not answer: connect ECONNREFUSED`));
  });

  it("puts the upstream's path prefix before each request's path", async () => {
    const paths: string[] = [];
    const app = await listen((req, res) => {
      paths.push(req.url!);
      res.end("ok");
    });
    await (await fetch(`${await front(`${app}/api/v1/`)}/predict?q=1`)).text();
    await (await fetch(`${await front(`${app}/api`)}/predict`)).text();
    expect(paths).toEqual(["/api/v1/predict?q=1", "/api/predict"]);
  });

  it("keeps the app's hop-by-hop headers on its side of the hop", async () => {
    const app = await listen((_req, res) => {
      res.writeHead(200, { "proxy-authenticate": "Basic", "x-kept": "1", [Header.signature]: "app-made" });
      res.end("ok");
    });
    const res = await fetch(`${await front(app)}/predict`);
    expect(await res.text()).toBe("ok");
    expect(res.headers.get("x-kept")).toBe("1");
    expect(res.headers.get("proxy-authenticate")).toBeNull();
    expect(res.headers.get(Header.signature)).toBeNull();
  });

  /** A front whose handler's promises are kept: the server holds a slot until one settles. */
  const tracked = async (upstream: string) => {
    const handle = proxyHandler(new URL(upstream));
    const settled: Promise<void>[] = [];
    const url = await listen((req, res) => void settled.push(handle(req, res, () => ({}))));
    return { url, settled };
  };

  it("settles each request when its answer ends, when the app fails, and when the client leaves", async () => {
    const ok = await listen((_req, res) => res.end("ok"));
    const a = await tracked(ok);
    await (await fetch(`${a.url}/x`)).text();
    await expect(Promise.all(a.settled)).resolves.toEqual([undefined]);

    const dead = await listen(() => undefined);
    const deadUrl = new URL(dead).origin;
    await new Promise((r) => servers.pop()!.close(r));
    const b = await tracked(deadUrl);
    expect((await fetch(`${b.url}/x`)).status).toBe(502);
    await expect(Promise.all(b.settled)).resolves.toEqual([undefined]);
  });

  it("a client that leaves before the app's answer began ends the app's request too", async () => {
    let arrived!: () => void;
    const atApp = new Promise<void>((r) => (arrived = r));
    let appSawClose!: Promise<void>;
    const app = await listen((req) => {
      appSawClose = new Promise((r) => req.socket.once("close", () => r()));
      arrived(); // and never answers
    });
    const front = await tracked(app);
    const cancel = new AbortController();
    const pending = fetch(`${front.url}/slow`, { signal: cancel.signal }).catch(() => "left");
    await atApp;
    cancel.abort();
    expect(await pending).toBe("left");
    await appSawClose;
    await Promise.all(front.settled);
  });
});

describe("the proxy kind's flags (--upstream, --upstream-metrics)", () => {
  /** The kind built as the replica's CLI builds it: `fail` exits there, throws here. */
  const build = (flags: Record<string, string>, admission = new AdmissionControl(4)) => {
    const logs: string[] = [];
    const ctx = {
      flags,
      knobs: { serviceMs: 0, kvBlocks: 1, prefillMs: 0, prefillTokenUs: 0, decodeMs: 0 },
      admission,
      log: (m: string) => void logs.push(m),
      fail: (m: string): never => {
        throw new Error(m);
      },
      reportNow: async () => undefined,
      identity: { replicaId: "r", deployment: "d", url: () => "http://127.0.0.1:1" },
    };
    return { logs, admission, parts: proxy(ctx) };
  };

  it("refuses a missing, malformed or non-http upstream, and a malformed metrics URL, naming the flag", async () => {
    await expect(build({}).parts).rejects.toThrow("--backend proxy needs --upstream URL (the app, e.g. http://127.0.0.1:8001)");
    await expect(build({ upstream: "not a url" }).parts).rejects.toThrow('--upstream "not a url" is not a URL');
    await expect(build({ upstream: "https://127.0.0.1:8001" }).parts).rejects.toThrow("--upstream must be an http:// URL");
    await expect(build({ upstream: "http://127.0.0.1:8001", "upstream-metrics": "::" }).parts).rejects.toThrow('--upstream-metrics "::" is not a URL');
  });

  it("reads the app's queue from its metrics before serving, and counts it in the load beyond its own requests", async () => {
    const metrics = await listen((_req, res) => res.end(triton));
    const { admission, parts } = build({ upstream: "http://127.0.0.1:9", "upstream-metrics": `${metrics}/metrics` });
    const { handler } = await parts;
    expect(typeof handler).toBe("function");
    expect(admission.load(0)).toMatchObject({ ongoing: 0, queued: 5 });
  });

  it("reads the metrics again every scrape: a queue that changes, and one that can no longer be read, are seen; a queue found is not warned about", async () => {
    let text = triton;
    let scrapes = 0;
    let up = true;
    const metrics = await listen((req, res) => {
      scrapes++;
      if (!up) return void req.socket.destroy();
      res.end(text);
    });
    const a = build({ upstream: "http://127.0.0.1:9", "upstream-metrics": `${metrics}/metrics` });
    await a.parts;
    expect(a.admission.load(0).queued).toBe(5);
    text = "nv_inference_pending_request_count 9\n";
    await expect.poll(() => a.admission.load(0).queued, { timeout: 30_000 }).toBe(9);
    up = false;
    const before = scrapes;
    await expect.poll(() => scrapes > before && a.admission.load(0).queued === 0, { timeout: 30_000 }).toBe(true);
    expect(a.logs).toEqual([]);
  });

  it("says once when the app's metrics have no queue, and counts none from metrics it cannot read", async () => {
    const plain = await listen((_req, res) => res.end(vllm));
    const a = build({ upstream: "http://127.0.0.1:9", "upstream-metrics": `${plain}/metrics` });
    await a.parts;
    expect(a.logs).toEqual([`--upstream-metrics ${plain}/metrics: no nv_inference_pending_request_count; the replica's own count is the load`]);
    // Said once: not again at the next scrapes.
    let scraped = 0;
    const counting = await listen((_req, res) => (scraped++, res.end(vllm)));
    const once = build({ upstream: "http://127.0.0.1:9", "upstream-metrics": `${counting}/metrics` });
    await once.parts;
    await expect.poll(() => scraped, { timeout: 30_000 }).toBeGreaterThanOrEqual(3);
    expect(once.logs).toHaveLength(1);
    expect(a.admission.load(0).queued).toBe(0);
    const failing = await listen((_req, res) => {
      res.writeHead(500);
      res.end(triton);
    });
    const b = build({ upstream: "http://127.0.0.1:9", "upstream-metrics": `${failing}/metrics` });
    await b.parts;
    expect(b.admission.load(0).queued).toBe(0);
    const c = build({ upstream: "http://127.0.0.1:9", "upstream-metrics": "http://127.0.0.1:9/metrics" });
    await c.parts;
    expect(c.admission.load(0).queued).toBe(0);
    expect(c.logs).toEqual([]);
  });
});
