/**
 * A Python virtualenv with pinned packages, made once and kept between runs under
 * .switchyard/py-<name>/ (a marker file names what was installed): for the tests
 * and benches that run a real Python program beside the stack (the official
 * `openai` client, Ray Serve for the seed benchmark).
 *
 * pip is pointed at the package indexes this machine's pip configuration names,
 * and only those: where the default index (pypi.org) is unreachable, pip would
 * otherwise retry it five times for every package, and an install bounded in time
 * dies of that (a fresh machine's Ray install was killed after 33 s of retries).
 * No host is named here: the indexes come from `pip config`. The install has its
 * own bound, in minutes.
 */
// @ts-nocheck

import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const root = join(dirname(new URL(import.meta.url).pathname), "..");

/** The index flags for pip: the configured index and extra indexes, as the only ones (none when pip names none). */
export async function configuredIndexFlags(): Promise<string[]> {
  const get = async (key: string) => {
    try {
      return (await run("python3", ["-m", "pip", "config", "get", key], { timeout: 20_000 })).stdout.trim();
    } catch {
      return "";
    }
  };
  const urls = [...(await get("global.index-url")).split(/\s+/), ...(await get("global.extra-index-url")).split(/\s+/)].filter(Boolean);
  if (urls.length === 0) return [];
  return ["--index-url", urls[0]!, ...urls.slice(1).flatMap((u) => ["--extra-index-url", u])];
}

export interface PythonEnvOptions {
  /** The install's bound, ms (default 10 minutes). */
  installBoundMs?: number;
  /** Told what is happening (an install takes a minute or more). */
  log?: (line: string) => void;
}

function envPaths(name: string, packages: readonly string[]) {
  const dir = join(root, ".switchyard", `py-${name}`);
  return { dir, python: join(dir, "bin/python"), marker: join(dir, "switchyard-packages"), want: createHash("sha256").update(packages.join("\n")).digest("hex").slice(0, 16) };
}

/**
 * The `python` of the virtualenv `name` if a previous run made it with exactly
 * `packages`, else undefined; installs nothing. A caller with alternative package
 * sets asks this for each before installing any, so that the set that worked last
 * time is not removed by an attempt at the first.
 */
export function cachedPythonEnv(name: string, packages: readonly string[]): string | undefined {
  const { python, marker, want } = envPaths(name, packages);
  return existsSync(python) && existsSync(marker) && readFileSync(marker, "utf8") === want ? python : undefined;
}

/**
 * The `python` of the virtualenv `name` with `packages` (pip requirement strings)
 * installed: made now unless a previous run made it with the same packages.
 * Throws with pip's last lines when the install fails or runs past its bound.
 */
export async function pythonEnv(name: string, packages: readonly string[], o: PythonEnvOptions = {}): Promise<string> {
  const cached = cachedPythonEnv(name, packages);
  if (cached) return cached;
  const { dir, python, marker, want } = envPaths(name, packages);
  try {
    await run("python3", ["-m", "venv", "--help"], { timeout: 20_000 });
  } catch (err) {
    throw new Error(`python3 with the venv module is needed (Debian: apt-get install python3-venv): ${String(err)}`);
  }
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dirname(dir), { recursive: true });
  await run("python3", ["-m", "venv", dir], { timeout: 60_000 });
  const bound = o.installBoundMs ?? 10 * 60_000;
  const flags = await configuredIndexFlags();
  o.log?.(`python env ${name}: pip install ${packages.join(" ")} (${flags.length ? "configured indexes only" : "pip's default index"}; up to ${Math.round(bound / 60_000)} min)`);
  try {
    await run(join(dir, "bin/pip"), ["install", "--quiet", "--disable-pip-version-check", "--retries", "1", "--timeout", "30", ...flags, ...packages], {
      timeout: bound,
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (err) {
    const e = err as { stderr?: string; killed?: boolean; signal?: string };
    const why = e.killed ? `not done within ${Math.round(bound / 1000)} s` : (e.stderr ?? String(err)).trim().split("\n").slice(-3).join(" | ");
    throw new Error(`pip install ${packages.join(" ")} failed: ${why}`);
  }
  writeFileSync(marker, want);
  return python;
}
