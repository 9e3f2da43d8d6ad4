/**
 * The admit stage (docs/admission.md): a request that finds no free slot in this
 * isolate's view of its deployment, or no ready replica, waits here instead of
 * getting 503, and goes as soon as a slot frees, in the queue's order
 * (src/policy/admission-queue.ts: priority, then fair between flows, then first
 * come). A sheddable request (priority below 0) is refused instead of held while
 * every replica is full. A held request leaves at once when its client
 * disconnects, and gets 503 queue_timeout with Retry-After when its wait runs out.
 *
 * Slots free in this isolate when its own dispatches end (the view's in-flight
 * count) and when a replica's load header or a view refresh says so. One held
 * request at a time, the leader, refreshes the view on the others' behalf (from
 * its own request, so the I/O is its own) and pumps the queue; when it leaves,
 * the next one leads. Nothing here is shared between isolates: each holds its
 * own clients' requests (docs/admission.md says why, and what that costs).
 */
import type { Deployment } from "../../config/deployment.ts";
import { MAX_DEMAND_FLOWS, OPENAI_ENDPOINTS, errorResponse } from "../../protocol/index.ts";
import { withLastMember } from "../../protocol/json-top-level.ts";
import { fnv1a } from "../../protocol/hashing.ts";
import { hasRoom } from "../../policy/pick-replica.ts";
import { AdmissionQueue, FLOW_SEPARATOR, clientOf, type Held } from "../../policy/admission-queue.ts";
import { flowLevels, randomFlowKey } from "../../policy/admission-shares.ts";
import type { RoutingView } from "./view.ts";

/** Named priorities (the Inference Extension's bands): a header may carry the name. Below 0 is sheddable. */
export const ADMISSION_BANDS = { critical: 1, standard: 0, sheddable: -1 } as const;
/** Priorities are clamped to this range whatever their source. */
const PRIORITY_BOUND = 1000;
/** How often the leader refreshes the view and pumps the queue while requests are held, ms (the relay's view TTL). */
export const HOLD_POLL_MS = 250;

/** What one request brings to admission. */
export interface Ticket {
  priority: number;
  flow: string;
  /** Its weight in the fair order between flows (tokenCost); 1 where absent. */
  cost?: number;
  /** The client's disconnect (Request.signal, `enable_request_signal`). */
  signal?: AbortSignal;
  /** When the request's own deadline passes, epoch ms. */
  deadline: number;
  /** Brings the deployment's view up to date (a Durable Object call at most, from this request). */
  refresh: () => Promise<unknown>;
  /**
   * The request went once and every replica it tried was full or gone: it waits
   * for a slot to free (a completion here, a refresh) even if the view shows one,
   * since the replicas just said otherwise.
   */
  again?: boolean;
  /** Tells the autoscaler how many requests this isolate holds (it throttles itself); absent without autoscaling. */
  demand?: (held: number) => void;
}

export type AdmitOutcome = "go" | "expired" | "gone" | "shed";

/** An admission's outcome; `queued`: it went through the queue, so its slot is reserved until dispatching() (once). */
export interface Admitted {
  outcome: AdmitOutcome;
  queued: boolean;
}

/**
 * The request's priority: its header's or body's, capped at the maximum, else the
 * default; or the refusal of a bad header. The default and the maximum are the API
 * key's priority class when it has one (an admin sets it per key), else the
 * deployment's `admission.defaultPriority` and `admission.maxPriority`.
 */
export function priorityOf(
  deployment: Deployment,
  headers: Headers,
  bodyPriority: number | undefined,
  key?: { default: number; max: number },
): { ok: true; priority: number } | { ok: false; response: Response } {
  const admission = key ? { ...deployment.admission, defaultPriority: key.default, maxPriority: key.max } : deployment.admission;
  let asked = bodyPriority;
  if (admission.priorityHeader !== undefined) {
    const raw = headers.get(admission.priorityHeader)?.trim();
    if (raw !== undefined && raw !== "") {
      const named = (ADMISSION_BANDS as Record<string, number>)[raw.toLowerCase()];
      const n = named ?? (/^-?\d{1,4}$/.test(raw) ? Number(raw) : NaN);
      if (!Number.isInteger(n)) {
        return { ok: false, response: errorResponse("bad_request", `${admission.priorityHeader}: an integer or one of ${Object.keys(ADMISSION_BANDS).join(", ")}`) };
      }
      asked = n;
    }
  }
  if (asked === undefined) return { ok: true, priority: admission.defaultPriority };
  return { ok: true, priority: Math.max(-PRIORITY_BOUND, Math.min(asked, admission.maxPriority)) };
}

