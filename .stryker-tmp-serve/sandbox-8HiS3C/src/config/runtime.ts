/**
 * The Worker's runtime settings, read from wrangler.toml, their one source: the
 * compatibility date and flags, and the Durable Object bindings (binding name,
 * class, SQLite storage from [[migrations]]). The local workerd config
 * (src/local/workerd-config.ts) and the benchmarks' bare Workers use these, so
 * `npm start` runs what `wrangler deploy` ships. Node only (the local stack and
 * tools), never part of the Worker bundle.
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "smol-toml";

/** The repository's wrangler.toml. */
export const wranglerTomlPath = join(dirname(fileURLToPath(import.meta.url)), "../../wrangler.toml");

/** A Durable Object namespace of the Worker. */
export interface DurableObjectBinding {
  /** The binding's name in `env` (e.g. "ROUTER"). */
  name: string;
  /** The exported class (e.g. "DeploymentRouter"). */
  className: string;
  /** SQLite-backed storage (listed in a migration's new_sqlite_classes). */
  sqlite: boolean;
}

export interface RuntimeSettings {
  compatibilityDate: string;
  compatibilityFlags: string[];
  durableObjects: DurableObjectBinding[];
}

/** Reads the runtime settings out of a wrangler.toml's text; throws when a field is missing or malformed. */
export function runtimeSettingsFrom(toml: string): RuntimeSettings {
  const c = parse(toml) as {
    compatibility_date?: unknown;
    compatibility_flags?: unknown;
    durable_objects?: { bindings?: { name?: unknown; class_name?: unknown; script_name?: unknown }[] };
    migrations?: { new_sqlite_classes?: unknown; new_classes?: unknown; deleted_classes?: unknown }[];
  };
  const date = c.compatibility_date;
  if (typeof date !== "string" || !/^\d{4}-\d{2}-\d{2}$/.test(date)) throw new Error("wrangler.toml: compatibility_date must be a YYYY-MM-DD string");
  const flags = c.compatibility_flags ?? [];
  if (!Array.isArray(flags) || !flags.every((f) => typeof f === "string")) throw new Error("wrangler.toml: compatibility_flags must be a list of strings");
  const sqlite = new Set<string>();
  for (const m of c.migrations ?? []) {
    for (const cls of (m.new_sqlite_classes ?? []) as string[]) sqlite.add(cls);
    for (const cls of (m.deleted_classes ?? []) as string[]) sqlite.delete(cls);
  }
  const durableObjects = (c.durable_objects?.bindings ?? []).map((b, i) => {
    if (typeof b.name !== "string" || typeof b.class_name !== "string") throw new Error(`wrangler.toml: durable_objects.bindings[${i}] needs a name and a class_name`);
    if (b.script_name !== undefined) throw new Error(`wrangler.toml: durable_objects.bindings[${i}] (${b.name}) names another script; the local stack serves only this Worker's classes`);
    return { name: b.name, className: b.class_name, sqlite: sqlite.has(b.class_name) };
  });
  return { compatibilityDate: date, compatibilityFlags: flags as string[], durableObjects };
}

const settings = runtimeSettingsFrom(readFileSync(wranglerTomlPath, "utf8"));

export const compatibilityDate = settings.compatibilityDate;
export const compatibilityFlags: readonly string[] = settings.compatibilityFlags;
export const durableObjects: readonly DurableObjectBinding[] = settings.durableObjects;
