/**
 * The view stage: this isolate's view of a deployment's replicas (liveness, load,
 * models, prefix summaries, breakers), kept fresh from the routing snapshot in
 * the background so that no request waits on a Durable Object once warm.
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
import { CacheSummary } from "../../prefix/cache-summary.ts";
import { SummaryPool } from "../../state/summary-delta.ts";
import type { ContinuationForm, Load, ReplicaView, RoutingSnapshot } from "../../protocol/index.ts";
import type { ModelHolderChoice } from "../../policy/pick-replica.ts";
import { breakerAllows, breakerDispatched, breakerFailed, breakerInconclusive, breakerOpen, breakerSucceeded, newBreaker, type Breaker, type BreakerConfig } from "../../policy/circuit-breaker.ts";

/**
 * One isolate's view of a deployment's replicas: the last routing snapshot from
 * the deployment's Durable Object, corrected by the load header of every
 * response and by this isolate's own in-flight count. Pure state, no I/O, so the
 * hot path can be unit-tested; time is passed in.
 */
/** A response from a replica proves it alive for this long, like a report does. */
export const LIVENESS_FROM_RESPONSE_MS = 2_500;
/** A replica that refused a connection is skipped by this isolate for this long. */
export const CONNECT_FAILURE_COOLDOWN_MS = 1_000;
export interface ReplicaEntry extends ModelHolderChoice {
  url: string;
  /** Registration epoch of the replica process (see ReplicaView.epoch). */
  epoch: number;
  models: string[];
  loading: string[];
  reported: Load;
  /** This isolate's dispatches to the replica that have not finished. */
  inflight: number;
  /**
   * How many of those `reported` already counts (it came from a response while
   * they were at the replica). Without this a single isolate would count its own
   * requests twice, once in the replica's report and once as in flight.
   */
  counted: number;
  /** Epoch ms after which the replica is stale (no report, no response). */
  expiresAt: number;
  /** Draining with a deadline: epoch ms when it stops serving (its streams move before, migrate.ts). */
  drainsAt?: number;
  /** The continuation forms it takes, where it declared them (absent: both). */
  continues?: readonly ContinuationForm[];
  /** Epoch ms before which this isolate does not pick the replica (connect failures). */
  downUntil: number;
  /** Outlier ejection state (src/policy/circuit-breaker.ts). */
  breaker: Breaker;
  /** The engine's bearer key, sent as Authorization on every dispatch to it. */
  engineKey?: string;
  /** What the replica last reported holding in its prefix cache (src/prefix/cache-summary.ts); absent when it reports none. */
  cache?: CacheSummary;
  /** When this view first held that summary, epoch ms (the balancer trusts it over older dispatch notes). */
  cacheSince?: number;
}
export class RoutingView {
  readonly #replicas = new Map<string, ReplicaEntry>();
  /**
   * The replicas' prefix-cache summaries, parsed once per new digest: a snapshot
   * carries a summary only when this view did not hold its digest (cacheDigests),
   * so an unchanged summary is neither sent nor parsed again.
   */
  readonly #summaries = new SummaryPool<CacheSummary>(stryMutAct_9fa48("3940") ? () => undefined : (stryCov_9fa48("3940"), w => CacheSummary.parse(w)));
  /** Replicas the deployment has in view: more than this view holds when the relay sent a sample. */
  total = 0;
  /**
   * No ready replica in the view lapses before this epoch ms: a lower bound, exact after
   * a snapshot or a walk (lapsesBefore), since load headers only push expiries later.
   */
  #lapseBound = Infinity;

  /** The summary digests this view holds, for the next snapshot's ask (src/state/summary-delta.ts). */
  cacheDigests(): string {
    if (stryMutAct_9fa48("3941")) {
      {}
    } else {
      stryCov_9fa48("3941");
      return this.#summaries.have();
    }
  }

  /** Summaries parsed so far (each a digest new to this view). */
  get summaryParses(): number {
    if (stryMutAct_9fa48("3942")) {
      {}
    } else {
      stryCov_9fa48("3942");
      return this.#summaries.parses;
    }
  }

  /** Replaces membership with the snapshot's, keeping in-flight counts and newer loads. */
  applySnapshot(snapshot: RoutingSnapshot, now: number): void {
    if (stryMutAct_9fa48("3943")) {
      {}
    } else {
      stryCov_9fa48("3943");
      this.total = stryMutAct_9fa48("3944") ? snapshot.total && snapshot.replicas.length : (stryCov_9fa48("3944"), snapshot.total ?? snapshot.replicas.length);
      if (stryMutAct_9fa48("3945")) {
        ;
      } else {
        stryCov_9fa48("3945");
        this.#summaries.apply(snapshot.replicas);
      }
      const seen = new Set<string>();
      for (const r of snapshot.replicas) {
        if (stryMutAct_9fa48("3946")) {
          {}
        } else {
          stryCov_9fa48("3946");
          if (stryMutAct_9fa48("3947")) {
            ;
          } else {
            stryCov_9fa48("3947");
            seen.add(r.id);
          }
          const known = this.#replicas.get(r.id);
          if (stryMutAct_9fa48("3950") ? known && known.url === r.url || known.epoch === r.epoch : stryMutAct_9fa48("3949") ? false : stryMutAct_9fa48("3948") ? true : (stryCov_9fa48("3948", "3949", "3950"), (stryMutAct_9fa48("3952") ? known || known.url === r.url : stryMutAct_9fa48("3951") ? true : (stryCov_9fa48("3951", "3952"), known && (stryMutAct_9fa48("3954") ? known.url !== r.url : stryMutAct_9fa48("3953") ? true : (stryCov_9fa48("3953", "3954"), known.url === r.url)))) && (stryMutAct_9fa48("3956") ? known.epoch !== r.epoch : stryMutAct_9fa48("3955") ? true : (stryCov_9fa48("3955", "3956"), known.epoch === r.epoch)))) {
            if (stryMutAct_9fa48("3957")) {
              {}
            } else {
              stryCov_9fa48("3957");
              // An older snapshot must not undo what newer load headers told us.
              if (stryMutAct_9fa48("3961") ? r.load.seq < known.reported.seq : stryMutAct_9fa48("3960") ? r.load.seq > known.reported.seq : stryMutAct_9fa48("3959") ? false : stryMutAct_9fa48("3958") ? true : (stryCov_9fa48("3958", "3959", "3960", "3961"), r.load.seq >= known.reported.seq)) {
                if (stryMutAct_9fa48("3962")) {
                  {}
                } else {
                  stryCov_9fa48("3962");
                  known.reported = r.load;
                  // A report relayed by the Durable Object is up to a few seconds old.
                  // Assume it counts as many of our in-flight dispatches as it can: for
                  // short requests the ones it counted have finished and ours are new,
                  // so counting both would report a replica full at half its load.
                  known.counted = stryMutAct_9fa48("3963") ? Math.max(known.inflight, r.load.ongoing + r.load.queued) : (stryCov_9fa48("3963"), Math.min(known.inflight, stryMutAct_9fa48("3964") ? r.load.ongoing - r.load.queued : (stryCov_9fa48("3964"), r.load.ongoing + r.load.queued)));
                  known.models = r.models;
                  known.loading = r.loading;
                  if (stryMutAct_9fa48("3967") ? r.drainsInMs === undefined : stryMutAct_9fa48("3966") ? false : stryMutAct_9fa48("3965") ? true : (stryCov_9fa48("3965", "3966", "3967"), r.drainsInMs !== undefined)) known.drainsAt = stryMutAct_9fa48("3968") ? now - r.drainsInMs : (stryCov_9fa48("3968"), now + r.drainsInMs);else delete known.drainsAt;
                }
              }
              known.expiresAt = stryMutAct_9fa48("3969") ? Math.min(known.expiresAt, now + r.expiresInMs) : (stryCov_9fa48("3969"), Math.max(known.expiresAt, stryMutAct_9fa48("3970") ? now - r.expiresInMs : (stryCov_9fa48("3970"), now + r.expiresInMs)));
              if (stryMutAct_9fa48("3971")) {
                ;
              } else {
                stryCov_9fa48("3971");
                refresh(known);
              }
              if (stryMutAct_9fa48("3972")) {
                ;
              } else {
                stryCov_9fa48("3972");
                this.#fillSummary(known, now);
              }
            }
          } else {
            if (stryMutAct_9fa48("3973")) {
              {}
            } else {
              stryCov_9fa48("3973");
              const e = entryFrom(r, now);
              if (stryMutAct_9fa48("3974")) {
                ;
              } else {
                stryCov_9fa48("3974");
                this.#fillSummary(e, now);
              }
              if (stryMutAct_9fa48("3975")) {
                ;
              } else {
                stryCov_9fa48("3975");
                this.#replicas.set(r.id, e);
              }
            }
          }
        }
      }
      for (const id of this.#replicas.keys()) if (stryMutAct_9fa48("3978") ? false : stryMutAct_9fa48("3977") ? true : stryMutAct_9fa48("3976") ? seen.has(id) : (stryCov_9fa48("3976", "3977", "3978"), !seen.has(id))) if (stryMutAct_9fa48("3979")) {
        ;
      } else {
        stryCov_9fa48("3979");
        this.#replicas.delete(id);
      }
      this.#lapseBound = this.#earliestLapse();
    }
  }

