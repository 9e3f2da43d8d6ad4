/**
 * Request bodies at the edge: the declared Content-Length, checked once the
 * same way everywhere; every body read at the deployment's upload pace (the
 * PacedReader, at the end of this file), chunk by chunk, sized or chunked, on every route; bodies
 * read before the client is authenticated charged to that client's share of the
 * isolate (BodyHolds); the body of a dispatch, held when it is small (so it can be
 * replayed on another replica), and otherwise held until its first bytes prove
 * the pace, then streamed; and draining the body of a request the edge refused
 * without reading it.
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
import { errorResponse } from "../../protocol/index.ts";

/** The declared Content-Length: undefined when absent, null when malformed. */
export function declaredLength(headers: Headers): number | undefined | null {
  if (stryMutAct_9fa48("913")) {
    {}
  } else {
    stryCov_9fa48("913");
    const declared = headers.get(stryMutAct_9fa48("914") ? "" : (stryCov_9fa48("914"), "content-length"));
    if (stryMutAct_9fa48("917") ? declared !== null : stryMutAct_9fa48("916") ? false : stryMutAct_9fa48("915") ? true : (stryCov_9fa48("915", "916", "917"), declared === null)) return undefined;
    return (stryMutAct_9fa48("921") ? /^\D{1,15}$/ : stryMutAct_9fa48("920") ? /^\d$/ : stryMutAct_9fa48("919") ? /^\d{1,15}/ : stryMutAct_9fa48("918") ? /\d{1,15}$/ : (stryCov_9fa48("918", "919", "920", "921"), /^\d{1,15}$/)).test(declared) ? Number(declared) : null;
  }
}

/**
 * The declared size checked against `limit`: `{ size }` (undefined when the
 * body is unsized), or the JSON refusal to send (400 malformed, 413 too large).
 */
export function checkDeclaredLength(headers: Headers, limit: number, requestId: string): {
  size: number | undefined;
} | Response {
  if (stryMutAct_9fa48("922")) {
    {}
  } else {
    stryCov_9fa48("922");
    const size = declaredLength(headers);
    if (stryMutAct_9fa48("925") ? size !== null : stryMutAct_9fa48("924") ? false : stryMutAct_9fa48("923") ? true : (stryCov_9fa48("923", "924", "925"), size === null)) return errorResponse(stryMutAct_9fa48("926") ? "" : (stryCov_9fa48("926"), "bad_request"), stryMutAct_9fa48("927") ? "" : (stryCov_9fa48("927"), "invalid Content-Length header"), stryMutAct_9fa48("928") ? {} : (stryCov_9fa48("928"), {
      requestId
    }));
    if (stryMutAct_9fa48("931") ? size !== undefined || size > limit : stryMutAct_9fa48("930") ? false : stryMutAct_9fa48("929") ? true : (stryCov_9fa48("929", "930", "931"), (stryMutAct_9fa48("933") ? size === undefined : stryMutAct_9fa48("932") ? true : (stryCov_9fa48("932", "933"), size !== undefined)) && (stryMutAct_9fa48("936") ? size <= limit : stryMutAct_9fa48("935") ? size >= limit : stryMutAct_9fa48("934") ? true : (stryCov_9fa48("934", "935", "936"), size > limit)))) return errorResponse(stryMutAct_9fa48("937") ? "" : (stryCov_9fa48("937"), "payload_too_large"), stryMutAct_9fa48("938") ? `` : (stryCov_9fa48("938"), `request body of ${size} bytes exceeds ${limit}`), stryMutAct_9fa48("939") ? {} : (stryCov_9fa48("939"), {
      requestId
    }));
    return stryMutAct_9fa48("940") ? {} : (stryCov_9fa48("940"), {
      size
    });
  }
}

/**
 * How much body one client, and all clients together, may have in flight in one
 * isolate before anything authenticated them (public deployments, the /v1 routes'
 * routing read, control messages before their signature). An isolate has 128 MB
 * on Cloudflare: before this bound, ten connections sending 10 MiB each and
 * stopping just short of the end raised workerd's RSS by ~100 MiB. The client is
 * its address (`cf-connecting-ip`, which Cloudflare sets, and the local stack's
 * workerd sets to the loopback address it listens on). A body alone is always
 * allowed up to its deployment's body limit: the bounds are on bodies together.
 */
export interface HoldLimits {
  clientBodies: number;
  clientBytes: number;
  isolateBodies: number;
  isolateBytes: number;
}
export const UNAUTHENTICATED_HOLD_LIMITS: HoldLimits = stryMutAct_9fa48("941") ? {} : (stryCov_9fa48("941"), {
  clientBodies: 64,
  clientBytes: stryMutAct_9fa48("942") ? 16 * 1024 / 1024 : (stryCov_9fa48("942"), (stryMutAct_9fa48("943") ? 16 / 1024 : (stryCov_9fa48("943"), 16 * 1024)) * 1024),
  isolateBodies: 1024,
  isolateBytes: stryMutAct_9fa48("944") ? 64 * 1024 / 1024 : (stryCov_9fa48("944"), (stryMutAct_9fa48("945") ? 64 / 1024 : (stryCov_9fa48("945"), 64 * 1024)) * 1024)
});

/** Why a body could not be held: this client's share, or the isolate's, is used up. */
export type HoldRefusal = "client_holds" | "isolate_holds";

/** One body's share of the ledger; `close` gives it all back. */
export interface BodyHold {
  /** Charges `bytes` more; a refusal when that would go past a bound (nothing is charged then). */
  take(bytes: number): HoldRefusal | null;
  close(): void;
}

