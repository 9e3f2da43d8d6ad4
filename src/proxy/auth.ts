import type { Env } from "../env.ts";
import { errorResponse } from "../protocol/index.ts";

/** Constant-time comparison of a `Bearer <secret>` header against the expected secret. */
export function bearerMatches(header: string | undefined | null, secret: string | undefined): boolean {
  if (!secret || !header?.startsWith("Bearer ")) return false;
  const enc = new TextEncoder();
  const a = enc.encode(header.slice(7));
  const b = enc.encode(secret);
  if (a.byteLength !== b.byteLength) return false;
  let diff = 0;
  for (let i = 0; i < a.byteLength; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** The 401 an admin route answers when `authorization` does not carry the admin secret; null when it does. Admin routes are off without a secret. */
export function adminRefusal(env: Pick<Env, "SWITCHYARD_ADMIN_SECRET">, authorization: string | undefined | null): Response | null {
  if (bearerMatches(authorization, env.SWITCHYARD_ADMIN_SECRET)) return null;
  return errorResponse("unauthorized", "admin secret missing or wrong", { headers: { "www-authenticate": "Bearer" } });
}
