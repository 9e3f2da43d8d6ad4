/**
 * Outlier ejection per replica (Envoy's consecutive-failure rule), as each proxy
 * isolate sees it. A failure is a dispatch that got no usable answer: the
 * connection failed, the response head did not come before the deadline, or the
 * replica refused while its own load header claimed room (a lying replica).
 *
 * - Closed: the replica is chosen normally; `ejectAfterFailures` failures in a
 *   row open the breaker.
 * - Open: the replica is skipped for a cool-down, `ejectBaseMs` doubled on each
 *   ejection in a row, at most MAX_EJECT_MS.
 * - Half-open: after the cool-down one dispatch (a probe) may go to it; success
 *   closes the breaker and forgets the ejections, failure opens it again.
 * Pure: time is passed in.
 */
// @ts-nocheck


/** Longest cool-down, however often the replica failed. */
export const MAX_EJECT_MS = 60_000;

export interface BreakerConfig {
  /** Failures in a row that eject a replica; 0 disables ejection. */
  ejectAfterFailures: number;
  /** First cool-down, ms. */
  ejectBaseMs: number;
}

export interface Breaker {
  /** Failures in a row since the last success. */
  failures: number;
  /** Epoch ms before which the replica is ejected (0: not ejected). */
  openUntil: number;
  /** Ejections in a row (sets the cool-down). */
  ejections: number;
  /** A half-open probe is in flight. */
  probing: boolean;
}

export function newBreaker(): Breaker {
  return { failures: 0, openUntil: 0, ejections: 0, probing: false };
}

/** Whether a dispatch may go to the replica now. */
export function breakerAllows(b: Breaker, now: number): boolean {
  if (b.openUntil === 0) return true;
  return now >= b.openUntil && !b.probing;
}

/** Call when a dispatch is sent; marks the half-open probe. */
export function breakerDispatched(b: Breaker, now: number): void {
  if (b.openUntil !== 0 && now >= b.openUntil) b.probing = true;
}

/** A dispatch ended with neither success nor failure (e.g. an honest "full"): a probe may go again. */
export function breakerInconclusive(b: Breaker): void {
  b.probing = false;
}

export function breakerSucceeded(b: Breaker): void {
  b.failures = 0;
  b.openUntil = 0;
  b.ejections = 0;
  b.probing = false;
}

/** Records a failure; returns true when it (re-)ejects the replica. */
export function breakerFailed(b: Breaker, now: number, cfg: BreakerConfig): boolean {
  b.failures++;
  const wasProbe = b.probing;
  b.probing = false;
  if (cfg.ejectAfterFailures === 0) return false;
  // Already ejected: failures of requests sent before the ejection say nothing new.
  if (!wasProbe && b.openUntil !== 0 && now < b.openUntil) return false;
  if (!wasProbe && b.failures < cfg.ejectAfterFailures) return false;
  b.ejections++;
  b.openUntil = now + Math.min(MAX_EJECT_MS, cfg.ejectBaseMs * 2 ** (b.ejections - 1));
  return true;
}

/** Whether the replica is ejected now (for views and metrics). */
export function breakerOpen(b: Breaker, now: number): boolean {
  return b.openUntil !== 0 && (now < b.openUntil || b.probing);
}
