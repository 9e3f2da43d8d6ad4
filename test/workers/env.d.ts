// Types of the workerd test environment: bindings are the Worker's Env, and
// `exports.default` is the Worker's fetch handler.
declare namespace Cloudflare {
  interface Env extends import("../../src/env.ts").Env {}
  interface Exports {
    default: Fetcher;
  }
}