/** The isolate's ledger of unauthenticated bodies, per client and in all. Pure (no I/O, no clock). */
export class BodyHolds {
  readonly #limits: HoldLimits;
  readonly #clients = new Map<string, {
    bodies: number;
    bytes: number;
  }>();
  bodies = 0;
  bytes = 0;
  constructor(limits: HoldLimits = UNAUTHENTICATED_HOLD_LIMITS) {
    if (stryMutAct_9fa48("946")) {
      {}
    } else {
      stryCov_9fa48("946");
      this.#limits = limits;
    }
  }

  /** What `client` holds now (tests, observability). */
  heldBy(client: string): {
    bodies: number;
    bytes: number;
  } {
    if (stryMutAct_9fa48("947")) {
      {}
    } else {
      stryCov_9fa48("947");
      return stryMutAct_9fa48("948") ? {} : (stryCov_9fa48("948"), {
        ...(stryMutAct_9fa48("949") ? this.#clients.get(client) && {
          bodies: 0,
          bytes: 0
        } : (stryCov_9fa48("949"), this.#clients.get(client) ?? (stryMutAct_9fa48("950") ? {} : (stryCov_9fa48("950"), {
          bodies: 0,
          bytes: 0
        }))))
      });
    }
  }
  open(client: string): BodyHold | HoldRefusal {
    if (stryMutAct_9fa48("951")) {
      {}
    } else {
      stryCov_9fa48("951");
      const limits = this.#limits;
      let mine = this.#clients.get(client);
      if (stryMutAct_9fa48("955") ? (mine?.bodies ?? 0) < limits.clientBodies : stryMutAct_9fa48("954") ? (mine?.bodies ?? 0) > limits.clientBodies : stryMutAct_9fa48("953") ? false : stryMutAct_9fa48("952") ? true : (stryCov_9fa48("952", "953", "954", "955"), (stryMutAct_9fa48("956") ? mine?.bodies && 0 : (stryCov_9fa48("956"), (stryMutAct_9fa48("957") ? mine.bodies : (stryCov_9fa48("957"), mine?.bodies)) ?? 0)) >= limits.clientBodies)) return stryMutAct_9fa48("958") ? "" : (stryCov_9fa48("958"), "client_holds");
      if (stryMutAct_9fa48("962") ? this.bodies < limits.isolateBodies : stryMutAct_9fa48("961") ? this.bodies > limits.isolateBodies : stryMutAct_9fa48("960") ? false : stryMutAct_9fa48("959") ? true : (stryCov_9fa48("959", "960", "961", "962"), this.bodies >= limits.isolateBodies)) return stryMutAct_9fa48("963") ? "" : (stryCov_9fa48("963"), "isolate_holds");
      if (stryMutAct_9fa48("966") ? false : stryMutAct_9fa48("965") ? true : stryMutAct_9fa48("964") ? mine : (stryCov_9fa48("964", "965", "966"), !mine)) this.#clients.set(client, mine = stryMutAct_9fa48("968") ? {} : (stryCov_9fa48("968"), {
        bodies: 0,
        bytes: 0
      }));
      const account = mine;
      stryMutAct_9fa48("969") ? account.bodies-- : (stryCov_9fa48("969"), account.bodies++);
      stryMutAct_9fa48("970") ? this.bodies-- : (stryCov_9fa48("970"), this.bodies++);
      let held = 0;
      let open = stryMutAct_9fa48("971") ? false : (stryCov_9fa48("971"), true);
      return stryMutAct_9fa48("972") ? {} : (stryCov_9fa48("972"), {
        take: bytes => {
          if (stryMutAct_9fa48("973")) {
            {}
          } else {
            stryCov_9fa48("973");
            // One body alone is bounded by its deployment's body limit; the bounds are on bodies together.
            if (stryMutAct_9fa48("976") ? account.bytes > held || account.bytes + bytes > limits.clientBytes : stryMutAct_9fa48("975") ? false : stryMutAct_9fa48("974") ? true : (stryCov_9fa48("974", "975", "976"), (stryMutAct_9fa48("979") ? account.bytes <= held : stryMutAct_9fa48("978") ? account.bytes >= held : stryMutAct_9fa48("977") ? true : (stryCov_9fa48("977", "978", "979"), account.bytes > held)) && (stryMutAct_9fa48("982") ? account.bytes + bytes <= limits.clientBytes : stryMutAct_9fa48("981") ? account.bytes + bytes >= limits.clientBytes : stryMutAct_9fa48("980") ? true : (stryCov_9fa48("980", "981", "982"), (stryMutAct_9fa48("983") ? account.bytes - bytes : (stryCov_9fa48("983"), account.bytes + bytes)) > limits.clientBytes)))) return stryMutAct_9fa48("984") ? "" : (stryCov_9fa48("984"), "client_holds");
            if (stryMutAct_9fa48("987") ? this.bytes > held || this.bytes + bytes > limits.isolateBytes : stryMutAct_9fa48("986") ? false : stryMutAct_9fa48("985") ? true : (stryCov_9fa48("985", "986", "987"), (stryMutAct_9fa48("990") ? this.bytes <= held : stryMutAct_9fa48("989") ? this.bytes >= held : stryMutAct_9fa48("988") ? true : (stryCov_9fa48("988", "989", "990"), this.bytes > held)) && (stryMutAct_9fa48("993") ? this.bytes + bytes <= limits.isolateBytes : stryMutAct_9fa48("992") ? this.bytes + bytes >= limits.isolateBytes : stryMutAct_9fa48("991") ? true : (stryCov_9fa48("991", "992", "993"), (stryMutAct_9fa48("994") ? this.bytes - bytes : (stryCov_9fa48("994"), this.bytes + bytes)) > limits.isolateBytes)))) return stryMutAct_9fa48("995") ? "" : (stryCov_9fa48("995"), "isolate_holds");
            stryMutAct_9fa48("996") ? account.bytes -= bytes : (stryCov_9fa48("996"), account.bytes += bytes);
            stryMutAct_9fa48("997") ? this.bytes -= bytes : (stryCov_9fa48("997"), this.bytes += bytes);
            stryMutAct_9fa48("998") ? held -= bytes : (stryCov_9fa48("998"), held += bytes);
            return null;
          }
        },
        close: () => {
          if (stryMutAct_9fa48("999")) {
            {}
          } else {
            stryCov_9fa48("999");
            if (stryMutAct_9fa48("1002") ? false : stryMutAct_9fa48("1001") ? true : stryMutAct_9fa48("1000") ? open : (stryCov_9fa48("1000", "1001", "1002"), !open)) return;
            open = stryMutAct_9fa48("1003") ? true : (stryCov_9fa48("1003"), false);
            stryMutAct_9fa48("1004") ? account.bodies++ : (stryCov_9fa48("1004"), account.bodies--);
            stryMutAct_9fa48("1005") ? account.bytes += held : (stryCov_9fa48("1005"), account.bytes -= held);
            stryMutAct_9fa48("1006") ? this.bodies++ : (stryCov_9fa48("1006"), this.bodies--);
            stryMutAct_9fa48("1007") ? this.bytes += held : (stryCov_9fa48("1007"), this.bytes -= held);
            if (stryMutAct_9fa48("1010") ? account.bodies !== 0 : stryMutAct_9fa48("1009") ? false : stryMutAct_9fa48("1008") ? true : (stryCov_9fa48("1008", "1009", "1010"), account.bodies === 0)) if (stryMutAct_9fa48("1011")) {
              ;
            } else {
              stryCov_9fa48("1011");
              this.#clients.delete(client);
            }
          }
        }
      });
    }
  }
}

/** This isolate's ledger (module scope: one per isolate). */
export const unauthenticatedHolds = new BodyHolds();

/** A client known only by its address, as per-client budgets name it: `ip:` and cf-connecting-ip. */
export function clientOf(headers: Headers): string {
  if (stryMutAct_9fa48("1012")) {
    {}
  } else {
    stryCov_9fa48("1012");
    return stryMutAct_9fa48("1013") ? `` : (stryCov_9fa48("1013"), `ip:${stryMutAct_9fa48("1014") ? headers.get("cf-connecting-ip") && "" : (stryCov_9fa48("1014"), headers.get(stryMutAct_9fa48("1015") ? "" : (stryCov_9fa48("1015"), "cf-connecting-ip")) ?? (stryMutAct_9fa48("1016") ? "Stryker was here!" : (stryCov_9fa48("1016"), "")))}`);
  }
}

/** Why a body was not read. */
export type BodyFailure = "too_large" | "too_slow" | "aborted" | HoldRefusal;

/** A body read into memory, or why not. */
export type BoundedBody = ArrayBuffer | BodyFailure;

