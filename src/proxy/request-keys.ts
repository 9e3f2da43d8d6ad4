/**
 * What the proxy reads from a request to route it beyond its path: the
 * multiplexed model and the session. Validated here, at the boundary; pure.
 */
import type { Deployment } from "../config/deployment.ts";
import { Header, MODEL_ID } from "../protocol/index.ts";

/** Session ids: 1-256 visible ASCII characters (they travel in headers and name bindings). */
export const SESSION_ID = /^[\x21-\x7e]{1,256}$/;

export interface RequestKeys {
  model?: string;
  session?: string;
}

export type RequestKeysResult = { ok: true; keys: RequestKeys } | { ok: false; code: "bad_request" | "model_not_found"; message: string };

export function requestKeys(headers: Headers, deployment: Deployment): RequestKeysResult {
  const keys: RequestKeys = {};
  const mux = deployment.multiplexing;
  if (mux) {
    const named = headers.get(Header.model) ?? headers.get(Header.rayModel);
    const model = named ?? mux.defaultModel;
    if (model !== undefined) {
      if (!MODEL_ID.test(model)) {
        return { ok: false, code: "bad_request", message: `invalid model id in ${Header.model}/${Header.rayModel}: 1-128 of [A-Za-z0-9._:@/+-]` };
      }
      if (mux.models.length > 0 && !mux.models.includes(model)) {
        return { ok: false, code: "model_not_found", message: `deployment "${deployment.name}" does not serve model "${model}"; it serves: ${mux.models.join(", ")}` };
      }
      keys.model = model;
    }
  }
  if (deployment.sessionAffinity.enabled) {
    const session = headers.get(Header.clientSession);
    if (session !== null) {
      if (!SESSION_ID.test(session)) return { ok: false, code: "bad_request", message: `invalid ${Header.clientSession}: 1-256 visible ASCII characters` };
      keys.session = session;
    }
  }
  return { ok: true, keys };
}
