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
// @ts-nocheck
function stryNS_9fa48() {
  var g = typeof globalThis === 'object' && globalThis && globalThis.Math === Math && globalThis || new Function("return this")();
  var ns = g.__stryker__ || (g.__stryker__ = {});
  if (ns.activeMutant === undefined && g.process && g.process.env && g.process.env.__STRYKER_ACTIVE_MUTANT__) {
    ns.activeMutant = g.process.env.__STRYKER_ACTIVE_MUTANT__;
  }
  function retrieveNS() {
    return ns;
  }
  stryNS_9fa48 = retrieveNS;
  return retrieveNS();
}
stryNS_9fa48();
function stryCov_9fa48() {
  var ns = stryNS_9fa48();
  var cov = ns.mutantCoverage || (ns.mutantCoverage = {
    static: {},
    perTest: {}
  });
  function cover() {
    var c = cov.static;
    if (ns.currentTestId) {
      c = cov.perTest[ns.currentTestId] = cov.perTest[ns.currentTestId] || {};
    }
    var a = arguments;
    for (var i = 0; i < a.length; i++) {
      c[a[i]] = (c[a[i]] || 0) + 1;
    }
  }
  stryCov_9fa48 = cover;
  cover.apply(null, arguments);
}
function stryMutAct_9fa48(id) {
  var ns = stryNS_9fa48();
  function isActive(id) {
    if (ns.activeMutant === id) {
      if (ns.hitCount !== void 0 && ++ns.hitCount > ns.hitLimit) {
        throw new Error('Stryker: Hit count limit reached (' + ns.hitCount + ')');
      }
      return true;
    }
    return false;
  }
  stryMutAct_9fa48 = isActive;
  return isActive(id);
}
import type { Deployment } from "../../config/deployment.ts";
import { MAX_DEMAND_FLOWS, errorResponse } from "../../protocol/index.ts";
import { fnv1a } from "../../protocol/hashing.ts";
import { hasRoom } from "../../policy/pick-replica.ts";
import { AdmissionQueue, FLOW_SEPARATOR, clientOf, type Held } from "../../policy/admission-queue.ts";
import { flowLevels, randomFlowKey } from "../../policy/admission-shares.ts";
import type { RoutingView } from "./view.ts";

/** Named priorities (the Inference Extension's bands): a header may carry the name. Below 0 is sheddable. */
export const ADMISSION_BANDS = {
  critical: 1,
  standard: 0,
  sheddable: -1
} as const;
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
export function priorityOf(deployment: Deployment, headers: Headers, bodyPriority: number | undefined, key?: {
  default: number;
  max: number;
}): {
  ok: true;
  priority: number;
} | {
  ok: false;
  response: Response;
} {
  if (stryMutAct_9fa48("234")) {
    {}
  } else {
    stryCov_9fa48("234");
    const admission = key ? stryMutAct_9fa48("235") ? {} : (stryCov_9fa48("235"), {
      ...deployment.admission,
      defaultPriority: key.default,
      maxPriority: key.max
    }) : deployment.admission;
    let asked = bodyPriority;
    if (stryMutAct_9fa48("238") ? admission.priorityHeader === undefined : stryMutAct_9fa48("237") ? false : stryMutAct_9fa48("236") ? true : (stryCov_9fa48("236", "237", "238"), admission.priorityHeader !== undefined)) {
      if (stryMutAct_9fa48("239")) {
        {}
      } else {
        stryCov_9fa48("239");
        const raw = stryMutAct_9fa48("241") ? headers.get(admission.priorityHeader).trim() : stryMutAct_9fa48("240") ? headers.get(admission.priorityHeader) : (stryCov_9fa48("240", "241"), headers.get(admission.priorityHeader)?.trim());
        if (stryMutAct_9fa48("244") ? raw !== undefined || raw !== "" : stryMutAct_9fa48("243") ? false : stryMutAct_9fa48("242") ? true : (stryCov_9fa48("242", "243", "244"), (stryMutAct_9fa48("246") ? raw === undefined : stryMutAct_9fa48("245") ? true : (stryCov_9fa48("245", "246"), raw !== undefined)) && (stryMutAct_9fa48("248") ? raw === "" : stryMutAct_9fa48("247") ? true : (stryCov_9fa48("247", "248"), raw !== (stryMutAct_9fa48("249") ? "Stryker was here!" : (stryCov_9fa48("249"), "")))))) {
          if (stryMutAct_9fa48("250")) {
            {}
          } else {
            stryCov_9fa48("250");
            const named = (ADMISSION_BANDS as Record<string, number>)[stryMutAct_9fa48("251") ? raw.toUpperCase() : (stryCov_9fa48("251"), raw.toLowerCase())];
            const n = stryMutAct_9fa48("252") ? named && (/^-?\d{1,4}$/.test(raw) ? Number(raw) : NaN) : (stryCov_9fa48("252"), named ?? ((stryMutAct_9fa48("257") ? /^-?\D{1,4}$/ : stryMutAct_9fa48("256") ? /^-?\d$/ : stryMutAct_9fa48("255") ? /^-\d{1,4}$/ : stryMutAct_9fa48("254") ? /^-?\d{1,4}/ : stryMutAct_9fa48("253") ? /-?\d{1,4}$/ : (stryCov_9fa48("253", "254", "255", "256", "257"), /^-?\d{1,4}$/)).test(raw) ? Number(raw) : NaN));
            if (stryMutAct_9fa48("260") ? false : stryMutAct_9fa48("259") ? true : stryMutAct_9fa48("258") ? Number.isInteger(n) : (stryCov_9fa48("258", "259", "260"), !Number.isInteger(n))) {
              if (stryMutAct_9fa48("261")) {
                {}
              } else {
                stryCov_9fa48("261");
                return stryMutAct_9fa48("262") ? {} : (stryCov_9fa48("262"), {
                  ok: stryMutAct_9fa48("263") ? true : (stryCov_9fa48("263"), false),
                  response: errorResponse(stryMutAct_9fa48("264") ? "" : (stryCov_9fa48("264"), "bad_request"), stryMutAct_9fa48("265") ? `` : (stryCov_9fa48("265"), `${admission.priorityHeader}: an integer or one of ${Object.keys(ADMISSION_BANDS).join(stryMutAct_9fa48("266") ? "" : (stryCov_9fa48("266"), ", "))}`))
                });
              }
            }
            asked = n;
          }
        }
      }
    }
    if (stryMutAct_9fa48("269") ? asked !== undefined : stryMutAct_9fa48("268") ? false : stryMutAct_9fa48("267") ? true : (stryCov_9fa48("267", "268", "269"), asked === undefined)) return stryMutAct_9fa48("270") ? {} : (stryCov_9fa48("270"), {
      ok: stryMutAct_9fa48("271") ? false : (stryCov_9fa48("271"), true),
      priority: admission.defaultPriority
    });
    return stryMutAct_9fa48("272") ? {} : (stryCov_9fa48("272"), {
      ok: stryMutAct_9fa48("273") ? false : (stryCov_9fa48("273"), true),
      priority: stryMutAct_9fa48("274") ? Math.min(-PRIORITY_BOUND, Math.min(asked, admission.maxPriority)) : (stryCov_9fa48("274"), Math.max(stryMutAct_9fa48("275") ? +PRIORITY_BOUND : (stryCov_9fa48("275"), -PRIORITY_BOUND), stryMutAct_9fa48("276") ? Math.max(asked, admission.maxPriority) : (stryCov_9fa48("276"), Math.min(asked, admission.maxPriority))))
    });
  }
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
  if (stryMutAct_9fa48("277")) {
    {}
  } else {
    stryCov_9fa48("277");
    return stryMutAct_9fa48("278") ? Math.ceil(Math.max(0, bodyBytes) / BYTES_PER_TOKEN) - (maxTokens ?? UNKNOWN_ANSWER_TOKENS) : (stryCov_9fa48("278"), Math.ceil(stryMutAct_9fa48("279") ? Math.max(0, bodyBytes) * BYTES_PER_TOKEN : (stryCov_9fa48("279"), (stryMutAct_9fa48("280") ? Math.min(0, bodyBytes) : (stryCov_9fa48("280"), Math.max(0, bodyBytes))) / BYTES_PER_TOKEN)) + (stryMutAct_9fa48("281") ? maxTokens && UNKNOWN_ANSWER_TOKENS : (stryCov_9fa48("281"), maxTokens ?? UNKNOWN_ANSWER_TOKENS)));
  }
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
  if (stryMutAct_9fa48("282")) {
    {}
  } else {
    stryCov_9fa48("282");
    const name = deployment.admission.flowHeader;
    const flow = (stryMutAct_9fa48("285") ? name !== undefined : stryMutAct_9fa48("284") ? false : stryMutAct_9fa48("283") ? true : (stryCov_9fa48("283", "284", "285"), name === undefined)) ? undefined : headers.get(name);
    return flow ? stryMutAct_9fa48("286") ? `` : (stryCov_9fa48("286"), `${client}${FLOW_SEPARATOR}${stryMutAct_9fa48("287") ? flow : (stryCov_9fa48("287"), flow.slice(0, 256))}`) : client;
  }
}

/** Free request slots in `view` now: each replica with room counts its slots left (one at least); -1 with no candidate at all. */
export function freeSlots(view: RoutingView, now: number): number {
  if (stryMutAct_9fa48("288")) {
    {}
  } else {
    stryCov_9fa48("288");
    const candidates = view.candidates(now);
    if (stryMutAct_9fa48("291") ? candidates.length !== 0 : stryMutAct_9fa48("290") ? false : stryMutAct_9fa48("289") ? true : (stryCov_9fa48("289", "290", "291"), candidates.length === 0)) return stryMutAct_9fa48("292") ? +1 : (stryCov_9fa48("292"), -1);
    let free = 0;
    for (const c of candidates) if (stryMutAct_9fa48("294") ? false : stryMutAct_9fa48("293") ? true : (stryCov_9fa48("293", "294"), hasRoom(c))) stryMutAct_9fa48("295") ? free -= Math.max(1, Math.floor(c.capacity - c.load)) : (stryCov_9fa48("295"), free += stryMutAct_9fa48("296") ? Math.min(1, Math.floor(c.capacity - c.load)) : (stryCov_9fa48("296"), Math.max(1, Math.floor(stryMutAct_9fa48("297") ? c.capacity + c.load : (stryCov_9fa48("297"), c.capacity - c.load)))));
    return free;
  }
}

