// A model family's tokenizer inside workerd, as a Worker whose deployment names it
// carries it (examples/model-family/qwen3.ts, added to this project by
// test/workers/vitest.config.ts): the generated deployments module imports the
// libraries and Qwen3's tokenizer.json through wrangler.toml's Text rule, as
// `wrangler deploy` would. The chat's token ids must be transformers' own
// (test/fixtures/kv-events/families-qwen3.json, written by families-gen.py).
import { describe, expect, it } from "vitest";
import { deployments } from "../../.switchyard/deployments.ts";
import { requestPromptKeys } from "../../src/proxy/serve/choose.ts";
import { promptTokenizer } from "../../src/prompt/tokenizers/index.ts";
import { familyCodecOf } from "../../src/prompt/tokenizers/hf-family.ts";
import fixture from "../fixtures/kv-events/families-qwen3.json";
import gptOssVectors from "../fixtures/harmony/vllm-chat-vectors.json";
import gemmaFixture from "../fixtures/kv-events/families-gemma3.json";

describe("a model family in workerd (examples/model-family/qwen3.ts)", () => {
  it("renders and tokenizes a chat as transformers does", () => {
    const ids = promptTokenizer("qwen3").chat(fixture.messages, 1 << 20, { kwargs: fixture.chat_template_kwargs });
    expect(Array.from(ids)).toEqual(fixture.ids);
    // With the edge's BPE engine, from the spec scripts/build.ts made (a Text module).
    expect(familyCodecOf("qwen3").engine).toBe("bpe");
  });

  it("keys the deployment's prompts with the family, not bytes", () => {
    const d = deployments.find((x) => x.name === "qwen3")!;
    const body = new TextEncoder().encode(JSON.stringify({ model: "Qwen/Qwen3-8B", messages: fixture.messages, chat_template_kwargs: fixture.chat_template_kwargs })).buffer;
    const keys = requestPromptKeys(d, "/qwen3/v1/chat/completions", body as ArrayBuffer, undefined)!;
    expect(keys.fallback).toBeUndefined();
    expect(keys.keys).toHaveLength(fixture.blocks);
  });
});

describe("gpt-oss in workerd (examples/model-family-gpt-oss/gpt-oss.ts)", () => {
  it("renders a chat as vLLM does for gpt-oss and tokenizes it with o200k_harmony, from the spec scripts/build.ts made", () => {
    for (const v of Object.values(gptOssVectors)) {
      const ids = promptTokenizer("gpt-oss").chat(v.request.messages as never, 1 << 20, { ...("tools" in v.request && { tools: v.request.tools as unknown[] }), reasoningEffort: (v.request as { reasoning_effort?: string }).reasoning_effort, startDate: v.start_date });
      expect(Array.from(ids)).toEqual(v.token_ids);
    }
    expect(familyCodecOf("gpt-oss").engine).toBe("bpe");
  });

  it("keys the deployment's prompts with the family and its pinned start date, reasoning_effort read from the body", () => {
    const d = deployments.find((x) => x.name === "gpt-oss")!;
    const v = gptOssVectors.system_user_tools_low;
    const body = new TextEncoder().encode(JSON.stringify({ model: "openai/gpt-oss-20b", ...v.request })).buffer;
    const keys = requestPromptKeys(d, "/gpt-oss/v1/chat/completions", body as ArrayBuffer, undefined)!;
    expect(keys.fallback).toBeUndefined();
    expect(keys.keys).toHaveLength(Math.floor(v.token_ids.length / 16));
    const other = new TextEncoder().encode(JSON.stringify({ model: "openai/gpt-oss-20b", ...v.request, reasoning_effort: "high" })).buffer;
    expect(requestPromptKeys(d, "/gpt-oss/v1/chat/completions", other as ArrayBuffer, undefined)!.keys.at(-1)).not.toEqual(keys.keys.at(-1));
  });
});

describe("Gemma 3 in workerd (examples/model-family-gemma3/gemma3.ts)", () => {
  it("renders and tokenizes a chat as transformers does, with the merges engine from the spec scripts/build.ts made", () => {
    const ids = promptTokenizer("gemma3").chat(gemmaFixture.messages, 1 << 20, { kwargs: gemmaFixture.chat_template_kwargs });
    expect(Array.from(ids)).toEqual(gemmaFixture.ids);
    expect(familyCodecOf("gemma3").engine).toBe("bpe");
  });

  it("keys the deployment's prompts with the family, not bytes", () => {
    const d = deployments.find((x) => x.name === "gemma3")!;
    const body = new TextEncoder().encode(JSON.stringify({ model: "google/gemma-3-12b-it", messages: gemmaFixture.messages, chat_template_kwargs: gemmaFixture.chat_template_kwargs })).buffer;
    const keys = requestPromptKeys(d, "/gemma3/v1/chat/completions", body as ArrayBuffer, undefined)!;
    expect(keys.fallback).toBeUndefined();
    expect(keys.keys).toHaveLength(gemmaFixture.blocks);
  });
});
