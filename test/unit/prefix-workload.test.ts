/** bench/prefix-cache/prefix-cache.ts's workload: shared system prompts, growing multi-turn histories, seeded. */
import { describe, it, expect } from "vitest";
import { PrefixWorkload, percentile, poissonArrivals, randomText, type WorkloadShape } from "../../bench/prefix-cache/prefix-cache-workload.ts";
import { chatPrompt } from "../../src/prompt/tiny-lm-chat-template.ts";
import { encode } from "../../src/prompt/tiny-lm-tokenizer.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { mulberry32 } from "../../src/seeded-random.ts";

const SHAPE: WorkloadShape = { groups: 3, usersPerGroup: 2, systemMin: 200, systemMax: 400, questionMin: 20, questionMax: 40, turns: 3 };

describe("randomText", () => {
  it("has exactly the asked length, one tiny-LM token per character, no newline", () => {
    const t = randomText(mulberry32(7), 1000);
    expect(t).toHaveLength(1000);
    expect(encode(t)).toHaveLength(1000);
    expect(t).not.toContain("\n");
  });
});

describe("PrefixWorkload", () => {
  it("gives each group one system prompt of the asked length, the same for the same seed", () => {
    const a = new PrefixWorkload(SHAPE, 1);
    const b = new PrefixWorkload(SHAPE, 1);
    expect(a.systemPrompts).toEqual(b.systemPrompts);
    expect(a.systemPrompts).toHaveLength(3);
    for (const s of a.systemPrompts) {
      expect(s.length).toBeGreaterThanOrEqual(200);
      expect(s.length).toBeLessThanOrEqual(400);
    }
    expect(new PrefixWorkload(SHAPE, 2).systemPrompts).not.toEqual(a.systemPrompts);
  });

  it("groups share no block: their keys differ from the first block on", () => {
    const w = new PrefixWorkload(SHAPE, 1);
    const firsts = w.systemPrompts.map((s) => blockKeys(encode(chatPrompt([{ role: "system", content: s }])))[0]);
    expect(new Set(firsts).size).toBe(3);
  });

  it("grows a conversation turn by turn: each prompt extends the previous prompt and its answer", () => {
    const w = new PrefixWorkload({ ...SHAPE, groups: 1, usersPerGroup: 1 }, 3);
    const t1 = w.next()!;
    expect(w.next()).toBeUndefined(); // the only user waits for its answer
    w.complete(t1, "first answer");
    const t2 = w.next()!;
    expect(t2.turn).toBe(2);
    const p1 = chatPrompt(t1.messages);
    const p2 = chatPrompt(t2.messages);
    expect(p2.startsWith(`${p1}first answer\nuser: `)).toBe(true);
    // Block keys: the longer prompt holds every full block of the shorter one.
    const k1 = blockKeys(encode(p1));
    expect(blockKeys(encode(p2)).slice(0, k1.length)).toEqual(k1);
  });

  it("drops a failed turn and starts a new conversation after `turns` turns", () => {
    const w = new PrefixWorkload({ ...SHAPE, groups: 1, usersPerGroup: 1 }, 4);
    const t1 = w.next()!;
    w.complete(t1, undefined);
    const again = w.next()!;
    expect(again.turn).toBe(1);
    expect(again.messages).toHaveLength(2);
    w.complete(again, "a");
    const t2 = w.next()!;
    w.complete(t2, "b");
    const t3 = w.next()!;
    expect(t3.turn).toBe(3);
    expect(t3.messages).toHaveLength(6);
    w.complete(t3, "c");
    const fresh = w.next()!;
    expect(fresh.turn).toBe(1);
    expect(fresh.conversation).toBe(1);
    expect(fresh.messages).toHaveLength(2);
    expect(fresh.messages[0]).toEqual(t1.messages[0]);
  });

  it("asks each user the same questions whatever order users are picked in", () => {
    const questions = (seed: number, order: number) => {
      const w = new PrefixWorkload(SHAPE, 5);
      const seen = new Map<number, string[]>();
      const open: ReturnType<PrefixWorkload["next"]>[] = [];
      for (let i = 0; i < 30; i++) {
        const t = w.next();
        if (t) {
          seen.set(t.user, [...(seen.get(t.user) ?? []), t.messages.at(-1)!.content]);
          open.push(t);
        }
        // Complete in a seed-dependent order: the picks then differ between runs.
        const r = mulberry32(seed + i)();
        if (open.length > order || r < 0.5) {
          const k = Math.floor(r * open.length);
          w.complete(open.splice(k, 1)[0]!, "ok");
        }
      }
      return seen;
    };
    const a = questions(1, 1);
    const b = questions(2, 3);
    for (const [user, qs] of a) {
      const other = b.get(user) ?? [];
      const n = Math.min(qs.length, other.length);
      expect(qs.slice(0, n)).toEqual(other.slice(0, n));
    }
  });
});

describe("poissonArrivals and percentile", () => {
  it("averages the asked rate", () => {
    const xs = poissonArrivals(50, 200, mulberry32(9));
    expect(xs.length / 200).toBeGreaterThan(45);
    expect(xs.length / 200).toBeLessThan(55);
    expect(xs.every((x, i) => i === 0 || x >= xs[i - 1]!)).toBe(true);
  });

  it("takes the nearest rank", () => {
    expect(percentile([5, 1, 3, 2, 4], 50)).toBe(3);
    expect(percentile([1, 2, 3, 4], 99)).toBe(4);
    expect(percentile([], 50)).toBeNaN();
  });
});
