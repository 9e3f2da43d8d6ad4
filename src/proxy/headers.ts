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
  "expect",
];
/** Protocol headers a replica sends for the proxy that clients do not need to see. */
const REPLICA_ONLY = [Header.protocol, Header.load, Header.rejected];

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * Deletes the hop-by-hop headers and those the Connection header names. One delete
 * per name, present or not: in workerd walking `keys()` to delete only those present
 * cost more than the deletes (bench/README.md, "Where the proxy's CPU goes", and the
 * 2026-12-02 trial).
 */
function dropHopByHop(h: Headers): void {
  const named = h.get("connection");
  if (named) {
    for (const item of named.split(",")) {
      const n = item.trim();
      // Empty list items are ignored (RFC 9110 §5.6.1); invalid names cannot be present anyway.
      if (TOKEN.test(n)) h.delete(n);
    }
  }
  for (const n of HOP_BY_HOP_HEADERS) h.delete(n);
}

export function dispatchHeaders(incoming: Headers): Headers {
  const h = new Headers(incoming);
  dropHopByHop(h);
  h.delete("host");
  for (const n of DISPATCH_ONLY) h.delete(n);
  return h;
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
