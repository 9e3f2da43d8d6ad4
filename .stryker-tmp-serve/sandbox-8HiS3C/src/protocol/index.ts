// @ts-nocheck
export * from "./headers.ts";
export * from "./load.ts";
export * from "./messages.ts";
export * from "./errors.ts";
export * from "./signing.ts";
export * from "./constant-time.ts";
export * from "./limits.ts";
export * from "./paths.ts";
