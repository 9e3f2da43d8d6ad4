/**
 * The x-switchyard-load header: format/parse round trip, and rejection of
 * anything malformed (a replica that lies must not poison the proxy's view).
 */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { MAX_REPLICA_MODELS, MODEL_ID, formatLoadHeader, parseLoadHeader, type Load } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { mulberry32 } from "../../src/seeded-random.ts";


const VALID = "seq=42;ongoing=3;queued=0;max=5;state=ready;kv=0.31";

describe("formatLoadHeader", () => {
  it("writes the documented compact form", () => {
    expect(formatLoadHeader({ seq: 42, ongoing: 3, queued: 0, max: 5, state: "ready", kv: 0.31 })).toBe(VALID);
  });

  it("omits kv when the engine has none", () => {
    expect(formatLoadHeader({ seq: 1, ongoing: 0, queued: 2, max: 8, state: "draining" })).toBe("seq=1;ongoing=0;queued=2;max=8;state=draining");
  });
});

describe("parseLoadHeader: valid input", () => {
  it("parses the documented example", () => {
    expect(parseLoadHeader(VALID)).toEqual({ seq: 42, ongoing: 3, queued: 0, max: 5, state: "ready", kv: 0.31 });
  });

  it("parses without kv and leaves kv absent", () => {
    const load = parseLoadHeader("seq=0;ongoing=0;queued=0;max=1;state=draining");
    expect(load).toEqual({ seq: 0, ongoing: 0, queued: 0, max: 1, state: "draining" });
    expect(load && "kv" in load).toBe(false);
  });

  it("accepts fields in any order", () => {
    expect(parseLoadHeader("state=ready;max=5;kv=1;queued=4;ongoing=2;seq=7")).toEqual({ seq: 7, ongoing: 2, queued: 4, max: 5, state: "ready", kv: 1 });
  });

  it("tolerates whitespace around keys and values", () => {
    expect(parseLoadHeader(" seq = 1 ; ongoing= 2;queued =3 ;max=4; state=ready ")).toEqual({ seq: 1, ongoing: 2, queued: 3, max: 4, state: "ready" });
  });

  it("ignores unknown keys (forward compatibility)", () => {
    expect(parseLoadHeader("seq=1;ongoing=0;queued=0;max=2;state=ready;future=x")).toEqual({ seq: 1, ongoing: 0, queued: 0, max: 2, state: "ready" });
  });

  it("accepts kv at both bounds", () => {
    expect(parseLoadHeader("seq=1;ongoing=0;queued=0;max=2;state=ready;kv=0")?.kv).toBe(0);
    expect(parseLoadHeader("seq=1;ongoing=0;queued=0;max=2;state=ready;kv=1")?.kv).toBe(1);
  });

  it("accepts counts at the limit of 1,000,000", () => {
    expect(parseLoadHeader("seq=1;ongoing=1000000;queued=1000000;max=1000000;state=ready")).toEqual({
      seq: 1,
      ongoing: 1_000_000,
      queued: 1_000_000,
      max: 1_000_000,
      state: "ready",
    });
  });

  it("accepts a 15-digit seq", () => {
    expect(parseLoadHeader("seq=999999999999999;ongoing=0;queued=0;max=1;state=ready")?.seq).toBe(999_999_999_999_999);
  });

  it("accepts every seq a report may carry, up to MAX_SAFE_INTEGER (16 digits)", () => {
    expect(parseLoadHeader("seq=9007199254740991;ongoing=0;queued=0;max=1;state=ready")?.seq).toBe(Number.MAX_SAFE_INTEGER);
  });
});

