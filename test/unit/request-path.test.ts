/**
 * The one path a request is routed by and forwarded with, and the URL it is
 * sent to (src/proxy/serve/request.ts): the open-proxy finding of the security
 * review (`/llm/%2e%2e/aaa@127.0.0.1:18555/secret` fetched another host) and a
 * fuzz over paths built from the characters that broke it.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { requestTarget, unmountedPath } from "../../src/proxy/serve/request.ts";
import { dispatchUrl } from "../../src/proxy/serve/dispatch.ts";
import { RouteTable, stripRoutePrefix } from "../../src/proxy/serve/request.ts";

const at = (path: string) => requestTarget(`http://edge.test${path}`);

describe("requestTarget", () => {
  it("keeps an ordinary path and its query as they are", () => {
    expect(at("/hello")).toEqual({ ok: true, path: "/hello", search: "" });
    expect(at("/llm/v1/completions?x=1&y=%2F")).toEqual({ ok: true, path: "/llm/v1/completions", search: "?x=1&y=%2F" });
    expect(at("/a//b/")).toEqual({ ok: true, path: "/a//b/", search: "" });
    expect(at("/files/a..b/.hidden/x.")).toEqual({ ok: true, path: "/files/a..b/.hidden/x.", search: "" });
    expect(at("/files/..a;b/x;..")).toEqual({ ok: true, path: "/files/..a;b/x;..", search: "" });
    expect(requestTarget("http://edge.test")).toEqual({ ok: true, path: "/", search: "" });
    expect(at("/x?")).toEqual({ ok: true, path: "/x", search: "" });
    expect(at("/x#frag")).toEqual({ ok: true, path: "/x", search: "" });
  });

  it("decodes percent-encoded unreserved characters (RFC 3986 §6.2.2.2) and leaves other escapes alone", () => {
    expect(at("/%6c%6C%6d/x")).toEqual({ ok: true, path: "/llm/x", search: "" });
    expect(at("/org%2Fname/%20x%7E")).toEqual({ ok: true, path: "/org%2Fname/%20x~", search: "" });
  });

  it("refuses a dot segment in every spelling and behind every separator", () => {
    for (const p of [
      "/llm/../x",
      "/llm/./x",
      "/llm/%2e%2e/aaa@127.0.0.1:18555/secret",
      "/llm/%2E%2E/x",
      "/llm/.%2e/x",
      "/llm/%2e./x",
      "/llm/%2e",
      "/llm/..",
      "/mux/%2e%2e/admin/x",
      "/llm/..%2Fadmin",
      "/llm/..%2fadmin",
      "/llm/%2e%2e%2fadmin",
      "/llm/..%5Cadmin",
      "/llm/x%2F..%2Fy",
      "/..",
      "/.",
      // A `;` path parameter after a dot segment: servlet containers read `..;` as `..`.
      "/llm/..;/x",
      "/llm/..;jsessionid=1/x",
      "/llm/.;/x",
      "/llm/%2e%2e;/x",
      "/llm/..%3B/x",
      "/llm/..%3b/x",
    ]) {
      const t = at(p);
      expect(t.ok, p).toBe(false);
      if (!t.ok) expect(t.message).toMatch(/dot segment/);
    }
  });

  it("refuses malformed escapes and backslashes", () => {
    for (const p of ["/llm/%zz", "/llm/%2", "/llm/%", "/llm/%g0"]) expect(at(p).ok, p).toBe(false);
    expect(at("/llm\\x").ok).toBe(false);
  });
});

describe("dispatchUrl", () => {
  it("appends the path and query to the replica's URL, base path included", () => {
    expect(dispatchUrl("http://127.0.0.1:39881", "/v1/completions", "?a=1")!.href).toBe("http://127.0.0.1:39881/v1/completions?a=1");
    expect(dispatchUrl("https://gpu-1.example.com/engine/", "/v1/x", "")!.href).toBe("https://gpu-1.example.com/engine/v1/x");
    expect(dispatchUrl("http://127.0.0.1:39881", "//evil.test/x", "")!.href).toBe("http://127.0.0.1:39881//evil.test/x");
  });

  it("never leaves the replica: no userinfo, host, port or scheme can come from the path", () => {
    expect(dispatchUrl("http://127.0.0.1:39881", "@127.0.0.1:18555/secret", "")).toBeNull();
    expect(dispatchUrl("http://127.0.0.1:39881", "rics", "")).toBeNull();
    expect(dispatchUrl("http://127.0.0.1:39881", "/@127.0.0.1:18555/secret", "")!.origin).toBe("http://127.0.0.1:39881");
    expect(dispatchUrl("http://127.0.0.1:39881", ":18555/secret", "")).toBeNull();
  });

  it("refuses a path that would climb out of the replica's base path", () => {
    expect(dispatchUrl("https://gpu.example.com/engine", "/../admin", "")).toBeNull();
  });
});

/**
 * The property the review asked for: for any path a client can send, built from
 * encoded dots, slashes, '@', ':', '?' and '#', what the proxy would fetch (the
 * normalised path, routed, prefix stripped, appended to the chosen replica) is on
 * the replica's origin, under its base path, and under what the deployment serves.
 */
