/**
 * Measures tiny-lm's speed on this machine (the figures in docs/tiny-lm.md):
 *
 *   npx tsx scripts/measure-tiny-lm.ts [--tokens 1024] [--runs 3]
 *
 * - session: time to create the onnxruntime-web session from models/tiny-lm/tiny-lm.onnx
 * - warm-up: the first runs of a fresh wasm instance, which are slower
 * - model run: µs per `session.run` for one next-token distribution (warm)
 * - engine: µs per generated token through LlmEngine (run + sampling + bookkeeping)
 * - HTTP stream: tokens/s of one streamed /v1/completions on a loopback ReplicaServer
 *   (no pacing), i.e. what a single client sees, server-sent events included
 */
// @ts-nocheck

import { parseArgs } from "node:util";
import { AdmissionControl } from "../src/replica/admission.ts";
import { LlmEngine } from "../src/replica/llm/engine.ts";
import { llmService } from "../src/replica/llm/openai-handler.ts";
import { loadTinyLm } from "../src/replica/llm/load-tiny-lm.ts";
import { tinyLmGenerator } from "../src/replica/llm/tiny-lm.ts";
import { encode } from "../src/prompt/tiny-lm-tokenizer.ts";
import { ReplicaServer } from "../src/replica/server.ts";

const { values } = parseArgs({ options: { tokens: { type: "string", default: "1024" }, runs: { type: "string", default: "3" } } });
const tokens = Number(values.tokens);
const runs = Number(values.runs);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const loaded = await loadTinyLm({ warmupRuns: 3000 });
const { model } = loaded;
console.log(`session create: ${loaded.sessionMs.toFixed(0)} ms; warm-up (3000 runs): ${loaded.warmupMs.toFixed(0)} ms`);

const perRun: number[] = [];
for (let r = 0; r < runs; r++) {
  const started = performance.now();
  for (let i = 0; i < 5000; i++) await model.nextLogits(i % 97, (i * 13) % 97);
  perRun.push(((performance.now() - started) * 1000) / 5000);
}
console.log(`model run: ${median(perRun).toFixed(1)} µs (median of ${runs} × 5000 runs)`);

const engine = new LlmEngine({ model: tinyLmGenerator(model), kvBlocks: 512 });
const perToken: number[] = [];
for (let r = 0; r < runs; r++) {
  const started = performance.now();
  let n = 0;
  for await (const _ of engine.generate({ prompt: encode("The replica"), maxTokens: tokens, sampling: { temperature: 1, topP: 1 }, seed: r })) n++;
  perToken.push(((performance.now() - started) * 1000) / n);
}
console.log(`engine: ${median(perToken).toFixed(1)} µs per token (median of ${runs} × ${tokens} tokens)`);

const admission = new AdmissionControl(8);
const service = llmService({ engine, modelId: model.id });
const server = new ReplicaServer({ replicaId: "measure", admission, handler: service.handler, unadmitted: service.unadmitted });
const address = await server.listen(0, "127.0.0.1");
const rates: number[] = [];
for (let r = 0; r < runs; r++) {
  const started = performance.now();
  const res = await fetch(`http://127.0.0.1:${address.port}/v1/completions`, {
    method: "POST",
    body: JSON.stringify({ model: model.id, prompt: "The replica", max_tokens: tokens, stream: true, seed: r }),
  });
  const text = await res.text();
  const chunks = text.split("\n\n").filter((l) => l.startsWith("data: {")).length - 1;
  rates.push(chunks / ((performance.now() - started) / 1000));
}
console.log(`HTTP stream: ${median(rates).toFixed(0)} tokens/s single stream (median of ${runs} × ${tokens} tokens)`);
await server.close();
await model.release();
