// @ts-nocheck
// Model multiplexing end to end: three real models (Silero VAD v4, v5, v6) over
// three replicas that each keep at most two loaded.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { waitFor } from "../fixtures/wait.ts";
import { createModelById } from "../../src/models/index.ts";
import { synthesizeVowel } from "../../src/models/silero-vad.ts";
import { forEachRoutingDesign, signedFetch, sleep, type TestStack } from "./stack-fixture.ts";

const MODELS = ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"] as const;
let stack: TestStack;

forEachRoutingDesign(
  { functionsDir: join(import.meta.dirname, "fixtures/multiplexing") },
  (s) => (stack = s),
  multiplexingTests,
  async () => {
    // This process runs the models too (to compare outputs). Its first onnxruntime session
    // holds its event loop for seconds; that happens here, before any connection to the
    // stack exists, not while a kept-alive one sits idle and the server closes it
    // (which made the next request fail with ECONNRESET on a busy machine).
    await (await createModelById(MODELS[0])).release();
    home.clear();
  },
);

interface Answer {
  status: number;
  replica: string;
  cache: string | null;
  body: { model?: string; probabilities?: number[]; speech?: boolean; error?: { code: string } };
}

async function infer(model: string, input: unknown, header = "serve_multiplexed_model_id"): Promise<Answer> {
  const res = await fetch(`${stack.url}/mux`, { method: "POST", headers: { [header]: model, "content-type": "application/json" }, body: JSON.stringify(input) });
  return { status: res.status, replica: res.headers.get("x-switchyard-replica") ?? "?", cache: res.headers.get("x-switchyard-model-cache"), body: (await res.json()) as Answer["body"] };
}

async function replicaModels(id: string): Promise<{ models: string[]; loading: string[]; evictions?: number }> {
  const health = (await (await fetch(`${stack.replicas.get(id)!.url}/-/healthz`)).json()) as { models: string[]; loading: string[]; cache?: { evictions: number } };
  return { models: health.models, loading: health.loading, evictions: health.cache?.evictions };
}

const vowel = { samples: synthesizeVowel(16_000) };
const home = new Map<string, string>();