describe("parseLoadHeader: rejects garbage", () => {
  const cases: [string, string | null | undefined][] = [
    ["null", null],
    ["undefined", undefined],
    ["empty string", ""],
    ["missing seq", "ongoing=3;queued=0;max=5;state=ready"],
    ["missing ongoing", "seq=1;queued=0;max=5;state=ready"],
    ["missing queued", "seq=1;ongoing=3;max=5;state=ready"],
    ["missing max", "seq=1;ongoing=3;queued=0;state=ready"],
    ["missing state", "seq=1;ongoing=3;queued=0;max=5"],
    ["negative seq", "seq=-1;ongoing=3;queued=0;max=5;state=ready"],
    ["negative ongoing", "seq=1;ongoing=-3;queued=0;max=5;state=ready"],
    ["negative queued", "seq=1;ongoing=3;queued=-1;max=5;state=ready"],
    ["non-integer ongoing", "seq=1;ongoing=1.5;queued=0;max=5;state=ready"],
    ["non-integer seq", "seq=1.0;ongoing=1;queued=0;max=5;state=ready"],
    ["exponent notation", "seq=1e3;ongoing=1;queued=0;max=5;state=ready"],
    ["hex count", "seq=0x10;ongoing=1;queued=0;max=5;state=ready"],
    ["plus sign", "seq=+1;ongoing=1;queued=0;max=5;state=ready"],
    ["word count", "seq=one;ongoing=1;queued=0;max=5;state=ready"],
    ["empty count", "seq=;ongoing=1;queued=0;max=5;state=ready"],
    ["max of zero", "seq=1;ongoing=0;queued=0;max=0;state=ready"],
    ["ongoing above 1,000,000", "seq=1;ongoing=1000001;queued=0;max=5;state=ready"],
    ["queued above 1,000,000", "seq=1;ongoing=0;queued=1000001;max=5;state=ready"],
    ["max above 1,000,000", "seq=1;ongoing=0;queued=0;max=1000001;state=ready"],
    ["17-digit seq", "seq=10000000000000000;ongoing=0;queued=0;max=5;state=ready"],
    ["seq above MAX_SAFE_INTEGER", "seq=9007199254740992;ongoing=0;queued=0;max=5;state=ready"],
    ["huge seq", `seq=${"9".repeat(40)};ongoing=0;queued=0;max=5;state=ready`],
    ["bad state", "seq=1;ongoing=0;queued=0;max=5;state=busy"],
    ["state in wrong case", "seq=1;ongoing=0;queued=0;max=5;state=READY"],
    ["empty state", "seq=1;ongoing=0;queued=0;max=5;state="],
    ["kv above 1", "seq=1;ongoing=0;queued=0;max=5;state=ready;kv=1.01"],
    ["kv below 0", "seq=1;ongoing=0;queued=0;max=5;state=ready;kv=-0.1"],
    ["kv NaN", "seq=1;ongoing=0;queued=0;max=5;state=ready;kv=NaN"],
    ["kv Infinity", "seq=1;ongoing=0;queued=0;max=5;state=ready;kv=Infinity"],
    ["kv empty", "seq=1;ongoing=0;queued=0;max=5;state=ready;kv="],
    ["kv blank", "seq=1;ongoing=0;queued=0;max=5;state=ready;kv= "],
    ["kv word", "seq=1;ongoing=0;queued=0;max=5;state=ready;kv=half"],
    ["empty part in the middle", "seq=1;;ongoing=0;queued=0;max=5;state=ready"],
    ["trailing separator", "seq=1;ongoing=0;queued=0;max=5;state=ready;"],
    ["leading separator", ";seq=1;ongoing=0;queued=0;max=5;state=ready"],
    ["part without '='", "seq=1;ongoing=0;queued=0;max=5;state=ready;flag"],
    ["part with empty key", "seq=1;ongoing=0;queued=0;max=5;state=ready;=3"],
    ["comma separated", "seq=1,ongoing=0,queued=0,max=5,state=ready"],
    ["JSON", '{"seq":1,"ongoing":0,"queued":0,"max":5,"state":"ready"}'],
    ["overlong header", `seq=1;ongoing=0;queued=0;max=5;state=ready;pad=${"x".repeat(8192)}`],
  ];
  for (const [name, value] of cases) {
    it(`rejects ${name}`, () => {
      expect(parseLoadHeader(value)).toBeNull();
    });
  }

  it("rejects a header one character over 8192 but accepts one of exactly 8192", () => {
    const prefix = "seq=1;ongoing=0;queued=0;max=5;state=ready;pad=";
    const atMax = prefix + "x".repeat(8192 - prefix.length);
    expect(atMax.length).toBe(8192);
    expect(parseLoadHeader(atMax)).not.toBeNull();
    expect(parseLoadHeader(atMax + "x")).toBeNull();
  });

  it("the length bound applies to model lists too (exactly 8192 accepted, 8193 refused)", () => {
    const prefix = "seq=1;ongoing=0;queued=0;max=5;state=ready;models=";
    // 63 ids of 127 characters, each followed by a comma, then one id that pads the header to exactly 8192.
    const ids = Array.from({ length: 63 }, (_, i) => `m${String(i).padStart(3, "0")}${"x".repeat(123)}`);
    let header = prefix + ids.join(",") + ",";
    const last = "y".repeat(8192 - header.length);
    expect(last.length).toBeGreaterThan(0);
    expect(last.length).toBeLessThanOrEqual(128);
    header += last;
    expect(header.length).toBe(8192);
    expect(parseLoadHeader(header)?.models).toEqual([...ids, last]);
    expect(parseLoadHeader(header + "y")).toBeNull();
  });
});

