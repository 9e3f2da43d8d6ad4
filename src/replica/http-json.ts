/** JSON over Node's HTTP server, for the replica's handlers. */
import type { IncomingMessage, ServerResponse } from "node:http";

/** Sends `body` as a sized JSON response. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string>): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/**
 * Reads a request body up to `limit` bytes; null as soon as it goes past. The rest is left
 * unread, so `res` (the answer, not yet sent) closes the connection once it is sent: kept
 * alive, the connection would hold the unread rest forever.
 */
export async function readBodyUpTo(req: IncomingMessage, limit: number, res: ServerResponse): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.byteLength;
    if (size > limit) {
      res.shouldKeepAlive = false;
      return null;
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