  /**
   * Whether a ready replica's liveness in this view runs out before `at`. O(1) while the
   * bound says no; a walk, which moves the bound on, only once `at` reaches it.
   */
  lapsesBefore(at: number): boolean {
    if (stryMutAct_9fa48("3980")) {
      {}
    } else {
      stryCov_9fa48("3980");
      if (stryMutAct_9fa48("3984") ? at >= this.#lapseBound : stryMutAct_9fa48("3983") ? at <= this.#lapseBound : stryMutAct_9fa48("3982") ? false : stryMutAct_9fa48("3981") ? true : (stryCov_9fa48("3981", "3982", "3983", "3984"), at < this.#lapseBound)) return stryMutAct_9fa48("3985") ? true : (stryCov_9fa48("3985"), false);
      this.#lapseBound = this.#earliestLapse();
      return stryMutAct_9fa48("3989") ? at < this.#lapseBound : stryMutAct_9fa48("3988") ? at > this.#lapseBound : stryMutAct_9fa48("3987") ? false : stryMutAct_9fa48("3986") ? true : (stryCov_9fa48("3986", "3987", "3988", "3989"), at >= this.#lapseBound);
    }
  }
  #earliestLapse(): number {
    if (stryMutAct_9fa48("3990")) {
      {}
    } else {
      stryCov_9fa48("3990");
      let min = Infinity;
      for (const e of this.#replicas.values()) if (stryMutAct_9fa48("3993") ? e.reported.state === "ready" || e.expiresAt < min : stryMutAct_9fa48("3992") ? false : stryMutAct_9fa48("3991") ? true : (stryCov_9fa48("3991", "3992", "3993"), (stryMutAct_9fa48("3995") ? e.reported.state !== "ready" : stryMutAct_9fa48("3994") ? true : (stryCov_9fa48("3994", "3995"), e.reported.state === (stryMutAct_9fa48("3996") ? "" : (stryCov_9fa48("3996"), "ready")))) && (stryMutAct_9fa48("3999") ? e.expiresAt >= min : stryMutAct_9fa48("3998") ? e.expiresAt <= min : stryMutAct_9fa48("3997") ? true : (stryCov_9fa48("3997", "3998", "3999"), e.expiresAt < min)))) min = e.expiresAt;
      return min;
    }
  }
  #fillSummary(e: ReplicaEntry, now: number): void {
    if (stryMutAct_9fa48("4000")) {
      {}
    } else {
      stryCov_9fa48("4000");
      const held = stryMutAct_9fa48("4001") ? this.#summaries.get(e.id).value : (stryCov_9fa48("4001"), this.#summaries.get(e.id)?.value);
      if (stryMutAct_9fa48("4003") ? false : stryMutAct_9fa48("4002") ? true : (stryCov_9fa48("4002", "4003"), held)) {
        if (stryMutAct_9fa48("4004")) {
          {}
        } else {
          stryCov_9fa48("4004");
          if (stryMutAct_9fa48("4007") ? e.cache === held : stryMutAct_9fa48("4006") ? false : stryMutAct_9fa48("4005") ? true : (stryCov_9fa48("4005", "4006", "4007"), e.cache !== held)) e.cacheSince = now;
          e.cache = held;
        }
      } else {
        if (stryMutAct_9fa48("4008")) {
          {}
        } else {
          stryCov_9fa48("4008");
          delete e.cache;
          delete e.cacheSince;
        }
      }
    }
  }

  /** Applies a load header from a response; ignores loads older than what we have. */
  applyLoad(replicaId: string, load: Load, now: number): void {
    if (stryMutAct_9fa48("4009")) {
      {}
    } else {
      stryCov_9fa48("4009");
      const e = this.#replicas.get(replicaId);
      if (stryMutAct_9fa48("4012") ? false : stryMutAct_9fa48("4011") ? true : stryMutAct_9fa48("4010") ? e : (stryCov_9fa48("4010", "4011", "4012"), !e)) return;
      e.expiresAt = stryMutAct_9fa48("4013") ? Math.min(e.expiresAt, now + LIVENESS_FROM_RESPONSE_MS) : (stryCov_9fa48("4013"), Math.max(e.expiresAt, stryMutAct_9fa48("4014") ? now - LIVENESS_FROM_RESPONSE_MS : (stryCov_9fa48("4014"), now + LIVENESS_FROM_RESPONSE_MS)));
      if (stryMutAct_9fa48("4018") ? load.seq >= e.reported.seq : stryMutAct_9fa48("4017") ? load.seq <= e.reported.seq : stryMutAct_9fa48("4016") ? false : stryMutAct_9fa48("4015") ? true : (stryCov_9fa48("4015", "4016", "4017", "4018"), load.seq < e.reported.seq)) return;
      e.reported = load;
      // The header excludes the request it answers, and includes our others that
      // reached the replica before it: about all our in-flight ones but that one.
      e.counted = stryMutAct_9fa48("4019") ? Math.min(0, e.inflight - 1) : (stryCov_9fa48("4019"), Math.max(0, stryMutAct_9fa48("4020") ? e.inflight + 1 : (stryCov_9fa48("4020"), e.inflight - 1)));
      if (stryMutAct_9fa48("4022") ? false : stryMutAct_9fa48("4021") ? true : (stryCov_9fa48("4021", "4022"), load.models)) e.models = load.models;
      if (stryMutAct_9fa48("4024") ? false : stryMutAct_9fa48("4023") ? true : (stryCov_9fa48("4023", "4024"), load.loading)) e.loading = load.loading;
      if (stryMutAct_9fa48("4025")) {
        ;
      } else {
        stryCov_9fa48("4025");
        refresh(e);
      }
    }
  }

