/**
 * Constant-time equality for secrets (bearer tokens, keys). A plain `===` or a
 * loop that stops at the first difference, or at a length mismatch, tells a
 * client who can time its requests how much of its guess was right.
 *
 * The running time depends only on the length of `a`, so pass what the caller
 * supplied as `a` and the secret as `b`: every byte of `a` is compared (with
 * `b`'s bytes, cycled), and a length mismatch is folded into the result rather
 * than returned early. Pure JavaScript, so it runs the same in the Worker, the
 * replica and Node (Node's crypto.timingSafeEqual and workerd's
 * crypto.subtle.timingSafeEqual both throw on a length mismatch instead).
 */
// @ts-nocheck


/** Whether `a` and `b` hold the same bytes, in time that depends only on `a.length`. */
export function timingSafeEqual(a: Uint8Array, b: Uint8Array): boolean {
  // A stand-in for an empty `b`, so the loop below has bytes to cycle through; the
  // length check still makes the result false unless `a` is empty too.
  const other = b.length > 0 ? b : new Uint8Array(1);
  let diff = a.length === b.length ? 0 : 1;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ other[i % other.length]!;
  return diff === 0;
}

const encoder = new TextEncoder();

/**
 * Whether two strings are equal, compared as UTF-8 bytes with timingSafeEqual: `a` is
 * the supplied value, `b` the secret (encoding `b` costs the same whatever `a` is).
 */
export function timingSafeEqualStrings(a: string, b: string): boolean {
  return timingSafeEqual(encoder.encode(a), encoder.encode(b));
}
