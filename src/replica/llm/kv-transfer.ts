/**
 * Prefill/decode disaggregation on the reference replica, in vLLM's protocol with
 * NixlConnector (issue 56; docs/protocol.md, "Prefill/decode disaggregation"): the
 * fields a router puts in `kv_transfer_params`, what a prefill answers, and how a decode
 * replica reads the prefill's KV blocks. vLLM moves the blocks' tensors over NIXL; this
 * replica's model needs no tensors (kv-cache.ts), so its blocks hold the tokens they were
 * computed from, and they move over HTTP, signed with the deployment's replica key like
 * any dispatch:
 *
 *   POST /-/kv-transfer  {"transfer_id": remote_request_id, "block_ids": remote_block_ids}
 *     → 200 {"ids": [token ids of those blocks], "extra": "<the blocks' extra key>"}
 *     → 404 when it holds no such blocks (read already, timed out, or never)
 *
 * A read frees the blocks (vLLM frees them once the decode has pulled them); unread ones
 * are freed after KV_TRANSFER_TIMEOUT_MS. A decode replica that cannot read them (the
 * prefill died, or freed them) computes the prompt itself, as vLLM's
 * `kv_load_failure_policy: recompute` does: the answer is the same, only later.
 *
 * SGLang's protocol sends both legs at once with `bootstrap_host`, `bootstrap_port` and
 * `bootstrap_room`; a prefill replica is its own bootstrap server (it registers its
 * HTTP port as its bootstrap port). The decode asks the bootstrap who the prefill is, as
 * SGLang's decode asks its bootstrap server for the prefill's route, then reads the room,
 * which waits for a prefill not finished yet:
 *
 *   GET  /-/kv-transfer  → 200 {"engine_id": the replica's id} (unsigned: who signs the read)
 *   POST /-/kv-transfer  {"bootstrap_room": room} → 200 {"ids": [...], "extra": "..."} | 404
 */
import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { z } from "zod";
import { Header, KV_TRANSFER_PATH, REPLICA_ID, errorBody, signedDispatchHeaders } from "../../protocol/index.ts";

/** A decode waits this long at most for a prefill's blocks, then computes the prompt itself (its admission slot is held meanwhile). */
export const KV_READ_TIMEOUT_MS = 30_000;

/** A read's body is at most this (a transfer id and up to ~100,000 block ids). */
const MAX_READ_BODY_BYTES = 1024 * 1024;

/**
 * vLLM's kv_transfer_params as a router sends them (NixlConnector's fields): to a
 * prefill, `do_remote_decode: true` and the rest null; to a decode, what the prefill
 * answered. Unknown fields pass (other connectors add their own).
 */
export const KvTransferParams = z.looseObject({
  do_remote_decode: z.boolean().nullish(),
  do_remote_prefill: z.boolean().nullish(),
  remote_engine_id: z.string().max(128).nullish(),
  remote_block_ids: z.array(z.number().int().min(0)).max(1_000_000).nullish(),
  remote_request_id: z.string().max(128).nullish(),
  remote_host: z.string().max(253).nullish(),
  remote_port: z.number().int().min(1).max(65_535).nullish(),
  tp_size: z.number().int().min(1).nullish(),
});
export type KvTransferParams = z.infer<typeof KvTransferParams>;

/**
 * SGLang's fields as its router sends them to both legs. The room is any non-negative
 * number (SGLang's router draws it below 2^63; both legs read the same digits the same way).
 */
export const BootstrapFields = {
  bootstrap_host: z.string().max(255).nullish(),
  bootstrap_port: z.number().int().min(1).max(65_535).nullish(),
  bootstrap_room: z.number().min(0).nullish(),
};

/** A decode's parameters, complete: where and what to read (vLLM's: by block ids; SGLang's: by room, asking who the prefill is). */
export type RemotePrefill =
  | { protocol: "vllm"; engineId: string; blockIds: number[]; requestId: string; host: string; port: number }
  | { protocol: "sglang"; room: number; host: string; port: number };

/** The parameters of a decode (do_remote_prefill) with every field it needs, else undefined. */
export function remotePrefillOf(p: KvTransferParams | null | undefined): RemotePrefill | undefined {
  if (p?.do_remote_prefill !== true) return undefined;
  const { remote_engine_id: engineId, remote_block_ids: blockIds, remote_request_id: requestId, remote_host: host, remote_port: port } = p;
  if (engineId == null || blockIds == null || requestId == null || host == null || port == null) return undefined;
  return { protocol: "vllm", engineId, blockIds, requestId, host, port };
}

/** SGLang's fields of a decode leg, complete (a prefill's bootstrap host, port and room), else undefined. */
export function bootstrapOf(r: { bootstrap_host?: string | null; bootstrap_port?: number | null; bootstrap_room?: number | null }): RemotePrefill | undefined {
  const { bootstrap_host: host, bootstrap_port: port, bootstrap_room: room } = r;
  if (host == null || port == null || room == null) return undefined;
  return { protocol: "sglang", room, host: host.replace(/^\[|\]$/g, ""), port };
}

/** The transfer id a room's blocks are held under (apart from vLLM's UUIDs). */
export function roomTransferId(room: number): string {
  return `room:${room}`;
}

/** This replica as a prefill names itself in what it answers. */
export interface TransferIdentity {
  /** remote_engine_id: the replica's id (a read is signed for it). */
  engineId: string;
  /** remote_host and remote_port: where its HTTP server is reached. */
  url: () => string;
}

