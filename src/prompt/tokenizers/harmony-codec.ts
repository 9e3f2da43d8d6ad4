/**
 * gpt-oss's codec (./gpt-oss.ts): a chat rendered as vLLM renders it
 * (./gpt-oss-chat.ts, ./harmony.ts) and tokenized as harmony tokenizes it: each
 * formatting token its id, each text piece on its own with no special tokens
 * (tiktoken's encode_ordinary), by the edge's BPE engine (./ranked-bpe.ts) on
 * o200k_harmony's spec. A text prompt (/v1/completions) goes through the model's
 * Hugging Face tokenizer in vLLM, which splits special tokens out of the text first
 * and adds nothing around it.
 */
import { bpeFromText, type BpeSpec } from "./bpe-spec.ts";
import { gptOssConversation } from "./gpt-oss-chat.ts";
import { HarmonyRenderError, HarmonyToken, renderForCompletion } from "./harmony.ts";
import type { FamilyCodec } from "./hf-family.ts";
import { bpeEncoder, rankedVocab, rememberingEncoder, type EncodeLimits, type RankedVocab } from "./ranked-bpe.ts";
import { headOf, UnsupportedPrompt, type TokenizeBudget } from "./tokenizer.ts";

/** Today's date in UTC, YYYY-MM-DD: the conversation's start date where the deployment sets none. */
export const utcDate = (now = new Date()): string => now.toISOString().slice(0, 10);

/** The codec of o200k_harmony's BPE spec (bpeText's output, as a Worker bundles it, or the spec). */
export function harmonyCodec({ bpe }: { bpe: string | BpeSpec }): FamilyCodec {
  const spec = typeof bpe === "string" ? bpeFromText(bpe) : bpe;
  const ordinary = rememberingEncoder(bpeEncoder(spec));
  const specials = new Map(spec.added.map((t) => [t.content, t.id]));
  const top = Math.max(...spec.added.map((t) => t.id));
  let vocab: RankedVocab | undefined;
  const limitsOf = (maxTokens: number, budget: TokenizeBudget | undefined): EncodeLimits => ({ maxTokens, budget: budget ?? { bytes: Number.POSITIVE_INFINITY } });

  /** Pieces in order, a formatting token as its id, text by ordinary encoding; stops at maxTokens or the budget. */
  const encode = (pieces: readonly (string | number)[], limits: EncodeLimits): number[] => {
    const out: number[] = [];
    for (const piece of pieces) {
      if (out.length >= limits.maxTokens || limits.budget.exhausted) break;
      if (typeof piece === "number") out.push(piece);
      else if (piece !== "") for (const id of ordinary(piece, { ...limits, maxTokens: limits.maxTokens - out.length })) out.push(id);
    }
    return out.length > limits.maxTokens ? out.slice(0, limits.maxTokens) : out;
  };

  /** A text prompt's pieces: the special tokens' text split out, as the Hugging Face tokenizer does. */
  const textPieces = (text: string): (string | number)[] => {
    const out: (string | number)[] = [];
    let from = 0;
    for (const m of text.matchAll(/<\|[a-z0-9_]+\|>/g)) {
      const id = specials.get(m[0]);
      if (id === undefined) continue;
      out.push(text.slice(from, m.index), id);
      from = m.index + m[0].length;
    }
    out.push(text.slice(from));
    return out;
  };

  return {
    engine: "bpe",
    chat(messages, tools, flags, maxTokens, budget) {
      const conversation = gptOssConversation({ messages, tools, reasoningEffort: flags.reasoningEffort, startDate: flags.startDate ?? utcDate() });
      let pieces;
      try {
        pieces = renderForCompletion(conversation);
      } catch (err) {
        if (err instanceof HarmonyRenderError) throw new UnsupportedPrompt(err.reason);
        throw err;
      }
      return encode(pieces, limitsOf(maxTokens, budget));
    },
    // A text cut well past maxTokens' worth of characters (8 per token), as the other codecs cut it.
    text: (prompt, maxTokens, budget) => encode(textPieces(headOf(prompt, maxTokens * 8 + 64)), limitsOf(maxTokens, budget)),
    vocabSize: top + 1,
    eosId: HarmonyToken.return,
    plain: (t) => encode([t], limitsOf(Number.MAX_SAFE_INTEGER, undefined)),
    decode(ids) {
      vocab ??= rankedVocab(spec.ranks);
      const bytes: number[] = [];
      for (const id of ids) {
        if (id + 1 >= vocab.start.length) continue; // special tokens are skipped, as vLLM's detokenizer does
        for (let i = vocab.start[id]!; i < vocab.start[id + 1]!; i++) bytes.push(vocab.bytes[i]!);
      }
      return new TextDecoder().decode(Uint8Array.from(bytes));
    },
  };
}