/** The JSON refusal for a body that failed (`limit`: the size it may not pass). */
export function bodyRefusal(failure: BodyFailure, limit: number, requestId: string): Response {
  if (stryMutAct_9fa48("1017")) {
    {}
  } else {
    stryCov_9fa48("1017");
    switch (failure) {
      case stryMutAct_9fa48("1019") ? "" : (stryCov_9fa48("1019"), "too_large"):
        if (stryMutAct_9fa48("1018")) {} else {
          stryCov_9fa48("1018");
          return errorResponse(stryMutAct_9fa48("1020") ? "" : (stryCov_9fa48("1020"), "payload_too_large"), stryMutAct_9fa48("1021") ? `` : (stryCov_9fa48("1021"), `request body exceeds ${limit} bytes`), stryMutAct_9fa48("1022") ? {} : (stryCov_9fa48("1022"), {
            requestId
          }));
        }
      case stryMutAct_9fa48("1024") ? "" : (stryCov_9fa48("1024"), "too_slow"):
        if (stryMutAct_9fa48("1023")) {} else {
          stryCov_9fa48("1023");
          return uploadTooSlow(requestId);
        }
      case stryMutAct_9fa48("1026") ? "" : (stryCov_9fa48("1026"), "aborted"):
        if (stryMutAct_9fa48("1025")) {} else {
          stryCov_9fa48("1025");
          // Nobody reads this (the client has gone); it names the request in the edge's own log line.
          return errorResponse(stryMutAct_9fa48("1027") ? "" : (stryCov_9fa48("1027"), "bad_request"), stryMutAct_9fa48("1028") ? "" : (stryCov_9fa48("1028"), "the request body ended early: the client's connection was lost"), stryMutAct_9fa48("1029") ? {} : (stryCov_9fa48("1029"), {
            requestId
          }));
        }
      case stryMutAct_9fa48("1031") ? "" : (stryCov_9fa48("1031"), "client_holds"):
        if (stryMutAct_9fa48("1030")) {} else {
          stryCov_9fa48("1030");
          return errorResponse(stryMutAct_9fa48("1032") ? "" : (stryCov_9fa48("1032"), "rate_limited"), stryMutAct_9fa48("1033") ? "" : (stryCov_9fa48("1033"), "this client has too many request bodies in flight here before authentication; retry shortly"), stryMutAct_9fa48("1034") ? {} : (stryCov_9fa48("1034"), {
            requestId,
            retryAfterSeconds: 1
          }));
        }
      case stryMutAct_9fa48("1036") ? "" : (stryCov_9fa48("1036"), "isolate_holds"):
        if (stryMutAct_9fa48("1035")) {} else {
          stryCov_9fa48("1035");
          return errorResponse(stryMutAct_9fa48("1037") ? "" : (stryCov_9fa48("1037"), "queue_full"), stryMutAct_9fa48("1038") ? "" : (stryCov_9fa48("1038"), "too many request bodies in flight here before authentication; retry shortly"), stryMutAct_9fa48("1039") ? {} : (stryCov_9fa48("1039"), {
            requestId,
            retryAfterSeconds: 1
          }));
        }
    }
  }
}

/** What reading the first part of a body gave: its chunks, and whether that was all of it. */
interface FirstChunks {
  chunks: Uint8Array[];
  bytes: number;
  ended: boolean;
}

/**
 * Reads `reader` until its end or until more than `upTo` bytes have arrived,
 * failing past `limit` bytes. A body whose size is declared charges `hold` that
 * (up to `upTo`) before a byte is read, so a refusal costs the client no upload;
 * a chunked one charges each chunk as it arrives.
 */
async function readFirst(reader: PacedReader, o: {
  upTo: number;
  limit: number;
  size: number | undefined;
  hold: BodyHold | undefined;
}): Promise<FirstChunks | BodyFailure> {
  if (stryMutAct_9fa48("1040")) {
    {}
  } else {
    stryCov_9fa48("1040");
    const {
      hold
    } = o;
    if (stryMutAct_9fa48("1043") ? hold || o.size !== undefined : stryMutAct_9fa48("1042") ? false : stryMutAct_9fa48("1041") ? true : (stryCov_9fa48("1041", "1042", "1043"), hold && (stryMutAct_9fa48("1045") ? o.size === undefined : stryMutAct_9fa48("1044") ? true : (stryCov_9fa48("1044", "1045"), o.size !== undefined)))) {
      if (stryMutAct_9fa48("1046")) {
        {}
      } else {
        stryCov_9fa48("1046");
        const refused = hold.take(stryMutAct_9fa48("1047") ? Math.max(o.size, o.upTo) : (stryCov_9fa48("1047"), Math.min(o.size, o.upTo)));
        if (stryMutAct_9fa48("1049") ? false : stryMutAct_9fa48("1048") ? true : (stryCov_9fa48("1048", "1049"), refused)) {
          if (stryMutAct_9fa48("1050")) {
            {}
          } else {
            stryCov_9fa48("1050");
            await reader.cancel(stryMutAct_9fa48("1051") ? "" : (stryCov_9fa48("1051"), "held too much"));
            return refused;
          }
        }
      }
    }
    const chunks: Uint8Array[] = stryMutAct_9fa48("1052") ? ["Stryker was here"] : (stryCov_9fa48("1052"), []);
    let bytes = 0;
    while (stryMutAct_9fa48("1055") ? bytes > o.upTo : stryMutAct_9fa48("1054") ? bytes < o.upTo : stryMutAct_9fa48("1053") ? false : (stryCov_9fa48("1053", "1054", "1055"), bytes <= o.upTo)) {
      if (stryMutAct_9fa48("1056")) {
        {}
      } else {
        stryCov_9fa48("1056");
        const read = await reader.read();
        if (stryMutAct_9fa48("1059") ? read !== null : stryMutAct_9fa48("1058") ? false : stryMutAct_9fa48("1057") ? true : (stryCov_9fa48("1057", "1058", "1059"), read === null)) return stryMutAct_9fa48("1060") ? {} : (stryCov_9fa48("1060"), {
          chunks,
          bytes,
          ended: stryMutAct_9fa48("1061") ? false : (stryCov_9fa48("1061"), true)
        });
        if (stryMutAct_9fa48("1064") ? typeof read !== "string" : stryMutAct_9fa48("1063") ? false : stryMutAct_9fa48("1062") ? true : (stryCov_9fa48("1062", "1063", "1064"), typeof read === (stryMutAct_9fa48("1065") ? "" : (stryCov_9fa48("1065"), "string")))) return read;
        stryMutAct_9fa48("1066") ? bytes -= read.byteLength : (stryCov_9fa48("1066"), bytes += read.byteLength);
        if (stryMutAct_9fa48("1070") ? bytes <= o.limit : stryMutAct_9fa48("1069") ? bytes >= o.limit : stryMutAct_9fa48("1068") ? false : stryMutAct_9fa48("1067") ? true : (stryCov_9fa48("1067", "1068", "1069", "1070"), bytes > o.limit)) {
          if (stryMutAct_9fa48("1071")) {
            {}
          } else {
            stryCov_9fa48("1071");
            await reader.cancel(stryMutAct_9fa48("1072") ? "" : (stryCov_9fa48("1072"), "too large"));
            return stryMutAct_9fa48("1073") ? "" : (stryCov_9fa48("1073"), "too_large");
          }
        }
        if (stryMutAct_9fa48("1076") ? hold || o.size === undefined : stryMutAct_9fa48("1075") ? false : stryMutAct_9fa48("1074") ? true : (stryCov_9fa48("1074", "1075", "1076"), hold && (stryMutAct_9fa48("1078") ? o.size !== undefined : stryMutAct_9fa48("1077") ? true : (stryCov_9fa48("1077", "1078"), o.size === undefined)))) {
          if (stryMutAct_9fa48("1079")) {
            {}
          } else {
            stryCov_9fa48("1079");
            const refused = hold.take(read.byteLength);
            if (stryMutAct_9fa48("1081") ? false : stryMutAct_9fa48("1080") ? true : (stryCov_9fa48("1080", "1081"), refused)) {
              if (stryMutAct_9fa48("1082")) {
                {}
              } else {
                stryCov_9fa48("1082");
                await reader.cancel(stryMutAct_9fa48("1083") ? "" : (stryCov_9fa48("1083"), "held too much"));
                return refused;
              }
            }
          }
        }
        if (stryMutAct_9fa48("1084")) {
          ;
        } else {
          stryCov_9fa48("1084");
          chunks.push(read);
        }
      }
    }
    return stryMutAct_9fa48("1085") ? {} : (stryCov_9fa48("1085"), {
      chunks,
      bytes,
      ended: stryMutAct_9fa48("1086") ? true : (stryCov_9fa48("1086"), false)
    });
  }
}
function joined(chunks: readonly Uint8Array[], bytes: number): ArrayBuffer {
  if (stryMutAct_9fa48("1087")) {
    {}
  } else {
    stryCov_9fa48("1087");
    const only = (stryMutAct_9fa48("1090") ? chunks.length !== 1 : stryMutAct_9fa48("1089") ? false : stryMutAct_9fa48("1088") ? true : (stryCov_9fa48("1088", "1089", "1090"), chunks.length === 1)) ? chunks[0]! : undefined;
    if (stryMutAct_9fa48("1093") ? only && only.byteOffset === 0 || only.byteLength === only.buffer.byteLength : stryMutAct_9fa48("1092") ? false : stryMutAct_9fa48("1091") ? true : (stryCov_9fa48("1091", "1092", "1093"), (stryMutAct_9fa48("1095") ? only || only.byteOffset === 0 : stryMutAct_9fa48("1094") ? true : (stryCov_9fa48("1094", "1095"), only && (stryMutAct_9fa48("1097") ? only.byteOffset !== 0 : stryMutAct_9fa48("1096") ? true : (stryCov_9fa48("1096", "1097"), only.byteOffset === 0)))) && (stryMutAct_9fa48("1099") ? only.byteLength !== only.buffer.byteLength : stryMutAct_9fa48("1098") ? true : (stryCov_9fa48("1098", "1099"), only.byteLength === only.buffer.byteLength)))) return only.buffer as ArrayBuffer;
    const out = new Uint8Array(bytes);
    let at = 0;
    for (const c of chunks) {
      if (stryMutAct_9fa48("1100")) {
        {}
      } else {
        stryCov_9fa48("1100");
        if (stryMutAct_9fa48("1101")) {
          ;
        } else {
          stryCov_9fa48("1101");
          out.set(c, at);
        }
        stryMutAct_9fa48("1102") ? at -= c.byteLength : (stryCov_9fa48("1102"), at += c.byteLength);
      }
    }
    return out.buffer;
  }
}

