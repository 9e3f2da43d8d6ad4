/**
 * The `replica` process (`npm run replica`, dist/replica.mjs, `switchyard replica`):
 * the reference replica (src/replica/cli.ts), or with `replica agent ...` the
 * agent in front of an external engine (src/agent/cli.ts). Above both layers, so
 * neither imports the other's entry.
 */
// @ts-nocheck

const entry = process.argv[2] === "agent" ? import("./agent/cli.ts").then((m) => m.agentMain(process.argv.slice(3))) : import("./replica/cli.ts").then((m) => m.replicaMain());
entry.catch((err: unknown) => {
  process.stderr.write(`replica failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
