/** What the proxy reads from a request beyond its path: the multiplexed model and the session. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { defineDeployment, type Deployment, type DeploymentInput } from "../../src/config/deployment.ts";
import { Header } from "../../src/protocol/index.ts";
import { SESSION_ID, requestKeys } from "../../src/proxy/serve/request.ts";

const base: DeploymentInput = { name: "mux", routePrefix: "/mux", backend: { kind: "echo" } };
const dep = (over: Partial<DeploymentInput> = {}): Deployment => defineDeployment({ ...base, ...over });

const plain = dep();
const anyModel = dep({ multiplexing: {} });
const listed = dep({ multiplexing: { models: ["m1", "org/m2", "lora:x@v1"] } });
const withDefault = dep({ multiplexing: { models: ["m1", "m2"], defaultModel: "m2" } });
const defaultOnly = dep({ multiplexing: { defaultModel: "fallback" } });
const noAffinity = dep({ multiplexing: {}, sessionAffinity: { enabled: false } });

const h = (init: Record<string, string> = {}) => new Headers(init);

describe("requestKeys: model", () => {
  it("the header names are the protocol's", () => {
    expect(Header.model).toBe("x-switchyard-model");
    expect(Header.rayModel).toBe("serve_multiplexed_model_id");
    expect(Header.clientSession).toBe("x-session-id");
  });

  it("reads x-switchyard-model", () => {
    expect(requestKeys(h({ "x-switchyard-model": "m1" }), listed)).toEqual({ ok: true, keys: { model: "m1" } });
  });

  it("reads Ray Serve's serve_multiplexed_model_id", () => {
    expect(requestKeys(h({ serve_multiplexed_model_id: "org/m2" }), listed)).toEqual({ ok: true, keys: { model: "org/m2" } });
  });

  it("x-switchyard-model wins when both are present", () => {
    expect(requestKeys(h({ serve_multiplexed_model_id: "org/m2", "x-switchyard-model": "m1" }), listed)).toEqual({ ok: true, keys: { model: "m1" } });
  });

  it("x-switchyard-model wins even when it is invalid (it is not skipped for the other)", () => {
    const r = requestKeys(h({ "x-switchyard-model": "bad id", serve_multiplexed_model_id: "m1" }), listed);
    expect(r).toMatchObject({ ok: false, code: "bad_request" });
  });

  it("header names are case-insensitive", () => {
    expect(requestKeys(h({ "X-Switchyard-Model": "m1" }), listed)).toEqual({ ok: true, keys: { model: "m1" } });
    expect(requestKeys(h({ SERVE_MULTIPLEXED_MODEL_ID: "m1" }), listed)).toEqual({ ok: true, keys: { model: "m1" } });
  });

  it("model ids are case-sensitive against the list", () => {
    expect(requestKeys(h({ "x-switchyard-model": "M1" }), listed)).toMatchObject({ ok: false, code: "model_not_found" });
  });

  it("uses defaultModel when the request names none", () => {
    expect(requestKeys(h(), withDefault)).toEqual({ ok: true, keys: { model: "m2" } });
    expect(requestKeys(h(), defaultOnly)).toEqual({ ok: true, keys: { model: "fallback" } });
  });

  it("a named model overrides defaultModel", () => {
    expect(requestKeys(h({ "x-switchyard-model": "m1" }), withDefault)).toEqual({ ok: true, keys: { model: "m1" } });
  });

  it("no model and no defaultModel: routed without a model", () => {
    const r = requestKeys(h(), listed);
    expect(r).toEqual({ ok: true, keys: {} });
    expect(r.ok && "model" in r.keys).toBe(false);
  });

  it("model_not_found for a valid id outside multiplexing.models, listing what is served", () => {
    const r = requestKeys(h({ "x-switchyard-model": "m9" }), listed);
    expect(r).toMatchObject({ ok: false, code: "model_not_found" });
    if (!r.ok) {
      expect(r.message).toContain('"m9"');
      expect(r.message).toContain('"mux"');
      expect(r.message).toContain("m1, org/m2, lora:x@v1");
    }
  });

  it("any valid id passes when multiplexing.models is empty", () => {
    for (const id of ["m1", "whatever", "org/name", "a".repeat(128)]) {
      expect(requestKeys(h({ "x-switchyard-model": id }), anyModel), id).toEqual({ ok: true, keys: { model: id } });
    }
  });

  it("bad_request for ids that do not match MODEL_ID (checked before the list)", () => {
    for (const id of ["", "bad id", "-lead", "/lead", "a,b", "a;b", "a=b", "a".repeat(129), "caf\u00e9", "a\u00a0b"]) {
      const headers = h({ "x-switchyard-model": id });
      for (const d of [listed, anyModel]) {
        const r = requestKeys(headers, d);
        expect(r, JSON.stringify(id)).toMatchObject({ ok: false, code: "bad_request" });
        if (!r.ok) expect(r.message).toContain("x-switchyard-model");
      }
    }
  });

  it("two values of the model header (joined with ', ') are a bad request", () => {
    const headers = new Headers();
    headers.append("x-switchyard-model", "m1");
    headers.append("x-switchyard-model", "org/m2");
    expect(requestKeys(headers, listed)).toMatchObject({ ok: false, code: "bad_request" });
  });

  it("surrounding whitespace is trimmed by Headers, so ' m1 ' is m1", () => {
    expect(requestKeys(h({ "x-switchyard-model": "  m1 " }), listed)).toEqual({ ok: true, keys: { model: "m1" } });
  });

  it("ignores model headers entirely when the deployment does not multiplex", () => {
    expect(requestKeys(h({ "x-switchyard-model": "m1" }), plain)).toEqual({ ok: true, keys: {} });
    // Even an invalid one: the deployment does not route by model.
    expect(requestKeys(h({ "x-switchyard-model": "bad id", serve_multiplexed_model_id: "-x" }), plain)).toEqual({ ok: true, keys: {} });
  });
});

describe("requestKeys: session", () => {
  it("reads x-session-id when affinity is on (the default)", () => {
    expect(plain.sessionAffinity.enabled).toBe(true);
    expect(requestKeys(h({ "x-session-id": "user-42" }), plain)).toEqual({ ok: true, keys: { session: "user-42" } });
  });

  it("reads both keys together", () => {
    expect(requestKeys(h({ "x-session-id": "s1", serve_multiplexed_model_id: "m1" }), listed)).toEqual({ ok: true, keys: { model: "m1", session: "s1" } });
  });

  it("ignores the session when affinity is off, even an invalid one", () => {
    expect(requestKeys(h({ "x-session-id": "s1", "x-switchyard-model": "m" }), noAffinity)).toEqual({ ok: true, keys: { model: "m" } });
    expect(requestKeys(h({ "x-session-id": "has space" }), noAffinity)).toEqual({ ok: true, keys: {} });
  });

  it("accepts 1..256 visible ASCII characters", () => {
    const visible = Array.from({ length: 94 }, (_, i) => String.fromCharCode(0x21 + i)).join("");
    for (const id of ["a", "0", visible, "x".repeat(256), "{\"json\":1}", "a,b;c=d"]) {
      expect(SESSION_ID.test(id), id).toBe(true);
      expect(requestKeys(h({ "x-session-id": id }), plain), id).toEqual({ ok: true, keys: { session: id } });
    }
  });

  it("bad_request for empty, overlong, spaced or non-ASCII session ids", () => {
    for (const id of ["", "x".repeat(257), "has space", "tab\there", "caf\u00e9"]) {
      const headers = h({ "x-session-id": id });
      const r = requestKeys(headers, plain);
      expect(r, JSON.stringify(id)).toMatchObject({ ok: false, code: "bad_request" });
      if (!r.ok) expect(r.message).toContain("x-session-id");
    }
  });

  it("no session header: no session key", () => {
    const r = requestKeys(h({ "x-switchyard-session": "s1" }), plain);
    // Only the client header counts; the proxy → replica header is not read from clients.
    expect(r).toEqual({ ok: true, keys: {} });
  });

  it("a bad model is reported before the session is looked at", () => {
    expect(requestKeys(h({ "x-switchyard-model": "m9", "x-session-id": "" }), listed)).toMatchObject({ ok: false, code: "model_not_found" });
  });

  it("a bad session fails the request even with a good model", () => {
    expect(requestKeys(h({ "x-switchyard-model": "m1", "x-session-id": "a b" }), listed)).toMatchObject({ ok: false, code: "bad_request" });
  });
});
