/**
 * The order in which an isolate admits the requests it holds (docs/admission.md):
 * strict priority between bands (higher first, as the Inference Extension ranks
 * them), fair between flows within a band, first come first served within a flow.
 *
 * Fairness is start-time fair queuing: a request's start tag is the later of the
 * band's virtual time and its flow's last finish tag, its finish tag that plus its
 * cost, and the waiting request with the lowest start tag goes first. With a cost
 * of 1 per request the flows take turns; with a cost in tokens a flow of long
 * prompts gets fewer requests through. A flow that was idle starts at the band's
 * virtual time, so it cannot bank credit while away. A cost is an estimate (the
 * prompt and the answer's budget); correct() moves the flow's tags by what the
 * request actually used, once it is known.
 *
 * Before the tags, a flow with fewer requests in service goes first, when the queue
 * is told (`inService`): a flow whose few clients use less than its share of the
 * slots is never kept waiting behind a flow that holds many (max-min fairness in
 * slots; with start tags alone it waited a turn behind every heavier flow's head).
 *
 * Pure: no clock, no I/O. The gate (src/proxy/serve/admit.ts) holds the requests
 * and decides when a slot is free.
 */

/** One held request, as the queue knows it. */
export interface Held<T> {
  readonly priority: number;
  readonly flow: string;
  readonly cost: number;
  readonly value: T;
}

interface Entry<T> extends Held<T> {
  /** Moved only by correct(), with the flow's finish tag. */
  start: number;
  /** Arrival order: equal start tags go first come, first served. */
  readonly seq: number;
}

interface Band<T> {
  /** Each flow's waiting requests, oldest first. */
  readonly flows: Map<string, Entry<T>[]>;
  /** Each flow's last finish tag (kept while it is ahead of the virtual time). */
  readonly finish: Map<string, number>;
  /** The start tag of the last request admitted from this band. */
  virtual: number;
  size: number;
}

export class AdmissionQueue<T> {
  readonly #bands = new Map<number, Band<T>>();
  /** The priorities with requests waiting, highest first. */
  #order: number[] = [];
  #seq = 0;
  #size = 0;
  readonly #inService: (flow: string) => number;

  /** `inService`: a flow's requests in service now (none known: 0 for all, start tags alone). */
  constructor(inService: (flow: string) => number = () => 0) {
    this.#inService = inService;
  }

  get size(): number {
    return this.#size;
  }

  /** Holds `value` at `priority` in `flow`; cost ≥ 0 (1 per request by default). */
  push(priority: number, flow: string, value: T, cost = 1): Held<T> {
    let band = this.#bands.get(priority);
    if (!band) {
      band = { flows: new Map(), finish: new Map(), virtual: 0, size: 0 };
      this.#bands.set(priority, band);
    }
    if (band.size === 0) this.#order = [...this.#order, priority].sort((a, b) => b - a);
    const start = Math.max(band.virtual, band.finish.get(flow) ?? 0);
    const entry: Entry<T> = { priority, flow, cost, value, start, seq: this.#seq++ };
    band.finish.set(flow, start + Math.max(0, cost));
    const list = band.flows.get(flow);
    if (list) list.push(entry);
    else band.flows.set(flow, [entry]);
    band.size++;
    this.#size++;
    return entry;
  }

  /**
   * The request to admit next (removed), or undefined when none waits. `eligible`: only
   * flows it accepts may go (their share is used up otherwise); never a lower band instead.
   */
  shift(eligible?: (flow: string) => boolean): Held<T> | undefined {
    const next = this.#next(eligible);
    if (!next) return undefined;
    const [band, best] = next;
    this.#take(band, best);
    band.virtual = best.start;
    // Flows whose last finish the virtual time has passed start afresh from it: forget them.
    if (band.finish.size > band.flows.size) for (const [flow, f] of band.finish) if (f <= band.virtual && !band.flows.has(flow)) band.finish.delete(flow);
    return best;
  }

  /**
   * A request of `flow` at `priority` cost `delta` tokens more than it was charged (less
   * when negative): its actual tokens, known once it ended, against the estimate it was
   * ordered by (AIBrix's VTC counts what was served the same way). The flow's finish tag
   * moves by `delta`, and so do the start tags of its waiting requests, which follow it,
   * never before the band's virtual time. A band with nothing waiting has no order to
   * correct: the flow starts afresh from its virtual time there anyway.
   */
  correct(priority: number, flow: string, delta: number): void {
    const band = this.#bands.get(priority);
    if (!band || delta === 0 || !Number.isFinite(delta)) return;
    band.finish.set(flow, Math.max(band.virtual, (band.finish.get(flow) ?? band.virtual) + delta));
    for (const entry of band.flows.get(flow) ?? []) entry.start = Math.max(band.virtual, entry.start + delta);
  }

  /** The bands with requests waiting: [priority, count], highest first. */
  bands(): [number, number][] {
    return this.#order.map((p) => [p, this.#bands.get(p)!.size]);
  }

  /** Requests waiting per band and flow: [priority, flow, requests]. */
  bandFlows(): [number, string, number][] {
    const out: [number, string, number][] = [];
    for (const p of this.#order) for (const [flow, list] of this.#bands.get(p)!.flows) if (list.length > 0) out.push([p, flow, list.length]);
    return out;
  }

  /** Requests of `flow` waiting, in every band. */
  heldOf(flow: string): number {
    let n = 0;
    for (const band of this.#bands.values()) n += band.flows.get(flow)?.length ?? 0;
    return n;
  }

  /** Each flow with requests waiting, and how many. */
  flows(): Map<string, number> {
    const out = new Map<string, number>();
    for (const band of this.#bands.values()) for (const [flow, list] of band.flows) out.set(flow, (out.get(flow) ?? 0) + list.length);
    return out;
  }

  /** The request shift() would return, left in place. */
  peek(): Held<T> | undefined {
    return this.#next()?.[1];
  }

  /** The highest band's waiting request with the lowest start tag (first come among equals). */
  #next(eligible?: (flow: string) => boolean): [Band<T>, Entry<T>] | undefined {
    const priority = this.#order[0];
    if (priority === undefined) return undefined;
    const band = this.#bands.get(priority)!;
    let best: Entry<T> | undefined;
    let bestServed = 0;
    for (const list of band.flows.values()) {
      const head = list[0]!;
      if (eligible && !eligible(head.flow)) continue;
      const served = this.#inService(head.flow);
      if (!best || served < bestServed || (served === bestServed && (head.start < best.start || (head.start === best.start && head.seq < best.seq)))) {
        best = head;
        bestServed = served;
      }
    }
    return best ? [band, best] : undefined;
  }

  /** Takes `held` out (its client left, or its wait ran out); false when it was no longer waiting. */
  remove(held: Held<T>): boolean {
    const band = this.#bands.get(held.priority);
    const list = band?.flows.get(held.flow);
    if (!band || !list || !list.includes(held as Entry<T>)) return false;
    // The flow's last request never ran: its finish tag goes back to where that request started.
    if (list.at(-1) === held) band.finish.set(held.flow, (held as Entry<T>).start);
    this.#take(band, held as Entry<T>);
    return true;
  }

  #take(band: Band<T>, entry: Entry<T>): void {
    const list = band.flows.get(entry.flow)!;
    list.splice(list.indexOf(entry), 1);
    if (list.length === 0) band.flows.delete(entry.flow);
    band.size--;
    this.#size--;
    if (band.size === 0) {
      this.#bands.delete(entry.priority);
      this.#order = this.#order.filter((p) => p !== entry.priority);
    }
  }
}
