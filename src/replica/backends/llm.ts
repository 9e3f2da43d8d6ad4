import type { ReplicaBackend } from "./context.ts";

/** The tiny language model behind OpenAI's routes, loaded only for llm replicas (onnxruntime is not free). */
export const llm: ReplicaBackend = async ({ flags, knobs, admission, log, fail }) => {
  const [{ loadTinyLm, TINY_LM_ID }, { LlmEngine }, { llmService }] = await Promise.all([
    import("../llm/load-tiny-lm.ts"),
    import("../llm/engine.ts"),
    import("../llm/openai-handler.ts"),
  ]);
  const modelId = flags.model ?? TINY_LM_ID;
  if (modelId !== TINY_LM_ID) fail(`--model: unknown language model "${modelId}"; known models: ${TINY_LM_ID}`);
  const loaded = await loadTinyLm();
  log(`loaded ${modelId}: session ${Math.round(loaded.sessionMs)} ms, warm-up ${Math.round(loaded.warmupMs)} ms`);
  // vLLM's KV events: zeromq's native addon loads only for replicas that publish them.
  const publisher = knobs.kvEvents
    ? await import("../llm/kv-event-publisher.ts").then(({ KvEventPublisher }) =>
        KvEventPublisher.start({ ...knobs.kvEvents!, blockSize: 16, log }).catch((err: unknown) => fail(`--kv-events-*: cannot bind: ${err instanceof Error ? err.message : String(err)}`)),
      )
    : undefined;
  if (publisher) {
    log(`KV events on ${publisher.endpoint}${publisher.replayEndpoint ? `, replay on ${publisher.replayEndpoint}` : ""}`);
    // For launchers that asked for port 0 (one JSON line, like "listening").
    process.stdout.write(`${JSON.stringify({ event: "kv_events", endpoint: publisher.endpoint, replay_endpoint: publisher.replayEndpoint ?? null, topic: knobs.kvEvents!.topic })}\n`);
  }
  const engine = new LlmEngine({
    model: loaded.model,
    kvBlocks: knobs.kvBlocks,
    prefillMs: knobs.prefillMs,
    prefillTokenUs: knobs.prefillTokenUs,
    decodeMs: knobs.decodeMs,
    ...(publisher && { onKvEvent: (event) => publisher.push(event) }),
  });
  admission.setKvSource(() => Math.round(engine.kvUsage * 1e4) / 1e4);
  const service = llmService({ engine, modelId });
  return {
    handler: service.handler,
    // What the prefix cache holds, for the reports (sent when it changed, src/replica/summary-cadence.ts).
    cacheSummary: () => engine.cacheSummary(),
    llm: {
      unadmitted: service.unadmitted,
      describe: () => ({ model: modelId, running: engine.running, waiting: engine.waiting, kv_cache_usage: engine.kvUsage, kv_blocks: engine.kvBlocks, cached_blocks: engine.cachedBlocks }),
    },
  };
};
