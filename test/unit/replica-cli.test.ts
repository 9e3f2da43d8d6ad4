/**
 * The replica CLI: its command line (parseReplicaArgs, every flag and every refusal),
 * and its backends started as the CLI starts them (startReplica, in this process):
 * the onnx flags, the two onnx modes, single model (preloaded) and multiplexed (on
 * demand), and a text replica. A real process shows a refusal's exit 2 and usage.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it, vi } from "vitest";
import { deriveReplicaKey, parseLoadHeader } from "../../src/protocol/index.ts";
import { FAMILY_PACKAGES } from "../../src/prompt/tokenizers/index.ts";
import { synthesizeVowel } from "../../src/models/silero-vad.ts";
import { parseReplicaArgs, replicaMain, startReplica, UsageError, type ReplicaOptions } from "../../src/replica/cli.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
});

function spawnCli(args: string[]): ChildProcess {
  const child = spawn(process.execPath, ["--import", "tsx", CLI, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_SECRET: "" } });
  children.push(child);
  return child;
}

/** Runs the CLI to its exit; returns the code and stderr. */
function runToExit(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawnCli(args);
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, stderr })));
}

/** Starts a standalone replica in this process (startReplica: what the CLI runs before it registers); closed after the test. */
async function startStandalone(args: string[]): Promise<string> {
  const command = parseReplicaArgs(["--deployment", "vad", "--standalone", "--port", "0", ...args], {});
  if (command.kind !== "serve") throw new Error(command.kind);
  const started = await startReplica(command.options, { log: () => undefined, fail: refuse, reportNow: () => Promise.resolve() });
  stops.push(() => started.server.close());
  return started.url;
}
const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});
const refuse = (msg: string): never => {
  throw new UsageError(msg);
};

const KNOWN = /known models: silero-vad-v4, silero-vad-v5, silero-vad-v6/;

describe("replica CLI: onnx flag validation", () => {
  const base = ["--deployment", "vad", "--standalone", "--backend", "onnx"];
  const cases: Array<[string, string[], RegExp]> = [
    ["an unknown --model", ["--model", "silero-vad"], KNOWN],
    ["an unknown id in --models", ["--models", "silero-vad-v5,whisper", "--max-models-per-replica", "2"], KNOWN],
    ["neither --model nor --models", [], KNOWN],
    ["--models without --max-models-per-replica", ["--models", "silero-vad-v5"], /needs --max-models-per-replica/],
    ["a bad --max-models-per-replica", ["--models", "silero-vad-v5", "--max-models-per-replica", "0"], /integer from 1/],
    ["a --default-model outside --models", ["--models", "silero-vad-v4", "--max-models-per-replica", "1", "--default-model", "silero-vad-v5"], /not in --models/],
    ["--model with --models", ["--model", "silero-vad-v5", "--models", "silero-vad-v4", "--max-models-per-replica", "1"], /--model serves one model/],
    ["a model listed twice", ["--models", "silero-vad-v4,silero-vad-v4", "--max-models-per-replica", "1"], /listed twice/],
  ];
  for (const [name, args, message] of cases) {
    it(`refuses ${name}`, async () => {
      await expect(startStandalone(["--backend", "onnx", ...args])).rejects.toThrow(message);
    }, 30_000);
  }
  it("exits 2 with the message and the usage", async () => {
    const { code, stderr } = await runToExit([...base, "--model", "silero-vad"]);
    expect(code).toBe(2);
    expect(stderr).toMatch(KNOWN);
    expect(stderr).toContain("usage: replica");
  }, 30_000);

  it("exits 2 on model flags without --backend onnx", async () => {
    const { code, stderr } = await runToExit(["--deployment", "vad", "--standalone", "--backend", "echo", "--model", "silero-vad-v5"]);
    expect(code).toBe(2);
    expect(stderr).toContain("--model needs --backend onnx or llm");
  }, 30_000);
});

