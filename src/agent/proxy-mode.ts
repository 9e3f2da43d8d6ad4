/**
 * `replica agent --proxy`: the agent in front of any HTTP model server (a FastAPI
 * app, Triton, TorchServe, BentoML, Ray Serve), on the token path. It starts the app
 * (the command after `--`) as its child, waits until the app answers, then runs the
 * reference replica's front with the proxy kind (src/replica/backends/proxy.ts):
 * the edge's signature checked, requests beyond --max-ongoing refused before they
 * are accepted, the load header on every answer, load reports, a drain on SIGTERM,
 * streams passed through, a client's cancel passed on. After the drain it stops the
 * app. docs/agent.md, "Proxy mode".
 *
 *   npm run replica -- agent --proxy --deployment sentiment --edge https://edge.example.com \
 *     --app-url http://127.0.0.1:8001 --port 9000 --max-ongoing 8 -- \
 *     uvicorn app:app --host 127.0.0.1 --port 8001
 */
import { replicaMain, type ReplicaHooks } from "../replica/cli.ts";
import { spawnEngine, type SpawnedEngine } from "./engine-process.ts";

export const PROXY_USAGE = `usage: switchyard agent --proxy --deployment NAME --edge URL --app-url URL
               [--app-metrics URL] [--app-health-path PATH] [--app-start-timeout-ms N]
               [--app-stop-timeout-ms N] [replica flags: --port N --host H --id ID --max-ongoing N
               --max-queued N --advertise-url URL --drain-timeout-ms N --region NAME
               --coordinates LAT,LON] [-- APP COMMAND...]
Fronts any HTTP model server: proxies dispatch to this agent (--advertise-url, default its
own address), which checks each dispatch's signature, refuses beyond --max-ongoing before
accepting, passes the request on to the app at --app-url and streams its answer back.
--app-url URL            where the app listens (http, loopback or the node's network)
--app-metrics URL        the app's Prometheus metrics (Triton: http://127.0.0.1:8002/metrics): its own
                         queue (nv_inference_pending_request_count) counts in the load reports
--app-health-path PATH   what the agent asks until the app answers before registering
                         (any HTTP status counts as up); default /
--app-start-timeout-ms N for the app to answer, default 120000
--app-stop-timeout-ms N  after SIGTERM to the app (once drained), before SIGKILL, default 10000
-- COMMAND...            start the app as the agent's child; without it, the app runs on its own
                         and the agent leaves it running
env: SWITCHYARD_REPLICA_KEY (required): the deployment's replica key (replica --print-key)`;

const OWN_FLAGS = ["--app-url", "--app-metrics", "--app-health-path", "--app-start-timeout-ms", "--app-stop-timeout-ms"] as const;
type OwnFlag = (typeof OWN_FLAGS)[number];

function fail(msg: string): never {
  process.stderr.write(`${msg}\n${PROXY_USAGE}\n`);
  process.exit(2);
}

/** Splits the agent's own flags from the replica's (passed on as given) and the app's command. */
export function splitProxyArgs(argv: readonly string[]): { own: Partial<Record<OwnFlag, string>>; replica: string[]; command: string[] } {
  const cut = argv.indexOf("--");
  const flags = cut < 0 ? argv : argv.slice(0, cut);
  const command = cut < 0 ? [] : argv.slice(cut + 1);
  const own: Partial<Record<OwnFlag, string>> = {};
  const replica: string[] = [];
  for (let i = 0; i < flags.length; i++) {
    const arg = flags[i]!;
    if (arg === "--proxy") continue;
    const eq = arg.indexOf("=");
    const name = (eq < 0 ? arg : arg.slice(0, eq)) as OwnFlag;
    if (!OWN_FLAGS.includes(name)) {
      replica.push(arg);
      continue;
    }
    const value = eq < 0 ? flags[++i] : arg.slice(eq + 1);
    if (value === undefined) throw new Error(`${name} needs a value`);
    own[name] = value;
  }
  if (replica.includes("--backend") || replica.some((a) => a.startsWith("--backend=") || a.startsWith("--upstream"))) throw new Error("--backend and --upstream are set by --proxy (use --app-url)");
  return { own, replica, command };
}

