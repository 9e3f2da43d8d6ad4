/**
 * `switchyard`: argument parsing, dispatch to the commands, exit codes.
 * 0 success; 1 runtime failure; 2 usage error (message and usage on stderr).
 * Data goes to stdout, errors and warnings to stderr.
 */
// @ts-nocheck

import { existsSync, readFileSync } from "node:fs";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { DEPLOYMENT_NAME, REPLICA_ID } from "../protocol/messages.ts";
import { autoscaleCommand } from "./commands/autoscale.ts";
import { drainCommand } from "./commands/drain.ts";
import { metricsCommand } from "./commands/metrics.ts";
import { replicaCommand } from "./commands/replica.ts";
import { statusCommand } from "./commands/status.ts";
import { sleepUnlessAborted, type Context, type Io } from "./context.ts";
import { EdgeClient } from "./edge.ts";
import { CliError, EXIT_USAGE, UsageError } from "./errors.ts";
import { COMMAND_USAGE, COMMANDS, MAIN_USAGE, shortUsage } from "./usage.ts";

export const DEFAULT_EDGE = "http://127.0.0.1:8787";

/**
 * The replica (or agent) CLI's arguments for `switchyard replica|agent REST`: REST, with
 * the global edge (`--edge` before the command, or $SWITCHYARD_EDGE; else the local
 * stack's, DEFAULT_EDGE) added where REST names none of its own. An agent's engine
 * command (after its own "--") is not searched for flags.
 */
export function replicaArgs(command: "replica" | "agent", rest: readonly string[], globalEdge: string | undefined): string[] {
  const edge = globalEdge || DEFAULT_EDGE;
  const sep = command === "agent" ? rest.indexOf("--") : -1;
  const own = (sep >= 0 ? rest.slice(0, sep) : rest).some((t) => t === "--edge" || t.startsWith("--edge=") || ["--standalone", "--print-key", "--help", "-h"].includes(t));
  const args = own ? [...rest] : sep >= 0 ? [...rest.slice(0, sep), "--edge", edge, ...rest.slice(sep)] : [...rest, "--edge", edge];
  return command === "agent" ? ["agent", ...args] : args;
}

type Options = NonNullable<ParseArgsConfig["options"]>;

const GLOBAL: Options = {
  edge: { type: "string" },
  "admin-secret": { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean" },
};

const COMMAND_OPTIONS: Record<string, Options> = {
  status: {},
  drain: { wait: { type: "boolean" }, timeout: { type: "string" } },
  metrics: { follow: { type: "boolean", short: "f" }, interval: { type: "string" }, grep: { type: "string" } },
  autoscale: {},
  agent: {},
  help: {},
};

/** Positional arguments per command: [required, at most]. */
const ARITY: Record<string, [number, number]> = {
  status: [0, 1],
  drain: [2, 2],
  metrics: [0, 0],
  autoscale: [0, 1],
  agent: [0, Infinity],
  help: [0, 1],
};

const ADMIN_COMMANDS = new Set(["status", "drain", "metrics", "autoscale"]);

export function version(): string {
  // Bundled (dist/cli.mjs) the package.json is one folder up; from src/cli/run.ts, two.
  const at = [new URL("../package.json", import.meta.url), new URL("../../package.json", import.meta.url)].find((u) => existsSync(u))!;
  const pkg = JSON.parse(readFileSync(at, "utf8")) as { version: string };
  return pkg.version;
}

/** Index of the command word in argv (skipping global options and their values), or -1. */
export function commandIndex(argv: readonly string[]): number {
  for (let i = 0; i < argv.length; i++) {
    const t = argv[i]!;
    if (t === "--") return i + 1 < argv.length ? i + 1 : -1;
    if (t === "--edge" || t === "--admin-secret") {
      i++;
      continue;
    }
    if (t.startsWith("-") && t !== "-") {
      const name = t.startsWith("--") ? t.slice(2).split("=")[0]! : t.slice(1);
      const known = t.startsWith("--") ? name in GLOBAL : name === "h";
      if (!known) throw new UsageError(`unknown option ${t.split("=")[0]} (a command's options come after the command)`, shortUsage());
      continue;
    }
    return i;
  }
  return -1;
}

function parse(argv: string[], options: Options, usage: string) {
  try {
    return parseArgs({ args: argv, options, strict: true, allowPositionals: true });
  } catch (err) {
    throw new UsageError((err as Error).message.replace(/\. To specify a positional argument.*$/s, ""), usage);
  }
}

function seconds(raw: string | undefined, flag: string, fallback: number, min: number, usage: string): number {
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(n) || n < min) throw new UsageError(`${flag} must be a number of seconds ≥ ${min}, not "${raw}"`, usage);
  return n;
}

function edgeUrl(raw: string, source: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new UsageError(`${source}: "${raw}" is not a URL (e.g. http://127.0.0.1:8787)`, shortUsage());
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new UsageError(`${source}: the edge URL must be http:// or https://, not "${raw}"`, shortUsage());
  return raw.replace(/\/+$/, "");
}

