/** JSON over Node's HTTP server, for the replica's handlers. */
import type { IncomingMessage, ServerResponse } from "node:http";

/** Sends `body` as a sized JSON response. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string>): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/**
 * Reads a request body up to `limit` bytes; null as soon as it goes past (the rest is left
 * unread: answer with `connection: close`, or the kept-alive connection holds it forever).
 */
export async function readBodyUpTo(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.byteLength;
    if (size > limit) return null;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