describe("fuzz: the fetched URL never leaves the chosen replica or the deployment's prefix", () => {
  const pieces = ["/", ".", "..", "%2e", "%2E", "%2f", "%2F", "%5c", "@", ":", "?", "#", "a", "llm", "mux", "127.0.0.1", "18555", "%40", "%3a", "%3F", "%23", "%", "v1", "~", "%7e", "-"];
  const rawPath = fc.array(fc.constantFrom(...pieces), { minLength: 0, maxLength: 14 }).map((parts) => `/${parts.join("")}`);
  const deployments = [
    { prefix: "/llm", strip: true },
    { prefix: "/mux", strip: false },
    { prefix: "/a/v1", strip: true },
  ];
  const routes = new RouteTable(deployments.map((d) => ({ prefix: d.prefix, target: d })));
  const replicas = ["http://127.0.0.1:39881", "https://gpu-7.example.com", "https://gpu-7.example.com/engine"];

  it("holds for 20,000 generated paths", () => {
    fc.assert(
      fc.property(rawPath, fc.constantFrom(...replicas), (raw, replicaUrl) => {
        // What workerd hands the Worker: the target as received (`Request.url` keeps %2e; no fragment).
        const t = requestTarget(`http://edge.test${raw.split("#")[0]}`);
        if (!t.ok) return;
        const routed = routes.match(t.path);
        if (!routed) return;
        const path = routed.target.strip ? stripRoutePrefix(t.path, routed.prefix) : t.path;
        const fetched = dispatchUrl(replicaUrl, path, t.search);
        expect(fetched, `${raw} → ${path}`).not.toBeNull();
        const replica = new URL(replicaUrl);
        const base = replica.pathname.replace(/\/+$/, "");
        expect(fetched!.origin).toBe(replica.origin);
        expect(fetched!.username).toBe("");
        expect(fetched!.password).toBe("");
        expect(fetched!.pathname.startsWith(`${base}/`) || fetched!.pathname === base).toBe(true);
        const served = routed.target.strip ? base : `${base}${routed.prefix}`;
        expect(fetched!.pathname === served || fetched!.pathname.startsWith(`${served}/`), `${raw} → ${fetched!.pathname}`).toBe(true);
        // And no segment of what the replica sees can climb, however it decodes.
        const segments = decodeURIComponent(fetched!.pathname.replace(/%(?![0-9A-Fa-f]{2})/g, "%25")).split(/[\\/]/);
        expect(segments.includes("..")).toBe(false);
      }),
      { seed: 20261201, numRuns: 20_000 },
    );
  });
});

describe("unmountedPath (the edge app mounted in a user's app)", () => {
  it("drops the mount prefix, whole segments only", () => {
    expect(unmountedPath("/ml/hello/x", "/ml")).toBe("/hello/x");
    expect(unmountedPath("/ml", "/ml")).toBe("/");
    expect(unmountedPath("/ml/", "/ml/")).toBe("/");
    expect(unmountedPath("/mlx/hello", "/ml")).toBe("/mlx/hello");
    expect(unmountedPath("/hello", "/")).toBe("/hello");
    expect(unmountedPath("/hello", "")).toBe("/hello");
  });
});
