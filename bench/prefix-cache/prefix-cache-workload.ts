/**
 * The workload of bench/prefix-cache/prefix-cache.ts, pure (no I/O, no clock): the shape the
 * field benchmarks prefix-aware routing with (inference-perf's `shared_prefix`,
 * llm-d-benchmark's shared-prefix profiles), sized for a 2-core machine.
 *
 * - `groups` groups, each with one long system prompt of random printable text
 *   (`systemMin`..`systemMax` characters; the tiny LM's tokenizer is one token per
 *   character, so that many tokens). Groups share nothing from their first block on.
 * - `usersPerGroup` users per group; each holds a multi-turn conversation: the
 *   system prompt, then its previous questions and the assistant's actual answers,
 *   then a new question (`questionMin`..`questionMax` characters). After `turns`
 *   turns the user starts a new conversation in the same group.
 * - A request goes to a user who is not waiting for an answer, picked at random
 *   (a user never has two turns in flight: turn k+1 needs turn k's answer).
 *
 * Every random choice is seeded: the system prompts by the seed, each user's
 * questions by the seed and the user's index (the same question sequence in
 * every arm, whatever order the users are picked in), the picks of users by the
 * seed. Arms see the same prompts; which user gets an arrival, and so the exact
 * sequence, depends on which users are idle, i.e. on the arm's latencies.
 */
import { mulberry32 } from "../../src/seeded-random.ts";

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface WorkloadShape {
  groups: number;
  usersPerGroup: number;
  systemMin: number;
  systemMax: number;
  questionMin: number;
  questionMax: number;
  /** Turns per conversation, then a new conversation (same group, same system prompt). */
  turns: number;
}

/** One request: whose turn it is and the messages it sends. */
export interface Turn {
  user: number;
  group: number;
  /** 1-based turn within the user's current conversation. */
  turn: number;
  /** The user's conversations so far (0-based). */
  conversation: number;
  messages: ChatMessage[];
}

const LETTERS = "abcdefghijklmnopqrstuvwxyz";

/**
 * Exactly `length` characters of word-like printable text (lowercase words of 2–9
 * letters, spaces, now and then a full stop): every character is one token of the
 * tiny LM's vocabulary, and none is "\n" (the chat template's separator).
 */
export function randomText(rand: () => number, length: number): string {
  let out = "";
  while (out.length < length) {
    const word = 2 + Math.floor(rand() * 8);
    for (let i = 0; i < word && out.length < length; i++) out += LETTERS[Math.floor(rand() * LETTERS.length)];
    if (out.length < length) out += rand() < 0.08 ? "." : " ";
  }
  return out;
}

const between = (rand: () => number, min: number, max: number) => min + Math.floor(rand() * (max - min + 1));

/** A 32-bit seed for stream `k` of `seed` (independent streams from one seed). */
const subSeed = (seed: number, k: number) => (Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(k + 1, 0xc2b2ae35)) >>> 0;

interface UserState {
  group: number;
  rand: () => number;
  history: ChatMessage[];
  turn: number;
  conversation: number;
  busy: boolean;
}

export class PrefixWorkload {
  readonly shape: WorkloadShape;
  readonly systemPrompts: readonly string[];
  readonly #users: UserState[];
  readonly #pick: () => number;

  constructor(shape: WorkloadShape, seed: number) {
    for (const [k, v] of Object.entries(shape)) if (!(Number.isInteger(v) && v >= 1)) throw new RangeError(`${k} must be a positive integer, got ${v}`);
    if (shape.systemMin > shape.systemMax || shape.questionMin > shape.questionMax) throw new RangeError("min above max");
    this.shape = shape;
    const sys = mulberry32(subSeed(seed, 0));
    this.systemPrompts = Array.from({ length: shape.groups }, () => randomText(sys, between(sys, shape.systemMin, shape.systemMax)));
    this.#users = Array.from({ length: shape.groups * shape.usersPerGroup }, (_, u) => ({
      group: u % shape.groups,
      rand: mulberry32(subSeed(seed, 1 + u)),
      history: [],
      turn: 0,
      conversation: 0,
      busy: false,
    }));
    this.#pick = mulberry32(subSeed(seed, 1 + this.#users.length));
  }

  get users(): number {
    return this.#users.length;
  }

  /** Users not waiting for an answer. */
  get idle(): number {
    return this.#users.filter((u) => !u.busy).length;
  }

  /** The next request: a random idle user's next turn (the user is busy until `complete`); undefined when every user is busy. */
  next(): Turn | undefined {
    const idle = this.#users.flatMap((u, i) => (u.busy ? [] : [i]));
    if (idle.length === 0) return undefined;
    const user = idle[Math.floor(this.#pick() * idle.length)]!;
    const u = this.#users[user]!;
    if (u.turn >= this.shape.turns) {
      u.history = [];
      u.turn = 0;
      u.conversation++;
    }
    u.busy = true;
    const question = randomText(u.rand, between(u.rand, this.shape.questionMin, this.shape.questionMax));
    const messages: ChatMessage[] = [{ role: "system", content: this.systemPrompts[u.group]! }, ...u.history, { role: "user", content: question }];
    return { user, group: u.group, turn: u.turn + 1, conversation: u.conversation, messages };
  }

  /**
   * The turn's answer arrived (`answer`: the assistant's text), or the request
   * failed (undefined: the turn is dropped, the history stays as it was). The user
   * is idle again.
   */
  complete(t: Turn, answer: string | undefined): void {
    const u = this.#users[t.user]!;
    u.busy = false;
    if (answer === undefined || t.conversation !== u.conversation) return;
    u.history.push(t.messages[t.messages.length - 1]!, { role: "assistant", content: answer });
    u.turn = t.turn;
  }
}

/** Poisson arrival times (ms from 0) at `rps` over `seconds`. */
export function poissonArrivals(rps: number, seconds: number, rand: () => number): number[] {
  const out: number[] = [];
  for (let t = (-Math.log(1 - rand()) * 1000) / rps; t < seconds * 1000; t += (-Math.log(1 - rand()) * 1000) / rps) out.push(t);
  return out;
}

/** Order statistic of `xs` (nearest rank); NaN when empty. */
export function percentile(xs: readonly number[], p: number): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]! : NaN;
}
