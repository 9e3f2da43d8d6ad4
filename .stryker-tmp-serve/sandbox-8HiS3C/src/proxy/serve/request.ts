/**
 * The request stage: the client's request as the path reads it, before any
 * replica is considered. Its target (the one normalised path, or a 400), the
 * deployment route it falls under, its id, its headers (their size, what a
 * dispatch passes on, what the client gets back) and its keys (model, session).
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
import { EDGE_ONLY_HEADERS, Header, MODEL_ID, PROTOCOL_HEADER_PREFIX, isEdgeOnlyHeader, isReplicaOperationalPath, operationalPathOf } from "../../protocol/index.ts";
import { HEX_BYTE } from "../../protocol/hex.ts";

/**
 * The one path a proxied request is routed by and forwarded with, and the
 * replica URL it is sent to. Pure.
 *
 * Why this exists: routing once matched the decoded, un-normalised path
 * (`/llm/%2e%2e/x` starts with `/llm`) while dispatch rebuilt the path with
 * `new URL()`, which resolves the dot segment, and the target was a string
 * concatenation. `/llm/%2e%2e/aaa@host:port/secret` then became
 * `http://<replica>@host:port/secret`: an open proxy. Here the path is
 * normalised once (RFC 3986 §6.2.2: percent-encoded unreserved characters
 * decoded), a path with a dot segment in any spelling is refused outright (no
 * client that follows RFC 3986 sends one: it removes them before sending), and
 * the dispatch URL is checked to keep the replica's origin and base path.
 */
/** What the edge app's first middleware (app.ts) leaves on the context for every route. */
export type PathVariables = {
  target: {
    path: string;
    search: string;
  };
};
export type RequestTarget = {
  ok: true;
  path: string;
  search: string;
} | {
  ok: false;
  message: string;
};
const HEX = stryMutAct_9fa48("2745") ? /^[^0-9A-Fa-f]{2}$/ : stryMutAct_9fa48("2744") ? /^[0-9A-Fa-f]$/ : stryMutAct_9fa48("2743") ? /^[0-9A-Fa-f]{2}/ : stryMutAct_9fa48("2742") ? /[0-9A-Fa-f]{2}$/ : (stryCov_9fa48("2742", "2743", "2744", "2745"), /^[0-9A-Fa-f]{2}$/);
const UNRESERVED = stryMutAct_9fa48("2748") ? /^[^A-Za-z0-9\-._~]$/ : stryMutAct_9fa48("2747") ? /^[A-Za-z0-9\-._~]/ : stryMutAct_9fa48("2746") ? /[A-Za-z0-9\-._~]$/ : (stryCov_9fa48("2746", "2747", "2748"), /^[A-Za-z0-9\-._~]$/);

/**
 * The normalised origin-form path and the raw query of a request URL (what
 * `Request.url` holds: absolute, `scheme://authority/path?query`). Refused:
 * a malformed percent escape, a backslash, and any dot segment (`.` or `..`)
 * however it is spelled (`%2e`, `.%2E`, `..;x`) and whatever separates it (`/`, or
 * an encoded `%2F` or `%5C` that a replica might decode into a separator).
 */
export function requestTarget(url: string): RequestTarget {
  if (stryMutAct_9fa48("2749")) {
    {}
  } else {
    stryCov_9fa48("2749");
    const scheme = url.indexOf(stryMutAct_9fa48("2750") ? "" : (stryCov_9fa48("2750"), "://"));
    const slash = (stryMutAct_9fa48("2754") ? scheme >= 0 : stryMutAct_9fa48("2753") ? scheme <= 0 : stryMutAct_9fa48("2752") ? false : stryMutAct_9fa48("2751") ? true : (stryCov_9fa48("2751", "2752", "2753", "2754"), scheme < 0)) ? stryMutAct_9fa48("2755") ? +1 : (stryCov_9fa48("2755"), -1) : url.indexOf(stryMutAct_9fa48("2756") ? "" : (stryCov_9fa48("2756"), "/"), stryMutAct_9fa48("2757") ? scheme - 3 : (stryCov_9fa48("2757"), scheme + 3));
    if (stryMutAct_9fa48("2761") ? slash >= 0 : stryMutAct_9fa48("2760") ? slash <= 0 : stryMutAct_9fa48("2759") ? false : stryMutAct_9fa48("2758") ? true : (stryCov_9fa48("2758", "2759", "2760", "2761"), slash < 0)) return stryMutAct_9fa48("2762") ? {} : (stryCov_9fa48("2762"), {
      ok: stryMutAct_9fa48("2763") ? false : (stryCov_9fa48("2763"), true),
      path: stryMutAct_9fa48("2764") ? "" : (stryCov_9fa48("2764"), "/"),
      search: stryMutAct_9fa48("2765") ? "Stryker was here!" : (stryCov_9fa48("2765"), "")
    });
    let end = url.length;
    const hash = url.indexOf(stryMutAct_9fa48("2766") ? "" : (stryCov_9fa48("2766"), "#"), slash);
    if (stryMutAct_9fa48("2770") ? hash < 0 : stryMutAct_9fa48("2769") ? hash > 0 : stryMutAct_9fa48("2768") ? false : stryMutAct_9fa48("2767") ? true : (stryCov_9fa48("2767", "2768", "2769", "2770"), hash >= 0)) end = hash;
    const q = url.indexOf(stryMutAct_9fa48("2771") ? "" : (stryCov_9fa48("2771"), "?"), slash);
    const queryAt = (stryMutAct_9fa48("2774") ? q >= 0 || q < end : stryMutAct_9fa48("2773") ? false : stryMutAct_9fa48("2772") ? true : (stryCov_9fa48("2772", "2773", "2774"), (stryMutAct_9fa48("2777") ? q < 0 : stryMutAct_9fa48("2776") ? q > 0 : stryMutAct_9fa48("2775") ? true : (stryCov_9fa48("2775", "2776", "2777"), q >= 0)) && (stryMutAct_9fa48("2780") ? q >= end : stryMutAct_9fa48("2779") ? q <= end : stryMutAct_9fa48("2778") ? true : (stryCov_9fa48("2778", "2779", "2780"), q < end)))) ? q : end;
    const raw = stryMutAct_9fa48("2781") ? url : (stryCov_9fa48("2781"), url.slice(slash, queryAt));
    const search = stryMutAct_9fa48("2782") ? url : (stryCov_9fa48("2782"), url.slice(queryAt, end));
    const path = decodeUnreserved(raw);
    if (stryMutAct_9fa48("2785") ? path !== null : stryMutAct_9fa48("2784") ? false : stryMutAct_9fa48("2783") ? true : (stryCov_9fa48("2783", "2784", "2785"), path === null)) return stryMutAct_9fa48("2786") ? {} : (stryCov_9fa48("2786"), {
      ok: stryMutAct_9fa48("2787") ? true : (stryCov_9fa48("2787"), false),
      message: stryMutAct_9fa48("2788") ? "" : (stryCov_9fa48("2788"), "the request path has a malformed percent escape")
    });
    if (stryMutAct_9fa48("2790") ? false : stryMutAct_9fa48("2789") ? true : (stryCov_9fa48("2789", "2790"), path.includes(stryMutAct_9fa48("2791") ? "" : (stryCov_9fa48("2791"), "\\")))) return stryMutAct_9fa48("2792") ? {} : (stryCov_9fa48("2792"), {
      ok: stryMutAct_9fa48("2793") ? true : (stryCov_9fa48("2793"), false),
      message: stryMutAct_9fa48("2794") ? "" : (stryCov_9fa48("2794"), "the request path contains a backslash")
    });
    if (stryMutAct_9fa48("2796") ? false : stryMutAct_9fa48("2795") ? true : (stryCov_9fa48("2795", "2796"), hasDotSegment(path))) return stryMutAct_9fa48("2797") ? {} : (stryCov_9fa48("2797"), {
      ok: stryMutAct_9fa48("2798") ? true : (stryCov_9fa48("2798"), false),
      message: stryMutAct_9fa48("2799") ? "" : (stryCov_9fa48("2799"), "the request path has a dot segment ('.' or '..'); send the path resolved")
    });
    return stryMutAct_9fa48("2800") ? {} : (stryCov_9fa48("2800"), {
      ok: stryMutAct_9fa48("2801") ? false : (stryCov_9fa48("2801"), true),
      path,
      search: (stryMutAct_9fa48("2804") ? search !== "?" : stryMutAct_9fa48("2803") ? false : stryMutAct_9fa48("2802") ? true : (stryCov_9fa48("2802", "2803", "2804"), search === (stryMutAct_9fa48("2805") ? "" : (stryCov_9fa48("2805"), "?")))) ? stryMutAct_9fa48("2806") ? "Stryker was here!" : (stryCov_9fa48("2806"), "") : search
    });
  }
}

