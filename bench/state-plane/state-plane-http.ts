/**
 * A minimal HTTP/1.1 keep-alive client for bench/state-plane/state-plane-sim.ts: a fixed
 * pool of connections to one origin, one request at a time per connection,
 * requests written as one buffer (Nagle off) and answers parsed just enough
 * (status, Content-Length or chunked body). node:http's client costs several
 * times more CPU per request, and at thousands of control messages a second
 * on 2 shared cores that CPU is taken from the processes being measured.
 */
import { connect, type Socket } from "node:net";

export interface Answer {
  status: number;
  body: string;
}

interface Job {
  head: Buffer;
  body: Buffer;
  resolve: (a: Answer) => void;
  reject: (e: Error) => void;
  timer?: ReturnType<typeof setTimeout>;
}

const CRLF2 = Buffer.from("\r\n\r\n");

class Connection {
  readonly #socket: Socket;
  #buf: Buffer = Buffer.alloc(0);
  #job: Job | undefined;
  #closed = false;
  /** Parsed head of the answer being read. */
  #head: { status: number; length: number | null; chunked: boolean; close: boolean; bodyStart: number } | undefined;

  constructor(
    host: string,
    port: number,
    private readonly onIdle: (c: Connection) => void,
    private readonly onGone: (c: Connection) => void,
  ) {
    this.#socket = connect({ host, port, noDelay: true });
    this.#socket.on("data", (d: Buffer) => this.#data(d));
    const gone = (err?: Error) => this.#gone(err ?? new Error("connection closed"));
    this.#socket.on("error", gone);
    this.#socket.on("close", () => gone());
  }

  send(job: Job, timeoutMs: number): void {
    this.#job = job;
    job.timer = setTimeout(() => this.#socket.destroy(new Error("timeout")), timeoutMs);
    this.#socket.write(job.body.byteLength ? Buffer.concat([job.head, job.body]) : job.head);
  }

  #data(d: Buffer): void {
    this.#buf = this.#buf.byteLength ? Buffer.concat([this.#buf, d]) : d;
    if (!this.#head) {
      const end = this.#buf.indexOf(CRLF2);
      if (end < 0) return;
      const lines = this.#buf.subarray(0, end).toString("latin1").split("\r\n");
      const status = Number(lines[0]!.split(" ")[1]);
      let length: number | null = null;
      let chunked = false;
      let close = false;
      for (const line of lines.slice(1)) {
        const colon = line.indexOf(":");
        const name = line.slice(0, colon).trim().toLowerCase();
        const value = line.slice(colon + 1).trim().toLowerCase();
        if (name === "content-length") length = Number(value);
        else if (name === "transfer-encoding" && value.includes("chunked")) chunked = true;
        else if (name === "connection" && value === "close") close = true;
      }
      this.#head = { status, length, chunked, close, bodyStart: end + 4 };
    }
    const h = this.#head;
    let body: Buffer;
    let consumed = 0;
    if (h.chunked) {
      const parts: Buffer[] = [];
      let at = h.bodyStart;
      for (;;) {
        const eol = this.#buf.indexOf("\r\n", at);
        if (eol < 0) return;
        const size = parseInt(this.#buf.subarray(at, eol).toString("latin1"), 16);
        if (size === 0) {
          if (this.#buf.byteLength < eol + 4) return;
          consumed = eol + 4;
          break;
        }
        if (this.#buf.byteLength < eol + 2 + size + 2) return;
        parts.push(this.#buf.subarray(eol + 2, eol + 2 + size));
        at = eol + 2 + size + 2;
      }
      body = Buffer.concat(parts);
    } else {
      const length = h.length ?? 0;
      if (this.#buf.byteLength < h.bodyStart + length) return;
      body = this.#buf.subarray(h.bodyStart, h.bodyStart + length);
      consumed = h.bodyStart + length;
    }
    const job = this.#job;
    this.#buf = this.#buf.subarray(consumed);
    this.#head = undefined;
    this.#job = undefined;
    if (job) {
      clearTimeout(job.timer);
      job.resolve({ status: h.status, body: body.toString("utf8") });
    }
    if (h.close) this.#socket.destroy();
    else this.onIdle(this);
  }

  #gone(err: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    const job = this.#job;
    this.#job = undefined;
    if (job) {
      clearTimeout(job.timer);
      job.reject(err);
    }
    this.onGone(this);
  }

  close(): void {
    this.#socket.destroy();
  }
}

export class KeepAlivePool {
  readonly #host: string;
  readonly #port: number;
  readonly #hostHeader: string;
  readonly #idle: Connection[] = [];
  readonly #all = new Set<Connection>();
  readonly #queue: Job[] = [];

  constructor(
    origin: string,
    private readonly size: number,
    private readonly timeoutMs = 10_000,
  ) {
    const u = new URL(origin);
    this.#host = u.hostname;
    this.#port = Number(u.port);
    this.#hostHeader = u.host;
  }

  post(path: string, headers: Record<string, string>, body: Buffer): Promise<Answer> {
    let head = `POST ${path} HTTP/1.1\r\nhost: ${this.#hostHeader}\r\ncontent-length: ${body.byteLength}\r\n`;
    for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
    return new Promise<Answer>((resolve, reject) => {
      this.#queue.push({ head: Buffer.from(`${head}\r\n`, "latin1"), body, resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#queue.length > 0) {
      let c = this.#idle.pop();
      if (!c) {
        if (this.#all.size >= this.size) return;
        c = new Connection(
          this.#host,
          this.#port,
          (idle) => {
            this.#idle.push(idle);
            this.#pump();
          },
          (gone) => {
            this.#all.delete(gone);
            const i = this.#idle.indexOf(gone);
            if (i >= 0) this.#idle.splice(i, 1);
            this.#pump();
          },
        );
        this.#all.add(c);
      }
      c.send(this.#queue.shift()!, this.timeoutMs);
    }
  }

  close(): void {
    for (const c of this.#all) c.close();
  }
}