const ms = (raw: string | undefined, flag: string, fallback: number): number => {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1 || n > 3_600_000) fail(`${flag} must be an integer from 1 to 3600000`);
  return n;
};

/** Resolves when the app answers at `url` (any status), rejects when it exits first or `timeoutMs` passes. */
async function appUp(url: URL, app: SpawnedEngine | undefined, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited: string | undefined;
  void app?.exited.then((why) => (exited = why));
  for (;;) {
    if (exited !== undefined) throw new Error(`the app exited before it answered (${exited})`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`the app did not answer ${url.href} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function proxyModeMain(argv: string[]): Promise<void> {
  const cut = argv.indexOf("--");
  const flags = cut < 0 ? argv : argv.slice(0, cut);
  if (flags.includes("--help") || flags.includes("-h")) {
    process.stdout.write(`${PROXY_USAGE}\n`);
    return;
  }
  let parts;
  try {
    parts = splitProxyArgs(argv);
  } catch (err) {
    fail((err as Error).message);
  }
  const { own, replica, command } = parts;
  const appUrl = own["--app-url"];
  if (appUrl === undefined) fail("--proxy needs --app-url URL (where the app listens)");
  let app: URL;
  try {
    app = new URL(appUrl);
  } catch {
    fail(`--app-url "${appUrl}" is not a URL`);
  }
  const startTimeout = ms(own["--app-start-timeout-ms"], "--app-start-timeout-ms", 120_000);
  const stopTimeout = ms(own["--app-stop-timeout-ms"], "--app-stop-timeout-ms", 10_000);
  const healthPath = own["--app-health-path"] ?? "/";
  if (!healthPath.startsWith("/")) fail("--app-health-path must start with /");
  if (!process.env.SWITCHYARD_REPLICA_KEY && !replica.includes("--standalone")) fail("SWITCHYARD_REPLICA_KEY is not set (the deployment's replica key; see replica --print-key)");

  const log = (msg: string) => process.stderr.write(`[agent proxy] ${msg}\n`);
  const child = command.length > 0 ? spawnEngine(command) : undefined;
  // For launchers (one JSON line on stdout, as the replica's "listening" and "registered").
  if (child) process.stdout.write(`${JSON.stringify({ event: "app_started", pid: child.pid })}\n`);
  try {
    await appUp(new URL(healthPath, app), child, startTimeout);
  } catch (err) {
    log(String((err as Error).message));
    child?.kill();
    process.exit(1);
  }
  log(`the app answers at ${app.origin}`);
  const draining = { value: false };
  const hooks: ReplicaHooks = {
    draining,
    // Once drained and deregistered: the app gets SIGTERM, then SIGKILL after --app-stop-timeout-ms.
    beforeExit: async () => {
      if (!child) return;
      draining.value = true;
      child.terminate();
      const stopped = await Promise.race([child.exited.then(() => true), new Promise<boolean>((r) => setTimeout(r, stopTimeout, false))]);
      if (!stopped) {
        log(`the app did not stop within ${stopTimeout} ms of SIGTERM: SIGKILL`);
        child.kill();
      }
    },
  };
  // An app that exits on its own takes the replica's service with it: leave the fleet at once
  // (deregistered when the replica had registered), then exit 1.
  void child?.exited.then(async (why) => {
    if (draining.value) return;
    log(`the app exited (${why}) without being asked: deregistering and exiting`);
    await hooks.leave?.();
    process.exit(1);
  });
  const metrics = own["--app-metrics"];
  await replicaMain([...replica, "--backend", "proxy", "--upstream", app.href, ...(metrics !== undefined ? ["--upstream-metrics", metrics] : [])], hooks);
}
