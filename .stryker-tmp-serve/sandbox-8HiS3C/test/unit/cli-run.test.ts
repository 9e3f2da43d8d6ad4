/**
 * The CLI in-process (run(argv, io)) against a fake edge: argument parsing,
 * exit codes, what goes to stdout and stderr, and each command's HTTP calls.
 */
// @ts-nocheck

import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Io } from "../../src/cli/context.ts";
import { commandIndex, replicaArgs, run } from "../../src/cli/run.ts";
import { SECRET, startFakeEdge, type FakeEdge } from "./cli-fake-edge.ts";

let edge: FakeEdge;
beforeAll(async () => {
  edge = await startFakeEdge();
});
afterAll(async () => {
  await edge?.close();
});
beforeEach(() => {
  edge.reset();
});

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

async function cli(argv: string[], o: { env?: Record<string, string | undefined>; signal?: AbortSignal; tty?: boolean; onOut?: (s: string) => void } = {}): Promise<Result> {
  let stdout = "";
  let stderr = "";
  const io: Io = {
    stdout: {
      write: (s: string) => {
        stdout += s;
        o.onOut?.(s);
        return true;
      },
      isTTY: o.tty ?? false,
    },
    stderr: { write: (s: string) => (stderr += s) },
    env: o.env ?? { SWITCHYARD_EDGE: edge.url, SWITCHYARD_ADMIN_SECRET: SECRET },
    ...(o.signal && { signal: o.signal }),
  };
  const code = await run(argv, io);
  return { code, stdout, stderr };
}

describe("usage and exit codes", () => {
  it("prints help on stdout with exit 0: --help, -h, help, per command", async () => {
    for (const argv of [["--help"], ["-h"], ["help"]]) {
      const r = await cli(argv);
      expect(r).toMatchObject({ code: 0, stderr: "" });
      expect(r.stdout).toMatch(/^usage: switchyard /);
      expect(r.stdout).toMatch(/status \[DEPLOYMENT\]/);
    }
    for (const argv of [["drain", "--help"], ["help", "drain"], ["--help", "drain"], ["drain", "-h", "--edge", "http://x"]]) {
      const r = await cli(argv);
      expect(r.code, argv.join(" ")).toBe(0);
      expect(r.stdout).toMatch(/^usage: switchyard drain DEPLOYMENT REPLICA_ID/);
    }
    // No admin secret needed for help.
    expect((await cli(["status", "--help"], { env: {} })).code).toBe(0);
  });

  it("prints the version", async () => {
    const r = await cli(["--version"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^switchyard \d+\.\d+\.\d+\n$/);
  });

  const usageErrors: [string, string[], RegExp][] = [
    ["no command", [], /no command given/],
    ["an unknown command", ["frobnicate"], /unknown command "frobnicate"/],
    ["an unknown global option", ["--frob", "status"], /unknown option --frob/],
    ["an unknown command option", ["status", "--follow"], /Unknown option '--follow'/],
    ["a missing argument", ["drain", "hello"], /drain: missing argument/],
    ["an extra argument", ["status", "hello", "vad"], /unexpected argument "vad"/],
    ["a bad deployment name", ["status", "Hello!"], /not a deployment name/],
    ["a bad replica id", ["drain", "hello", "a/b"], /not a replica id/],
    ["--timeout without --wait", ["drain", "hello", "hello-1", "--timeout", "5"], /--timeout goes with --wait/],
    ["a bad --timeout", ["drain", "hello", "hello-1", "--wait", "--timeout", "soon"], /--timeout must be a number/],
    ["a bad --interval", ["metrics", "--follow", "--interval", "0"], /--interval must be a number of seconds ≥ 0.1/],
    ["--interval without --follow", ["metrics", "--interval", "1"], /--interval goes with --follow/],
    ["a bad --grep", ["metrics", "--grep", "("], /--grep: Invalid regular expression/],
    ["a flag without its value", ["status", "--edge"], /argument missing/],
    ["a bad --edge", ["status", "--edge", "localhost:8787"], /the edge URL must be http/],
    ["help on no such command", ["help", "frob"], /no command "frob"/],
  ];
  for (const [what, argv, message] of usageErrors) {
    it(`exits 2 with the usage on stderr for ${what}`, async () => {
      const r = await cli(argv);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(message);
      expect(r.stderr).toMatch(/usage: switchyard/);
      expect(edge.seen).toEqual([]);
    });
  }

  it("exits 2 without an admin secret, before calling the edge", async () => {
    for (const cmd of [["status"], ["drain", "hello", "hello-1"], ["metrics"], ["autoscale"]]) {
      const r = await cli(cmd, { env: { SWITCHYARD_EDGE: edge.url } });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/needs the edge's admin secret: set SWITCHYARD_ADMIN_SECRET/);
    }
    expect(edge.seen).toEqual([]);
  });

  it("documents agent", async () => {
    const r = await cli(["help", "agent"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/usage: switchyard agent --deployment NAME --engine-url URL/);
  });

  it("exits 1 when the edge is unreachable or refuses the secret", async () => {
    const down = await cli(["status", "--edge", "http://127.0.0.1:9"], { env: { SWITCHYARD_ADMIN_SECRET: SECRET } });
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/cannot reach the edge at http:\/\/127\.0\.0\.1:9/);
    const wrong = await cli(["status"], { env: { SWITCHYARD_EDGE: edge.url, SWITCHYARD_ADMIN_SECRET: "nope" } });
    expect(wrong.code).toBe(1);
    expect(wrong.stdout).toBe("");
    expect(wrong.stderr).toMatch(/401 unauthorized.*check SWITCHYARD_ADMIN_SECRET/);
  });

  it("takes --admin-secret and --edge as flags (warning that the flag shows in ps)", async () => {
    const r = await cli(["status", "hello", "--admin-secret", SECRET, "--edge", `${edge.url}/`], { env: {} });
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/warning: --admin-secret is visible/);
  });

  it("finds the command after global options", () => {
    expect(commandIndex(["--edge", "http://x", "--json", "status", "--edge", "y"])).toBe(3);
    expect(commandIndex(["--edge=http://x", "-h", "drain"])).toBe(2);
    expect(commandIndex(["--json"])).toBe(-1);
    expect(commandIndex(["--", "status"])).toBe(1);
  });
});

