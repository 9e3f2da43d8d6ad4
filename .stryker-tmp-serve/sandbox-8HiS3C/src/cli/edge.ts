/**
 * The CLI's HTTP client for the edge: system routes under /-/, the admin ones
 * with `Authorization: Bearer <admin secret>`. Every failure becomes a CliError
 * (exit 1) whose message says what to check.
 */
// @ts-nocheck

import { CliError } from "./errors.ts";

export interface EdgeErrorBody {
  error?: { code?: string; message?: string };
}

/** An HTTP error answer from the edge. */
export class EdgeHttpError extends CliError {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | undefined,
    readonly edgeMessage: string | undefined,
  ) {
    super(message, 1);
  }

  /** The edge does not have this system route (an older edge, or an endpoint not shipped yet). */
  get endpointMissing(): boolean {
    return this.status === 404 && this.code === "route_not_found" && (this.edgeMessage ?? "").startsWith("no system route");
  }
}

export interface EdgeClientOptions {
  baseUrl: string;
  adminSecret?: string;
  fetch?: typeof fetch;
  /** Per request, ms. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export class EdgeClient {
  readonly baseUrl: string;
  readonly #o: EdgeClientOptions;

  constructor(o: EdgeClientOptions) {
    this.#o = o;
    this.baseUrl = o.baseUrl.replace(/\/+$/, "");
  }

  /** GET a JSON document. */
  async getJson<T>(path: string, o: { admin?: boolean } = {}): Promise<T> {
    const res = await this.#request("GET", path, o.admin ?? false);
    return (await this.#json(res, path)) as T;
  }

  async postJson<T>(path: string, o: { admin?: boolean } = {}): Promise<T> {
    const res = await this.#request("POST", path, o.admin ?? false);
    return (await this.#json(res, path)) as T;
  }

  async getText(path: string, o: { admin?: boolean } = {}): Promise<string> {
    const res = await this.#request("GET", path, o.admin ?? false);
    return res.text();
  }

  async #json(res: Response, path: string): Promise<unknown> {
    const text = await res.text();
    try {
      return JSON.parse(text);
    } catch {
      throw new CliError(`the edge answered ${path} with something that is not JSON: ${text.slice(0, 200)}`, 1);
    }
  }

  async #request(method: string, path: string, admin: boolean): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json, text/plain;q=0.9" };
    if (admin) {
      if (!this.#o.adminSecret) throw new CliError("this command needs the admin secret: set SWITCHYARD_ADMIN_SECRET (or pass --admin-secret)", 2);
      headers.authorization = `Bearer ${this.#o.adminSecret}`;
    }
    const url = `${this.baseUrl}${path}`;
    const signals = [AbortSignal.timeout(this.#o.timeoutMs ?? 10_000), ...(this.#o.signal ? [this.#o.signal] : [])];
    let res: Response;
    try {
      res = await (this.#o.fetch ?? fetch)(url, { method, headers, signal: AbortSignal.any(signals), redirect: "manual" });
    } catch (err) {
      if (this.#o.signal?.aborted) throw err;
      const e = err as Error & { cause?: { code?: string; message?: string } };
      const why = e.name === "TimeoutError" ? `no answer within ${(this.#o.timeoutMs ?? 10_000) / 1000} s` : (e.cause?.code ?? e.cause?.message ?? e.message);
      throw new CliError(`cannot reach the edge at ${this.baseUrl} (${why}); is it running? (--edge URL or SWITCHYARD_EDGE)`, 1);
    }
    if (res.ok) return res;
    const text = await res.text().catch(() => "");
    let body: EdgeErrorBody = {};
    try {
      body = JSON.parse(text) as EdgeErrorBody;
    } catch {
      // not a Switchyard error body
    }
    const code = body.error?.code;
    const message = body.error?.message;
    const detail = message ?? (text.trim().slice(0, 200) || res.statusText);
    let hint = "";
    if (res.status === 401) hint = ": the edge refused the admin secret (check SWITCHYARD_ADMIN_SECRET; the edge's admin API is off when it has none)";
    const err = new EdgeHttpError(`${method} ${path}: ${res.status}${code ? ` ${code}` : ""}: ${detail}${hint}`, res.status, code, message);
    if (err.endpointMissing) err.message = `${method} ${path}: the edge at ${this.baseUrl} has no such endpoint (404 "${message}"); it needs a newer Switchyard edge`;
    throw err;
  }
}
