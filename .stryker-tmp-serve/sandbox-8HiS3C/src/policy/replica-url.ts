/**
 * Which URLs a replica may register (docs/protocol.md §1, "Replica URLs"). The
 * edge dispatches client requests to whatever URL a replica registered, so an
 * unchecked URL would make the proxy an open proxy into the edge's network
 * (SSRF): cloud metadata services, link-local and internal addresses.
 *
 * Pure: the URL is parsed with WHATWG `new URL()`, which already normalises
 * the odd IPv4 spellings (0x7f.1, 2130706433, 017700000001, trailing dot) to
 * dotted quads and IPv6 to its compressed lowercase form; the hostname is
 * classified after that. No DNS lookups: a hostname that resolves to a refused
 * address (e.g. 169.254.169.254.nip.io) is not caught here. Deployed Workers
 * cannot connect to such addresses anyway; locally, the workerd network
 * service decides.
 */
// @ts-nocheck


export type ReplicaUrlMode = "local" | "production";

export type ReplicaUrlCheck = { ok: true } | { ok: false; reason: string; message: string };

/** Hostnames of cloud metadata services (compared without a trailing dot). */
const METADATA_HOSTS = new Set([
  "metadata.google.internal", // GCP
  "metadata.goog", // GCP
  "metadata", // GCP short name, Kubernetes-style search domains
  "instance-data", // AWS
  "instance-data.ec2.internal", // AWS
  "metadata.tencentyun.com", // Tencent Cloud
  "metadata.azure.com", // Azure
]);

/** Metadata services on addresses outside the always-refused ranges. */
const METADATA_V4 = new Set([
  "100.100.100.200", // Alibaba Cloud
  "168.63.129.16", // Azure wire server
]);
/** AWS's IPv6 instance metadata endpoint, fd00:ec2::254. */
const METADATA_V6 = [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254];

// Private ranges (10/8, 172.16/12, fc00::/7, …) are not a class of their own: local mode allows
// them and production refuses every raw IP, so telling them from public addresses decided nothing.
type Class = "loopback" | "public" | { refused: string; message: string };

const refused = (reason: string, message: string): Class => ({ refused: reason, message });

function parseIPv4(host: string): number[] | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (!m) return null;
  const parts = m.slice(1).map(Number);
  return parts.every((p) => p <= 255) ? parts : null;
}

/** Eight 16-bit groups, or null. Accepts "::" compression and a trailing dotted quad. */
export function parseIPv6(text: string): number[] | null {
  let s = text;
  const lastColon = s.lastIndexOf(":");
  if (lastColon >= 0 && s.slice(lastColon + 1).includes(".")) {
    // A trailing dotted quad (::ffff:1.2.3.4) is two groups.
    const v4 = parseIPv4(s.slice(lastColon + 1));
    if (!v4) return null;
    s = `${s.slice(0, lastColon + 1)}${((v4[0]! << 8) | v4[1]!).toString(16)}:${((v4[2]! << 8) | v4[3]!).toString(16)}`;
  }
  const halves = s.split("::");
  if (halves.length > 2) return null;
  const groups = (h: string) => (h === "" ? [] : h.split(":"));
  const head = groups(halves[0]!);
  const rest = halves.length === 2 ? groups(halves[1]!) : [];
  const total = head.length + rest.length;
  if (halves.length === 1 ? total !== 8 : total > 7) return null;
  const out: number[] = [];
  for (const g of [...head, ...Array<string>(8 - total).fill("0"), ...rest]) {
    if (!/^[0-9a-f]{1,4}$/i.test(g)) return null;
    out.push(parseInt(g, 16));
  }
  return out;
}

function classifyV4(o: number[], shown: string): Class {
  const [a, b, c, d] = o as [number, number, number, number];
  const addr = `${a}.${b}.${c}.${d}`;
  if (a === 169 && b === 254) return refused("link_local", `link-local address ${shown} is never allowed (cloud metadata lives there)`);
  if (METADATA_V4.has(addr)) return refused("metadata", `${shown} is a cloud metadata address`);
  if (a === 0) return refused("unspecified", `${shown} is in 0.0.0.0/8 ("this network")`);
  if (a === 255 && b === 255 && c === 255 && d === 255) return refused("broadcast", `${shown} is the broadcast address`);
  if (a >= 224 && a <= 239) return refused("multicast", `${shown} is a multicast address`);
  if (a >= 240) return refused("reserved", `${shown} is in the reserved range 240.0.0.0/4`);
  if (a === 127) return "loopback";
  return "public";
}