/** Opens `client`'s hold, or says why not; no client: an authenticated body, charged to nobody. */
function openHold(client: string | undefined): BodyHold | HoldRefusal | undefined {
  if (stryMutAct_9fa48("1103")) {
    {}
  } else {
    stryCov_9fa48("1103");
    return (stryMutAct_9fa48("1106") ? client !== undefined : stryMutAct_9fa48("1105") ? false : stryMutAct_9fa48("1104") ? true : (stryCov_9fa48("1104", "1105", "1106"), client === undefined)) ? undefined : unauthenticatedHolds.open(client);
  }
}

/**
 * Reads a request body into memory, up to `limit` bytes, at the upload pace,
 * chunk by chunk: "too_large" when it is (or declares itself) larger, after
 * cancelling the rest; "too_slow" when the next bytes do not arrive in time;
 * "aborted" when the client's connection went. With `client` (the body is read
 * before its sender is authenticated), it is charged to that client's hold while
 * it arrives, and refused when the hold is full.
 */
export async function readBoundedBody(req: Request, limit: number, pace: UploadPace, client?: string): Promise<BoundedBody> {
  if (stryMutAct_9fa48("1107")) {
    {}
  } else {
    stryCov_9fa48("1107");
    const size = declaredLength(req.headers);
    if (stryMutAct_9fa48("1110") ? typeof size === "number" || size > limit : stryMutAct_9fa48("1109") ? false : stryMutAct_9fa48("1108") ? true : (stryCov_9fa48("1108", "1109", "1110"), (stryMutAct_9fa48("1112") ? typeof size !== "number" : stryMutAct_9fa48("1111") ? true : (stryCov_9fa48("1111", "1112"), typeof size === (stryMutAct_9fa48("1113") ? "" : (stryCov_9fa48("1113"), "number")))) && (stryMutAct_9fa48("1116") ? size <= limit : stryMutAct_9fa48("1115") ? size >= limit : stryMutAct_9fa48("1114") ? true : (stryCov_9fa48("1114", "1115", "1116"), size > limit)))) return stryMutAct_9fa48("1117") ? "" : (stryCov_9fa48("1117"), "too_large");
    if (stryMutAct_9fa48("1120") ? false : stryMutAct_9fa48("1119") ? true : stryMutAct_9fa48("1118") ? req.body : (stryCov_9fa48("1118", "1119", "1120"), !req.body)) return new ArrayBuffer(0);
    const hold = openHold(client);
    if (stryMutAct_9fa48("1123") ? typeof hold !== "string" : stryMutAct_9fa48("1122") ? false : stryMutAct_9fa48("1121") ? true : (stryCov_9fa48("1121", "1122", "1123"), typeof hold === (stryMutAct_9fa48("1124") ? "" : (stryCov_9fa48("1124"), "string")))) return hold;
    try {
      if (stryMutAct_9fa48("1125")) {
        {}
      } else {
        stryCov_9fa48("1125");
        const first = await readFirst(new PacedReader(req.body, pace), stryMutAct_9fa48("1126") ? {} : (stryCov_9fa48("1126"), {
          upTo: limit,
          limit,
          size: stryMutAct_9fa48("1127") ? size && undefined : (stryCov_9fa48("1127"), size ?? undefined),
          hold
        }));
        return (stryMutAct_9fa48("1130") ? typeof first !== "string" : stryMutAct_9fa48("1129") ? false : stryMutAct_9fa48("1128") ? true : (stryCov_9fa48("1128", "1129", "1130"), typeof first === (stryMutAct_9fa48("1131") ? "" : (stryCov_9fa48("1131"), "string")))) ? first : joined(first.chunks, first.bytes);
      }
    } finally {
      if (stryMutAct_9fa48("1132")) {
        {}
      } else {
        stryCov_9fa48("1132");
        stryMutAct_9fa48("1133") ? hold.close() : (stryCov_9fa48("1133"), hold?.close());
      }
    }
  }
}

/** The answer to a body that did not arrive at the upload pace (408). */
export function uploadTooSlow(requestId: string): Response {
  if (stryMutAct_9fa48("1134")) {
    {}
  } else {
    stryCov_9fa48("1134");
    return errorResponse(stryMutAct_9fa48("1135") ? "" : (stryCov_9fa48("1135"), "request_timeout"), stryMutAct_9fa48("1136") ? "" : (stryCov_9fa48("1136"), "the request body arrived too slowly"), stryMutAct_9fa48("1137") ? {} : (stryCov_9fa48("1137"), {
      requestId
    }));
  }
}

/** The pace a deployment asks of uploads (its limits). */
export function uploadPaceOf(limits: {
  uploadIdleTimeoutMs: number;
  uploadMinBytesPerSecond: number;
}): UploadPace {
  if (stryMutAct_9fa48("1138")) {
    {}
  } else {
    stryCov_9fa48("1138");
    return stryMutAct_9fa48("1139") ? {} : (stryCov_9fa48("1139"), {
      idleMs: limits.uploadIdleTimeoutMs,
      minBytesPerSecond: limits.uploadMinBytesPerSecond
    });
  }
}

/** The pace of bodies no deployment sets one for (control messages, requests to no route): the defaults. */
export const DEFAULT_UPLOAD_PACE: UploadPace = stryMutAct_9fa48("1140") ? {} : (stryCov_9fa48("1140"), {
  idleMs: 10_000,
  minBytesPerSecond: 1024
});

/**
 * Reads and drops the body of a request the edge refused without reading it
 * (bad header, unknown route or model, no key, rate limit, queue full). If the
 * Worker answers with the body unread, workerd cannot reuse the connection and
 * closes it while the client may still be sending, which resets it: the client
 * then sees ECONNRESET instead of our JSON error (measured: 9 of 400 refusals of
 * a 144 KB body lost that way). Bounded by `limitBytes` and by the upload pace;
 * nothing is kept. A larger or unsized body is left alone (its connection is
 * lost, as it would be anywhere).
 */