/** Decodes %XX of unreserved characters (and only those); null on a malformed escape. */
function decodeUnreserved(raw: string): string | null {
  if (stryMutAct_9fa48("2807")) {
    {}
  } else {
    stryCov_9fa48("2807");
    if (stryMutAct_9fa48("2810") ? false : stryMutAct_9fa48("2809") ? true : stryMutAct_9fa48("2808") ? raw.includes("%") : (stryCov_9fa48("2808", "2809", "2810"), !raw.includes(stryMutAct_9fa48("2811") ? "" : (stryCov_9fa48("2811"), "%")))) return raw;
    let out = stryMutAct_9fa48("2812") ? "Stryker was here!" : (stryCov_9fa48("2812"), "");
    let from = 0;
    for (let i = raw.indexOf(stryMutAct_9fa48("2813") ? "" : (stryCov_9fa48("2813"), "%")); stryMutAct_9fa48("2816") ? i < 0 : stryMutAct_9fa48("2815") ? i > 0 : stryMutAct_9fa48("2814") ? false : (stryCov_9fa48("2814", "2815", "2816"), i >= 0); i = raw.indexOf(stryMutAct_9fa48("2817") ? "" : (stryCov_9fa48("2817"), "%"), stryMutAct_9fa48("2818") ? i - 1 : (stryCov_9fa48("2818"), i + 1))) {
      if (stryMutAct_9fa48("2819")) {
        {}
      } else {
        stryCov_9fa48("2819");
        const hex = stryMutAct_9fa48("2820") ? raw : (stryCov_9fa48("2820"), raw.slice(stryMutAct_9fa48("2821") ? i - 1 : (stryCov_9fa48("2821"), i + 1), stryMutAct_9fa48("2822") ? i - 3 : (stryCov_9fa48("2822"), i + 3)));
        if (stryMutAct_9fa48("2825") ? false : stryMutAct_9fa48("2824") ? true : stryMutAct_9fa48("2823") ? HEX.test(hex) : (stryCov_9fa48("2823", "2824", "2825"), !HEX.test(hex))) return null;
        const ch = String.fromCharCode(parseInt(hex, 16));
        if (stryMutAct_9fa48("2828") ? false : stryMutAct_9fa48("2827") ? true : stryMutAct_9fa48("2826") ? UNRESERVED.test(ch) : (stryCov_9fa48("2826", "2827", "2828"), !UNRESERVED.test(ch))) continue;
        stryMutAct_9fa48("2829") ? out -= raw.slice(from, i) + ch : (stryCov_9fa48("2829"), out += stryMutAct_9fa48("2830") ? raw.slice(from, i) - ch : (stryCov_9fa48("2830"), (stryMutAct_9fa48("2831") ? raw : (stryCov_9fa48("2831"), raw.slice(from, i))) + ch));
        from = stryMutAct_9fa48("2832") ? i - 3 : (stryCov_9fa48("2832"), i + 3);
        stryMutAct_9fa48("2833") ? i -= 2 : (stryCov_9fa48("2833"), i += 2);
      }
    }
    return stryMutAct_9fa48("2834") ? out - raw.slice(from) : (stryCov_9fa48("2834"), out + (stryMutAct_9fa48("2835") ? raw : (stryCov_9fa48("2835"), raw.slice(from))));
  }
}

/**
 * Whether any segment is "." or "..", splitting on "/" and on encoded slashes and
 * backslashes too, and ignoring a `;` path parameter (raw or encoded): servlet
 * containers read `/..;/x` as `/../x`.
 */
function hasDotSegment(path: string): boolean {
  if (stryMutAct_9fa48("2836")) {
    {}
  } else {
    stryCov_9fa48("2836");
    if (stryMutAct_9fa48("2839") ? false : stryMutAct_9fa48("2838") ? true : stryMutAct_9fa48("2837") ? path.includes(".") : (stryCov_9fa48("2837", "2838", "2839"), !path.includes(stryMutAct_9fa48("2840") ? "" : (stryCov_9fa48("2840"), ".")))) return stryMutAct_9fa48("2841") ? true : (stryCov_9fa48("2841"), false);
    for (const segment of path.split(stryMutAct_9fa48("2843") ? /\/|%2[Ff]|%5[^Cc]/ : stryMutAct_9fa48("2842") ? /\/|%2[^Ff]|%5[Cc]/ : (stryCov_9fa48("2842", "2843"), /\/|%2[Ff]|%5[Cc]/))) {
      if (stryMutAct_9fa48("2844")) {
        {}
      } else {
        stryCov_9fa48("2844");
        const bare = segment.split(stryMutAct_9fa48("2845") ? /;|%3[^Bb]/ : (stryCov_9fa48("2845"), /;|%3[Bb]/), 1)[0];
        if (stryMutAct_9fa48("2848") ? bare === "." && bare === ".." : stryMutAct_9fa48("2847") ? false : stryMutAct_9fa48("2846") ? true : (stryCov_9fa48("2846", "2847", "2848"), (stryMutAct_9fa48("2850") ? bare !== "." : stryMutAct_9fa48("2849") ? false : (stryCov_9fa48("2849", "2850"), bare === (stryMutAct_9fa48("2851") ? "" : (stryCov_9fa48("2851"), ".")))) || (stryMutAct_9fa48("2853") ? bare !== ".." : stryMutAct_9fa48("2852") ? false : (stryCov_9fa48("2852", "2853"), bare === (stryMutAct_9fa48("2854") ? "" : (stryCov_9fa48("2854"), "..")))))) return stryMutAct_9fa48("2855") ? false : (stryCov_9fa48("2855"), true);
      }
    }
    return stryMutAct_9fa48("2856") ? true : (stryCov_9fa48("2856"), false);
  }
}

