/** The verdict on one dispatch attempt (src/proxy/serve/dispatch.ts), rule by rule. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { UNAUTHORIZED_REJECTION, type Load } from "../../src/protocol/index.ts";
import { judgeAnswer, judgeLostConnection, sessionFollowsRetry, type AnswerHead } from "../../src/proxy/serve/dispatch.ts";

const load = (over: Partial<Load> = {}): Load => ({ seq: 1, ongoing: 5, queued: 0, max: 5, state: "ready", ...over });
const head = (over: Partial<AnswerHead> = {}): AnswerHead => ({ status: 200, rejected: null, load: load(), engineKey: false, ...over });

describe("judgeAnswer", () => {
  it("takes any answer that is not a refusal as accepted, error statuses included", () => {
    for (const status of [200, 204, 400, 404, 429, 500, 502]) expect(judgeAnswer(head({ status })), String(status)).toEqual({ kind: "accepted" });
    // A 503 without the rejection header is the replica's own answer (an app error), not a refusal.
    expect(judgeAnswer(head({ status: 503 }))).toEqual({ kind: "accepted" });
  });

  it("a full replica is full, and honest when its load says so", () => {
    expect(judgeAnswer(head({ status: 503, rejected: "capacity" }))).toEqual({ kind: "rejected", why: "full", lying: false });
  });

  it("a draining or shutting-down replica is gone", () => {
    expect(judgeAnswer(head({ status: 503, rejected: "draining", load: load({ state: "draining", ongoing: 0 }) }))).toEqual({ kind: "rejected", why: "gone", lying: false });
  });

  it("refusing for capacity while claiming room is a lie", () => {
    expect(judgeAnswer(head({ status: 503, rejected: "capacity", load: load({ ongoing: 2, queued: 1 }) }))).toEqual({ kind: "rejected", why: "full", lying: true });
    // Claiming room but not ready (draining) is no lie about capacity.
    expect(judgeAnswer(head({ status: 503, rejected: "capacity", load: load({ ongoing: 0, state: "draining" }) }))).toMatchObject({ lying: false });
  });

  it("a garbled or missing load header on a refusal counts as a lie, whatever the reason", () => {
    expect(judgeAnswer(head({ status: 503, rejected: "capacity", load: null }))).toEqual({ kind: "rejected", why: "full", lying: true });
    expect(judgeAnswer(head({ status: 503, rejected: "draining", load: null }))).toEqual({ kind: "rejected", why: "gone", lying: true });
  });

  it("a 401 refusing the edge's signature, or any 401 to a dispatch carrying the engine's key, refuses the edge's credentials", () => {
    expect(judgeAnswer(head({ status: 401, rejected: UNAUTHORIZED_REJECTION }))).toEqual({ kind: "credential_refusal" });
    expect(judgeAnswer(head({ status: 401, engineKey: true }))).toEqual({ kind: "credential_refusal" });
    // The app's own 401 (no engine key, no rejection header) is the client's answer.
    expect(judgeAnswer(head({ status: 401 }))).toEqual({ kind: "accepted" });
  });
});

describe("judgeLostConnection", () => {
  const lost = { deadline: false, tooSlow: false, overLimit: false, clientGone: false, safeToRepeat: true };

  it("blames the deadline first, then the client's body, then the replica", () => {
    expect(judgeLostConnection({ ...lost, deadline: true, tooSlow: true })).toBe("deadline");
    expect(judgeLostConnection({ ...lost, tooSlow: true, overLimit: true })).toBe("too_slow");
    expect(judgeLostConnection({ ...lost, overLimit: true })).toBe("over_limit");
    // A client whose upload broke off is not the replica's fault: it is not retried, nor blamed.
    expect(judgeLostConnection({ ...lost, clientGone: true })).toBe("client_gone");
    expect(judgeLostConnection({ ...lost, overLimit: true, clientGone: true })).toBe("over_limit");
  });

  it("retries a lost connection only when the request may run twice", () => {
    expect(judgeLostConnection(lost)).toBe("retry");
    expect(judgeLostConnection({ ...lost, safeToRepeat: false })).toBe("lost");
  });
});

describe("sessionFollowsRetry", () => {
  it("moves the session only when its replica was gone or draining, never when it was merely full", () => {
    expect(sessionFollowsRetry("gone")).toBe(true);
    expect(sessionFollowsRetry("full")).toBe(false);
    expect(sessionFollowsRetry(undefined)).toBe(false);
  });
});