export async function drainUnreadBody(req: Request, limitBytes: number, pace: UploadPace = DEFAULT_UPLOAD_PACE): Promise<void> {
  if (stryMutAct_9fa48("1141")) {
    {}
  } else {
    stryCov_9fa48("1141");
    if (stryMutAct_9fa48("1144") ? !req.body && req.bodyUsed : stryMutAct_9fa48("1143") ? false : stryMutAct_9fa48("1142") ? true : (stryCov_9fa48("1142", "1143", "1144"), (stryMutAct_9fa48("1145") ? req.body : (stryCov_9fa48("1145"), !req.body)) || req.bodyUsed)) return;
    const size = declaredLength(req.headers);
    if (stryMutAct_9fa48("1148") ? typeof size !== "number" && size > limitBytes : stryMutAct_9fa48("1147") ? false : stryMutAct_9fa48("1146") ? true : (stryCov_9fa48("1146", "1147", "1148"), (stryMutAct_9fa48("1150") ? typeof size === "number" : stryMutAct_9fa48("1149") ? false : (stryCov_9fa48("1149", "1150"), typeof size !== (stryMutAct_9fa48("1151") ? "" : (stryCov_9fa48("1151"), "number")))) || (stryMutAct_9fa48("1154") ? size <= limitBytes : stryMutAct_9fa48("1153") ? size >= limitBytes : stryMutAct_9fa48("1152") ? false : (stryCov_9fa48("1152", "1153", "1154"), size > limitBytes)))) return;
    const reader = new PacedReader(req.body, pace);
    if (stryMutAct_9fa48("1155")) {
      for (; false;) {
        const read = await reader.read();
        if (read === null || typeof read === "string") return;
      }
    } else {
      stryCov_9fa48("1155");
      for (;;) {
        if (stryMutAct_9fa48("1156")) {
          {}
        } else {
          stryCov_9fa48("1156");
          const read = await reader.read();
          if (stryMutAct_9fa48("1159") ? read === null && typeof read === "string" : stryMutAct_9fa48("1158") ? false : stryMutAct_9fa48("1157") ? true : (stryCov_9fa48("1157", "1158", "1159"), (stryMutAct_9fa48("1161") ? read !== null : stryMutAct_9fa48("1160") ? false : (stryCov_9fa48("1160", "1161"), read === null)) || (stryMutAct_9fa48("1163") ? typeof read !== "string" : stryMutAct_9fa48("1162") ? false : (stryCov_9fa48("1162", "1163"), typeof read === (stryMutAct_9fa48("1164") ? "" : (stryCov_9fa48("1164"), "string")))))) return;
        }
      }
    }
  }
}

/** A dispatch's request body, ready to send (to one replica, or to several in turn when replayable). */
export interface DispatchBody {
  body: ArrayBuffer | ReadableStream<Uint8Array> | null;
  /** The body can be sent again (no body, or held in memory). */
  replayable: boolean;
  /** Set when a streamed body outgrew the limit mid-flight. */
  overLimit: () => boolean;
  /** Set when a streamed body stopped arriving (serve/body.ts). */
  tooSlow: () => boolean;
  /** Set when the client's connection went away while a streamed body was passed on. */
  aborted: () => boolean;
  /** Gives back what the body holds (a duplex upload's place) when no replica took it; idempotent. */
  release: () => void;
}
const never = stryMutAct_9fa48("1165") ? () => undefined : (stryCov_9fa48("1165"), (() => {
  const never = () => stryMutAct_9fa48("1166") ? true : (stryCov_9fa48("1166"), false);
  return never;
})());
const nothing = (): void => undefined;

/** A body the edge already read (the /v1 routes read it to route): replayable as it is. */
export function heldBody(body: ArrayBuffer): DispatchBody {
  if (stryMutAct_9fa48("1167")) {
    {}
  } else {
    stryCov_9fa48("1167");
    return stryMutAct_9fa48("1168") ? {} : (stryCov_9fa48("1168"), {
      body,
      replayable: stryMutAct_9fa48("1169") ? false : (stryCov_9fa48("1169"), true),
      overLimit: never,
      tooSlow: never,
      aborted: never,
      release: nothing
    });
  }
}

/** Who sends a body: the client a budget is kept for (API key, else address), and whether anything authenticated it. */
export interface Uploader {
  client: string;
  authenticated: boolean;
}

/**
 * The body of a path-routed request, or the refusal to send (400, 408, 413, 429).
 * Unless the deployment streams uploads duplex, its first `replayableBodyBytes`
 * (at least MIN_UPLOAD_PROOF_BYTES) are read here, at the upload pace, before any
 * replica is asked: a body that ends within them is held and replayable; a longer
 * one then streams to the replica, paced and counted against the limit. A client
 * that sends slowly is cut here, before it holds a replica's slot (16 connections
 * dripping a byte every 2 s kept a deployment's 8 slots full while each was given
 * the pace's grace). What an unauthenticated client's body holds here is charged
 * to its hold. With `duplexUploads`, the body streams from its first byte, and the
 * client's duplex uploads in flight are capped instead.
 */
export function dispatchBody(req: Request, deployment: Deployment, requestId: string, uploader: Uploader): DispatchBody | Promise<DispatchBody | Response> {
  if (stryMutAct_9fa48("1170")) {
    {}
  } else {
    stryCov_9fa48("1170");
    // No body (none, or GET and HEAD: the usual case) is answered with no promise.
    if (stryMutAct_9fa48("1173") ? (!req.body || req.method === "GET") && req.method === "HEAD" : stryMutAct_9fa48("1172") ? false : stryMutAct_9fa48("1171") ? true : (stryCov_9fa48("1171", "1172", "1173"), (stryMutAct_9fa48("1175") ? !req.body && req.method === "GET" : stryMutAct_9fa48("1174") ? false : (stryCov_9fa48("1174", "1175"), (stryMutAct_9fa48("1176") ? req.body : (stryCov_9fa48("1176"), !req.body)) || (stryMutAct_9fa48("1178") ? req.method !== "GET" : stryMutAct_9fa48("1177") ? false : (stryCov_9fa48("1177", "1178"), req.method === (stryMutAct_9fa48("1179") ? "" : (stryCov_9fa48("1179"), "GET")))))) || (stryMutAct_9fa48("1181") ? req.method !== "HEAD" : stryMutAct_9fa48("1180") ? false : (stryCov_9fa48("1180", "1181"), req.method === (stryMutAct_9fa48("1182") ? "" : (stryCov_9fa48("1182"), "HEAD")))))) return NO_BODY;
    return bodyToDispatch(req, req.body, deployment, requestId, uploader);
  }
}

/** A dispatch without a body (made once: nothing in it changes). */
const NO_BODY: DispatchBody = Object.freeze(stryMutAct_9fa48("1183") ? {} : (stryCov_9fa48("1183"), {
  body: null,
  replayable: stryMutAct_9fa48("1184") ? false : (stryCov_9fa48("1184"), true),
  overLimit: never,
  tooSlow: never,
  aborted: never,
  release: nothing
}));

/** The least of a streamed body the edge reads before asking a replica (when `replayableBodyBytes` is set lower). */
export const MIN_UPLOAD_PROOF_BYTES = stryMutAct_9fa48("1185") ? 4 / 1024 : (stryCov_9fa48("1185"), 4 * 1024);

/** Duplex uploads in flight, per deployment and client, in this isolate. */
const duplexInFlight = new Map<string, number>();