describe("status", () => {
  it("prints a table of every deployment's replicas", async () => {
    const r = await cli(["status"]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^DEPLOYMENT\s+REPLICA\s+STATE\s+LOAD\s+MODELS\s+URL$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/).slice(0, 4))).toEqual([
      ["hello", "hello-1", "ready", "1/5"],
      ["hello", "hello-2", "ready", "0/5"],
      ["vad", "vad-1", "ready", "0/4"],
    ]);
    expect(r.stdout).not.toMatch(/\x1b/);
    expect(edge.seen.sort()).toEqual(["GET /-/deployments/hello", "GET /-/deployments/vad", "GET /-/routes"]);
  });

  it("colours the table on a terminal unless NO_COLOR", async () => {
    expect((await cli(["status", "hello"], { tty: true })).stdout).toMatch(/\x1b\[32mready/);
    expect((await cli(["status", "hello"], { tty: true, env: { SWITCHYARD_EDGE: edge.url, SWITCHYARD_ADMIN_SECRET: SECRET, NO_COLOR: "1" } })).stdout).not.toMatch(/\x1b/);
  });

  it("prints JSON with --json (before or after the command)", async () => {
    for (const argv of [["status", "--json"], ["--json", "status"]]) {
      const r = await cli(argv);
      expect(r.code).toBe(0);
      const doc = JSON.parse(r.stdout) as { edge: string; deployments: { name: string; routePrefix: string; replicas: { id: string }[] }[] };
      expect(doc.edge).toBe(edge.url);
      expect(doc.deployments.map((d) => [d.name, d.routePrefix, d.replicas.map((x) => x.id)])).toEqual([
        ["hello", "/hello", ["hello-1", "hello-2"]],
        ["vad", "/vad", ["vad-1"]],
      ]);
    }
  });

  it("shows one deployment without listing routes, and exits 1 for an unknown one", async () => {
    const r = await cli(["status", "vad"]);
    expect(r.code).toBe(0);
    expect(edge.seen).toEqual(["GET /-/deployments/vad"]);
    expect(r.stdout).toMatch(/vad-1\s+ready\s+0\/4\s+silero-vad-v5/);
    const missing = await cli(["status", "nope"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no deployment named "nope"/);
  });
});

