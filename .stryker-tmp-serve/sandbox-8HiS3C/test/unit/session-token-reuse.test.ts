/** SessionTokens.reusable (session-token.ts): the token issue() hands out again, known without a promise. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { SessionTokens, deriveSessionTokenKey } from "../../src/proxy/serve/session-token.ts";

const T0 = Date.UTC(2026, 11, 1);

describe("SessionTokens.reusable", () => {
  it("is issue()'s token while it would be handed out again, and undefined when issue() would mint", async () => {
    const key = await deriveSessionTokenKey("master");
    let t = T0;
    const tokens = new SessionTokens(() => Promise.resolve(key), () => t);
    expect(tokens.reusable("chat", "s1", "r1", 600)).toBeUndefined();
    const token = await tokens.issue("chat", "s1", "r1", 600);
    expect(tokens.reusable("chat", "s1", "r1", 600)).toBe(token);
    // Another replica, deployment or session: a new token.
    expect(tokens.reusable("chat", "s1", "r2", 600)).toBeUndefined();
    expect(tokens.reusable("other", "s1", "r1", 600)).toBeUndefined();
    expect(tokens.reusable("chat", "s2", "r1", 600)).toBeUndefined();
    // Past half its life: issue() mints afresh, so nothing is reusable.
    t += 301_000;
    expect(tokens.reusable("chat", "s1", "r1", 600)).toBeUndefined();
    const fresh = await tokens.issue("chat", "s1", "r1", 600);
    expect(fresh).not.toBe(token);
    expect(tokens.reusable("chat", "s1", "r1", 600)).toBe(fresh);
  });
});