/**
 * The path as the edge app sees it when a user's Hono app mounts it under
 * `mount` (`userApp.route("/ml", app)`): without that prefix, so route prefixes
 * and dispatch are the app's own. `mount` is "/" (or "") when not mounted.
 * Hono only runs the app's routes for paths under the mount, so a path
 * outside it is a bug and is returned as it is.
 */
export function unmountedPath(path: string, mount: string): string {
  if (stryMutAct_9fa48("2857")) {
    {}
  } else {
    stryCov_9fa48("2857");
    const base = mount.replace(stryMutAct_9fa48("2859") ? /\/$/ : stryMutAct_9fa48("2858") ? /\/+/ : (stryCov_9fa48("2858", "2859"), /\/+$/), stryMutAct_9fa48("2860") ? "Stryker was here!" : (stryCov_9fa48("2860"), ""));
    if (stryMutAct_9fa48("2863") ? base !== "" : stryMutAct_9fa48("2862") ? false : stryMutAct_9fa48("2861") ? true : (stryCov_9fa48("2861", "2862", "2863"), base === (stryMutAct_9fa48("2864") ? "Stryker was here!" : (stryCov_9fa48("2864"), "")))) return path;
    if (stryMutAct_9fa48("2867") ? path !== base : stryMutAct_9fa48("2866") ? false : stryMutAct_9fa48("2865") ? true : (stryCov_9fa48("2865", "2866", "2867"), path === base)) return stryMutAct_9fa48("2868") ? "" : (stryCov_9fa48("2868"), "/");
    return (stryMutAct_9fa48("2869") ? path.endsWith(`${base}/`) : (stryCov_9fa48("2869"), path.startsWith(stryMutAct_9fa48("2870") ? `` : (stryCov_9fa48("2870"), `${base}/`)))) ? stryMutAct_9fa48("2871") ? path : (stryCov_9fa48("2871"), path.slice(base.length)) : path;
  }
}

/** Parsed replica URLs (one per registered replica): origin and base path, so dispatch does not parse them per request. */
const replicaBases = new Map<string, {
  origin: string;
  base: string;
}>();
const REPLICA_BASES_MAX = 4096;
function replicaBase(replicaUrl: string): {
  origin: string;
  base: string;
} | null {
  if (stryMutAct_9fa48("2872")) {
    {}
  } else {
    stryCov_9fa48("2872");
    let known = replicaBases.get(replicaUrl);
    if (stryMutAct_9fa48("2874") ? false : stryMutAct_9fa48("2873") ? true : (stryCov_9fa48("2873", "2874"), known)) return known;
    let u: URL;
    try {
      if (stryMutAct_9fa48("2875")) {
        {}
      } else {
        stryCov_9fa48("2875");
        u = new URL(replicaUrl);
      }
    } catch {
      if (stryMutAct_9fa48("2876")) {
        {}
      } else {
        stryCov_9fa48("2876");
        return null;
      }
    }
    known = stryMutAct_9fa48("2877") ? {} : (stryCov_9fa48("2877"), {
      origin: u.origin,
      base: u.pathname.replace(stryMutAct_9fa48("2879") ? /\/$/ : stryMutAct_9fa48("2878") ? /\/+/ : (stryCov_9fa48("2878", "2879"), /\/+$/), stryMutAct_9fa48("2880") ? "Stryker was here!" : (stryCov_9fa48("2880"), ""))
    });
    if (stryMutAct_9fa48("2884") ? replicaBases.size < REPLICA_BASES_MAX : stryMutAct_9fa48("2883") ? replicaBases.size > REPLICA_BASES_MAX : stryMutAct_9fa48("2882") ? false : stryMutAct_9fa48("2881") ? true : (stryCov_9fa48("2881", "2882", "2883", "2884"), replicaBases.size >= REPLICA_BASES_MAX)) if (stryMutAct_9fa48("2885")) {
      ;
    } else {
      stryCov_9fa48("2885");
      replicaBases.clear();
    }
    if (stryMutAct_9fa48("2886")) {
      ;
    } else {
      stryCov_9fa48("2886");
      replicaBases.set(replicaUrl, known);
    }
    return known;
  }
}

/**
 * The URL a dispatch goes to: the replica's URL with `path` (normalised, starting
 * with "/") and `search` appended. Null when the result would leave the replica's
 * origin or its base path; with a path from requestTarget that cannot happen, so
 * null means a bug, and the request is refused rather than sent anywhere else.
 */
export function dispatchUrl(replicaUrl: string, path: string, search: string): URL | null {
  if (stryMutAct_9fa48("2887")) {
    {}
  } else {
    stryCov_9fa48("2887");
    const replica = replicaBase(replicaUrl);
    if (stryMutAct_9fa48("2890") ? !replica && !path.startsWith("/") : stryMutAct_9fa48("2889") ? false : stryMutAct_9fa48("2888") ? true : (stryCov_9fa48("2888", "2889", "2890"), (stryMutAct_9fa48("2891") ? replica : (stryCov_9fa48("2891"), !replica)) || (stryMutAct_9fa48("2892") ? path.startsWith("/") : (stryCov_9fa48("2892"), !(stryMutAct_9fa48("2893") ? path.endsWith("/") : (stryCov_9fa48("2893"), path.startsWith(stryMutAct_9fa48("2894") ? "" : (stryCov_9fa48("2894"), "/")))))))) return null;
    let u: URL;
    try {
      if (stryMutAct_9fa48("2895")) {
        {}
      } else {
        stryCov_9fa48("2895");
        u = new URL(stryMutAct_9fa48("2896") ? `` : (stryCov_9fa48("2896"), `${replica.origin}${replica.base}${path}${search}`));
      }
    } catch {
      if (stryMutAct_9fa48("2897")) {
        {}
      } else {
        stryCov_9fa48("2897");
        return null;
      }
    }
    if (stryMutAct_9fa48("2900") ? u.origin === replica.origin : stryMutAct_9fa48("2899") ? false : stryMutAct_9fa48("2898") ? true : (stryCov_9fa48("2898", "2899", "2900"), u.origin !== replica.origin)) return null;
    if (stryMutAct_9fa48("2903") ? replica.base !== "" && u.pathname !== replica.base || !u.pathname.startsWith(`${replica.base}/`) : stryMutAct_9fa48("2902") ? false : stryMutAct_9fa48("2901") ? true : (stryCov_9fa48("2901", "2902", "2903"), (stryMutAct_9fa48("2905") ? replica.base !== "" || u.pathname !== replica.base : stryMutAct_9fa48("2904") ? true : (stryCov_9fa48("2904", "2905"), (stryMutAct_9fa48("2907") ? replica.base === "" : stryMutAct_9fa48("2906") ? true : (stryCov_9fa48("2906", "2907"), replica.base !== (stryMutAct_9fa48("2908") ? "Stryker was here!" : (stryCov_9fa48("2908"), "")))) && (stryMutAct_9fa48("2910") ? u.pathname === replica.base : stryMutAct_9fa48("2909") ? true : (stryCov_9fa48("2909", "2910"), u.pathname !== replica.base)))) && (stryMutAct_9fa48("2911") ? u.pathname.startsWith(`${replica.base}/`) : (stryCov_9fa48("2911"), !(stryMutAct_9fa48("2912") ? u.pathname.endsWith(`${replica.base}/`) : (stryCov_9fa48("2912"), u.pathname.startsWith(stryMutAct_9fa48("2913") ? `` : (stryCov_9fa48("2913"), `${replica.base}/`)))))))) return null;
    return u;
  }
}