describe("replica CLI: serving models", () => {
  const post = (url: string, headers: Record<string, string>, body: unknown) =>
    fetch(`${url}/vad`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const health = async (url: string) => (await (await fetch(`${url}/-/healthz`)).json()) as Record<string, unknown>;
  const vowel = { samples: synthesizeVowel(16000) };

  it("--model ID preloads the model and serves it as the default", async () => {
    const url = await startStandalone(["--backend", "onnx", "--model", "silero-vad-v6"]);
    expect(await health(url)).toMatchObject({ models: ["silero-vad-v6"], loading: [], max_models: 1, cache: { loads: 1 } });
    const res = await post(url, {}, vowel);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-model")).toBe("silero-vad-v6");
    expect(res.headers.get("x-switchyard-model-cache")).toBe("hit");
    expect(parseLoadHeader(res.headers.get("x-switchyard-load"))).toMatchObject({ models: ["silero-vad-v6"], loading: [] });
    expect(((await res.json()) as { model: string }).model).toBe("silero-vad-v6");
    const other = await post(url, { "x-switchyard-model": "silero-vad-v5" }, vowel);
    expect(other.status).toBe(404);
  }, 60_000);

  it("--models ... --max-models-per-replica N loads on demand, nothing preloaded", async () => {
    const url = await startStandalone(["--backend", "onnx", "--models", "silero-vad-v4,silero-vad-v5,silero-vad-v6", "--max-models-per-replica", "2"]);
    expect(await health(url)).toMatchObject({ models: [], loading: [], max_models: 2, cache: { loads: 0 } });
    const none = await post(url, {}, vowel);
    expect(none.status).toBe(400);
    expect(parseLoadHeader(none.headers.get("x-switchyard-load"))).toMatchObject({ models: [], loading: [] });
    for (const id of ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"]) {
      const res = await post(url, { serve_multiplexed_model_id: id }, vowel);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-switchyard-model-cache")).toBe("miss");
      expect(((await res.json()) as { model: string; speech: boolean }).speech).toBe(true);
    }
    expect(await health(url)).toMatchObject({ models: ["silero-vad-v6", "silero-vad-v5"], loading: [], cache: { loads: 3, evictions: 1 } });
  }, 60_000);

  it("a text replica's load header has no models", async () => {
    const url = await startStandalone(["--backend", "text", "--text", "hi"]);
    const res = await fetch(url);
    expect(await res.text()).toBe("hi");
    expect(res.headers.get("x-switchyard-load")).not.toContain("models=");
    expect(await health(url)).not.toHaveProperty("models");
  }, 30_000);
});

describe("parseReplicaArgs", () => {
  const KEY = "ab".repeat(32);
  const env = { SWITCHYARD_REPLICA_KEY: KEY };
  const registered = ["--deployment", "hello", "--backend", "text", "--edge", "http://127.0.0.1:8787"];
  const serve = (argv: string[], e: Record<string, string | undefined> = env): ReplicaOptions => {
    const command = parseReplicaArgs(argv, e);
    if (command.kind !== "serve") throw new Error(`parsed as ${command.kind}`);
    return command.options;
  };
  const refused = (argv: string[], e: Record<string, string | undefined> = env): string => {
    try {
      parseReplicaArgs(argv, e);
    } catch (err) {
      expect(err).toBeInstanceOf(UsageError);
      return (err as Error).message;
    }
    throw new Error(`accepted ${argv.join(" ")}`);
  };

  it("applies the defaults to a registered replica", () => {
    expect(serve(registered)).toEqual({
      deployment: "hello",
      backend: "text",
      flags: { text: "hi", model: undefined, models: undefined, "max-models-per-replica": undefined, "default-model": undefined, upstream: undefined, "upstream-metrics": undefined, "enable-prompt-tokens-details": false },
      knobs: { serviceMs: 0, kvBlocks: 512, prefillMs: 0, decodeMs: 0, prefillTokenUs: 0 },
      replicaId: `hello-${process.pid}`,
      port: 0,
      host: "127.0.0.1",
      maxOngoing: 5,
      maxQueued: 0,
      drainTimeoutMs: 30_000,
      standalone: false,
      acceptUnsigned: false,
      noCacheSummary: false,
      edge: "http://127.0.0.1:8787",
      key: KEY,
    });
  });

  it("takes every flag of an llm replica", () => {
    const options = serve([
      "--deployment", "chat", "--backend", "llm", "--model", "tiny-lm", "--edge", "https://edge.example.com", "--id", "gpu-1:a", "--port", "65535", "--host", "0.0.0.0",
      "--max-ongoing", "8", "--max-queued", "1000000", "--drain-timeout-ms", "0", "--advertise-url", "http://10.0.0.1:9000", "--kv-blocks", "1000000", "--prefill-ms", "600000",
      "--decode-ms", "7", "--prefill-token-us", "1000000", "--kv-events-endpoint", "tcp://*:5557", "--kv-events-replay-endpoint", "ipc:///tmp/replay", "--kv-events-topic", "kv",
      "--no-cache-summary", "--enable-prompt-tokens-details", "--accept-unsigned", "--fault", "lie",
    ]);
    expect(options).toMatchObject({
      deployment: "chat", backend: "llm", replicaId: "gpu-1:a", port: 65_535, host: "0.0.0.0", maxOngoing: 8, maxQueued: 1_000_000, drainTimeoutMs: 0,
      edge: "https://edge.example.com", key: KEY, advertiseUrl: "http://10.0.0.1:9000", acceptUnsigned: true, noCacheSummary: true, fault: "lie", standalone: false,
      knobs: { serviceMs: 0, kvBlocks: 1_000_000, prefillMs: 600_000, decodeMs: 7, prefillTokenUs: 1_000_000, kvEvents: { endpoint: "tcp://*:5557", replayEndpoint: "ipc:///tmp/replay", topic: "kv" } },
    });
    expect(options.flags).toMatchObject({ model: "tiny-lm", "enable-prompt-tokens-details": true });
    expect(serve(["--deployment", "chat", "--backend", "llm", "--standalone", "--kv-events-endpoint", "inproc://kv"]).knobs.kvEvents).toEqual({ endpoint: "inproc://kv", topic: "" });
  });

  it("a standalone replica needs no edge and no key, and may read API keys", () => {
    const options = serve(["--deployment", "hello", "--backend", "echo", "--standalone", "--api-key-file", "/tmp/keys"], {});
    expect(options).toMatchObject({ standalone: true, apiKeyFile: "/tmp/keys" });
    expect(options).not.toHaveProperty("key");
    expect(options).not.toHaveProperty("edge");
    // A key in the environment is not used by a standalone replica (it checks no signature).
    expect(serve(["--deployment", "hello", "--backend", "echo", "--standalone"])).not.toHaveProperty("key");
  });

  it("--region and --coordinates: where a registered replica is, declared at register (issue 57)", () => {
    expect(serve(registered)).not.toHaveProperty("region");
    expect(serve(registered)).not.toHaveProperty("coordinates");
    expect(serve([...registered, "--region", "eu-central", "--coordinates", "50.11,8.68"])).toMatchObject({ region: "eu-central", coordinates: { lat: 50.11, lon: 8.68 } });
    expect(serve([...registered, "--region=us-east-1", "--coordinates=-33.92, 18.42"])).toMatchObject({ region: "us-east-1", coordinates: { lat: -33.92, lon: 18.42 } });
    expect(serve([...registered, "--coordinates", "90,-180"]).coordinates).toEqual({ lat: 90, lon: -180 });
    expect(serve([...registered, "--coordinates", "+0.5,.25"]).coordinates).toEqual({ lat: 0.5, lon: 0.25 });
  });

  it("text, proxy and onnx flags go to their backends", () => {
    expect(serve([...registered, "--text", "yo", "--service-ms", "600000"])).toMatchObject({ flags: { text: "yo" }, knobs: { serviceMs: 600_000 } });
    expect(serve(["--deployment", "app", "--backend", "proxy", "--standalone", "--upstream", "http://127.0.0.1:1", "--upstream-metrics", "http://127.0.0.1:1/metrics"]).flags).toMatchObject({
      upstream: "http://127.0.0.1:1",
      "upstream-metrics": "http://127.0.0.1:1/metrics",
    });
    expect(serve(["--deployment", "vad", "--backend", "onnx", "--standalone", "--models", "a,b", "--max-models-per-replica", "2", "--default-model", "a"]).flags).toMatchObject({
      models: "a,b",
      "max-models-per-replica": "2",
      "default-model": "a",
    });
  });

  it("--help and --print-key", () => {
    expect(parseReplicaArgs(["--help"], {})).toEqual({ kind: "help" });
    expect(parseReplicaArgs(["-h", "--backend", "nope"], {})).toEqual({ kind: "help" });
    expect(parseReplicaArgs(["--print-key", "--deployment", "hello"], { SWITCHYARD_REPLICA_SECRET: "s" })).toEqual({ kind: "print-key", deployment: "hello", master: "s" });
    expect(refused(["--print-key"], { SWITCHYARD_REPLICA_SECRET: "s" })).toBe("--print-key needs --deployment NAME");
    expect(refused(["--print-key", "--deployment", "hello"], { SWITCHYARD_REPLICA_SECRET: "" })).toBe("--print-key reads the master secret from SWITCHYARD_REPLICA_SECRET, which is not set");
    expect(refused(["--print-key", "--deployment", "Hello"], { SWITCHYARD_REPLICA_SECRET: "s" })).toBe(`--deployment "Hello" is not a deployment name (lowercase letters, digits and '-')`);
  });

  const cases: Array<[string, string[], string, Record<string, string | undefined>?]> = [
    ["an unknown flag", [...registered, "--nope"], "Unknown option '--nope'"],
    ["a positional argument", [...registered, "extra"], "Unexpected argument 'extra'. This command does not take positional arguments"],
    ["no --deployment", ["--backend", "text", "--standalone"], "--deployment and --backend are required"],
    ["no --backend", ["--deployment", "hello", "--standalone"], "--deployment and --backend are required"],
    ["a bad deployment name", ["--deployment", "a_b", "--backend", "text", "--standalone"], `--deployment "a_b" is not a deployment name (lowercase letters, digits and '-')`],
    ["an unknown backend", ["--deployment", "hello", "--backend", "edge", "--standalone"], `unknown backend "edge"; known: text, echo, onnx, llm, proxy`],
    ["no --edge", ["--deployment", "hello", "--backend", "text"], "--edge is required (or --standalone)"],
    ["no key", registered, "SWITCHYARD_REPLICA_KEY is not set (the deployment's replica key; see --print-key)", {}],
    ["a short key", registered, "SWITCHYARD_REPLICA_KEY must be 64 lowercase hex digits (see --print-key)", { SWITCHYARD_REPLICA_KEY: "ab" }],
    ["an uppercase key", registered, "SWITCHYARD_REPLICA_KEY must be 64 lowercase hex digits (see --print-key)", { SWITCHYARD_REPLICA_KEY: "AB".repeat(32) }],
    ["an --edge that is no URL", ["--deployment", "hello", "--backend", "text", "--edge", "edge:8787x"], `--edge must be an http(s) URL`],
    ["an --edge that does not parse", ["--deployment", "hello", "--backend", "text", "--edge", "127.0.0.1:8787"], `--edge "127.0.0.1:8787" is not a URL`],
    ["a non-http --advertise-url", [...registered, "--advertise-url", "ftp://host"], "--advertise-url must be an http(s) URL"],
    ["a bad --id", [...registered, "--id=-x"], `--id "-x" is not a replica id (1-128 of [A-Za-z0-9._:-])`],
    ["a long --id", [...registered, "--id", "a".repeat(129)], `--id "${"a".repeat(129)}" is not a replica id (1-128 of [A-Za-z0-9._:-])`],
    ["--max-ongoing 0", [...registered, "--max-ongoing", "0"], "--max-ongoing must be an integer from 1 to 1000000"],
    ["--max-ongoing 1.5", [...registered, "--max-ongoing", "1.5"], "--max-ongoing must be an integer from 1 to 1000000"],
    ["--max-queued -1", [...registered, "--max-queued=-1"], "--max-queued must be an integer from 0 to 1000000"],
    ["--max-queued past its bound", [...registered, "--max-queued", "1000001"], "--max-queued must be an integer from 0 to 1000000"],
    ["--drain-timeout-ms that is not a number", [...registered, "--drain-timeout-ms", "soon"], "--drain-timeout-ms must be an integer from 0 to 3600000"],
    ["--drain-timeout-ms past an hour", [...registered, "--drain-timeout-ms", "3600001"], "--drain-timeout-ms must be an integer from 0 to 3600000"],
    ["--port past 65535", [...registered, "--port", "65536"], "--port must be an integer from 0 to 65535"],
    ["--port 1e3", [...registered, "--port", "1e3"], "--port must be an integer from 0 to 65535"],
    ["an unknown --fault", [...registered, "--fault", "slow"], `--fault must be "hang" or "lie", not "slow"`],
    ["--api-key-file on a registered replica", [...registered, "--api-key-file", "/tmp/keys"], "--api-key-file is for --standalone replicas (a registered replica checks the edge's signatures)"],
    ["--text on another backend", ["--deployment", "hello", "--backend", "echo", "--standalone", "--text", "x"], "--text is a flag of --backend text"],
    ["--service-ms on another backend", ["--deployment", "hello", "--backend", "echo", "--standalone", "--service-ms", "5"], "--service-ms is a knob of --backend text"],
    ["--service-ms past its bound", [...registered, "--service-ms", "600001"], "--service-ms must be an integer from 0 to 600000"],
    ["--upstream on another backend", [...registered, "--upstream", "http://127.0.0.1:1"], "--upstream and --upstream-metrics are flags of --backend proxy"],
    ["--upstream-metrics on another backend", [...registered, "--upstream-metrics", "http://127.0.0.1:1"], "--upstream and --upstream-metrics are flags of --backend proxy"],
    ["--models on another backend", ["--deployment", "chat", "--backend", "llm", "--standalone", "--models", "a"], "--models, --max-models-per-replica and --default-model need --backend onnx"],
    ["--max-models-per-replica on another backend", [...registered, "--max-models-per-replica", "2"], "--models, --max-models-per-replica and --default-model need --backend onnx"],
    ["--default-model on another backend", [...registered, "--default-model", "a"], "--models, --max-models-per-replica and --default-model need --backend onnx"],
    ["--model on a text backend", [...registered, "--model", "tiny-lm"], "--model needs --backend onnx or llm"],
    ["--kv-events-endpoint on another backend", [...registered, "--kv-events-endpoint", "tcp://*:1"], "--kv-events-* are flags of --backend llm"],
    ["--kv-events-topic on another backend", [...registered, "--kv-events-topic", "t"], "--kv-events-* are flags of --backend llm"],
    ["--kv-events-replay-endpoint on another backend", [...registered, "--kv-events-replay-endpoint", "tcp://*:1"], "--kv-events-* are flags of --backend llm"],
    ["--no-cache-summary on another backend", [...registered, "--no-cache-summary"], "--no-cache-summary and --enable-prompt-tokens-details are flags of --backend llm"],
    ["--enable-prompt-tokens-details on another backend", [...registered, "--enable-prompt-tokens-details"], "--no-cache-summary and --enable-prompt-tokens-details are flags of --backend llm"],
    ["--kv-blocks on another backend", [...registered, "--kv-blocks", "8"], "--kv-blocks is a knob of --backend llm"],
    ["--decode-ms on another backend", [...registered, "--decode-ms", "8"], "--decode-ms is a knob of --backend llm"],
    ["an empty --region", [...registered, "--region="], `--region "" is not a region name (1-64 of [A-Za-z0-9._-], starting with a letter or digit)`],
    ["a --region with a space", [...registered, "--region", "us east"], `--region "us east" is not a region name (1-64 of [A-Za-z0-9._-], starting with a letter or digit)`],
    ["a --region past 64 characters", [...registered, "--region", "r".repeat(65)], `--region "${"r".repeat(65)}" is not a region name (1-64 of [A-Za-z0-9._-], starting with a letter or digit)`],
    ["a --region starting with '-'", [...registered, "--region=-us"], `--region "-us" is not a region name (1-64 of [A-Za-z0-9._-], starting with a letter or digit)`],
    ["--coordinates with one number", [...registered, "--coordinates", "50.11"], `--coordinates must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "50.11"`],
    ["--coordinates with three numbers", [...registered, "--coordinates", "1,2,3"], `--coordinates must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "1,2,3"`],
    ["--coordinates that are not numbers", [...registered, "--coordinates", "north,east"], `--coordinates must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "north,east"`],
    ["--coordinates with an empty number", [...registered, "--coordinates", "50,"], `--coordinates must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "50,"`],
    ["--coordinates with an exponent", [...registered, "--coordinates", "5e1,8"], `--coordinates must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "5e1,8"`],
    ["--coordinates with Infinity", [...registered, "--coordinates", "Infinity,8"], `--coordinates must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "Infinity,8"`],
    ["--coordinates with NaN", [...registered, "--coordinates", "50,NaN"], `--coordinates must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "50,NaN"`],
    ["a latitude past 90", [...registered, "--coordinates", "90.5,8"], "--coordinates: latitude 90.5 is outside -90..90"],
    ["a latitude below -90", [...registered, "--coordinates=-91,8"], "--coordinates: latitude -91 is outside -90..90"],
    ["a longitude past 180", [...registered, "--coordinates", "50,181"], "--coordinates: longitude 181 is outside -180..180"],
    ["a longitude below -180", [...registered, "--coordinates", "50,-180.01"], "--coordinates: longitude -180.01 is outside -180..180"],
    ["a negative latitude without the = form", [...registered, "--coordinates", "-33.9,18.4"], "Option '--coordinates' argument is ambiguous.\nDid you forget to specify the option argument for '--coordinates'?\nTo specify an option argument starting with a dash use '--coordinates=-XYZ'."],
    ["--region on a standalone replica", ["--deployment", "hello", "--backend", "echo", "--standalone", "--region", "fra"], "--region and --coordinates are declared at register: a --standalone replica does not register (give them to its agent)"],
    ["--coordinates on a standalone replica", ["--deployment", "hello", "--backend", "echo", "--standalone", "--coordinates", "1,2"], "--region and --coordinates are declared at register: a --standalone replica does not register (give them to its agent)"],
  ];
  const llm = ["--deployment", "chat", "--backend", "llm", "--standalone"];
  cases.push(
    ["--kv-blocks 0", [...llm, "--kv-blocks", "0"], "--kv-blocks must be an integer from 1 to 1000000"],
    ["--prefill-ms past its bound", [...llm, "--prefill-ms", "600001"], "--prefill-ms must be an integer from 0 to 600000"],
    ["--decode-ms -1", [...llm, "--decode-ms=-1"], "--decode-ms must be an integer from 0 to 600000"],
    ["--prefill-token-us past its bound", [...llm, "--prefill-token-us", "1000001"], "--prefill-token-us must be an integer from 0 to 1000000"],
    ["--kv-events-topic without an endpoint", [...llm, "--kv-events-topic", "t"], "--kv-events-replay-endpoint and --kv-events-topic need --kv-events-endpoint"],
    ["--kv-events-replay-endpoint without an endpoint", [...llm, "--kv-events-replay-endpoint", "tcp://*:1"], "--kv-events-replay-endpoint and --kv-events-topic need --kv-events-endpoint"],
    ["an endpoint that is not ZMQ's", [...llm, "--kv-events-endpoint", "http://h:1"], `--kv-events-endpoint must be a ZMQ address such as tcp://127.0.0.1:5557, not "http://h:1"`],
    ["a replay endpoint with a space", [...llm, "--kv-events-endpoint", "tcp://*:1", "--kv-events-replay-endpoint", "tcp://a b"], `--kv-events-replay-endpoint must be a ZMQ address such as tcp://127.0.0.1:5557, not "tcp://a b"`],
  );
  it.each(cases)("refuses %s", (_name, argv, message, e) => {
    expect(refused(argv, e ?? env)).toBe(message);
  });
});

describe("replica CLI: the llm backend", () => {
  const started = async (args: string[]) => {
    const command = parseReplicaArgs(["--deployment", "chat", "--standalone", "--port", "0", "--backend", "llm", ...args], {});
    if (command.kind !== "serve") throw new Error(command.kind);
    const logs: string[] = [];
    const replica = await startReplica(command.options, { log: (m) => logs.push(m), fail: refuse, reportNow: () => Promise.resolve() });
    stops.push(() => replica.server.close());
    return { ...replica, logs };
  };
  const complete = (url: string, model: string, prompt: string) =>
    fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, prompt, max_tokens: 2, temperature: 0 }) });

  it("serves tiny-lm by default: OpenAI's routes, its state in /-/healthz, the KV use in the load, priority preemption, both continuations", async () => {
    const { url, parts, admission, logs } = await started(["--kv-blocks", "64"]);
    expect(logs.some((l) => /^loaded tiny-lm in \d+ ms$/.test(l))).toBe(true);
    expect(logs.some((l) => /^tiny-lm: session \d+ ms, warm-up \d+ ms$/.test(l))).toBe(true);
    expect(parts.continues).toBeUndefined();
    expect(await (await fetch(`${url}/-/healthz`)).json()).toMatchObject({ model: "tiny-lm", running: 0, waiting: 0, kv_cache_usage: 0, kv_blocks: 64, cached_blocks: 0 });
    const res = await complete(url, "tiny-lm", "the quick brown fox jumps over the lazy dog and the quick brown fox jumps over the lazy dog again");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { usage: { prompt_tokens: number; prompt_tokens_details?: unknown } };
    expect(body.usage).not.toHaveProperty("prompt_tokens_details");
    const health = (await (await fetch(`${url}/-/healthz`)).json()) as { cached_blocks: number };
    expect(health.cached_blocks).toBe(Math.floor(body.usage.prompt_tokens / 16));
    expect(parts.cacheSummary?.()).toBeDefined();
    expect(admission.load().kv).toBe(0);
    // Priority preemption is on: with every slot held at priority 0, a priority-1 request still fits.
    for (let i = 0; i < admission.maxOngoing; i++) expect(admission.tryAdmit(0).admitted).toBe(true);
    expect(admission.tryAdmit(0)).toMatchObject({ admitted: false, reason: "capacity" });
    expect(admission.tryAdmit(1).admitted).toBe(true);
  }, 60_000);

  it("--enable-prompt-tokens-details reaches the usage", async () => {
    const { url } = await started(["--enable-prompt-tokens-details"]);
    const body = (await (await complete(url, "tiny-lm", "hello there")).json()) as { usage: { prompt_tokens_details?: { cached_tokens: number } } };
    expect(body.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
  }, 60_000);

  it("refuses a model it does not know, naming the ones it does", async () => {
    await expect(started(["--model", "gpt-9"])).rejects.toThrow(
      `--model: unknown language model "gpt-9"; known: tiny-lm, and the engine stand-in for the families ${Object.keys(FAMILY_PACKAGES).join(", ")}`,
    );
  });

  it("serves a family's engine stand-in, which takes completion continuations only", async () => {
    const { url, parts } = await started(["--model", "qwen3"]);
    expect(parts.continues).toEqual(["completion"]);
    const res = await complete(url, "qwen3", "hello");
    expect(res.status).toBe(200);
    expect(await (await fetch(`${url}/-/healthz`)).json()).toMatchObject({ model: "qwen3" });
  }, 60_000);

  it("publishes KV events where --kv-events-endpoint says, and says where on stdout; a port in use is refused", async () => {
    const lines: string[] = [];
    const write = vi.spyOn(process.stdout, "write").mockImplementation((chunk) => (lines.push(String(chunk)), true));
    let endpoint: string;
    try {
      const { logs } = await started(["--kv-events-endpoint", "tcp://127.0.0.1:0", "--kv-events-topic", "kv"]);
      const printed = JSON.parse(lines.find((l) => l.includes('"kv_events"'))!) as { endpoint: string; replay_endpoint: string | null; topic: string };
      expect(printed).toMatchObject({ event: "kv_events", replay_endpoint: null, topic: "kv" });
      expect(printed.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
      expect(logs).toContain(`KV events on ${printed.endpoint}`);
      endpoint = printed.endpoint;
    } finally {
      write.mockRestore();
    }
    await expect(started(["--kv-events-endpoint", endpoint])).rejects.toThrow(/^--kv-events-\*: cannot bind: .*in use/i);
  }, 60_000);
});