  /**
   * A dispatch for `model` goes to a replica that does not hold it: count it as
   * loading there until the replica says otherwise, so the next requests for the
   * model follow it instead of starting loads on other replicas.
   */
  noteModelDispatch(e: ReplicaEntry, model: string): void {
    if (stryMutAct_9fa48("4026")) {
      {}
    } else {
      stryCov_9fa48("4026");
      if (stryMutAct_9fa48("4029") ? !e.models.includes(model) || !e.loading.includes(model) : stryMutAct_9fa48("4028") ? false : stryMutAct_9fa48("4027") ? true : (stryCov_9fa48("4027", "4028", "4029"), (stryMutAct_9fa48("4030") ? e.models.includes(model) : (stryCov_9fa48("4030"), !e.models.includes(model))) && (stryMutAct_9fa48("4031") ? e.loading.includes(model) : (stryCov_9fa48("4031"), !e.loading.includes(model))))) e.loading = stryMutAct_9fa48("4032") ? [] : (stryCov_9fa48("4032"), [...e.loading, model]);
    }
  }
  markDown(replicaId: string, now: number, forMs = CONNECT_FAILURE_COOLDOWN_MS): void {
    if (stryMutAct_9fa48("4033")) {
      {}
    } else {
      stryCov_9fa48("4033");
      const e = this.#replicas.get(replicaId);
      if (stryMutAct_9fa48("4035") ? false : stryMutAct_9fa48("4034") ? true : (stryCov_9fa48("4034", "4035"), e)) e.downUntil = stryMutAct_9fa48("4036") ? now - forMs : (stryCov_9fa48("4036"), now + forMs);
    }
  }
  startDispatch(e: ReplicaEntry, now = Date.now()): void {
    if (stryMutAct_9fa48("4037")) {
      {}
    } else {
      stryCov_9fa48("4037");
      stryMutAct_9fa48("4038") ? e.inflight-- : (stryCov_9fa48("4038"), e.inflight++);
      if (stryMutAct_9fa48("4039")) {
        ;
      } else {
        stryCov_9fa48("4039");
        breakerDispatched(e.breaker, now);
      }
      if (stryMutAct_9fa48("4040")) {
        ;
      } else {
        stryCov_9fa48("4040");
        refresh(e);
      }
    }
  }

  /** The replica answered (any response head): it is healthy as far as ejection goes. */
  recordSuccess(e: ReplicaEntry): void {
    if (stryMutAct_9fa48("4041")) {
      {}
    } else {
      stryCov_9fa48("4041");
      if (stryMutAct_9fa48("4042")) {
        ;
      } else {
        stryCov_9fa48("4042");
        breakerSucceeded(e.breaker);
      }
    }
  }

  /** The dispatch got no usable answer; returns true when this ejects the replica. */
  recordFailure(e: ReplicaEntry, now: number, cfg: BreakerConfig): boolean {
    if (stryMutAct_9fa48("4043")) {
      {}
    } else {
      stryCov_9fa48("4043");
      return breakerFailed(e.breaker, now, cfg);
    }
  }
  endDispatch(e: ReplicaEntry): void {
    if (stryMutAct_9fa48("4044")) {
      {}
    } else {
      stryCov_9fa48("4044");
      // A probe that ended without a verdict (recordSuccess/recordFailure) must not
      // leave the replica ejected for good.
      if (stryMutAct_9fa48("4045")) {
        ;
      } else {
        stryCov_9fa48("4045");
        breakerInconclusive(e.breaker);
      }
      if (stryMutAct_9fa48("4049") ? e.inflight <= 0 : stryMutAct_9fa48("4048") ? e.inflight >= 0 : stryMutAct_9fa48("4047") ? false : stryMutAct_9fa48("4046") ? true : (stryCov_9fa48("4046", "4047", "4048", "4049"), e.inflight > 0)) {
        if (stryMutAct_9fa48("4050")) {
          {}
        } else {
          stryCov_9fa48("4050");
          stryMutAct_9fa48("4051") ? e.inflight++ : (stryCov_9fa48("4051"), e.inflight--);
          // Assume the oldest finished first: those are the ones the report counted.
          e.counted = stryMutAct_9fa48("4052") ? Math.max(e.counted, e.inflight) : (stryCov_9fa48("4052"), Math.min(e.counted, e.inflight));
          if (stryMutAct_9fa48("4053")) {
            ;
          } else {
            stryCov_9fa48("4053");
            refresh(e);
          }
        }
      }
    }
  }

  /** Replicas a dispatch may go to now: ready, fresh, not cooling down, not excluded, not ejected (unless all are). */
  candidates(now: number, exclude?: ReadonlySet<string>): ReplicaEntry[] {
    if (stryMutAct_9fa48("4054")) {
      {}
    } else {
      stryCov_9fa48("4054");
      const out: ReplicaEntry[] = stryMutAct_9fa48("4055") ? ["Stryker was here"] : (stryCov_9fa48("4055"), []);
      const ejected: ReplicaEntry[] = stryMutAct_9fa48("4056") ? ["Stryker was here"] : (stryCov_9fa48("4056"), []);
      for (const e of this.#replicas.values()) {
        if (stryMutAct_9fa48("4057")) {
          {}
        } else {
          stryCov_9fa48("4057");
          if (stryMutAct_9fa48("4060") ? (e.reported.state !== "ready" || e.expiresAt <= now) && e.downUntil > now : stryMutAct_9fa48("4059") ? false : stryMutAct_9fa48("4058") ? true : (stryCov_9fa48("4058", "4059", "4060"), (stryMutAct_9fa48("4062") ? e.reported.state !== "ready" && e.expiresAt <= now : stryMutAct_9fa48("4061") ? false : (stryCov_9fa48("4061", "4062"), (stryMutAct_9fa48("4064") ? e.reported.state === "ready" : stryMutAct_9fa48("4063") ? false : (stryCov_9fa48("4063", "4064"), e.reported.state !== (stryMutAct_9fa48("4065") ? "" : (stryCov_9fa48("4065"), "ready")))) || (stryMutAct_9fa48("4068") ? e.expiresAt > now : stryMutAct_9fa48("4067") ? e.expiresAt < now : stryMutAct_9fa48("4066") ? false : (stryCov_9fa48("4066", "4067", "4068"), e.expiresAt <= now)))) || (stryMutAct_9fa48("4071") ? e.downUntil <= now : stryMutAct_9fa48("4070") ? e.downUntil >= now : stryMutAct_9fa48("4069") ? false : (stryCov_9fa48("4069", "4070", "4071"), e.downUntil > now)))) continue;
          if (stryMutAct_9fa48("4074") ? exclude.has(e.id) : stryMutAct_9fa48("4073") ? false : stryMutAct_9fa48("4072") ? true : (stryCov_9fa48("4072", "4073", "4074"), exclude?.has(e.id))) continue;
          if (stryMutAct_9fa48("4076") ? false : stryMutAct_9fa48("4075") ? true : (stryCov_9fa48("4075", "4076"), breakerAllows(e.breaker, now))) {
            if (stryMutAct_9fa48("4077")) {
              ;
            } else {
              stryCov_9fa48("4077");
              out.push(e);
            }
          } else if (stryMutAct_9fa48("4078")) {
            ;
          } else {
            stryCov_9fa48("4078");
            ejected.push(e);
          }
        }
      }
      // Panic routing (Envoy's rule): when ejection would leave nothing, ignore it;
      // an ejected replica may have recovered, and an empty answer helps nobody.
      return (stryMutAct_9fa48("4082") ? out.length <= 0 : stryMutAct_9fa48("4081") ? out.length >= 0 : stryMutAct_9fa48("4080") ? false : stryMutAct_9fa48("4079") ? true : (stryCov_9fa48("4079", "4080", "4081", "4082"), out.length > 0)) ? out : ejected;
    }
  }

