/**
 * The order in which an isolate admits the requests it holds (docs/admission.md):
 * strict priority between bands (higher first, as the Inference Extension ranks
 * them), fair between flows within a band, first come first served within a flow.
 *
 * Fairness is start-time fair queuing, tagged as requests are admitted: a client's
 * tag is the later of the band's virtual time and its last finish tag (the tag plus
 * the cost of its last request admitted), and the client with the lowest tag goes
 * next. With a cost of 1 per request the clients take turns; with a cost in tokens a
 * client of long prompts gets fewer requests through. A client that was idle starts
 * at the band's virtual time, so it cannot bank credit while away. A cost is an
 * estimate (the prompt and the answer's budget); correct() moves the tags by what the
 * request actually used, once it is known.
 *
 * Before the tags, a client (and within it, a flow) with fewer requests in service
 * goes first, when the queue is told (`inService`): one that uses less than its share
 * of the slots is never kept waiting behind one that holds many (max-min fairness in
 * slots; with tags alone it waited a turn behind every heavier one's head).
 *
 * A flow belongs to a client (clientOf): a flow a request header names is a share of
 * its client's, never another client's. The clients share the band; within a client
 * its flows share its turns the same way (tags of their own, within the client), so
 * a client that splits its requests over many flows divides its share among them
 * rather than multiplying it, and one that names another client's flow only names
 * one of its own.
 *
 * Pure: no clock, no I/O. The gate (src/proxy/serve/admit.ts) holds the requests
 * and decides when a slot is free.
 */
// @ts-nocheck


/** Between a client and the name of one of its flows (admit.ts flowOf): no header value or client holds it. */
export const FLOW_SEPARATOR = "\u0000";

/** The client a flow belongs to: its own name, or what comes before FLOW_SEPARATOR. */
export function clientOf(flow: string): string {
  const cut = flow.indexOf(FLOW_SEPARATOR);
  return cut < 0 ? flow : flow.slice(0, cut);
}

/** One held request, as the queue knows it. */
export interface Held<T> {
  readonly priority: number;
  readonly flow: string;
  readonly cost: number;
  readonly value: T;
}

interface Entry<T> extends Held<T> {
  /** Arrival order: equal tags go first come, first served. */
  readonly seq: number;
}

/** A client's requests waiting in a band: its flows, and their fair order within the client's share. */
interface ClientQueue<T> {
  /** Each flow's waiting requests, oldest first. */
  readonly flows: Map<string, Entry<T>[]>;
  /** Each flow's last finish tag within the client. */
  readonly finish: Map<string, number>;
  /** The tag of the client's last request admitted. */
  virtual: number;
}

interface Band<T> {
  /** The clients with requests waiting. */
  readonly clients: Map<string, ClientQueue<T>>;
  /** Each client's last finish tag (kept while it is ahead of the virtual time). */
  readonly finish: Map<string, number>;
  /** The tag of the last request admitted from this band. */
  virtual: number;
  size: number;
}

/** How many requests each client and each flow has in service now (none known: 0 for all, tags alone). */
export interface InService {
  client(client: string): number;
  flow(flow: string): number;
}

const NONE_IN_SERVICE: InService = { client: () => 0, flow: () => 0 };

/** The next request of one client: its flow's head, the flow's tag within the client, and the client's tag in the band. */
interface Candidate<T> {
  client: string;
  queue: ClientQueue<T>;
  entry: Entry<T>;
  flowTag: number;
}

export class AdmissionQueue<T> {
  readonly #bands = new Map<number, Band<T>>();
  /** The priorities with requests waiting, highest first. */
  #order: number[] = [];
  #seq = 0;
  #size = 0;
  readonly #inService: InService;

  /** `inService`: the requests in service now, by client and by flow (none known: 0 for all, tags alone). */
  constructor(inService: InService = NONE_IN_SERVICE) {
    this.#inService = inService;
  }

  get size(): number {
    return this.#size;
  }