/** Runs the CLI; resolves with the exit code. */
export async function run(argv: readonly string[], io: Io): Promise<number> {
  try {
    return await dispatch([...argv], io);
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`switchyard: ${err.message}\n\n${err.usage}\n`);
      return EXIT_USAGE;
    }
    if (err instanceof CliError) {
      io.stderr.write(`switchyard: ${err.message}\n`);
      return err.exitCode;
    }
    if (io.signal?.aborted) return 130;
    io.stderr.write(`switchyard: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return 1;
  }
}

async function dispatch(argv: string[], io: Io): Promise<number> {
  const at = commandIndex(argv);
  const command = at >= 0 ? argv[at]! : undefined;

  if (command === "replica" || command === "agent") {
    // Everything after "replica" (or "agent") belongs to the replica CLI, untouched.
    const before = parse(argv.slice(0, at).filter((t) => t !== "--"), GLOBAL, shortUsage()).values;
    const rest = argv.slice(at + 1);
    if (before.help) {
      io.stdout.write(`${COMMAND_USAGE[command]}\n`);
      return 0;
    }
    return replicaCommand(replicaArgs(command, rest, (before.edge as string | undefined) ?? io.env.SWITCHYARD_EDGE));
  }

  if (command !== undefined && !COMMANDS.includes(command)) {
    throw new UsageError(`unknown command "${command}"`, shortUsage());
  }
  const usage = shortUsage(command);
  const args = argv.filter((_, i) => i !== at);
  const { values, positionals } = parse(args, { ...GLOBAL, ...(command ? COMMAND_OPTIONS[command] : {}) }, usage);

  if (values.version && !command) {
    io.stdout.write(`switchyard ${version()}\n`);
    return 0;
  }
  if (values.help || command === "help") {
    const topic = command === "help" ? positionals[0] : command;
    if (topic !== undefined && !(topic in COMMAND_USAGE)) throw new UsageError(`no command "${topic}"`, shortUsage());
    io.stdout.write(`${topic ? COMMAND_USAGE[topic] : MAIN_USAGE}\n`);
    return 0;
  }
  if (!command) throw new UsageError("no command given", shortUsage());

  const [min, max] = ARITY[command]!;
  if (positionals.length < min) throw new UsageError(`${command}: missing argument${min - positionals.length > 1 ? "s" : ""}`, usage);
  if (positionals.length > max) throw new UsageError(`${command}: unexpected argument "${positionals[max]}"`, usage);
  const deployment = positionals[0];
  if (deployment !== undefined && !DEPLOYMENT_NAME.test(deployment)) {
    throw new UsageError(`"${deployment}" is not a deployment name (lowercase letters, digits and '-')`, usage);
  }

  const edge = values.edge !== undefined ? edgeUrl(values.edge as string, "--edge") : io.env.SWITCHYARD_EDGE ? edgeUrl(io.env.SWITCHYARD_EDGE, "SWITCHYARD_EDGE") : DEFAULT_EDGE;
  if (values["admin-secret"] !== undefined) {
    io.stderr.write("switchyard: warning: --admin-secret is visible to other users of this machine (ps); prefer SWITCHYARD_ADMIN_SECRET\n");
  }
  const adminSecret = (values["admin-secret"] as string | undefined) || io.env.SWITCHYARD_ADMIN_SECRET || undefined;
  if (ADMIN_COMMANDS.has(command) && !adminSecret) {
    throw new CliError(`${command} needs the edge's admin secret: set SWITCHYARD_ADMIN_SECRET (npm start prints the local one)`, EXIT_USAGE);
  }

  const json = values.json === true;
  const ctx: Context = {
    io,
    edge: new EdgeClient({ baseUrl: edge, ...(adminSecret && { adminSecret }), ...(io.fetch && { fetch: io.fetch }), ...(io.signal && { signal: io.signal }) }),
    json,
    colour: io.stdout.isTTY === true && !io.env.NO_COLOR && io.env.TERM !== "dumb",
    now: io.now ?? (() => new Date()),
    sleep: (ms) => sleepUnlessAborted(ms, io.signal),
    out: (text) => void io.stdout.write(text),
    outJson: (value) => void io.stdout.write(`${JSON.stringify(value, null, 2)}\n`),
  };

  switch (command) {
    case "status":
      return statusCommand(ctx, positionals);
    case "autoscale":
      return autoscaleCommand(ctx, positionals);
    case "drain": {
      const replica = positionals[1]!;
      if (!REPLICA_ID.test(replica)) throw new UsageError(`"${replica}" is not a replica id (1-128 of A-Z a-z 0-9 . _ : -)`, usage);
      if (values.timeout !== undefined && !values.wait) throw new UsageError("--timeout goes with --wait", usage);
      const timeoutS = seconds(values.timeout as string | undefined, "--timeout", 60, 0, usage);
      return drainCommand(ctx, deployment!, replica, { wait: values.wait === true, timeoutS });
    }
    case "metrics": {
      if (values.interval !== undefined && !values.follow) throw new UsageError("--interval goes with --follow", usage);
      const intervalS = seconds(values.interval as string | undefined, "--interval", 2, 0.1, usage);
      let grep: RegExp | undefined;
      if (values.grep !== undefined) {
        try {
          grep = new RegExp(values.grep as string);
        } catch (err) {
          throw new UsageError(`--grep: ${(err as Error).message}`, usage);
        }
      }
      return metricsCommand(ctx, { follow: values.follow === true, intervalS, ...(grep && { grep }) });
    }
  }
  throw new UsageError(`unknown command "${command}"`, shortUsage());
}