  /**
   * Ready replicas whose liveness lapsed in this view but that nothing showed
   * dead: no refused or lost connection (cool-down, ejection), no drain, still in
   * the last snapshot (the routing object drops a replica whose report is older
   * than its hard expiry). A replica that holds what a request needs (its model,
   * its session) is still tried first when merely late: trying a dead one costs a
   * refused connection and a retry, routing around a live one costs a model load
   * or a session's cache.
   */
  lapsed(now: number, exclude?: ReadonlySet<string>): ReplicaEntry[] {
    if (stryMutAct_9fa48("4083")) {
      {}
    } else {
      stryCov_9fa48("4083");
      const out: ReplicaEntry[] = stryMutAct_9fa48("4084") ? ["Stryker was here"] : (stryCov_9fa48("4084"), []);
      for (const e of this.#replicas.values()) {
        if (stryMutAct_9fa48("4085")) {
          {}
        } else {
          stryCov_9fa48("4085");
          if (stryMutAct_9fa48("4088") ? (e.reported.state !== "ready" || e.expiresAt > now) && e.downUntil > now : stryMutAct_9fa48("4087") ? false : stryMutAct_9fa48("4086") ? true : (stryCov_9fa48("4086", "4087", "4088"), (stryMutAct_9fa48("4090") ? e.reported.state !== "ready" && e.expiresAt > now : stryMutAct_9fa48("4089") ? false : (stryCov_9fa48("4089", "4090"), (stryMutAct_9fa48("4092") ? e.reported.state === "ready" : stryMutAct_9fa48("4091") ? false : (stryCov_9fa48("4091", "4092"), e.reported.state !== (stryMutAct_9fa48("4093") ? "" : (stryCov_9fa48("4093"), "ready")))) || (stryMutAct_9fa48("4096") ? e.expiresAt <= now : stryMutAct_9fa48("4095") ? e.expiresAt >= now : stryMutAct_9fa48("4094") ? false : (stryCov_9fa48("4094", "4095", "4096"), e.expiresAt > now)))) || (stryMutAct_9fa48("4099") ? e.downUntil <= now : stryMutAct_9fa48("4098") ? e.downUntil >= now : stryMutAct_9fa48("4097") ? false : (stryCov_9fa48("4097", "4098", "4099"), e.downUntil > now)))) continue;
          if (stryMutAct_9fa48("4102") ? exclude?.has(e.id) && !breakerAllows(e.breaker, now) : stryMutAct_9fa48("4101") ? false : stryMutAct_9fa48("4100") ? true : (stryCov_9fa48("4100", "4101", "4102"), (stryMutAct_9fa48("4103") ? exclude.has(e.id) : (stryCov_9fa48("4103"), exclude?.has(e.id))) || (stryMutAct_9fa48("4104") ? breakerAllows(e.breaker, now) : (stryCov_9fa48("4104"), !breakerAllows(e.breaker, now))))) continue;
          if (stryMutAct_9fa48("4105")) {
            ;
          } else {
            stryCov_9fa48("4105");
            out.push(e);
          }
        }
      }
      return out;
    }
  }

  /**
   * The candidates, plus the lapsed replicas that hold what the request needs
   * (`holds`): the liveness rule for model holders (docs/architecture.md).
   */
  candidatesHolding(now: number, exclude: ReadonlySet<string> | undefined, holds: (e: ReplicaEntry) => boolean): ReplicaEntry[] {
    if (stryMutAct_9fa48("4106")) {
      {}
    } else {
      stryCov_9fa48("4106");
      const fresh = this.candidates(now, exclude);
      const late = stryMutAct_9fa48("4107") ? this.lapsed(now, exclude) : (stryCov_9fa48("4107"), this.lapsed(now, exclude).filter(holds));
      return (stryMutAct_9fa48("4111") ? late.length <= 0 : stryMutAct_9fa48("4110") ? late.length >= 0 : stryMutAct_9fa48("4109") ? false : stryMutAct_9fa48("4108") ? true : (stryCov_9fa48("4108", "4109", "4110", "4111"), late.length > 0)) ? stryMutAct_9fa48("4112") ? [] : (stryCov_9fa48("4112"), [...fresh, ...late]) : fresh;
    }
  }