/** Prompt bytes per token in the cost estimate: about 4 for English text in the common BPE vocabularies. */
export const BYTES_PER_TOKEN = 4;
/** The answer's tokens in the estimate where the request sets no budget (and a path route's, whose body is opaque). */
export const UNKNOWN_ANSWER_TOKENS = 256;

/**
 * A held request's weight in the fair order between flows, in tokens: its prompt
 * (body bytes / BYTES_PER_TOKEN) plus its answer's budget. Known before it runs, so
 * estimated: a flow of long prompts or long answers gets fewer requests through than
 * a flow of short ones, each flow about the same tokens (docs/admission.md).
 */
export function tokenCost(bodyBytes: number, maxTokens: number | undefined): number {
  return Math.ceil(Math.max(0, bodyBytes) / BYTES_PER_TOKEN) + (maxTokens ?? UNKNOWN_ANSWER_TOKENS);
}

/**
 * The request's flow for fairness: its client (API key, else address), or where the
 * deployment names a flow header and the request has it, that flow of its client's
 * (admission-queue.ts clientOf): a client may split its share among flows it names, but
 * neither enter another client's flow by naming it nor multiply its share by naming many
 * (the queue, the gate's shares and the relay's are fair between clients first, then
 * between a client's flows).
 */
export function flowOf(deployment: Deployment, headers: Headers, client: string): string {
  const name = deployment.admission.flowHeader;
  const flow = name === undefined ? undefined : headers.get(name);
  return flow ? `${client}${FLOW_SEPARATOR}${flow.slice(0, 256)}` : client;
}

/** Free request slots in `view` now: each replica with room counts its slots left (one at least); -1 with no candidate at all. */
export function freeSlots(view: RoutingView, now: number): number {
  const candidates = view.candidates(now);
  if (candidates.length === 0) return -1;
  let free = 0;
  for (const c of candidates) if (hasRoom(c)) free += Math.max(1, Math.floor(c.capacity - c.load));
  return free;
}

/** Whether this isolate's own requests in flight fill every candidate replica (no other isolate's load needed to say so). */
function ownFill(view: RoutingView, now: number): boolean {
  for (const c of view.candidates(now)) if (c.inflight < c.capacity) return false;
  return true;
}

/**
 * Whether a request that meets no ready replica is held: only for a deployment that
 * scales from zero (`autoscaling.minReplicas: 0`), which expects one to start. Any
 * other deployment with no ready replica is down, and its clients hear so at once
 * (503 no_ready_replica) rather than after a wait nothing will end.
 */
export function holdsAtZero(deployment: Deployment): boolean {
  return deployment.autoscaling?.minReplicas === 0;
}

interface Waiter {
  outcome?: AdmitOutcome;
  settle(outcome: AdmitOutcome): void;
  /** Resolves when this waiter is to lead (refresh and pump for the others). */
  lead(): void;
}

/** How long a budget from the relay holds (src/policy/admission-shares.ts); past it, none applies. */
export const BUDGET_TTL_MS = 1_000;

/** One deployment's admission in one isolate. */
export class AdmissionGate {
  /** Requests this gate let go and not yet ended, by flow, and by client (the queue serves the clients, then their flows, with fewest first). */
  readonly #flowInflight = new Map<string, number>();
  readonly #clientInflight = new Map<string, number>();
  readonly #queue = new AdmissionQueue<Waiter>({ client: (c) => this.#clientInflight.get(c) ?? 0, flow: (f) => this.#flowInflight.get(f) ?? 0 });
  /** Requests this gate let go and not yet ended, by priority (the demand it tells the relay). */
  readonly #inflight = new Map<number, number>();
  /** The same by priority and flow (`${priority} ${flow}`): the demand per flow it tells the relay. */
  readonly #bandFlowInflight = new Map<string, number>();
  /** Flow keys as the relay knows them (flowKey), cached per flow. */
  readonly #keys = new Map<string, string>();
  /** The key this isolate's flows beyond MAX_DEMAND_FLOWS are summed under (its own, never merged with another isolate's). */
  readonly #restKey = randomFlowKey();
  /** The relay's caps for this isolate's flows that ask more than their share (by flow key); undefined where it did not split by flow. */
  #caps: Map<string, number> | undefined;
  /**
   * Per capped flow: slot-milliseconds it ran beyond its cap, and when last counted. A
   * cap is a fraction (half a request: one request half the time), so the flow starts
   * a request only while it owes nothing; while its requests wait here it earns back,
   * down to one poll's worth of credit (they are let go at the leader's next poll).
   */
  readonly #debt = new Map<string, { slotMs: number; at: number }>();
  #inflightTotal = 0;
  /** The relay's budget for this isolate's requests in flight, when it came, and the priority from which it does not apply. */
  #budget: { max: number; at: number; openFrom: number } | undefined;
  /**
   * Slots this isolate's own requests freed, which the view cannot show yet: it
   * assumes the last report still counts them until the next one. Each lets one held
   * request go; they lapse after HOLD_POLL_MS, when a refresh has had its chance.
   */
  #freed = 0;
  #freedAt = 0;
  /** The deployment's view as the last request saw it (the isolate keeps one per deployment, updated in place). */
  #view: RoutingView | undefined;
  readonly #now: () => number;
  #leader: Waiter | undefined;
  /** Released from the queue and not yet dispatching: slots the view does not count as taken yet. */
  #released = 0;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** Requests held now. */
  get held(): number {
    return this.#queue.size;
  }