describe("replicaMain: what it prints and how it exits", () => {
  const captured = () => {
    const out: string[] = [];
    const err: string[] = [];
    const o = vi.spyOn(process.stdout, "write").mockImplementation((c) => (out.push(String(c)), true));
    const e = vi.spyOn(process.stderr, "write").mockImplementation((c) => (err.push(String(c)), true));
    const x = vi.spyOn(process, "exit").mockImplementation((code) => {
      throw new Error(`exit ${code}`);
    });
    return { out, err, restore: () => (o.mockRestore(), e.mockRestore(), x.mockRestore()) };
  };

  it("--help prints the usage on stdout and returns", async () => {
    const io = captured();
    try {
      await replicaMain(["--help"]);
    } finally {
      io.restore();
    }
    expect(io.out.join("")).toMatch(/^usage: replica --deployment NAME --backend text\|echo\|onnx\|llm\|proxy/);
    expect(io.err).toEqual([]);
  });

  it("--print-key prints the deployment's replica key, derived from the master secret", async () => {
    const io = captured();
    const before = process.env.SWITCHYARD_REPLICA_SECRET;
    process.env.SWITCHYARD_REPLICA_SECRET = "a master secret";
    try {
      await replicaMain(["--print-key", "--deployment", "hello"]);
    } finally {
      io.restore();
      if (before === undefined) delete process.env.SWITCHYARD_REPLICA_SECRET;
      else process.env.SWITCHYARD_REPLICA_SECRET = before;
    }
    expect(io.out).toEqual([`${await deriveReplicaKey("a master secret", "hello")}\n`]);
  });

  it("a command line it refuses: the message, then the usage, on stderr, and exit 2", async () => {
    const io = captured();
    try {
      await expect(replicaMain(["--deployment", "hello", "--backend", "text", "--standalone", "--port", "70000"])).rejects.toThrow("exit 2");
    } finally {
      io.restore();
    }
    expect(io.err.join("")).toMatch(/^--port must be an integer from 0 to 65535\nusage: replica /);
    expect(io.out).toEqual([]);
  });
});