/** What a prefill answers in `kv_transfer_params` (vLLM's NixlConnector.request_finished): null when it kept no blocks (it did not finish capped by length). */
export function prefillAnswer(kept: { transferId: string; blockIds: number[] } | undefined, self: TransferIdentity): Record<string, unknown> | null {
  if (!kept) return null;
  const u = new URL(self.url());
  return {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_block_ids: kept.blockIds,
    remote_engine_id: self.engineId,
    remote_request_id: kept.transferId,
    remote_host: u.hostname.replace(/^\[|\]$/g, ""),
    remote_port: Number(u.port || (u.protocol === "https:" ? 443 : 80)),
    tp_size: 1,
  };
}

/** How a decode replica signs its reads: the deployment and its replica key, imported once (none for a standalone replica: reads go unsigned). */
export interface ReadSigner {
  deployment: string;
  key?: Promise<CryptoKey>;
}

/**
 * Reads a prefill's blocks for a decode: their token ids and extra key, or undefined
 * when they cannot be read within `timeoutMs` (the decode then computes them itself).
 * `signal` ends it with the request.
 */
export async function readRemotePrefill(
  remote: RemotePrefill,
  signer: ReadSigner,
  requestId: string,
  signal?: AbortSignal,
  timeoutMs = KV_READ_TIMEOUT_MS,
): Promise<{ ids: number[]; extra: string } | undefined> {
  const host = remote.host.includes(":") ? `[${remote.host}]` : remote.host;
  const url = `http://${host}:${remote.port}${KV_TRANSFER_PATH}`;
  const timeout = AbortSignal.timeout(timeoutMs);
  const ended = signal ? AbortSignal.any([signal, timeout]) : timeout;
  try {
    // SGLang's fields name no replica: the bootstrap says who holds the room (the read is signed for it).
    const engineId = remote.protocol === "vllm" ? remote.engineId : await bootstrapEngine(url, ended);
    if (engineId === undefined || !REPLICA_ID.test(engineId)) return undefined;
    const body = JSON.stringify(remote.protocol === "vllm" ? { transfer_id: remote.requestId, block_ids: remote.blockIds } : { bootstrap_room: remote.room });
    const headers: Record<string, string> = { "content-type": "application/json", [Header.requestId]: requestId };
    if (signer.key !== undefined) {
      const nonce = Math.floor(Math.random() * 2 ** 52);
      Object.assign(headers, await signedDispatchHeaders(await signer.key, { method: "POST", deployment: signer.deployment, target: KV_TRANSFER_PATH, requestId, replica: engineId, body, nonce }));
    }
    const res = await fetch(url, { method: "POST", headers, body, signal: ended });
    if (res.status !== 200) {
      await res.body?.cancel();
      return undefined;
    }
    const got = ReadAnswer.safeParse(await res.json());
    return got.success ? got.data : undefined;
  } catch {
    return undefined;
  }
}

/** Who a bootstrap (a prefill replica) is: its replica id, undefined when it does not say. */
async function bootstrapEngine(url: string, signal: AbortSignal): Promise<string | undefined> {
  const res = await fetch(url, { signal });
  if (res.status !== 200) {
    await res.body?.cancel();
    return undefined;
  }
  const got = z.object({ engine_id: z.string().max(128) }).safeParse(await res.json());
  return got.success ? got.data.engine_id : undefined;
}

/** A prefill replica's answer to `GET /-/kv-transfer`: who signs a read of its rooms. */
export function serveBootstrapIdentity(res: ServerResponse, engineId: string): void {
  const text = JSON.stringify({ engine_id: engineId });
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

const ReadAnswer = z.object({ ids: z.array(z.number().int().min(0)), extra: z.string() });
const ReadRequest = z.union([
  z.object({ transfer_id: z.string().max(128), block_ids: z.array(z.number().int().min(0)).max(1_000_000) }).strict(),
  z.object({ bootstrap_room: z.number().min(0) }).strict(),
]);

/** What a read asks for: vLLM's blocks by id, or SGLang's room (which may wait for its prefill). */
export type TransferRead = { transferId: string; blockIds: readonly number[] } | { room: number };

/**
 * Serves a decode replica's read (the server has checked its signature, which covers
 * the body's digest header; the body is checked against it here). Frees the blocks read.
 */
export function serveTransferRead(
  req: IncomingMessage,
  res: ServerResponse,
  read: (what: TransferRead, signal: AbortSignal) => { ids: number[]; extra: string } | undefined | Promise<{ ids: number[]; extra: string } | undefined>,
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  const send = (status: number, body: unknown) => {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
  };
  req.on("data", (c: Buffer) => {
    size += c.length;
    if (size > MAX_READ_BODY_BYTES) {
      req.destroy();
      return;
    }
    chunks.push(c);
  });
  req.on("end", async () => {
    const body = Buffer.concat(chunks);
    const signed = req.headers[Header.bodySha256];
    if (typeof signed === "string" && createHash("sha256").update(body).digest("hex") !== signed) {
      send(401, errorBody("unauthorized", "the body does not match its signed digest"));
      return;
    }
    let parsed: z.infer<typeof ReadRequest>;
    try {
      parsed = ReadRequest.parse(JSON.parse(body.toString("utf8")));
    } catch {
      send(400, errorBody("bad_request", 'a KV transfer read is {"transfer_id": string, "block_ids": [int, ...]} or {"bootstrap_room": int}'));
      return;
    }
    // A reader that leaves ends its wait for a room.
    const left = new AbortController();
    res.once("close", () => left.abort());
    const got = await read("bootstrap_room" in parsed ? { room: parsed.bootstrap_room } : { transferId: parsed.transfer_id, blockIds: parsed.block_ids }, left.signal);
    if (res.destroyed) return;
    if (!got) {
      send(404, errorBody("kv_blocks_not_found", "no KV blocks held for that transfer (read already, timed out, or never kept)"));
      return;
    }
    send(200, got);
  });
}
