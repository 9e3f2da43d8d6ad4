/**
 * Real inference with the Silero VAD v4, v5 and v6 ONNX models (onnxruntime-web, wasm,
 * in Node), each through the same JSON contract. Checks that outputs depend on the input
 * in the way a voice-activity detector's should: real speech and a speech-like synthetic
 * vowel train are detected, silence, noise and a pure tone are not; results are
 * deterministic; bad input is rejected with ModelInputError; the registry creates fresh,
 * releasable instances.
 */
// @ts-nocheck

import { afterAll, beforeAll, describe, it, expect } from "vitest";
import { createModelById, modelIds, ModelInputError, UnknownModelError, type InferenceModel } from "../../src/models/index.ts";
import { synthesizeVowel, type SileroVadOutput } from "../../src/models/silero-vad.ts";

/**
 * "Hello world" spoken by espeak-ng, 8 kHz mono, signed 8-bit PCM (5378 samples, 0.67 s),
 * leading/trailing silence trimmed. Generated with:
 *   espeak-ng -w hw.wav "Hello world"
 *   sox hw.wav -r 8000 -c 1 -t s8 -e signed-integer hw.s8 silence 1 0.01 1% reverse silence 1 0.01 1% reverse
 */
const HELLO_WORLD_8K_S8 = [
  "/wABAP///f8BAf/9AgAAAgQAAAH9AAEA//3/AAECAAABAPwAAQEBAAIAAQH+/gABAQIB/wAA//4C/wAAAgH/Av4B////AAMD/v4A",
  "AQP//v7+AgP/AP8AAfwBAP8EAgMCAP78/gH9/wUAAQD8/wEA//0BAAAAAf4CAv8CAAEB/wAB//7/AAP///sAAgMB/QEA//0AAAUF",
  "/wH//P/+AQUDA/3+AAD9/wD+AQD+/f4EAAMAAAEDBAECAAUCBf/6/P/48/n3/QELEAsKBP39AP79//3//fr+AgIB/QAABAL9Af//",
  "//8AAAABAgICAP/+AAEA/f8BBggHA/8HBQH69vb/CAT8CBEaGg4D9wn+8ufi7vYF/PcBCg0I//n3AP/49vj+AQUA/gADAf/+/v8A",
  "AQAAAAEBAQAA/wAAAQAAAQQCAP79/wL//P8CCwwKAQIMBwD07/QEDwH8ExwuHxP6+RD06NPa5/sF8/UHEhIH+vT1Avjz8fj/AwT+",
  "/gIEA/78/f8B/wD/AQIB//7/AQH/AAIFBAH9+/8DAPn+BBESEQMBEg0E7ufqARYH+BgqRDkfAO0Z9N6+v9jvCvHrBRkbD/jw7AL5",
  "6+nu/gQH/vwCCAT/+vv/AQD//wECAf7+AAEB/wEEBgT/+fsCBf35/woYFRH9ChQM/Ofl8AsX/QAjMUorGvD9FOfZus7e/AXs9A0Y",
  "FgX38PUD8+7s9wAFBP3/BAYB/fz8/wD/AP8BAQD//wECAAABBAUA/fv+AwL6/QENEA8F/w0LBfXt7/0PCfkNGy0rFgjwDv3r2tTl",
  "8Qb68gEMEA3++PYA/fb19PwABP/+AQMDAf/+/wAA//7//wABAAEAAQEBAQH+/f0AAAEAAAUICgQD/wIE//f0+/8ECAEGDxMTCgb6",
  "A/738+zy9v/7+/8CCAkFAgACAP/7+/r9/v7//QABAQEA/wEAAAD//wEAAAD/AQEAAAECAgEBAQH9/fz8/fz9/QIGBggGCgsNCQYC",
  "/wH8+/Xz9Pb5+Pr6/gQDBQMEBQUEAgD+AP/+/fz9/QD/AP7+/wABAgEBAgMEBAECAQMB/v36/Pv8+vv7/wcFCQcKDhAPBwj8Av/4",
  "9+7x8vn3+vn7BgUJBgQEBQYBAPv8/v7+/Pv8/wAA/v7/AQIBAAACBAUEAQMDBgP//Pn8/P329/n8CQUJCAsRFBQHC/kEAPX36O7v",
  "+ff6+vkIBgwJAwUEBwP/+fr7/P37+/z/AQEAAAAAAQD/AAMEBAQDBgYIBAD7+/z7/PD1+P0LAwkFEBMaFgcO9Qj89PTg7ev59/z5",
  "/AoIEwgEBAEFAv75+Pf7/v3+/f8BAgIBAP/9/v8BAgICAgUKCQcBAPsB/Pv16vf0BQcECAgZFioKEQL0Euv74tvq6/r2+/MGCw8X",
  "Awf//QT79/Lx9fr9/v8BBAYFBAH+/Pv6/P//AgQIDxQPDgQBCfwE7+jy8QwKCgYRGic3Bxz2+Bfk99LN5ev69/nxChURGf36/Pf8",
  "9Ozq8vgCCAcJCwsLCQT++PT19Pj39voACRMTDQgLChQI7vHf9w4CBgAII0Q6GB7lBRTg58C94P8C+wH1DCcOBvHg7fj79vj5AA4P",
  "CQYA//8CAAAAAQMFAv327PL8AAYG/g4fJRIF39wD+wD95gI7W0UvFtsWDdTIp67iGhf8BQMJLQvo1tzq/g0D/gwREA4B9vL09vr/",
  "AgYKDA4I/fXx7v787fMEFDIwD+Pu/vgP68TvPWVmSx/WEBnKqZOk2y89Be0LAhQN5sjT/w0SEwf/DQsB9vX19vv9/gIEBgoKCgn8",
  "9fYA9vDy8gIuLxL28/r1F/fF3CJHW0kr5fIp58GqtdEOOx3qAAsIDvXgz/IODQkLBAUJBvnz+vv7/P3/AwUGBQYKCfv29vz4+vfy",
  "AickEf3v8vIT+dHjGDVKQCbv7yDxzbe/1wEoHPMCGBIP9+fZ7AYH/QIFCxALAff7/v35+f0DBwgCAAMHAPbx8/sBB//9DSAZCvPn",
  "4/IL8eX7HzhFMhfvARDozbzK4wUWC/cPHxwN9+vn9f/58/sEDQ4JA/8CAv/6+f0EBgYB/v8A/fj09f0IEAgDCRAOBfHj4fAF+/YD",
  "GjI7LBT4/wnt1sbO4voHBPoMHBwTA/fy9/z48PX6AwcHBQQFBgQB/wAAAP77+fv8+vn7/wcLDggECQsD+Orn6/cHAQAMIS8zJxX+",
  "/gXv3c7P2+39APgDEBcYEQb7+P379vX0+PwCBAQFBgYFBAL//Pv6+fr8/f8FCQwLCgYCBAL57+rt9P0LCAkUIyssIxQD/wPz5djW",
  "2OPx9/X6BgsTEw4F///++vn28/b6/gEDBAUEAwIA/v79+/z9AQQJCwwIBgUCAf/48O7y+f8JDQwTHyYmIxkM/wH67OLc2dzo8vT0",
  "/QQKEBEMAwD+/fz8+PX1+P0BBAUCAf8A/wEB//z8/gIGCwsIBAIDAgL/9/Hx9PwBCQ0NEx4jIh8YDQIA+e3k4N/g5/Hy8/wBCA0Q",
  "CwUB//39//v39Pf6/wQFA//9/QACAwH9+/wBBgoLCQQAAQEAAPv18vT4/gUNDxEXHBscGxULAf7y6eXl5Obr8O/1/gMKDA0IAgAA",
  "AAD/+/j1+Pr/AwP//fz+AQMEAv/+/wIGCQoGAgH//////Pb09fn/BhASExcYGBkZFw0C++7o5ufo6Ovu7vP9AgkMDAkEAgIBAQD+",
  "+/n5+fr8/f7//wD/AAECAwQGCQgGAwH+/f3+/Pr49vX4/gUKDxEPDxASEhMRCwP99O/v7+/x8vDw8vX5AQYJCgoIBQUEBQQDAf76",
  "+Pf5+/z+//8AAgMFBwcHBAL//vz9+/r49/b1+f0BBwoLCwoKCgwNDg4KBP/59fTz9Pf5+Pj39vf5/QEFCAgIBgMBAAACBAUFBAL/",
  "/fz9AAD/AAABAAAAAQAA/wEAAAAAAAAAAAAAAAAAAAAAAAEAAP8AAAEAAAD/AAAAAf8BAAEAAAD/AQABAAAAAP8BAAAAAAAAAP8A",
  "AQAA///+//7+/v/+/v/+//7///8AAQEBAwMEBwYHCAgHBgUCAP78+vr59/j5+vr9/P7+AAABAQEBAAEBAgICAgICAgEBAQEAAP//",
  "/wD////+/v7+/v7//v///wAAAAACAwQEBgcHCQoJBwYFAgD9+/r49/b3+fn6/Pz+/wAAAAEBAgICAwMDAwECAgEBAQAAAAD/AP8A",
  "AP////7+/f3+/v7+////AAABAQMDBAUHCAkKCgkIBwQA//z4+Pf29vf3+Pr8/P7/AAABAgICAgMDAwMCAgIBAAAA/////wAAAQAB",
  "AAABAP/+/f39/P38/f7+/wAAAgMEBQcJCgwMDAoKBwQA/vj39fT09fb2+fv7/P//AQIDBAUGBQQEBAEA//79/P39/v7/AAEBAgMD",
  "BAQDAwIA//37+vr5+vr7/f//AQMEBgkKCw0PDg0MCAIA+/X08vHy9PX3+fv8/wECBAUGBgcHBAMCAP/+/Pz8+/z+/v7/AAEBAgID",
  "BAUEBAMBAf/+/fv5+fj6+/z/AQMEBwoMDhESEA8MBQD89fLx7vDx9PX4+/0AAwQHCAgHBgUCAP/+/f38/P39/v7/AAD/AAABAQIB",
  "AwMDAwMEAwIA/v37+vj4+fv8AAIEBwoNDxISEA4JAf738vDt7vDz9vn8/wEEBwgJCQYEAgD8/Pr7+/z9/f7/AAABAQAA///+AAEB",
  "AgMFBQUHBwcEAv/79/Xz9ff6/QAFCQ0SFhgZFhIKAfru6ejm6Ozx9/sAAwYLDA0NCwYB/Pn19vf4+/3+/wEDBAYHBQP//fv5+/3+",
  "AAICBAYICgsJBgP9+PXy8/T3+vwBBgsSFhoaGBQKAfrw6ubl5+zz+f0DBwoNDQ4MCQX9+PTz9Pb6/P8CAgQGCAoJCAT/+vf19ff5",
  "+/7/AAMHDA8RDwsD+/fz8PHy9PT4AQcRGyAiHhkQA//16eTg3uLr9/8GDQsNDQ0MCQb+9fHx8vf6/wECAgIEBwgICAUC//v5+fn5",
  "/P7//wABBAcNDQ0LA/z49PX2+Pnz+f4GFCEiHhYQAv4E9O3m39zl9gEECwkFCQsOCAX/9fL19vn7/P0AAwQFBgYEAwMC//79/Pz8",
  "+/r6+/8CBAcICgkNDwkA/O7u8fv79v/8/xktKyUXD/QBCvDp2dXT6wQEAAkCBhQVDv799PP4+vX2+v4ABQcDBAMDAgEA/wAAAP//",
  "//39//z6/f8DCQwIBQgLBAoA7+rw/vkFBvb+IigqHBP57Bn87d7W1+UKBvP+BwcXEwnz+P/3+/X08/4DAgMEAwMDAv7+////AAEB",
  "AQID//38/Pz9AP38CA0QCwwE+RIJ+Ojr7/QUFe39Kyk9Hxnb+Czr4sTV1/wX6ecMGRUVBPbwDPzt8fD4/Ab//QUIBQIA/v4A/v3+",
  "/wECAwIAAQIA/fz6+wEC+gAGDRAODPQFEAHz6+zuChz97iEiNiUa8uIs+OfQ0tzqGPXl/xUTFQn67gMG8fPu9/sFBPwCBQUEAf/+",
  "AP///f//AQICAQEBAgL//Pn5/gT/+AMJExEPAfUTDPro6ej5GhfnCTEvQx8a0gsj4dy71c8GEeLsDhgaFgPv8Q758u3v9wAJ/v0C",
  "BwcFAf7+AAD//v7/AAICAQAAAgP/+/r7/wMB9wIKEA8MA/UQDfvq6er5ExfuBC8pPh4c3gEg4+LA19H9EOntCBUXFgXz8Qr89PDv",
  "9/4J//4CBwYFAP7+AQD//v7/AQICAgEAAgMA/Pn4+wAD+fsHDRUODfkDEwPy5untBRkG8CQsOzMfBN4j++HOxtbeD/no/RQXGQz8",
  "7gAF8fLt9fsFBf0CBwkGAv7/AP79/f0AAf8BAQMDAQABAv/9+vr8AP36AgYODg4E/AsH+/Dt7vgOEPgMJCYyGxbrAw/o4c7c3vsE",
  "7vYLExINAvj3BPjz8vb9AQYBAQUHBAIA//7//v39/gAAAAAAAgMCAQEDAgD9+vn7//z5AAUNDg8F/Q0H/fHt7fgOEPkNJCcyHxfs",
  "BA7o4M3c3fsE7vYLExILAPb3A/by8vf9BAgCAgYHBAH9/P7//v8AAAEBAQD/AAAAAAEBAgMDAf37+/3++/sCBQsLC/8DDAP78/Lz",
  "AA8E/BYbJSEWBPAR+urf3eTtBvvyAQ4NDAP88v7+9fb2/QAHBgIDBAQA/fz7/v/+AAECAgIB//7+/f4AAAEDBQUDAf77+/789/wC",
  "BgsLB/8MCwH48/L3Cwz5Bx0dKBkT8QIN6+Xa4+L8BvP3Cg0NB//z9AH39fb8AAQIBAIEBQH//Pv8/v7/AAIDAgEAAP7+/v4AAQIC",
  "AwQDAv/8/P79+fsAAwgICP8IDQL89/f1BQ39/hYXHhgT+fgQ9evj5+j2B/n1BQoIBgD49AD99/n8AAMIAwECAwH//vz8////AAEB",
  "AgIAAAD+/v7/AAEBAgIEBAL//v3+/vv4/QMHBgcIAg8K//L2+vkJCfgJICAhFw/vCAfq59zf5AEC9P4FBBAL/PH3+fb/+fj+BQcI",
  "BQEBAQH//fv8/gAAAAECAgIBAP////7//wABAwMEAgEA/wD++vf6/gIFCP8GDAwJAfjt/QL8BAL9FyQmGBUE9A/27OTX3e4C/AED",
  "/AsQBQP38vL8/Pv//AEGCQcGAf/+/v39/f3+/wEBAQEBAQAA//7+/v4AAQIEBAIDAwMB//j2+Pz/BQAACAsSEQz1+PTyBv71AAUW",
  "LDglFBXtC//m6cvN3fX9CAn7BQ0HEv3z7+vz/AL+AwEDCAoHBf/9+/z8/P3+/wECAgICAQAA/v79/gAAAQIDBAUEAwD9+fr6/P79",
  "/QADDBAQBQT49wD4/vz0/gkXIyobDhD1B/7s8dva4/L7CAsCBwMBCgD+9vDy9vsABQMEBAQFBQIB/fv7/Pz//wACAgICAQH//v38",
  "/v4AAQMEBQYDAf79/Pz8+vr7/AQKDg8OBQEB+QD99fn0+AcTHSMiEBME+wjx8erb4ejx/gwICwkABgH///j18/P3/wIGCAYGBAIB",
  "AP/9+/v7/f4BAgMDAgIAAP/+/f3+/wECBAQDAwIAAP79/Pv7+v4BBQgJCAcFAgMA/P719fn6BA4TFhkODQv9A/n09Onq7fL6BQcL",
  "DQUFAP3++vn5+Pj7/gADBQcGBAEB//7+/f39/v8AAAIBAwICAf///vz+/v8BAgIDAwMDAwL//vv7+fv9/wIEBgcHCAgHAwL9+Pfz",
  "9fv/CQ8RFRQMDgX/AfT08Oru7/T8AwcNCwkHAP76+Pn4+fr7/QACBAUFBAIB//79/v3+//8AAAEBAQEAAQAA///+//4A//8BAQIC",
  "AwICAgH//v78/f3+AAIEBQUHBgYGAgH9+fj1+P0BCAwPERALCwX/APf18u7w8fX8AQQJCQcGAf78+vr5+vv9/QACAwMDAwICAP//",
  "/v7+/v//AAABAQEBAAEAAAAA////AP8AAAABAgECAgIBAP/+/fv8/v4BAwQFBgcGBgYDAf339/X4/QIJDxETEgwMBQD/9vTx7e/w",
  "8/r/BQoJCAcBAPz5+vn5+/z8/wACBAMEAgIB//7+/v////8AAAEAAQEBAAEA/wAAAAAAAAAAAAAAAQEBAgEBAAD//v39/v8AAQME",
  "BQYGBQUEAf/7+Pn4+/8DCQ0PEA8KCAQB/vj39PDx8/X5/wMHBwcGAgD++/v7+vv8/f//AQICAwIC//////8AAAAAAf8AAQAAAAAB",
  "AAEAAAAA/wABAAAAAAAB/wAAAAAAAAAAAf8AAAAAAAAAAAAAAP8AAAEAAf//AAABAQEAAAAAAQAAAP8AAAEAAAAAAAEAAAAAAAH/",
  "AAABAAD/AAAAAP8AAAAAAAAAAf8AAAAA/wEAAAABAAAAAAD/AAAAAQAAAAEB/wAA/wAAAP8AAAAAAAABAAAAAAAAAAD/AQAAAP//",
  "AAAAAAAAAAAAAQAAAQAAAAAA/wH/AAEAAAAAAAABAAD//wAAAAD/AQAA/wAAAAAAAQAAAAAAAAABAQIB/AEAAQEAAQABAQH/AP8A",
  "AQEBAf7/AgECAQIAAQID/wIDAQIAAgAAAP///v/+/v/+/f/+////AAAA/f8AAAABAP/+AP8AAQEA/wD//wAA/wH///8A/wAAAQAA",
  "AQAAAAH/AAAAAAABAAAAAgAAAP8AAAABAAAAAP8BAf8BAQAAAAEBAQECAQIBAgECAwECAgE=",
].join("");

