// wrangler.toml is the one source of the Worker's runtime settings: the local workerd
// config (src/local/workerd-config.ts) takes the compatibility date, the flags and
// the Durable Object bindings from it (src/config/runtime.ts), and the build reads
// SWITCHYARD_FUNCTIONS for the folders of deployments (scripts/build.ts).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { functionsDirsFromEnv } from "../../src/local/build.ts";
import { compatibilityDate, compatibilityFlags, durableObjects, runtimeSettingsFrom, wranglerTomlPath } from "../../src/config/runtime.ts";
import { uniqueKeyOf, workerdConfig } from "../../src/local/workerd-config.ts";

const root = join(import.meta.dirname, "../..");

describe("runtime settings from wrangler.toml", () => {
  it("reads the repository's wrangler.toml", () => {
    expect(wranglerTomlPath).toBe(join(root, "wrangler.toml"));
    expect(compatibilityDate).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    // nodejs_compat is on by default from 2026-08-04; listing it with a later date is an error for workerd.
    if (compatibilityDate >= "2026-08-04") expect(compatibilityFlags).not.toContain("nodejs_compat");
    expect(durableObjects).toEqual([
      { name: "ROUTER", className: "DeploymentRouter", sqlite: true },
      { name: "RELAYS", className: "SnapshotRelay", sqlite: true },
      { name: "SESSIONS", className: "SessionRouter", sqlite: true },
      { name: "KEYS", className: "AccessKeys", sqlite: true },
      { name: "RATE_LIMITS", className: "RateLimiter", sqlite: true },
      { name: "TELEMETRY", className: "Telemetry", sqlite: true },
    ]);
  });

  it("puts wrangler.toml's date, flags and bindings into the workerd config", () => {
    const config = workerdConfig({ workerPath: "/s/worker.js", configDir: "/s", storageDir: "/s/do", address: "127.0.0.1:1", vars: {}, moreEdges: ["127.0.0.1:2"] });
    const toml = readFileSync(join(root, "wrangler.toml"), "utf8");
    expect(toml).toContain(`compatibility_date = "${compatibilityDate}"`);
    // Two edge services, each with the date, the flags and every binding.
    expect(config.split(`compatibilityDate = "${compatibilityDate}"`)).toHaveLength(3);
    expect(config.split(`compatibilityFlags = [${compatibilityFlags.map((f) => JSON.stringify(f)).join(", ")}]`)).toHaveLength(3);
    for (const o of durableObjects) {
      expect(config).toContain(`(name = "${o.name}", durableObjectNamespace = "${o.className}")`);
      expect(config).toContain(`(name = "${o.name}", durableObjectNamespace = (className = "${o.className}", serviceName = "edge"))`);
      expect(config).toContain(`(className = "${o.className}", uniqueKey = "${uniqueKeyOf(o.className)}", enableSql = true)`);
    }
  });

  it("keeps the storage keys of the objects' files under .switchyard/local/do", () => {
    expect(durableObjects.map((o) => uniqueKeyOf(o.className))).toEqual([
      "switchyard-deployment-router",
      "switchyard-snapshot-relay",
      "switchyard-session-router",
      "switchyard-access-keys",
      "switchyard-rate-limiter",
      "switchyard-telemetry",
    ]);
  });

  it("takes SQLite storage from the migrations, and refuses what it cannot serve", () => {
    const base = `compatibility_date = "2026-11-01"\n[[durable_objects.bindings]]\nname = "A"\nclass_name = "Alpha"\n[[durable_objects.bindings]]\nname = "B"\nclass_name = "Beta"\n`;
    expect(runtimeSettingsFrom(`${base}[[migrations]]\ntag = "v1"\nnew_sqlite_classes = ["Alpha"]\n`)).toEqual({
      compatibilityDate: "2026-11-01",
      compatibilityFlags: [],
      durableObjects: [
        { name: "A", className: "Alpha", sqlite: true },
        { name: "B", className: "Beta", sqlite: false },
      ],
    });
    expect(() => runtimeSettingsFrom(`compatibility_date = 2026-11-01\n`)).toThrow(/compatibility_date/);
    expect(() => runtimeSettingsFrom(`name = "x"\n`)).toThrow(/compatibility_date/);
    expect(() => runtimeSettingsFrom(`compatibility_date = "2026-11-01"\ncompatibility_flags = "x"\n`)).toThrow(/compatibility_flags/);
    expect(() => runtimeSettingsFrom(`compatibility_date = "2026-11-01"\n[[durable_objects.bindings]]\nname = "A"\n`)).toThrow(/class_name/);
    expect(() => runtimeSettingsFrom(`compatibility_date = "2026-11-01"\n[[durable_objects.bindings]]\nname = "A"\nclass_name = "Alpha"\nscript_name = "other"\n`)).toThrow(/another script/);
  });
});

describe("SWITCHYARD_FUNCTIONS", () => {
  it("names the folders of deployments, relative to the repository; functions/ by default", () => {
    expect(functionsDirsFromEnv({})).toEqual([join(root, "functions")]);
    expect(functionsDirsFromEnv({ SWITCHYARD_FUNCTIONS: "" })).toEqual([join(root, "functions")]);
    expect(functionsDirsFromEnv({ SWITCHYARD_FUNCTIONS: "functions, examples/edge-inference" })).toEqual([join(root, "functions"), join(root, "examples/edge-inference")]);
    expect(functionsDirsFromEnv({ SWITCHYARD_FUNCTIONS: "/abs/dir" })).toEqual(["/abs/dir"]);
  });
});
