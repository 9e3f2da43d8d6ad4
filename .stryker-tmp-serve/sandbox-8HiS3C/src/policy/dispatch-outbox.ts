/**
 * One balancer instance's dispatches not yet told to its peers: what the isolate
 * posts to its location's relay with its next view ask (src/state/dispatch-board.ts).
 * Bounded (the newest MAX_DISPATCH_NOTES_PER_POST), one note per replica and prompt
 * end, and empty until the first take: an isolate without a relay never drains it,
 * so it never fills it either. Pure state.
 */
// @ts-nocheck

import type { BlockKey } from "../prefix/block-keys.ts";
import { MAX_DISPATCH_NOTES_PER_POST } from "../protocol/limits.ts";
import type { DispatchNote } from "../protocol/messages.ts";

/** A note's identity, where the outbox and the relay's board take a note once: its replica and its prompt's last kept key. */
export const dispatchNoteId = (note: DispatchNote): string => `${note.r} ${note.k[note.k.length - 1]!}`;

export class DispatchOutbox {
  #notes: DispatchNote[] = [];
  /** `replica prompt-end-key` of the notes held: a prompt sent twice to one replica is told once. */
  #held = new Set<string>();
  #armed = false;
  readonly #max: number;

  constructor(max = MAX_DISPATCH_NOTES_PER_POST) {
    this.#max = max;
  }

  /**
   * `replica` accepted a prompt whose kept keys (recent-prefixes.ts keptKeys) are `kept`.
   * The outbox keeps the array itself (keptKeys makes a new one per prompt): the caller
   * must not change it.
   */
  add(replica: string, kept: BlockKey[]): void {
    if (!this.#armed || kept.length === 0) return;
    const note = { r: replica, k: kept };
    const id = dispatchNoteId(note);
    if (this.#held.has(id)) return;
    this.#held.add(id);
    this.#notes.push(note);
    if (this.#notes.length > this.#max) this.#held.delete(dispatchNoteId(this.#notes.shift()!));
  }

  /** The notes since the last take, oldest first; from now on dispatches are kept for the next. */
  take(): DispatchNote[] {
    this.#armed = true;
    const out = this.#notes;
    this.#notes = [];
    this.#held = new Set();
    return out;
  }

  get size(): number {
    return this.#notes.length;
  }
}