function helloWorld8k(): number[] {
  const bytes = Buffer.from(HELLO_WORLD_8K_S8, "base64");
  return Array.from(new Int8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength), (x) => x / 128);
}

/** 2x linear-interpolation upsampling (8 kHz -> 16 kHz). */
function upsample2(samples: readonly number[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < samples.length; i++) {
    const a = samples[i] ?? 0;
    out.push(a, (a + (samples[i + 1] ?? 0)) / 2);
  }
  return out;
}

function silence(n: number): number[] {
  return new Array<number>(n).fill(0);
}

function whiteNoise(n: number, amplitude: number): number[] {
  let seed = 12345;
  return Array.from({ length: n }, () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return (seed / 2147483648 - 0.5) * 2 * amplitude;
  });
}

function tone(n: number, hz: number, sampleRate = 16000): number[] {
  return Array.from({ length: n }, (_, i) => 0.3 * Math.sin((2 * Math.PI * hz * i) / sampleRate));
}

const VERSIONS = ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"] as const;

describe("model registry", () => {
  it("lists the three Silero VAD versions (and no longer the bare 'silero-vad')", () => {
    expect([...modelIds].sort()).toEqual([...VERSIONS]);
    expect(modelIds).not.toContain("silero-vad");
  });

  it("creates a fresh instance on every call, releasable once", async () => {
    const a = await createModelById("silero-vad-v5");
    const b = await createModelById("silero-vad-v5");
    expect(a).not.toBe(b);
    expect(a.id).toBe("silero-vad-v5");
    expect(a.description).toContain("v5");
    expect(a.description).not.toContain("\n");
    await a.release();
    await a.release(); // idempotent
    await expect(a.infer(a.inputExample)).rejects.toThrow(/released/);
    // The other instance is unaffected.
    expect(((await b.infer(b.inputExample)) as SileroVadOutput).speech).toBe(true);
    await b.release();
  });

  it("release waits for runs already queued", async () => {
    const m = await createModelById("silero-vad-v6");
    const run = m.infer({ samples: synthesizeVowel(16000) });
    const released = m.release();
    expect(((await run) as SileroVadOutput).speech).toBe(true);
    await released;
  });

  it("rejects an unknown model id with UnknownModelError", async () => {
    for (const id of ["no-such-model", "silero-vad", "constructor", "__proto__"]) {
      const err: unknown = await createModelById(id).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UnknownModelError);
      expect((err as UnknownModelError).modelId).toBe(id);
      expect((err as Error).message).toMatch(/unknown model/);
      expect((err as UnknownModelError).known).toEqual(modelIds);
    }
  });
});