  /** Replicas that are ready and fresh, ignoring this isolate's cool-downs. */
  readyCount(now: number): number {
    if (stryMutAct_9fa48("4113")) {
      {}
    } else {
      stryCov_9fa48("4113");
      let n = 0;
      for (const e of this.#replicas.values()) if (stryMutAct_9fa48("4116") ? e.reported.state === "ready" || e.expiresAt > now : stryMutAct_9fa48("4115") ? false : stryMutAct_9fa48("4114") ? true : (stryCov_9fa48("4114", "4115", "4116"), (stryMutAct_9fa48("4118") ? e.reported.state !== "ready" : stryMutAct_9fa48("4117") ? true : (stryCov_9fa48("4117", "4118"), e.reported.state === (stryMutAct_9fa48("4119") ? "" : (stryCov_9fa48("4119"), "ready")))) && (stryMutAct_9fa48("4122") ? e.expiresAt <= now : stryMutAct_9fa48("4121") ? e.expiresAt >= now : stryMutAct_9fa48("4120") ? true : (stryCov_9fa48("4120", "4121", "4122"), e.expiresAt > now)))) stryMutAct_9fa48("4123") ? n-- : (stryCov_9fa48("4123"), n++);
      return n;
    }
  }

  /**
   * Whether a ready replica's liveness ran out in this view. Its reports may well
   * have reached the Durable Object since the view was fetched: a view left idle
   * past its TTL ages every replica in it, not just dead ones.
   */
  hasLapsed(now: number): boolean {
    if (stryMutAct_9fa48("4124")) {
      {}
    } else {
      stryCov_9fa48("4124");
      for (const e of this.#replicas.values()) if (stryMutAct_9fa48("4127") ? e.reported.state === "ready" || e.expiresAt <= now : stryMutAct_9fa48("4126") ? false : stryMutAct_9fa48("4125") ? true : (stryCov_9fa48("4125", "4126", "4127"), (stryMutAct_9fa48("4129") ? e.reported.state !== "ready" : stryMutAct_9fa48("4128") ? true : (stryCov_9fa48("4128", "4129"), e.reported.state === (stryMutAct_9fa48("4130") ? "" : (stryCov_9fa48("4130"), "ready")))) && (stryMutAct_9fa48("4133") ? e.expiresAt > now : stryMutAct_9fa48("4132") ? e.expiresAt < now : stryMutAct_9fa48("4131") ? true : (stryCov_9fa48("4131", "4132", "4133"), e.expiresAt <= now)))) return stryMutAct_9fa48("4134") ? false : (stryCov_9fa48("4134"), true);
      return stryMutAct_9fa48("4135") ? true : (stryCov_9fa48("4135"), false);
    }
  }

  /** Why each replica is or is not a candidate now (for error details and debugging). */
  describe(now: number): {
    id: string;
    seq: number;
    state: string;
    expiresInMs: number;
    coolingDownMs: number;
    ejected: boolean;
    load: number;
    capacity: number;
    /** Block keys in the replica's prefix-cache summary; absent when it reports none. */
    cacheKeys?: number;
  }[] {
    if (stryMutAct_9fa48("4136")) {
      {}
    } else {
      stryCov_9fa48("4136");
      return (stryMutAct_9fa48("4137") ? [] : (stryCov_9fa48("4137"), [...this.#replicas.values()])).map(stryMutAct_9fa48("4138") ? () => undefined : (stryCov_9fa48("4138"), e => stryMutAct_9fa48("4139") ? {} : (stryCov_9fa48("4139"), {
        id: e.id,
        seq: e.reported.seq,
        state: e.reported.state,
        expiresInMs: stryMutAct_9fa48("4140") ? e.expiresAt + now : (stryCov_9fa48("4140"), e.expiresAt - now),
        coolingDownMs: stryMutAct_9fa48("4141") ? Math.min(0, e.downUntil - now) : (stryCov_9fa48("4141"), Math.max(0, stryMutAct_9fa48("4142") ? e.downUntil + now : (stryCov_9fa48("4142"), e.downUntil - now))),
        ejected: breakerOpen(e.breaker, now),
        load: e.load,
        capacity: e.capacity,
        ...(stryMutAct_9fa48("4145") ? e.cache !== undefined || {
          cacheKeys: e.cache.keys
        } : stryMutAct_9fa48("4144") ? false : stryMutAct_9fa48("4143") ? true : (stryCov_9fa48("4143", "4144", "4145"), (stryMutAct_9fa48("4147") ? e.cache === undefined : stryMutAct_9fa48("4146") ? true : (stryCov_9fa48("4146", "4147"), e.cache !== undefined)) && (stryMutAct_9fa48("4148") ? {} : (stryCov_9fa48("4148"), {
          cacheKeys: e.cache.keys
        }))))
      })));
    }
  }
  get(replicaId: string): ReplicaEntry | undefined {
    if (stryMutAct_9fa48("4149")) {
      {}
    } else {
      stryCov_9fa48("4149");
      return this.#replicas.get(replicaId);
    }
  }
  get size(): number {
    if (stryMutAct_9fa48("4150")) {
      {}
    } else {
      stryCov_9fa48("4150");
      return this.#replicas.size;
    }
  }
}
function refresh(e: ReplicaEntry): void {
  if (stryMutAct_9fa48("4151")) {
    {}
  } else {
    stryCov_9fa48("4151");
    e.capacity = e.reported.max;
    if (stryMutAct_9fa48("4154") ? e.reported.kv === undefined : stryMutAct_9fa48("4153") ? false : stryMutAct_9fa48("4152") ? true : (stryCov_9fa48("4152", "4153", "4154"), e.reported.kv !== undefined)) e.kv = e.reported.kv;else delete e.kv;
    // Others' load as last reported, plus all of ours.
    e.load = stryMutAct_9fa48("4155") ? Math.max(0, e.reported.ongoing + e.reported.queued - e.counted) - e.inflight : (stryCov_9fa48("4155"), (stryMutAct_9fa48("4156") ? Math.min(0, e.reported.ongoing + e.reported.queued - e.counted) : (stryCov_9fa48("4156"), Math.max(0, stryMutAct_9fa48("4157") ? e.reported.ongoing + e.reported.queued + e.counted : (stryCov_9fa48("4157"), (stryMutAct_9fa48("4158") ? e.reported.ongoing - e.reported.queued : (stryCov_9fa48("4158"), e.reported.ongoing + e.reported.queued)) - e.counted)))) + e.inflight);
  }
}
function entryFrom(r: ReplicaView, now: number): ReplicaEntry {
  if (stryMutAct_9fa48("4159")) {
    {}
  } else {
    stryCov_9fa48("4159");
    return stryMutAct_9fa48("4160") ? {} : (stryCov_9fa48("4160"), {
      id: r.id,
      url: r.url,
      epoch: r.epoch,
      models: r.models,
      loading: r.loading,
      reported: r.load,
      inflight: 0,
      counted: 0,
      capacity: r.load.max,
      load: stryMutAct_9fa48("4161") ? r.load.ongoing - r.load.queued : (stryCov_9fa48("4161"), r.load.ongoing + r.load.queued),
      ...((stryMutAct_9fa48("4164") ? r.load.kv === undefined : stryMutAct_9fa48("4163") ? false : stryMutAct_9fa48("4162") ? true : (stryCov_9fa48("4162", "4163", "4164"), r.load.kv !== undefined)) ? stryMutAct_9fa48("4165") ? {} : (stryCov_9fa48("4165"), {
        kv: r.load.kv
      }) : {}),
      expiresAt: stryMutAct_9fa48("4166") ? now - r.expiresInMs : (stryCov_9fa48("4166"), now + r.expiresInMs),
      ...((stryMutAct_9fa48("4169") ? r.drainsInMs === undefined : stryMutAct_9fa48("4168") ? false : stryMutAct_9fa48("4167") ? true : (stryCov_9fa48("4167", "4168", "4169"), r.drainsInMs !== undefined)) ? stryMutAct_9fa48("4170") ? {} : (stryCov_9fa48("4170"), {
        drainsAt: stryMutAct_9fa48("4171") ? now - r.drainsInMs : (stryCov_9fa48("4171"), now + r.drainsInMs)
      }) : {}),
      ...((stryMutAct_9fa48("4174") ? r.continues === undefined : stryMutAct_9fa48("4173") ? false : stryMutAct_9fa48("4172") ? true : (stryCov_9fa48("4172", "4173", "4174"), r.continues !== undefined)) ? stryMutAct_9fa48("4175") ? {} : (stryCov_9fa48("4175"), {
        continues: r.continues
      }) : {}),
      downUntil: 0,
      breaker: newBreaker(),
      ...((stryMutAct_9fa48("4178") ? r.engineKey === undefined : stryMutAct_9fa48("4177") ? false : stryMutAct_9fa48("4176") ? true : (stryCov_9fa48("4176", "4177", "4178"), r.engineKey !== undefined)) ? stryMutAct_9fa48("4179") ? {} : (stryCov_9fa48("4179"), {
        engineKey: r.engineKey
      }) : {})
    });
  }
}

/**
 * Per-isolate cache of routing views, one per deployment. Module scope on
 * purpose: an isolate serves many requests, and the view must outlive each of
 * them. A view older than SNAPSHOT_TTL_MS is refreshed in the background
 * (stale-while-revalidate) so no request waits on the Durable Object except the
 * very first one of an isolate.
 */
export const SNAPSHOT_TTL_MS = 1_000;
/**
 * The TTL of a view that comes from a relay, which holds the shards' snapshot
 * for up to RELAY_TTL_MS (1 s) itself: a load change reaches the isolate within
 * ~1.25 s of its report (~1 s without relays). A relay call is cheap (same
 * location, no storage) and the relay absorbs the rate, so the isolate asks
 * four times a second.
 */
export const RELAYED_SNAPSHOT_TTL_MS = 250;
/*
 * Past its TTL, a view is refreshed at the next request only once every so many
 * requests (the deployment's `routing.refreshEveryRequests`), or when it ages past
 * VIEW_MAX_AGE_MS, or when a replica in it is about to lapse, or while admission holds
 * or budgets requests here. The TTL alone made an isolate ask its relay four times a
 * second whatever its traffic: 400 calls per 1,000 requests at 10 req/s, where the
 * load header on every answer already keeps the replicas this isolate uses fresh.
 */
/** A view older than this is refreshed at the next request, however few came. */
export const VIEW_MAX_AGE_MS = 2_000;
/** A view is refreshed this long before a ready replica in it would lapse (drop out of the candidates). */
export const LAPSE_MARGIN_MS = 250;

/** How often a deployment's view is refreshed (above). */
export interface RefreshPace {
  /** No refresh sooner than this after the last one, ms (the TTL). */
  ttlMs: number;
  /** Past the TTL, a refresh every this many requests; 1: at the first request past it. */
  everyRequests: number;
}
/** After a failed refresh, wait this long before asking again. */
const REFRESH_FAILURE_BACKOFF_MS = 250;
/**
 * Requests wait for a refresh of a view with a lapsed replica only this long
 * after the refresh started (a Durable Object call takes ~1 ms locally, tens of
 * ms across locations): a slow or hung object cannot hold traffic up longer.
 */
export const LAPSED_REFRESH_WAIT_MS = 100;

/**
 * Fetches a deployment's snapshot. `have`: the prefix-cache summary digests the
 * isolate's view holds (RoutingView.cacheDigests), so the answer leaves them out.
 */
export type SnapshotSource = (deployment: string, have: string) => Promise<RoutingSnapshot>;
export class SnapshotCache {
  readonly #views: BackgroundRefresh<RoutingView, RoutingSnapshot>;