describe("replicaMain: a replica's life in this process (signals and exit recorded, not taken)", () => {
  const SIGNALS = new Set(["SIGTERM", "SIGINT", "SIGHUP"]);
  /** Captures stdout, stderr, the signal handlers replicaMain installs, and its exit codes. */
  function life() {
    const out: string[] = [];
    const err: string[] = [];
    const handlers = new Map<string, () => void>();
    const exits: number[] = [];
    let exited: (code: number) => void = () => undefined;
    const exitedP = new Promise<number>((r) => (exited = r));
    const on = process.on.bind(process);
    const spies = [
      vi.spyOn(process.stdout, "write").mockImplementation((c) => (out.push(String(c)), true)),
      vi.spyOn(process.stderr, "write").mockImplementation((c) => (err.push(String(c)), true)),
      vi.spyOn(process, "exit").mockImplementation(((code: number) => {
        exits.push(code);
        exited(code);
        if (code === 2) throw new Error("exit 2");
      }) as never),
      vi.spyOn(process, "on").mockImplementation(((event: string, fn: () => void) => {
        if (SIGNALS.has(event)) handlers.set(event, fn);
        else on(event, fn);
        return process;
      }) as never),
    ];
    const restore = () => spies.forEach((s) => s.mockRestore());
    stops.push(async () => restore());
    const lines = () => out.join("").split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>);
    return { out, err, handlers, exits, exited: exitedP, lines, signal: (s: string) => handlers.get(s)!() };
  }
  const env = (vars: Record<string, string>) => {
    const before = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
    Object.assign(process.env, vars);
    stops.push(async () => {
      for (const [k, v] of Object.entries(before)) if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    });
  };

  /** An API key file holding `text`, in a directory of its own removed after the test. */
  const keyFile = (text: string) => {
    const dir = mkdtempSync(`${tmpdir()}/replica-keys-`);
    stops.push(async () => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(`${dir}/keys`, text);
    return `${dir}/keys`;
  };

  it("standalone with an API key file: serves only its keys, SIGHUP reloads them (an empty file keeps the old), SIGTERM closes and exits 0", async () => {
    const file = keyFile("\n k1 \n\n");
    const l = life();
    await replicaMain(["--deployment", "hello", "--backend", "text", "--text", "hey", "--standalone", "--port", "0", "--id", "hello-1", "--api-key-file", file]);
    const [listening] = l.lines();
    expect(listening).toMatchObject({ event: "listening", replica_id: "hello-1", deployment: "hello" });
    const url = String(listening!.url);
    const get = async (key: string) => (await fetch(url, { headers: { authorization: `Bearer ${key}` } })).status;
    expect([await get("k1"), await get("k2")]).toEqual([200, 401]);
    writeFileSync(file, "k2\nk3\n");
    l.signal("SIGHUP");
    expect([await get("k1"), await get("k2"), await get("k3")]).toEqual([401, 200, 200]);
    expect(l.err.join("")).toContain(`[hello-1] reloaded 2 API key(s) from ${file}\n`);
    writeFileSync(file, "\n");
    l.signal("SIGHUP");
    expect(await get("k2")).toBe(200);
    expect(l.err.join("")).toContain(`[hello-1] SIGHUP: keeping the old API keys: ${file} holds no key\n`);
    l.signal("SIGTERM");
    expect(await l.exited).toBe(0);
    await expect(fetch(url)).rejects.toThrow();
  });

  it("an API key file that holds no key: refused at start with exit 2", async () => {
    const file = keyFile(" \n");
    const l = life();
    await expect(replicaMain(["--deployment", "hello", "--backend", "text", "--standalone", "--port", "0", "--api-key-file", file])).rejects.toThrow("exit 2");
    expect(l.err.join("")).toMatch(new RegExp(`^--api-key-file: ${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} holds no key\\nusage: replica `));
  });

  it("registered: listening, then registered; SIGTERM drains (a report saying so), deregisters, then exits 0 after the hooks", async () => {
    const { scriptedEdge } = await import("../fixtures/scripted-edge.ts");
    const edge = await scriptedEdge((close) => stops.push(close));
    env({ SWITCHYARD_REPLICA_KEY: "ab".repeat(32) });
    const l = life();
    const hooks = { draining: { value: false }, beforeExit: vi.fn(async () => undefined) } as Parameters<typeof replicaMain>[1] & { draining: { value: boolean } };
    await replicaMain(
      ["--deployment", "hello", "--backend", "text", "--edge", edge.url, "--port", "0", "--id", "hello-2", "--drain-timeout-ms", "5000", "--accept-unsigned", "--region", "fra", "--coordinates", "50.03,8.57"],
      hooks,
    );
    expect(l.lines().map((x) => x.event)).toEqual(["listening", "registered"]);
    // Where it is goes with its register.
    expect(edge.received.find((m) => m.path === "register")!.body).toMatchObject({ region: "fra", coordinates: { lat: 50.03, lon: 8.57 } });
    expect(l.err.join("")).toContain("[hello-2] --accept-unsigned: serving requests without an edge signature too (benchmarks only)\n");
    expect(edge.paths()).toContain("register");
    expect(hooks.leave).toBeTypeOf("function");
    l.signal("SIGTERM");
    l.signal("SIGINT"); // a second signal while draining is the same drain
    expect(await l.exited).toBe(0);
    expect(l.exits).toEqual([0]);
    expect(hooks.draining.value).toBe(true);
    expect(hooks.beforeExit).toHaveBeenCalledTimes(1);
    const after = edge.received.slice(edge.paths().indexOf("register") + 1);
    const draining = after.findIndex((m) => m.path === "report" && m.body.state === "draining");
    expect(draining).toBeGreaterThanOrEqual(0);
    expect(after.findIndex((m) => m.path === "deregister")).toBeGreaterThan(draining);
    const logs = l.err.join("");
    expect(logs).toContain("[hello-2] SIGTERM: draining (0 in flight)\n");
    expect(logs.indexOf("[hello-2] drained, exiting\n")).toBeGreaterThan(logs.indexOf("SIGTERM: draining"));
  });
});