const models = new Map<string, InferenceModel>();
beforeAll(async () => {
  for (const id of VERSIONS) models.set(id, await createModelById(id));
});
afterAll(async () => {
  for (const m of models.values()) await m.release();
});

function vad(id: string) {
  const model = models.get(id)!;
  return { model, infer: (input: unknown) => model.infer(input) as Promise<SileroVadOutput> };
}

describe("the versions are distinct models", () => {
  it("give different probabilities for the same input", async () => {
    const samples = [...silence(2000), ...helloWorld8k(), ...silence(2000)];
    const outs = await Promise.all(VERSIONS.map((id) => vad(id).infer({ samples, sampleRate: 8000 })));
    expect(outs.map((o) => o.model)).toEqual([...VERSIONS]);
    expect(outs[0]!.probabilities).not.toEqual(outs[1]!.probabilities);
    expect(outs[1]!.probabilities).not.toEqual(outs[2]!.probabilities);
    expect(outs[0]!.probabilities).not.toEqual(outs[2]!.probabilities);
  });

  it("run concurrently side by side with the same results as one at a time", async () => {
    // onnxruntime-web's wasm runs interleaved across sessions corrupt each other unless serialised.
    const inputs = [synthesizeVowel(16000), whiteNoise(8000, 0.1), upsample2(helloWorld8k())];
    const sequential: SileroVadOutput[] = [];
    for (const id of VERSIONS) for (const samples of inputs) sequential.push(await vad(id).infer({ samples }));
    const concurrent = await Promise.all(VERSIONS.flatMap((id) => inputs.map((samples) => vad(id).infer({ samples }))));
    expect(concurrent).toEqual(sequential);
  });
});