  /**
   * `pace`: each deployment's TTL and requests per refresh (default: SNAPSHOT_TTL_MS, every
   * request past it). `busy`: whether admission holds or budgets the deployment's requests
   * here, which refreshes at the TTL (the relay's budgets lapse unless re-asked, SHARE_POST_TTL_MS).
   */
  constructor(source: SnapshotSource, now: () => number = Date.now, pace: (deployment: string) => RefreshPace = stryMutAct_9fa48("4180") ? () => undefined : (stryCov_9fa48("4180"), () => stryMutAct_9fa48("4181") ? {} : (stryCov_9fa48("4181"), {
    ttlMs: SNAPSHOT_TTL_MS,
    everyRequests: 1
  })), busy: (deployment: string) => boolean = stryMutAct_9fa48("4182") ? () => undefined : (stryCov_9fa48("4182"), () => stryMutAct_9fa48("4183") ? true : (stryCov_9fa48("4183"), false))) {
    if (stryMutAct_9fa48("4184")) {
      {}
    } else {
      stryCov_9fa48("4184");
      this.#views = new BackgroundRefresh(stryMutAct_9fa48("4185") ? {} : (stryCov_9fa48("4185"), {
        source: stryMutAct_9fa48("4186") ? () => undefined : (stryCov_9fa48("4186"), (deployment, view) => source(deployment, view.cacheDigests())),
        initial: stryMutAct_9fa48("4187") ? () => undefined : (stryCov_9fa48("4187"), () => new RoutingView()),
        apply: (view, snapshot, at) => {
          if (stryMutAct_9fa48("4188")) {
            {}
          } else {
            stryCov_9fa48("4188");
            if (stryMutAct_9fa48("4189")) {
              ;
            } else {
              stryCov_9fa48("4189");
              view.applySnapshot(snapshot, at);
            }
            return view;
          }
        },
        ttlMs: stryMutAct_9fa48("4190") ? () => undefined : (stryCov_9fa48("4190"), deployment => pace(deployment).ttlMs),
        due: stryMutAct_9fa48("4191") ? () => undefined : (stryCov_9fa48("4191"), (deployment, s, n) => stryMutAct_9fa48("4194") ? (s.uses >= pace(deployment).everyRequests || n - s.fetchedAt >= VIEW_MAX_AGE_MS || busy(deployment)) && s.value.lapsesBefore(n + LAPSE_MARGIN_MS) : stryMutAct_9fa48("4193") ? false : stryMutAct_9fa48("4192") ? true : (stryCov_9fa48("4192", "4193", "4194"), (stryMutAct_9fa48("4196") ? (s.uses >= pace(deployment).everyRequests || n - s.fetchedAt >= VIEW_MAX_AGE_MS) && busy(deployment) : stryMutAct_9fa48("4195") ? false : (stryCov_9fa48("4195", "4196"), (stryMutAct_9fa48("4198") ? s.uses >= pace(deployment).everyRequests && n - s.fetchedAt >= VIEW_MAX_AGE_MS : stryMutAct_9fa48("4197") ? false : (stryCov_9fa48("4197", "4198"), (stryMutAct_9fa48("4201") ? s.uses < pace(deployment).everyRequests : stryMutAct_9fa48("4200") ? s.uses > pace(deployment).everyRequests : stryMutAct_9fa48("4199") ? false : (stryCov_9fa48("4199", "4200", "4201"), s.uses >= pace(deployment).everyRequests)) || (stryMutAct_9fa48("4204") ? n - s.fetchedAt < VIEW_MAX_AGE_MS : stryMutAct_9fa48("4203") ? n - s.fetchedAt > VIEW_MAX_AGE_MS : stryMutAct_9fa48("4202") ? false : (stryCov_9fa48("4202", "4203", "4204"), (stryMutAct_9fa48("4205") ? n + s.fetchedAt : (stryCov_9fa48("4205"), n - s.fetchedAt)) >= VIEW_MAX_AGE_MS)))) || busy(deployment))) || s.value.lapsesBefore(stryMutAct_9fa48("4206") ? n - LAPSE_MARGIN_MS : (stryCov_9fa48("4206"), n + LAPSE_MARGIN_MS)))),
        failureBackoffMs: REFRESH_FAILURE_BACKOFF_MS,
        staleWaitMs: LAPSED_REFRESH_WAIT_MS,
        what: stryMutAct_9fa48("4207") ? "" : (stryCov_9fa48("4207"), "snapshot"),
        now
      }));
    }
  }

  /** Durable Object calls made by this cache (observability and tests). */
  get refreshes(): number {
    if (stryMutAct_9fa48("4208")) {
      {}
    } else {
      stryCov_9fa48("4208");
      return this.#views.refreshes;
    }
  }

  /**
   * Returns the deployment's view. Waits for the Durable Object when the
   * isolate has no view yet or the view has nothing to route to (a wait joins a
   * refresh another request started). Otherwise a due refresh runs in the
   * background, handed to `background` (ctx.waitUntil).
   *
   * A view past its TTL in which a ready replica's liveness ran out is worth a
   * short wait (LAPSED_REFRESH_WAIT_MS) too: a view left idle ages live replicas
   * as well as dead ones, and routing around a live one sends a multiplexed
   * model or a session to a replica without its state, which costs far more.
   * Snapshots list only live replicas, so a dead one costs one such wait.
   */
  view(deployment: string, background: (p: Promise<unknown>) => void): Promise<RoutingView> {
    if (stryMutAct_9fa48("4209")) {
      {}
    } else {
      stryCov_9fa48("4209");
      return this.#views.get(deployment, background, cannotRoute, hasLapsedSinceDue);
    }
  }

  /** view()'s answer when it would not wait, with no promise (the usual case); undefined when view() would wait. */
  viewNow(deployment: string, background: (p: Promise<unknown>) => void): RoutingView | undefined {
    if (stryMutAct_9fa48("4210")) {
      {}
    } else {
      stryCov_9fa48("4210");
      return this.#views.now(deployment, background, cannotRoute, hasLapsedSinceDue);
    }
  }
}

// Module-level, so the hot path allocates no closures for them.
const cannotRoute = stryMutAct_9fa48("4211") ? () => undefined : (stryCov_9fa48("4211"), (() => {
  const cannotRoute = (s: Refreshed<RoutingView>, now: number) => stryMutAct_9fa48("4214") ? s.fetchedAt === 0 && s.value.readyCount(now) === 0 : stryMutAct_9fa48("4213") ? false : stryMutAct_9fa48("4212") ? true : (stryCov_9fa48("4212", "4213", "4214"), (stryMutAct_9fa48("4216") ? s.fetchedAt !== 0 : stryMutAct_9fa48("4215") ? false : (stryCov_9fa48("4215", "4216"), s.fetchedAt === 0)) || (stryMutAct_9fa48("4218") ? s.value.readyCount(now) !== 0 : stryMutAct_9fa48("4217") ? false : (stryCov_9fa48("4217", "4218"), s.value.readyCount(now) === 0)));
  return cannotRoute;
})());
const hasLapsedSinceDue = stryMutAct_9fa48("4219") ? () => undefined : (stryCov_9fa48("4219"), (() => {
  const hasLapsedSinceDue = (s: Refreshed<RoutingView>, now: number) => stryMutAct_9fa48("4222") ? now - s.fetchedAt >= SNAPSHOT_TTL_MS || s.value.hasLapsed(now) : stryMutAct_9fa48("4221") ? false : stryMutAct_9fa48("4220") ? true : (stryCov_9fa48("4220", "4221", "4222"), (stryMutAct_9fa48("4225") ? now - s.fetchedAt < SNAPSHOT_TTL_MS : stryMutAct_9fa48("4224") ? now - s.fetchedAt > SNAPSHOT_TTL_MS : stryMutAct_9fa48("4223") ? true : (stryCov_9fa48("4223", "4224", "4225"), (stryMutAct_9fa48("4226") ? now + s.fetchedAt : (stryCov_9fa48("4226"), now - s.fetchedAt)) >= SNAPSHOT_TTL_MS)) && s.value.hasLapsed(now));
  return hasLapsedSinceDue;
})());

