/**
 * The x-switchyard-load header: format/parse round trip, and rejection of
 * anything malformed (a replica that lies must not poison the proxy's view).
 */
import { describe, it, expect } from "vitest";
import { formatLoadHeader, parseLoadHeader, type Load } from "../../src/protocol/index.ts";
import { mulberry32 } from "./seeded-random.ts";


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
    ["16-digit seq", "seq=1000000000000000;ongoing=0;queued=0;max=5;state=ready"],
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
    ["overlong header", `seq=1;ongoing=0;queued=0;max=5;state=ready;pad=${"x".repeat(256)}`],
  ];
  for (const [name, value] of cases) {
    it(`rejects ${name}`, () => {
      expect(parseLoadHeader(value)).toBeNull();
    });
  }

  it("rejects a header one character over 256 but accepts one of exactly 256", () => {
    const prefix = "seq=1;ongoing=0;queued=0;max=5;state=ready;pad=";
    const at256 = prefix + "x".repeat(256 - prefix.length);
    expect(at256.length).toBe(256);
    expect(parseLoadHeader(at256)).not.toBeNull();
    expect(parseLoadHeader(at256 + "x")).toBeNull();
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
      expect(header.length).toBeLessThanOrEqual(256);
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
