// @ts-nocheck
// Raw HTTP/1.1 over a socket, for the e2e tests that send what a client library would
// clean up (security reviews): malformed framing, partial bodies, spoofed headers.
import { connect } from "node:net";

export interface RawOptions {
  /** Written after the head, in one piece. */
  body?: string | Buffer;
  /** Give up (and close) after this long; else wait for the answer or the server's close. */
  untilMs?: number;
  /** Written after `body`, a piece every `everyMs` while the connection is open (a drip), `count` pieces at most. */
  drip?: { piece: string; everyMs: number; count?: number };
}

/** One raw HTTP/1.1 exchange on 127.0.0.1:`port`: sends `head` (and the body), returns everything read until the answer is whole, the server closes, or `untilMs`. */
export function raw(port: number, head: string, o: RawOptions = {}): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(port, "127.0.0.1");
    let out = "";
    let timer: ReturnType<typeof setInterval> | undefined;
    const done = () => {
      if (timer) clearInterval(timer);
      s.destroy();
      resolve(out);
    };
    s.setEncoding("latin1");
    s.on("data", (d: string) => {
      out += d;
      // A sized response read in full is the end of this exchange.
      const end = out.indexOf("\r\n\r\n");
      const length = /content-length: (\d+)/i.exec(out.slice(0, end));
      if (end >= 0 && length && out.length >= end + 4 + Number(length[1])) done();
      if (end >= 0 && /transfer-encoding: chunked/i.test(out.slice(0, end)) && out.endsWith("\r\n0\r\n\r\n")) done();
    });
    s.on("close", done);
    s.on("error", done);
    s.write(head);
    if (o.body !== undefined) s.write(o.body);
    if (o.drip) {
      const { piece, everyMs, count = Infinity } = o.drip;
      let sent = 0;
      timer = setInterval(() => {
        if (s.destroyed || sent++ >= count) return clearInterval(timer);
        s.write(piece);
      }, everyMs);
    }
    if (o.untilMs !== undefined) setTimeout(done, o.untilMs);
  });
}

/** The status code of a raw answer (0 when there is none). */
export const statusOf = (answer: string) => Number(answer.slice(9, 12)) || 0;

/** The JSON error body of a raw, sized answer. */
export const jsonOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)) as { error: { code: string; message: string; request_id?: string } };

/** A header's value in a raw answer's head, or undefined. */
export function headerOf(answer: string, name: string): string | undefined {
  const head = answer.slice(0, answer.indexOf("\r\n\r\n"));
  return new RegExp(`\\r\\n${name}: ([^\\r]*)`, "i").exec(head)?.[1];
}