/**
 * Per-key values an isolate keeps and refreshes from a Durable Object in the
 * background (stale-while-revalidate): routing views and API key sets. A value
 * older than `ttlMs` is refreshed after the response (`background`), so requests
 * do not wait; only when the caller says the value is unusable (none yet, or no
 * ready replica) does a request wait, for the refresh already in flight or a
 * new one. A failed refresh keeps the old value and backs off before retrying.
 */
export interface BackgroundRefreshOptions<T, S> {
  /** Fetches a fresh copy (a Durable Object call); `current` is the value it will be folded into. */
  source: (key: string, current: T) => Promise<S>;
  /** The value before the first successful fetch. */
  initial: () => T;
  /** Folds a fetched copy into the value (returns the new value, or the same one updated). */
  apply: (value: T, fetched: S, now: number) => T;
  /** How long a value serves before a refresh, ms: one figure, or one per key. */
  ttlMs: number | ((key: string) => number);
  /**
   * Past the TTL, whether a refresh is due now (`uses`: gets since the last refresh
   * started). Default: always; a refresh then follows the first get past the TTL.
   */
  due?: (key: string, s: Refreshed<T> & {
    uses: number;
  }, now: number) => boolean;
  failureBackoffMs: number;
  /**
   * How long after a refresh starts a request that finds the value `stale` (see
   * get) may wait for it; later ones use the old value. Bounds what a slow or
   * hung source costs. Default 0: never wait for a stale value.
   */
  staleWaitMs?: number;
  /** Named in the log line of a failed refresh. */
  what: string;
  now?: () => number;
}
export interface Refreshed<T> {
  value: T;
  /** Epoch ms of the last successful refresh (0: never). */
  fetchedAt: number;
}
interface Slot<T> extends Refreshed<T> {
  /** Gets since the last refresh started. */
  uses: number;
  /** Epoch ms before which no new refresh starts. */
  nextRefreshAt: number;
  refreshing: Promise<void> | null;
  /** Epoch ms the refresh in flight started. */
  refreshStartedAt: number;
}
export class BackgroundRefresh<T, S> {
  readonly #o: BackgroundRefreshOptions<T, S>;
  readonly #now: () => number;
  readonly #slots = new Map<string, Slot<T>>();
  /** Durable Object calls made (observability and tests). */
  refreshes = 0;
  constructor(options: BackgroundRefreshOptions<T, S>) {
    if (stryMutAct_9fa48("4227")) {
      {}
    } else {
      stryCov_9fa48("4227");
      this.#o = options;
      this.#now = stryMutAct_9fa48("4228") ? options.now && Date.now : (stryCov_9fa48("4228"), options.now ?? Date.now);
    }
  }

