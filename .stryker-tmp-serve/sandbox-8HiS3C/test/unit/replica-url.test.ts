/**
 * The replica URL policy (src/policy/replica-url.ts): what a replica may register,
 * in local and production mode, including the spellings WHATWG URL parsing folds
 * into the same address, and the deployment's replicaOrigins allow-list.
 */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { checkReplicaUrl, parseIPv6, type ReplicaUrlMode } from "../../src/policy/replica-url.ts";

type Row = [url: string, local: string, production: string];
// "ok", or the refusal reason.
const TABLE: Row[] = [
  // Cloud metadata, link-local: refused in both modes, however spelled.
  ["http://169.254.169.254/latest/meta-data/", "link_local", "link_local"],
  ["https://169.254.169.254/", "link_local", "link_local"],
  ["http://169.254.0.1:8000", "link_local", "link_local"],
  ["http://0xa9fea9fe/", "link_local", "link_local"],
  ["http://2852039166/", "link_local", "link_local"],
  ["http://0251.0376.0251.0376/", "link_local", "link_local"],
  ["http://169.254.169.254./", "link_local", "link_local"],
  ["http://[::ffff:169.254.169.254]/", "link_local", "link_local"],
  ["http://[::ffff:a9fe:a9fe]/", "link_local", "link_local"],
  ["http://[0:0:0:0:0:ffff:169.254.169.254]/", "link_local", "link_local"],
  ["http://[::169.254.169.254]/", "link_local", "link_local"],
  ["http://[::ffff:0:a9fe:a9fe]/", "link_local", "link_local"],
  ["http://[64:ff9b::169.254.169.254]/", "link_local", "link_local"],
  ["http://[2002:a9fe:a9fe::1]/", "link_local", "link_local"],
  ["http://[fe80::1]:8000", "link_local", "link_local"],
  ["http://[FEBF::1]/", "link_local", "link_local"],
  ["http://metadata.google.internal/computeMetadata/v1/", "metadata", "metadata"],
  ["https://metadata.google.internal./", "metadata", "metadata"],
  ["http://METADATA.GOOGLE.INTERNAL/", "metadata", "metadata"],
  ["http://%6detadata.goog/", "metadata", "metadata"],
  ["http://metadata/", "metadata", "metadata"],
  ["http://instance-data/latest/", "metadata", "metadata"],
  ["http://instance-data./latest/", "metadata", "metadata"],
  ["https://METADATA.GOOGLE.INTERNAL./", "metadata", "metadata"],
  ["http://[fd00:ec2::254]/", "metadata", "metadata"],
  ["http://100.100.100.200/", "metadata", "metadata"],
  ["http://168.63.129.16/", "metadata", "metadata"],
  // Unspecified, broadcast, multicast, reserved.
  ["http://0.0.0.0:8000", "unspecified", "unspecified"],
  ["http://0/", "unspecified", "unspecified"],
  ["http://0.1.2.3/", "unspecified", "unspecified"],
  ["http://[::]/", "unspecified", "unspecified"],
  ["http://[::ffff:0.0.0.0]/", "unspecified", "unspecified"],
  ["http://255.255.255.255/", "broadcast", "broadcast"],
  ["http://224.0.0.1/", "multicast", "multicast"],
  ["http://239.255.255.250:1900/", "multicast", "multicast"],
  ["http://[ff02::1]/", "multicast", "multicast"],
  ["http://240.0.0.1/", "reserved", "reserved"],
  // Loopback: local mode only. Odd IPv4 spellings are still loopback.
  ["http://127.0.0.1:8000", "ok", "not_https"],
  ["https://127.0.0.1", "ok", "loopback"],
  ["http://0x7f.1/", "ok", "not_https"],
  ["https://0x7f.1/", "ok", "loopback"],
  ["https://2130706433/", "ok", "loopback"],
  ["https://017700000001/", "ok", "loopback"],
  ["https://127.1/", "ok", "loopback"],
  ["https://[::1]/", "ok", "loopback"],
  ["https://[::ffff:127.0.0.1]/", "ok", "loopback"],
  ["http://localhost:8000", "ok", "not_https"],
  ["https://localhost/", "ok", "loopback"],
  ["https://LOCALHOST./", "ok", "loopback"],
  ["https://gpu.localhost/", "ok", "loopback"],
  // Private: local mode only (raw IPs are refused in production anyway).
  ["http://10.0.0.7:8000", "ok", "not_https"],
  ["https://10.0.0.7", "ok", "raw_ip"],
  ["https://172.16.0.1", "ok", "raw_ip"],
  ["https://172.31.255.255", "ok", "raw_ip"],
  ["https://192.168.1.20", "ok", "raw_ip"],
  ["https://100.64.0.1", "ok", "raw_ip"],
  ["https://[fd12:3456::1]", "ok", "raw_ip"],
  ["https://[fc00::1]", "ok", "raw_ip"],
  // Public raw IPs: allowed locally, never in production (Workers cannot fetch IPs).
  ["https://8.8.8.8", "ok", "raw_ip"],
  ["https://172.32.0.1", "ok", "raw_ip"],
  ["https://[2606:4700::1111]", "ok", "raw_ip"],
  // Hostnames: production needs https on 443 and a dotted public name.
  ["https://gpu-7.example.com", "ok", "ok"],
  ["https://gpu-7.example.com:443/v1", "ok", "ok"],
  ["https://gpu-7.example.com./", "ok", "ok"],
  ["http://gpu-7.example.com", "ok", "not_https"],
  ["https://gpu-7.example.com:8443", "ok", "port"],
  ["http://gpu-7.example.com:443", "ok", "not_https"],
  ["https://replica-1:8000", "ok", "port"],
  ["https://replica-1", "ok", "single_label"],
  // A public DNS name that resolves to the metadata address: a hostname, so the policy
  // cannot see it (no DNS here). Deployed Workers cannot connect to link-local addresses.
  ["https://169.254.169.254.nip.io", "ok", "ok"],
  ["http://169.254.169.254.nip.io", "ok", "not_https"],
  // Empty labels: new URL() keeps them as written, so without a check they would slip past the
  // metadata names and the IPv4 parser. One trailing dot is fine (see the rows above).
  ["https://metadata.google.internal../", "invalid_host", "invalid_host"],
  ["https://169.254.169.254../", "invalid_host", "invalid_host"],
  ["https://gpu..example.com/", "invalid_host", "invalid_host"],
  // Not http(s), credentials, unparseable.
  ["ftp://gpu-7.example.com", "scheme", "scheme"],
  ["file:///etc/passwd", "scheme", "scheme"],
  ["https://user:pw@gpu-7.example.com", "credentials", "credentials"],
  ["http://1.2.3.256/", "invalid_url", "invalid_url"],
  ["not a url", "invalid_url", "invalid_url"],
];

