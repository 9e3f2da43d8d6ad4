/**
 * The import rules of src/, checked in `npm test` (scripts/test.sh runs
 * `depcruise src`): no import circles, and layers that only point down.
 *
 * A layer may import from the layers listed before it (and from itself, without
 * a circle), never from one after it. A new back-edge fails CI: move what both
 * layers need down into the lower one instead (docs/architecture.md, "Layers").
 */
// @ts-nocheck

const LAYERS = [
  // The wire: headers, paths, limits, messages, signing, the shared hashes. Imports nothing of ours.
  ["protocol", "seeded-random.ts"],
  // Prompts and models: tokenizers and chat templates; ONNX models.
  ["prompt", "models"],
  // Prefix block keys and summaries; backend kinds.
  ["prefix", "backends"],
  // Pure decisions: balancers, scorers, breakers, limits, autoscaling.
  ["policy"],
  // Deployment configuration; pure telemetry (histograms, windows, Prometheus text).
  ["config", "telemetry"],
  // Durable Objects (routing state, relays, sessions, keys, limits, telemetry); the node side's replica; the dashboard page.
  ["state", "replica", "dashboard"],
  // The Worker's bindings type; the agent (fronts an engine with the replica's client); the in-Worker model host.
  ["env.ts", "agent", "edge"],
  // The edge: the request path (serve/, below) and the routes (routes/: control, admin, observability, OpenAI) and app.ts.
  ["proxy"],
  // Entries: the Worker, the package's entries, the replica process, the CLIs and the local stack.
  ["worker.ts", "index.ts", "durable-objects.ts", "replica-entry.ts", "cli", "local"],
];

const pathOf = (name) => (name.endsWith(".ts") ? `^src/${name.replace(".", "\\.")}$` : `^src/${name}/`);
const any = (names) => `(${names.map(pathOf).join("|")})`;

const layerRules = LAYERS.slice(0, -1).map((layer, i) => ({
  name: `layer-${layer.join("+")}`,
  comment: `${layer.join(", ")} may not import from the layers above it: ${LAYERS.slice(i + 1).flat().join(", ")}`,
  severity: "error",
  from: { path: any(layer) },
  to: { path: any(LAYERS.slice(i + 1).flat()) },
}));

module.exports = {
  forbidden: [
    { name: "no-circular", comment: "an import circle: move what both sides need into a module below them", severity: "error", from: {}, to: { circular: true } },
    {
      name: "no-unlayered",
      comment: "every file of src/ belongs to a layer of .dependency-cruiser.cjs",
      severity: "error",
      from: { path: "^src/", pathNot: any(LAYERS.flat()) },
      to: {},
    },
    ...layerRules,
    {
      name: "serve-below-routes",
      comment: "the request path (proxy/serve/) is below the routes and the app that mount it",
      severity: "error",
      from: { path: "^src/proxy/serve/" },
      to: { path: "^src/proxy/(routes/|app\\.ts$)" },
    },
  ],
  options: {
    // TypeScript 7 has no JavaScript API for dependency-cruiser's default parser; swc parses TypeScript.
    parser: "swc",
    tsConfig: { fileName: "tsconfig.json" },
    tsPreCompilationDeps: true,
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(node_modules|\\.switchyard|dist)/" },
    includeOnly: "^src/",
  },
};
