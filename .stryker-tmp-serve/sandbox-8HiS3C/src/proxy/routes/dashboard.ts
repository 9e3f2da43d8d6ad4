/**
 * The dashboard page, mounted at /-/dashboard. The page is static and holds no
 * data, so it needs no auth; the data comes over the WebSocket /-/dashboard/live,
 * which checks the admin secret (see src/dashboard/page.ts for the handshake).
 */
// @ts-nocheck

import { Hono } from "hono";
import { dashboardPage } from "../../dashboard/page.ts";
import type { Env } from "../../env.ts";
import { errorResponse } from "../../protocol/index.ts";

/** Inline script and style only; the page talks to its own origin and nothing else. */
const CSP = [
  "default-src 'none'",
  "script-src 'unsafe-inline'",
  "style-src 'unsafe-inline'",
  "img-src data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

export function dashboardRoutes(): Hono<{ Bindings: Env }> {
  const app = new Hono<{ Bindings: Env }>();
  let page: string | undefined;

  app.get("/", () => {
    page ??= dashboardPage();
    return new Response(page, {
      headers: {
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-cache",
        "content-security-policy": CSP,
        "referrer-policy": "no-referrer",
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
      },
    });
  });
  app.all("/", (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}`, { headers: { allow: "GET, HEAD" } }));

  return app;
}