const verdict = (url: string, mode: ReplicaUrlMode, origins: readonly string[] = []) => {
  const r = checkReplicaUrl(url, origins, mode);
  return r.ok ? "ok" : r.reason;
};

describe("checkReplicaUrl without an allow-list", () => {
  for (const [url, local, production] of TABLE) {
    it(`${url}: local ${local}, production ${production}`, () => {
      expect(verdict(url, "local")).toBe(local);
      expect(verdict(url, "production")).toBe(production);
    });
  }

  it("explains a refusal", () => {
    const r = checkReplicaUrl("http://[::ffff:169.254.169.254]/", [], "local");
    expect(r).toMatchObject({ ok: false, reason: "link_local", message: expect.stringContaining("[::ffff:a9fe:a9fe]") });
  });
});

describe("checkReplicaUrl refuses hostnames with an empty label in both modes", () => {
  // [as written in the URL, the hostname new URL() keeps]: the empty label survives parsing, so
  // the refusal has to come from the policy.
  const hosts: [string, string][] = [
    ["metadata.google.internal..", "metadata.google.internal.."],
    ["metadata.google.internal...", "metadata.google.internal..."],
    ["METADATA.GOOGLE.INTERNAL..", "metadata.google.internal.."],
    ["metadata.google.internal%2e%2e", "metadata.google.internal.."],
    [".metadata.google.internal", ".metadata.google.internal"],
    [".metadata.google.internal.", ".metadata.google.internal."],
    ["metadata..google.internal", "metadata..google.internal"],
    ["metadata.goog..", "metadata.goog.."],
    ["metadata..", "metadata.."],
    ["instance-data..", "instance-data.."],
    ["instance-data.ec2.internal..", "instance-data.ec2.internal.."],
    ["169.254.169.254..", "169.254.169.254.."], // not an IPv4 address to new URL() any more
    ["127.0.0.1..", "127.0.0.1.."],
    ["localhost..", "localhost.."],
    [".localhost", ".localhost"],
    ["gpu..example.com", "gpu..example.com"],
    ["gpu.example.com..", "gpu.example.com.."],
    [".gpu.example.com", ".gpu.example.com"],
    ["gpu.%2e.example.com", "gpu...example.com"],
    ["gpu.\u3002example.com", "gpu..example.com"], // U+3002, the ideographic full stop, maps to "."
    ["..", ".."],
    ["...", "..."],
  ];
  for (const [written, parsed] of hosts) {
    for (const url of [`https://${written}/`, `http://${written}:8000/x`]) {
      it(url, () => {
        expect(new URL(url).hostname).toBe(parsed);
        expect(verdict(url, "local")).toBe("invalid_host");
        expect(verdict(url, "production")).toBe("invalid_host");
      });
    }
  }

  it("even when the replicaOrigins allow-list names the host", () => {
    const url = "https://gpu..example.com/";
    expect(verdict(url, "production", ["https://gpu..example.com"])).toBe("invalid_host");
    expect(verdict("https://a..gpu.example.com/", "production", ["https://*.gpu.example.com"])).toBe("invalid_host");
  });

  it("explains the refusal", () => {
    const r = checkReplicaUrl("https://metadata.google.internal../", [], "production");
    expect(r).toMatchObject({ ok: false, reason: "invalid_host", message: expect.stringContaining("metadata.google.internal..") });
  });
});

