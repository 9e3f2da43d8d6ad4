/** Longest-prefix routing on whole path segments, and prefix stripping. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { RouteTable, stripRoutePrefix } from "../../src/proxy/serve/request.ts";

const table = new RouteTable([
  { prefix: "/hello", target: "hello" },
  { prefix: "/hello/world", target: "hello-world" },
  { prefix: "/v1/chat", target: "chat" },
  { prefix: "/a.b~c_d-e", target: "odd" },
]);
const withRoot = new RouteTable([...table.list(), { prefix: "/", target: "root" }]);

describe("RouteTable.match", () => {
  it("matches an exact prefix", () => {
    expect(table.match("/hello")).toEqual({ prefix: "/hello", target: "hello" });
    expect(table.match("/v1/chat")?.target).toBe("chat");
    expect(table.match("/a.b~c_d-e")?.target).toBe("odd");
  });

  it("matches below a prefix on a segment boundary", () => {
    expect(table.match("/hello/x")?.target).toBe("hello");
    expect(table.match("/hello/")?.target).toBe("hello");
    expect(table.match("/hello/x/y/z")?.target).toBe("hello");
    expect(table.match("/v1/chat/completions")?.target).toBe("chat");
  });

  it("does not match inside a segment", () => {
    expect(table.match("/helloworld")).toBeUndefined();
    expect(table.match("/hello-world")).toBeUndefined();
    expect(table.match("/hell")).toBeUndefined();
    expect(table.match("/v1/chats")).toBeUndefined();
    expect(table.match("/v1")).toBeUndefined();
  });

  it("takes the longest matching prefix, whatever the input order", () => {
    expect(table.match("/hello/world")?.target).toBe("hello-world");
    expect(table.match("/hello/world/x")?.target).toBe("hello-world");
    expect(table.match("/hello/worlds")?.target).toBe("hello");
    const reversed = new RouteTable([...table.list()].reverse());
    expect(reversed.match("/hello/world/x")?.target).toBe("hello-world");
    expect(reversed.match("/hello/x")?.target).toBe("hello");
  });

  it("is case-sensitive", () => {
    expect(table.match("/Hello")).toBeUndefined();
  });

  it("returns undefined when nothing matches and there is no catch-all", () => {
    expect(table.match("/")).toBeUndefined();
    expect(table.match("/other")).toBeUndefined();
    expect(table.match("")).toBeUndefined();
  });

  it("'/' catches everything no longer prefix takes", () => {
    expect(withRoot.match("/")?.target).toBe("root");
    expect(withRoot.match("/other")?.target).toBe("root");
    expect(withRoot.match("/helloworld")?.target).toBe("root");
    expect(withRoot.match("/v1")?.target).toBe("root");
    expect(withRoot.match("/hello/x")?.target).toBe("hello");
    expect(withRoot.match("/hello/world/y")?.target).toBe("hello-world");
  });

  it("an empty table matches nothing", () => {
    const empty = new RouteTable<string>([]);
    expect(empty.match("/")).toBeUndefined();
    expect(empty.list()).toEqual([]);
  });

  it("returns the matched prefix so callers can strip it", () => {
    const m = withRoot.match("/hello/world/abc");
    expect(m?.prefix).toBe("/hello/world");
    expect(stripRoutePrefix("/hello/world/abc", m!.prefix)).toBe("/abc");
  });
});

describe("RouteTable.list", () => {
  it("lists entries longest prefix first", () => {
    const prefixes = withRoot.list().map((e) => e.prefix);
    expect(prefixes[prefixes.length - 1]).toBe("/");
    for (let i = 1; i < prefixes.length; i++) expect(prefixes[i - 1]!.length).toBeGreaterThanOrEqual(prefixes[i]!.length);
    expect(prefixes.sort()).toEqual(["/", "/a.b~c_d-e", "/hello", "/hello/world", "/v1/chat"]);
  });

  it("returns a copy that cannot change the table", () => {
    const l = table.list();
    l.length = 0;
    expect(table.list().length).toBe(4);
    expect(table.match("/hello")?.target).toBe("hello");
  });
});

describe("stripRoutePrefix", () => {
  it("removes the prefix and keeps the rest", () => {
    expect(stripRoutePrefix("/hello/x", "/hello")).toBe("/x");
    expect(stripRoutePrefix("/hello/x/y", "/hello")).toBe("/x/y");
    expect(stripRoutePrefix("/v1/chat/completions", "/v1/chat")).toBe("/completions");
  });

  it("gives '/' for the prefix itself", () => {
    expect(stripRoutePrefix("/hello", "/hello")).toBe("/");
  });

  it("keeps a trailing slash", () => {
    expect(stripRoutePrefix("/hello/", "/hello")).toBe("/");
    expect(stripRoutePrefix("/hello/x/", "/hello")).toBe("/x/");
  });

  it("leaves the path unchanged for the '/' prefix", () => {
    expect(stripRoutePrefix("/", "/")).toBe("/");
    expect(stripRoutePrefix("/anything/here", "/")).toBe("/anything/here");
  });
});
