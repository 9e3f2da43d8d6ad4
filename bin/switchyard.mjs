#!/usr/bin/env node
// `switchyard`: the Switchyard CLI (src/cli/). Runs the TypeScript sources
// through tsx's loader, so it needs no build step and works from any directory.
import { register } from "tsx/esm/api";

register();
await import("../src/cli/main.ts");
