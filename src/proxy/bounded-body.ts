/**
 * Reads a request body into memory, up to `limit` bytes: null when it is (or
 * declares itself) larger, after cancelling the rest. A sized body within the
 * limit is read in one native call; a chunked one is counted as it arrives.
 */
export async function readBoundedBody(req: Request, limit: number): Promise<Uint8Array | null> {
  const declared = req.headers.get("content-length");
  if (declared !== null && /^\d{1,15}$/.test(declared)) {
    if (Number(declared) > limit) return null;
    return new Uint8Array(await req.arrayBuffer());
  }
  if (!req.body) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = req.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      return null;
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}