describe.each(VERSIONS)("%s inference", (id) => {
  it("accepts its inputExample (JSON round-trip) and finds speech in it", async () => {
    const { model, infer } = vad(id);
    const example: unknown = JSON.parse(JSON.stringify(model.inputExample));
    const out = await infer(example);
    expect(out.model).toBe(id);
    expect(out.speech).toBe(true);
    expect(out.probabilities).toHaveLength(Math.ceil(8000 / 512));
    expect(JSON.parse(JSON.stringify(out))).toEqual(out);
  });

  it("detects real speech at 8 kHz and places the segment where the words are", async () => {
    const { infer } = vad(id);
    const pad = silence(2000); // 250 ms at 8 kHz
    const clip = helloWorld8k();
    const out = await infer({ samples: [...pad, ...clip, ...pad], sampleRate: 8000 });
    const speechStartMs = 250;
    const speechEndMs = 250 + (clip.length / 8000) * 1000; // ~922 ms
    expect(out.frameSamples).toBe(256);
    expect(out.speech).toBe(true);
    expect(out.segments).toHaveLength(1);
    const seg = out.segments[0]!;
    expect(seg.startMs).toBeGreaterThanOrEqual(speechStartMs - 64);
    expect(seg.startMs).toBeLessThanOrEqual(speechStartMs + 150);
    expect(seg.endMs).toBeGreaterThanOrEqual(speechEndMs - 150);
    expect(seg.endMs).toBeLessThanOrEqual(speechEndMs + 150);
    expect(seg.maxProbability).toBeGreaterThan(0.9);
    // The leading silence is not speech.
    expect(Math.max(...out.probabilities.slice(0, 6))).toBeLessThan(0.1);
  });

  it("detects the same speech upsampled to 16 kHz", async () => {
    const { infer } = vad(id);
    const pad = silence(2000);
    const out = await infer({ samples: upsample2([...pad, ...helloWorld8k(), ...pad]) });
    expect(out.sampleRate).toBe(16000);
    expect(out.frameSamples).toBe(512);
    expect(out.speech).toBe(true);
    expect(out.maxProbability).toBeGreaterThan(0.9);
    expect(out.speechRatio).toBeGreaterThan(0.3);
    expect(out.speechRatio).toBeLessThan(0.8);
  });

  it("scores the synthetic voiced vowels as speech, at 16 and 8 kHz", async () => {
    const { infer } = vad(id);
    const out = await infer({ samples: synthesizeVowel(16000) });
    expect(out.speech).toBe(true);
    expect(out.speechRatio).toBeGreaterThan(0.7);
    expect(out.maxProbability).toBeGreaterThan(0.9);
    const out8k = await infer({ samples: synthesizeVowel(8000, 8000), sampleRate: 8000 });
    expect(out8k.speech).toBe(true);
    expect(out8k.speechRatio).toBeGreaterThan(0.7);
  });

  it("does not find speech in silence, white noise or a pure tone", async () => {
    const { infer } = vad(id);
    for (const samples of [silence(16000), whiteNoise(16000, 0.1), tone(16000, 440)]) {
      const out = await infer({ samples });
      expect(out.speech).toBe(false);
      expect(out.segments).toEqual([]);
      expect(out.maxProbability).toBeLessThan(0.2);
      expect(out.probabilities).toHaveLength(Math.ceil(16000 / 512));
    }
  });

  it("gives different outputs for different inputs", async () => {
    const { infer } = vad(id);
    const a = await infer({ samples: synthesizeVowel(16000) });
    const b = await infer({ samples: whiteNoise(16000, 0.1) });
    expect(a.probabilities).not.toEqual(b.probabilities);
    expect(a.meanProbability).toBeGreaterThan(b.meanProbability + 0.5);
  });

  it("is deterministic (a pure function of its input), also under concurrent calls", async () => {
    const { infer } = vad(id);
    const inputs = [synthesizeVowel(3000), whiteNoise(3000, 0.2), helloWorld8k().slice(0, 3000)];
    const sequential: SileroVadOutput[] = [];
    for (const samples of inputs) sequential.push(await infer({ samples }));
    const concurrent = await Promise.all(inputs.map((samples) => infer({ samples })));
    expect(concurrent).toEqual(sequential);
    expect(await infer({ samples: inputs[0] })).toEqual(sequential[0]);
    // A fresh instance of the same version agrees.
    const fresh = await createModelById(id);
    try {
      expect(await fresh.infer({ samples: inputs[2] })).toEqual(sequential[2]);
    } finally {
      await fresh.release();
    }
  });

  it("pads a partial last frame and honours the threshold", async () => {
    const { infer } = vad(id);
    const samples = synthesizeVowel(512 * 3 + 100);
    const low = await infer({ samples, threshold: 0.05 });
    const high = await infer({ samples, threshold: 0.99 });
    expect(low.probabilities).toHaveLength(4);
    expect(low.durationMs).toBeCloseTo((1636 / 16000) * 1000, 3);
    expect(low.probabilities).toEqual(high.probabilities);
    expect(low.speechRatio).toBeGreaterThanOrEqual(high.speechRatio);
    expect(low.speech).toBe(true);
    expect(high.speech).toBe(false);
  });
});

