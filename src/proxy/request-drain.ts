/**
 * Reads and drops the body of a request the edge refused without reading it
 * (bad header, unknown route or model, no key, rate limit, queue full). If the
 * Worker answers with the body unread, workerd cannot reuse the connection and
 * closes it while the client may still be sending, which resets it: the client
 * then sees ECONNRESET instead of our JSON error (measured: 9 of 400 refusals of
 * a 144 KB body lost that way). Bounded by the deployment's body limit; a
 * larger or unsized body is left alone (its connection is lost, as it would be
 * anywhere).
 */
export async function drainUnreadBody(req: Request, limitBytes: number): Promise<void> {
  if (!req.body || req.bodyUsed) return;
  const declared = req.headers.get("content-length");
  if (declared === null || !/^\d{1,15}$/.test(declared) || Number(declared) > limitBytes) return;
  await req.arrayBuffer().catch(() => undefined);
}
