/**
 * The one path a proxied request is routed by and forwarded with, and the
 * replica URL it is sent to. Pure.
 *
 * Why this exists: routing once matched the decoded, un-normalised path
 * (`/llm/%2e%2e/x` starts with `/llm`) while dispatch rebuilt the path with
 * `new URL()`, which resolves the dot segment, and the target was a string
 * concatenation. `/llm/%2e%2e/aaa@host:port/secret` then became
 * `http://<replica>@host:port/secret`: an open proxy. Here the path is
 * normalised once (RFC 3986 §6.2.2: percent-encoded unreserved characters
 * decoded), a path with a dot segment in any spelling is refused outright (no
 * client that follows RFC 3986 sends one: it removes them before sending), and
 * the dispatch URL is checked to keep the replica's origin and base path.
 */

/** What the edge app's first middleware (app.ts) leaves on the context for every route. */
export type PathVariables = { target: { path: string; search: string } };

export type RequestTarget = { ok: true; path: string; search: string } | { ok: false; message: string };

const HEX = /^[0-9A-Fa-f]{2}$/;
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * The normalised origin-form path and the raw query of a request URL (what
 * `Request.url` holds: absolute, `scheme://authority/path?query`). Refused:
 * a malformed percent escape, a backslash, and any dot segment (`.` or `..`)
 * however it is spelled (`%2e`, `.%2E`, `..;x`) and whatever separates it (`/`, or
 * an encoded `%2F` or `%5C` that a replica might decode into a separator).
 */
export function requestTarget(url: string): RequestTarget {
  const scheme = url.indexOf("://");
  const slash = scheme < 0 ? -1 : url.indexOf("/", scheme + 3);
  if (slash < 0) return { ok: true, path: "/", search: "" };
  let end = url.length;
  const hash = url.indexOf("#", slash);
  if (hash >= 0) end = hash;
  const q = url.indexOf("?", slash);
  const queryAt = q >= 0 && q < end ? q : end;
  const raw = url.slice(slash, queryAt);
  const search = url.slice(queryAt, end);
  const path = decodeUnreserved(raw);
  if (path === null) return { ok: false, message: "the request path has a malformed percent escape" };
  if (path.includes("\\")) return { ok: false, message: "the request path contains a backslash" };
  if (hasDotSegment(path)) return { ok: false, message: "the request path has a dot segment ('.' or '..'); send the path resolved" };
  return { ok: true, path, search: search === "?" ? "" : search };
}

/** Decodes %XX of unreserved characters (and only those); null on a malformed escape. */
function decodeUnreserved(raw: string): string | null {
  if (!raw.includes("%")) return raw;
  let out = "";
  let from = 0;
  for (let i = raw.indexOf("%"); i >= 0; i = raw.indexOf("%", i + 1)) {
    const hex = raw.slice(i + 1, i + 3);
    if (!HEX.test(hex)) return null;
    const ch = String.fromCharCode(parseInt(hex, 16));
    if (!UNRESERVED.test(ch)) continue;
    out += raw.slice(from, i) + ch;
    from = i + 3;
    i += 2;
  }
  return out + raw.slice(from);
}

/**
 * Whether any segment is "." or "..", splitting on "/" and on encoded slashes and
 * backslashes too, and ignoring a `;` path parameter (raw or encoded): servlet
 * containers read `/..;/x` as `/../x`.
 */
function hasDotSegment(path: string): boolean {
  if (!path.includes(".")) return false;
  for (const segment of path.split(/\/|%2[Ff]|%5[Cc]/)) {
    const bare = segment.split(/;|%3[Bb]/, 1)[0];
    if (bare === "." || bare === "..") return true;
  }
  return false;
}

/**
 * The path as the edge app sees it when a user's Hono app mounts it under
 * `mount` (`userApp.route("/ml", app)`): without that prefix, so route prefixes
 * and dispatch are the app's own. `mount` is "/" (or "") when not mounted.
 * Hono only runs the app's routes for paths under the mount, so a path
 * outside it is a bug and is returned as it is.
 */
export function unmountedPath(path: string, mount: string): string {
  const base = mount.replace(/\/+$/, "");
  if (base === "") return path;
  if (path === base) return "/";
  return path.startsWith(`${base}/`) ? path.slice(base.length) : path;
}

/** Parsed replica URLs (one per registered replica): origin and base path, so dispatch does not parse them per request. */
const replicaBases = new Map<string, { origin: string; base: string }>();
const REPLICA_BASES_MAX = 4096;

function replicaBase(replicaUrl: string): { origin: string; base: string } | null {
  let known = replicaBases.get(replicaUrl);
  if (known) return known;
  let u: URL;
  try {
    u = new URL(replicaUrl);
  } catch {
    return null;
  }
  known = { origin: u.origin, base: u.pathname.replace(/\/+$/, "") };
  if (replicaBases.size >= REPLICA_BASES_MAX) replicaBases.clear();
  replicaBases.set(replicaUrl, known);
  return known;
}

/**
 * The URL a dispatch goes to: the replica's URL with `path` (normalised, starting
 * with "/") and `search` appended. Null when the result would leave the replica's
 * origin or its base path; with a path from requestTarget that cannot happen, so
 * null means a bug, and the request is refused rather than sent anywhere else.
 */
export function dispatchUrl(replicaUrl: string, path: string, search: string): URL | null {
  const replica = replicaBase(replicaUrl);
  if (!replica || !path.startsWith("/")) return null;
  let u: URL;
  try {
    u = new URL(`${replica.origin}${replica.base}${path}${search}`);
  } catch {
    return null;
  }
  if (u.origin !== replica.origin) return null;
  if (replica.base !== "" && u.pathname !== replica.base && !u.pathname.startsWith(`${replica.base}/`)) return null;
  return u;
}

/** A checked dispatch URL as fetch() is given it, and the request target a dispatch signature covers (path and query as the replica receives them). */
export interface DispatchTarget {
  href: string;
  target: string;
}

/**
 * dispatchUrl's answers per replica URL, then per path and query: a path sent
 * again (the usual case) costs no URL parse and no getter calls. The key is the
 * path and query as one string, which is all the URL is built from. At most
 * DISPATCH_TARGETS_MAX answers in all (then forgotten at once, like replicaBases);
 * refusals are not kept (they are bugs, logged each time).
 */
const dispatchTargets = new Map<string, Map<string, DispatchTarget>>();
const DISPATCH_TARGETS_MAX = 4096;
let dispatchTargetCount = 0;

/** dispatchUrl's URL as a DispatchTarget, from memory when the same replica URL, path and query were checked before. */
export function dispatchTarget(replicaUrl: string, path: string, search: string): DispatchTarget | null {
  const key = path + search;
  let known = dispatchTargets.get(replicaUrl);
  const hit = known?.get(key);
  if (hit) return hit;
  const u = dispatchUrl(replicaUrl, path, search);
  if (!u) return null;
  const entry = { href: u.href, target: u.pathname + u.search };
  if (dispatchTargetCount >= DISPATCH_TARGETS_MAX) {
    dispatchTargets.clear();
    dispatchTargetCount = 0;
    known = undefined;
  }
  if (!known) dispatchTargets.set(replicaUrl, (known = new Map()));
  known.set(key, entry);
  dispatchTargetCount++;
  return entry;
}
