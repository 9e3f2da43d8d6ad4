/** Header hygiene on the proxy path, both directions, and request ids. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { CLIENT_HEADERS, EDGE_ONLY_HEADERS, Header } from "../../src/protocol/index.ts";
import { clientHeaders, readRequestHeaders, requestHeaderBytes, requestIdFor } from "../../src/proxy/serve/request.ts";

/** The headers a dispatch to a public deployment passes on. */
const dispatchHeaders = (incoming: Headers) => readRequestHeaders(incoming, false).passed;

const HOP_BY_HOP = ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"];

function withHopByHop(extra: Record<string, string> = {}): Headers {
  const h = new Headers(extra);
  for (const n of HOP_BY_HOP) if (n !== "connection") h.set(n, "x");
  h.set("connection", "keep-alive");
  return h;
}

describe("dispatch headers (client → replica)", () => {
  it("removes hop-by-hop headers and host, keeps end-to-end ones", () => {
    const h = dispatchHeaders(withHopByHop({ host: "edge.example.com", "content-type": "application/json", authorization: "Bearer t", accept: "*/*", "x-custom": "1" }));
    for (const n of [...HOP_BY_HOP, "host"]) expect(h.has(n), n).toBe(false);
    expect(h.get("content-type")).toBe("application/json");
    expect(h.get("authorization")).toBe("Bearer t");
    expect(h.get("accept")).toBe("*/*");
    expect(h.get("x-custom")).toBe("1");
  });

  it("removes headers named in Connection (any case, with whitespace)", () => {
    const h = dispatchHeaders(new Headers({ connection: "X-Foo ,  x-bar,close", "x-foo": "1", "x-bar": "2", "x-baz": "3" }));
    expect(h.has("x-foo")).toBe(false);
    expect(h.has("x-bar")).toBe(false);
    expect(h.get("x-baz")).toBe("3");
  });

  it("drops every client-supplied protocol header", () => {
    const incoming = new Headers({
      [Header.deadline]: "1",
      [Header.attempt]: "9",
      [Header.protocol]: "99",
      [Header.deployment]: "other",
      [Header.load]: "seq=1;ongoing=0;queued=0;max=1;state=ready",
      [Header.rejected]: "capacity",
      [Header.replica]: "r-evil",
      "X-Switchyard-Deadline": "2",
    });
    const h = dispatchHeaders(incoming);
    for (const n of [Header.deadline, Header.attempt, Header.protocol, Header.deployment, Header.load, Header.rejected, Header.replica]) {
      expect(h.has(n), n).toBe(false);
    }
  });

  it("drops every protocol header only the edge may set, from the protocol's one list, and any x-switchyard- header a client makes up (issue 50)", () => {
    // x-switchyard-migratable reached the replica: a draining replica then ended the client's non-migrating stream with stream_handover.
    const incoming = new Headers(Object.fromEntries([...EDGE_ONLY_HEADERS.map((n) => [n, "1"]), ["x-switchyard-made-up", "1"], ["X-Switchyard-Migratable", "1"]]));
    const h = dispatchHeaders(incoming);
    for (const n of [...EDGE_ONLY_HEADERS, "x-switchyard-made-up"]) expect(h.has(n), n).toBe(false);
    expect(EDGE_ONLY_HEADERS).toContain(Header.migratable);
    // Every protocol header is either the client's to send or the edge's alone.
    for (const n of Object.values(Header)) expect(CLIENT_HEADERS.includes(n) !== EDGE_ONLY_HEADERS.includes(n), n).toBe(true);
  });

  it("keeps client headers the protocol lets clients set (request id, model, session)", () => {
    const h = dispatchHeaders(new Headers({ [Header.requestId]: "req-1", [Header.model]: "m1", [Header.rayModel]: "m2", [Header.clientSession]: "s1" }));
    expect(h.get(Header.requestId)).toBe("req-1");
    expect(h.get(Header.model)).toBe("m1");
    expect(h.get(Header.rayModel)).toBe("m2");
    expect(h.get(Header.clientSession)).toBe("s1");
  });

  it("drops a client's copy of the proxy → replica session header (only the proxy sets it)", () => {
    const h = dispatchHeaders(new Headers({ [Header.session]: "forged", [Header.clientSession]: "s1" }));
    expect(h.has(Header.session)).toBe(false);
    expect(h.get(Header.clientSession)).toBe("s1");
  });

  it("does not modify the incoming headers", () => {
    const incoming = withHopByHop({ host: "h", [Header.deadline]: "1" });
    const before = [...incoming.entries()];
    dispatchHeaders(incoming);
    expect([...incoming.entries()]).toEqual(before);
  });
});