function classifyV6(g: number[], shown: string): Class {
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  const embedded = (hi: number, lo: number) => [hi >> 8, hi & 0xff, lo >> 8, lo & 0xff];
  if (g.every((x, i) => x === METADATA_V6[i])) return refused("metadata", `${shown} is a cloud metadata address`);
  // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d: judged as the IPv4 address.
  if (zero(0, 5) && g[5] === 0xffff) return classifyV4(embedded(g[6]!, g[7]!), shown);
  // IPv4-translated ::ffff:0:a.b.c.d (SIIT).
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return classifyV4(embedded(g[6]!, g[7]!), shown);
  if (zero(0, 7) && g[7] === 1) return "loopback";
  if (zero(0, 8)) return refused("unspecified", `${shown} is the unspecified address`);
  if (zero(0, 6)) return classifyV4(embedded(g[6]!, g[7]!), shown);
  // NAT64 (64:ff9b::/96, 64:ff9b:1::/48) and 6to4 (2002::/16) reach the IPv4 address they embed.
  if (g[0] === 0x64 && g[1] === 0xff9b && zero(2, 6)) return classifyV4(embedded(g[6]!, g[7]!), shown);
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) return classifyV4(embedded(g[6]!, g[7]!), shown);
  if (g[0] === 0x2002) return classifyV4(embedded(g[1]!, g[2]!), shown);
  const first = g[0]!;
  if ((first & 0xffc0) === 0xfe80) return refused("link_local", `link-local address ${shown} is never allowed`);
  if ((first & 0xff00) === 0xff00) return refused("multicast", `${shown} is a multicast address`);
  return "public";
}

/** Origin allow-list entry matching: exact origin, or "scheme://*.suffix[:port]" for any subdomain (not the apex). */
function originAllowed(u: URL, allowed: readonly string[]): boolean {
  for (const entry of allowed) {
    let e: URL;
    try {
      e = new URL(entry);
    } catch {
      continue; // an invalid entry matches nothing
    }
    if (e.protocol !== u.protocol || e.port !== u.port) continue;
    if (e.hostname.startsWith("*.")) {
      const suffix = e.hostname.slice(1); // ".example.com"
      if (u.hostname.endsWith(suffix) && u.hostname.length > suffix.length && !u.hostname.startsWith(".")) return true;
    } else if (e.hostname === u.hostname) {
      return true;
    }
  }
  return false;
}

/**
 * Whether a replica may register `url`. Always refused: link-local (169.254/16,
 * fe80::/10), cloud metadata hosts and addresses, 0.0.0.0/8 and ::, multicast,
 * broadcast and 240/4, also when embedded in IPv6 (mapped, compatible, NAT64, 6to4),
 * and hostnames with an empty label (only one trailing dot is allowed).
 * Local mode: loopback and private addresses are allowed. Production mode: https
 * on port 443 to a DNS hostname with a dot; no raw IPs, no localhost.
 * `allowedOrigins`, when non-empty, narrows further (it never widens the rules above).
 */
export function checkReplicaUrl(url: string, allowedOrigins: readonly string[], mode: ReplicaUrlMode): ReplicaUrlCheck {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { ok: false, reason: "invalid_url", message: "not a valid URL" };
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") return { ok: false, reason: "scheme", message: "replica URLs are http or https" };
  if (u.username || u.password) return { ok: false, reason: "credentials", message: "replica URLs carry no credentials" };

  const host = u.hostname.toLowerCase();
  let cls: Class;
  let isIp = false;
  if (host.startsWith("[")) {
    isIp = true;
    const g = parseIPv6(host.slice(1, -1));
    cls = g ? classifyV6(g, host) : refused("invalid_url", `cannot parse the address ${host}`);
  } else if (parseIPv4(host)) {
    isIp = true;
    cls = classifyV4(parseIPv4(host)!, host);
  } else {
    // One trailing dot is the fully qualified spelling of the same name; anything else that leaves
    // an empty label ("a..b", ".a", "a..") is not a valid DNS name, yet new URL() keeps it as written
    // (and "169.254.169.254.." stays a "hostname"), so it would slip past every comparison below.
    const name = host.endsWith(".") ? host.slice(0, -1) : host;
    if (name.split(".").includes("")) cls = refused("invalid_host", `${host} has an empty label (a leading dot, ".." or more than one trailing dot)`);
    else if (METADATA_HOSTS.has(name)) cls = refused("metadata", `${host} is a cloud metadata host`);
    else if (name === "localhost" || name.endsWith(".localhost")) cls = "loopback";
    else cls = "public";
  }
  if (typeof cls === "object") return { ok: false, reason: cls.refused, message: cls.message };

  if (mode === "production") {
    if (u.protocol !== "https:") return { ok: false, reason: "not_https", message: "production replicas are https (requests and responses cross the internet)" };
    if (u.port !== "") return { ok: false, reason: "port", message: `production replicas listen on port 443 (deployed Workers cannot reach port ${u.port})` };
    if (cls === "loopback") return { ok: false, reason: "loopback", message: `${host} is loopback (local mode only)` };
    if (isIp) return { ok: false, reason: "raw_ip", message: `raw IP address ${host}: production replicas need a DNS hostname (deployed Workers cannot fetch IPs)` };
    if (!host.replace(/\.$/, "").includes(".")) return { ok: false, reason: "single_label", message: `${host} is not a public DNS name` };
  }
  if (allowedOrigins.length > 0 && !originAllowed(u, allowedOrigins)) {
    return { ok: false, reason: "origin_not_allowed", message: `${u.origin} is not among the deployment's replicaOrigins` };
  }
  return { ok: true };
}
