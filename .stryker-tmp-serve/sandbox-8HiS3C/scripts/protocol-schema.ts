/**
 * docs/protocol.schema.json: the control messages' JSON Schema, generated from
 * their zod schemas (src/protocol/messages.ts) so that replicas written in other
 * languages can validate what they send. `npx tsx scripts/protocol-schema.ts`
 * writes it; test/unit/protocol-schema.test.ts fails when it is stale.
 */
// @ts-nocheck

import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { CONTROL_MESSAGES } from "../src/protocol/messages.ts";

export const PROTOCOL_SCHEMA_FILE = fileURLToPath(new URL("../docs/protocol.schema.json", import.meta.url));

/** The messages by name, each the body of a POST to its control path (docs/protocol.md §1): the protocol's one list. */
const MESSAGES = Object.fromEntries(Object.entries(CONTROL_MESSAGES).map(([name, m]) => [name, m.schema]));

export function protocolSchema(): string {
  const $defs = Object.fromEntries(
    Object.entries(MESSAGES).map(([name, schema]) => {
      // One $schema, at the top: a definition repeats none.
      const { $schema: _one, ...def } = z.toJSONSchema(schema, { io: "input" });
      return [name, def];
    }),
  );
  const doc = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    title: "Switchyard control messages",
    description: "Generated from src/protocol/messages.ts by scripts/protocol-schema.ts; do not edit.",
    anyOf: Object.keys(MESSAGES).map((name) => ({ $ref: `#/$defs/${name}` })),
    $defs,
  };
  return `${JSON.stringify(doc, null, 2)}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) writeFileSync(PROTOCOL_SCHEMA_FILE, protocolSchema());
