/**
 * The request load of bench/state-plane/state-plane.ts, as its own Node process (forked,
 * IPC) so it neither slows nor is slowed by the parent's polling: closed loops
 * of plain GETs, `concurrency` per deployment and each of its edge isolates, HTTP/1.1
 * keep-alive, paced to at most `rps` requests a second per deployment (the
 * machine's 2 cores also run the stack being measured). It counts answers per deployment, and remembers when each request
 * that a replica other than a simulated one served was sent, so the parent can
 * ask whether a drained real replica served anything after its drain.
 *
 * Commands (process.send): "start", "counts", "servedBy", "stop"; answered with the same `ref`.
 */
import { Agent, request } from "node:http";

export interface LoadConfig {
  targets: { deployment: string; path: string; edges: string[] }[];
  concurrency: number;
  /** Most requests a second per deployment, over all its loops. */
  rps: number;
}

export type LoadCommand =
  | { ref: number; cmd: "start"; config: LoadConfig }
  | { ref: number; cmd: "counts" }
  | { ref: number; cmd: "servedBy"; id: string; deployment: string; since: number; until: number }
  | { ref: number; cmd: "stop" };

export interface LoadCounts {
  at: number;
  /** Per deployment: 200s, other statuses, failed requests. */
  byDeployment: Record<string, { ok: number; non2xx: number; failed: number }>;
  cpuMs: number;
}

const SIM_PREFIX = "sim-";
let stopped = false;
const counts: LoadCounts["byDeployment"] = {};
/** Real replica id → send times (epoch ms) of the requests it served. */
const servedAt = new Map<string, number[]>();
/** Deployment → send times (epoch ms) of its requests answered 200, by any replica. */
const answeredAt = new Map<string, number[]>();

function get(agent: Agent, url: string): Promise<{ status: number; replica: string | undefined }> {
  return new Promise((resolve) => {
    const req = request(url, { agent, timeout: 10_000 }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode ?? 0, replica: res.headers["x-switchyard-replica"] as string | undefined }));
      res.on("error", () => resolve({ status: 0, replica: undefined }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", () => resolve({ status: 0, replica: undefined }));
    req.end();
  });
}

function start(c: LoadConfig): void {
  const agents = new Map<string, Agent>();
  for (const { deployment, path, edges } of c.targets) {
    for (const edge of edges) {
      let agent = agents.get(edge);
      if (!agent) agents.set(edge, (agent = new Agent({ keepAlive: true, maxSockets: c.concurrency * c.targets.length })));
      const n = (counts[deployment] ??= { ok: 0, non2xx: 0, failed: 0 });
      // Each loop sends at most one request per `gapMs`, so the deployment sees at most `rps`.
      const gapMs = (1000 * c.concurrency * edges.length) / c.rps;
      for (let k = 0; k < c.concurrency; k++) {
        void (async () => {
          await new Promise((r) => setTimeout(r, Math.random() * gapMs));
          while (!stopped) {
            const sentAt = Date.now();
            const r = await get(agent, `${edge}${path}`);
            if (r.status === 200) {
              n.ok++;
              let sent = answeredAt.get(deployment);
              if (!sent) answeredAt.set(deployment, (sent = []));
              sent.push(sentAt);
            }
            else if (r.status === 0) n.failed++;
            else n.non2xx++;
            if (r.status === 200 && r.replica && !r.replica.startsWith(SIM_PREFIX)) {
              let times = servedAt.get(r.replica);
              if (!times) servedAt.set(r.replica, (times = []));
              times.push(sentAt);
            }
            const wait = sentAt + gapMs - Date.now();
            if (wait > 0) await new Promise((r) => setTimeout(r, wait));
          }
        })();
      }
    }
  }
}

let lastCpu = process.cpuUsage();
process.on("message", (raw) => {
  const m = raw as LoadCommand;
  const reply = (body: object) => process.send?.({ ref: m.ref, ...body });
  switch (m.cmd) {
    case "start":
      start(m.config);
      reply({ ok: true });
      return;
    case "counts": {
      const cpu = process.cpuUsage(lastCpu);
      lastCpu = process.cpuUsage();
      reply({ at: Date.now(), byDeployment: structuredClone(counts), cpuMs: (cpu.user + cpu.system) / 1000 } satisfies LoadCounts);
      return;
    }
    case "servedBy": {
      const times = servedAt.get(m.id) ?? [];
      // sentInWindow: requests to its deployment answered by anyone, sent from 1 s after the drain until the
      // replica exited; the only ones it could have served wrongly (after its exit it serves none anyway).
      const sent = answeredAt.get(m.deployment) ?? [];
      reply({
        total: times.length,
        after: times.filter((t) => t >= m.since).length,
        afterPlus1s: times.filter((t) => t >= m.since + 1_000).length,
        sentInWindow: sent.filter((t) => t >= m.since + 1_000 && t < m.until).length,
      });
      return;
    }
    case "stop":
      stopped = true;
      reply({ ok: true });
      setTimeout(() => process.exit(0), 50);
      return;
  }
});
process.on("disconnect", () => process.exit(0));
