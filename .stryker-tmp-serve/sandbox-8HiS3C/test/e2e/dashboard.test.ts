// @ts-nocheck
// The live dashboard in a real browser: Debian's chromium, driven by
// playwright-core, against the real local stack. Replicas appear and disappear
// on the page as they start and stop; a screenshot is saved each run (to the
// stack's temp dir, or to DASHBOARD_SCREENSHOT: `DASHBOARD_SCREENSHOT=docs/dashboard.png`
// regenerates the one the README shows). `npm test` installs chromium first
// (`bash scripts/ensure-deps.sh --with-chromium`, as root on Debian). Without one the
// test is skipped with a warning on a developer's machine, and fails in CI (CI=true):
// a browser test that silently does not run proves nothing.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixtureFunctions, sleep, startStack } from "./stack-fixture.ts";

const executablePath = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
const NO_CHROMIUM = "no chromium at /usr/bin/chromium or /usr/bin/chromium-browser (Debian: apt-get install chromium, or bash scripts/ensure-deps.sh --with-chromium as root)";
if (!executablePath && !process.env.CI) console.warn(`dashboard browser test SKIPPED: ${NO_CHROMIUM}`);

describe.runIf(!executablePath && process.env.CI)("dashboard in headless Chromium (CI)", () => {
  it("has a browser to run in", () => {
    throw new Error(`the dashboard browser test cannot run in CI: ${NO_CHROMIUM}`);
  });
});

let stack: Awaited<ReturnType<typeof startStack>>;
let browser: Browser;

/** The replica ids a deployment's card shows, sorted. */
const rowIds = async (page: Page, deployment: string) =>
  (await page.locator(`[data-deployment="${deployment}"] [data-testid="replica-row"]`).evaluateAll((rows) => rows.map((r) => r.getAttribute("data-replica-id") ?? ""))).sort();

const helloIds = () => [...stack.replicas.values()].filter((r) => r.deployment === "hello").map((r) => r.id).sort();

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

/** Waits until the hello card shows exactly `ids`. */
const waitForRows = (page: Page, ids: string[], timeoutMs?: number) =>
  until(`hello rows ${ids.join(", ")}`, async () => JSON.stringify(await rowIds(page, "hello")) === JSON.stringify(ids), timeoutMs);

describe.skipIf(!executablePath)("dashboard in headless Chromium", () => {
  beforeAll(async () => {
    [stack, browser] = await Promise.all([
      startStack({ functionsDir: fixtureFunctions, replicas: { hello: 2, stream: 1, tight: 0, secure: 0 } }),
      chromium.launch({ executablePath, args: ["--no-sandbox"] }),
    ]);
  });
  afterAll(async () => {
    await browser?.close();
    await stack?.dispose();
  });

  it("shows replicas appear and disappear live, and charts the traffic", async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const pageErrors: string[] = [];
    const foreign: string[] = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));
    page.on("request", (r) => {
      if (!r.url().startsWith(stack.url) && !r.url().startsWith(stack.url.replace(/^http/, "ws")) && !r.url().startsWith("data:")) foreign.push(r.url());
    });

    await page.goto(`${stack.url}/-/dashboard#token=${encodeURIComponent(stack.adminSecret)}`);
    await page.locator('[data-testid="connection"]', { hasText: /^live$/ }).waitFor({ timeout: 10_000 });
    expect(page.url()).not.toContain("token="); // taken from the fragment into sessionStorage
    await page.locator('[data-testid="deployment-card"][data-deployment="stream"]').waitFor();
    const initial = helloIds();
    expect(initial).toHaveLength(2);
    await waitForRows(page, initial);

    // Steady traffic for the charts until the screenshot: hello (counted: none may fail),
    // a streamed echo, and a trickle to "tight", which has no replica (503s: the error chart).
    let traffic = true;
    let sent = 0;
    let ok = 0;
    const loop = async (fn: () => Promise<void>, pauseMs: number) => {
      while (traffic) {
        await fn().catch(() => {});
        await sleep(pauseMs);
      }
    };
    const hello = async () => {
      sent++;
      const res = await fetch(`${stack.url}/hello`);
      await res.text();
      if (res.status === 200) ok++;
    };
    const other = (path: string) => async () => void (await (await fetch(`${stack.url}${path}`)).text());
    const load = Promise.all([loop(hello, 5), loop(hello, 5), loop(hello, 5), loop(other("/stream?chunks=3&interval_ms=10"), 20), loop(other("/tight"), 250)]);

    try {
      // A replica that starts shows up.
      const added = await stack.startReplica("hello");
      await waitForRows(page, [...initial, added.id].sort());

      // The traffic reaches the charts (a completed 5 s window, flushed by the proxy).
      const rps = page.locator('[data-deployment="hello"] [data-metric="rps"]');
      await until("requests in the hello chart", async () => Number(await rps.getAttribute("data-max")) > 0, 20_000);

      // A replica that stops (SIGTERM: drains, deregisters) goes away.
      const stopped = initial[0]!;
      const exited = stack.replicas.get(stopped)!.exited;
      stack.replicas.get(stopped)!.child.kill("SIGTERM");
      await waitForRows(page, [initial[1]!, added.id].sort(), 15_000);
      await exited;
      expect(await rowIds(page, "hello")).toEqual(helloIds());

      // A full window of traffic in the chart, then the picture for the README.
      await until("a full window of hello traffic", async () => Number(await rps.getAttribute("data-last")) >= 20, 15_000);
      const screenshotPath = process.env.DASHBOARD_SCREENSHOT ?? join(stack.stateDir, "dashboard.png");
      await page.screenshot({ path: screenshotPath, fullPage: true });
      expect(existsSync(screenshotPath)).toBe(true);
    } finally {
      traffic = false;
      await load;
    }

    expect(sent).toBeGreaterThan(200);
    expect(ok).toBe(sent); // draining loses no request
    expect(Number(await page.locator('[data-deployment="hello"]').getAttribute("data-requests"))).toBeGreaterThan(0);
    expect(await page.locator('[data-deployment="tight"] [data-testid="no-replicas"]').count()).toBe(1);
    expect(pageErrors).toEqual([]);
    expect(foreign).toEqual([]); // everything comes from the Worker
    await page.close();
  });

  it("does not go live with a wrong secret", async () => {
    const page = await browser.newPage();
    await page.goto(`${stack.url}/-/dashboard#token=not-the-secret`);
    // Refused (the upgrade fails with 401, or the socket closes with 4001): the form comes back.
    await page.locator('[data-testid="connection"]', { hasText: /^unauthorized$/ }).waitFor({ timeout: 10_000 });
    expect(await page.locator("#login").isVisible()).toBe(true);
    expect(await page.getByTestId("replica-row").count()).toBe(0);
    expect(await page.evaluate("sessionStorage.length")).toBe(0); // the wrong secret is forgotten
    await page.close();
  });

  it("serves the page without auth, self-contained, with a strict CSP", async () => {
    const res = await fetch(`${stack.url}/-/dashboard`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.headers.get("content-security-policy")).toContain("default-src 'none'");
    const html = await res.text();
    expect(html.length).toBeLessThan(25_000);
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)="(https?:)?\/\//);
  });
});
