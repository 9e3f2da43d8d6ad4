/**
 * Prefix block keys: the names every side gives a prompt's KV blocks, so that an edge
 * isolate, the reference replica and the replica agent agree on which blocks a replica
 * holds without talking to each other per request.
 *
 * The shape is vLLM's automatic prefix caching (vllm/v1/core/kv_cache_utils.py): a
 * block is BLOCK_TOKENS tokens, only full blocks have a key, and block i's key is
 * hash(key of block i-1, the block's token ids, extra keys), so a key names the whole
 * prefix up to the end of its block. The extra keys here are one string (the adapter /
 * multiplexed model the request names; "" for the base model), folded into every block
 * as vLLM folds lora_name into each block's extra keys.
 *
 * The hash itself is Switchyard's, not vLLM's: vLLM's default is sha256 over a pickle
 * (or CBOR) with a per-process random seed unless PYTHONHASHSEED is set, which an edge
 * could neither reproduce cheaply nor learn. This one is two 32-bit murmur3-style lanes
 * (64 bits), synchronous and allocation-light, so an isolate hashes a 6,000-token prompt
 * in well under a millisecond. The agent renames a vLLM engine's blocks into these keys
 * from the token ids its KV events carry (docs/prefix-routing.md), so no engine setting
 * has to match the edge's hash.
 *
 * Pure: no I/O, no Node or Workers APIs.
 */
// @ts-nocheck


import { BLOCK_TOKENS } from "../protocol/limits.ts";
import { mix } from "../protocol/hashing.ts";

export { BLOCK_TOKENS };

/** A block key: 16 lowercase hex digits (64 bits, lane 1 then lane 2). */
export type BlockKey = string;

/** The key of "no parent": the first block's parent. Versioned so a hash change cannot mix with old keys. */
const ROOT_1 = 0x53595031; // "SYP1"
const ROOT_2 = 0x626b7631; // "bkv1"
const SEED_1 = 0x9747b28c;
const SEED_2 = 0x3c6ef372;

function round(h: number, k: number, c1: number, c2: number): number {
  k = Math.imul(k, c1);
  k = (k << 15) | (k >>> 17);
  k = Math.imul(k, c2);
  h ^= k;
  h = (h << 13) | (h >>> 19);
  return (Math.imul(h, 5) + 0xe6546b64) | 0;
}

/** murmur3's finish: the length folded in, then fmix32. */
const fmix = (h: number, length: number): number => mix(h ^ length);

/** Two 32-bit lanes of a string (the extra keys), hashed once per request. */
export function extraLanes(extra: string): [number, number] {
  let a = SEED_1 ^ 0x45585452; // "EXTR"
  let b = SEED_2 ^ 0x45585452;
  for (let i = 0; i < extra.length; i++) {
    const c = extra.charCodeAt(i);
    a = round(a, c, 0xcc9e2d51, 0x1b873593);
    b = round(b, c, 0x85ebca77, 0xc2b2ae3d);
  }
  return [fmix(a, extra.length), fmix(b, extra.length)];
}

const hex8 = (n: number) => (n >>> 0).toString(16).padStart(8, "0");

/** The two lanes of a key (for summaries that index by them). Undefined when `key` is not a block key. */
export function keyLanes(key: BlockKey): [number, number] | undefined {
  if (key.length !== 16) return undefined;
  const a = Number.parseInt(key.slice(0, 8), 16);
  const b = Number.parseInt(key.slice(8), 16);
  if (!Number.isFinite(a) || !Number.isFinite(b)) return undefined;
  return [a >>> 0, b >>> 0];
}

/** A key as the unsigned 64-bit integer vLLM's int block hashes carry (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES). */
export function keyToBigInt(key: BlockKey): bigint {
  return BigInt(`0x${key}`);
}

/** The key an unsigned 64-bit integer names (inverse of keyToBigInt). */
export function bigIntToKey(n: bigint): BlockKey {
  return BigInt.asUintN(64, n).toString(16).padStart(16, "0");
}

/**
 * The key of one block: `parent` (undefined for the first block), the block's token
 * ids (exactly BLOCK_TOKENS of them, from `tokens[start]`), and the request's extra lanes.
 */
export function blockKey(parent: BlockKey | undefined, tokens: ArrayLike<number>, start: number, extra: readonly [number, number], size = BLOCK_TOKENS): BlockKey {
  const p: readonly [number, number] | undefined = parent === undefined ? [ROOT_1, ROOT_2] : keyLanes(parent);
  if (!p) throw new RangeError(`not a block key: ${parent}`);
  let a = SEED_1;
  let b = SEED_2;
  a = round(a, p[0], 0xcc9e2d51, 0x1b873593);
  a = round(a, p[1], 0xcc9e2d51, 0x1b873593);
  b = round(b, p[1], 0x85ebca77, 0xc2b2ae3d);
  b = round(b, p[0], 0x85ebca77, 0xc2b2ae3d);
  a = round(a, extra[0], 0xcc9e2d51, 0x1b873593);
  b = round(b, extra[1], 0x85ebca77, 0xc2b2ae3d);
  for (let i = start; i < start + size; i++) {
    const t = tokens[i]! | 0;
    a = round(a, t, 0xcc9e2d51, 0x1b873593);
    b = round(b, t, 0x85ebca77, 0xc2b2ae3d);
  }
  return hex8(fmix(a, size)) + hex8(fmix(b, size));
}

export interface BlockKeyOptions {
  /** Extra keys folded into every block: the adapter / multiplexed model, "" for the base model. */
  extra?: string;
  /** Tokens per block (default BLOCK_TOKENS). */
  blockSize?: number;
  /** At most this many blocks (the first ones); bounds the edge's work on huge prompts. */
  maxBlocks?: number;
}

/** The keys of every full block of `tokens`, in order (a partial last block has none, as in vLLM). */
export function blockKeys(tokens: ArrayLike<number>, options: BlockKeyOptions = {}): BlockKey[] {
  const size = options.blockSize ?? BLOCK_TOKENS;
  const extra = extraLanes(options.extra ?? "");
  const n = Math.min(Math.floor(tokens.length / size), options.maxBlocks ?? Number.MAX_SAFE_INTEGER);
  const keys: BlockKey[] = new Array(n);
  let parent: BlockKey | undefined;
  for (let i = 0; i < n; i++) {
    parent = blockKey(parent, tokens, i * size, extra, size);
    keys[i] = parent;
  }
  return keys;
}