describe("checkReplicaUrl with replicaOrigins", () => {
  const origins = ["https://gpu-7.example.com", "https://*.gpu.example.com", "http://127.0.0.1:8000", "https://*.alt.example.com:8443", "not a url"];

  it("accepts exact origins, whatever the path, and normalised spellings", () => {
    expect(verdict("https://gpu-7.example.com/v1", "production", origins)).toBe("ok");
    expect(verdict("https://GPU-7.example.com:443", "production", origins)).toBe("ok");
    expect(verdict("http://127.0.0.1:8000/x", "local", origins)).toBe("ok");
    expect(verdict("http://0x7f.1:8000/", "local", origins)).toBe("ok");
  });

  it("wildcards match any subdomain with the same scheme and port, never the apex", () => {
    expect(verdict("https://a.gpu.example.com", "production", origins)).toBe("ok");
    expect(verdict("https://a.b.gpu.example.com", "production", origins)).toBe("ok");
    expect(verdict("https://gpu.example.com", "production", origins)).toBe("origin_not_allowed");
    expect(verdict("https://evilgpu.example.com", "production", origins)).toBe("origin_not_allowed");
    expect(verdict("https://a.gpu.example.com.evil.com", "production", origins)).toBe("origin_not_allowed");
    expect(verdict("http://a.gpu.example.com", "local", origins)).toBe("origin_not_allowed");
    expect(verdict("https://a.gpu.example.com:8443", "local", origins)).toBe("origin_not_allowed");
    expect(verdict("https://a.alt.example.com:8443", "local", origins)).toBe("ok");
    expect(verdict("https://a.alt.example.com", "local", origins)).toBe("origin_not_allowed");
  });

  it("refuses other origins, and never widens the global rules", () => {
    expect(verdict("https://gpu-8.example.com", "production", origins)).toBe("origin_not_allowed");
    expect(verdict("http://127.0.0.1:8001", "local", origins)).toBe("origin_not_allowed");
    // Listed, but the mode's rules still apply first.
    expect(verdict("http://127.0.0.1:8000", "production", origins)).toBe("not_https");
    expect(verdict("http://169.254.169.254", "local", ["http://169.254.169.254"])).toBe("link_local");
    expect(verdict("https://a.gpu.example.com:8443", "production", ["https://*.gpu.example.com:8443"])).toBe("port");
  });

  it("an empty list allows whatever the global rules allow", () => {
    expect(verdict("https://anything.example.org", "production", [])).toBe("ok");
  });
});

describe("parseIPv6", () => {
  it("expands compression and embedded dotted quads", () => {
    expect(parseIPv6("::1")).toEqual([0, 0, 0, 0, 0, 0, 0, 1]);
    expect(parseIPv6("fd00:ec2::254")).toEqual([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254]);
    expect(parseIPv6("::ffff:169.254.169.254")).toEqual([0, 0, 0, 0, 0, 0xffff, 0xa9fe, 0xa9fe]);
    expect(parseIPv6("1:2:3:4:5:6:7:8")).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    for (const bad of ["1::2::3", "1:2:3", "12345::", "::g", "1:2:3:4:5:6:7:8:9", "::1.2.3.256"]) expect(parseIPv6(bad), bad).toBeNull();
  });
});
