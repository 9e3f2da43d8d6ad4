/**
 * The import rules of the repository, checked in `npm test` (test/unit/import-rules.test.ts
 * runs depcruise over src/, scripts/, bench/, functions/ and test/fixtures/): no import
 * circles anywhere; src/ in layers that only point down, every file of it in one (a file
 * that imports nothing included); src/ never imports from scripts/, bench/, test/ or
 * functions/ (what the engine needs lives in the engine).
 *
 * A layer may import from the layers listed before it (and from itself, without
 * a circle), never from one after it. A new back-edge fails CI: move what both
 * layers need down into the lower one instead (docs/architecture.md, "Layers").
 */
const LAYERS = [
  // The wire: headers, paths, limits, messages, signing, the shared hashes; ambient types. Imports nothing of ours.
  ["protocol", "seeded-random.ts", "types"],
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
    {
      // The rule above sees only files that import something: these are the others.
      name: "no-unlayered-imported",
      comment: "every file of src/ belongs to a layer of .dependency-cruiser.cjs (one that imports nothing, imported here)",
      severity: "error",
      from: {},
      to: { path: "^src/", pathNot: any(LAYERS.flat()) },
    },
    {
      name: "no-unlayered-orphan",
      comment: "every file of src/ belongs to a layer of .dependency-cruiser.cjs (one that imports nothing and nothing imports)",
      severity: "error",
      from: { path: "^src/", pathNot: any(LAYERS.flat()), orphan: true },
      to: {},
    },
    {
      name: "src-self-contained",
      comment: "src/ (the engine) imports nothing from scripts/, bench/, test/ or functions/: move what it needs into src/",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^(scripts|bench|test|functions)/" },
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
    // test/fixtures/layers/ breaks every rule on purpose (the test of the rules runs there).
    exclude: { path: "^(node_modules|\\.switchyard|dist|test/fixtures/layers)/" },
    includeOnly: "^(src|scripts|bench|functions|test/fixtures)/",
  },
};
