/**
 * The prefill/decode protocols the edge speaks to engines (docs/protocol.md §2d), one
 * entry each; `openai.disaggregation.protocol` accepts exactly these names. A protocol
 * sends its legs one after the other (vLLM: the decode's body carries what the prefill
 * answered) or both at once (SGLang: both legs get one body that names where the KV
 * meets). Bodies keep their bytes: members are appended (the last of a name wins, in
 * Python's json as in JSON.parse), never re-serialised.
 */
import { withLastMember } from "./json-top-level.ts";

/** A prefill's answer larger than this is not read for its parameters (one token and a few thousand block ids fit many times). */
export const MAX_PREFILL_ANSWER_BYTES = 1024 * 1024;

/** A protocol whose decode leg is sent once the prefill leg has answered. */
export interface SequentialPd {
  legs: "sequential";
  /** The prefill leg's body for a client's `endpoint` body; null when the body is not a JSON object. */
  prefillBody(body: ArrayBuffer, endpoint: "chat" | "completions"): ArrayBuffer | null;
  /**
   * The decode leg's body: the client's with what the prefill answered (its parsed JSON);
   * undefined when the answer passes nothing on (the decode then computes the prompt).
   */
  decodeBody(body: ArrayBuffer, prefillAnswer: unknown): ArrayBuffer | undefined;
}

/** Where a prefill replica's KV is fetched from, in a concurrent protocol. */
export interface BootstrapAddress {
  /** The prefill replica's host, as its registered URL names it. */
  host: string;
  /** Its bootstrap port (register's `bootstrap_port`); undefined when it declared none. */
  port: number | undefined;
}

/** A protocol whose two legs are sent at once, with the same body. */
export interface ConcurrentPd {
  legs: "concurrent";
  /**
   * The body both legs get: the client's, naming the prefill's address and a `room`
   * (a random integer below 2^53 that pairs the legs); null when the body is not a JSON object.
   */
  legBody(body: ArrayBuffer, prefill: BootstrapAddress, room: number): ArrayBuffer | null;
  /** Only replicas that declared a leg's role alone take that leg (an engine runs in one mode). */
  singleRole: true;
}

export type PdProtocol = SequentialPd | ConcurrentPd;

/** Appends each member in order; null as soon as one cannot be. */
function appended(body: ArrayBuffer, members: readonly [string, string][]): ArrayBuffer | null {
  let out: ArrayBuffer | null = body;
  for (const [name, json] of members) {
    out = withLastMember(out, name, json);
    if (out === null) return null;
  }
  return out;
}

/**
 * vLLM with NixlConnector, as its disaggregated-serving proxy sends the legs: the
 * prefill gets `kv_transfer_params` asking it to keep the blocks for a remote decode,
 * no stream (nor stream_options, which vLLM refuses without one), one token, and no
 * min_tokens; the decode gets the client's request with the prefill's answered
 * `kv_transfer_params`, unchanged. A prefill that answers none (it stopped before its
 * length: the request is done in one token) passes nothing on.
 */
const vllmNixl: SequentialPd = {
  legs: "sequential",
  prefillBody(body, endpoint) {
    const params = '{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}';
    const members: [string, string][] = [
      ["kv_transfer_params", params],
      ["stream", "false"],
      ["stream_options", "null"],
      ["max_tokens", "1"],
      ["min_tokens", "0"],
    ];
    if (endpoint === "chat") members.push(["max_completion_tokens", "1"]);
    return appended(body, members);
  },
  decodeBody(body, answer) {
    const params = typeof answer === "object" && answer !== null ? (answer as { kv_transfer_params?: unknown }).kv_transfer_params : undefined;
    if (typeof params !== "object" || params === null || Array.isArray(params)) return undefined;
    if ((params as { do_remote_prefill?: unknown }).do_remote_prefill !== true) return undefined;
    return withLastMember(body, "kv_transfer_params", JSON.stringify(params)) ?? undefined;
  },
};

/**
 * SGLang's PD disaggregation, as its router (sgl-router, mini_lb) sends the legs: one
 * body to the prefill and the decode server at once, the client's with `bootstrap_host`
 * (the prefill's host; an IPv6 address in brackets), `bootstrap_port` (its bootstrap
 * server's port, null where it registered none) and `bootstrap_room`. SGLang's router
 * draws the room below 2^63; the edge draws it below 2^53, a subset that every JSON
 * reader (the reference replica's included) reads exactly. Each server runs in one
 * `--disaggregation-mode`, so a leg goes only to a replica of that role alone. The
 * answer is the decode's; the prefill's is read to its end and dropped.
 */
const sglang: ConcurrentPd = {
  legs: "concurrent",
  singleRole: true,
  legBody(body, prefill, room) {
    const host = prefill.host.includes(":") && !prefill.host.startsWith("[") ? `[${prefill.host}]` : prefill.host;
    return appended(body, [
      ["bootstrap_host", JSON.stringify(host)],
      ["bootstrap_port", prefill.port === undefined ? "null" : String(prefill.port)],
      ["bootstrap_room", String(room)],
    ]);
  },
};

export const PD_PROTOCOLS = { "vllm-nixl": vllmNixl, sglang } as const satisfies Record<string, PdProtocol>;
export type PdProtocolName = keyof typeof PD_PROTOCOLS;
export const PD_PROTOCOL_NAMES = Object.keys(PD_PROTOCOLS) as [PdProtocolName, ...PdProtocolName[]];