/** Whether this isolate's own requests in flight fill every candidate replica (no other isolate's load needed to say so). */
function ownFill(view: RoutingView, now: number): boolean {
  if (stryMutAct_9fa48("298")) {
    {}
  } else {
    stryCov_9fa48("298");
    for (const c of view.candidates(now)) if (stryMutAct_9fa48("302") ? c.inflight >= c.capacity : stryMutAct_9fa48("301") ? c.inflight <= c.capacity : stryMutAct_9fa48("300") ? false : stryMutAct_9fa48("299") ? true : (stryCov_9fa48("299", "300", "301", "302"), c.inflight < c.capacity)) return stryMutAct_9fa48("303") ? true : (stryCov_9fa48("303"), false);
    return stryMutAct_9fa48("304") ? false : (stryCov_9fa48("304"), true);
  }
}

/**
 * Whether a request that meets no ready replica is held: only for a deployment that
 * scales from zero (`autoscaling.minReplicas: 0`), which expects one to start. Any
 * other deployment with no ready replica is down, and its clients hear so at once
 * (503 no_ready_replica) rather than after a wait nothing will end.
 */
export function holdsAtZero(deployment: Deployment): boolean {
  if (stryMutAct_9fa48("305")) {
    {}
  } else {
    stryCov_9fa48("305");
    return stryMutAct_9fa48("308") ? deployment.autoscaling?.minReplicas !== 0 : stryMutAct_9fa48("307") ? false : stryMutAct_9fa48("306") ? true : (stryCov_9fa48("306", "307", "308"), (stryMutAct_9fa48("309") ? deployment.autoscaling.minReplicas : (stryCov_9fa48("309"), deployment.autoscaling?.minReplicas)) === 0);
  }
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
  readonly #queue = new AdmissionQueue<Waiter>(stryMutAct_9fa48("310") ? {} : (stryCov_9fa48("310"), {
    client: stryMutAct_9fa48("311") ? () => undefined : (stryCov_9fa48("311"), c => stryMutAct_9fa48("312") ? this.#clientInflight.get(c) && 0 : (stryCov_9fa48("312"), this.#clientInflight.get(c) ?? 0)),
    flow: stryMutAct_9fa48("313") ? () => undefined : (stryCov_9fa48("313"), f => stryMutAct_9fa48("314") ? this.#flowInflight.get(f) && 0 : (stryCov_9fa48("314"), this.#flowInflight.get(f) ?? 0))
  }));
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
  readonly #debt = new Map<string, {
    slotMs: number;
    at: number;
  }>();
  #inflightTotal = 0;
  /** The relay's budget for this isolate's requests in flight, when it came, and the priority from which it does not apply. */
  #budget: {
    max: number;
    at: number;
    openFrom: number;
  } | undefined;
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
    if (stryMutAct_9fa48("315")) {
      {}
    } else {
      stryCov_9fa48("315");
      this.#now = now;
    }
  }

  /** Requests held now. */
  get held(): number {
    if (stryMutAct_9fa48("316")) {
      {}
    } else {
      stryCov_9fa48("316");
      return this.#queue.size;
    }
  }

  /** Requests let go and not yet ended. */
  get inflight(): number {
    if (stryMutAct_9fa48("317")) {
      {}
    } else {
      stryCov_9fa48("317");
      return this.#inflightTotal;
    }
  }

  /**
   * What this isolate tells its relay: per priority, requests in flight plus held; the
   * same per flow (keys, the largest MAX_DEMAND_FLOWS − 1, the rest summed under one key
   * of this isolate's); and how many it holds. Undefined when it has none.
   */
  demand(): {
    bands: [number, number][];
    held: number;
    flows: [number, string, number][];
  } | undefined {
    if (stryMutAct_9fa48("318")) {
      {}
    } else {
      stryCov_9fa48("318");
      if (stryMutAct_9fa48("321") ? this.#inflightTotal === 0 || this.#queue.size === 0 : stryMutAct_9fa48("320") ? false : stryMutAct_9fa48("319") ? true : (stryCov_9fa48("319", "320", "321"), (stryMutAct_9fa48("323") ? this.#inflightTotal !== 0 : stryMutAct_9fa48("322") ? true : (stryCov_9fa48("322", "323"), this.#inflightTotal === 0)) && (stryMutAct_9fa48("325") ? this.#queue.size !== 0 : stryMutAct_9fa48("324") ? true : (stryCov_9fa48("324", "325"), this.#queue.size === 0)))) return undefined;
      const byBand = new Map(this.#inflight);
      for (const [priority, n] of this.#queue.bands()) byBand.set(priority, stryMutAct_9fa48("327") ? (byBand.get(priority) ?? 0) - n : (stryCov_9fa48("327"), (stryMutAct_9fa48("328") ? byBand.get(priority) && 0 : (stryCov_9fa48("328"), byBand.get(priority) ?? 0)) + n));
      const byFlow = new Map<string, [number, string, number]>();
      const add = (priority: number, flow: string, n: number) => {
        if (stryMutAct_9fa48("329")) {
          {}
        } else {
          stryCov_9fa48("329");
          const k = stryMutAct_9fa48("330") ? `` : (stryCov_9fa48("330"), `${priority} ${flow}`);
          const e = byFlow.get(k);
          if (stryMutAct_9fa48("332") ? false : stryMutAct_9fa48("331") ? true : (stryCov_9fa48("331", "332"), e)) stryMutAct_9fa48("333") ? e[2] -= n : (stryCov_9fa48("333"), e[2] += n);else byFlow.set(k, stryMutAct_9fa48("335") ? [] : (stryCov_9fa48("335"), [priority, this.#keyOf(flow), n]));
        }
      };
      for (const [k, n] of this.#bandFlowInflight) {
        if (stryMutAct_9fa48("336")) {
          {}
        } else {
          stryCov_9fa48("336");
          const cut = k.indexOf(stryMutAct_9fa48("337") ? "" : (stryCov_9fa48("337"), " "));
          add(Number(stryMutAct_9fa48("339") ? k : (stryCov_9fa48("339"), k.slice(0, cut))), stryMutAct_9fa48("340") ? k : (stryCov_9fa48("340"), k.slice(stryMutAct_9fa48("341") ? cut - 1 : (stryCov_9fa48("341"), cut + 1))), n);
        }
      }
      for (const [priority, flow, n] of this.#queue.bandFlows()) if (stryMutAct_9fa48("342")) {
        ;
      } else {
        stryCov_9fa48("342");
        add(priority, flow, n);
      }
      let flows = stryMutAct_9fa48("343") ? [] : (stryCov_9fa48("343"), [...byFlow.values()]);
      if (stryMutAct_9fa48("347") ? flows.length <= MAX_DEMAND_FLOWS : stryMutAct_9fa48("346") ? flows.length >= MAX_DEMAND_FLOWS : stryMutAct_9fa48("345") ? false : stryMutAct_9fa48("344") ? true : (stryCov_9fa48("344", "345", "346", "347"), flows.length > MAX_DEMAND_FLOWS)) {
        if (stryMutAct_9fa48("348")) {
          {}
        } else {
          stryCov_9fa48("348");
          stryMutAct_9fa48("350") ? flows : (stryCov_9fa48("350"), flows.sort(stryMutAct_9fa48("351") ? () => undefined : (stryCov_9fa48("351"), (a, b) => stryMutAct_9fa48("352") ? b[2] + a[2] : (stryCov_9fa48("352"), b[2] - a[2]))));
          const rest = new Map<number, number>();
          for (const [p,, n] of stryMutAct_9fa48("353") ? flows : (stryCov_9fa48("353"), flows.slice(stryMutAct_9fa48("354") ? MAX_DEMAND_FLOWS + 1 : (stryCov_9fa48("354"), MAX_DEMAND_FLOWS - 1)))) rest.set(p, stryMutAct_9fa48("356") ? (rest.get(p) ?? 0) - n : (stryCov_9fa48("356"), (stryMutAct_9fa48("357") ? rest.get(p) && 0 : (stryCov_9fa48("357"), rest.get(p) ?? 0)) + n));
          // One key for the rest, in the highest of their bands (the post has room for one entry).
          const top = stryMutAct_9fa48("358") ? Math.min(...rest.keys()) : (stryCov_9fa48("358"), Math.max(...rest.keys()));
          flows = stryMutAct_9fa48("359") ? [] : (stryCov_9fa48("359"), [...(stryMutAct_9fa48("360") ? flows : (stryCov_9fa48("360"), flows.slice(0, stryMutAct_9fa48("361") ? MAX_DEMAND_FLOWS + 1 : (stryCov_9fa48("361"), MAX_DEMAND_FLOWS - 1)))), stryMutAct_9fa48("362") ? [] : (stryCov_9fa48("362"), [top, this.#restKey, (stryMutAct_9fa48("363") ? [] : (stryCov_9fa48("363"), [...rest.values()])).reduce(stryMutAct_9fa48("364") ? () => undefined : (stryCov_9fa48("364"), (a, b) => stryMutAct_9fa48("365") ? a - b : (stryCov_9fa48("365"), a + b)), 0)])]);
        }
      }
      return stryMutAct_9fa48("366") ? {} : (stryCov_9fa48("366"), {
        bands: stryMutAct_9fa48("367") ? [...byBand] : (stryCov_9fa48("367"), (stryMutAct_9fa48("368") ? [] : (stryCov_9fa48("368"), [...byBand])).filter(stryMutAct_9fa48("369") ? () => undefined : (stryCov_9fa48("369"), ([, n]) => stryMutAct_9fa48("373") ? n <= 0 : stryMutAct_9fa48("372") ? n >= 0 : stryMutAct_9fa48("371") ? false : stryMutAct_9fa48("370") ? true : (stryCov_9fa48("370", "371", "372", "373"), n > 0)))),
        held: this.#queue.size,
        flows
      });
    }
  }

  /**
   * The relay's answer: this isolate's budget of requests in flight (undefined: none
   * applies), and, where it split a band by flow, caps (fractions of a request, kept on average) for this
   * isolate's flows that ask more than their share across the location (a flow
   * without one is not held back), and the priority from which requests are not held
   * to either (`openFrom`: their bands got all they ask).
   */
  setBudget(max: number | undefined, flowCaps?: Record<string, number>, openFrom?: number): void {
    if (stryMutAct_9fa48("374")) {
      {}
    } else {
      stryCov_9fa48("374");
      for (const flow of this.#debt.keys()) if (stryMutAct_9fa48("375")) {
        ;
      } else {
        stryCov_9fa48("375");
        this.#owed(flow);
      } // counted under the caps that applied until now
      this.#budget = (stryMutAct_9fa48("378") ? max !== undefined : stryMutAct_9fa48("377") ? false : stryMutAct_9fa48("376") ? true : (stryCov_9fa48("376", "377", "378"), max === undefined)) ? undefined : stryMutAct_9fa48("379") ? {} : (stryCov_9fa48("379"), {
        max,
        at: this.#now(),
        openFrom: stryMutAct_9fa48("380") ? openFrom && Infinity : (stryCov_9fa48("380"), openFrom ?? Infinity)
      });
      this.#caps = (stryMutAct_9fa48("383") ? max === undefined && !flowCaps : stryMutAct_9fa48("382") ? false : stryMutAct_9fa48("381") ? true : (stryCov_9fa48("381", "382", "383"), (stryMutAct_9fa48("385") ? max !== undefined : stryMutAct_9fa48("384") ? false : (stryCov_9fa48("384", "385"), max === undefined)) || (stryMutAct_9fa48("386") ? flowCaps : (stryCov_9fa48("386"), !flowCaps)))) ? undefined : new Map(Object.entries(flowCaps));
    }
  }
  #keyOf(flow: string): string {
    if (stryMutAct_9fa48("387")) {
      {}
    } else {
      stryCov_9fa48("387");
      let k = this.#keys.get(flow);
      if (stryMutAct_9fa48("390") ? k !== undefined : stryMutAct_9fa48("389") ? false : stryMutAct_9fa48("388") ? true : (stryCov_9fa48("388", "389", "390"), k === undefined)) {
        if (stryMutAct_9fa48("391")) {
          {}
        } else {
          stryCov_9fa48("391");
          if (stryMutAct_9fa48("395") ? this.#keys.size < 10_000 : stryMutAct_9fa48("394") ? this.#keys.size > 10_000 : stryMutAct_9fa48("393") ? false : stryMutAct_9fa48("392") ? true : (stryCov_9fa48("392", "393", "394", "395"), this.#keys.size >= 10_000)) if (stryMutAct_9fa48("396")) {
            ;
          } else {
            stryCov_9fa48("396");
            this.#keys.clear();
          }
          k = flowKey(flow);
          if (stryMutAct_9fa48("397")) {
            ;
          } else {
            stryCov_9fa48("397");
            this.#keys.set(flow, k);
          }
        }
      }
      return k;
    }
  }

  /**
   * Whether this isolate holds requests or keeps to a fresh budget: then its view is
   * refreshed at the TTL, since the ask carries its demand and brings its budget back.
   */
  get busy(): boolean {
    if (stryMutAct_9fa48("398")) {
      {}
    } else {
      stryCov_9fa48("398");
      return stryMutAct_9fa48("401") ? this.#queue.size > 0 && this.#freshBudget() !== undefined : stryMutAct_9fa48("400") ? false : stryMutAct_9fa48("399") ? true : (stryCov_9fa48("399", "400", "401"), (stryMutAct_9fa48("404") ? this.#queue.size <= 0 : stryMutAct_9fa48("403") ? this.#queue.size >= 0 : stryMutAct_9fa48("402") ? false : (stryCov_9fa48("402", "403", "404"), this.#queue.size > 0)) || (stryMutAct_9fa48("406") ? this.#freshBudget() === undefined : stryMutAct_9fa48("405") ? false : (stryCov_9fa48("405", "406"), this.#freshBudget() !== undefined)));
    }
  }

  /** A request this gate let go has started. */
  started(priority: number, flow: string): void {
    if (stryMutAct_9fa48("407")) {
      {}
    } else {
      stryCov_9fa48("407");
      if (stryMutAct_9fa48("409") ? false : stryMutAct_9fa48("408") ? true : (stryCov_9fa48("408", "409"), this.#caps)) if (stryMutAct_9fa48("410")) {
        ;
      } else {
        stryCov_9fa48("410");
        this.#owed(flow);
      }
      this.#inflight.set(priority, stryMutAct_9fa48("412") ? (this.#inflight.get(priority) ?? 0) - 1 : (stryCov_9fa48("412"), (stryMutAct_9fa48("413") ? this.#inflight.get(priority) && 0 : (stryCov_9fa48("413"), this.#inflight.get(priority) ?? 0)) + 1));
      const bf = stryMutAct_9fa48("414") ? `` : (stryCov_9fa48("414"), `${priority} ${flow}`);
      this.#bandFlowInflight.set(bf, stryMutAct_9fa48("416") ? (this.#bandFlowInflight.get(bf) ?? 0) - 1 : (stryCov_9fa48("416"), (stryMutAct_9fa48("417") ? this.#bandFlowInflight.get(bf) && 0 : (stryCov_9fa48("417"), this.#bandFlowInflight.get(bf) ?? 0)) + 1));
      this.#flowInflight.set(flow, stryMutAct_9fa48("419") ? (this.#flowInflight.get(flow) ?? 0) - 1 : (stryCov_9fa48("419"), (stryMutAct_9fa48("420") ? this.#flowInflight.get(flow) && 0 : (stryCov_9fa48("420"), this.#flowInflight.get(flow) ?? 0)) + 1));
      const client = clientOf(flow);
      this.#clientInflight.set(client, stryMutAct_9fa48("422") ? (this.#clientInflight.get(client) ?? 0) - 1 : (stryCov_9fa48("422"), (stryMutAct_9fa48("423") ? this.#clientInflight.get(client) && 0 : (stryCov_9fa48("423"), this.#clientInflight.get(client) ?? 0)) + 1));
      stryMutAct_9fa48("424") ? this.#inflightTotal-- : (stryCov_9fa48("424"), this.#inflightTotal++);
    }
  }

  /**
   * A request that started has ended. `freed`: it held a slot, now free whatever the view
   * says (not for one the replicas refused, which held none).
   */
  ended(priority: number, flow: string, freed = stryMutAct_9fa48("425") ? false : (stryCov_9fa48("425"), true)): void {
    if (stryMutAct_9fa48("426")) {
      {}
    } else {
      stryCov_9fa48("426");
      if (stryMutAct_9fa48("428") ? false : stryMutAct_9fa48("427") ? true : (stryCov_9fa48("427", "428"), this.#caps)) if (stryMutAct_9fa48("429")) {
        ;
      } else {
        stryCov_9fa48("429");
        this.#owed(flow);
      }
      const n = stryMutAct_9fa48("430") ? this.#inflight.get(priority) && 0 : (stryCov_9fa48("430"), this.#inflight.get(priority) ?? 0);
      if (stryMutAct_9fa48("434") ? n > 1 : stryMutAct_9fa48("433") ? n < 1 : stryMutAct_9fa48("432") ? false : stryMutAct_9fa48("431") ? true : (stryCov_9fa48("431", "432", "433", "434"), n <= 1)) {
        if (stryMutAct_9fa48("435")) {
          ;
        } else {
          stryCov_9fa48("435");
          this.#inflight.delete(priority);
        }
      } else this.#inflight.set(priority, stryMutAct_9fa48("437") ? n + 1 : (stryCov_9fa48("437"), n - 1));
      const bf = stryMutAct_9fa48("438") ? `` : (stryCov_9fa48("438"), `${priority} ${flow}`);
      const m = stryMutAct_9fa48("439") ? this.#bandFlowInflight.get(bf) && 0 : (stryCov_9fa48("439"), this.#bandFlowInflight.get(bf) ?? 0);
      if (stryMutAct_9fa48("443") ? m > 1 : stryMutAct_9fa48("442") ? m < 1 : stryMutAct_9fa48("441") ? false : stryMutAct_9fa48("440") ? true : (stryCov_9fa48("440", "441", "442", "443"), m <= 1)) {
        if (stryMutAct_9fa48("444")) {
          ;
        } else {
          stryCov_9fa48("444");
          this.#bandFlowInflight.delete(bf);
        }
      } else this.#bandFlowInflight.set(bf, stryMutAct_9fa48("446") ? m + 1 : (stryCov_9fa48("446"), m - 1));
      const f = stryMutAct_9fa48("447") ? this.#flowInflight.get(flow) && 0 : (stryCov_9fa48("447"), this.#flowInflight.get(flow) ?? 0);
      if (stryMutAct_9fa48("451") ? f > 1 : stryMutAct_9fa48("450") ? f < 1 : stryMutAct_9fa48("449") ? false : stryMutAct_9fa48("448") ? true : (stryCov_9fa48("448", "449", "450", "451"), f <= 1)) {
        if (stryMutAct_9fa48("452")) {
          ;
        } else {
          stryCov_9fa48("452");
          this.#flowInflight.delete(flow);
        }
      } else this.#flowInflight.set(flow, stryMutAct_9fa48("454") ? f + 1 : (stryCov_9fa48("454"), f - 1));
      const client = clientOf(flow);
      const c = stryMutAct_9fa48("455") ? this.#clientInflight.get(client) && 0 : (stryCov_9fa48("455"), this.#clientInflight.get(client) ?? 0);
      if (stryMutAct_9fa48("459") ? c > 1 : stryMutAct_9fa48("458") ? c < 1 : stryMutAct_9fa48("457") ? false : stryMutAct_9fa48("456") ? true : (stryCov_9fa48("456", "457", "458", "459"), c <= 1)) {
        if (stryMutAct_9fa48("460")) {
          ;
        } else {
          stryCov_9fa48("460");
          this.#clientInflight.delete(client);
        }
      } else this.#clientInflight.set(client, stryMutAct_9fa48("462") ? c + 1 : (stryCov_9fa48("462"), c - 1));
      if (stryMutAct_9fa48("466") ? this.#inflightTotal <= 0 : stryMutAct_9fa48("465") ? this.#inflightTotal >= 0 : stryMutAct_9fa48("464") ? false : stryMutAct_9fa48("463") ? true : (stryCov_9fa48("463", "464", "465", "466"), this.#inflightTotal > 0)) stryMutAct_9fa48("467") ? this.#inflightTotal++ : (stryCov_9fa48("467"), this.#inflightTotal--);
      if (stryMutAct_9fa48("470") ? false : stryMutAct_9fa48("469") ? true : stryMutAct_9fa48("468") ? freed : (stryCov_9fa48("468", "469", "470"), !freed)) return;
      this.#freed = stryMutAct_9fa48("471") ? this.#freedNow() - 1 : (stryCov_9fa48("471"), this.#freedNow() + 1);
      this.#freedAt = this.#now();
    }
  }

  /**
   * A request this gate let go used `actual` tokens where its ticket's `estimated` cost
   * ordered it (tokenCost): its flow's place in the fair order moves by the difference
   * (AdmissionQueue.correct), so a flow that asks large budgets and uses few is not
   * held back for what it never used, nor one that outruns its estimate favoured.
   */
  correct(priority: number, flow: string, estimated: number, actual: number): void {
    if (stryMutAct_9fa48("472")) {
      {}
    } else {
      stryCov_9fa48("472");
      this.#queue.correct(priority, flow, stryMutAct_9fa48("474") ? actual + estimated : (stryCov_9fa48("474"), actual - estimated));
    }
  }
  #freedNow(): number {
    if (stryMutAct_9fa48("475")) {
      {}
    } else {
      stryCov_9fa48("475");
      return (stryMutAct_9fa48("479") ? this.#now() - this.#freedAt <= HOLD_POLL_MS : stryMutAct_9fa48("478") ? this.#now() - this.#freedAt >= HOLD_POLL_MS : stryMutAct_9fa48("477") ? false : stryMutAct_9fa48("476") ? true : (stryCov_9fa48("476", "477", "478", "479"), (stryMutAct_9fa48("480") ? this.#now() + this.#freedAt : (stryCov_9fa48("480"), this.#now() - this.#freedAt)) > HOLD_POLL_MS)) ? 0 : this.#freed;
    }
  }

  /** Free slots now: the view's less those reserved, or the slots this isolate just freed when more. */
  #free(slots: number): number {
    if (stryMutAct_9fa48("481")) {
      {}
    } else {
      stryCov_9fa48("481");
      return stryMutAct_9fa48("482") ? Math.min(slots - this.#released, this.#freedNow()) : (stryCov_9fa48("482"), Math.max(stryMutAct_9fa48("483") ? slots + this.#released : (stryCov_9fa48("483"), slots - this.#released), this.#freedNow()));
    }
  }

  /** The relay's budget while it holds (BUDGET_TTL_MS after it came); undefined when none applies. */
  #freshBudget(): {
    max: number;
    at: number;
    openFrom: number;
  } | undefined {
    if (stryMutAct_9fa48("484")) {
      {}
    } else {
      stryCov_9fa48("484");
      const b = this.#budget;
      return (stryMutAct_9fa48("487") ? b || this.#now() - b.at <= BUDGET_TTL_MS : stryMutAct_9fa48("486") ? false : stryMutAct_9fa48("485") ? true : (stryCov_9fa48("485", "486", "487"), b && (stryMutAct_9fa48("490") ? this.#now() - b.at > BUDGET_TTL_MS : stryMutAct_9fa48("489") ? this.#now() - b.at < BUDGET_TTL_MS : stryMutAct_9fa48("488") ? true : (stryCov_9fa48("488", "489", "490"), (stryMutAct_9fa48("491") ? this.#now() + b.at : (stryCov_9fa48("491"), this.#now() - b.at)) <= BUDGET_TTL_MS)))) ? b : undefined;
    }
  }

  /** Whether a request of `priority` is free of the budget: its band got all it asks (the headroom kept for it), or no budget applies. */
  #open(priority: number): boolean {
    if (stryMutAct_9fa48("492")) {
      {}
    } else {
      stryCov_9fa48("492");
      const b = this.#freshBudget();
      return stryMutAct_9fa48("495") ? !b && priority >= b.openFrom : stryMutAct_9fa48("494") ? false : stryMutAct_9fa48("493") ? true : (stryCov_9fa48("493", "494", "495"), (stryMutAct_9fa48("496") ? b : (stryCov_9fa48("496"), !b)) || (stryMutAct_9fa48("499") ? priority < b.openFrom : stryMutAct_9fa48("498") ? priority > b.openFrom : stryMutAct_9fa48("497") ? false : (stryCov_9fa48("497", "498", "499"), priority >= b.openFrom)));
    }
  }

  /**
   * Held requests that go before one of `priority`: all of them, except under a budget
   * that leaves its band open, where only those of its band and above do (the lower
   * bands keep to the budget, so they would not take the slot it finds).
   */
  #ahead(priority: number): number {
    if (stryMutAct_9fa48("500")) {
      {}
    } else {
      stryCov_9fa48("500");
      const b = this.#freshBudget();
      const open = stryMutAct_9fa48("503") ? b !== undefined || priority >= b.openFrom : stryMutAct_9fa48("502") ? false : stryMutAct_9fa48("501") ? true : (stryCov_9fa48("501", "502", "503"), (stryMutAct_9fa48("505") ? b === undefined : stryMutAct_9fa48("504") ? true : (stryCov_9fa48("504", "505"), b !== undefined)) && (stryMutAct_9fa48("508") ? priority < b.openFrom : stryMutAct_9fa48("507") ? priority > b.openFrom : stryMutAct_9fa48("506") ? true : (stryCov_9fa48("506", "507", "508"), priority >= b.openFrom)));
      // No budget: the queue's own order, where no lower band goes first.
      if (stryMutAct_9fa48("511") ? false : stryMutAct_9fa48("510") ? true : stryMutAct_9fa48("509") ? b : (stryCov_9fa48("509", "510", "511"), !b)) return this.#heldAtOrAbove(priority);
      if (stryMutAct_9fa48("514") ? !open || !this.#caps : stryMutAct_9fa48("513") ? false : stryMutAct_9fa48("512") ? true : (stryCov_9fa48("512", "513", "514"), (stryMutAct_9fa48("515") ? open : (stryCov_9fa48("515"), !open)) && (stryMutAct_9fa48("516") ? this.#caps : (stryCov_9fa48("516"), !this.#caps)))) return this.#queue.size;
      // Under caps per flow, a held request of a flow at its cap goes nowhere before this
      // one: only the others count (a flow under its share never waits behind one over it).
      let n = 0;
      for (const [p, flow, count] of this.#queue.bandFlows()) {
        if (stryMutAct_9fa48("517")) {
          {}
        } else {
          stryCov_9fa48("517");
          if (stryMutAct_9fa48("520") ? open || p < priority : stryMutAct_9fa48("519") ? false : stryMutAct_9fa48("518") ? true : (stryCov_9fa48("518", "519", "520"), open && (stryMutAct_9fa48("523") ? p >= priority : stryMutAct_9fa48("522") ? p <= priority : stryMutAct_9fa48("521") ? true : (stryCov_9fa48("521", "522", "523"), p < priority)))) continue;
          if (stryMutAct_9fa48("526") ? this.#caps && !open || !this.#withinCap(flow, this.#flowInflight.get(flow) ?? 0) : stryMutAct_9fa48("525") ? false : stryMutAct_9fa48("524") ? true : (stryCov_9fa48("524", "525", "526"), (stryMutAct_9fa48("528") ? this.#caps || !open : stryMutAct_9fa48("527") ? true : (stryCov_9fa48("527", "528"), this.#caps && (stryMutAct_9fa48("529") ? open : (stryCov_9fa48("529"), !open)))) && (stryMutAct_9fa48("530") ? this.#withinCap(flow, this.#flowInflight.get(flow) ?? 0) : (stryCov_9fa48("530"), !this.#withinCap(flow, stryMutAct_9fa48("531") ? this.#flowInflight.get(flow) && 0 : (stryCov_9fa48("531"), this.#flowInflight.get(flow) ?? 0)))))) continue;
          stryMutAct_9fa48("532") ? n -= count : (stryCov_9fa48("532"), n += count);
        }
      }
      return n;
    }
  }
  #heldAtOrAbove(priority: number): number {
    if (stryMutAct_9fa48("533")) {
      {}
    } else {
      stryCov_9fa48("533");
      if (stryMutAct_9fa48("536") ? this.#queue.size !== 0 : stryMutAct_9fa48("535") ? false : stryMutAct_9fa48("534") ? true : (stryCov_9fa48("534", "535", "536"), this.#queue.size === 0)) return 0; // the plain path's case: nothing held
      let n = 0;
      for (const [p, count] of this.#queue.bands()) if (stryMutAct_9fa48("540") ? p < priority : stryMutAct_9fa48("539") ? p > priority : stryMutAct_9fa48("538") ? false : stryMutAct_9fa48("537") ? true : (stryCov_9fa48("537", "538", "539", "540"), p >= priority)) stryMutAct_9fa48("541") ? n -= count : (stryCov_9fa48("541"), n += count);
      return n;
    }
  }

  /** Whether this gate has a request in flight of a lower priority than `priority`. */
  #runsBelow(priority: number): boolean {
    if (stryMutAct_9fa48("542")) {
      {}
    } else {
      stryCov_9fa48("542");
      for (const [p, n] of this.#inflight) if (stryMutAct_9fa48("545") ? p < priority || n > 0 : stryMutAct_9fa48("544") ? false : stryMutAct_9fa48("543") ? true : (stryCov_9fa48("543", "544", "545"), (stryMutAct_9fa48("548") ? p >= priority : stryMutAct_9fa48("547") ? p <= priority : stryMutAct_9fa48("546") ? true : (stryCov_9fa48("546", "547", "548"), p < priority)) && (stryMutAct_9fa48("551") ? n <= 0 : stryMutAct_9fa48("550") ? n >= 0 : stryMutAct_9fa48("549") ? true : (stryCov_9fa48("549", "550", "551"), n > 0)))) return stryMutAct_9fa48("552") ? false : (stryCov_9fa48("552"), true);
      return stryMutAct_9fa48("553") ? true : (stryCov_9fa48("553"), false);
    }
  }

  /**
   * Whether one more request (of `flow`, where known) may go by the relay's answer: always
   * without a fresh one. With caps per flow (the relay split the band by flow), a flow
   * keeps to its cap and a flow without one goes (it asks no more than its share);
   * otherwise the isolate keeps to its budget.
   */
  #underBudget(flow?: string): boolean {
    if (stryMutAct_9fa48("554")) {
      {}
    } else {
      stryCov_9fa48("554");
      const b = this.#freshBudget();
      if (stryMutAct_9fa48("557") ? false : stryMutAct_9fa48("556") ? true : stryMutAct_9fa48("555") ? b : (stryCov_9fa48("555", "556", "557"), !b)) return stryMutAct_9fa48("558") ? false : (stryCov_9fa48("558"), true);
      if (stryMutAct_9fa48("561") ? this.#caps || flow !== undefined : stryMutAct_9fa48("560") ? false : stryMutAct_9fa48("559") ? true : (stryCov_9fa48("559", "560", "561"), this.#caps && (stryMutAct_9fa48("563") ? flow === undefined : stryMutAct_9fa48("562") ? true : (stryCov_9fa48("562", "563"), flow !== undefined)))) return stryMutAct_9fa48("564") ? false : (stryCov_9fa48("564"), true); // #flowUnderShare applies the cap
      return stryMutAct_9fa48("568") ? this.#inflightTotal + this.#released >= b.max : stryMutAct_9fa48("567") ? this.#inflightTotal + this.#released <= b.max : stryMutAct_9fa48("566") ? false : stryMutAct_9fa48("565") ? true : (stryCov_9fa48("565", "566", "567", "568"), (stryMutAct_9fa48("569") ? this.#inflightTotal - this.#released : (stryCov_9fa48("569"), this.#inflightTotal + this.#released)) < b.max);
    }
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
    if (stryMutAct_9fa48("570")) {
      {}
    } else {
      stryCov_9fa48("570");
      const b = this.#freshBudget();
      if (stryMutAct_9fa48("573") ? false : stryMutAct_9fa48("572") ? true : stryMutAct_9fa48("571") ? b : (stryCov_9fa48("571", "572", "573"), !b)) return undefined;
      const demand = this.#queue.flows();
      for (const [f, n] of this.#flowInflight) demand.set(f, stryMutAct_9fa48("575") ? (demand.get(f) ?? 0) - n : (stryCov_9fa48("575"), (stryMutAct_9fa48("576") ? demand.get(f) && 0 : (stryCov_9fa48("576"), demand.get(f) ?? 0)) + n));
      if (stryMutAct_9fa48("579") ? arriving === undefined : stryMutAct_9fa48("578") ? false : stryMutAct_9fa48("577") ? true : (stryCov_9fa48("577", "578", "579"), arriving !== undefined)) demand.set(arriving, stryMutAct_9fa48("581") ? (demand.get(arriving) ?? 0) - 1 : (stryCov_9fa48("581"), (stryMutAct_9fa48("582") ? demand.get(arriving) && 0 : (stryCov_9fa48("582"), demand.get(arriving) ?? 0)) + 1));
      const levels = flowLevels(demand, b.max, clientOf);
      return stryMutAct_9fa48("583") ? () => undefined : (stryCov_9fa48("583"), flow => stryMutAct_9fa48("584") ? Math.max(demand.get(flow) ?? 0, levels.get(flow) ?? 0) : (stryCov_9fa48("584"), Math.min(stryMutAct_9fa48("585") ? demand.get(flow) && 0 : (stryCov_9fa48("585"), demand.get(flow) ?? 0), stryMutAct_9fa48("586") ? levels.get(flow) && 0 : (stryCov_9fa48("586"), levels.get(flow) ?? 0))));
    }
  }

  /** Whether one more request of `flow` may go now within its share (always, without a budget). */
  #flowUnderShare(flow: string): boolean {
    if (stryMutAct_9fa48("587")) {
      {}
    } else {
      stryCov_9fa48("587");
      const share = this.#shares(flow);
      if (stryMutAct_9fa48("590") ? false : stryMutAct_9fa48("589") ? true : stryMutAct_9fa48("588") ? share : (stryCov_9fa48("588", "589", "590"), !share)) return stryMutAct_9fa48("591") ? false : (stryCov_9fa48("591"), true);
      const inflight = stryMutAct_9fa48("592") ? this.#flowInflight.get(flow) && 0 : (stryCov_9fa48("592"), this.#flowInflight.get(flow) ?? 0);
      // The location's cap on the flow where it asks more than its share there; none where it does not.
      if (stryMutAct_9fa48("594") ? false : stryMutAct_9fa48("593") ? true : (stryCov_9fa48("593", "594"), this.#caps)) return this.#withinCap(flow, inflight);
      return stryMutAct_9fa48("598") ? inflight >= share(flow) : stryMutAct_9fa48("597") ? inflight <= share(flow) : stryMutAct_9fa48("596") ? false : stryMutAct_9fa48("595") ? true : (stryCov_9fa48("595", "596", "597", "598"), inflight < share(flow));
    }
  }

  /** Whether a capped flow with `n` requests in flight here may start one more: under its cap rounded up, and owing nothing. */
  #withinCap(flow: string, n: number): boolean {
    if (stryMutAct_9fa48("599")) {
      {}
    } else {
      stryCov_9fa48("599");
      const cap = stryMutAct_9fa48("600") ? this.#caps.get(this.#keyOf(flow)) : (stryCov_9fa48("600"), this.#caps?.get(this.#keyOf(flow)));
      return stryMutAct_9fa48("603") ? cap === undefined && n < Math.ceil(cap) && this.#owed(flow) <= 0 : stryMutAct_9fa48("602") ? false : stryMutAct_9fa48("601") ? true : (stryCov_9fa48("601", "602", "603"), (stryMutAct_9fa48("605") ? cap !== undefined : stryMutAct_9fa48("604") ? false : (stryCov_9fa48("604", "605"), cap === undefined)) || (stryMutAct_9fa48("607") ? n < Math.ceil(cap) || this.#owed(flow) <= 0 : stryMutAct_9fa48("606") ? false : (stryCov_9fa48("606", "607"), (stryMutAct_9fa48("610") ? n >= Math.ceil(cap) : stryMutAct_9fa48("609") ? n <= Math.ceil(cap) : stryMutAct_9fa48("608") ? true : (stryCov_9fa48("608", "609", "610"), n < Math.ceil(cap))) && (stryMutAct_9fa48("613") ? this.#owed(flow) > 0 : stryMutAct_9fa48("612") ? this.#owed(flow) < 0 : stryMutAct_9fa48("611") ? true : (stryCov_9fa48("611", "612", "613"), this.#owed(flow) <= 0)))));
    }
  }

  /**
   * Brings a flow's debt up to now (its requests in flight beyond its cap, over the time
   * since last counted) and returns it; forgets it when the flow has no cap (or the
   * budget lapsed). Called before the flow's count in flight changes, and before a check.
   */
  #owed(flow: string): number {
    if (stryMutAct_9fa48("614")) {
      {}
    } else {
      stryCov_9fa48("614");
      const cap = this.#freshBudget() ? stryMutAct_9fa48("615") ? this.#caps.get(this.#keyOf(flow)) : (stryCov_9fa48("615"), this.#caps?.get(this.#keyOf(flow))) : undefined;
      const now = this.#now();
      const d = this.#debt.get(flow);
      if (stryMutAct_9fa48("618") ? cap !== undefined : stryMutAct_9fa48("617") ? false : stryMutAct_9fa48("616") ? true : (stryCov_9fa48("616", "617", "618"), cap === undefined)) {
        if (stryMutAct_9fa48("619")) {
          {}
        } else {
          stryCov_9fa48("619");
          if (stryMutAct_9fa48("620")) {
            ;
          } else {
            stryCov_9fa48("620");
            this.#debt.delete(flow);
          }
          return 0;
        }
      }
      if (stryMutAct_9fa48("623") ? false : stryMutAct_9fa48("622") ? true : stryMutAct_9fa48("621") ? d : (stryCov_9fa48("621", "622", "623"), !d)) {
        if (stryMutAct_9fa48("624")) {
          {}
        } else {
          stryCov_9fa48("624");
          this.#debt.set(flow, stryMutAct_9fa48("626") ? {} : (stryCov_9fa48("626"), {
            slotMs: 0,
            at: now
          }));
          return 0;
        }
      }
      const credit = (stryMutAct_9fa48("630") ? this.#queue.heldOf(flow) <= 0 : stryMutAct_9fa48("629") ? this.#queue.heldOf(flow) >= 0 : stryMutAct_9fa48("628") ? false : stryMutAct_9fa48("627") ? true : (stryCov_9fa48("627", "628", "629", "630"), this.#queue.heldOf(flow) > 0)) ? stryMutAct_9fa48("631") ? cap / HOLD_POLL_MS : (stryCov_9fa48("631"), cap * HOLD_POLL_MS) : 0;
      d.slotMs = stryMutAct_9fa48("632") ? Math.min(-credit, d.slotMs + ((this.#flowInflight.get(flow) ?? 0) - cap) * (now - d.at)) : (stryCov_9fa48("632"), Math.max(stryMutAct_9fa48("633") ? +credit : (stryCov_9fa48("633"), -credit), stryMutAct_9fa48("634") ? d.slotMs - ((this.#flowInflight.get(flow) ?? 0) - cap) * (now - d.at) : (stryCov_9fa48("634"), d.slotMs + (stryMutAct_9fa48("635") ? ((this.#flowInflight.get(flow) ?? 0) - cap) / (now - d.at) : (stryCov_9fa48("635"), (stryMutAct_9fa48("636") ? (this.#flowInflight.get(flow) ?? 0) + cap : (stryCov_9fa48("636"), (stryMutAct_9fa48("637") ? this.#flowInflight.get(flow) && 0 : (stryCov_9fa48("637"), this.#flowInflight.get(flow) ?? 0)) - cap)) * (stryMutAct_9fa48("638") ? now + d.at : (stryCov_9fa48("638"), now - d.at)))))));
      d.at = now;
      return d.slotMs;
    }
  }

  /**
   * Waits until the request may be dispatched ("go"), or says why not. A request
   * that finds a free slot and nobody waiting goes at once: the path's only cost
   * when the deployment is not saturated. A request that went through the queue
   * (`queued`) must call dispatching() once, when it is dispatched or gives up.
   */
  async enter(deployment: Deployment, view: RoutingView, ticket: Ticket): Promise<Admitted> {
    if (stryMutAct_9fa48("639")) {
      {}
    } else {
      stryCov_9fa48("639");
      this.#view = view;
      const slots = freeSlots(view, this.#now());
      // No replica at all: the dispatch answers no_ready_replica, unless the deployment scales from zero.
      // Never for a request that went already (`again`): it waits, so a retry is never a busy loop.
      if (stryMutAct_9fa48("642") ? slots < 0 && !holdsAtZero(deployment) || !ticket.again : stryMutAct_9fa48("641") ? false : stryMutAct_9fa48("640") ? true : (stryCov_9fa48("640", "641", "642"), (stryMutAct_9fa48("644") ? slots < 0 || !holdsAtZero(deployment) : stryMutAct_9fa48("643") ? true : (stryCov_9fa48("643", "644"), (stryMutAct_9fa48("647") ? slots >= 0 : stryMutAct_9fa48("646") ? slots <= 0 : stryMutAct_9fa48("645") ? true : (stryCov_9fa48("645", "646", "647"), slots < 0)) && (stryMutAct_9fa48("648") ? holdsAtZero(deployment) : (stryCov_9fa48("648"), !holdsAtZero(deployment))))) && (stryMutAct_9fa48("649") ? ticket.again : (stryCov_9fa48("649"), !ticket.again)))) return GO;
      const free = this.#free(slots);
      const allowed = stryMutAct_9fa48("652") ? this.#open(ticket.priority) && this.#underBudget(ticket.flow) && this.#flowUnderShare(ticket.flow) : stryMutAct_9fa48("651") ? false : stryMutAct_9fa48("650") ? true : (stryCov_9fa48("650", "651", "652"), this.#open(ticket.priority) || (stryMutAct_9fa48("654") ? this.#underBudget(ticket.flow) || this.#flowUnderShare(ticket.flow) : stryMutAct_9fa48("653") ? false : (stryCov_9fa48("653", "654"), this.#underBudget(ticket.flow) && this.#flowUnderShare(ticket.flow))));
      const ahead = this.#ahead(ticket.priority);
      if (stryMutAct_9fa48("657") ? free > 0 && ahead === 0 && !ticket.again || allowed : stryMutAct_9fa48("656") ? false : stryMutAct_9fa48("655") ? true : (stryCov_9fa48("655", "656", "657"), (stryMutAct_9fa48("659") ? free > 0 && ahead === 0 || !ticket.again : stryMutAct_9fa48("658") ? true : (stryCov_9fa48("658", "659"), (stryMutAct_9fa48("661") ? free > 0 || ahead === 0 : stryMutAct_9fa48("660") ? true : (stryCov_9fa48("660", "661"), (stryMutAct_9fa48("664") ? free <= 0 : stryMutAct_9fa48("663") ? free >= 0 : stryMutAct_9fa48("662") ? true : (stryCov_9fa48("662", "663", "664"), free > 0)) && (stryMutAct_9fa48("666") ? ahead !== 0 : stryMutAct_9fa48("665") ? true : (stryCov_9fa48("665", "666"), ahead === 0)))) && (stryMutAct_9fa48("667") ? ticket.again : (stryCov_9fa48("667"), !ticket.again)))) && allowed)) {
        if (stryMutAct_9fa48("668")) {
          {}
        } else {
          stryCov_9fa48("668");
          if (stryMutAct_9fa48("672") ? this.#freedNow() <= 0 : stryMutAct_9fa48("671") ? this.#freedNow() >= 0 : stryMutAct_9fa48("670") ? false : stryMutAct_9fa48("669") ? true : (stryCov_9fa48("669", "670", "671", "672"), this.#freedNow() > 0)) stryMutAct_9fa48("673") ? this.#freed++ : (stryCov_9fa48("673"), this.#freed--);
          return GO;
        }
      }
      if (stryMutAct_9fa48("676") ? ticket.signal.aborted : stryMutAct_9fa48("675") ? false : stryMutAct_9fa48("674") ? true : (stryCov_9fa48("674", "675", "676"), ticket.signal?.aborted)) return stryMutAct_9fa48("677") ? {} : (stryCov_9fa48("677"), {
        outcome: stryMutAct_9fa48("678") ? "" : (stryCov_9fa48("678"), "gone"),
        queued: stryMutAct_9fa48("679") ? true : (stryCov_9fa48("679"), false)
      });
      // Saturated (not just others waiting ahead): a sheddable request is refused rather than held.
      if (stryMutAct_9fa48("682") ? ticket.priority < 0 || free <= 0 || ticket.again : stryMutAct_9fa48("681") ? false : stryMutAct_9fa48("680") ? true : (stryCov_9fa48("680", "681", "682"), (stryMutAct_9fa48("685") ? ticket.priority >= 0 : stryMutAct_9fa48("684") ? ticket.priority <= 0 : stryMutAct_9fa48("683") ? true : (stryCov_9fa48("683", "684", "685"), ticket.priority < 0)) && (stryMutAct_9fa48("687") ? free <= 0 && ticket.again : stryMutAct_9fa48("686") ? true : (stryCov_9fa48("686", "687"), (stryMutAct_9fa48("690") ? free > 0 : stryMutAct_9fa48("689") ? free < 0 : stryMutAct_9fa48("688") ? false : (stryCov_9fa48("688", "689", "690"), free <= 0)) || ticket.again)))) return stryMutAct_9fa48("691") ? {} : (stryCov_9fa48("691"), {
        outcome: stryMutAct_9fa48("692") ? "" : (stryCov_9fa48("692"), "shed"),
        queued: stryMutAct_9fa48("693") ? true : (stryCov_9fa48("693"), false)
      });
      // Full by other isolates' load only, as reported (up to ~0.75 s old), with nobody waiting
      // ahead here: the replicas' own answer decides (reject-before-accept; a refused request waits
      // here again). Held at once only where this isolate's own requests fill every replica,
      // which it knows exactly. Holding on stale reports cost a third of the fleet's throughput
      // with 4 isolates (bench/admission.ts). Not even then where some of them are of a lower
      // priority than this one: a replica whose engine preempts takes it past them at once
      // (docs/protocol.md, "By priority"); one that does not refuses it, and it waits here again.
      if (stryMutAct_9fa48("696") ? slots === 0 && ahead === 0 && !ticket.again && allowed || !ownFill(view, this.#now()) || this.#runsBelow(ticket.priority) : stryMutAct_9fa48("695") ? false : stryMutAct_9fa48("694") ? true : (stryCov_9fa48("694", "695", "696"), (stryMutAct_9fa48("698") ? slots === 0 && ahead === 0 && !ticket.again || allowed : stryMutAct_9fa48("697") ? true : (stryCov_9fa48("697", "698"), (stryMutAct_9fa48("700") ? slots === 0 && ahead === 0 || !ticket.again : stryMutAct_9fa48("699") ? true : (stryCov_9fa48("699", "700"), (stryMutAct_9fa48("702") ? slots === 0 || ahead === 0 : stryMutAct_9fa48("701") ? true : (stryCov_9fa48("701", "702"), (stryMutAct_9fa48("704") ? slots !== 0 : stryMutAct_9fa48("703") ? true : (stryCov_9fa48("703", "704"), slots === 0)) && (stryMutAct_9fa48("706") ? ahead !== 0 : stryMutAct_9fa48("705") ? true : (stryCov_9fa48("705", "706"), ahead === 0)))) && (stryMutAct_9fa48("707") ? ticket.again : (stryCov_9fa48("707"), !ticket.again)))) && allowed)) && (stryMutAct_9fa48("709") ? !ownFill(view, this.#now()) && this.#runsBelow(ticket.priority) : stryMutAct_9fa48("708") ? true : (stryCov_9fa48("708", "709"), (stryMutAct_9fa48("710") ? ownFill(view, this.#now()) : (stryCov_9fa48("710"), !ownFill(view, this.#now()))) || this.#runsBelow(ticket.priority))))) return GO;
      const waitMs = stryMutAct_9fa48("711") ? Math.max(deployment.admission.maxWaitMs, ticket.deadline - this.#now()) : (stryCov_9fa48("711"), Math.min(deployment.admission.maxWaitMs, stryMutAct_9fa48("712") ? ticket.deadline + this.#now() : (stryCov_9fa48("712"), ticket.deadline - this.#now())));
      if (stryMutAct_9fa48("716") ? waitMs > 0 : stryMutAct_9fa48("715") ? waitMs < 0 : stryMutAct_9fa48("714") ? false : stryMutAct_9fa48("713") ? true : (stryCov_9fa48("713", "714", "715", "716"), waitMs <= 0)) return stryMutAct_9fa48("717") ? {} : (stryCov_9fa48("717"), {
        outcome: stryMutAct_9fa48("718") ? "" : (stryCov_9fa48("718"), "expired"),
        queued: stryMutAct_9fa48("719") ? true : (stryCov_9fa48("719"), false)
      });
      let settle!: (o: AdmitOutcome) => void;
      const settled = new Promise<AdmitOutcome>(stryMutAct_9fa48("720") ? () => undefined : (stryCov_9fa48("720"), r => settle = r));
      let lead!: () => void;
      let leadership = new Promise<void>(stryMutAct_9fa48("721") ? () => undefined : (stryCov_9fa48("721"), r => lead = r));
      const waiter: Waiter = stryMutAct_9fa48("722") ? {} : (stryCov_9fa48("722"), {
        settle: o => {
          if (stryMutAct_9fa48("723")) {
            {}
          } else {
            stryCov_9fa48("723");
            if (stryMutAct_9fa48("726") ? waiter.outcome === undefined : stryMutAct_9fa48("725") ? false : stryMutAct_9fa48("724") ? true : (stryCov_9fa48("724", "725", "726"), waiter.outcome !== undefined)) return;
            waiter.outcome = o;
            if (stryMutAct_9fa48("727")) {
              ;
            } else {
              stryCov_9fa48("727");
              settle(o);
            }
          }
        },
        lead: stryMutAct_9fa48("728") ? () => undefined : (stryCov_9fa48("728"), () => lead())
      });
      const held = this.#queue.push(ticket.priority, ticket.flow, waiter, stryMutAct_9fa48("729") ? ticket.cost && 1 : (stryCov_9fa48("729"), ticket.cost ?? 1));
      const leave = (o: AdmitOutcome) => {
        if (stryMutAct_9fa48("730")) {
          {}
        } else {
          stryCov_9fa48("730");
          if (stryMutAct_9fa48("732") ? false : stryMutAct_9fa48("731") ? true : (stryCov_9fa48("731", "732"), this.#queue.remove(held))) if (stryMutAct_9fa48("733")) {
            ;
          } else {
            stryCov_9fa48("733");
            waiter.settle(o);
          }
        }
      };
      const timer = setTimeout(leave, waitMs, stryMutAct_9fa48("734") ? "" : (stryCov_9fa48("734"), "expired"));
      const onAbort = stryMutAct_9fa48("735") ? () => undefined : (stryCov_9fa48("735"), (() => {
        const onAbort = () => leave(stryMutAct_9fa48("736") ? "" : (stryCov_9fa48("736"), "gone"));
        return onAbort;
      })());
      stryMutAct_9fa48("737") ? ticket.signal.addEventListener("abort", onAbort) : (stryCov_9fa48("737"), ticket.signal?.addEventListener(stryMutAct_9fa48("738") ? "" : (stryCov_9fa48("738"), "abort"), onAbort));
      if (stryMutAct_9fa48("741") ? false : stryMutAct_9fa48("740") ? true : stryMutAct_9fa48("739") ? this.#leader : (stryCov_9fa48("739", "740", "741"), !this.#leader)) this.#leader = waiter;
      if (stryMutAct_9fa48("744") ? false : stryMutAct_9fa48("743") ? true : stryMutAct_9fa48("742") ? ticket.again : (stryCov_9fa48("742", "743", "744"), !ticket.again)) if (stryMutAct_9fa48("745")) {
        ;
      } else {
        stryCov_9fa48("745");
        this.pump();
      }
      if (stryMutAct_9fa48("748") ? waiter.outcome !== undefined : stryMutAct_9fa48("747") ? false : stryMutAct_9fa48("746") ? true : (stryCov_9fa48("746", "747", "748"), waiter.outcome === undefined)) stryMutAct_9fa48("749") ? ticket.demand(this.#queue.size) : (stryCov_9fa48("749"), ticket.demand?.(this.#queue.size));
      // At zero, the first refresh goes at once: it carries the held demand (to the relay, or
      // through `demand` to the autoscaler) that starts a replica.
      let first = stryMutAct_9fa48("753") ? slots >= 0 : stryMutAct_9fa48("752") ? slots <= 0 : stryMutAct_9fa48("751") ? false : stryMutAct_9fa48("750") ? true : (stryCov_9fa48("750", "751", "752", "753"), slots < 0);
      try {
        if (stryMutAct_9fa48("754")) {
          {}
        } else {
          stryCov_9fa48("754");
          if (stryMutAct_9fa48("755")) {
            for (; false;) {
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
                  if (this.#caps && this.#freshBudget()) this.#release(this.#queue.size);else if (this.#inflightTotal === 0 && this.#underBudget()) this.#release(1);
                }
                if (this.#queue.size > 0) ticket.demand?.(this.#queue.size);
              } else {
                await Promise.race([settled, leadership]);
                leadership = new Promise<void>(r => lead = r);
              }
            }
          } else {
            stryCov_9fa48("755");
            for (;;) {
              if (stryMutAct_9fa48("756")) {
                {}
              } else {
                stryCov_9fa48("756");
                if (stryMutAct_9fa48("759") ? waiter.outcome === undefined : stryMutAct_9fa48("758") ? false : stryMutAct_9fa48("757") ? true : (stryCov_9fa48("757", "758", "759"), waiter.outcome !== undefined)) break;
                if (stryMutAct_9fa48("762") ? this.#leader !== waiter : stryMutAct_9fa48("761") ? false : stryMutAct_9fa48("760") ? true : (stryCov_9fa48("760", "761", "762"), this.#leader === waiter)) {
                  if (stryMutAct_9fa48("763")) {
                    {}
                  } else {
                    stryCov_9fa48("763");
                    if (stryMutAct_9fa48("766") ? false : stryMutAct_9fa48("765") ? true : stryMutAct_9fa48("764") ? first : (stryCov_9fa48("764", "765", "766"), !first)) await Promise.race(stryMutAct_9fa48("767") ? [] : (stryCov_9fa48("767"), [settled, sleep(HOLD_POLL_MS)]));
                    first = stryMutAct_9fa48("768") ? true : (stryCov_9fa48("768"), false);
                    if (stryMutAct_9fa48("771") ? waiter.outcome === undefined : stryMutAct_9fa48("770") ? false : stryMutAct_9fa48("769") ? true : (stryCov_9fa48("769", "770", "771"), waiter.outcome !== undefined)) break;
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
                    if (stryMutAct_9fa48("774") ? !this.pump() && this.#queue.size > 0 || freeSlots(view, this.#now()) >= 0 : stryMutAct_9fa48("773") ? false : stryMutAct_9fa48("772") ? true : (stryCov_9fa48("772", "773", "774"), (stryMutAct_9fa48("776") ? !this.pump() || this.#queue.size > 0 : stryMutAct_9fa48("775") ? true : (stryCov_9fa48("775", "776"), (stryMutAct_9fa48("777") ? this.pump() : (stryCov_9fa48("777"), !this.pump())) && (stryMutAct_9fa48("780") ? this.#queue.size <= 0 : stryMutAct_9fa48("779") ? this.#queue.size >= 0 : stryMutAct_9fa48("778") ? true : (stryCov_9fa48("778", "779", "780"), this.#queue.size > 0)))) && (stryMutAct_9fa48("783") ? freeSlots(view, this.#now()) < 0 : stryMutAct_9fa48("782") ? freeSlots(view, this.#now()) > 0 : stryMutAct_9fa48("781") ? true : (stryCov_9fa48("781", "782", "783"), freeSlots(view, this.#now()) >= 0)))) {
                      if (stryMutAct_9fa48("784")) {
                        {}
                      } else {
                        stryCov_9fa48("784");
                        if (stryMutAct_9fa48("787") ? this.#caps || this.#freshBudget() : stryMutAct_9fa48("786") ? false : stryMutAct_9fa48("785") ? true : (stryCov_9fa48("785", "786", "787"), this.#caps && this.#freshBudget())) {
                          if (stryMutAct_9fa48("788")) {
                            ;
                          } else {
                            stryCov_9fa48("788");
                            this.#release(this.#queue.size);
                          }
                        } else if (stryMutAct_9fa48("791") ? this.#inflightTotal === 0 || this.#underBudget() : stryMutAct_9fa48("790") ? false : stryMutAct_9fa48("789") ? true : (stryCov_9fa48("789", "790", "791"), (stryMutAct_9fa48("793") ? this.#inflightTotal !== 0 : stryMutAct_9fa48("792") ? true : (stryCov_9fa48("792", "793"), this.#inflightTotal === 0)) && this.#underBudget())) if (stryMutAct_9fa48("794")) {
                          ;
                        } else {
                          stryCov_9fa48("794");
                          this.#release(1);
                        }
                      }
                    }
                    if (stryMutAct_9fa48("798") ? this.#queue.size <= 0 : stryMutAct_9fa48("797") ? this.#queue.size >= 0 : stryMutAct_9fa48("796") ? false : stryMutAct_9fa48("795") ? true : (stryCov_9fa48("795", "796", "797", "798"), this.#queue.size > 0)) stryMutAct_9fa48("799") ? ticket.demand(this.#queue.size) : (stryCov_9fa48("799"), ticket.demand?.(this.#queue.size));
                  }
                } else {
                  if (stryMutAct_9fa48("800")) {
                    {}
                  } else {
                    stryCov_9fa48("800");
                    await Promise.race(stryMutAct_9fa48("801") ? [] : (stryCov_9fa48("801"), [settled, leadership]));
                    leadership = new Promise<void>(stryMutAct_9fa48("802") ? () => undefined : (stryCov_9fa48("802"), r => lead = r));
                  }
                }
              }
            }
          }
        }
      } finally {
        if (stryMutAct_9fa48("803")) {
          {}
        } else {
          stryCov_9fa48("803");
          if (stryMutAct_9fa48("804")) {
            ;
          } else {
            stryCov_9fa48("804");
            clearTimeout(timer);
          }
          stryMutAct_9fa48("805") ? ticket.signal.removeEventListener("abort", onAbort) : (stryCov_9fa48("805"), ticket.signal?.removeEventListener(stryMutAct_9fa48("806") ? "" : (stryCov_9fa48("806"), "abort"), onAbort));
          if (stryMutAct_9fa48("809") ? this.#leader !== waiter : stryMutAct_9fa48("808") ? false : stryMutAct_9fa48("807") ? true : (stryCov_9fa48("807", "808", "809"), this.#leader === waiter)) if (stryMutAct_9fa48("810")) {
            ;
          } else {
            stryCov_9fa48("810");
            this.#handOff();
          }
        }
      }
      return stryMutAct_9fa48("811") ? {} : (stryCov_9fa48("811"), {
        outcome: waiter.outcome!,
        queued: stryMutAct_9fa48("814") ? waiter.outcome !== "go" : stryMutAct_9fa48("813") ? false : stryMutAct_9fa48("812") ? true : (stryCov_9fa48("812", "813", "814"), waiter.outcome === (stryMutAct_9fa48("815") ? "" : (stryCov_9fa48("815"), "go")))
      });
    }
  }

  /** A request that went through the queue is now dispatching: its slot is the view's to count. */
  dispatching(): void {
    if (stryMutAct_9fa48("816")) {
      {}
    } else {
      stryCov_9fa48("816");
      if (stryMutAct_9fa48("820") ? this.#released <= 0 : stryMutAct_9fa48("819") ? this.#released >= 0 : stryMutAct_9fa48("818") ? false : stryMutAct_9fa48("817") ? true : (stryCov_9fa48("817", "818", "819", "820"), this.#released > 0)) stryMutAct_9fa48("821") ? this.#released++ : (stryCov_9fa48("821"), this.#released--);
    }
  }

  /** Admits held requests while there are free slots (and budget): call when a slot may have freed. Whether any went. */
  pump(): boolean {
    if (stryMutAct_9fa48("822")) {
      {}
    } else {
      stryCov_9fa48("822");
      if (stryMutAct_9fa48("825") ? this.#queue.size === 0 && !this.#view : stryMutAct_9fa48("824") ? false : stryMutAct_9fa48("823") ? true : (stryCov_9fa48("823", "824", "825"), (stryMutAct_9fa48("827") ? this.#queue.size !== 0 : stryMutAct_9fa48("826") ? false : (stryCov_9fa48("826", "827"), this.#queue.size === 0)) || (stryMutAct_9fa48("828") ? this.#view : (stryCov_9fa48("828"), !this.#view)))) return stryMutAct_9fa48("829") ? true : (stryCov_9fa48("829"), false);
      const free = this.#free(freeSlots(this.#view, this.#now()));
      return stryMutAct_9fa48("833") ? this.#release(free) <= 0 : stryMutAct_9fa48("832") ? this.#release(free) >= 0 : stryMutAct_9fa48("831") ? false : stryMutAct_9fa48("830") ? true : (stryCov_9fa48("830", "831", "832", "833"), this.#release(free) > 0);
    }
  }

  /** Lets up to `n` held requests go, in the queue's order, within the budget; how many went. */
  #release(n: number): number {
    if (stryMutAct_9fa48("834")) {
      {}
    } else {
      stryCov_9fa48("834");
      let went = 0;
      const share = this.#shares();
      /** Let go in this call, per flow: they count against the flow's share until they start. */
      const going = new Map<string, number>();
      const caps = this.#caps;
      const eligible = stryMutAct_9fa48("837") ? share || ((flow: string) => {
        const n = (this.#flowInflight.get(flow) ?? 0) + (going.get(flow) ?? 0);
        return caps ? this.#withinCap(flow, n) : n < share(flow);
      }) : stryMutAct_9fa48("836") ? false : stryMutAct_9fa48("835") ? true : (stryCov_9fa48("835", "836", "837"), share && ((flow: string) => {
        if (stryMutAct_9fa48("838")) {
          {}
        } else {
          stryCov_9fa48("838");
          const n = stryMutAct_9fa48("839") ? (this.#flowInflight.get(flow) ?? 0) - (going.get(flow) ?? 0) : (stryCov_9fa48("839"), (stryMutAct_9fa48("840") ? this.#flowInflight.get(flow) && 0 : (stryCov_9fa48("840"), this.#flowInflight.get(flow) ?? 0)) + (stryMutAct_9fa48("841") ? going.get(flow) && 0 : (stryCov_9fa48("841"), going.get(flow) ?? 0)));
          return caps ? this.#withinCap(flow, n) : stryMutAct_9fa48("845") ? n >= share(flow) : stryMutAct_9fa48("844") ? n <= share(flow) : stryMutAct_9fa48("843") ? false : stryMutAct_9fa48("842") ? true : (stryCov_9fa48("842", "843", "844", "845"), n < share(flow));
        }
      }));
      // With caps per flow, eligible() bounds each flow; without, the budget bounds them all.
      // A request in a band the budget leaves open (its headroom) is bound by neither.
      while (stryMutAct_9fa48("848") ? went >= n : stryMutAct_9fa48("847") ? went <= n : stryMutAct_9fa48("846") ? false : (stryCov_9fa48("846", "847", "848"), went < n)) {
        if (stryMutAct_9fa48("849")) {
          {}
        } else {
          stryCov_9fa48("849");
          const head = this.#queue.peek();
          if (stryMutAct_9fa48("852") ? false : stryMutAct_9fa48("851") ? true : stryMutAct_9fa48("850") ? head : (stryCov_9fa48("850", "851", "852"), !head)) break;
          const open = this.#open(head.priority);
          if (stryMutAct_9fa48("855") ? !open && !(caps !== undefined && share !== undefined) || !this.#underBudget() : stryMutAct_9fa48("854") ? false : stryMutAct_9fa48("853") ? true : (stryCov_9fa48("853", "854", "855"), (stryMutAct_9fa48("857") ? !open || !(caps !== undefined && share !== undefined) : stryMutAct_9fa48("856") ? true : (stryCov_9fa48("856", "857"), (stryMutAct_9fa48("858") ? open : (stryCov_9fa48("858"), !open)) && (stryMutAct_9fa48("859") ? caps !== undefined && share !== undefined : (stryCov_9fa48("859"), !(stryMutAct_9fa48("862") ? caps !== undefined || share !== undefined : stryMutAct_9fa48("861") ? false : stryMutAct_9fa48("860") ? true : (stryCov_9fa48("860", "861", "862"), (stryMutAct_9fa48("864") ? caps === undefined : stryMutAct_9fa48("863") ? true : (stryCov_9fa48("863", "864"), caps !== undefined)) && (stryMutAct_9fa48("866") ? share === undefined : stryMutAct_9fa48("865") ? true : (stryCov_9fa48("865", "866"), share !== undefined)))))))) && (stryMutAct_9fa48("867") ? this.#underBudget() : (stryCov_9fa48("867"), !this.#underBudget())))) break;
          const next: Held<Waiter> | undefined = this.#queue.shift(open ? undefined : eligible);
          if (stryMutAct_9fa48("870") ? false : stryMutAct_9fa48("869") ? true : stryMutAct_9fa48("868") ? next : (stryCov_9fa48("868", "869", "870"), !next)) break;
          going.set(next.flow, stryMutAct_9fa48("872") ? (going.get(next.flow) ?? 0) - 1 : (stryCov_9fa48("872"), (stryMutAct_9fa48("873") ? going.get(next.flow) && 0 : (stryCov_9fa48("873"), going.get(next.flow) ?? 0)) + 1));
          stryMutAct_9fa48("874") ? this.#released-- : (stryCov_9fa48("874"), this.#released++);
          if (stryMutAct_9fa48("878") ? this.#freedNow() <= 0 : stryMutAct_9fa48("877") ? this.#freedNow() >= 0 : stryMutAct_9fa48("876") ? false : stryMutAct_9fa48("875") ? true : (stryCov_9fa48("875", "876", "877", "878"), this.#freedNow() > 0)) stryMutAct_9fa48("879") ? this.#freed++ : (stryCov_9fa48("879"), this.#freed--);
          stryMutAct_9fa48("880") ? went-- : (stryCov_9fa48("880"), went++);
          next.value.settle(stryMutAct_9fa48("882") ? "" : (stryCov_9fa48("882"), "go"));
        }
      }
      return went;
    }
  }

  /** The leader left: the next held request leads. */
  #handOff(): void {
    if (stryMutAct_9fa48("883")) {
      {}
    } else {
      stryCov_9fa48("883");
      this.#leader = undefined;
      const next = this.#queue.peek();
      if (stryMutAct_9fa48("885") ? false : stryMutAct_9fa48("884") ? true : (stryCov_9fa48("884", "885"), next)) {
        if (stryMutAct_9fa48("886")) {
          {}
        } else {
          stryCov_9fa48("886");
          this.#leader = next.value;
          if (stryMutAct_9fa48("887")) {
            ;
          } else {
            stryCov_9fa48("887");
            next.value.lead();
          }
        }
      }
    }
  }
}
const sleep = stryMutAct_9fa48("888") ? () => undefined : (stryCov_9fa48("888"), (() => {
  const sleep = (ms: number) => new Promise<void>(stryMutAct_9fa48("889") ? () => undefined : (stryCov_9fa48("889"), r => setTimeout(r, ms)));
  return sleep;
})());
const GO: Admitted = Object.freeze(stryMutAct_9fa48("890") ? {} : (stryCov_9fa48("890"), {
  outcome: stryMutAct_9fa48("891") ? "" : (stryCov_9fa48("891"), "go"),
  queued: stryMutAct_9fa48("892") ? true : (stryCov_9fa48("892"), false)
}));

/** The client's answer for an outcome other than "go". */
export function admissionRefusal(outcome: Exclude<AdmitOutcome, "go">, deployment: Deployment, requestId: string): Response {
  if (stryMutAct_9fa48("893")) {
    {}
  } else {
    stryCov_9fa48("893");
    switch (outcome) {
      case stryMutAct_9fa48("895") ? "" : (stryCov_9fa48("895"), "shed"):
        if (stryMutAct_9fa48("894")) {} else {
          stryCov_9fa48("894");
          return errorResponse(stryMutAct_9fa48("896") ? "" : (stryCov_9fa48("896"), "shed"), stryMutAct_9fa48("897") ? `` : (stryCov_9fa48("897"), `every replica of "${deployment.name}" is busy and this request is sheddable`), stryMutAct_9fa48("898") ? {} : (stryCov_9fa48("898"), {
            requestId,
            retryAfterSeconds: 1
          }));
        }
      case stryMutAct_9fa48("900") ? "" : (stryCov_9fa48("900"), "expired"):
        if (stryMutAct_9fa48("899")) {} else {
          stryCov_9fa48("899");
          return errorResponse(stryMutAct_9fa48("901") ? "" : (stryCov_9fa48("901"), "queue_timeout"), stryMutAct_9fa48("902") ? `` : (stryCov_9fa48("902"), `no replica of "${deployment.name}" had a free slot within the request's wait`), stryMutAct_9fa48("903") ? {} : (stryCov_9fa48("903"), {
            requestId,
            retryAfterSeconds: 1
          }));
        }
      case stryMutAct_9fa48("905") ? "" : (stryCov_9fa48("905"), "gone"):
        if (stryMutAct_9fa48("904")) {} else {
          stryCov_9fa48("904");
          // The client is gone; nobody reads this.
          return errorResponse(stryMutAct_9fa48("906") ? "" : (stryCov_9fa48("906"), "request_timeout"), stryMutAct_9fa48("907") ? "" : (stryCov_9fa48("907"), "the client disconnected while its request was held"), stryMutAct_9fa48("908") ? {} : (stryCov_9fa48("908"), {
            requestId
          }));
        }
    }
  }
}

/**
 * A flow's key for the relay: 16 hex digits of two 32-bit hashes (its name does not leave
 * the isolate), the first 8 its client's (FLOW_KEY_CLIENT_DIGITS): the relay shares
 * between clients first, then between a client's flows. A client's own flow (no header)
 * keeps the key it always had.
 */
export function flowKey(flow: string): string {
  if (stryMutAct_9fa48("909")) {
    {}
  } else {
    stryCov_9fa48("909");
    return stryMutAct_9fa48("910") ? hex8(fnv1a(clientOf(flow))) - hex8(fnv1a(flow, 0x9e3779b9)) : (stryCov_9fa48("910"), hex8(fnv1a(clientOf(flow))) + hex8(fnv1a(flow, 0x9e3779b9)));
  }
}
const hex8 = stryMutAct_9fa48("911") ? () => undefined : (stryCov_9fa48("911"), (() => {
  const hex8 = (n: number) => (n >>> 0).toString(16).padStart(8, stryMutAct_9fa48("912") ? "" : (stryCov_9fa48("912"), "0"));
  return hex8;
})());