  /**
   * The key's value. Waits for a refresh when `unusable` says the current one
   * cannot serve; when `stale` says it can but a fresher one would serve better,
   * waits for the refresh only while it is younger than `staleWaitMs`.
   */
  async get(key: string, background: (p: Promise<unknown>) => void, unusable: (s: Refreshed<T>, now: number) => boolean, stale?: (s: Refreshed<T>, now: number) => boolean): Promise<T> {
    if (stryMutAct_9fa48("4229")) {
      {}
    } else {
      stryCov_9fa48("4229");
      const s = this.#slot(key);
      const answer = this.#answer(key, s, background, unusable, stale);
      if (stryMutAct_9fa48("4232") ? answer !== UNUSABLE : stryMutAct_9fa48("4231") ? false : stryMutAct_9fa48("4230") ? true : (stryCov_9fa48("4230", "4231", "4232"), answer === UNUSABLE)) {
        if (stryMutAct_9fa48("4233")) {
          {}
        } else {
          stryCov_9fa48("4233");
          if (stryMutAct_9fa48("4235") ? false : stryMutAct_9fa48("4234") ? true : (stryCov_9fa48("4234", "4235"), s.refreshing)) await s.refreshing;else if (stryMutAct_9fa48("4239") ? this.#now() < s.nextRefreshAt : stryMutAct_9fa48("4238") ? this.#now() > s.nextRefreshAt : stryMutAct_9fa48("4237") ? false : stryMutAct_9fa48("4236") ? true : (stryCov_9fa48("4236", "4237", "4238", "4239"), this.#now() >= s.nextRefreshAt)) await this.#refresh(key, s);
        }
      } else if (stryMutAct_9fa48("4242") ? answer === NOW : stryMutAct_9fa48("4241") ? false : stryMutAct_9fa48("4240") ? true : (stryCov_9fa48("4240", "4241", "4242"), answer !== NOW)) {
        if (stryMutAct_9fa48("4243")) {
          {}
        } else {
          stryCov_9fa48("4243");
          await settledWithin(s.refreshing!, answer);
        }
      }
      return s.value;
    }
  }

  /**
   * What get() answers without waiting, with no promise; undefined when get() would
   * wait (then call get(), which waits as it would have). The usual case on the hot
   * path: a value that serves, its refresh (when due) handed to `background`.
   */
  now(key: string, background: (p: Promise<unknown>) => void, unusable: (s: Refreshed<T>, now: number) => boolean, stale?: (s: Refreshed<T>, now: number) => boolean): T | undefined {
    if (stryMutAct_9fa48("4244")) {
      {}
    } else {
      stryCov_9fa48("4244");
      const s = this.#slot(key);
      return (stryMutAct_9fa48("4247") ? this.#answer(key, s, background, unusable, stale) !== NOW : stryMutAct_9fa48("4246") ? false : stryMutAct_9fa48("4245") ? true : (stryCov_9fa48("4245", "4246", "4247"), this.#answer(key, s, background, unusable, stale) === NOW)) ? s.value : undefined;
    }
  }
  #slot(key: string): Slot<T> {
    if (stryMutAct_9fa48("4248")) {
      {}
    } else {
      stryCov_9fa48("4248");
      let s = this.#slots.get(key);
      if (stryMutAct_9fa48("4251") ? false : stryMutAct_9fa48("4250") ? true : stryMutAct_9fa48("4249") ? s : (stryCov_9fa48("4249", "4250", "4251"), !s)) {
        if (stryMutAct_9fa48("4252")) {
          {}
        } else {
          stryCov_9fa48("4252");
          s = stryMutAct_9fa48("4253") ? {} : (stryCov_9fa48("4253"), {
            value: this.#o.initial(),
            fetchedAt: 0,
            uses: 0,
            nextRefreshAt: 0,
            refreshing: null,
            refreshStartedAt: 0
          });
          if (stryMutAct_9fa48("4254")) {
            ;
          } else {
            stryCov_9fa48("4254");
            this.#slots.set(key, s);
          }
        }
      }
      return s;
    }
  }

  /**
   * Whether the slot's value serves now (NOW; a due refresh is handed to `background`),
   * is UNUSABLE (wait for a refresh), or is stale while a refresh younger than
   * `staleWaitMs` runs (the ms left to wait for it).
   */
  #answer(key: string, s: Slot<T>, background: (p: Promise<unknown>) => void, unusable: (s: Refreshed<T>, now: number) => boolean, stale: ((s: Refreshed<T>, now: number) => boolean) | undefined): typeof NOW | typeof UNUSABLE | number {
    if (stryMutAct_9fa48("4255")) {
      {}
    } else {
      stryCov_9fa48("4255");
      const now = this.#now();
      stryMutAct_9fa48("4256") ? s.uses-- : (stryCov_9fa48("4256"), s.uses++);
      if (stryMutAct_9fa48("4258") ? false : stryMutAct_9fa48("4257") ? true : (stryCov_9fa48("4257", "4258"), unusable(s, now))) return UNUSABLE;
      if (stryMutAct_9fa48("4261") ? !s.refreshing && now >= s.nextRefreshAt || (this.#o.due?.(key, s, now) ?? true) : stryMutAct_9fa48("4260") ? false : stryMutAct_9fa48("4259") ? true : (stryCov_9fa48("4259", "4260", "4261"), (stryMutAct_9fa48("4263") ? !s.refreshing || now >= s.nextRefreshAt : stryMutAct_9fa48("4262") ? true : (stryCov_9fa48("4262", "4263"), (stryMutAct_9fa48("4264") ? s.refreshing : (stryCov_9fa48("4264"), !s.refreshing)) && (stryMutAct_9fa48("4267") ? now < s.nextRefreshAt : stryMutAct_9fa48("4266") ? now > s.nextRefreshAt : stryMutAct_9fa48("4265") ? true : (stryCov_9fa48("4265", "4266", "4267"), now >= s.nextRefreshAt)))) && (stryMutAct_9fa48("4268") ? this.#o.due?.(key, s, now) && true : (stryCov_9fa48("4268"), (stryMutAct_9fa48("4269") ? this.#o.due(key, s, now) : (stryCov_9fa48("4269"), this.#o.due?.(key, s, now))) ?? (stryMutAct_9fa48("4270") ? false : (stryCov_9fa48("4270"), true)))))) if (stryMutAct_9fa48("4271")) {
        ;
      } else {
        stryCov_9fa48("4271");
        background(this.#refresh(key, s));
      }
      // The time left is checked before `stale`, which may walk the whole value.
      const left = stryMutAct_9fa48("4272") ? s.refreshStartedAt + (this.#o.staleWaitMs ?? 0) + now : (stryCov_9fa48("4272"), (stryMutAct_9fa48("4273") ? s.refreshStartedAt - (this.#o.staleWaitMs ?? 0) : (stryCov_9fa48("4273"), s.refreshStartedAt + (stryMutAct_9fa48("4274") ? this.#o.staleWaitMs && 0 : (stryCov_9fa48("4274"), this.#o.staleWaitMs ?? 0)))) - now);
      return (stryMutAct_9fa48("4277") ? s.refreshing && left > 0 || stale?.(s, now) : stryMutAct_9fa48("4276") ? false : stryMutAct_9fa48("4275") ? true : (stryCov_9fa48("4275", "4276", "4277"), (stryMutAct_9fa48("4279") ? s.refreshing || left > 0 : stryMutAct_9fa48("4278") ? true : (stryCov_9fa48("4278", "4279"), s.refreshing && (stryMutAct_9fa48("4282") ? left <= 0 : stryMutAct_9fa48("4281") ? left >= 0 : stryMutAct_9fa48("4280") ? true : (stryCov_9fa48("4280", "4281", "4282"), left > 0)))) && (stryMutAct_9fa48("4283") ? stale(s, now) : (stryCov_9fa48("4283"), stale?.(s, now))))) ? left : NOW;
    }
  }

  /** Forgets the key's value (and its back-off): the next get fetches afresh. */
  forget(key: string): void {
    if (stryMutAct_9fa48("4284")) {
      {}
    } else {
      stryCov_9fa48("4284");
      if (stryMutAct_9fa48("4285")) {
        ;
      } else {
        stryCov_9fa48("4285");
        this.#slots.delete(key);
      }
    }
  }
  #refresh(key: string, s: Slot<T>): Promise<void> {
    if (stryMutAct_9fa48("4286")) {
      {}
    } else {
      stryCov_9fa48("4286");
      stryMutAct_9fa48("4287") ? this.refreshes-- : (stryCov_9fa48("4287"), this.refreshes++);
      s.uses = 0;
      const p = this.#o.source(key, s.value).then(fetched => {
        if (stryMutAct_9fa48("4288")) {
          {}
        } else {
          stryCov_9fa48("4288");
          const now = this.#now();
          s.value = this.#o.apply(s.value, fetched, now);
          s.fetchedAt = now;
          const ttl = this.#o.ttlMs;
          s.nextRefreshAt = stryMutAct_9fa48("4289") ? now - (typeof ttl === "number" ? ttl : ttl(key)) : (stryCov_9fa48("4289"), now + ((stryMutAct_9fa48("4292") ? typeof ttl !== "number" : stryMutAct_9fa48("4291") ? false : stryMutAct_9fa48("4290") ? true : (stryCov_9fa48("4290", "4291", "4292"), typeof ttl === (stryMutAct_9fa48("4293") ? "" : (stryCov_9fa48("4293"), "number")))) ? ttl : ttl(key)));
        }
      }).catch((err: unknown) => {
        if (stryMutAct_9fa48("4294")) {
          {}
        } else {
          stryCov_9fa48("4294");
          // Keep serving the old value (the Durable Object may be restarting).
          s.nextRefreshAt = stryMutAct_9fa48("4295") ? this.#now() - this.#o.failureBackoffMs : (stryCov_9fa48("4295"), this.#now() + this.#o.failureBackoffMs);
          console.error(JSON.stringify(stryMutAct_9fa48("4297") ? {} : (stryCov_9fa48("4297"), {
            msg: stryMutAct_9fa48("4298") ? `` : (stryCov_9fa48("4298"), `${this.#o.what} refresh failed`),
            deployment: key,
            error: String(err)
          })));
        }
      }).finally(() => {
        if (stryMutAct_9fa48("4299")) {
          {}
        } else {
          stryCov_9fa48("4299");
          s.refreshing = null;
        }
      });
      s.refreshing = p;
      s.refreshStartedAt = this.#now();
      return p;
    }
  }
}

// #answer's verdicts besides a wait in ms.
const NOW = Symbol("now");
const UNUSABLE = Symbol("unusable");

/** Waits for `p` (which never rejects) or `ms`, whichever comes first. */
function settledWithin(p: Promise<void>, ms: number): Promise<void> {
  if (stryMutAct_9fa48("4300")) {
    {}
  } else {
    stryCov_9fa48("4300");
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<void>(stryMutAct_9fa48("4301") ? () => undefined : (stryCov_9fa48("4301"), r => timer = setTimeout(r, ms)));
    return Promise.race(stryMutAct_9fa48("4302") ? [] : (stryCov_9fa48("4302"), [p, timeout])).finally(() => {
      if (stryMutAct_9fa48("4303")) {
        {}
      } else {
        stryCov_9fa48("4303");
        if (stryMutAct_9fa48("4306") ? timer === undefined : stryMutAct_9fa48("4305") ? false : stryMutAct_9fa48("4304") ? true : (stryCov_9fa48("4304", "4305", "4306"), timer !== undefined)) if (stryMutAct_9fa48("4307")) {
          ;
        } else {
          stryCov_9fa48("4307");
          clearTimeout(timer);
        }
      }
    });
  }
}