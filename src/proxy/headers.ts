/** Header hygiene for the proxy path. Pure. */
import { Header } from "../protocol/index.ts";
import { randomUuid } from "./random-uuid.ts";

export const HOP_BY_HOP_HEADERS: readonly string[] = [
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

/**
 * Headers only Switchyard may set on a dispatch; a client's copies are dropped.
 * `expect` too: the edge answers the client's 100-continue itself, and a replica's
 * interim 100 reaching the Worker made workerd throw (a 500) after the replica had
 * done the work.
 */
const DISPATCH_ONLY = [
  Header.protocol,
  Header.deadline,
  Header.attempt,
  Header.deployment,
  Header.session,
  Header.load,
  Header.rejected,
  Header.replica,
  Header.timestamp,
  Header.nonce,
  Header.signature,
  Header.bodySha256,
  "expect",
];
/** Protocol headers a replica sends for the proxy that clients do not need to see. */
const REPLICA_ONLY = [Header.protocol, Header.load, Header.rejected];
/**
 * Request headers a dispatch never passes on: hop-by-hop ones, host, the
 * protocol's own, and the session's binding token (the edge's business, not the
 * replica's).
 */
const NOT_PASSED: ReadonlySet<string> = new Set([...HOP_BY_HOP_HEADERS, "host", ...DISPATCH_ONLY, Header.sessionToken]);

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Deletes the headers a Connection header names (RFC 9110 §7.6.1). */
function dropConnectionNamed(h: Headers, named: string): void {
  for (const item of named.split(",")) {
    const n = item.trim();
    // Empty list items are ignored (RFC 9110 §5.6.1); invalid names cannot be present anyway.
    if (TOKEN.test(n)) h.delete(n);
  }
}

/**
 * Deletes the hop-by-hop headers and those the Connection header names. One delete
 * per name, present or not: in workerd walking `keys()` to delete only those present
 * cost more than the deletes (bench/README.md, "Where the proxy's CPU goes", and the
 * 2026-12-02 trial).
 */
function dropHopByHop(h: Headers): void {
  const named = h.get("connection");
  if (named) dropConnectionNamed(h, named);
  for (const n of HOP_BY_HOP_HEADERS) h.delete(n);
}

/** What one header counts against the header-size limit: its name, its value and 4 bytes of framing. */
function fieldBytes(name: string, value: string): number {
  return name.length + value.length + 4;
}

/** A request's headers read once at the boundary: their size, and what a dispatch passes on. */
export interface ReadRequestHeaders {
  /** Names, values and 4 bytes of framing per header: what the header-size limit counts. */
  bytes: number;
  /** The headers a dispatch sends on (a fresh object, the dispatch's to change). */
  passed: Headers;
}

/**
 * One walk of the request's headers, counting their size and noting which of the
 * names a dispatch must not pass on are present; then one copy, with only those
 * deleted. The walk is needed anyway for the size, so the ~22 deletes of names
 * that are almost never there are saved (bench/hot-path-steps.ts, "request
 * headers"). `dropAuthorization`: a private deployment's API key is the edge's
 * credential, not the replica's.
 */
export function readRequestHeaders(incoming: Headers, dropAuthorization: boolean): ReadRequestHeaders {
  let bytes = 0;
  let present: string[] | undefined;
  let connection: string | undefined;
  for (const [name, value] of incoming) {
    bytes += fieldBytes(name, value);
    if (NOT_PASSED.has(name) || (dropAuthorization && name === "authorization")) {
      (present ??= []).push(name);
      if (name === "connection") connection = value;
    }
  }
  const passed = new Headers(incoming);
  if (present) for (const name of present) passed.delete(name);
  if (connection) dropConnectionNamed(passed, connection);
  return { bytes, passed };
}

/** The header-size limit's count alone (a request served without dispatch). */
export function requestHeaderBytes(incoming: Headers): number {
  let bytes = 0;
  for (const [name, value] of incoming) bytes += fieldBytes(name, value);
  return bytes;
}

export function clientHeaders(upstream: Headers): Headers {
  const h = new Headers(upstream);
  scrubForClient(h);
  return h;
}

/**
 * clientHeaders in place: for the headers of a Response the edge has just built
 * from the replica's (the Response constructor copies them already, so a second
 * copy per request would be waste).
 */
export function scrubForClient(h: Headers): void {
  dropHopByHop(h);
  for (const n of REPLICA_ONLY) h.delete(n);
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Echoes a well-formed client request id, else makes one. */
export function requestIdFor(incoming: string | null): string {
  return incoming && REQUEST_ID.test(incoming) ? incoming : randomUuid();
}
