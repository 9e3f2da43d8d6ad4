/**
 * `npm start`: the local stack (edge proxy on workerd + reference replicas).
 *   npm start -- [--port 8787] [--replicas hello=48,vad=1] [--no-autoscale] [--fresh] [--rotate-secrets]
 * Deployments with `autoscaling` follow their desired replica count (src/local/actuator.ts),
 * unless --replicas fixes theirs or --no-autoscale turns that off.
 * Serves the deployments of functions/, or of the folders SWITCHYARD_FUNCTIONS names
 * (e.g. SWITCHYARD_FUNCTIONS=functions,examples/edge-inference).
 */
// @ts-nocheck

import { parseArgs } from "node:util";
import { LocalStack } from "./stack.ts";

const USAGE = "usage: npm start -- [--port 8787] [--replicas name=N,...] [--no-autoscale] [--fresh] [--rotate-secrets] [--verbose]";

function parseReplicas(spec: string | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of (spec ?? "").split(",").filter(Boolean)) {
    const m = /^([a-z][a-z0-9-]*)=(\d+)$/.exec(part.trim());
    if (!m) throw new Error(`bad --replicas entry "${part}" (want name=N)`);
    out[m[1]!] = Number(m[2]);
  }
  return out;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    allowNegative: true,
    options: {
      port: { type: "string", default: process.env.PORT ?? "8787" },
      replicas: { type: "string" },
      fresh: { type: "boolean", default: false },
      "rotate-secrets": { type: "boolean", default: false },
      autoscale: { type: "boolean", default: true },
      verbose: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) return void console.log(USAGE);
  let stopping = false;
  const stack = new LocalStack({
    port: Number(values.port),
    replicas: parseReplicas(values.replicas),
    freshState: values.fresh,
    rotateSecrets: values["rotate-secrets"],
    autoscale: values.autoscale,
    // Ctrl-C reaches every process of the terminal's group at once, so replicas may
    // outlive workerd by a moment while draining: their shutdown chatter is not news.
    log: values.verbose ? (l) => console.log(l) : (l) => (!stopping && /error|failed|exited/i.test(l) ? console.error(l) : undefined),
  });
  process.on("exit", () => stack.killAll());
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    console.log("\nstopping: draining replicas, then workerd…");
    // Every child got the terminal's Ctrl-C too, so a step of stop() can wait on an event
    // that already happened; Node then ended the process with nothing pending, exit 0,
    // mid-stop and without a word (3 of 5 Ctrl-Cs on a busy machine). Whatever is left is
    // killed then, or after 15 s if a step hangs on a live handle.
    const finish = () => {
      stack.killAll();
      console.log("stopped.");
      process.exit(0);
    };
    process.once("beforeExit", finish);
    setTimeout(finish, 15_000).unref();
    await stack.stop();
    finish();
  };
  // npm start runs this file with `node --import tsx`, not the tsx CLI: the CLI relays Ctrl-C to
  // its child and SIGKILLs it when the child does not confirm within 30 ms, which a busy stack
  // missed: it died mid-drain, without "stopped.", its replicas left to the terminal's signal.
  process.on("SIGINT", () => void stop());
  process.on("SIGTERM", () => void stop());

  console.log("starting Switchyard locally…");
  await stack.start();
  console.log(`\nedge proxy (workerd) on ${stack.url}   [HTTP/1.1 clients may also use ${stack.workerdUrl} directly]`);
  console.log("deployments:");
  for (const d of stack.deployments) {
    const ids = [...stack.replicas.values()].filter((r) => r.deployment === d.name).map((r) => `${r.id} ${r.url}`);
    // An autoscaled count is the count at start: the autoscaler moves it within its bounds.
    const a = stack.autoscaled.has(d.name) ? d.autoscaling : undefined;
    const bounds = a ? ` (autoscaled ${a.minReplicas}..${a.maxReplicas})` : "";
    console.log(`  ${d.routePrefix.padEnd(8)} → ${d.name} (${d.backend.kind}), ${ids.length} replica(s)${bounds}${ids.length ? ": " + ids.join(", ") : ""}`);
  }
  console.log(`\ntry:\n  curl -i ${stack.url}/hello`);
  console.log(`  curl -i ${stack.url}/hello -H 'x-session-id: chat-42'   # sticks to one replica`);
  if (stack.deployments.some((d) => d.name === "vad")) {
    console.log(`  curl -s ${stack.url}/vad/example | curl -s ${stack.url}/vad -H 'content-type: application/json' --data @-`);
    console.log(`  curl -s ${stack.url}/vad/example | curl -si ${stack.url}/vad -H 'serve_multiplexed_model_id: silero-vad-v4' --data @-`);
  }
  if (stack.deployments.some((d) => d.name === "vad-edge")) {
    console.log(`  curl -s ${stack.url}/vad/example | curl -s ${stack.url}/vad-edge -H 'content-type: application/json' --data @-   # the model in the Worker`);
  }
  const openaiModel = stack.deployments.find((d) => d.openai)?.openai?.models[0];
  if (openaiModel) {
    console.log(`  curl ${stack.url}/v1/models`);
    console.log(
      `  curl -sN ${stack.url}/v1/chat/completions -H 'content-type: application/json' -d '{"model":"${openaiModel}","messages":[{"role":"user","content":"hi"}],"stream":true}'`,
    );
  }
  console.log(`  curl ${stack.url}/-/routes ; curl ${stack.url}/-/healthz`);
  console.log(`\nadmin secret (for /-/deployments/<name>, /-/metrics): ${stack.adminSecret}`);
  console.log(`replica secret (SWITCHYARD_REPLICA_SECRET: replicas and agents you start yourself sign with it): ${stack.replicaSecret}`);
  console.log(`(both kept in .switchyard/local/secrets.json across restarts; ${values["rotate-secrets"] ? "new this start, as --rotate-secrets asked" : "npm start -- --rotate-secrets makes new ones"})`);
  console.log(`dashboard: ${stack.url}/-/dashboard#token=${stack.adminSecret}`);
  console.log("Ctrl-C stops everything.");
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
