// @ts-nocheck
// A fake edge for the CLI's tests: the system routes the CLI calls, on a loopback port.
import { createServer, type Server } from "node:http";

export const SECRET = "test-admin-secret";

export interface FakeEdge {
  url: string;
  /** Requests seen, "METHOD path". */
  seen: string[];
  /** Replicas per deployment (edit to change what status shows). */
  replicas: Record<string, { id: string; state: string; ongoing: number; max: number; models?: string[] }[]>;
  /** Endpoints answering 404 "no system route" (not shipped on this edge). */
  missing: Set<"drain" | "metrics" | "autoscale">;
  /** Value of the counter in /-/metrics; bumped on every fetch when `ticking`. */
  counter: number;
  ticking: boolean;
  /** Back to the initial replicas, nothing missing, nothing seen. */
  reset(): void;
  close(): Promise<void>;
}

const json = (status: number, body: unknown) => ({ status, type: "application/json", body: JSON.stringify(body) });
const error = (status: number, code: string, message: string) => json(status, { error: { code, message, type: "x" } });

const initialReplicas = (): FakeEdge["replicas"] => ({
  hello: [
    { id: "hello-1", state: "ready", ongoing: 1, max: 5 },
    { id: "hello-2", state: "ready", ongoing: 0, max: 5 },
  ],
  vad: [{ id: "vad-1", state: "ready", ongoing: 0, max: 4, models: ["silero-vad-v5"] }],
});

export async function startFakeEdge(): Promise<FakeEdge> {
  const edge: FakeEdge = {
    url: "",
    seen: [],
    replicas: initialReplicas(),
    missing: new Set(),
    counter: 0,
    ticking: true,
    reset() {
      edge.replicas = initialReplicas();
      edge.missing.clear();
      edge.seen.length = 0;
      draining.clear();
    },
    close: () => new Promise((r) => server.close(() => r())),
  };
  const draining = new Map<string, number>();

  const answer = (method: string, path: string, auth: string | undefined): { status: number; type: string; body: string } => {
    const systemMissing = () => error(404, "route_not_found", `no system route ${method} ${path}`);
    if (method === "GET" && path === "/-/routes") return json(200, { "/hello": "hello", "/vad": "vad" });
    if (path === "/-/metrics") {
      if (edge.missing.has("metrics")) return systemMissing();
      if (auth !== `Bearer ${SECRET}`) return error(401, "unauthorized", "admin secret missing or wrong");
      if (edge.ticking) edge.counter++;
      const body = [
        "# HELP switchyard_requests_total Requests.",
        "# TYPE switchyard_requests_total counter",
        `switchyard_requests_total{deployment="hello",status="2xx"} ${edge.counter}`,
        'switchyard_requests_total{deployment="vad",status="2xx"} 7',
        'switchyard_replicas{deployment="hello"} 2',
        "",
      ].join("\n");
      return { status: 200, type: "text/plain; version=0.0.4", body };
    }
    const m = /^\/-\/deployments\/([^/]+)(\/.*)?$/.exec(path);
    if (!m) return systemMissing();
    if (auth !== `Bearer ${SECRET}`) return error(401, "unauthorized", "admin secret missing or wrong");
    const name = decodeURIComponent(m[1]!);
    const list = edge.replicas[name];
    if (!list) return error(404, "route_not_found", `no deployment named "${name}"`);
    const rest = m[2] ?? "";
    if (method === "GET" && rest === "") {
      // A draining replica leaves the table on the second look.
      for (const [id, looks] of draining) {
        if (looks >= 1) {
          for (const l of Object.values(edge.replicas)) {
            const i = l.findIndex((r) => r.id === id);
            if (i >= 0) l.splice(i, 1);
          }
          draining.delete(id);
        } else draining.set(id, looks + 1);
      }
      return json(200, {
        deployment: { name, routePrefix: `/${name}` },
        snapshot: {
          deployment: name,
          replicas: list.map((r, i) => ({
            id: r.id,
            url: `http://127.0.0.1:${5000 + i}`,
            epoch: 1,
            load: { seq: 1, ongoing: r.ongoing, queued: 0, max: r.max, state: r.state },
            models: r.models ?? [],
            loading: [],
            expiresInMs: 2000,
          })),
        },
        router: { deployment: name, members: list.length },
      });
    }
    const drain = /^\/replicas\/([^/]+)\/drain$/.exec(rest);
    if (drain && method === "POST") {
      if (edge.missing.has("drain")) return systemMissing();
      const id = decodeURIComponent(drain[1]!);
      const r = list.find((x) => x.id === id);
      if (!r) return error(404, "route_not_found", `no replica "${id}" in "${name}"`);
      r.state = "draining";
      if (id !== "hello-stuck") draining.set(id, 0);
      return json(200, { ok: true, replica: id, draining: true });
    }
    if (rest === "/autoscale" && method === "GET") {
      if (edge.missing.has("autoscale")) return systemMissing();
      return json(200, { deployment: name, current: list.length, desired: list.length + 1, reason: "queue" });
    }
    return systemMissing();
  };

  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    edge.seen.push(`${req.method} ${path}`);
    const a = answer(req.method ?? "GET", path, req.headers.authorization);
    res.writeHead(a.status, { "content-type": a.type });
    res.end(a.body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  edge.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return edge;
}
