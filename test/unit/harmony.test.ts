/**
 * The harmony format (src/prompt/tokenizers/harmony.ts) against harmony's own test
 * vectors: each conversation of openai/harmony's tests (src/tests.rs and
 * tests/test_harmony.py, built the same way here), rendered and compared byte for byte
 * with the test-data file harmony's tests compare theirs with
 * (test/fixtures/harmony/, copied from openai/harmony at ec7606d). Tokens are compared
 * with tiktoken's in test/unit/gpt-oss.test.ts.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  defaultSystemContent,
  HarmonyToken,
  renderForCompletion,
  renderConversation,
  ryu,
  serdeJson,
  type DeveloperContent,
  type HarmonyMessage,
  type HarmonySegment,
  type ReasoningEffort,
  type SystemContent,
} from "../../src/prompt/tokenizers/harmony.ts";
import { PyFloat, pyJsonLoads } from "../../src/prompt/tokenizers/py-json.ts";

/** A test-data file as harmony's tests read it: CRLF as LF, trailing whitespace trimmed. */
export const harmonyVector = (name: string): string => readFileSync(join(import.meta.dirname, "../fixtures/harmony", `${name}.txt`), "utf8").replaceAll("\r\n", "\n").trimEnd();

const NAMES: Record<number, string> = { [HarmonyToken.start]: "<|start|>", [HarmonyToken.end]: "<|end|>", [HarmonyToken.message]: "<|message|>", [HarmonyToken.channel]: "<|channel|>", [HarmonyToken.constrain]: "<|constrain|>", [HarmonyToken.call]: "<|call|>" };
/** Segments as the text harmony's decode_utf8 gives for their tokens. */
export const asText = (segments: readonly HarmonySegment[]): string => segments.map((s) => (typeof s === "number" ? NAMES[s]! : s)).join("");

const IDENTITY = "You are ChatGPT, a large language model trained by OpenAI.";
const system = (s: Partial<SystemContent> = {}): HarmonyMessage => ({ role: "system", content: [{ ...defaultSystemContent(), ...s }] });
const developer = (d: Omit<DeveloperContent, "type">): HarmonyMessage => ({ role: "developer", content: [{ type: "developer", ...d }] });
const text = (role: HarmonyMessage["role"], t: string, more: Partial<HarmonyMessage> = {}): HarmonyMessage => ({ role, content: [{ type: "text", text: t }], ...more });
const channels = (validChannels: string[]) => ({ validChannels, channelRequired: true });

