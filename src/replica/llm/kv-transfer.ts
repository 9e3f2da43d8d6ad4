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

/** A decode's parameters, complete: where and what to read. */
export interface RemotePrefill {
  engineId: string;
  blockIds: number[];
  requestId: string;
  host: string;
  port: number;
}

/** The parameters of a decode (do_remote_prefill) with every field it needs, else undefined. */
export function remotePrefillOf(p: KvTransferParams | null | undefined): RemotePrefill | undefined {
  if (p?.do_remote_prefill !== true) return undefined;
  const { remote_engine_id: engineId, remote_block_ids: blockIds, remote_request_id: requestId, remote_host: host, remote_port: port } = p;
  if (engineId == null || blockIds == null || requestId == null || host == null || port == null) return undefined;
  return { engineId, blockIds, requestId, host, port };
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
  if (!REPLICA_ID.test(remote.engineId)) return undefined;
  const body = JSON.stringify({ transfer_id: remote.requestId, block_ids: remote.blockIds });
  const host = remote.host.includes(":") ? `[${remote.host}]` : remote.host;
  const headers: Record<string, string> = { "content-type": "application/json", [Header.requestId]: requestId };
  if (signer.key !== undefined) {
    const nonce = Math.floor(Math.random() * 2 ** 52);
    Object.assign(headers, await signedDispatchHeaders(await signer.key, { method: "POST", deployment: signer.deployment, target: KV_TRANSFER_PATH, requestId, replica: remote.engineId, body, nonce }));
  }
  try {
    const timeout = AbortSignal.timeout(timeoutMs);
    const res = await fetch(`http://${host}:${remote.port}${KV_TRANSFER_PATH}`, { method: "POST", headers, body, signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
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

const ReadAnswer = z.object({ ids: z.array(z.number().int().min(0)), extra: z.string() });
const ReadRequest = z.object({ transfer_id: z.string().max(128), block_ids: z.array(z.number().int().min(0)).max(1_000_000) }).strict();

/**
 * Serves a decode replica's read (the server has checked its signature, which covers
 * the body's digest header; the body is checked against it here). Frees the blocks read.
 */
export function serveTransferRead(req: IncomingMessage, res: ServerResponse, read: (transferId: string, blockIds: readonly number[]) => { ids: number[]; extra: string } | undefined): void {
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
  req.on("end", () => {
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
      send(400, errorBody("bad_request", 'a KV transfer read is {"transfer_id": string, "block_ids": [int, ...]}'));
      return;
    }
    const got = read(parsed.transfer_id, parsed.block_ids);
    if (!got) {
      send(404, errorBody("kv_blocks_not_found", "no KV blocks held for that transfer (read already, timed out, or never kept)"));
      return;
    }
    send(200, got);
  });
}