describe("parseLoadHeader: property-based (seeded)", () => {
  function randomLoad(rand: () => number): Load {
    const int = (max: number) => Math.floor(rand() * (max + 1));
    const pickCount = (max: number) => (rand() < 0.1 ? max : int(max));
    const load: Load = {
      seq: rand() < 0.05 ? 999_999_999_999_999 : int(1e12),
      ongoing: pickCount(1_000_000),
      queued: pickCount(1_000_000),
      max: 1 + int(999_999),
      state: rand() < 0.5 ? "ready" : "draining",
    };
    const k = rand();
    if (k < 0.1) load.kv = 0;
    else if (k < 0.2) load.kv = 1;
    else if (k < 0.6) load.kv = rand();
    return load;
  }

  it("round-trips 2,000 random valid loads", () => {
    const rand = mulberry32(0x5eed);
    for (let n = 0; n < 2_000; n++) {
      const load = randomLoad(rand);
      const header = formatLoadHeader(load);
      expect(header.length).toBeLessThanOrEqual(8192);
      expect(parseLoadHeader(header), header).toEqual(load);
    }
  });

  it("never throws on 2,000 random garbage strings, and only accepts well-formed loads", () => {
    const rand = mulberry32(0xbadc0de);
    const alphabet = "seqongoingqueuedmaxstatereadydrainingkv=;.,-+ 0123456789eE\t\"{}NaInfity\u00e9\u0000";
    const tokens = ["seq=", "ongoing=", "queued=", "max=", "state=", "ready", "draining", "kv=", ";", "=", "-1", "0", "1", "0.5", "1e3", "999999999999999999", ""];
    let accepted = 0;
    for (let n = 0; n < 2_000; n++) {
      let s = "";
      const mode = rand();
      if (mode < 0.4) {
        const len = Math.floor(rand() * 80);
        for (let i = 0; i < len; i++) s += alphabet[Math.floor(rand() * alphabet.length)];
      } else if (mode < 0.8) {
        const len = Math.floor(rand() * 20);
        for (let i = 0; i < len; i++) s += tokens[Math.floor(rand() * tokens.length)];
      } else {
        // Mutate a valid header: drop, duplicate or replace one character.
        const base = formatLoadHeader(randomLoad(rand));
        const at = Math.floor(rand() * base.length);
        const ch = alphabet[Math.floor(rand() * alphabet.length)]!;
        const op = rand();
        s = op < 0.33 ? base.slice(0, at) + base.slice(at + 1) : op < 0.66 ? base.slice(0, at) + ch + base.slice(at) : base.slice(0, at) + ch + base.slice(at + 1);
      }
      let parsed: Load | null = null;
      expect(() => {
        parsed = parseLoadHeader(s);
      }, JSON.stringify(s)).not.toThrow();
      if (parsed !== null) {
        accepted++;
        const p: Load = parsed;
        // Anything accepted satisfies the documented invariants.
        for (const v of [p.seq, p.ongoing, p.queued, p.max]) expect(Number.isSafeInteger(v)).toBe(true);
        expect(p.seq).toBeGreaterThanOrEqual(0);
        expect(p.ongoing).toBeGreaterThanOrEqual(0);
        expect(p.ongoing).toBeLessThanOrEqual(1_000_000);
        expect(p.queued).toBeGreaterThanOrEqual(0);
        expect(p.queued).toBeLessThanOrEqual(1_000_000);
        expect(p.max).toBeGreaterThanOrEqual(1);
        expect(p.max).toBeLessThanOrEqual(1_000_000);
        expect(["ready", "draining"]).toContain(p.state);
        if (p.kv !== undefined) {
          expect(p.kv).toBeGreaterThanOrEqual(0);
          expect(p.kv).toBeLessThanOrEqual(1);
        }
      }
    }
    // The generator is not degenerate: most garbage is refused.
    expect(accepted).toBeLessThan(1_000);
  });
});

