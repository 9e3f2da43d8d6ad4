/**
 * Priority into the engine (issue 32 §4): the header a dispatch carries
 * (x-switchyard-priority, src/protocol/headers.ts), the /v1 body an engine that
 * schedules by vLLM's `priority` gets (src/proxy/serve/admit.ts bodyForEngine: negated,
 * every other byte as sent), and the setting that asks for it (`openai.enginePriority`).
 * The bodies are vLLM's documented request format (test/fixtures/vllm-requests/).
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import { Header, MAX_DISPATCH_PRIORITY, OpenAIPath, parseDispatchPriority } from "../../src/protocol/index.ts";
import { bodyForEngine, vllmPriority } from "../../src/proxy/serve/admit.ts";
import { withLastMember } from "../../src/protocol/json-top-level.ts";
import { readRequestHeaders } from "../../src/proxy/serve/request.ts";
import { parseOpenAIBody } from "../../src/proxy/serve/request.ts";

const fixture = (name: string): ArrayBuffer => {
  const bytes = readFileSync(new URL(`../fixtures/vllm-requests/${name}`, import.meta.url));
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
};
const text = (b: ArrayBuffer) => new TextDecoder().decode(b);
const enc = (s: string) => new TextEncoder().encode(s).buffer as ArrayBuffer;

describe("vLLM's priority for a Switchyard priority", () => {
  it("is negated: vLLM serves lower values first, Switchyard higher first; 0 stays vLLM's default", () => {
    expect(vllmPriority(1)).toBe(-1); // critical: before vLLM's default 0
    expect(vllmPriority(-1)).toBe(1); // sheddable: after it
    expect(Object.is(vllmPriority(0), 0)).toBe(true); // never -0 (it would print as 0 anyway)
    expect(vllmPriority(1000)).toBe(-1000);
  });
});

describe("bodyForEngine (openai.enginePriority: vllm)", () => {
  const chat = fixture("chat-completion.json");

  it("sets a chat completion's priority, negated, and leaves every other byte as the client sent it", () => {
    for (const [priority, expected] of [
      [1, -1],
      [-1, 1],
      [7, -7],
    ] as const) {
      const out = bodyForEngine("vllm", OpenAIPath.chat, chat, priority, false);
      const parsed = JSON.parse(text(out)) as Record<string, unknown>;
      expect(parsed.priority).toBe(expected);
      const { priority: _p, ...rest } = parsed;
      expect(rest).toEqual(JSON.parse(text(chat)));
      // No re-serialisation: the bytes before the added member are the client's, a seed over 2^53 included.
      const original = text(chat).trimEnd();
      expect(text(out).startsWith(original.slice(0, -1))).toBe(true);
      expect(text(out)).toContain('"seed": 9007199254740993');
      expect(text(out).endsWith(`,"priority":${expected}}\n`)).toBe(true);
      // The route still reads it as a valid body, with the engine's value.
      const routed = parseOpenAIBody("chat", out);
      expect(routed.ok && routed.routing.priority).toBe(expected);
    }
  });

  it("overrides the client's own priority: the last member of a name wins (Python's json, JSON.parse)", () => {
    const completion = fixture("completion.json");
    expect((JSON.parse(text(completion)) as { priority: number }).priority).toBe(5);
    const out = bodyForEngine("vllm", OpenAIPath.completions, completion, 1, true);
    expect(text(out)).toBe(`${text(completion).trimEnd().slice(0, -1)},"priority":-1}\n`);
    expect((JSON.parse(text(out)) as { priority: number }).priority).toBe(-1);
    // Priority 0 still overrides a client's field (vLLM's default, written out).
    expect((JSON.parse(text(bodyForEngine("vllm", OpenAIPath.completions, completion, 0, true))) as { priority: number }).priority).toBe(0);
  });

  it("leaves the body alone when there is nothing to say, or no vLLM engine, or a path without the field", () => {
    expect(bodyForEngine("vllm", OpenAIPath.chat, chat, 0, false)).toBe(chat);
    expect(bodyForEngine(undefined, OpenAIPath.chat, chat, 1, true)).toBe(chat);
    expect(bodyForEngine("vllm", "/v1/models", chat, 1, false)).toBe(chat);
  });

  it("writes Responses' and embeddings' priority too (issue 50): a client's -1000 never reaches the engine past its key's cap", () => {
    for (const [path, name] of [[OpenAIPath.responses, "responses.json"], [OpenAIPath.embeddings, "embedding.json"]] as const) {
      const sent = fixture(name);
      expect((JSON.parse(text(sent)) as { priority: number }).priority, name).toBe(-1000);
      // The edge's priority for this request (0: the key's default) overrides the client's field.
      for (const priority of [0, 1, -1]) expect((JSON.parse(text(bodyForEngine("vllm", path, sent, priority, true))) as { priority: number }).priority, `${name} at ${priority}`).toBe(vllmPriority(priority));
    }
  });

  it("withLastMember: an empty object takes no comma; a body that is not an object is not touched", () => {
    expect(text(withLastMember(enc(" { } \r\n"), "priority", "-1")!)).toBe(' { "priority":-1} \r\n');
    expect(text(withLastMember(enc('{"a":{}}'), "priority", "2")!)).toBe('{"a":{},"priority":2}');
    expect(text(withLastMember(enc('{"a":"{"}'), "priority", "2")!)).toBe('{"a":"{","priority":2}');
    expect(withLastMember(enc("[1]"), "priority", "2")).toBeNull();
    expect(withLastMember(enc(""), "priority", "2")).toBeNull();
  });
});

describe("openai.enginePriority", () => {
  const base = { name: "llama", routePrefix: "/llama", backend: { kind: "external" as const } };

  it("takes vllm, and nothing else; unset by default", () => {
    expect(defineDeployment({ ...base, openai: { models: ["m"], enginePriority: "vllm" } }).openai?.enginePriority).toBe("vllm");
    expect(defineDeployment({ ...base, openai: { models: ["m"] } }).openai?.enginePriority).toBeUndefined();
    expect(() => defineDeployment({ ...base, openai: { models: ["m"], enginePriority: "sglang" as never } })).toThrow();
  });
});

describe("x-switchyard-priority", () => {
  it("is the edge's alone: a client's copy is dropped from the dispatch", () => {
    const passed = readRequestHeaders(new Headers({ [Header.priority]: "1000", "x-priority": "critical" }), false).passed;
    expect(passed.has(Header.priority)).toBe(false);
    // The deployment's own priority header (admission.priorityHeader) is the client's and passes.
    expect(passed.get("x-priority")).toBe("critical");
  });

  it("parses as an integer within ±1000; absent or malformed is 0", () => {
    expect(parseDispatchPriority("1")).toBe(1);
    expect(parseDispatchPriority(" -1 ")).toBe(-1);
    expect(parseDispatchPriority("5000")).toBe(MAX_DISPATCH_PRIORITY);
    expect(parseDispatchPriority("-5000")).toBe(-MAX_DISPATCH_PRIORITY);
    for (const bad of [undefined, null, "", "critical", "1.5", "1e3", "0x1", "--1", "1234567"]) expect(parseDispatchPriority(bad), String(bad)).toBe(0);
    expect(Object.is(parseDispatchPriority("-0"), 0)).toBe(true);
  });
});