/** A place for one more duplex upload of `client`, with its release; null when the client has `max` already. */
export function openDuplexUpload(deployment: string, client: string, max: number): (() => void) | null {
  if (stryMutAct_9fa48("1186")) {
    {}
  } else {
    stryCov_9fa48("1186");
    const key = stryMutAct_9fa48("1187") ? `` : (stryCov_9fa48("1187"), `${deployment}\n${client}`);
    const n = stryMutAct_9fa48("1188") ? duplexInFlight.get(key) && 0 : (stryCov_9fa48("1188"), duplexInFlight.get(key) ?? 0);
    if (stryMutAct_9fa48("1192") ? n < max : stryMutAct_9fa48("1191") ? n > max : stryMutAct_9fa48("1190") ? false : stryMutAct_9fa48("1189") ? true : (stryCov_9fa48("1189", "1190", "1191", "1192"), n >= max)) return null;
    duplexInFlight.set(key, stryMutAct_9fa48("1194") ? n - 1 : (stryCov_9fa48("1194"), n + 1));
    let open = stryMutAct_9fa48("1195") ? false : (stryCov_9fa48("1195"), true);
    return () => {
      if (stryMutAct_9fa48("1196")) {
        {}
      } else {
        stryCov_9fa48("1196");
        if (stryMutAct_9fa48("1199") ? false : stryMutAct_9fa48("1198") ? true : stryMutAct_9fa48("1197") ? open : (stryCov_9fa48("1197", "1198", "1199"), !open)) return;
        open = stryMutAct_9fa48("1200") ? true : (stryCov_9fa48("1200"), false);
        const left = stryMutAct_9fa48("1201") ? (duplexInFlight.get(key) ?? 1) + 1 : (stryCov_9fa48("1201"), (stryMutAct_9fa48("1202") ? duplexInFlight.get(key) && 1 : (stryCov_9fa48("1202"), duplexInFlight.get(key) ?? 1)) - 1);
        if (stryMutAct_9fa48("1206") ? left > 0 : stryMutAct_9fa48("1205") ? left < 0 : stryMutAct_9fa48("1204") ? false : stryMutAct_9fa48("1203") ? true : (stryCov_9fa48("1203", "1204", "1205", "1206"), left <= 0)) {
          if (stryMutAct_9fa48("1207")) {
            ;
          } else {
            stryCov_9fa48("1207");
            duplexInFlight.delete(key);
          }
        } else if (stryMutAct_9fa48("1208")) {
          ;
        } else {
          stryCov_9fa48("1208");
          duplexInFlight.set(key, left);
        }
      }
    };
  }
}
async function bodyToDispatch(req: Request, source: ReadableStream<Uint8Array>, deployment: Deployment, requestId: string, uploader: Uploader): Promise<DispatchBody | Response> {
  if (stryMutAct_9fa48("1209")) {
    {}
  } else {
    stryCov_9fa48("1209");
    const {
      limits
    } = deployment;
    const {
      maxRequestBodyBytes,
      replayableBodyBytes
    } = limits;
    const declared = checkDeclaredLength(req.headers, maxRequestBodyBytes, requestId);
    if (stryMutAct_9fa48("1211") ? false : stryMutAct_9fa48("1210") ? true : (stryCov_9fa48("1210", "1211"), declared instanceof Response)) return declared;
    const {
      size
    } = declared;
    const reader = new PacedReader(source, uploadPaceOf(limits));
    let first: FirstChunks = stryMutAct_9fa48("1212") ? {} : (stryCov_9fa48("1212"), {
      chunks: stryMutAct_9fa48("1213") ? ["Stryker was here"] : (stryCov_9fa48("1213"), []),
      bytes: 0,
      ended: stryMutAct_9fa48("1214") ? true : (stryCov_9fa48("1214"), false)
    });
    let release: () => void = nothing;
    if (stryMutAct_9fa48("1217") ? limits.duplexUploads || size === undefined || size > replayableBodyBytes : stryMutAct_9fa48("1216") ? false : stryMutAct_9fa48("1215") ? true : (stryCov_9fa48("1215", "1216", "1217"), limits.duplexUploads && (stryMutAct_9fa48("1219") ? size === undefined && size > replayableBodyBytes : stryMutAct_9fa48("1218") ? true : (stryCov_9fa48("1218", "1219"), (stryMutAct_9fa48("1221") ? size !== undefined : stryMutAct_9fa48("1220") ? false : (stryCov_9fa48("1220", "1221"), size === undefined)) || (stryMutAct_9fa48("1224") ? size <= replayableBodyBytes : stryMutAct_9fa48("1223") ? size >= replayableBodyBytes : stryMutAct_9fa48("1222") ? false : (stryCov_9fa48("1222", "1223", "1224"), size > replayableBodyBytes)))))) {
      if (stryMutAct_9fa48("1225")) {
        {}
      } else {
        stryCov_9fa48("1225");
        const opened = openDuplexUpload(deployment.name, uploader.client, limits.duplexUploadsPerClient);
        if (stryMutAct_9fa48("1228") ? false : stryMutAct_9fa48("1227") ? true : stryMutAct_9fa48("1226") ? opened : (stryCov_9fa48("1226", "1227", "1228"), !opened)) {
          if (stryMutAct_9fa48("1229")) {
            {}
          } else {
            stryCov_9fa48("1229");
            await reader.cancel(stryMutAct_9fa48("1230") ? "" : (stryCov_9fa48("1230"), "too many duplex uploads"));
            return errorResponse(stryMutAct_9fa48("1231") ? "" : (stryCov_9fa48("1231"), "rate_limited"), stryMutAct_9fa48("1232") ? `` : (stryCov_9fa48("1232"), `this client has ${limits.duplexUploadsPerClient} streamed uploads to "${deployment.name}" in flight here already; retry shortly`), stryMutAct_9fa48("1233") ? {} : (stryCov_9fa48("1233"), {
              requestId,
              retryAfterSeconds: 1
            }));
          }
        }
        release = opened;
      }
    } else {
      if (stryMutAct_9fa48("1234")) {
        {}
      } else {
        stryCov_9fa48("1234");
        const hold = openHold(uploader.authenticated ? undefined : uploader.client);
        if (stryMutAct_9fa48("1237") ? typeof hold !== "string" : stryMutAct_9fa48("1236") ? false : stryMutAct_9fa48("1235") ? true : (stryCov_9fa48("1235", "1236", "1237"), typeof hold === (stryMutAct_9fa48("1238") ? "" : (stryCov_9fa48("1238"), "string")))) {
          if (stryMutAct_9fa48("1239")) {
            {}
          } else {
            stryCov_9fa48("1239");
            await reader.cancel(stryMutAct_9fa48("1240") ? "" : (stryCov_9fa48("1240"), "held too much"));
            return bodyRefusal(hold, maxRequestBodyBytes, requestId);
          }
        }
        let read: FirstChunks | BodyFailure;
        try {
          if (stryMutAct_9fa48("1241")) {
            {}
          } else {
            stryCov_9fa48("1241");
            read = await readFirst(reader, stryMutAct_9fa48("1242") ? {} : (stryCov_9fa48("1242"), {
              upTo: stryMutAct_9fa48("1243") ? Math.min(replayableBodyBytes, MIN_UPLOAD_PROOF_BYTES) : (stryCov_9fa48("1243"), Math.max(replayableBodyBytes, MIN_UPLOAD_PROOF_BYTES)),
              limit: maxRequestBodyBytes,
              size,
              hold
            }));
          }
        } finally {
          if (stryMutAct_9fa48("1244")) {
            {}
          } else {
            stryCov_9fa48("1244");
            stryMutAct_9fa48("1245") ? hold.close() : (stryCov_9fa48("1245"), hold?.close());
          }
        }
        if (stryMutAct_9fa48("1248") ? typeof read !== "string" : stryMutAct_9fa48("1247") ? false : stryMutAct_9fa48("1246") ? true : (stryCov_9fa48("1246", "1247", "1248"), typeof read === (stryMutAct_9fa48("1249") ? "" : (stryCov_9fa48("1249"), "string")))) return bodyRefusal(read, maxRequestBodyBytes, requestId);
        if (stryMutAct_9fa48("1251") ? false : stryMutAct_9fa48("1250") ? true : (stryCov_9fa48("1250", "1251"), read.ended)) return heldBody(joined(read.chunks, read.bytes));
        first = read;
      }
    }
    const paced = pacedBody(reader, maxRequestBodyBytes, first.chunks, release);
    const streamed = stryMutAct_9fa48("1252") ? {} : (stryCov_9fa48("1252"), {
      replayable: stryMutAct_9fa48("1253") ? true : (stryCov_9fa48("1253"), false),
      overLimit: paced.overLimit,
      tooSlow: paced.tooSlow,
      aborted: paced.aborted,
      release
    });
    if (stryMutAct_9fa48("1256") ? size !== undefined : stryMutAct_9fa48("1255") ? false : stryMutAct_9fa48("1254") ? true : (stryCov_9fa48("1254", "1255", "1256"), size === undefined)) return stryMutAct_9fa48("1257") ? {} : (stryCov_9fa48("1257"), {
      body: paced.body,
      ...streamed
    });
    // A sized body keeps its Content-Length on the way to the replica.
    const fixed = new FixedLengthStream(size);
    if (stryMutAct_9fa48("1258")) {
      ;
    } else {
      stryCov_9fa48("1258");
      paced.body.pipeTo(fixed.writable).catch(() => undefined);
    }
    return stryMutAct_9fa48("1259") ? {} : (stryCov_9fa48("1259"), {
      body: fixed.readable,
      ...streamed
    });
  }
}

