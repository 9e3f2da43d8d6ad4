/**
 * The load generators and proxies a benchmark runs as commands (wrk, ab, nginx,
 * haproxy), found on PATH (or in the sbin directories daemons install into) or
 * installed from Debian's packages when missing, as scripts/ensure-deps.sh
 * installs ab: apt-get, as root only. Without them
 * every row of theirs would come back empty ("wrk exited ENOENT"), so a
 * benchmark calls ensureLoadTools first and stops with the reason when a tool
 * cannot be had.
 */
import { execFile } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";

/** Debian package of each load generator. */
export const DEBIAN_PACKAGE: Readonly<Record<string, string>> = { wrk: "wrk", ab: "apache2-utils", nginx: "nginx", haproxy: "haproxy" };

/** Where Debian puts daemons such as nginx and haproxy; a non-root PATH often lacks them. */
export const SBIN_DIRS: readonly string[] = ["/usr/local/sbin", "/usr/sbin", "/sbin"];

/** `pathEnv` with the sbin directories it lacks appended (so they are looked in last). */
export function withSbinDirs(pathEnv: string | undefined): string {
  const dirs = (pathEnv ?? "").split(delimiter).filter(Boolean);
  return [...dirs, ...SBIN_DIRS.filter((d) => !dirs.includes(d))].join(delimiter);
}

/** The first executable file named `cmd` in the directories of `pathEnv` (a PATH value), or undefined. */
export function findOnPath(cmd: string, pathEnv: string | undefined): string | undefined {
  for (const dir of (pathEnv ?? "").split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, cmd);
    try {
      if (!statSync(file).isFile()) continue;
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not there, or not executable
    }
  }
  return undefined;
}

export interface InstallPlan {
  /** Tools missing from PATH. */
  missing: string[];
  /** Debian packages to install (apt-get install -y …), when that is possible. */
  apt: string[];
  /** Set when a missing tool cannot be installed here: what to run instead. */
  error?: string;
}

/**
 * What to install so that every one of `tools` is on PATH: nothing when all are
 * there; their Debian packages when this is root with apt-get; otherwise an error
 * naming the command to run.
 */
export function planLoadTools(tools: readonly string[], env: { path: string | undefined; isRoot: boolean; hasAptGet: boolean }): InstallPlan {
  const missing = tools.filter((t) => !findOnPath(t, env.path));
  if (missing.length === 0) return { missing, apt: [] };
  const unknown = missing.filter((t) => !DEBIAN_PACKAGE[t]);
  const apt = [...new Set(missing.filter((t) => DEBIAN_PACKAGE[t]).map((t) => DEBIAN_PACKAGE[t]!))];
  const hint = `${missing.join(", ")} not found on PATH; install ${apt.length ? `them (sudo apt-get install ${apt.join(" ")})` : "them"}`;
  if (unknown.length) return { missing, apt: [], error: `${hint}; no known package for ${unknown.join(", ")}` };
  if (!env.hasAptGet) return { missing, apt: [], error: `${hint}: apt-get is not available here` };
  if (!env.isRoot) return { missing, apt: [], error: `${hint}: this is not root, so they are not installed automatically` };
  return { missing, apt };
}

function sh(cmd: string, args: string[], timeoutMs: number): Promise<{ ok: boolean; out: string }> {
  return new Promise((res) => {
    // RUNLEVEL=1: a package's postinst (nginx, haproxy) must not start a system service; the benchmark runs its own.
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 16 << 20, env: { ...process.env, DEBIAN_FRONTEND: "noninteractive", RUNLEVEL: "1" } }, (err, stdout, stderr) =>
      res({ ok: !err, out: `${String(stdout)}${String(stderr)}` }),
    );
  });
}
const lastLine = (s: string) => s.trim().split("\n").pop() ?? "";

/**
 * Makes sure `tools` are on PATH or in the sbin directories, installing their
 * Debian packages when missing (root with apt-get); resolves with each tool's
 * path, or with the reason when one cannot be had.
 */
export async function ensureLoadTools(
  tools: readonly string[],
  log: (line: string) => void = () => {},
): Promise<{ ok: true; paths: Record<string, string> } | { ok: false; why: string }> {
  const path = withSbinDirs(process.env.PATH);
  const found = () => Object.fromEntries(tools.map((t) => [t, findOnPath(t, path)] as const).filter((e): e is [string, string] => !!e[1]));
  const plan = planLoadTools(tools, { path, isRoot: process.getuid?.() === 0, hasAptGet: !!findOnPath("apt-get", path) });
  if (plan.error) return { ok: false, why: plan.error };
  if (plan.apt.length === 0) return { ok: true, paths: found() };
  log(`${plan.missing.join(", ")} missing: apt-get update && apt-get install -y ${plan.apt.join(" ")}`);
  const update = await sh("apt-get", ["update"], 120_000);
  if (!update.ok) return { ok: false, why: `apt-get update failed: ${lastLine(update.out)}` };
  const install = await sh("apt-get", ["install", "-y", ...plan.apt], 240_000);
  if (!install.ok) return { ok: false, why: `apt-get install ${plan.apt.join(" ")} failed: ${lastLine(install.out)}` };
  const still = tools.filter((t) => !findOnPath(t, path));
  return still.length ? { ok: false, why: `${still.join(", ")} still not on PATH after apt-get install ${plan.apt.join(" ")}` } : { ok: true, paths: found() };
}

/**
 * ensureLoadTools, or the bench stops now with the reason and exit status 1: a load
 * tool that is missing gives no figure, and a table of empty rows is not a result.
 */
export async function requireLoadTools(bench: string, tools: readonly string[]): Promise<Record<string, string>> {
  const got = await ensureLoadTools(tools, (line) => console.error(`[${bench}] ${line}`));
  if (got.ok) return got.paths;
  console.error(`[${bench}] cannot run: ${got.why}`);
  process.exit(1);
}