/** A checked dispatch URL as fetch() is given it, and the request target a dispatch signature covers (path and query as the replica receives them). */
export interface DispatchTarget {
  href: string;
  target: string;
}

/**
 * dispatchUrl's answers per replica URL, then per path and query: a path sent
 * again (the usual case) costs no URL parse and no getter calls. The key is the
 * path and query as one string, which is all the URL is built from. At most
 * DISPATCH_TARGETS_MAX answers in all (then forgotten at once, like replicaBases);
 * refusals are not kept (they are bugs, logged each time).
 */
const dispatchTargets = new Map<string, Map<string, DispatchTarget>>();
const DISPATCH_TARGETS_MAX = 4096;
let dispatchTargetCount = 0;

/** dispatchUrl's URL as a DispatchTarget, from memory when the same replica URL, path and query were checked before. */
export function dispatchTarget(replicaUrl: string, path: string, search: string): DispatchTarget | null {
  if (stryMutAct_9fa48("2914")) {
    {}
  } else {
    stryCov_9fa48("2914");
    const key = stryMutAct_9fa48("2915") ? path - search : (stryCov_9fa48("2915"), path + search);
    let known = dispatchTargets.get(replicaUrl);
    const hit = stryMutAct_9fa48("2916") ? known.get(key) : (stryCov_9fa48("2916"), known?.get(key));
    if (stryMutAct_9fa48("2918") ? false : stryMutAct_9fa48("2917") ? true : (stryCov_9fa48("2917", "2918"), hit)) return hit;
    const u = dispatchUrl(replicaUrl, path, search);
    if (stryMutAct_9fa48("2921") ? false : stryMutAct_9fa48("2920") ? true : stryMutAct_9fa48("2919") ? u : (stryCov_9fa48("2919", "2920", "2921"), !u)) return null;
    const entry = stryMutAct_9fa48("2922") ? {} : (stryCov_9fa48("2922"), {
      href: u.href,
      target: stryMutAct_9fa48("2923") ? u.pathname - u.search : (stryCov_9fa48("2923"), u.pathname + u.search)
    });
    if (stryMutAct_9fa48("2927") ? dispatchTargetCount < DISPATCH_TARGETS_MAX : stryMutAct_9fa48("2926") ? dispatchTargetCount > DISPATCH_TARGETS_MAX : stryMutAct_9fa48("2925") ? false : stryMutAct_9fa48("2924") ? true : (stryCov_9fa48("2924", "2925", "2926", "2927"), dispatchTargetCount >= DISPATCH_TARGETS_MAX)) {
      if (stryMutAct_9fa48("2928")) {
        {}
      } else {
        stryCov_9fa48("2928");
        if (stryMutAct_9fa48("2929")) {
          ;
        } else {
          stryCov_9fa48("2929");
          dispatchTargets.clear();
        }
        dispatchTargetCount = 0;
        known = undefined;
      }
    }
    if (stryMutAct_9fa48("2932") ? false : stryMutAct_9fa48("2931") ? true : stryMutAct_9fa48("2930") ? known : (stryCov_9fa48("2930", "2931", "2932"), !known)) if (stryMutAct_9fa48("2933")) {
      ;
    } else {
      stryCov_9fa48("2933");
      dispatchTargets.set(replicaUrl, known = new Map());
    }
    if (stryMutAct_9fa48("2934")) {
      ;
    } else {
      stryCov_9fa48("2934");
      known.set(key, entry);
    }
    stryMutAct_9fa48("2935") ? dispatchTargetCount-- : (stryCov_9fa48("2935"), dispatchTargetCount++);
    return entry;
  }
}

