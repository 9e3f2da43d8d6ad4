/**
 * The replica's multiplexing model handler over real HTTP (ReplicaServer on a loopback
 * port): which model a request names, hit/miss and model headers, the load header's
 * models/loading at send time, errors, and no leaked model references.
 */
import { request } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { parseLoadHeader } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { modelHandler, type ModelHandlerOptions } from "../../src/replica/handlers.ts";
import { createModelById, ModelInputError, type InferenceModel } from "../../src/models/index.ts";
import { ModelCache, type ModelCacheOptions } from "../../src/models/model-cache.ts";
import { synthesizeVowel, type SileroVadOutput } from "../../src/models/silero-vad.ts";
import { ReplicaServer } from "../../src/replica/server.ts";
import { oversizedUpload } from "../fixtures/oversized-upload.ts";
import { waitFor } from "../fixtures/wait.ts";

interface Fake extends InferenceModel {
  released: number;
}

const servers: ReplicaServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

/** A fake model: echoes `{ model, input }`; input {"bad":true} is a ModelInputError, {"crash":true} a bug; {"wait":ms} sleeps. */
function fakeModel(id: string): Fake {
  const m: Fake = {
    id,
    description: `fake ${id}`,
    inputExample: { example: id },
    released: 0,
    infer: async (input) => {
      const x = input as { bad?: boolean; crash?: boolean; wait?: number };
      if (x?.wait) await new Promise((r) => setTimeout(r, x.wait));
      if (x?.bad) throw new ModelInputError(`invalid input for ${id}`, [{ path: ["bad"] }]);
      if (x?.crash) throw new Error("model bug");
      return { model: id, input };
    },
    release: async () => {
      m.released++;
    },
  };
  return m;
}

