/** docs/protocol.schema.json is what scripts/protocol-schema.ts generates from the zod schemas now (never stale). */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { PROTOCOL_SCHEMA_FILE, protocolSchema } from "../../scripts/protocol-schema.ts";
import { CONTROL_MESSAGES, SystemPath } from "../../src/protocol/index.ts";

describe("docs/protocol.schema.json", () => {
  it("matches the zod schemas (regenerate: npx tsx scripts/protocol-schema.ts)", () => {
    expect(readFileSync(PROTOCOL_SCHEMA_FILE, "utf8")).toBe(protocolSchema());
  });

  it("defines every control message", () => {
    const doc = JSON.parse(protocolSchema()) as { $defs: Record<string, { required?: string[] }> };
    expect(Object.keys(doc.$defs).sort()).toEqual(["DeregisterMessage", "NodeReportMessage", "RegisterMessage", "ReportMessage"]);
    // The schema's list is the protocol's one list of messages, which the control routes also read.
    expect(Object.keys(doc.$defs)).toEqual(Object.keys(CONTROL_MESSAGES));
    for (const m of Object.values(CONTROL_MESSAGES)) expect(m.path.startsWith(`${SystemPath.replicas}/`)).toBe(true);
    expect(doc.$defs.RegisterMessage!.required).toEqual(expect.arrayContaining(["protocol", "deployment", "replica_id", "url"]));
  });
});
