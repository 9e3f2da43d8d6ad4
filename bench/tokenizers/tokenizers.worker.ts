/// <reference path="../../src/edge/modules.d.ts" />
/**
 * The Worker of bench/tokenizers/tokenizers.ts: one model family's tokenizer in a workerd
 * isolate, as a deployment naming the family gets it (src/prompt/tokenizers/). The
 * bench bundles this file once per family, with the family's module made as
 * scripts/build.ts makes it.
 *   POST /chat   a chat body: its prompt's token count, through the family
 *   POST /parse  the same body parsed and nothing else (the baseline)
 *   POST /keys   a chat body's prompt keys as the edge makes them (prefix/prompt-keys.ts, its
 *                tokenizing budget included): its blocks' token count
 *   GET  /load   makes the family's codec (reads its BPE spec or parses its tokenizer.json)
 *   GET  /wasm   bytes of the BPE engine's typed arrays (external to the V8 heap)
 */
import { promptKeys } from "../../src/prefix/prompt-keys.ts";
import { promptTokenizer, type PromptTokenizerName } from "../../src/prompt/tokenizers/index.ts";
import { bpeMemoryBytes } from "../../src/prompt/tokenizers/ranked-bpe.ts";
import type { TemplateMessage } from "../../src/prompt/tiny-lm-chat-template.ts";
// Replaced per family by the bench's bundler: the lines scripts/build.ts gives a Worker naming the family (familyModuleLines).
// @ts-expect-error -- a module the bench's bundler makes
import "FAMILY_MODULE";

declare const FAMILY_NAME: PromptTokenizerName;

const tokenizer = promptTokenizer(FAMILY_NAME);

export default {
  async fetch(request: Request): Promise<Response> {
    const path = new URL(request.url).pathname;
    if (path === "/load") return new Response(String(tokenizer.text("a", 16).length));
    if (path === "/wasm") return new Response(String(bpeMemoryBytes()));
    if (path === "/keys") {
      const keys = promptKeys(new Uint8Array(await request.arrayBuffer()), "chat", { tokenizer, extra: "" });
      return new Response(String((keys?.keys.length ?? 0) * (keys?.blockSize ?? 0)));
    }
    const body = (await request.json()) as { messages: TemplateMessage[] };
    if (path === "/parse") return new Response(String(body.messages.length));
    return new Response(String(tokenizer.chat(body.messages, 1 << 20).length));
  },
};