describe("harmony's test vectors", () => {
  it("test_simple_convo", () => {
    expect(asText(renderForCompletion([system({ modelIdentity: IDENTITY }), text("user", "What is 2 + 2?")], "assistant", false))).toBe(harmonyVector("test_simple_convo"));
  });

  it.each([
    ["low", true, "test_simple_convo_low_effort"],
    ["medium", true, "test_simple_convo_medium_effort"],
    ["high", true, "test_simple_convo_high_effort"],
    ["low", false, "test_simple_convo_low_effort_no_instruction"],
    ["medium", false, "test_simple_convo_medium_effort_no_instruction"],
    ["high", false, "test_simple_convo_high_effort_no_instruction"],
  ] as const)("test_simple_convo_with_effort: %s, instructions %s (%s)", (effort: ReasoningEffort, instructions, file) => {
    const messages = [
      system({ modelIdentity: IDENTITY, reasoningEffort: effort }),
      ...(instructions ? [developer({ instructions: "Answer the user's questions like a robot." })] : []),
      text("user", "What is the capital of the largest country in the world?"),
    ];
    expect(asText(renderForCompletion(messages, "assistant", false))).toBe(harmonyVector(file));
  });

  it("test_reasoning_system_message, _no_instruction, _with_dates", () => {
    expect(asText(renderForCompletion([system({ reasoningEffort: "medium", channelConfig: channels(["analysis", "final"]) }), text("user", "What is 2 + 2?")], "assistant", false))).toBe(
      harmonyVector("test_reasoning_system_message"),
    );
    expect(
      asText(renderForCompletion([system({ reasoningEffort: "high", channelConfig: channels(["analysis", "final"]) }), text("user", "What is the best place to eat candy in the world?")], "assistant", false)),
    ).toBe(harmonyVector("test_reasoning_system_message_no_instruction"));
    const dated = system({ reasoningEffort: "medium", conversationStartDate: "2021-01-01", knowledgeCutoff: "2021-01", channelConfig: channels(["analysis", "final"]) });
    expect(asText(renderForCompletion([dated, text("user", "What is 42 * pi?")], "assistant", false))).toBe(harmonyVector("test_reasoning_system_message_with_dates"));
  });

  it("test_render_functions_with_parameters: every schema case of the TypeScript-like rendering", () => {
    const tools = pyJsonLoads(`[
      {"name": "get_location", "description": "Gets the location of the user."},
      {"name": "get_current_weather", "description": "Gets the current weather in the provided location.", "parameters": {
        "type": "object",
        "properties": {
          "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
          "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
        },
        "required": ["location"]}},
      {"name": "get_multiple_weathers", "description": "Gets the current weather in the provided list of locations.", "parameters": {
        "type": "object",
        "properties": {
          "locations": {"type": "array", "items": {"type": "string"}, "description": "List of city and state, e.g. [\\"San Francisco, CA\\", \\"New York, NY\\"]"},
          "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
        },
        "required": ["locations"]}},
      {"name": "kitchensink", "description": "A function with various complex schemas.", "parameters": {
        "description": "params object",
        "type": "object",
        "properties": {
          "string": {"type": "string", "title": "STRING", "description": "A string", "examples": ["hello", "world"]},
          "string_nullable": {"type": "string", "nullable": true, "description": "A nullable string", "default": "the default"},
          "string_enum": {"type": "string", "enum": ["a", "b", "c"]},
          "oneof_string_or_number": {
            "oneOf": [{"type": "string", "default": "default_string_in_oneof"}, {"type": "number", "description": "numbers can happen too"}],
            "description": "a oneof",
            "default": 20
          }
        }}}
    ]`) as Map<string, string | Map<string, never>>[];
    const fns = tools.map((t) => ({ name: t.get("name") as string, description: t.get("description") as string, ...(t.has("parameters") ? { parameters: t.get("parameters") } : {}) }));
    const messages = [
      system({ reasoningEffort: "high", conversationStartDate: "2025-06-28" }),
      developer({ instructions: "Always respond in riddles", tools: [{ name: "functions", tools: fns }] }),
      text("user", "What is the weather like in SF?"),
    ];
    expect(asText(renderForCompletion(messages, "assistant", false))).toBe(harmonyVector("test_render_functions_with_parameters"));
  });

  it("test_no_tools", () => {
    expect(asText(renderForCompletion([system({ conversationStartDate: "2025-06-28" })]))).toBe(harmonyVector("test_no_tools"));
  });

  const weatherTool = { name: "lookup_weather", description: "Use this tool to lookup the weather in a given location. Call it with the parameter 'location', can be any textual description of a location." };

  it("test_dropping_cot_by_default: analysis before the first final is dropped when the last assistant message is final", () => {
    const messages = [
      text("user", "What is 2 + 2?"),
      text("assistant", "User asks: “What is 2 + 2?” Simple arithmetic. Provide answer.", { channel: "analysis" }),
      text("assistant", "2 + 2 equals 4.", { channel: "final" }),
      text("user", "What about 9 / 2?"),
    ];
    expect(asText(renderForCompletion(messages, "assistant", true))).toBe(harmonyVector("test_dropping_cot_by_default"));
  });

  it("test_does_not_drop_if_ongoing_analysis: a tool call with its constrained content type, and the tool's answer", () => {
    const messages = [
      text("user", "What is the weather in SF?"),
      text("assistant", "User asks: “What is the weather in SF?” We need to use lookup_weather tool.", { channel: "analysis" }),
      text("assistant", '{"location": "San Francisco"}', { channel: "commentary", recipient: "functions.lookup_weather", contentType: "<|constrain|>json" }),
      text("tool", '{"temperature": 20, "description": "sunny"}', { name: "functions.lookup_weather" }),
    ];
    expect(asText(renderForCompletion(messages, "assistant", true))).toBe(harmonyVector("test_does_not_drop_if_ongoing_analysis"));
  });

  it("test_preserve_cot: nothing dropped without autoDropAnalysis", () => {
    const messages = [
      text("user", "What is 2 + 2?"),
      text("assistant", 'User asks a simple question: "What is 2 + 2?" The answer: 4.', { channel: "analysis" }),
      text("assistant", "2 + 2 equals 4.", { channel: "final" }),
      text("user", "What about 9 / 2?"),
    ];
    expect(asText(renderForCompletion(messages, "assistant", false))).toBe(harmonyVector("test_preserve_cot"));
  });

  it("test_keep_analysis_between_final_messages: only analysis before the first final goes", () => {
    const messages = [
      text("user", "What is 2 + 2?"),
      text("assistant", "thinking 2+2", { channel: "analysis" }),
      text("assistant", "4", { channel: "final" }),
      text("user", "What is 3 + 5?"),
      text("assistant", "thinking 3+5", { channel: "analysis" }),
      text("assistant", "8", { channel: "final" }),
    ];
    const out: HarmonySegment[] = [];
    renderConversation(messages, out, true);
    expect(asText(out)).toBe(harmonyVector("test_keep_analysis_between_finals"));
  });

  it("test_browser_and_function_tool's function namespace (the browser's text is harmony's own, and not vLLM's for chat)", () => {
    // The expected file's developer message: a function tool with one required string parameter.
    const dev = developer({ tools: [{ name: "functions", tools: [{ ...weatherTool, parameters: { type: "object", properties: { location: { type: "string" } }, required: ["location"] } }] }] });
    const whole = harmonyVector("test_browser_and_function_tool");
    const devText = asText([200006, ...renderForCompletion([dev]).slice(1)]);
    expect(whole.endsWith(devText)).toBe(true);
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
