/** tiny-lm's character tokenizer (src/replica/llm/tokenizer.ts) and its stop-string matcher (stop.ts). */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { StopMatcher } from "../../src/replica/llm/stop.ts";
import { BOS, VOCAB, VOCAB_SIZE, decode, encode, normalizeText, tokenText, vocabJson } from "../../src/replica/llm/tokenizer.ts";

describe("tokenizer", () => {
  it("has <s>, newline and the 95 printable ASCII characters", () => {
    expect(VOCAB_SIZE).toBe(97);
    expect(VOCAB[BOS]).toBe("<s>");
    expect(VOCAB[1]).toBe("\n");
    expect(VOCAB[2]).toBe(" ");
    expect(VOCAB[96]).toBe("~");
    expect(new Set(VOCAB).size).toBe(VOCAB_SIZE);
  });

  it("round-trips ASCII text, one token per character", () => {
    const text = 'Hello, world!\n\t{"a": [1, 2]} ~`|\\';
    const ids = encode(text);
    expect(ids).toHaveLength(text.length);
    expect(ids.every((id) => id >= 1 && id < VOCAB_SIZE)).toBe(true);
    expect(decode(ids)).toBe(text.replace("\t", " "));
  });

  it("normalises what is outside the vocabulary", () => {
    expect(normalizeText("café naïve")).toBe("cafe naive");
    expect(normalizeText("“quoted” — ‘x’ – y")).toBe("\"quoted\" - 'x' - y");
    expect(normalizeText("a → b ≤ c × d … e")).toBe("a -> b <= c x d ... e");
    expect(normalizeText("line\r\nnext")).toBe("line\nnext");
    expect(normalizeText("日本 🙂")).toBe("?? ?"); // code points, not UTF-16 units
    expect(encode("<s>")).toHaveLength(3); // text, not the BOS token
  });

  it("decodes BOS to nothing and refuses ids outside the vocabulary", () => {
    expect(decode([BOS, ...encode("ab")])).toBe("ab");
    expect(tokenText(BOS)).toBe("");
    expect(() => tokenText(VOCAB_SIZE)).toThrow(RangeError);
    expect(() => tokenText(-1)).toThrow(RangeError);
    expect(() => tokenText(1.5)).toThrow(RangeError);
  });

  it("matches the committed models/tiny-lm/vocab.json", () => {
    const file = JSON.parse(readFileSync(new URL("../../models/tiny-lm/vocab.json", import.meta.url), "utf8")) as unknown;
    expect(file).toEqual(JSON.parse(JSON.stringify(vocabJson())));
  });

  it("the committed corpus is already normalised", () => {
    const corpus = readFileSync(new URL("../../models/tiny-lm/corpus.txt", import.meta.url), "utf8");
    expect(corpus.length).toBeGreaterThan(20_000);
    expect(normalizeText(corpus)).toBe(corpus);
  });
});

describe("StopMatcher", () => {
  const run = (stops: string[], pieces: string[]) => {
    const m = new StopMatcher(stops);
    const emitted: string[] = [];
    let stopped = false;
    for (const p of pieces) {
      const r = m.push(p);
      emitted.push(r.emit);
      if (r.stopped) {
        stopped = true;
        break;
      }
    }
    if (!stopped) emitted.push(m.flush());
    return { emitted, stopped, text: emitted.join("") };
  };

  it("passes text through when there are no stop strings", () => {
    expect(run([], ["a", "b", "c"])).toEqual({ emitted: ["a", "b", "c", ""], stopped: false, text: "abc" });
  });

  it("ends at a stop string and leaves it out", () => {
    const r = run(["\n\n"], [..."one\n\ntwo"]);
    expect(r.stopped).toBe(true);
    expect(r.text).toBe("one");
  });

  it("holds back a possible start of a stop string, then releases it when it is not one", () => {
    const r = run(["END"], [..."xEN", ..."Dy"]);
    expect(r.text).toBe("x");
    expect(r.emitted).toEqual(["x", "", "", ""]);
    const r2 = run(["END"], [..."xENx", "y"]);
    expect(r2.text).toBe("xENxy");
    expect(r2.emitted).toEqual(["x", "", "", "ENx", "y", ""]);
    expect(r2.stopped).toBe(false);
  });

  it("releases held text at the end when no stop string completed", () => {
    const r = run(["END"], [..."abEN"]);
    expect(r.stopped).toBe(false);
    expect(r.text).toBe("abEN");
  });

  it("takes the earliest of several stop strings, across multi-character pieces", () => {
    expect(run(["cd", "b"], ["abcd"]).text).toBe("a");
    expect(run(["lo w", "world"], ["hel", "lo wor", "ld"]).text).toBe("hel");
  });
});

describe("StopMatcher, exactly", () => {
  it("an empty stop string stops nothing; the earliest of several stops wins; after a stop, nothing more", () => {
    expect(new StopMatcher([""]).push("abc")).toEqual({ emit: "abc", stopped: false });
    const m = new StopMatcher(["c", "b"]);
    expect(m.push("abcd")).toEqual({ emit: "a", stopped: true });
    expect(m.stopped).toBe(true);
    expect(m.push("more")).toEqual({ emit: "", stopped: true });
    expect(m.flush()).toBe("");
    const later = new StopMatcher(["b", "c"]);
    expect(later.push("xcb")).toEqual({ emit: "x", stopped: true });
  });

  it("holds back exactly the longest proper prefix of a stop string, and lets it go when it is not one", () => {
    const m = new StopMatcher(["abcd", "zz"]);
    expect(m.push("xxabc")).toEqual({ emit: "xx", stopped: false });
    expect(m.stopped).toBe(false);
    expect(m.push("e")).toEqual({ emit: "abce", stopped: false });
    expect(m.push("z")).toEqual({ emit: "", stopped: false });
    expect(m.flush()).toBe("z");
    const n = new StopMatcher(["ab"]);
    expect(n.push("a")).toEqual({ emit: "", stopped: false });
    expect(n.push("b")).toEqual({ emit: "", stopped: true });
  });
});
