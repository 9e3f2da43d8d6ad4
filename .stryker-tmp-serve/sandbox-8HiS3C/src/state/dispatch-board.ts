/**
 * A relay's board of its location's recent dispatches (issue 15): each isolate posts
 * the prompts it sent where (DispatchNote) with its view ask every 250 ms, and the
 * answer carries what the other isolates posted since its cursor. A conversation's
 * next turn that lands on another isolate then finds the replica holding its history
 * within ~0.25–0.5 s, where the replica's own summary takes ~1–2.5 s to reach every
 * view (report window, relay TTL, view TTL). No extra Durable Object call: the notes
 * ride on the view asks the isolates make anyway.
 *
 * Bounded in notes and time: a note is dropped after DISPATCH_BOARD_TTL_MS (by then
 * the replicas' summaries say the same), and the oldest go first past
 * DISPATCH_BOARD_MAX_NOTES. A note for a replica and prompt end already on the board
 * is not posted twice, so a busy group's shared system prompt costs one note per
 * replica, not one per request. Isolates in other locations learn from the summaries
 * alone. Pure: time is passed in.
 */
// @ts-nocheck

import { dispatchNoteId } from "../policy/dispatch-outbox.ts";
import { MAX_PEER_NOTES_PER_ANSWER } from "../protocol/limits.ts";
import type { DispatchNote, PeerDispatches } from "../protocol/messages.ts";

/** How long a note stays on the board: past the ~2.5 s a summary takes to reach every view, with margin. */
export const DISPATCH_BOARD_TTL_MS = 10_000;
/** Most notes a board holds (~1 MiB at ~128 bytes each); at 1,000 req/s of distinct prompts, ~8 s of them. */
export const DISPATCH_BOARD_MAX_NOTES = 8_192;

interface Posted {
  seq: number;
  /** The posting isolate (its seed): it is not sent its own notes back. */
  from: number;
  at: number;
  id: string;
  note: DispatchNote;
}

export class DispatchBoard {
  /** Oldest first; `#head` is the first live entry (compacted once half is dead). */
  #log: Posted[] = [];
  #head = 0;
  #seq = 0;
  /** Note id → seq of its entry on the board. */
  readonly #onBoard = new Map<string, number>();
  readonly #ttlMs: number;
  readonly #maxNotes: number;

  constructor(ttlMs = DISPATCH_BOARD_TTL_MS, maxNotes = DISPATCH_BOARD_MAX_NOTES) {
    this.#ttlMs = ttlMs;
    this.#maxNotes = maxNotes;
  }

  /** Isolate `from` posts `notes` at `now`; returns how many were new to the board. */
  post(from: number, notes: readonly DispatchNote[], now: number): number {
    this.#trim(now);
    let added = 0;
    for (const note of notes) {
      const id = dispatchNoteId(note);
      if (this.#onBoard.has(id)) continue;
      const seq = ++this.#seq;
      this.#log.push({ seq, from, at: now, id, note });
      this.#onBoard.set(id, seq);
      added++;
    }
    this.#trim(now);
    return added;
  }

  /**
   * The notes of isolates other than `from` posted after cursor `after`, the newest
   * `max` of them, oldest first, and the cursor to send next. A cursor from before a
   * restart of this board (beyond its sequence) reads from the start.
   */
  since(after: number, from: number, now: number, max = MAX_PEER_NOTES_PER_ANSWER): PeerDispatches {
    this.#trim(now);
    const start = after > this.#seq ? 0 : after;
    const notes: DispatchNote[] = [];
    for (let i = this.#log.length - 1; i >= this.#head && notes.length < max; i--) {
      const p = this.#log[i]!;
      if (p.seq <= start) break;
      if (p.from !== from) notes.push(p.note);
    }
    notes.reverse();
    return { cursor: this.#seq, notes };
  }

  /** Notes on the board. */
  get size(): number {
    return this.#log.length - this.#head;
  }

  #trim(now: number): void {
    const log = this.#log;
    while (this.#head < log.length && (log[this.#head]!.at + this.#ttlMs <= now || log.length - this.#head > this.#maxNotes)) {
      const p = log[this.#head++]!;
      if (this.#onBoard.get(p.id) === p.seq) this.#onBoard.delete(p.id);
    }
    if (this.#head > 1024 && this.#head * 2 > log.length) {
      this.#log = log.slice(this.#head);
      this.#head = 0;
    }
  }
}