describe("load header: models and loading (multiplexing)", () => {
  const BASE = "seq=7;ongoing=1;queued=0;max=4;state=ready";

  it("formats the documented example", () => {
    expect(formatLoadHeader({ seq: 7, ongoing: 1, queued: 0, max: 4, state: "ready", models: ["a", "b"], loading: ["c"] })).toBe(`${BASE};models=a,b;loading=c`);
  });

  it("formats empty lists as empty values, and omits absent ones", () => {
    expect(formatLoadHeader({ seq: 7, ongoing: 1, queued: 0, max: 4, state: "ready", models: [], loading: [] })).toBe(`${BASE};models=;loading=`);
    expect(formatLoadHeader({ seq: 7, ongoing: 1, queued: 0, max: 4, state: "ready", models: ["a"] })).toBe(`${BASE};models=a`);
    expect(formatLoadHeader({ seq: 7, ongoing: 1, queued: 0, max: 4, state: "ready", loading: ["a"] })).toBe(`${BASE};loading=a`);
  });

  it("parses the documented example", () => {
    expect(parseLoadHeader(`${BASE};models=a,b;loading=c`)).toEqual({ seq: 7, ongoing: 1, queued: 0, max: 4, state: "ready", models: ["a", "b"], loading: ["c"] });
  });

  it("an empty value is an empty list, which is not the same as an absent field", () => {
    const empty = parseLoadHeader(`${BASE};models=;loading=`)!;
    expect(empty.models).toEqual([]);
    expect(empty.loading).toEqual([]);
    const absent = parseLoadHeader(BASE)!;
    expect("models" in absent).toBe(false);
    expect("loading" in absent).toBe(false);
    const onlyModels = parseLoadHeader(`${BASE};models=a`)!;
    expect(onlyModels.models).toEqual(["a"]);
    expect("loading" in onlyModels).toBe(false);
    const onlyLoading = parseLoadHeader(`${BASE};loading=b`)!;
    expect(onlyLoading.loading).toEqual(["b"]);
    expect("models" in onlyLoading).toBe(false);
  });

  it("a blank value (whitespace only) is an empty list too", () => {
    expect(parseLoadHeader(`${BASE};models= `)?.models).toEqual([]);
  });

  it("accepts every model id shape MODEL_ID allows (org/name, LoRA names, versions)", () => {
    const ids = ["a", "Z", "9", "org/name", "meta-llama/Llama-3.1-8B", "lora:adapter@v2", "x+y", "a.b_c-d", "m".repeat(128)];
    for (const id of ids) expect(MODEL_ID.test(id), id).toBe(true);
    expect(parseLoadHeader(`${BASE};models=${ids.join(",")};loading=${ids.slice(0, 3).join(",")}`)).toMatchObject({ models: ids, loading: ids.slice(0, 3) });
  });

  it("tolerates whitespace around the whole list", () => {
    expect(parseLoadHeader(`${BASE}; models = a,b ; loading = c `)).toMatchObject({ models: ["a", "b"], loading: ["c"] });
  });

  it("accepts fields in any order, models before the counts", () => {
    expect(parseLoadHeader("loading=c;models=a;state=ready;max=4;queued=0;ongoing=1;seq=7")).toEqual({ seq: 7, ongoing: 1, queued: 0, max: 4, state: "ready", models: ["a"], loading: ["c"] });
  });

  it(`accepts exactly MAX_REPLICA_MODELS (${MAX_REPLICA_MODELS}) ids per list, as reports do, and refuses one more`, () => {
    const ids = (n: number) => Array.from({ length: n }, (_, i) => `m${i}`);
    expect(parseLoadHeader(`${BASE};models=${ids(MAX_REPLICA_MODELS).join(",")}`)?.models).toEqual(ids(MAX_REPLICA_MODELS));
    expect(parseLoadHeader(`${BASE};loading=${ids(MAX_REPLICA_MODELS).join(",")}`)?.loading).toEqual(ids(MAX_REPLICA_MODELS));
    expect(parseLoadHeader(`${BASE};models=${ids(MAX_REPLICA_MODELS + 1).join(",")}`)).toBeNull();
    expect(parseLoadHeader(`${BASE};loading=${ids(MAX_REPLICA_MODELS + 1).join(",")}`)).toBeNull();
  });

  it("a replica holding 300 models (more than the old 256 bound of the header) still sends headers the proxy reads", () => {
    // Before: the header's own bound (256) was below the report's (1,024), so every header of
    // such a replica was dropped, and its refusals "at capacity" counted as lies.
    const models = Array.from({ length: 300 }, (_, i) => `org/model-${i}`);
    const a = new AdmissionControl(1);
    a.setModels(models, []);
    expect(a.tryAdmit().admitted).toBe(true);
    const header = formatLoadHeader(a.load());
    const parsed = parseLoadHeader(header);
    expect(parsed).not.toBeNull();
    expect(parsed).toMatchObject({ ongoing: 1, max: 1, state: "ready", models });
    // Too many long ids for 8 KiB: the sets are left out, the counts still arrive.
    const long = Array.from({ length: MAX_REPLICA_MODELS }, (_, i) => `org/${"x".repeat(100)}-${i}`);
    const b = new AdmissionControl(1);
    b.setModels(long, []);
    const parsedLong = parseLoadHeader(formatLoadHeader(b.load()));
    expect(parsedLong).toEqual({ seq: b.load().seq, ongoing: 0, queued: 0, max: 1, state: "ready" });
  });

  it("accepts a 128-character id and refuses a 129-character one", () => {
    expect(parseLoadHeader(`${BASE};models=${"m".repeat(128)}`)?.models).toEqual(["m".repeat(128)]);
    expect(parseLoadHeader(`${BASE};models=${"m".repeat(129)}`)).toBeNull();
  });

  const garbage: [string, string][] = [
    ["empty element in the middle", "models=a,,b"],
    ["trailing comma", "models=a,b,"],
    ["leading comma", "models=,a"],
    ["only a comma", "models=,"],
    ["space after a comma", "models=a, b"],
    ["space inside an id", "models=my model"],
    ["id starting with '-'", "models=-a"],
    ["id starting with '.'", "models=.a"],
    ["id starting with '/'", "models=/org/name"],
    ["id starting with '_'", "loading=_a"],
    ["non-ASCII id", "models=mod\u00e8le"],
    ["id with '='", "models=a=b"],
    ["id with a quote", 'models="a"'],
    ["id with a tab", "loading=a\tb"],
    ["JSON list", 'models=["a","b"]'],
    ["bad id in loading", "loading=ok,not ok"],
    ["id with a NUL", "models=a\u0000"],
    ["id with a backslash", "models=a\\b"],
    ["id with '#'", "models=a#b"],
  ];
  for (const [name, field] of garbage) {
    it(`rejects the whole header for ${name}`, () => {
      expect(parseLoadHeader(`${BASE};${field}`)).toBeNull();
    });
  }

  it("a ';' inside a list splits it into a part without '=', which is refused", () => {
    expect(parseLoadHeader(`${BASE};models=a;b`)).toBeNull();
  });

  it("a bad list is refused even when the other list is fine", () => {
    expect(parseLoadHeader(`${BASE};models=a,b;loading=c,`)).toBeNull();
    expect(parseLoadHeader(`${BASE};models=a b;loading=c`)).toBeNull();
  });

  it("round-trips 2,000 random loads with random model lists (seeded)", () => {
    const rand = mulberry32(0x0de1);
    const first = "abcXYZ019";
    const rest = "abcxyzABC0189._:@/+-";
    const randomId = () => {
      const len = rand() < 0.05 ? 128 : 1 + Math.floor(rand() * 30);
      let id = first[Math.floor(rand() * first.length)]!;
      for (let i = 1; i < len; i++) id += rest[Math.floor(rand() * rest.length)];
      return id;
    };
    const randomList = () => (rand() < 0.3 ? undefined : Array.from({ length: rand() < 0.1 ? 0 : Math.floor(rand() * 20) }, randomId));
    for (let n = 0; n < 2_000; n++) {
      const load: Load = { seq: Math.floor(rand() * 1e9), ongoing: Math.floor(rand() * 100), queued: Math.floor(rand() * 100), max: 1 + Math.floor(rand() * 100), state: rand() < 0.5 ? "ready" : "draining" };
      const models = randomList();
      const loading = randomList();
      if (models) load.models = models;
      if (loading) load.loading = loading;
      const header = formatLoadHeader(load);
      expect(parseLoadHeader(header), header).toEqual(load);
    }
  });

  it("never throws on random mutations of valid multiplexing headers, and accepted lists are always valid ids", () => {
    const rand = mulberry32(0xfab);
    const alphabet = "ab/,;= -._:@+\u00e9\t0";
    let accepted = 0;
    for (let n = 0; n < 2_000; n++) {
      const base = `${BASE};models=org/a,b-1,c@v2;loading=d:e`;
      let s = base;
      const edits = 1 + Math.floor(rand() * 3);
      for (let k = 0; k < edits; k++) {
        const at = BASE.length + Math.floor(rand() * (s.length - BASE.length));
        const ch = alphabet[Math.floor(rand() * alphabet.length)]!;
        const op = rand();
        s = op < 0.33 ? s.slice(0, at) + s.slice(at + 1) : op < 0.66 ? s.slice(0, at) + ch + s.slice(at) : s.slice(0, at) + ch + s.slice(at + 1);
      }
      let parsed: Load | null = null;
      expect(() => {
        parsed = parseLoadHeader(s);
      }, JSON.stringify(s)).not.toThrow();
      if (parsed !== null) {
        accepted++;
        const p: Load = parsed;
        for (const list of [p.models, p.loading]) {
          if (!list) continue;
          expect(list.length).toBeLessThanOrEqual(256);
          for (const id of list) expect(MODEL_ID.test(id), `${JSON.stringify(s)}: ${id}`).toBe(true);
        }
      }
    }
    // Some mutations survive (e.g. a letter changed inside an id), most do not.
    expect(accepted).toBeGreaterThan(0);
    expect(accepted).toBeLessThan(2_000);
  });
});
