#!/usr/bin/env node
// @ts-nocheck
// `switchyard`: the Switchyard CLI (src/cli/), bundled to dist/cli.mjs by
// scripts/build.ts (npm's prepare, or `npm run build`): plain node runs it, no
// tsx at run time. In a checkout not built yet it falls back to the sources
// through tsx's loader (a devDependency).
import { existsSync } from "node:fs";

const bundle = new URL("../dist/cli.mjs", import.meta.url);
if (existsSync(bundle)) {
  await import(bundle.href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  await import("../src/cli/main.ts");
}