/** The tests, run once per routing design. */
function multiplexingTests(): void {
  describe("model multiplexing", () => {
    it("loads each new model on a replica that has none, then keeps routing it there", async () => {
      for (const [i, model] of MODELS.entries()) {
        // Alternate Ray's header and Switchyard's: both name the model.
        const first = await infer(model, vowel, i % 2 === 0 ? "serve_multiplexed_model_id" : "x-switchyard-model");
        expect(first.status).toBe(200);
        expect(first.cache).toBe("miss");
        expect(first.body.model).toBe(model);
        expect([...home.values()]).not.toContain(first.replica);
        home.set(model, first.replica);
      }
      // Three models, three replicas, one each: every later request is a cache hit on its home.
      for (let round = 0; round < 5; round++) {
        for (const model of MODELS) {
          const a = await infer(model, vowel);
          expect(a).toMatchObject({ status: 200, replica: home.get(model), cache: "hit" });
        }
      }
    });

    it("returns each model's own output, equal to running that model in-process", async () => {
      const outputs = new Map<string, number[]>();
      for (const model of MODELS) {
        const local = await createModelById(model);
        try {
          const expected = (await local.infer(vowel)) as Answer["body"];
          const got = await infer(model, vowel);
          expect(got.body).toEqual(expected);
          expect(got.body.speech).toBe(true);
          outputs.set(model, got.body.probabilities!);
        } finally {
          await local.release();
        }
      }
      // Three different networks: three different probability curves.
      expect(outputs.get("silero-vad-v4")).not.toEqual(outputs.get("silero-vad-v5"));
      expect(outputs.get("silero-vad-v5")).not.toEqual(outputs.get("silero-vad-v6"));
    });

    it("rejects models the deployment does not serve, and malformed ids, at the edge", async () => {
      const unknown = await infer("gpt-9", vowel);
      expect(unknown.status).toBe(404);
      expect(unknown.body.error?.code).toBe("model_not_found");
      const bad = await infer("bad model,id", vowel);
      expect(bad.status).toBe(400);
    });

    it("spreads a hot model to one more replica when its holder is full, onto the least-loaded replica", async () => {
      const hot = "silero-vad-v5";
      const holder = home.get(hot)!;
      // Keep the v4 replica busy too, so the spill has a clear least-loaded target: the v6 replica.
      const busy = home.get("silero-vad-v4")!;
      const target = home.get("silero-vad-v6")!;
      const long = { samples: synthesizeVowel(16_000 * 4) };
      const answers: { model: string; status: number; replica: string }[] = [];
      const until = Date.now() + 3_000;
      const loop = async (model: string) => {
        while (Date.now() < until) {
          const a = await infer(model, long);
          answers.push({ model, status: a.status, replica: a.replica });
        }
      };
      // 2 loops keep v4's replica at its capacity of 2; 3 loops of v5 need more than its holder's 2 slots.
      await Promise.all([loop("silero-vad-v4"), loop("silero-vad-v4"), ...Array.from({ length: 3 }, () => loop(hot))]);
      expect(answers.filter((a) => a.status !== 200)).toEqual([]);
      const hotServedBy = new Set(answers.filter((a) => a.model === hot).map((a) => a.replica));
      expect(hotServedBy.has(holder)).toBe(true);
      expect(hotServedBy.has(target)).toBe(true);
      const v5on = await replicaModels(target);
      const spilled = (id: string) => answers.filter((a) => a.model === hot && a.replica === id).length;
      console.log(`hot model: served by ${[...hotServedBy].join(", ")}; ${target} now holds ${v5on.models.join(", ")}; spilled to ${target} ${spilled(target)}, to ${busy} ${spilled(busy)}`);
      expect(v5on.models).toContain(hot);
      // The spill went to the least-loaded replica, not spread evenly: the v4 replica, kept
      // busy, took less of it. (Not none: on a loaded machine the v4 loops leave gaps
      // between their requests, and a spill in such a gap may find it the least loaded.)
      expect(spilled(target)).toBeGreaterThan(spilled(busy));
    });

    it("evicts the least recently used model at the replica's limit, and the proxy follows", async () => {
      // Bring the v6 replica to hold v5 and v6, v5 the least recently used (whatever the spill
      // left on it), then send it v4 directly: it must evict v5.
      const target = home.get("silero-vad-v6")!;
      const url = stack.replicas.get(target)!.url;
      // Behind the proxy's back, signed as the edge signs (a replica serves nothing else).
      const signed = signedFetch(stack, "mux");
      for (const model of ["silero-vad-v5", "silero-vad-v6"]) {
        await signed(`${url}/mux`, { method: "POST", headers: { "x-switchyard-model": model }, body: JSON.stringify(vowel) }).then((r) => r.text());
      }
      expect((await replicaModels(target)).models.sort()).toEqual(["silero-vad-v5", "silero-vad-v6"]);
      const direct = await signed(`${url}/mux`, { method: "POST", headers: { "x-switchyard-model": "silero-vad-v4" }, body: JSON.stringify(vowel) });
      expect(direct.status).toBe(200);
      expect(direct.headers.get("x-switchyard-model-cache")).toBe("miss");
      await direct.text();
      const state = await replicaModels(target);
      // v5 was the least recently used of its two: evicted.
      expect(state.models.sort()).toEqual(["silero-vad-v4", "silero-vad-v6"]);
      expect(state.evictions).toBeGreaterThanOrEqual(1);
      // The proxy learns it from the replica's report, then from its next snapshot refresh
      // (which a request starts): wait for the routing state to say so, then for a refresh.
      await waitFor("the routing state to show the eviction", async () => {
        const d = await stack.deploymentState("mux");
        const models = (d.snapshot.replicas as unknown as { id: string; models: string[] }[]).find((r) => r.id === target)?.models ?? [];
        return !models.includes("silero-vad-v5");
      }, 20_000, 50);
      await sleep(1_200);
      await infer("silero-vad-v6", vowel);
      await sleep(200);
      // v5 goes to replicas that hold it, never to the one that evicted it.
      for (let i = 0; i < 5; i++) expect((await infer("silero-vad-v5", vowel)).replica).not.toBe(target);
    });

    it("routes a mixed load of more models than fit on one replica to a replica that has the model whenever one has room", async () => {
      // One request at a time, the models in turn: every holder has room whenever a request
      // comes, so the router must choose one, and every answer after a model's first is a hit.
      // (A ratio of hits under concurrent load moved with the machine's load: 0.86 at load ~6,
      // 0.99 idle; the spill when holders are full is the hot-model test's.)
      for (const model of MODELS) expect((await infer(model, vowel)).status).toBe(200);
      const answers: (Answer & { model: string })[] = [];
      for (let i = 0; i < 60; i++) {
        const model = MODELS[i % MODELS.length]!;
        answers.push({ ...(await infer(model, vowel)), model });
      }
      expect(answers.filter((a) => a.status !== 200)).toEqual([]);
      const misses = answers.filter((a) => a.cache !== "hit").map((a) => `${a.model} on ${a.replica}: ${a.cache}`);
      expect(misses).toEqual([]);
    });
  });

}