describe("readRequestHeaders (the one walk at the boundary)", () => {
  const incoming = () =>
    new Headers({
      host: "edge.example.com",
      authorization: "Bearer sk-1",
      accept: "*/*",
      "a-named": "dropped: named by Connection, before it in the walk",
      connection: "a-named, z-named",
      "z-named": "dropped: after it",
      [Header.sessionToken]: "token",
      [Header.signature]: "forged",
      "x-keep": "1",
    });

  it("counts every header's name, value and 4 bytes, as the size limit does", () => {
    const h = incoming();
    let bytes = 0;
    for (const [name, value] of h) bytes += name.length + value.length + 4;
    expect(readRequestHeaders(h, false).bytes).toBe(bytes);
    expect(requestHeaderBytes(h)).toBe(bytes);
  });

  it("passes on only end-to-end headers: no host, hop-by-hop, Connection-named, protocol or session-token header", () => {
    const { passed } = readRequestHeaders(incoming(), false);
    expect([...passed.keys()].sort()).toEqual(["accept", "authorization", "x-keep"]);
    expect(passed.get("authorization")).toBe("Bearer sk-1");
  });

  it("drops the API key for a private deployment (it is the edge's credential)", () => {
    const { passed } = readRequestHeaders(incoming(), true);
    expect([...passed.keys()].sort()).toEqual(["accept", "x-keep"]);
  });

  it("gives a fresh object the dispatch may change, and leaves the request's alone", () => {
    const h = incoming();
    const before = [...h.entries()];
    const { passed } = readRequestHeaders(h, true);
    passed.set(Header.attempt, "1");
    expect([...h.entries()]).toEqual(before);
  });
});

describe("clientHeaders (replica → client)", () => {
  it("removes hop-by-hop and Connection-named headers", () => {
    const up = withHopByHop({ "content-type": "text/plain", "x-secret-hop": "1", "x-keep": "2" });
    up.set("connection", "x-secret-hop");
    const h = clientHeaders(up);
    for (const n of HOP_BY_HOP) expect(h.has(n), n).toBe(false);
    expect(h.has("x-secret-hop")).toBe(false);
    expect(h.get("x-keep")).toBe("2");
    expect(h.get("content-type")).toBe("text/plain");
  });

  it("removes replica-only protocol headers but keeps the rest", () => {
    const h = clientHeaders(
      new Headers({
        [Header.protocol]: "1",
        [Header.load]: "seq=1;ongoing=0;queued=0;max=1;state=ready",
        [Header.rejected]: "capacity",
        [Header.requestId]: "req-1",
        "content-length": "12",
        "set-cookie": "a=b",
      }),
    );
    expect(h.has(Header.protocol)).toBe(false);
    expect(h.has(Header.load)).toBe(false);
    expect(h.has(Header.rejected)).toBe(false);
    expect(h.get(Header.requestId)).toBe("req-1");
    expect(h.get("content-length")).toBe("12");
    expect(h.get("set-cookie")).toBe("a=b");
  });

  it("does not modify the upstream headers", () => {
    const up = new Headers({ [Header.load]: "x", connection: "close" });
    clientHeaders(up);
    expect(up.get(Header.load)).toBe("x");
    expect(up.get("connection")).toBe("close");
  });
});

// Regression (fixed): an empty list element in Connection (e.g. "close," or "a,,b", which
// RFC 9110 §5.6.1 tells recipients to ignore) makes dropHopByHop call h.delete(""),
// which throws TypeError; a client can thereby turn its request into a 500.
describe("Connection with empty list elements", () => {
  it("dispatchHeaders tolerates a trailing comma", () => {
    expect(() => dispatchHeaders(new Headers({ connection: "close," }))).not.toThrow();
  });
  it("clientHeaders tolerates an empty element", () => {
    expect(() => clientHeaders(new Headers({ connection: "a,,b" }))).not.toThrow();
  });
});

describe("requestIdFor", () => {
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

  it("echoes a well-formed client id", () => {
    for (const id of ["a", "req-123", "A.b_c:d-e", "x".repeat(128), "550e8400-e29b-41d4-a716-446655440000"]) {
      expect(requestIdFor(id)).toBe(id);
    }
  });

  it("replaces missing, invalid or overlong ids with a fresh UUID", () => {
    for (const id of [null, "", "x".repeat(129), "has space", "semi;colon", "new\nline", "uni\u00e9", "a/b", "<script>"]) {
      const out = requestIdFor(id);
      expect(out, String(id)).toMatch(UUID);
      expect(out).not.toBe(id);
    }
  });

  it("makes a different id each time", () => {
    const ids = new Set(Array.from({ length: 100 }, () => requestIdFor(null)));
    expect(ids.size).toBe(100);
  });
});
