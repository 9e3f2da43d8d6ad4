import type { Env } from "../env.ts";
import { errorResponse, timingSafeEqualStrings } from "../protocol/index.ts";

/**
 * Constant-time comparison of a `Bearer <secret>` header against the expected secret.
 * The supplied token goes first: the comparison's time follows its length, not the secret's.
 */
export function bearerMatches(header: string | undefined | null, secret: string | undefined): boolean {
  if (!secret || !header?.startsWith("Bearer ")) return false;
  return timingSafeEqualStrings(header.slice(7), secret);
}

/** The 401 an admin route answers when `authorization` does not carry the admin secret; null when it does. Admin routes are off without a secret. */
export function adminRefusal(env: Pick<Env, "SWITCHYARD_ADMIN_SECRET">, authorization: string | undefined | null): Response | null {
  if (bearerMatches(authorization, env.SWITCHYARD_ADMIN_SECRET)) return null;
  return errorResponse("unauthorized", "admin secret missing or wrong", { headers: { "www-authenticate": "Bearer" } });
}
