/** Lowercase hex for digests, signatures and ids: one table for every side (signatures and request ids are made per request). */
// @ts-nocheck


/** Two lowercase hex digits per byte value: a lookup per byte instead of toString and padStart. */
export const HEX_BYTE: readonly string[] = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

/** Bytes → lowercase hex. */
export function hexOf(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i++) out += HEX_BYTE[bytes[i]!]!;
  return out;
}

/** Lowercase hex → bytes; null when the text is not an even number of hex digits. */
export function bytesOfHex(text: string): Uint8Array<ArrayBuffer> | null {
  if (text.length % 2 !== 0 || !/^[0-9a-f]*$/.test(text)) return null;
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}