describe.each(VERSIONS)("%s input validation", (id) => {
  const bad: Array<[string, unknown]> = [
    ["null", null],
    ["a string", "hello"],
    ["an array", [0, 0, 0]],
    ["missing samples", { sampleRate: 16000 }],
    ["non-numeric samples", { samples: new Array(512).fill("0") }],
    ["null sample", { samples: [...silence(511), null] }],
    ["too few samples", { samples: silence(511) }],
    ["too few samples at 8 kHz", { samples: silence(255), sampleRate: 8000 }],
    ["sample out of range", { samples: [...silence(511), 1.5] }],
    ["unsupported sample rate", { samples: silence(1024), sampleRate: 44100 }],
    ["threshold out of range", { samples: silence(512), threshold: 1 }],
    ["unknown field", { samples: silence(512), extra: true }],
    ["longer than 30 s", { samples: silence(30 * 8000 + 1), sampleRate: 8000 }],
  ];

  for (const [name, input] of bad) {
    it(`rejects ${name} with ModelInputError`, async () => {
      const { infer } = vad(id);
      const err: unknown = await infer(input).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ModelInputError);
      expect((err as Error).message).toContain(id);
      const issues = (err as ModelInputError).issues;
      expect(Array.isArray(issues) && issues.length > 0).toBe(true);
    });
  }

  it("rejects oversized input and caps the reported issues", async () => {
    const { infer } = vad(id);
    await expect(infer({ samples: silence(30 * 16000 + 1) })).rejects.toBeInstanceOf(ModelInputError);
    const err: unknown = await infer({ samples: new Array(5000).fill("x") }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelInputError);
    const issues = (err as ModelInputError).issues as unknown[];
    expect(issues.length).toBeLessThanOrEqual(20);
    expect((err as Error).message.length).toBeLessThan(5000);
  });

  it("still works after rejecting bad input", async () => {
    const { infer } = vad(id);
    await expect(infer({ samples: [] })).rejects.toBeInstanceOf(ModelInputError);
    expect((await infer({ samples: synthesizeVowel(8000) })).speech).toBe(true);
  });
});
