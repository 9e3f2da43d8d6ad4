/**
 * docs/configuration.md names every option of a deployment: the top-level ones
 * and those of each nested object, as defineDeployment's output has them (an
 * input with every optional block set, so the optional ones count too).
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { BACKEND_KINDS } from "../../src/backends/index.ts";
import { defineDeployment } from "../../src/config/deployment.ts";

const doc = readFileSync(new URL("../../docs/configuration.md", import.meta.url), "utf8");

const full = defineDeployment({
  name: "full",
  routePrefix: "/full",
  backend: { kind: "external" },
  policy: { prefix: {} },
  access: { public: false, rateLimit: { requestsPerSecond: 1, burst: 1 } },
  multiplexing: { models: ["a"], defaultModel: "a" },
  openai: { models: ["a"] },
  autoscaling: { webhook: "https://example.com/hook" },
});

describe("docs/configuration.md", () => {
  it("documents every top-level option", () => {
    for (const key of Object.keys(full)) expect(doc, key).toContain(`| \`${key}\``);
  });

  it("documents every registered backend kind", () => {
    for (const k of BACKEND_KINDS) expect(doc).toContain(`| \`${k.schema.shape.kind.value}\` |`);
  });

  it("documents every nested option", () => {
    for (const [key, value] of Object.entries(full)) {
      if (key === "backend" || typeof value !== "object" || Array.isArray(value)) continue;
      for (const sub of Object.keys(value)) expect(doc, `${key}.${sub}`).toContain(`| \`${key}.${sub}\``);
    }
  });
});
