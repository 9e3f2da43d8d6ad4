/**
 * The engine stand-in (`--backend llm --model <family>`, docs/prefix-routing.md): a
 * benchmark instrument that behaves like a vLLM engine serving a real model family for
 * routing purposes, as llm-d's inference simulator does. It is not a language model.
 *
 * - Prompts become tokens exactly as the family's tokenizer and chat template make them,
 *   through the edge's own registration (src/prompt/tokenizers/, held to transformers'
 *   output by test/unit/hf-tokenizers.test.ts). So its KV blocks, its KV events and its
 *   prefix-cache counters are the ones vLLM would have for the same requests.
 * - The engine (engine.ts) gives it the rest of vLLM's behaviour that routing sees: a
 *   block cache of a configured size with LRU eviction, prefill time per uncached token
 *   on one prefill lane, decode time per token, KV events and /metrics.
 * - What it generates is English from a fixed passage, in the family's tokens, from a
 *   point that depends on the prompt (and the seed, or the sampler's draw, unless the
 *   request is greedy). After 12–63 tokens it ends its turn with the family's EOS token,
 *   unless the request sets ignore_eos. Text is detokenized incrementally, as vLLM's
 *   detokenizer does: a token's text is held back until it completes a character.
 */
import { familyCodecOf } from "../../prompt/tokenizers/hf-family.ts";
import { promptTokenizer, type PromptTokenizerName } from "../../prompt/tokenizers/index.ts";
import type { GenerativeModel } from "./engine.ts";

/** What the stand-in says, cycled; plain English so that every family splits it into ordinary word tokens. */
const PASSAGE =
  "The river runs past the old mill and under the stone bridge, where the town keeps its market on summer mornings. " +
  "Farmers bring apples, cheese and bread, and the children watch the boats go by. In the evening the lamps are lit " +
  "along the water, and people walk slowly home while the bells ring from the church on the hill. Nobody is in a hurry " +
  "here; the days are long, the work is honest, and every season has its own small festival with music and dancing. ";

/** No prompt cut (the chat and text renderings take a token bound for the edge's sake). */
const UNBOUNDED = 1e9;

/** FNV-1a over a prompt's ids: where a greedy answer starts in the passage. */
function promptHash(ids: readonly number[]): number {
  let h = 0x811c9dc5;
  for (const id of ids) {
    h ^= id & 0xffff;
    h = Math.imul(h, 0x01000193);
    h ^= id >>> 16;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** The stand-in model for `family`; its files must resolve in node_modules (provideFamilyFilesFromNodeModules has run). */
export function familyStandIn(family: PromptTokenizerName, id: string = family): GenerativeModel {
  const tokenizer = promptTokenizer(family);
  const codec = familyCodecOf(family);
  const passage = codec.plain(PASSAGE);
  const eos = codec.eosId;
  return {
    id,
    prompts: {
      vocabSize: codec.vocabSize,
      firstId: 0,
      // A continuation (continue_final_message) as vLLM renders it: add_generation_prompt off, the text cut after the last message.
      chat: (messages, extras) => Array.from(tokenizer.chat(messages, UNBOUNDED, extras?.continueFinalMessage ? { ...extras, addGenerationPrompt: false } : extras)),
      text: (prompt) => Array.from(tokenizer.text(prompt, UNBOUNDED)),
      chatStop: [],
    },
    decoder(prompt, { sampling, rng, ignoreEos }) {
      const draw = sampling.temperature === 0 ? promptHash(prompt) : Math.floor(rng() * 2 ** 32);
      const start = draw % passage.length;
      const turnLength = 12 + (draw % 52);
      const generated: number[] = [];
      // vLLM's incremental detokenization: the text of generated[prefix..] past that of generated[prefix..read].
      let prefix = 0;
      let read = 0;
      return {
        next() {
          if (!ignoreEos && eos !== undefined && generated.length === turnLength) return Promise.resolve({ token: eos, text: "", eos: true });
          const token = passage[(start + generated.length) % passage.length]!;
          generated.push(token);
          const before = read > prefix ? codec.decode(generated.slice(prefix, read)) : "";
          const after = codec.decode(generated.slice(prefix));
          let text = "";
          if (after.length > before.length && !after.endsWith("\uFFFD")) {
            text = after.slice(before.length);
            prefix = read;
            read = generated.length;
          }
          return Promise.resolve({ token, text });
        },
      };
    },
  };
}
