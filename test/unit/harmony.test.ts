/**
 * The harmony format (src/prompt/tokenizers/harmony.ts) against harmony's own test
 * vectors: each conversation of openai/harmony's tests (src/tests.rs and
 * tests/test_harmony.py, built the same way here), rendered and compared byte for byte
 * with the test-data file harmony's tests compare theirs with
 * (test/fixtures/harmony/, copied from openai/harmony at ec7606d). Tokens are compared
 * with tiktoken's in test/unit/gpt-oss.test.ts.
 */
import { describe, expect, it } from "vitest";
import { defaultSystemContent, HarmonyToken, renderForCompletion, renderConversation, ryu, serdeJson, type HarmonyMessage, type HarmonySegment } from "../../src/prompt/tokenizers/harmony.ts";
import { PyFloat, pyJsonLoads } from "../../src/prompt/tokenizers/py-json.ts";

import { HARMONY_TEST_CONVERSATIONS, asText, harmonyVector } from "../fixtures/harmony/conversations.ts";

const text = (role: HarmonyMessage["role"], t: string, more: Partial<HarmonyMessage> = {}): HarmonyMessage => ({ role, content: [{ type: "text", text: t }], ...more });

describe("harmony's test vectors", () => {
  it.each(HARMONY_TEST_CONVERSATIONS)("$file", ({ file, messages, autoDropAnalysis, completion }) => {
    const out: HarmonySegment[] = [];
    if (completion) out.push(...renderForCompletion(messages, "assistant", autoDropAnalysis));
    else renderConversation(messages, out, autoDropAnalysis);
    expect(asText(out)).toBe(harmonyVector(file));
  });

  it("test_browser_and_function_tool's developer message (the browser namespace is harmony's own, never vLLM's for chat)", () => {
    const weather = { name: "lookup_weather", description: "Use this tool to lookup the weather in a given location. Call it with the parameter 'location', can be any textual description of a location." };
    const dev: HarmonyMessage = { role: "developer", content: [{ type: "developer", tools: [{ name: "functions", tools: [{ ...weather, parameters: { type: "object", properties: { location: { type: "string" } }, required: ["location"] } }] }] }] };
    expect(harmonyVector("test_browser_and_function_tool").endsWith(asText(renderForCompletion([dev])))).toBe(true);
  });
});

describe("the format's details", () => {
  it("a user's name follows the role; a tool message needs its name; recipient 'all' is not written; <|call|> ends an assistant message to a recipient", () => {
    expect(asText(renderForCompletion([text("user", "hi", { name: "ann" })], "assistant"))).toBe("<|start|>user:ann<|message|>hi<|end|><|start|>assistant");
    expect(() => renderForCompletion([text("tool", "{}")])).toThrow("harmony: a tool message needs its tool's name");
    expect(asText(renderForCompletion([text("assistant", "x", { recipient: "all", channel: "final" })]))).toBe("<|start|>assistant<|channel|>final<|message|>x<|call|><|start|>assistant");
    expect(asText(renderForCompletion([text("assistant", "{}", { recipient: "functions.f", contentType: "json" })]))).toBe("<|start|>assistant to=functions.f json<|message|>{}<|call|><|start|>assistant");
    // Each seam is its own segment: the header's parts are tokenized apart.
    expect(renderForCompletion([text("assistant", "{}", { recipient: "functions.f", channel: "commentary", contentType: "<|constrain|>json" })])).toEqual([
      HarmonyToken.start, "assistant", " to=functions.f", HarmonyToken.channel, "commentary", " ", HarmonyToken.constrain, "json", HarmonyToken.message, "{}", HarmonyToken.call, HarmonyToken.start, "assistant",
    ]);
  });

  it("system content only in a system message, developer content only in a developer message", () => {
    expect(() => renderForCompletion([{ role: "user", content: [defaultSystemContent()] }])).toThrow("system content outside a system message");
    expect(() => renderForCompletion([{ role: "user", content: [{ type: "developer", instructions: "x" }] }])).toThrow("developer content outside a developer message");
  });

  it("defaults as serde_json prints them: floats by ryu's rules, strings escaped, members in the order written", () => {
    expect([1.0, 20.5, 1e-7, 1e21, 1.5e300, 0.00001, 123456789012345680000, 1e16, 1e15, -0.25, 0].map(ryu)).toEqual([
      "1.0", "20.5", "1e-7", "1e21", "1.5e300", "0.00001", "1.2345678901234568e20", "1e16", "1000000000000000.0", "-0.25", "0.0",
    ]);
    expect(serdeJson(pyJsonLoads('{"b": 1, "1": [2.0, null, true, "a\\"\\n\\u0001é"]}'))).toBe('{"b":1,"1":[2.0,null,true,"a\\"\\n\\u0001é"]}');
    expect(serdeJson(new PyFloat(Number.NaN))).toBe("null");
  });
});
