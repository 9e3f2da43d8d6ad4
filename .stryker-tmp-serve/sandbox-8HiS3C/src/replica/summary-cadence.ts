/**
 * When a replica's prefix-cache summary goes into its reports (`prefix_cache`,
 * docs/protocol.md §1, "Prefix-cache summaries"): only when it differs from what
 * the edge last accepted, and at least every SUMMARY_RESEND_MS, so a routing
 * object that restarted (it keeps summaries in memory only) learns it again.
 * A report without the field leaves the edge's copy as it is; `null` drops it.
 * This module only decides; EdgeClient and NodeReporter send.
 */
// @ts-nocheck

import type { CacheSummaryWire } from "../prefix/cache-summary.ts";
import { SUMMARY_RESEND_MS } from "../protocol/index.ts";

/** What the replica's prefix cache holds now; undefined when it has no summary to give (yet, or any more). */
export type CacheSummaryProvider = () => CacheSummaryWire | undefined;

/** The field a report carries: a summary, null (none any more), or nothing to say (undefined). */
export type SummaryField = CacheSummaryWire | null | undefined;

export interface SummaryCadenceOptions {
  resendMs?: number;
  now?: () => number;
  log?: (msg: string) => void;
}

export class SummaryCadence {
  readonly #provider: CacheSummaryProvider;
  readonly #resendMs: number;
  readonly #now: () => number;
  readonly #log: (msg: string) => void;
  /** What the edge holds, as far as this replica knows: null for none (a register clears it). */
  #held: CacheSummaryWire | null = null;
  #sentAt = 0;
  /** When the field now pending first became due (ordering within a node report's budget). */
  #dueSince: number | undefined;
  #failing = false;
  #enabled = true;

  constructor(provider: CacheSummaryProvider, options: SummaryCadenceOptions = {}) {
    this.#provider = provider;
    this.#resendMs = options.resendMs ?? SUMMARY_RESEND_MS;
    this.#now = options.now ?? Date.now;
    this.#log = options.log ?? (() => undefined);
  }

  /** Whether summaries go out at all (an older edge refuses them: disable()). */
  get enabled(): boolean {
    return this.#enabled;
  }

  /** No more summaries: the edge refused the field (it predates it). */
  disable(): void {
    this.#enabled = false;
    this.#dueSince = undefined;
  }

  /** What the next report should carry, read from the provider now. */
  next(): SummaryField {
    if (!this.#enabled) return undefined;
    let current: CacheSummaryWire | undefined;
    try {
      current = this.#provider();
      this.#failing = false;
    } catch (err) {
      // A summary that cannot be built is none: say so once, not every report.
      if (!this.#failing) this.#log(`prefix-cache summary unavailable: ${String(err)}`);
      this.#failing = true;
      current = undefined;
    }
    const field = this.#fieldFor(current);
    if (field === undefined) this.#dueSince = undefined;
    else this.#dueSince ??= this.#now();
    return field;
  }

  /** Since when a field has been waiting to go out (epoch ms); undefined when none is due. */
  get dueSince(): number | undefined {
    return this.#dueSince;
  }

  /** The edge applied a report carrying `sent` (what next() gave for it). */
  accepted(sent: SummaryField): void {
    if (sent === undefined) return;
    this.#held = sent;
    this.#sentAt = this.#now();
    this.#dueSince = undefined;
  }

  /** The replica registered (again): the edge holds no summary of it now. */
  reset(): void {
    this.#held = null;
    this.#sentAt = 0;
  }

  #fieldFor(current: CacheSummaryWire | undefined): SummaryField {
    if (current === undefined) return this.#held === null ? undefined : null;
    if (this.#held === null || !same(current, this.#held)) return current;
    return this.#now() - this.#sentAt >= this.#resendMs ? current : undefined;
  }
}

function same(a: CacheSummaryWire, b: CacheSummaryWire): boolean {
  return a.v === b.v && a.k === b.k && a.n === b.n && a.block === b.block && a.bits === b.bits;
}
