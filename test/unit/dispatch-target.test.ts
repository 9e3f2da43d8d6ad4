/** dispatchTarget (serve/dispatch.ts): dispatchUrl's answer, kept per replica URL, path and query. */
import { describe, expect, it } from "vitest";
import { dispatchTarget, dispatchUrl } from "../../src/proxy/serve/dispatch.ts";

const replicas = ["http://127.0.0.1:39881", "https://gpu-1.example.com/engine/", "https://gpu-7.example.com/engine"];
const paths = ["/v1/completions", "/", "//evil.test/x", "/@127.0.0.1:18555/secret", "/a%20b", "/é", "/../admin", "@127.0.0.1:18555/secret", "rics", ":18555/secret"];
const searches = ["", "?a=1", "?q=a b", "?x=%zz&y"];

describe("dispatchTarget", () => {
  it("says what dispatchUrl says, the first time and from memory", () => {
    for (let round = 0; round < 2; round++) {
      for (const r of replicas) {
        for (const p of paths) {
          for (const q of searches) {
            const u = dispatchUrl(r, p, q);
            const t = dispatchTarget(r, p, q);
            if (u === null) expect(t, `${r} ${p}${q}`).toBeNull();
            else expect(t, `${r} ${p}${q}`).toEqual({ href: u.href, target: u.pathname + u.search });
          }
        }
      }
    }
  });

  it("keeps answers apart per replica URL", () => {
    expect(dispatchTarget("http://127.0.0.1:1", "/x", "")!.href).toBe("http://127.0.0.1:1/x");
    expect(dispatchTarget("http://127.0.0.1:2", "/x", "")!.href).toBe("http://127.0.0.1:2/x");
    expect(dispatchTarget("http://127.0.0.1:1/base", "/x", "")!.href).toBe("http://127.0.0.1:1/base/x");
  });

  it("stays right past its bound (forgets, then checks again)", () => {
    for (let i = 0; i < 10_000; i++) expect(dispatchTarget("http://127.0.0.1:3", `/p${i}`, "?n=1")!.target).toBe(`/p${i}?n=1`);
    expect(dispatchTarget("https://gpu.example.com/engine", "/../admin", "")).toBeNull();
  });
});
