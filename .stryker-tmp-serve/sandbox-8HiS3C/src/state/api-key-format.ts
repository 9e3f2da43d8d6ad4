/** Client API keys: their format and hash, shared by the AccessKeys object and the proxy. */
// @ts-nocheck

import { hexOf } from "../protocol/hex.ts";

const PREFIX = "sy-";

/** A new key: "sy-" and 32 random bytes, base64url (256 bits: a fast hash is enough to store it). */
export function newApiKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return PREFIX + btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

// Module-level: the proxy hashes the key of every request to a private deployment.
const encoder = new TextEncoder();

/** Hex SHA-256 of the key. Keys are random and long, so no salt or slow hash is needed. */
export async function hashApiKey(key: string): Promise<string> {
  return hexOf(new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(key))));
}

/** The bearer token of an Authorization header, or null. */
export function bearerToken(header: string | null | undefined): string | null {
  if (!header) return null;
  const m = /^Bearer[ \t]+([\x21-\x7e]{1,512})[ \t]*$/i.exec(header);
  return m ? m[1]! : null;
}