/** Longest-prefix routing from a request path to a deployment. Pure. */
export interface Routed<T> {
  target: T;
  prefix: string;
}
export class RouteTable<T> {
  readonly #entries: {
    prefix: string;
    target: T;
  }[];
  constructor(entries: Iterable<{
    prefix: string;
    target: T;
  }>) {
    if (stryMutAct_9fa48("2936")) {
      {}
    } else {
      stryCov_9fa48("2936");
      this.#entries = stryMutAct_9fa48("2937") ? [...entries] : (stryCov_9fa48("2937"), (stryMutAct_9fa48("2938") ? [] : (stryCov_9fa48("2938"), [...entries])).sort(stryMutAct_9fa48("2939") ? () => undefined : (stryCov_9fa48("2939"), (a, b) => stryMutAct_9fa48("2940") ? b.prefix.length + a.prefix.length : (stryCov_9fa48("2940"), b.prefix.length - a.prefix.length))));
    }
  }

  /** Matches whole path segments: "/hello" takes "/hello" and "/hello/x", not "/helloworld". */
  match(path: string): Routed<T> | undefined {
    if (stryMutAct_9fa48("2941")) {
      {}
    } else {
      stryCov_9fa48("2941");
      for (const e of this.#entries) {
        if (stryMutAct_9fa48("2942")) {
          {}
        } else {
          stryCov_9fa48("2942");
          if (stryMutAct_9fa48("2945") ? (e.prefix === "/" || path === e.prefix) && path.startsWith(e.prefix + "/") : stryMutAct_9fa48("2944") ? false : stryMutAct_9fa48("2943") ? true : (stryCov_9fa48("2943", "2944", "2945"), (stryMutAct_9fa48("2947") ? e.prefix === "/" && path === e.prefix : stryMutAct_9fa48("2946") ? false : (stryCov_9fa48("2946", "2947"), (stryMutAct_9fa48("2949") ? e.prefix !== "/" : stryMutAct_9fa48("2948") ? false : (stryCov_9fa48("2948", "2949"), e.prefix === (stryMutAct_9fa48("2950") ? "" : (stryCov_9fa48("2950"), "/")))) || (stryMutAct_9fa48("2952") ? path !== e.prefix : stryMutAct_9fa48("2951") ? false : (stryCov_9fa48("2951", "2952"), path === e.prefix)))) || (stryMutAct_9fa48("2953") ? path.endsWith(e.prefix + "/") : (stryCov_9fa48("2953"), path.startsWith(e.prefix + (stryMutAct_9fa48("2954") ? "" : (stryCov_9fa48("2954"), "/"))))))) return e;
        }
      }
      return undefined;
    }
  }
  list(): {
    prefix: string;
    target: T;
  }[] {
    if (stryMutAct_9fa48("2955")) {
      {}
    } else {
      stryCov_9fa48("2955");
      return stryMutAct_9fa48("2956") ? [] : (stryCov_9fa48("2956"), [...this.#entries]);
    }
  }
}

/** Path forwarded to the replica when the deployment strips its prefix. */
export function stripRoutePrefix(path: string, prefix: string): string {
  if (stryMutAct_9fa48("2957")) {
    {}
  } else {
    stryCov_9fa48("2957");
    if (stryMutAct_9fa48("2960") ? prefix !== "/" : stryMutAct_9fa48("2959") ? false : stryMutAct_9fa48("2958") ? true : (stryCov_9fa48("2958", "2959", "2960"), prefix === (stryMutAct_9fa48("2961") ? "" : (stryCov_9fa48("2961"), "/")))) return path;
    const rest = stryMutAct_9fa48("2962") ? path : (stryCov_9fa48("2962"), path.slice(prefix.length));
    return (stryMutAct_9fa48("2965") ? rest !== "" : stryMutAct_9fa48("2964") ? false : stryMutAct_9fa48("2963") ? true : (stryCov_9fa48("2963", "2964", "2965"), rest === (stryMutAct_9fa48("2966") ? "Stryker was here!" : (stryCov_9fa48("2966"), "")))) ? stryMutAct_9fa48("2967") ? "" : (stryCov_9fa48("2967"), "/") : rest;
  }
}

/**
 * What the proxy reads from a request to route it beyond its path: the
 * multiplexed model and the session. Validated here, at the boundary; pure.
 */
/** Session ids: 1-256 visible ASCII characters (they travel in headers and name bindings). */
export const SESSION_ID = stryMutAct_9fa48("2971") ? /^[^\x21-\x7e]{1,256}$/ : stryMutAct_9fa48("2970") ? /^[\x21-\x7e]$/ : stryMutAct_9fa48("2969") ? /^[\x21-\x7e]{1,256}/ : stryMutAct_9fa48("2968") ? /[\x21-\x7e]{1,256}$/ : (stryCov_9fa48("2968", "2969", "2970", "2971"), /^[\x21-\x7e]{1,256}$/);
export interface RequestKeys {
  model?: string;
  session?: string;
}
export type RequestKeysResult = {
  ok: true;
  keys: RequestKeys;
} | {
  ok: false;
  code: "bad_request" | "model_not_found";
  message: string;
};
export function requestKeys(headers: Headers, deployment: Deployment): RequestKeysResult {
  if (stryMutAct_9fa48("2972")) {
    {}
  } else {
    stryCov_9fa48("2972");
    const keys: RequestKeys = {};
    const mux = deployment.multiplexing;
    if (stryMutAct_9fa48("2974") ? false : stryMutAct_9fa48("2973") ? true : (stryCov_9fa48("2973", "2974"), mux)) {
      if (stryMutAct_9fa48("2975")) {
        {}
      } else {
        stryCov_9fa48("2975");
        const named = stryMutAct_9fa48("2976") ? headers.get(Header.model) && headers.get(Header.rayModel) : (stryCov_9fa48("2976"), headers.get(Header.model) ?? headers.get(Header.rayModel));
        const model = stryMutAct_9fa48("2977") ? named && mux.defaultModel : (stryCov_9fa48("2977"), named ?? mux.defaultModel);
        if (stryMutAct_9fa48("2980") ? model === undefined : stryMutAct_9fa48("2979") ? false : stryMutAct_9fa48("2978") ? true : (stryCov_9fa48("2978", "2979", "2980"), model !== undefined)) {
          if (stryMutAct_9fa48("2981")) {
            {}
          } else {
            stryCov_9fa48("2981");
            if (stryMutAct_9fa48("2984") ? false : stryMutAct_9fa48("2983") ? true : stryMutAct_9fa48("2982") ? MODEL_ID.test(model) : (stryCov_9fa48("2982", "2983", "2984"), !MODEL_ID.test(model))) {
              if (stryMutAct_9fa48("2985")) {
                {}
              } else {
                stryCov_9fa48("2985");
                return stryMutAct_9fa48("2986") ? {} : (stryCov_9fa48("2986"), {
                  ok: stryMutAct_9fa48("2987") ? true : (stryCov_9fa48("2987"), false),
                  code: stryMutAct_9fa48("2988") ? "" : (stryCov_9fa48("2988"), "bad_request"),
                  message: stryMutAct_9fa48("2989") ? `` : (stryCov_9fa48("2989"), `invalid model id in ${Header.model}/${Header.rayModel}: 1-128 of [A-Za-z0-9._:@/+-]`)
                });
              }
            }
            if (stryMutAct_9fa48("2992") ? mux.models.length > 0 || !mux.models.includes(model) : stryMutAct_9fa48("2991") ? false : stryMutAct_9fa48("2990") ? true : (stryCov_9fa48("2990", "2991", "2992"), (stryMutAct_9fa48("2995") ? mux.models.length <= 0 : stryMutAct_9fa48("2994") ? mux.models.length >= 0 : stryMutAct_9fa48("2993") ? true : (stryCov_9fa48("2993", "2994", "2995"), mux.models.length > 0)) && (stryMutAct_9fa48("2996") ? mux.models.includes(model) : (stryCov_9fa48("2996"), !mux.models.includes(model))))) {
              if (stryMutAct_9fa48("2997")) {
                {}
              } else {
                stryCov_9fa48("2997");
                return stryMutAct_9fa48("2998") ? {} : (stryCov_9fa48("2998"), {
                  ok: stryMutAct_9fa48("2999") ? true : (stryCov_9fa48("2999"), false),
                  code: stryMutAct_9fa48("3000") ? "" : (stryCov_9fa48("3000"), "model_not_found"),
                  message: stryMutAct_9fa48("3001") ? `` : (stryCov_9fa48("3001"), `deployment "${deployment.name}" does not serve model "${model}"; it serves: ${mux.models.join(stryMutAct_9fa48("3002") ? "" : (stryCov_9fa48("3002"), ", "))}`)
                });
              }
            }
            keys.model = model;
          }
        }
      }
    }
    if (stryMutAct_9fa48("3004") ? false : stryMutAct_9fa48("3003") ? true : (stryCov_9fa48("3003", "3004"), deployment.sessionAffinity.enabled)) {
      if (stryMutAct_9fa48("3005")) {
        {}
      } else {
        stryCov_9fa48("3005");
        const session = headers.get(Header.clientSession);
        if (stryMutAct_9fa48("3008") ? session === null : stryMutAct_9fa48("3007") ? false : stryMutAct_9fa48("3006") ? true : (stryCov_9fa48("3006", "3007", "3008"), session !== null)) {
          if (stryMutAct_9fa48("3009")) {
            {}
          } else {
            stryCov_9fa48("3009");
            if (stryMutAct_9fa48("3012") ? false : stryMutAct_9fa48("3011") ? true : stryMutAct_9fa48("3010") ? SESSION_ID.test(session) : (stryCov_9fa48("3010", "3011", "3012"), !SESSION_ID.test(session))) return stryMutAct_9fa48("3013") ? {} : (stryCov_9fa48("3013"), {
              ok: stryMutAct_9fa48("3014") ? true : (stryCov_9fa48("3014"), false),
              code: stryMutAct_9fa48("3015") ? "" : (stryCov_9fa48("3015"), "bad_request"),
              message: stryMutAct_9fa48("3016") ? `` : (stryCov_9fa48("3016"), `invalid ${Header.clientSession}: 1-256 visible ASCII characters`)
            });
            keys.session = session;
          }
        }
      }
    }
    return stryMutAct_9fa48("3017") ? {} : (stryCov_9fa48("3017"), {
      ok: stryMutAct_9fa48("3018") ? false : (stryCov_9fa48("3018"), true),
      keys
    });
  }
}

/** Header hygiene for the proxy path. Pure. */
export const HOP_BY_HOP_HEADERS: readonly string[] = stryMutAct_9fa48("3019") ? [] : (stryCov_9fa48("3019"), [stryMutAct_9fa48("3020") ? "" : (stryCov_9fa48("3020"), "connection"), stryMutAct_9fa48("3021") ? "" : (stryCov_9fa48("3021"), "keep-alive"), stryMutAct_9fa48("3022") ? "" : (stryCov_9fa48("3022"), "proxy-authenticate"), stryMutAct_9fa48("3023") ? "" : (stryCov_9fa48("3023"), "proxy-authorization"), stryMutAct_9fa48("3024") ? "" : (stryCov_9fa48("3024"), "proxy-connection"), stryMutAct_9fa48("3025") ? "" : (stryCov_9fa48("3025"), "te"), stryMutAct_9fa48("3026") ? "" : (stryCov_9fa48("3026"), "trailer"), stryMutAct_9fa48("3027") ? "" : (stryCov_9fa48("3027"), "transfer-encoding"), stryMutAct_9fa48("3028") ? "" : (stryCov_9fa48("3028"), "upgrade")]);

/**
 * Headers a dispatch never takes from the client besides the protocol's edge-only
 * ones (src/protocol/headers.ts isEdgeOnlyHeader): `expect`, since the edge answers
 * the client's 100-continue itself, and a replica's interim 100 reaching the Worker
 * made workerd throw (a 500) after the replica had done the work.
 */
const DISPATCH_ONLY = stryMutAct_9fa48("3029") ? [] : (stryCov_9fa48("3029"), [stryMutAct_9fa48("3030") ? "" : (stryCov_9fa48("3030"), "expect")]);
/** Protocol headers a replica sends for the proxy that clients do not need to see. */
const REPLICA_ONLY = stryMutAct_9fa48("3031") ? [] : (stryCov_9fa48("3031"), [Header.protocol, Header.load, Header.rejected]);
/**
 * Request headers a dispatch never passes on: hop-by-hop ones, host, the
 * protocol's edge-only ones (every `x-switchyard-` header a client may not set), and
 * the session's binding token (the edge's business, not the replica's).
 */
const NOT_PASSED: ReadonlySet<string> = new Set(stryMutAct_9fa48("3032") ? [] : (stryCov_9fa48("3032"), [...HOP_BY_HOP_HEADERS, stryMutAct_9fa48("3033") ? "" : (stryCov_9fa48("3033"), "host"), ...DISPATCH_ONLY, ...EDGE_ONLY_HEADERS, Header.sessionToken]));
const notPassed = stryMutAct_9fa48("3034") ? () => undefined : (stryCov_9fa48("3034"), (() => {
  const notPassed = (name: string) => stryMutAct_9fa48("3037") ? NOT_PASSED.has(name) && name.startsWith(PROTOCOL_HEADER_PREFIX) && isEdgeOnlyHeader(name) : stryMutAct_9fa48("3036") ? false : stryMutAct_9fa48("3035") ? true : (stryCov_9fa48("3035", "3036", "3037"), NOT_PASSED.has(name) || (stryMutAct_9fa48("3039") ? name.startsWith(PROTOCOL_HEADER_PREFIX) || isEdgeOnlyHeader(name) : stryMutAct_9fa48("3038") ? false : (stryCov_9fa48("3038", "3039"), (stryMutAct_9fa48("3040") ? name.endsWith(PROTOCOL_HEADER_PREFIX) : (stryCov_9fa48("3040"), name.startsWith(PROTOCOL_HEADER_PREFIX))) && isEdgeOnlyHeader(name))));
  return notPassed;
})());
const TOKEN = stryMutAct_9fa48("3044") ? /^[^!#$%&'*+.^_`|~0-9A-Za-z-]+$/ : stryMutAct_9fa48("3043") ? /^[!#$%&'*+.^_`|~0-9A-Za-z-]$/ : stryMutAct_9fa48("3042") ? /^[!#$%&'*+.^_`|~0-9A-Za-z-]+/ : stryMutAct_9fa48("3041") ? /[!#$%&'*+.^_`|~0-9A-Za-z-]+$/ : (stryCov_9fa48("3041", "3042", "3043", "3044"), /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/);

/** Deletes the headers a Connection header names (RFC 9110 §7.6.1). */
function dropConnectionNamed(h: Headers, named: string): void {
  if (stryMutAct_9fa48("3045")) {
    {}
  } else {
    stryCov_9fa48("3045");
    for (const item of named.split(stryMutAct_9fa48("3046") ? "" : (stryCov_9fa48("3046"), ","))) {
      if (stryMutAct_9fa48("3047")) {
        {}
      } else {
        stryCov_9fa48("3047");
        const n = stryMutAct_9fa48("3048") ? item : (stryCov_9fa48("3048"), item.trim());
        // Empty list items are ignored (RFC 9110 §5.6.1); invalid names cannot be present anyway.
        if (stryMutAct_9fa48("3050") ? false : stryMutAct_9fa48("3049") ? true : (stryCov_9fa48("3049", "3050"), TOKEN.test(n))) if (stryMutAct_9fa48("3051")) {
          ;
        } else {
          stryCov_9fa48("3051");
          h.delete(n);
        }
      }
    }
  }
}

/**
 * Deletes the hop-by-hop headers and those the Connection header names. One delete
 * per name, present or not: in workerd walking `keys()` to delete only those present
 * cost more than the deletes (bench/README.md, "Where the proxy's CPU goes", and the
 * 2026-12-02 trial).
 */
function dropHopByHop(h: Headers): void {
  if (stryMutAct_9fa48("3052")) {
    {}
  } else {
    stryCov_9fa48("3052");
    const named = h.get(stryMutAct_9fa48("3053") ? "" : (stryCov_9fa48("3053"), "connection"));
    if (stryMutAct_9fa48("3055") ? false : stryMutAct_9fa48("3054") ? true : (stryCov_9fa48("3054", "3055"), named)) if (stryMutAct_9fa48("3056")) {
      ;
    } else {
      stryCov_9fa48("3056");
      dropConnectionNamed(h, named);
    }
    for (const n of HOP_BY_HOP_HEADERS) if (stryMutAct_9fa48("3057")) {
      ;
    } else {
      stryCov_9fa48("3057");
      h.delete(n);
    }
  }
}

/** What one header counts against the header-size limit: its name, its value and 4 bytes of framing. */
function fieldBytes(name: string, value: string): number {
  if (stryMutAct_9fa48("3058")) {
    {}
  } else {
    stryCov_9fa48("3058");
    return stryMutAct_9fa48("3059") ? name.length + value.length - 4 : (stryCov_9fa48("3059"), (stryMutAct_9fa48("3060") ? name.length - value.length : (stryCov_9fa48("3060"), name.length + value.length)) + 4);
  }
}

/** A request's headers read once at the boundary: their size, and what a dispatch passes on. */
export interface ReadRequestHeaders {
  /** Names, values and 4 bytes of framing per header: what the header-size limit counts. */
  bytes: number;
  /** The headers a dispatch sends on (a fresh object, the dispatch's to change). */
  passed: Headers;
}

/**
 * One walk of the request's headers, counting their size and noting which of the
 * names a dispatch must not pass on are present; then one copy, with only those
 * deleted. The walk is needed anyway for the size, so the ~22 deletes of names
 * that are almost never there are saved (bench/hot-path-steps.ts, "request
 * headers"). `dropAuthorization`: a private deployment's API key is the edge's
 * credential, not the replica's.
 */
export function readRequestHeaders(incoming: Headers, dropAuthorization: boolean): ReadRequestHeaders {
  if (stryMutAct_9fa48("3061")) {
    {}
  } else {
    stryCov_9fa48("3061");
    let bytes = 0;
    let present: string[] | undefined;
    let connection: string | undefined;
    for (const [name, value] of incoming) {
      if (stryMutAct_9fa48("3062")) {
        {}
      } else {
        stryCov_9fa48("3062");
        stryMutAct_9fa48("3063") ? bytes -= fieldBytes(name, value) : (stryCov_9fa48("3063"), bytes += fieldBytes(name, value));
        if (stryMutAct_9fa48("3066") ? notPassed(name) && dropAuthorization && name === "authorization" : stryMutAct_9fa48("3065") ? false : stryMutAct_9fa48("3064") ? true : (stryCov_9fa48("3064", "3065", "3066"), notPassed(name) || (stryMutAct_9fa48("3068") ? dropAuthorization || name === "authorization" : stryMutAct_9fa48("3067") ? false : (stryCov_9fa48("3067", "3068"), dropAuthorization && (stryMutAct_9fa48("3070") ? name !== "authorization" : stryMutAct_9fa48("3069") ? true : (stryCov_9fa48("3069", "3070"), name === (stryMutAct_9fa48("3071") ? "" : (stryCov_9fa48("3071"), "authorization")))))))) {
          if (stryMutAct_9fa48("3072")) {
            {}
          } else {
            stryCov_9fa48("3072");
            (stryMutAct_9fa48("3074") ? present &&= [] : (stryCov_9fa48("3074"), present ??= stryMutAct_9fa48("3075") ? ["Stryker was here"] : (stryCov_9fa48("3075"), []))).push(name);
            if (stryMutAct_9fa48("3078") ? name !== "connection" : stryMutAct_9fa48("3077") ? false : stryMutAct_9fa48("3076") ? true : (stryCov_9fa48("3076", "3077", "3078"), name === (stryMutAct_9fa48("3079") ? "" : (stryCov_9fa48("3079"), "connection")))) connection = value;
          }
        }
      }
    }
    const passed = new Headers(incoming);
    if (stryMutAct_9fa48("3081") ? false : stryMutAct_9fa48("3080") ? true : (stryCov_9fa48("3080", "3081"), present)) for (const name of present) if (stryMutAct_9fa48("3082")) {
      ;
    } else {
      stryCov_9fa48("3082");
      passed.delete(name);
    }
    if (stryMutAct_9fa48("3084") ? false : stryMutAct_9fa48("3083") ? true : (stryCov_9fa48("3083", "3084"), connection)) if (stryMutAct_9fa48("3085")) {
      ;
    } else {
      stryCov_9fa48("3085");
      dropConnectionNamed(passed, connection);
    }
    return stryMutAct_9fa48("3086") ? {} : (stryCov_9fa48("3086"), {
      bytes,
      passed
    });
  }
}

/** The header-size limit's count alone (a request served without dispatch). */
export function requestHeaderBytes(incoming: Headers): number {
  if (stryMutAct_9fa48("3087")) {
    {}
  } else {
    stryCov_9fa48("3087");
    let bytes = 0;
    for (const [name, value] of incoming) stryMutAct_9fa48("3088") ? bytes -= fieldBytes(name, value) : (stryCov_9fa48("3088"), bytes += fieldBytes(name, value));
    return bytes;
  }
}
export function clientHeaders(upstream: Headers): Headers {
  if (stryMutAct_9fa48("3089")) {
    {}
  } else {
    stryCov_9fa48("3089");
    const h = new Headers(upstream);
    if (stryMutAct_9fa48("3090")) {
      ;
    } else {
      stryCov_9fa48("3090");
      scrubForClient(h);
    }
    return h;
  }
}

/**
 * clientHeaders in place: for the headers of a Response the edge has just built
 * from the replica's (the Response constructor copies them already, so a second
 * copy per request would be waste).
 */
export function scrubForClient(h: Headers): void {
  if (stryMutAct_9fa48("3091")) {
    {}
  } else {
    stryCov_9fa48("3091");
    if (stryMutAct_9fa48("3092")) {
      ;
    } else {
      stryCov_9fa48("3092");
      dropHopByHop(h);
    }
    for (const n of REPLICA_ONLY) if (stryMutAct_9fa48("3093")) {
      ;
    } else {
      stryCov_9fa48("3093");
      h.delete(n);
    }
  }
}
const REQUEST_ID = stryMutAct_9fa48("3097") ? /^[^A-Za-z0-9._:-]{1,128}$/ : stryMutAct_9fa48("3096") ? /^[A-Za-z0-9._:-]$/ : stryMutAct_9fa48("3095") ? /^[A-Za-z0-9._:-]{1,128}/ : stryMutAct_9fa48("3094") ? /[A-Za-z0-9._:-]{1,128}$/ : (stryCov_9fa48("3094", "3095", "3096", "3097"), /^[A-Za-z0-9._:-]{1,128}$/);

/** Echoes a well-formed client request id, else makes one. */
export function requestIdFor(incoming: string | null): string {
  if (stryMutAct_9fa48("3098")) {
    {}
  } else {
    stryCov_9fa48("3098");
    return (stryMutAct_9fa48("3101") ? incoming || REQUEST_ID.test(incoming) : stryMutAct_9fa48("3100") ? false : stryMutAct_9fa48("3099") ? true : (stryCov_9fa48("3099", "3100", "3101"), incoming && REQUEST_ID.test(incoming))) ? incoming : randomUuid();
  }
}

/**
 * Version 4 UUIDs for request ids, as crypto.randomUUID makes them (RFC 9562 §5.4:
 * 122 random bits from the same CSPRNG), from random bytes drawn 256 ids at a time:
 * one runtime call per 256 requests instead of one per request. Not secrets: they
 * name a request in logs and headers.
 */
const IDS_PER_DRAW = 256;

// Drawn on first use: workerd refuses crypto calls at module scope (outside a request).
let pool: Uint8Array | undefined;
let at = stryMutAct_9fa48("3102") ? IDS_PER_DRAW / 16 : (stryCov_9fa48("3102"), IDS_PER_DRAW * 16);
export function randomUuid(): string {
  if (stryMutAct_9fa48("3103")) {
    {}
  } else {
    stryCov_9fa48("3103");
    if (stryMutAct_9fa48("3106") ? !pool && at >= pool.length : stryMutAct_9fa48("3105") ? false : stryMutAct_9fa48("3104") ? true : (stryCov_9fa48("3104", "3105", "3106"), (stryMutAct_9fa48("3107") ? pool : (stryCov_9fa48("3107"), !pool)) || (stryMutAct_9fa48("3110") ? at < pool.length : stryMutAct_9fa48("3109") ? at > pool.length : stryMutAct_9fa48("3108") ? false : (stryCov_9fa48("3108", "3109", "3110"), at >= pool.length)))) {
      if (stryMutAct_9fa48("3111")) {
        {}
      } else {
        stryCov_9fa48("3111");
        pool = crypto.getRandomValues(new Uint8Array(stryMutAct_9fa48("3112") ? IDS_PER_DRAW / 16 : (stryCov_9fa48("3112"), IDS_PER_DRAW * 16)));
        at = 0;
      }
    }
    const b = pool;
    const i = at;
    stryMutAct_9fa48("3113") ? at -= 16 : (stryCov_9fa48("3113"), at += 16);
    const h = HEX_BYTE;
    return stryMutAct_9fa48("3114") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[i + 6]! & 0x0f | 0x40]! + h[b[i + 7]!]! + "-" + h[b[i + 8]! & 0x3f | 0x80]! + h[b[i + 9]!]! + "-" + h[b[i + 10]!]! + h[b[i + 11]!]! + h[b[i + 12]!]! + h[b[i + 13]!]! + h[b[i + 14]!]! - h[b[i + 15]!]! : (stryCov_9fa48("3114"), (stryMutAct_9fa48("3115") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[i + 6]! & 0x0f | 0x40]! + h[b[i + 7]!]! + "-" + h[b[i + 8]! & 0x3f | 0x80]! + h[b[i + 9]!]! + "-" + h[b[i + 10]!]! + h[b[i + 11]!]! + h[b[i + 12]!]! + h[b[i + 13]!]! - h[b[i + 14]!]! : (stryCov_9fa48("3115"), (stryMutAct_9fa48("3116") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[i + 6]! & 0x0f | 0x40]! + h[b[i + 7]!]! + "-" + h[b[i + 8]! & 0x3f | 0x80]! + h[b[i + 9]!]! + "-" + h[b[i + 10]!]! + h[b[i + 11]!]! + h[b[i + 12]!]! - h[b[i + 13]!]! : (stryCov_9fa48("3116"), (stryMutAct_9fa48("3117") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[i + 6]! & 0x0f | 0x40]! + h[b[i + 7]!]! + "-" + h[b[i + 8]! & 0x3f | 0x80]! + h[b[i + 9]!]! + "-" + h[b[i + 10]!]! + h[b[i + 11]!]! - h[b[i + 12]!]! : (stryCov_9fa48("3117"), (stryMutAct_9fa48("3118") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[i + 6]! & 0x0f | 0x40]! + h[b[i + 7]!]! + "-" + h[b[i + 8]! & 0x3f | 0x80]! + h[b[i + 9]!]! + "-" + h[b[i + 10]!]! - h[b[i + 11]!]! : (stryCov_9fa48("3118"), (stryMutAct_9fa48("3119") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[i + 6]! & 0x0f | 0x40]! + h[b[i + 7]!]! + "-" + h[b[i + 8]! & 0x3f | 0x80]! - h[b[i + 9]!]! : (stryCov_9fa48("3119"), (stryMutAct_9fa48("3120") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[i + 6]! & 0x0f | 0x40]! - h[b[i + 7]!]! : (stryCov_9fa48("3120"), (stryMutAct_9fa48("3121") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" + h[b[i + 4]!]! - h[b[i + 5]!]! : (stryCov_9fa48("3121"), (stryMutAct_9fa48("3122") ? h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! - h[b[i + 3]!]! : (stryCov_9fa48("3122"), (stryMutAct_9fa48("3123") ? h[b[i]!]! + h[b[i + 1]!]! - h[b[i + 2]!]! : (stryCov_9fa48("3123"), (stryMutAct_9fa48("3124") ? h[b[i]!]! - h[b[i + 1]!]! : (stryCov_9fa48("3124"), h[b[i]!]! + h[b[stryMutAct_9fa48("3125") ? i - 1 : (stryCov_9fa48("3125"), i + 1)]!]!)) + h[b[stryMutAct_9fa48("3126") ? i - 2 : (stryCov_9fa48("3126"), i + 2)]!]!)) + h[b[stryMutAct_9fa48("3127") ? i - 3 : (stryCov_9fa48("3127"), i + 3)]!]!)) + (stryMutAct_9fa48("3128") ? "" : (stryCov_9fa48("3128"), "-")) + h[b[stryMutAct_9fa48("3129") ? i - 4 : (stryCov_9fa48("3129"), i + 4)]!]! + h[b[stryMutAct_9fa48("3130") ? i - 5 : (stryCov_9fa48("3130"), i + 5)]!]!)) + (stryMutAct_9fa48("3131") ? "" : (stryCov_9fa48("3131"), "-")) +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[b[stryMutAct_9fa48("3132") ? i - 6 : (stryCov_9fa48("3132"), i + 6)]! & 0x0f | 0x40]! + h[b[stryMutAct_9fa48("3133") ? i - 7 : (stryCov_9fa48("3133"), i + 7)]!]!)) + (stryMutAct_9fa48("3134") ? "" : (stryCov_9fa48("3134"), "-")) + h[b[stryMutAct_9fa48("3135") ? i - 8 : (stryCov_9fa48("3135"), i + 8)]! & 0x3f | 0x80]! + h[b[stryMutAct_9fa48("3136") ? i - 9 : (stryCov_9fa48("3136"), i + 9)]!]!)) + (stryMutAct_9fa48("3137") ? "" : (stryCov_9fa48("3137"), "-")) + h[b[stryMutAct_9fa48("3138") ? i - 10 : (stryCov_9fa48("3138"), i + 10)]!]! + h[b[stryMutAct_9fa48("3139") ? i - 11 : (stryCov_9fa48("3139"), i + 11)]!]!)) + h[b[stryMutAct_9fa48("3140") ? i - 12 : (stryCov_9fa48("3140"), i + 12)]!]!)) + h[b[stryMutAct_9fa48("3141") ? i - 13 : (stryCov_9fa48("3141"), i + 13)]!]!)) + h[b[stryMutAct_9fa48("3142") ? i - 14 : (stryCov_9fa48("3142"), i + 14)]!]!)) + h[b[stryMutAct_9fa48("3143") ? i - 15 : (stryCov_9fa48("3143"), i + 15)]!]!);
  }
}

/** Whether a request for dispatched `path` may reach a replica: any but its operational routes, and those the deployment names (access.replicaRoutes). */
export function replicaRouteForwarded(deployment: Deployment, path: string): boolean {
  if (stryMutAct_9fa48("3144")) {
    {}
  } else {
    stryCov_9fa48("3144");
    if (stryMutAct_9fa48("3147") ? false : stryMutAct_9fa48("3146") ? true : stryMutAct_9fa48("3145") ? isReplicaOperationalPath(path) : (stryCov_9fa48("3145", "3146", "3147"), !isReplicaOperationalPath(path))) return stryMutAct_9fa48("3148") ? false : (stryCov_9fa48("3148"), true);
    const named = deployment.access.replicaRoutes;
    return stryMutAct_9fa48("3151") ? named === true && Array.isArray(named) && named.includes(operationalPathOf(path)) : stryMutAct_9fa48("3150") ? false : stryMutAct_9fa48("3149") ? true : (stryCov_9fa48("3149", "3150", "3151"), (stryMutAct_9fa48("3153") ? named !== true : stryMutAct_9fa48("3152") ? false : (stryCov_9fa48("3152", "3153"), named === (stryMutAct_9fa48("3154") ? false : (stryCov_9fa48("3154"), true)))) || (stryMutAct_9fa48("3156") ? Array.isArray(named) || named.includes(operationalPathOf(path)) : stryMutAct_9fa48("3155") ? false : (stryCov_9fa48("3155", "3156"), Array.isArray(named) && named.includes(operationalPathOf(path)))));
  }
}