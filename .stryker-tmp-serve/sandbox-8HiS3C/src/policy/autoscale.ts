/**
 * The autoscaling signal: how many replicas a deployment should have, from the
 * load its replicas report. Ray Serve's rule and parameter names where they
 * match: desired = ceil(current · (1 + (ratio − 1) · factor)) with ratio =
 * average ongoing requests over the look-back window / (target × current),
 * clamped to [min, max]; a change must be wanted for the whole up- or
 * down-scale delay before it is announced, except the first replica of a
 * deployment at zero, wanted at once. The ongoing figure includes requests the
 * edge holds for want of a replica (src/proxy/serve/admit.ts). Pure; time passed in.
 */
// @ts-nocheck


export interface AutoscalingConfig {
  minReplicas: number;
  maxReplicas: number;
  /** Ray's target_ongoing_requests: ongoing + queued per replica the fleet aims at. */
  targetOngoingRequests: number;
  /** Ray's look_back_period_s. */
  lookBackPeriodS: number;
  /** Ray's upscale_delay_s / downscale_delay_s. */
  upscaleDelayS: number;
  downscaleDelayS: number;
  /** Ray's upscaling_factor / downscaling_factor (smoothing, 1 = jump to the raw figure). */
  upscalingFactor: number;
  downscalingFactor: number;
}

export interface AutoscaleDecision {
  /** Replicas ready now. */
  current: number;
  /** The announced target. */
  desired: number;
  /** What the load asks for this instant, before the delays. */
  raw: number;
  averageOngoing: number;
  /** Since when a different figure has been wanted (null: none pending). */
  pendingSince: number | null;
  /**
   * False while `current` is a guess (replicas restored at a restart of the routing
   * object, not heard from yet; at most STALE_AFTER_MS): `desired` is then the target
   * held, or before any the guess clamped, and a controller should not act on it.
   */
  settled: boolean;
}

export class Autoscaler {
  readonly #samples: { at: number; ongoing: number }[] = [];
  #desired: number | null = null;
  #pending: { direction: "up" | "down"; since: number } | null = null;

  /** Records the fleet's total ongoing + queued requests at `now`. */
  sample(now: number, totalOngoing: number, lookBackS: number): void {
    this.#samples.push({ at: now, ongoing: totalOngoing });
    const horizon = now - lookBackS * 1000;
    while (this.#samples.length > 0 && this.#samples[0]!.at < horizon) this.#samples.shift();
  }

  /**
   * `settled`: false while `current` is a guess (members restored at a restart that
   * have not reported yet). The first decision latches the starting point, so an
   * unsettled one changes nothing: it answers the target held (before any, clamp(current)).
   */
  decide(now: number, current: number, cfg: AutoscalingConfig, settled = true): AutoscaleDecision {
    if (!settled) {
      const held = this.#desired ?? clamp(current, cfg);
      return { current, desired: held, raw: held, averageOngoing: 0, pendingSince: this.#pending?.since ?? null, settled: false };
    }
    const horizon = now - cfg.lookBackPeriodS * 1000;
    const recent = this.#samples.filter((s) => s.at >= horizon);
    const averageOngoing = recent.length ? recent.reduce((a, s) => a + s.ongoing, 0) / recent.length : 0;
    const raw = rawDesired(current, averageOngoing, cfg);
    this.#desired ??= clamp(current, cfg);
    if (current === 0 && raw > this.#desired) {
      // Scale from zero: requests are held at the edge for a replica, so replicas are
      // wanted at once, not after upscaleDelayS (Knative's activator, Ray's min_replicas 0),
      // and while none is ready yet the count follows the held demand as it grows.
      this.#desired = raw;
      this.#pending = null;
    } else if (raw === this.#desired) {
      this.#pending = null;
    } else {
      const direction = raw > this.#desired ? "up" : "down";
      if (this.#pending?.direction !== direction) this.#pending = { direction, since: now };
      const delayS = direction === "up" ? cfg.upscaleDelayS : cfg.downscaleDelayS;
      if (now - this.#pending.since >= delayS * 1000) {
        this.#desired = raw;
        this.#pending = null;
      }
    }
    return { current, desired: this.#desired, raw, averageOngoing, pendingSince: this.#pending?.since ?? null, settled: true };
  }
}

function clamp(n: number, cfg: AutoscalingConfig): number {
  return Math.min(cfg.maxReplicas, Math.max(cfg.minReplicas, n));
}

export function rawDesired(current: number, averageOngoing: number, cfg: AutoscalingConfig): number {
  if (current === 0) return clamp(averageOngoing > 0 ? Math.ceil(averageOngoing / cfg.targetOngoingRequests) : 0, cfg);
  // With a smoothing factor below 1, ceil keeps one replica forever: nothing at all to do
  // over the look-back window takes the last one away (as Ray Serve does for min_replicas 0).
  if (current === 1 && averageOngoing === 0) return clamp(0, cfg);
  const ratio = averageOngoing / (cfg.targetOngoingRequests * current);
  const factor = ratio > 1 ? cfg.upscalingFactor : cfg.downscalingFactor;
  // current · (1 + (ratio − 1) · factor), written so that whole results stay whole
  // (10 · 0.3 is 3.0000000000000004 in floating point, and ceil would make it 4).
  const wanted = current + (averageOngoing / cfg.targetOngoingRequests - current) * factor;
  return clamp(Math.ceil(wanted - 1e-9), cfg);
}

/**
 * Whether the webhook should hear of `decision.desired`. Before any announcement
 * the fleet's size stands in for the last one: a routing object that (re)starts
 * at a steady state stays quiet, but one whose first look already wants a
 * different size says so (it used to record that silently, and a scale-up seen
 * first by a late alarm never reached the webhook).
 */
export function shouldAnnounce(lastAnnounced: number | null, decision: Pick<AutoscaleDecision, "current" | "desired">): boolean {
  return decision.desired !== (lastAnnounced ?? decision.current);
}