  /** Requests let go and not yet ended. */
  get inflight(): number {
    return this.#inflightTotal;
  }

  /**
   * What this isolate tells its relay: per priority, requests in flight plus held; the
   * same per flow (keys, the largest MAX_DEMAND_FLOWS − 1, the rest summed under one key
   * of this isolate's); and how many it holds. Undefined when it has none.
   */
  demand(): { bands: [number, number][]; held: number; flows: [number, string, number][] } | undefined {
    if (this.#inflightTotal === 0 && this.#queue.size === 0) return undefined;
    const byBand = new Map(this.#inflight);
    for (const [priority, n] of this.#queue.bands()) byBand.set(priority, (byBand.get(priority) ?? 0) + n);
    const byFlow = new Map<string, [number, string, number]>();
    const add = (priority: number, flow: string, n: number) => {
      const k = `${priority} ${flow}`;
      const e = byFlow.get(k);
      if (e) e[2] += n;
      else byFlow.set(k, [priority, this.#keyOf(flow), n]);
    };
    for (const [k, n] of this.#bandFlowInflight) {
      const cut = k.indexOf(" ");
      add(Number(k.slice(0, cut)), k.slice(cut + 1), n);
    }
    for (const [priority, flow, n] of this.#queue.bandFlows()) add(priority, flow, n);
    let flows = [...byFlow.values()];
    if (flows.length > MAX_DEMAND_FLOWS) {
      flows.sort((a, b) => b[2] - a[2]);
      const rest = new Map<number, number>();
      for (const [p, , n] of flows.slice(MAX_DEMAND_FLOWS - 1)) rest.set(p, (rest.get(p) ?? 0) + n);
      // One key for the rest, in the highest of their bands (the post has room for one entry).
      const top = Math.max(...rest.keys());
      flows = [...flows.slice(0, MAX_DEMAND_FLOWS - 1), [top, this.#restKey, [...rest.values()].reduce((a, b) => a + b, 0)]];
    }
    return { bands: [...byBand].filter(([, n]) => n > 0), held: this.#queue.size, flows };
  }

  /**
   * The relay's answer: this isolate's budget of requests in flight (undefined: none
   * applies), and, where it split a band by flow, caps (fractions of a request, kept on average) for this
   * isolate's flows that ask more than their share across the location (a flow
   * without one is not held back), and the priority from which requests are not held
   * to either (`openFrom`: their bands got all they ask).
   */
  setBudget(max: number | undefined, flowCaps?: Record<string, number>, openFrom?: number): void {
    for (const flow of this.#debt.keys()) this.#owed(flow); // counted under the caps that applied until now
    this.#budget = max === undefined ? undefined : { max, at: this.#now(), openFrom: openFrom ?? Infinity };
    this.#caps = max === undefined || !flowCaps ? undefined : new Map(Object.entries(flowCaps));
  }

  #keyOf(flow: string): string {
    let k = this.#keys.get(flow);
    if (k === undefined) {
      if (this.#keys.size >= 10_000) this.#keys.clear();
      k = flowKey(flow);
      this.#keys.set(flow, k);
    }
    return k;
  }

  /**
   * Whether this isolate holds requests or keeps to a fresh budget: then its view is
   * refreshed at the TTL, since the ask carries its demand and brings its budget back.
   */
  get busy(): boolean {
    return this.#queue.size > 0 || this.#freshBudget() !== undefined;
  }

  /** A request this gate let go has started. */
  started(priority: number, flow: string): void {
    if (this.#caps) this.#owed(flow);
    this.#inflight.set(priority, (this.#inflight.get(priority) ?? 0) + 1);
    const bf = `${priority} ${flow}`;
    this.#bandFlowInflight.set(bf, (this.#bandFlowInflight.get(bf) ?? 0) + 1);
    this.#flowInflight.set(flow, (this.#flowInflight.get(flow) ?? 0) + 1);
    const client = clientOf(flow);
    this.#clientInflight.set(client, (this.#clientInflight.get(client) ?? 0) + 1);
    this.#inflightTotal++;
  }

  /**
   * A request that started has ended. `freed`: it held a slot, now free whatever the view
   * says (not for one the replicas refused, which held none).
   */
  ended(priority: number, flow: string, freed = true): void {
    if (this.#caps) this.#owed(flow);
    const n = this.#inflight.get(priority) ?? 0;
    if (n <= 1) this.#inflight.delete(priority);
    else this.#inflight.set(priority, n - 1);
    const bf = `${priority} ${flow}`;
    const m = this.#bandFlowInflight.get(bf) ?? 0;
    if (m <= 1) this.#bandFlowInflight.delete(bf);
    else this.#bandFlowInflight.set(bf, m - 1);
    const f = this.#flowInflight.get(flow) ?? 0;
    if (f <= 1) this.#flowInflight.delete(flow);
    else this.#flowInflight.set(flow, f - 1);
    const client = clientOf(flow);
    const c = this.#clientInflight.get(client) ?? 0;
    if (c <= 1) this.#clientInflight.delete(client);
    else this.#clientInflight.set(client, c - 1);
    if (this.#inflightTotal > 0) this.#inflightTotal--;
    if (!freed) return;
    this.#freed = this.#freedNow() + 1;
    this.#freedAt = this.#now();
  }

  /**
   * A request this gate let go used `actual` tokens where its ticket's `estimated` cost
   * ordered it (tokenCost): its flow's place in the fair order moves by the difference
   * (AdmissionQueue.correct), so a flow that asks large budgets and uses few is not
   * held back for what it never used, nor one that outruns its estimate favoured.
   */
  correct(priority: number, flow: string, estimated: number, actual: number): void {
    this.#queue.correct(priority, flow, actual - estimated);
  }

  #freedNow(): number {
    return this.#now() - this.#freedAt > HOLD_POLL_MS ? 0 : this.#freed;
  }

  /** Free slots now: the view's less those reserved, or the slots this isolate just freed when more. */
  #free(slots: number): number {
    return Math.max(slots - this.#released, this.#freedNow());
  }

  /** The relay's budget while it holds (BUDGET_TTL_MS after it came); undefined when none applies. */
  #freshBudget(): { max: number; at: number; openFrom: number } | undefined {
    const b = this.#budget;
    return b && this.#now() - b.at <= BUDGET_TTL_MS ? b : undefined;
  }

  /** Whether a request of `priority` is free of the budget: its band got all it asks (the headroom kept for it), or no budget applies. */
  #open(priority: number): boolean {
    const b = this.#freshBudget();
    return !b || priority >= b.openFrom;
  }

  /**
   * Held requests that go before one of `priority`: all of them, except under a budget
   * that leaves its band open, where only those of its band and above do (the lower
   * bands keep to the budget, so they would not take the slot it finds).
   */
  #ahead(priority: number): number {
    const b = this.#freshBudget();
    const open = b !== undefined && priority >= b.openFrom;
    // No budget: the queue's own order, where no lower band goes first.
    if (!b) return this.#heldAtOrAbove(priority);
    if (!open && !this.#caps) return this.#queue.size;
    // Under caps per flow, a held request of a flow at its cap goes nowhere before this
    // one: only the others count (a flow under its share never waits behind one over it).
    let n = 0;
    for (const [p, flow, count] of this.#queue.bandFlows()) {
      if (open && p < priority) continue;
      if (this.#caps && !open && !this.#withinCap(flow, this.#flowInflight.get(flow) ?? 0)) continue;
      n += count;
    }
    return n;
  }

  #heldAtOrAbove(priority: number): number {
    if (this.#queue.size === 0) return 0; // the plain path's case: nothing held
    let n = 0;
    for (const [p, count] of this.#queue.bands()) if (p >= priority) n += count;
    return n;
  }

  /** Whether this gate has a request in flight of a lower priority than `priority`. */
  #runsBelow(priority: number): boolean {
    for (const [p, n] of this.#inflight) if (p < priority && n > 0) return true;
    return false;
  }

  /**
   * Whether one more request (of `flow`, where known) may go by the relay's answer: always
   * without a fresh one. With caps per flow (the relay split the band by flow), a flow
   * keeps to its cap and a flow without one goes (it asks no more than its share);
   * otherwise the isolate keeps to its budget.
   */
  #underBudget(flow?: string): boolean {
    const b = this.#freshBudget();
    if (!b) return true;
    if (this.#caps && flow !== undefined) return true; // #flowUnderShare applies the cap
    return this.#inflightTotal + this.#released < b.max;
  }

  /**
   * Each flow's share of the budget, or undefined without a fresh budget: the budget
   * split max-min fairly over the clients with requests here (in flight or held;
   * `arriving` counts one more of its flow's), then each client's part over its flows
   * the same way (admission-shares.ts flowLevels), so a flow of few clients keeps what
   * it uses, the rest is split evenly among the others, and a client's many flows
   * share one client's part.
   */
  #shares(arriving?: string): ((flow: string) => number) | undefined {
    const b = this.#freshBudget();
    if (!b) return undefined;
    const demand = this.#queue.flows();
    for (const [f, n] of this.#flowInflight) demand.set(f, (demand.get(f) ?? 0) + n);
    if (arriving !== undefined) demand.set(arriving, (demand.get(arriving) ?? 0) + 1);
    const levels = flowLevels(demand, b.max, clientOf);
    return (flow) => Math.min(demand.get(flow) ?? 0, levels.get(flow) ?? 0);
  }

  /** Whether one more request of `flow` may go now within its share (always, without a budget). */
  #flowUnderShare(flow: string): boolean {
    const share = this.#shares(flow);
    if (!share) return true;
    const inflight = this.#flowInflight.get(flow) ?? 0;
    // The location's cap on the flow where it asks more than its share there; none where it does not.
    if (this.#caps) return this.#withinCap(flow, inflight);
    return inflight < share(flow);
  }

  /** Whether a capped flow with `n` requests in flight here may start one more: under its cap rounded up, and owing nothing. */
  #withinCap(flow: string, n: number): boolean {
    const cap = this.#caps?.get(this.#keyOf(flow));
    return cap === undefined || (n < Math.ceil(cap) && this.#owed(flow) <= 0);
  }

  /**
   * Brings a flow's debt up to now (its requests in flight beyond its cap, over the time
   * since last counted) and returns it; forgets it when the flow has no cap (or the
   * budget lapsed). Called before the flow's count in flight changes, and before a check.
   */
  #owed(flow: string): number {
    const cap = this.#freshBudget() ? this.#caps?.get(this.#keyOf(flow)) : undefined;
    const now = this.#now();
    const d = this.#debt.get(flow);
    if (cap === undefined) {
      this.#debt.delete(flow);
      return 0;
    }
    if (!d) {
      this.#debt.set(flow, { slotMs: 0, at: now });
      return 0;
    }
    const credit = this.#queue.heldOf(flow) > 0 ? cap * HOLD_POLL_MS : 0;
    d.slotMs = Math.max(-credit, d.slotMs + ((this.#flowInflight.get(flow) ?? 0) - cap) * (now - d.at));
    d.at = now;
    return d.slotMs;
  }

  /**
   * Waits until the request may be dispatched ("go"), or says why not. A request
   * that finds a free slot and nobody waiting goes at once: the path's only cost
   * when the deployment is not saturated. A request that went through the queue
   * (`queued`) must call dispatching() once, when it is dispatched or gives up.
   */
  async enter(deployment: Deployment, view: RoutingView, ticket: Ticket): Promise<Admitted> {
    this.#view = view;
    const slots = freeSlots(view, this.#now());
    // No replica at all: the dispatch answers no_ready_replica, unless the deployment scales from zero.
    // Never for a request that went already (`again`): it waits, so a retry is never a busy loop.
    if (slots < 0 && !holdsAtZero(deployment) && !ticket.again) return GO;
    const free = this.#free(slots);
    const allowed = this.#open(ticket.priority) || (this.#underBudget(ticket.flow) && this.#flowUnderShare(ticket.flow));
    const ahead = this.#ahead(ticket.priority);
    if (free > 0 && ahead === 0 && !ticket.again && allowed) {
      if (this.#freedNow() > 0) this.#freed--;
      return GO;
    }
    if (ticket.signal?.aborted) return { outcome: "gone", queued: false };
    // Saturated (not just others waiting ahead): a sheddable request is refused rather than held.
    if (ticket.priority < 0 && (free <= 0 || ticket.again)) return { outcome: "shed", queued: false };
    // Full by other isolates' load only, as reported (up to ~0.75 s old), with nobody waiting
    // ahead here: the replicas' own answer decides (reject-before-accept; a refused request waits
    // here again). Held at once only where this isolate's own requests fill every replica,
    // which it knows exactly. Holding on stale reports cost a third of the fleet's throughput
    // with 4 isolates (bench/admission/admission.ts). Not even then where some of them are of a lower
    // priority than this one: a replica whose engine preempts takes it past them at once
    // (docs/protocol.md, "By priority"); one that does not refuses it, and it waits here again.
    if (slots === 0 && ahead === 0 && !ticket.again && allowed && (!ownFill(view, this.#now()) || this.#runsBelow(ticket.priority))) return GO;
    const waitMs = Math.min(deployment.admission.maxWaitMs, ticket.deadline - this.#now());
    if (waitMs <= 0) return { outcome: "expired", queued: false };

    let settle!: (o: AdmitOutcome) => void;
    const settled = new Promise<AdmitOutcome>((r) => (settle = r));
    let lead!: () => void;
    let leadership = new Promise<void>((r) => (lead = r));
    const waiter: Waiter = {
      settle: (o) => {
        if (waiter.outcome !== undefined) return;
        waiter.outcome = o;
        settle(o);
      },
      lead: () => lead(),
    };
    const held = this.#queue.push(ticket.priority, ticket.flow, waiter, ticket.cost ?? 1);
    const leave = (o: AdmitOutcome) => {
      if (this.#queue.remove(held)) waiter.settle(o);
    };
    const timer = setTimeout(leave, waitMs, "expired");
    const onAbort = () => leave("gone");
    ticket.signal?.addEventListener("abort", onAbort);
    if (!this.#leader) this.#leader = waiter;
    if (!ticket.again) this.pump();
    if (waiter.outcome === undefined) ticket.demand?.(this.#queue.size);
    // At zero, the first refresh goes at once: it carries the held demand (to the relay, or
    // through `demand` to the autoscaler) that starts a replica.
    let first = slots < 0;
    try {
      for (;;) {
        if (waiter.outcome !== undefined) break;
        if (this.#leader === waiter) {
          if (!first) await Promise.race([settled, sleep(HOLD_POLL_MS)]);
          first = false;
          if (waiter.outcome !== undefined) break;
          // The refresh is this request's own I/O; a failed one leaves the view as it was.
          await ticket.refresh().catch(() => undefined);
          // The view lags the replicas (reports, the relay, this refresh: up to ~0.75 s). An
          // isolate with requests in flight learns of slots from its own completions; one with
          // none would learn only from the view, and lose every freed slot to isolates that do.
          // So when it still shows no room, one held request goes to ask, within the budget;
          // a replica that refuses it is authoritative, and it waits again.
          // Under caps per flow the same holds for every request of a flow under its
          // share (or within its cap), wherever this isolate's other requests are: their
          // slots are free somewhere while the capped flows keep to their caps.
          if (!this.pump() && this.#queue.size > 0 && freeSlots(view, this.#now()) >= 0) {
            if (this.#caps && this.#freshBudget()) this.#release(this.#queue.size);
            else if (this.#inflightTotal === 0 && this.#underBudget()) this.#release(1);
          }
          if (this.#queue.size > 0) ticket.demand?.(this.#queue.size);
        } else {
          await Promise.race([settled, leadership]);
          leadership = new Promise<void>((r) => (lead = r));
        }
      }
    } finally {
      clearTimeout(timer);
      ticket.signal?.removeEventListener("abort", onAbort);
      if (this.#leader === waiter) this.#handOff();
    }
    return { outcome: waiter.outcome!, queued: waiter.outcome === "go" };
  }

  /** A request that went through the queue is now dispatching: its slot is the view's to count. */
  dispatching(): void {
    if (this.#released > 0) this.#released--;
  }

  /** Admits held requests while there are free slots (and budget): call when a slot may have freed. Whether any went. */
  pump(): boolean {
    if (this.#queue.size === 0 || !this.#view) return false;
    const free = this.#free(freeSlots(this.#view, this.#now()));
    return this.#release(free) > 0;
  }

  /** Lets up to `n` held requests go, in the queue's order, within the budget; how many went. */
  #release(n: number): number {
    let went = 0;
    const share = this.#shares();
    /** Let go in this call, per flow: they count against the flow's share until they start. */
    const going = new Map<string, number>();
    const caps = this.#caps;
    const eligible =
      share &&
      ((flow: string) => {
        const n = (this.#flowInflight.get(flow) ?? 0) + (going.get(flow) ?? 0);
        return caps ? this.#withinCap(flow, n) : n < share(flow);
      });
    // With caps per flow, eligible() bounds each flow; without, the budget bounds them all.
    // A request in a band the budget leaves open (its headroom) is bound by neither.
    while (went < n) {
      const head = this.#queue.peek();
      if (!head) break;
      const open = this.#open(head.priority);
      if (!open && !(caps !== undefined && share !== undefined) && !this.#underBudget()) break;
      const next: Held<Waiter> | undefined = this.#queue.shift(open ? undefined : eligible);
      if (!next) break;
      going.set(next.flow, (going.get(next.flow) ?? 0) + 1);
      this.#released++;
      if (this.#freedNow() > 0) this.#freed--;
      went++;
      next.value.settle("go");
    }
    return went;
  }

  /** The leader left: the next held request leads. */
  #handOff(): void {
    this.#leader = undefined;
    const next = this.#queue.peek();
    if (next) {
      this.#leader = next.value;
      next.value.lead();
    }
  }
}

/**
 * One request's place in its deployment's gate, from its admission to its end: the
 * path (serve.ts) enters it, says when each attempt dispatches, holds it again when
 * every replica it tried was full, and ends it once the answer has passed. A
 * request holds a slot in the gate's count while it runs, none while it is held again.
 */
export class AdmissionSlot {
  readonly #gate: AdmissionGate;
  readonly #deployment: Deployment;
  readonly #view: RoutingView;
  readonly #ticket: Ticket;
  /** Counted in the gate's requests in flight (not while held again: a refused request holds no slot). */
  #running = false;
  /** Let go through the queue, so its slot is reserved until it dispatches (AdmissionGate.dispatching, once). */
  #reserved = false;
  /** Let go through the queue, so its client's place was charged for it (the fair order's tags): refunded if every replica refuses it. */
  #charged = false;

  private constructor(gate: AdmissionGate, deployment: Deployment, view: RoutingView, ticket: Ticket) {
    this.#gate = gate;
    this.#deployment = deployment;
    this.#view = view;
    this.#ticket = ticket;
  }

  /** Admits the request (waiting for a free slot when none is free), or says why not. */
  static async enter(gate: AdmissionGate, deployment: Deployment, view: RoutingView, ticket: Ticket): Promise<AdmissionSlot | Exclude<AdmitOutcome, "go">> {
    const first = await gate.enter(deployment, view, ticket);
    if (first.outcome !== "go") return first.outcome;
    const slot = new AdmissionSlot(gate, deployment, view, ticket);
    slot.#reserved = first.queued;
    slot.#charged = first.queued;
    gate.started(ticket.priority, ticket.flow);
    slot.#running = true;
    // A client that leaves cancels the request, and the path's `finally` may never run: its signal frees the slot.
    ticket.signal?.addEventListener("abort", slot, { once: true });
    return slot;
  }

  /** The request used `tokens` (its estimate was the ticket's cost): its flow's place is corrected (AdmissionGate.correct). */
  used(tokens: number): void {
    const { priority, flow, cost } = this.#ticket;
    if (cost !== undefined) this.#gate.correct(priority, flow, cost, tokens);
  }

  /** An attempt is dispatching: the slot is the view's to count from now on. */
  dispatching(): void {
    if (!this.#reserved) return;
    this.#reserved = false;
    this.#gate.dispatching();
  }

  /**
   * Every replica tried was full (or none was there): the request gives its slot up and waits
   * for one again. It was not served, so a client charged for it in the fair order (it went
   * through the queue) is refunded the turn (its place moves back by its cost): charged, a
   * client whose requests meet a slot the view showed free too early would lose a turn each
   * time, to the clients whose requests did not. One that went at once was never charged.
   */
  async again(): Promise<AdmitOutcome> {
    const { priority, flow, cost } = this.#ticket;
    if (this.#charged) this.#gate.correct(priority, flow, cost ?? 1, 0);
    this.#charged = false;
    if (this.#running) this.#gate.ended(priority, flow, false);
    this.#running = false;
    const again = await this.#gate.enter(this.#deployment, this.#view, { ...this.#ticket, again: true });
    this.#reserved = again.queued;
    this.#charged = again.queued;
    if (again.outcome === "go") {
      this.#gate.started(priority, flow);
      this.#running = true;
    }
    return again.outcome;
  }

  /** The request is over (its answer has passed, or it was refused): its slot frees and the next held request may go. */
  end(): void {
    this.dispatching();
    if (this.#running) this.#gate.ended(this.#ticket.priority, this.#ticket.flow);
    this.#running = false;
    this.#gate.pump();
  }

  /** The client left (an EventListener object: no closure per request). */
  handleEvent(): void {
    this.end();
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const GO: Admitted = Object.freeze({ outcome: "go", queued: false });

/** The client's answer for an outcome other than "go". */
export function admissionRefusal(outcome: Exclude<AdmitOutcome, "go">, deployment: Deployment, requestId: string): Response {
  switch (outcome) {
    case "shed":
      return errorResponse("shed", `every replica of "${deployment.name}" is busy and this request is sheddable`, { requestId, retryAfterSeconds: 1 });
    case "expired":
      return errorResponse("queue_timeout", `no replica of "${deployment.name}" had a free slot within the request's wait`, { requestId, retryAfterSeconds: 1 });
    case "gone":
      // The client is gone; nobody reads this.
      return errorResponse("request_timeout", "the client disconnected while its request was held", { requestId });
  }
}

/**
 * A flow's key for the relay: 16 hex digits of two 32-bit hashes (its name does not leave
 * the isolate), the first 8 its client's (FLOW_KEY_CLIENT_DIGITS): the relay shares
 * between clients first, then between a client's flows. A client's own flow (no header)
 * keeps the key it always had.
 */
export function flowKey(flow: string): string {
  return hex8(fnv1a(clientOf(flow))) + hex8(fnv1a(flow, 0x9e3779b9));
}

const hex8 = (n: number) => (n >>> 0).toString(16).padStart(8, "0");


/** The requests one client may have pending for `deployment` in an isolate (limits.maxPendingRequestsPerClient). */
export function pendingShareOf(deployment: Deployment): number {
  return deployment.limits.maxPendingRequestsPerClient ?? Math.max(1, Math.ceil(deployment.limits.maxPendingRequests / 4));
}

// --- The priority as the engine takes it ------------------------------------------

/*
 * A request's priority in its engine's own terms, for deployments whose engines
 * schedule by a request field (`openai.enginePriority`, docs/agent.md). The replica
 * agent is not on the request path (the edge dispatches straight to the engine), so
 * the edge says it, in the body it forwards. Pure.
 *
 * vLLM (`--scheduling-policy priority`): `priority` of ChatCompletionRequest,
 * CompletionRequest, ResponsesRequest and the embedding requests, an integer, default
 * 0, lower values served first; any other value than 0 is refused by an engine without
 * priority scheduling. Switchyard's priority is higher first (docs/admission.md), so
 * the engine gets it negated. Every route whose body vLLM reads `priority` from is
 * written, so a client's own `priority` never reaches the engine past its key's cap.
 */

/** The engines' request fields the edge knows (`openai.enginePriority`). */
export type EnginePriority = "vllm";

/** vLLM's `priority` for a Switchyard priority: negated (vLLM serves lower first). */
export function vllmPriority(priority: number): number {
  return priority === 0 ? 0 : -priority;
}

/**
 * The /v1 body the engine gets: `body` (a JSON object, as the route checked) with its
 * top-level `priority` set to the engine's value for `priority`, or `body` itself when
 * nothing is to be said (no engine field, another path, or priority 0 and no
 * `priority` of the client's to override, since 0 is vLLM's default).
 * `bodyHasPriority`: the client's body has its own top-level `priority`.
 */
export function bodyForEngine(engine: EnginePriority | undefined, path: string, body: ArrayBuffer, priority: number, bodyHasPriority: boolean): ArrayBuffer {
  // Every /v1 body route the edge serves has vLLM's `priority`.
  if (engine !== "vllm" || !Object.hasOwn(OPENAI_ENDPOINTS, path)) return body;
  if (priority === 0 && !bodyHasPriority) return body;
  return withLastMember(body, "priority", String(vllmPriority(priority))) ?? body;
}