/**
 * A request body must keep arriving: no gap longer than `idleMs` between bytes,
 * and, once `idleMs` has passed, an average of at least `minBytesPerSecond`
 * since it started (Apache mod_reqtimeout's idea). Otherwise the edge answers
 * 408 and lets go of the replica. Every body the edge reads or passes on is held
 * to it, sized or chunked, on every route: until 2026-12 a sized body was read in
 * one native call bounded only by its total time (10 s + size ÷ 1 KiB/s: 2 h 51 min
 * for 10 MiB), so a client that sent most of it and stopped held it for hours.
 */
export interface UploadPace {
  /** Longest wait for the next bytes, and the grace period before the rate counts, ms. */
  idleMs: number;
  /** Lowest average rate once the grace period is over, bytes/s; 0: no rate floor. */
  minBytesPerSecond: number;
}

/** When the next bytes must have arrived by (epoch ms), given what arrived so far. Pure. */
export function uploadDeadline(startedAt: number, lastByteAt: number, received: number, pace: UploadPace): number {
  if (stryMutAct_9fa48("1260")) {
    {}
  } else {
    stryCov_9fa48("1260");
    const idle = stryMutAct_9fa48("1261") ? lastByteAt - pace.idleMs : (stryCov_9fa48("1261"), lastByteAt + pace.idleMs);
    if (stryMutAct_9fa48("1265") ? pace.minBytesPerSecond > 0 : stryMutAct_9fa48("1264") ? pace.minBytesPerSecond < 0 : stryMutAct_9fa48("1263") ? false : stryMutAct_9fa48("1262") ? true : (stryCov_9fa48("1262", "1263", "1264", "1265"), pace.minBytesPerSecond <= 0)) return idle;
    return stryMutAct_9fa48("1266") ? Math.max(idle, startedAt + pace.idleMs + received * 1000 / pace.minBytesPerSecond) : (stryCov_9fa48("1266"), Math.min(idle, stryMutAct_9fa48("1267") ? startedAt + pace.idleMs - received * 1000 / pace.minBytesPerSecond : (stryCov_9fa48("1267"), (stryMutAct_9fa48("1268") ? startedAt - pace.idleMs : (stryCov_9fa48("1268"), startedAt + pace.idleMs)) + (stryMutAct_9fa48("1269") ? received * 1000 * pace.minBytesPerSecond : (stryCov_9fa48("1269"), (stryMutAct_9fa48("1270") ? received / 1000 : (stryCov_9fa48("1270"), received * 1000)) / pace.minBytesPerSecond)))));
  }
}
export const TIMED_OUT = Symbol("timed out");

/**
 * `p`, or TIMED_OUT once `ms` have passed (the timer is cleared either way). One
 * promise settled by whichever comes first, instead of an async function around a
 * Promise.race of two: it runs per body chunk.
 */
export function withinMs<T>(p: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  if (stryMutAct_9fa48("1271")) {
    {}
  } else {
    stryCov_9fa48("1271");
    if (stryMutAct_9fa48("1274") ? false : stryMutAct_9fa48("1273") ? true : stryMutAct_9fa48("1272") ? Number.isFinite(ms) : (stryCov_9fa48("1272", "1273", "1274"), !Number.isFinite(ms))) return p;
    return new Promise<T | typeof TIMED_OUT>((resolve, reject) => {
      if (stryMutAct_9fa48("1275")) {
        {}
      } else {
        stryCov_9fa48("1275");
        const timer = setTimeout(resolve, stryMutAct_9fa48("1276") ? Math.min(0, ms) : (stryCov_9fa48("1276"), Math.max(0, ms)), TIMED_OUT);
        if (stryMutAct_9fa48("1277")) {
          ;
        } else {
          stryCov_9fa48("1277");
          p.then(value => {
            if (stryMutAct_9fa48("1278")) {
              {}
            } else {
              stryCov_9fa48("1278");
              if (stryMutAct_9fa48("1279")) {
                ;
              } else {
                stryCov_9fa48("1279");
                clearTimeout(timer);
              }
              if (stryMutAct_9fa48("1280")) {
                ;
              } else {
                stryCov_9fa48("1280");
                resolve(value);
              }
            }
          }, (err: unknown) => {
            if (stryMutAct_9fa48("1281")) {
              {}
            } else {
              stryCov_9fa48("1281");
              if (stryMutAct_9fa48("1282")) {
                ;
              } else {
                stryCov_9fa48("1282");
                clearTimeout(timer);
              }
              if (stryMutAct_9fa48("1283")) {
                ;
              } else {
                stryCov_9fa48("1283");
                reject(err);
              }
            }
          });
        }
      }
    });
  }
}

/** How a paced read ended when it did not yield bytes: the client stopped sending, or its connection went. */
export type PaceFailure = "too_slow" | "aborted";

/**
 * A body's reader held to the pace: each read waits at most until the pace's
 * deadline. On a failure the source is cancelled, so the client's connection is
 * let go at once.
 */
export class PacedReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #pace: UploadPace;
  readonly #now: () => number;
  readonly #startedAt: number;
  #lastByteAt: number;
  /** Bytes read so far. */
  received = 0;
  constructor(source: ReadableStream<Uint8Array>, pace: UploadPace, now: () => number = Date.now) {
    if (stryMutAct_9fa48("1284")) {
      {}
    } else {
      stryCov_9fa48("1284");
      this.#reader = source.getReader();
      this.#pace = pace;
      this.#now = now;
      this.#startedAt = this.#lastByteAt = now();
    }
  }

  /** The next chunk, null at the end, or why the body stopped. */
  async read(): Promise<Uint8Array | null | PaceFailure> {
    if (stryMutAct_9fa48("1285")) {
      {}
    } else {
      stryCov_9fa48("1285");
      let read: ReadableStreamReadResult<Uint8Array> | typeof TIMED_OUT;
      try {
        if (stryMutAct_9fa48("1286")) {
          {}
        } else {
          stryCov_9fa48("1286");
          read = await withinMs(this.#reader.read(), stryMutAct_9fa48("1287") ? uploadDeadline(this.#startedAt, this.#lastByteAt, this.received, this.#pace) + this.#now() : (stryCov_9fa48("1287"), uploadDeadline(this.#startedAt, this.#lastByteAt, this.received, this.#pace) - this.#now()));
        }
      } catch {
        if (stryMutAct_9fa48("1288")) {
          {}
        } else {
          stryCov_9fa48("1288");
          // The client's connection went away mid-body ("Network connection lost."): its fault, not ours.
          return stryMutAct_9fa48("1289") ? "" : (stryCov_9fa48("1289"), "aborted");
        }
      }
      if (stryMutAct_9fa48("1292") ? read !== TIMED_OUT : stryMutAct_9fa48("1291") ? false : stryMutAct_9fa48("1290") ? true : (stryCov_9fa48("1290", "1291", "1292"), read === TIMED_OUT)) {
        if (stryMutAct_9fa48("1293")) {
          {}
        } else {
          stryCov_9fa48("1293");
          await this.cancel(stryMutAct_9fa48("1294") ? "" : (stryCov_9fa48("1294"), "too slow"));
          return stryMutAct_9fa48("1295") ? "" : (stryCov_9fa48("1295"), "too_slow");
        }
      }
      if (stryMutAct_9fa48("1297") ? false : stryMutAct_9fa48("1296") ? true : (stryCov_9fa48("1296", "1297"), read.done)) return null;
      stryMutAct_9fa48("1298") ? this.received -= read.value.byteLength : (stryCov_9fa48("1298"), this.received += read.value.byteLength);
      if (stryMutAct_9fa48("1302") ? read.value.byteLength <= 0 : stryMutAct_9fa48("1301") ? read.value.byteLength >= 0 : stryMutAct_9fa48("1300") ? false : stryMutAct_9fa48("1299") ? true : (stryCov_9fa48("1299", "1300", "1301", "1302"), read.value.byteLength > 0)) this.#lastByteAt = this.#now();
      return read.value;
    }
  }
  async cancel(reason: string): Promise<void> {
    if (stryMutAct_9fa48("1303")) {
      {}
    } else {
      stryCov_9fa48("1303");
      await this.#reader.cancel(reason).catch(() => undefined);
    }
  }
}