async function start(cacheOptions: Partial<ModelCacheOptions> = {}, handlerOptions: ModelHandlerOptions = {}) {
  const created: Fake[] = [];
  const admission = new AdmissionControl(8);
  const cache: ModelCache = new ModelCache({
    maxModels: 2,
    allowed: ["m1", "m2", "m3"],
    create: async (id) => {
      await new Promise((r) => setTimeout(r, 20));
      const m = fakeModel(id);
      created.push(m);
      return m;
    },
    onChange: () => admission.setModels(cache.loaded(), cache.loading()),
    ...cacheOptions,
  });
  admission.setModels([], []);
  const server = new ReplicaServer({
    replicaId: "r1",
    admission,
    handler: modelHandler(cache, handlerOptions),
    describe: () => ({ models: cache.loaded(), loading: cache.loading(), cache: cache.stats() }),
  });
  servers.push(server);
  const { port } = (await server.listen(0, "127.0.0.1")) as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  const call = async (headers: Record<string, string>, body?: unknown, path = "/mux") => {
    const res = await fetch(`${url}${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { "content-type": "application/json", ...headers },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
    const json = (await res.json()) as Record<string, unknown> & { error?: { code: string; message: string } };
    return {
      status: res.status,
      json,
      model: res.headers.get("x-switchyard-model"),
      cache: res.headers.get("x-switchyard-model-cache"),
      load: parseLoadHeader(res.headers.get("x-switchyard-load")),
      contentType: res.headers.get("content-type"),
    };
  };
  return { url, cache, admission, created, call };
}

describe("modelHandler: which model", () => {
  it("takes x-switchyard-model first, then serve_multiplexed_model_id, then the default", async () => {
    const { call } = await start({}, { defaultModel: "m3" });
    expect((await call({ "x-switchyard-model": "m1", serve_multiplexed_model_id: "m2" }, {})).model).toBe("m1");
    expect((await call({ serve_multiplexed_model_id: "m2" }, {})).model).toBe("m2");
    expect((await call({}, { a: 1 })).json).toEqual({ model: "m3", input: { a: 1 } });
    expect((await call({ "x-switchyard-model": "  " }, {})).model).toBe("m3");
  });

  it("without a default, a request that names no model is a 400", async () => {
    const { call, created } = await start();
    const r = await call({}, {});
    expect(r.status).toBe(400);
    expect(r.json.error?.code).toBe("bad_request");
    expect(r.json.error?.message).toMatch(/name one with the x-switchyard-model header/);
    expect(r.model).toBeNull();
    expect(created).toEqual([]);
  });

  it("answers 404 model_not_found for a model it does not serve, 400 for a malformed id, loading nothing", async () => {
    const { call, created, cache } = await start();
    const r = await call({ "x-switchyard-model": "m9" }, {});
    expect(r.status).toBe(404);
    expect(r.json.error?.code).toBe("model_not_found");
    expect(r.json.error?.message).toContain("m9");
    expect(r.contentType).toMatch(/application\/json/);
    const bad = await call({ serve_multiplexed_model_id: "bad model,id" }, {});
    expect(bad.status).toBe(400);
    expect(created).toEqual([]);
    expect(cache.stats()).toMatchObject({ hits: 0, misses: 0 });
  });

  it("answers 404 when create does not know the id (no allowed list)", async () => {
    const { call } = await start({ allowed: undefined, create: createModelById });
    const r = await call({ "x-switchyard-model": "no-such-model" }, {});
    expect(r.status).toBe(404);
    expect(r.json.error?.code).toBe("model_not_found");
  });
});

describe("modelHandler: cache headers and load header", () => {
  it("marks the first request a miss and the next a hit, and reports the model in the load header at send time", async () => {
    const { call } = await start();
    const first = await call({ "x-switchyard-model": "m1" }, { x: 1 });
    expect(first).toMatchObject({ status: 200, model: "m1", cache: "miss" });
    expect(first.json).toEqual({ model: "m1", input: { x: 1 } });
    // The load header was computed after the load: it already lists m1.
    expect(first.load).toMatchObject({ models: ["m1"], loading: [], ongoing: 0 });
    const second = await call({ "x-switchyard-model": "m1" }, { x: 2 });
    expect(second).toMatchObject({ status: 200, model: "m1", cache: "hit" });
    expect(second.load!.seq).toBeGreaterThan(first.load!.seq);
  });

  it("concurrent first requests share one load and all report miss", async () => {
    // The load is held until all three requests are in (the replica counts them ongoing), so each
    // one meets the model loading, however late a busy machine delivers it.
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const created: string[] = [];
    const { call, admission } = await start({
      create: async (id) => {
        created.push(id);
        await gate;
        return fakeModel(id);
      },
    });
    const pending = Promise.all([1, 2, 3].map((i) => call({ "x-switchyard-model": "m2" }, { i })));
    await waitFor("three requests ongoing at the replica", () => admission.load().ongoing === 3);
    release();
    const rs = await pending;
    expect(rs.map((r) => r.cache)).toEqual(["miss", "miss", "miss"]);
    expect(created).toEqual(["m2"]);
  });

  it("shows a load in progress in other responses' load header and in healthz", async () => {
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const { call, url } = await start({
      create: async (id) => {
        if (id === "m2") await gate;
        return fakeModel(id);
      },
    });
    await call({ "x-switchyard-model": "m1" }, {});
    const pending = call({ "x-switchyard-model": "m2" }, {});
    await new Promise((r) => setTimeout(r, 20));
    const during = await call({ "x-switchyard-model": "m1" }, {});
    expect(during.load).toMatchObject({ models: ["m1"], loading: ["m2"] });
    const health = (await (await fetch(`${url}/-/healthz`)).json()) as Record<string, unknown>;
    expect(health).toMatchObject({ status: "ready", models: ["m1"], loading: ["m2"], cache: { loads: 1, misses: 1, hits: 1 } });
    finish();
    const after = await pending;
    expect(after).toMatchObject({ status: 200, cache: "miss" });
    expect(after.load).toMatchObject({ models: ["m2", "m1"], loading: [] });
  });

  it("evicts the least recently used model at the limit (the load header follows)", async () => {
    const { call, created } = await start();
    await call({ "x-switchyard-model": "m1" }, {});
    await call({ "x-switchyard-model": "m2" }, {});
    await call({ "x-switchyard-model": "m1" }, {});
    const r = await call({ "x-switchyard-model": "m3" }, {});
    expect(r.load).toMatchObject({ models: ["m3", "m1"], loading: [] });
    await new Promise((res) => setTimeout(res, 10));
    expect(created.find((m) => m.id === "m2")!.released).toBe(1);
    expect(created.find((m) => m.id === "m1")!.released).toBe(0);
  });
});

describe("modelHandler: GET, errors and references", () => {
  it("GET …/example returns the model's example; other GETs describe it; both carry the model headers", async () => {
    const { call } = await start({}, { defaultModel: "m1" });
    const ex = await call({ "x-switchyard-model": "m2" }, undefined, "/mux/example");
    expect(ex).toMatchObject({ status: 200, model: "m2", cache: "miss", json: { example: "m2" } });
    const desc = await call({}, undefined, "/mux");
    expect(desc).toMatchObject({ status: 200, model: "m1", json: { model: "m1", description: "fake m1", input_example: { example: "m1" } } });
  });

  it("keeps the JSON error shape: bad JSON, invalid input (with model headers), wrong method, too large", async () => {
    const { call, url } = await start();
    const notJson = await call({ "x-switchyard-model": "m1" }, "{nope");
    expect(notJson.status).toBe(400);
    expect(notJson.json.error?.code).toBe("bad_request");
    const invalid = await call({ "x-switchyard-model": "m1" }, { bad: true });
    expect(invalid).toMatchObject({ status: 400, model: "m1", cache: "miss" });
    expect(invalid.json.error).toMatchObject({ code: "bad_request", details: [{ path: ["bad"] }] });
    const put = await fetch(`${url}/mux`, { method: "PUT", headers: { "x-switchyard-model": "m1" }, body: "{}" });
    expect(put.status).toBe(405);
    expect(put.headers.get("allow")).toBe("GET, POST");
    const big = await fetch(`${url}/mux`, { method: "POST", headers: { "x-switchyard-model": "m1" }, body: "x".repeat(4 * 1024 * 1024 + 1) }).catch(() => null);
    if (big) expect(big.status).toBe(413);
  });

  it("each refusal's error, word for word, with the load header on every one", async () => {
    const { call, url } = await start();
    const put = await fetch(`${url}/mux`, { method: "PUT", headers: { "x-switchyard-model": "m1" }, body: "{}" });
    expect(await put.json()).toEqual({ error: { code: "method_not_allowed", type: "invalid_request_error", message: "use POST with a JSON body (GET describes the model)" } });
    expect(put.headers.get("x-switchyard-load")).not.toBeNull();
    const malformed = await call({ "x-switchyard-model": "-bad" }, {});
    expect(malformed.json.error).toMatchObject({ code: "bad_request", message: "malformed model id (1-128 of [A-Za-z0-9._:@/+-], starting with a letter or digit)" });
    expect(malformed.load).not.toBeUndefined();
    const unknown = await call({ "x-switchyard-model": "m9" }, {});
    expect(unknown.json.error).toMatchObject({ code: "model_not_found", details: { model: "m9", known: ["m1", "m2", "m3"] } });
    expect(unknown.load).not.toBeUndefined();
    const notJson = await call({ "x-switchyard-model": "m1" }, "{nope");
    expect(notJson.json.error).toMatchObject({ code: "bad_request", message: "body is not valid JSON" });
    expect(notJson.load).not.toBeUndefined();
    // Too large: the answer says the bound (a client still sending may see the connection close first, as the other test allows).
    const big = await fetch(`${url}/mux`, { method: "POST", headers: { "x-switchyard-model": "m1" }, body: "x".repeat(4 * 1024 * 1024 + 1) }).catch(() => null);
    if (big) expect(((await big.json()) as { error: unknown }).error).toMatchObject({ code: "payload_too_large", message: "model input over 4194304 bytes" });
  });

  it("an upload far past the bound: 413, and the connection closes (kept alive, it would hold the unread upload forever)", async () => {
    const { url } = await start();
    // Resolved: the connection closed. The answer, unless the close's reset discarded it (oversized-upload.ts).
    const big = await oversizedUpload(`${url}/mux`, { "x-switchyard-model": "m1" });
    if (big) {
      expect(big.status).toBe(413);
      expect(JSON.parse(big.text).error).toMatchObject({ code: "payload_too_large" });
    }
  });

  it("releases its reference on every path, so eviction can free the model", async () => {
    const { call, created, admission } = await start({ maxModels: 1 });
    // Success, invalid input, a crashing model (500), a GET.
    await call({ "x-switchyard-model": "m1" }, {});
    await call({ "x-switchyard-model": "m1" }, { bad: true });
    const crash = await call({ "x-switchyard-model": "m1" }, { crash: true });
    expect(crash.status).toBe(500);
    expect(crash.json.error?.code).toBe("internal_error");
    await call({ "x-switchyard-model": "m1" }, undefined);
    // A client that gives up during inference (once the replica has admitted it), then the replica sees it go.
    await abortedRequest("m1", { wait: 50 }, () => admission.ongoing === 1);
    await waitFor("the replica to see the client go", () => admission.ongoing === 0);
    // Loading m2 evicts m1: released only if nothing holds it any more (a leaked reference never would be).
    await call({ "x-switchyard-model": "m2" }, {});
    await waitFor("m1 to be released", () => created.find((m) => m.id === "m1")!.released === 1);
  });

  it("releases the reference when the client leaves while the model is loading", async () => {
    let finish!: () => void;
    const gate = new Promise<void>((r) => (finish = r));
    const created: Fake[] = [];
    const { cache, call, admission } = await start({
      maxModels: 1,
      create: async (id) => {
        if (id === "m1") await gate;
        const m = fakeModel(id);
        created.push(m);
        return m;
      },
    });
    // The client leaves while m1 loads, and the replica sees it go before the load ends.
    await abortedRequest("m1", {}, () => cache.loading().includes("m1"));
    await waitFor("the replica to see the client go", () => admission.ongoing === 0);
    finish();
    await waitFor("m1 to be loaded", () => cache.loaded().includes("m1"));
    expect(cache.loaded()).toEqual(["m1"]);
    await call({ "x-switchyard-model": "m2" }, {});
    await waitFor("m1 to be released", () => created.find((m) => m.id === "m1")!.released === 1);
  });
});

/** Sends a POST for `model` and destroys the connection once `when` holds (the replica got as far as the test needs). */
function abortedRequest(model: string, body: unknown, when: () => boolean): Promise<void> {
  const server = servers.at(-1)!;
  const { port } = server.server.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path: "/mux", method: "POST", headers: { "x-switchyard-model": model, "content-type": "application/json" } });
    req.on("error", () => undefined);
    req.end(JSON.stringify(body));
    waitFor("the request to get that far", when).then(
      () => {
        req.destroy();
        resolve();
      },
      (err: unknown) => {
        req.destroy();
        reject(err);
      },
    );
  });
}

describe("modelHandler with the real Silero VAD models", () => {
  it("serves the three versions from one replica, two loaded at a time", async () => {
    const { call, cache } = await start({ maxModels: 2, allowed: ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"], create: createModelById });
    const input = { samples: synthesizeVowel(16000) };
    for (const id of ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6", "silero-vad-v6"]) {
      const r = await call({ serve_multiplexed_model_id: id }, input);
      expect(r.status).toBe(200);
      expect(r.model).toBe(id);
      expect((r.json as unknown as SileroVadOutput).model).toBe(id);
      expect((r.json as unknown as SileroVadOutput).speech).toBe(true);
    }
    expect(cache.loaded()).toEqual(["silero-vad-v6", "silero-vad-v5"]);
    expect(cache.stats()).toMatchObject({ hits: 1, misses: 3, evictions: 1 });
    const invalid = await call({ "x-switchyard-model": "silero-vad-v5" }, { samples: [] });
    expect(invalid.status).toBe(400);
    expect(invalid.cache).toBe("hit");
    const silence = await call({ "x-switchyard-model": "silero-vad-v4" }, { samples: new Array(16000).fill(0) });
    expect(silence.cache).toBe("miss");
    expect((silence.json as unknown as SileroVadOutput).speech).toBe(false);
  });
});