  /** Holds `value` at `priority` in `flow`; cost ≥ 0 (1 per request by default). */
  push(priority: number, flow: string, value: T, cost = 1): Held<T> {
    let band = this.#bands.get(priority);
    if (!band) {
      band = { clients: new Map(), finish: new Map(), virtual: 0, size: 0 };
      this.#bands.set(priority, band);
    }
    if (band.size === 0) this.#order = [...this.#order, priority].sort((a, b) => b - a);
    const client = clientOf(flow);
    let queue = band.clients.get(client);
    if (!queue) {
      queue = { flows: new Map(), finish: new Map(), virtual: 0 };
      band.clients.set(client, queue);
    }
    const entry: Entry<T> = { priority, flow, cost: Math.max(0, cost), value, seq: this.#seq++ };
    const list = queue.flows.get(flow);
    if (list) list.push(entry);
    else queue.flows.set(flow, [entry]);
    band.size++;
    this.#size++;
    return entry;
  }

  /**
   * The request to admit next (removed), or undefined when none waits. `eligible`: only
   * flows it accepts may go (their share is used up otherwise); never a lower band instead.
   */
  shift(eligible?: (flow: string) => boolean): Held<T> | undefined {
    const priority = this.#order[0];
    if (priority === undefined) return undefined;
    const band = this.#bands.get(priority)!;
    const next = this.#next(band, eligible);
    if (!next) return undefined;
    const { client, queue, entry, flowTag } = next;
    const tag = Math.max(band.virtual, band.finish.get(client) ?? 0);
    band.virtual = tag;
    band.finish.set(client, tag + entry.cost);
    queue.virtual = flowTag;
    queue.finish.set(entry.flow, flowTag + entry.cost);
    this.#take(band, entry);
    // Clients whose last finish the virtual time has passed start afresh from it: forget them.
    if (band.finish.size > band.clients.size) for (const [c, f] of band.finish) if (f <= band.virtual && !band.clients.has(c)) band.finish.delete(c);
    return entry;
  }

  /**
   * A request of `flow` at `priority` cost `delta` tokens more than it was charged (less
   * when negative): its actual tokens, known once it ended, against the estimate it was
   * ordered by (AIBrix's VTC counts what was served the same way). The finish tags of the
   * flow and of its client move by `delta`, never before the virtual time. A band with
   * nothing waiting has no order to correct: a client starts afresh from its virtual time
   * there anyway.
   */
  correct(priority: number, flow: string, delta: number): void {
    const band = this.#bands.get(priority);
    if (!band || delta === 0 || !Number.isFinite(delta)) return;
    const client = clientOf(flow);
    band.finish.set(client, Math.max(band.virtual, (band.finish.get(client) ?? band.virtual) + delta));
    const queue = band.clients.get(client);
    if (queue) queue.finish.set(flow, Math.max(queue.virtual, (queue.finish.get(flow) ?? queue.virtual) + delta));
  }

  /** The bands with requests waiting: [priority, count], highest first. */
  bands(): [number, number][] {
    return this.#order.map((p) => [p, this.#bands.get(p)!.size]);
  }

  /** Requests waiting per band and flow: [priority, flow, requests]. */
  bandFlows(): [number, string, number][] {
    const out: [number, string, number][] = [];
    for (const p of this.#order) for (const queue of this.#bands.get(p)!.clients.values()) for (const [flow, list] of queue.flows) out.push([p, flow, list.length]);
    return out;
  }

  /** Requests of `client`'s flows waiting, in every band. */
  heldOf(client: string): number {
    let n = 0;
    for (const band of this.#bands.values()) for (const list of band.clients.get(client)?.flows.values() ?? []) n += list.length;
    return n;
  }

  /** Each flow with requests waiting, and how many. */
  flows(): Map<string, number> {
    const out = new Map<string, number>();
    for (const band of this.#bands.values()) for (const queue of band.clients.values()) for (const [flow, list] of queue.flows) out.set(flow, (out.get(flow) ?? 0) + list.length);
    return out;
  }

  /** The request shift() would return, left in place. */
  peek(): Held<T> | undefined {
    const priority = this.#order[0];
    return priority === undefined ? undefined : this.#next(this.#bands.get(priority)!)?.entry;
  }

  /**
   * The next request of the band: the client with fewest in service, then the lowest tag,
   * then first come; within it, its flow with fewest in service, then the lowest tag
   * within the client, then first come.
   */
  #next(band: Band<T>, eligible?: (flow: string) => boolean): Candidate<T> | undefined {
    let best: Candidate<T> | undefined;
    let bestServed = 0;
    let bestTag = 0;
    for (const [client, queue] of band.clients) {
      const head = this.#headOf(queue, eligible);
      if (!head) continue;
      const served = this.#inService.client(client);
      const tag = Math.max(band.virtual, band.finish.get(client) ?? 0);
      if (!best || served < bestServed || (served === bestServed && (tag < bestTag || (tag === bestTag && head.entry.seq < best.entry.seq)))) {
        best = { client, queue, ...head };
        bestServed = served;
        bestTag = tag;
      }
    }
    return best;
  }

  #headOf(queue: ClientQueue<T>, eligible?: (flow: string) => boolean): { entry: Entry<T>; flowTag: number } | undefined {
    let best: { entry: Entry<T>; flowTag: number } | undefined;
    let bestServed = 0;
    for (const [flow, list] of queue.flows) {
      if (eligible && !eligible(flow)) continue;
      const entry = list[0]!;
      const served = queue.flows.size > 1 ? this.#inService.flow(flow) : 0;
      const flowTag = Math.max(queue.virtual, queue.finish.get(flow) ?? 0);
      if (!best || served < bestServed || (served === bestServed && (flowTag < best.flowTag || (flowTag === best.flowTag && entry.seq < best.entry.seq)))) {
        best = { entry, flowTag };
        bestServed = served;
      }
    }
    return best;
  }

  /** Takes `held` out (its client left, or its wait ran out); false when it was no longer waiting. */
  remove(held: Held<T>): boolean {
    const band = this.#bands.get(held.priority);
    const list = band?.clients.get(clientOf(held.flow))?.flows.get(held.flow);
    if (!band || !list || !list.includes(held as Entry<T>)) return false;
    this.#take(band, held as Entry<T>);
    return true;
  }

  #take(band: Band<T>, entry: Entry<T>): void {
    const client = clientOf(entry.flow);
    const queue = band.clients.get(client)!;
    const list = queue.flows.get(entry.flow)!;
    list.splice(list.indexOf(entry), 1);
    if (list.length === 0) {
      queue.flows.delete(entry.flow);
      if (queue.flows.size === 0) band.clients.delete(client);
    }
    band.size--;
    this.#size--;
    if (band.size === 0) {
      this.#bands.delete(entry.priority);
      this.#order = this.#order.filter((p) => p !== entry.priority);
    }
  }
}