describe("drain", () => {
  it("asks the edge to drain and returns", async () => {
    const r = await cli(["drain", "vad", "vad-1"]);
    expect(r).toMatchObject({ code: 0, stderr: "" });
    expect(r.stdout).toBe("vad-1: draining (it finishes its in-flight requests, deregisters and exits)\n");
    expect(edge.seen).toEqual(["POST /-/deployments/vad/replicas/vad-1/drain"]);
  });

  it("--wait polls until the replica has left the routing table", async () => {
    const r = await cli(["drain", "hello", "hello-2", "--wait", "--json"]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ deployment: "hello", replica: "hello-2", draining: true, left: true });
    expect(edge.seen.filter((s) => s === "GET /-/deployments/hello").length).toBeGreaterThanOrEqual(2);
  });

  it("--wait exits 1 when the timeout runs out, and 130 when interrupted", async () => {
    edge.replicas.hello!.push({ id: "hello-stuck", state: "ready", ongoing: 5, max: 5 });
    const r = await cli(["drain", "hello", "hello-stuck", "--wait", "--timeout", "0.3"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/still in the routing table of "hello" after 0.3 s/);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    const interrupted = await cli(["drain", "hello", "hello-stuck", "--wait"], { signal: ac.signal });
    expect(interrupted.code).toBe(130);
  });

  it("exits 1 for a replica that does not exist", async () => {
    const r = await cli(["drain", "hello", "hello-99"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/no replica "hello-99" in "hello"/);
  });

  it("exits 1 with a clear message when the edge has no drain endpoint", async () => {
    edge.missing.add("drain");
    const r = await cli(["drain", "hello", "hello-1"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/has no such endpoint.*needs a newer Switchyard edge/);
  });
});

describe("metrics", () => {
  it("prints the exposition, filtered with --grep", async () => {
    const all = await cli(["metrics"]);
    expect(all.code).toBe(0);
    expect(all.stdout).toMatch(/^# HELP switchyard_requests_total/);
    const some = await cli(["metrics", "--grep", 'deployment="vad"']);
    expect(some.stdout).toBe('switchyard_requests_total{deployment="vad",status="2xx"} 7\n');
  });

  it("parses into JSON with --json", async () => {
    const r = await cli(["metrics", "--json", "--grep", "replicas"]);
    expect(JSON.parse(r.stdout)).toEqual([{ name: "switchyard_replicas", labels: { deployment: "hello" }, value: 2 }]);
  });

  it("--follow prints what changed with a time stamp until interrupted (exit 0)", async () => {
    const ac = new AbortController();
    let rounds = 0;
    const r = await cli(["metrics", "--follow", "--interval", "0.1"], {
      signal: ac.signal,
      onOut: () => {
        if (++rounds === 3) ac.abort();
      },
    });
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    // First round: every sample; then only the counter that moves.
    expect(lines.slice(0, 3).map((l) => l.replace(/^\S+ /, ""))).toEqual([
      expect.stringMatching(/^switchyard_requests_total\{deployment="hello",status="2xx"\} \d+$/),
      'switchyard_requests_total{deployment="vad",status="2xx"} 7',
      'switchyard_replicas{deployment="hello"} 2',
    ]);
    for (const l of lines) expect(l).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ switchyard_/);
    expect(lines.slice(3).every((l) => l.includes('deployment="hello",status="2xx"'))).toBe(true);
    expect(lines.length).toBe(5);
  });

  it("--follow --json prints one JSON line per change", async () => {
    const ac = new AbortController();
    let rounds = 0;
    const r = await cli(["metrics", "-f", "--interval", "0.1", "--json", "--grep", "status"], {
      signal: ac.signal,
      onOut: () => {
        if (++rounds === 2) ac.abort();
      },
    });
    expect(r.code).toBe(0);
    const [first, second] = r.stdout.trimEnd().split("\n").map((l) => JSON.parse(l) as { time: string; samples: { name: string; labels: Record<string, string> }[] });
    expect(first!.samples).toHaveLength(2);
    expect(second!.samples.map((s) => s.labels.deployment)).toEqual(["hello"]);
    expect(Date.parse(second!.time)).not.toBeNaN();
  });

  it("exits 1 with a clear message when the edge has no metrics endpoint", async () => {
    edge.missing.add("metrics");
    const r = await cli(["metrics"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/GET \/-\/metrics: the edge at .* has no such endpoint/);
  });
});

describe("autoscale", () => {
  it("prints current and desired per deployment, or JSON", async () => {
    const r = await cli(["autoscale"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^DEPLOYMENT\s+CURRENT\s+DESIRED\s+DETAILS\nhello\s+2\s+3\s+reason=queue\nvad\s+1\s+2\s+reason=queue\n$/);
    const j = await cli(["autoscale", "vad", "--json"]);
    expect(JSON.parse(j.stdout)).toEqual({ edge: edge.url, deployments: [{ deployment: "vad", current: 1, desired: 2, reason: "queue" }] });
  });

  it("exits 1 with a clear message when the edge has no autoscale endpoint", async () => {
    edge.missing.add("autoscale");
    const r = await cli(["autoscale", "hello"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/has no such endpoint/);
  });
});

describe("replica and agent: the edge they are given (issue 52)", () => {
  it("is the local stack's when nothing names one, as the README says", () => {
    expect(replicaArgs("replica", ["--deployment", "hello", "--backend", "text"], undefined)).toEqual(["--deployment", "hello", "--backend", "text", "--edge", "http://127.0.0.1:8787"]);
    expect(replicaArgs("replica", ["--deployment", "hello"], "")).toContain("http://127.0.0.1:8787");
  });

  it("is the global --edge or $SWITCHYARD_EDGE, never over the command's own, and goes before an agent's engine command", () => {
    expect(replicaArgs("replica", ["--deployment", "hello"], "https://edge.example")).toEqual(["--deployment", "hello", "--edge", "https://edge.example"]);
    expect(replicaArgs("replica", ["--deployment", "hello", "--edge", "http://own"], "https://edge.example")).toEqual(["--deployment", "hello", "--edge", "http://own"]);
    expect(replicaArgs("replica", ["--standalone"], undefined)).toEqual(["--standalone"]);
    expect(replicaArgs("agent", ["--deployment", "llm", "--", "vllm", "serve", "--edge", "x"], undefined)).toEqual(["agent", "--deployment", "llm", "--edge", "http://127.0.0.1:8787", "--", "vllm", "serve", "--edge", "x"]);
  });
});
