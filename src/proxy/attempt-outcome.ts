/**
 * How one dispatch attempt ended, judged from what came back: the rules the attempt
 * loop (dispatch.ts) applies, pure so each can be tested alone. The loop does what a
 * verdict says (count a failure towards ejection, try another replica, answer the
 * client); these functions only decide.
 */
import { UNAUTHORIZED_REJECTION, type Load } from "../protocol/index.ts";

/** A replica's response head, as the rules read it. */
export interface AnswerHead {
  status: number;
  /** The x-switchyard-rejected header (null when absent). */
  rejected: string | null;
  /** The parsed load header; null when absent or garbled. */
  load: Load | null;
  /** The dispatch carried the engine's own key (an agent registered one). */
  engineKey: boolean;
}

export type AnswerVerdict =
  /** The replica took the request: its answer goes to the client, whatever its status. */
  | { kind: "accepted" }
  /**
   * The replica refused the edge itself: it checks signatures with another key (or a
   * clock far off), or the engine does not take the key its agent registered. Not the
   * client's doing: another replica is tried, and it counts towards ejection.
   */
  | { kind: "credential_refusal" }
  /**
   * The replica did not take it: `full` (at capacity, alive) or `gone` (draining,
   * shutting down). `lying`: it refused for capacity while its load header claims room,
   * or its load header is garbled; a broken replica, which counts towards ejection so
   * it cannot soak up every request's first attempt.
   */
  | { kind: "rejected"; why: "full" | "gone"; lying: boolean };

export function judgeAnswer(head: AnswerHead): AnswerVerdict {
  if (head.status === 401 && (head.rejected === UNAUTHORIZED_REJECTION || head.engineKey)) return { kind: "credential_refusal" };
  if (head.status === 503 && head.rejected !== null) {
    const full = head.rejected === "capacity";
    const { load } = head;
    const lying = !load || (full && load.state === "ready" && load.ongoing + load.queued < load.max);
    return { kind: "rejected", why: full ? "full" : "gone", lying };
  }
  return { kind: "accepted" };
}

/** What is known when the connection to a replica failed before a response head. */
export interface LostConnection {
  /** The deadline for the response head passed (the edge aborted the fetch). */
  deadline: boolean;
  /** The client's body stopped arriving (upload-pace.ts). */
  tooSlow: boolean;
  /** The client's streamed body outgrew the limit. */
  overLimit: boolean;
  /** The client's connection went away while its body was being passed on. */
  clientGone: boolean;
  /** The request may run again elsewhere (safeToRepeat, with a replayable body). */
  safeToRepeat: boolean;
}

/**
 * - `deadline`: a hung replica (504; counts towards ejection).
 * - `too_slow` / `over_limit` / `client_gone`: the client's doing (408 / 413 / its
 *   upload aborted); the replica is not blamed.
 * - `retry`: the replica is unreachable or went away (cool-down, counts towards
 *   ejection) and the request may run elsewhere; `lost`: the same, but it may not (502).
 */
export type LostVerdict = "deadline" | "too_slow" | "over_limit" | "client_gone" | "retry" | "lost";

export function judgeLostConnection(c: LostConnection): LostVerdict {
  if (c.deadline) return "deadline";
  if (c.tooSlow) return "too_slow";
  if (c.overLimit) return "over_limit";
  if (c.clientGone) return "client_gone";
  return c.safeToRepeat ? "retry" : "lost";
}

/**
 * Whether a session follows the replica that served a retry: only when its own
 * replica (the first attempt's) was gone or draining. A full one keeps the session;
 * the next requests spill until the saturation grace period ends (session-affinity.ts).
 */
export function sessionFollowsRetry(firstRefusal: "full" | "gone" | undefined): boolean {
  return firstRefusal === "gone";
}

const IDEMPOTENT_METHODS = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]);

/**
 * Whether a request may run again after its connection to a replica was lost.
 * workerd gives the same error ("Network connection lost.") for a refused
 * connection and for one lost after the request was sent, so the proxy cannot
 * tell whether the replica accepted it.
 */
export function safeToRepeat(method: string, headers: Headers, deploymentIdempotent: boolean): boolean {
  return deploymentIdempotent || IDEMPOTENT_METHODS.has(method) || headers.has("idempotency-key");
}