/** What a paced body stream reports after the fact. */
export interface PacedBody {
  body: ReadableStream<Uint8Array>;
  /** The client stopped sending (too slow): the stream was errored and its source cancelled. */
  tooSlow(): boolean;
  /** More than `limit` bytes arrived: the stream was errored. */
  overLimit(): boolean;
  /** The client's connection went away mid-body: the stream was errored. */
  aborted(): boolean;
}

/**
 * The rest of `reader`'s body passed on chunk by chunk under the pace, after
 * `first` (chunks already read from it), and at most `limit` bytes in all.
 * Either violation errors the stream (so the fetch sending it to a replica fails
 * and the replica's connection closes) and is reported by the getters.
 * `settled` is called once, when the stream ends, fails or is cancelled.
 */
export function pacedBody(reader: PacedReader, limit: number, first: readonly Uint8Array[] = stryMutAct_9fa48("1304") ? ["Stryker was here"] : (stryCov_9fa48("1304"), []), settled?: () => void): PacedBody {
  if (stryMutAct_9fa48("1305")) {
    {}
  } else {
    stryCov_9fa48("1305");
    let slow = stryMutAct_9fa48("1306") ? true : (stryCov_9fa48("1306"), false);
    let over = stryMutAct_9fa48("1307") ? true : (stryCov_9fa48("1307"), false);
    let gone = stryMutAct_9fa48("1308") ? true : (stryCov_9fa48("1308"), false);
    let at = 0;
    const body = new ReadableStream<Uint8Array>(stryMutAct_9fa48("1309") ? {} : (stryCov_9fa48("1309"), {
      async pull(controller) {
        if (stryMutAct_9fa48("1310")) {
          {}
        } else {
          stryCov_9fa48("1310");
          if (stryMutAct_9fa48("1314") ? at >= first.length : stryMutAct_9fa48("1313") ? at <= first.length : stryMutAct_9fa48("1312") ? false : stryMutAct_9fa48("1311") ? true : (stryCov_9fa48("1311", "1312", "1313", "1314"), at < first.length)) {
            if (stryMutAct_9fa48("1315")) {
              {}
            } else {
              stryCov_9fa48("1315");
              controller.enqueue(first[stryMutAct_9fa48("1317") ? at-- : (stryCov_9fa48("1317"), at++)]!);
              return;
            }
          }
          const read = await reader.read();
          if (stryMutAct_9fa48("1320") ? read !== null : stryMutAct_9fa48("1319") ? false : stryMutAct_9fa48("1318") ? true : (stryCov_9fa48("1318", "1319", "1320"), read === null)) {
            if (stryMutAct_9fa48("1321")) {
              {}
            } else {
              stryCov_9fa48("1321");
              if (stryMutAct_9fa48("1322")) {
                ;
              } else {
                stryCov_9fa48("1322");
                controller.close();
              }
              stryMutAct_9fa48("1323") ? settled() : (stryCov_9fa48("1323"), settled?.());
              return;
            }
          }
          if (stryMutAct_9fa48("1326") ? typeof read !== "string" : stryMutAct_9fa48("1325") ? false : stryMutAct_9fa48("1324") ? true : (stryCov_9fa48("1324", "1325", "1326"), typeof read === (stryMutAct_9fa48("1327") ? "" : (stryCov_9fa48("1327"), "string")))) {
            if (stryMutAct_9fa48("1328")) {
              {}
            } else {
              stryCov_9fa48("1328");
              slow = stryMutAct_9fa48("1331") ? read !== "too_slow" : stryMutAct_9fa48("1330") ? false : stryMutAct_9fa48("1329") ? true : (stryCov_9fa48("1329", "1330", "1331"), read === (stryMutAct_9fa48("1332") ? "" : (stryCov_9fa48("1332"), "too_slow")));
              gone = stryMutAct_9fa48("1335") ? read !== "aborted" : stryMutAct_9fa48("1334") ? false : stryMutAct_9fa48("1333") ? true : (stryCov_9fa48("1333", "1334", "1335"), read === (stryMutAct_9fa48("1336") ? "" : (stryCov_9fa48("1336"), "aborted")));
              controller.error(new Error(slow ? stryMutAct_9fa48("1338") ? "" : (stryCov_9fa48("1338"), "request body arrived too slowly") : stryMutAct_9fa48("1339") ? "" : (stryCov_9fa48("1339"), "the client's connection was lost")));
              stryMutAct_9fa48("1340") ? settled() : (stryCov_9fa48("1340"), settled?.());
              return;
            }
          }
          if (stryMutAct_9fa48("1344") ? reader.received <= limit : stryMutAct_9fa48("1343") ? reader.received >= limit : stryMutAct_9fa48("1342") ? false : stryMutAct_9fa48("1341") ? true : (stryCov_9fa48("1341", "1342", "1343", "1344"), reader.received > limit)) {
            if (stryMutAct_9fa48("1345")) {
              {}
            } else {
              stryCov_9fa48("1345");
              over = stryMutAct_9fa48("1346") ? false : (stryCov_9fa48("1346"), true);
              controller.error(new Error(stryMutAct_9fa48("1348") ? "" : (stryCov_9fa48("1348"), "request body too large")));
              stryMutAct_9fa48("1349") ? settled() : (stryCov_9fa48("1349"), settled?.());
              await reader.cancel(stryMutAct_9fa48("1350") ? "" : (stryCov_9fa48("1350"), "too large"));
              return;
            }
          }
          if (stryMutAct_9fa48("1351")) {
            ;
          } else {
            stryCov_9fa48("1351");
            controller.enqueue(read);
          }
        }
      },
      async cancel(reason) {
        if (stryMutAct_9fa48("1352")) {
          {}
        } else {
          stryCov_9fa48("1352");
          stryMutAct_9fa48("1353") ? settled() : (stryCov_9fa48("1353"), settled?.());
          await reader.cancel(String(reason));
        }
      }
    }));
    return stryMutAct_9fa48("1354") ? {} : (stryCov_9fa48("1354"), {
      body,
      tooSlow: stryMutAct_9fa48("1355") ? () => undefined : (stryCov_9fa48("1355"), () => slow),
      overLimit: stryMutAct_9fa48("1356") ? () => undefined : (stryCov_9fa48("1356"), () => over),
      aborted: stryMutAct_9fa48("1357") ? () => undefined : (stryCov_9fa48("1357"), () => gone)
    });
  }
}