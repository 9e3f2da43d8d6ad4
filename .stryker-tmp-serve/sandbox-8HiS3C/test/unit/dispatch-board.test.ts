/** A relay's board of its location's recent dispatches (src/state/dispatch-board.ts) and an isolate's outbox (src/policy/dispatch-outbox.ts). */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { DispatchOutbox } from "../../src/policy/dispatch-outbox.ts";
import { DISPATCH_BOARD_TTL_MS, DispatchBoard } from "../../src/state/dispatch-board.ts";
import { RelayDispatchPost, type DispatchNote } from "../../src/protocol/index.ts";
import { MAX_DISPATCH_NOTE_KEYS, MAX_DISPATCH_NOTES_PER_POST } from "../../src/protocol/limits.ts";
import { T0 } from "../fixtures/clock.ts";

const key = (n: number) => n.toString(16).padStart(16, "0");
const note = (r: string, ...keys: number[]): DispatchNote => ({ r, k: keys.map(key) });

describe("DispatchBoard", () => {
  it("passes an isolate's notes to the others, not back to it, once per cursor", () => {
    const board = new DispatchBoard();
    expect(board.post(1, [note("r1", 1, 2), note("r2", 3)], T0)).toBe(2);
    const toTwo = board.since(0, 2, T0);
    expect(toTwo.notes).toEqual([note("r1", 1, 2), note("r2", 3)]);
    expect(board.since(0, 1, T0).notes).toEqual([]);
    // Asked again from its cursor: nothing new.
    expect(board.since(toTwo.cursor, 2, T0).notes).toEqual([]);
    board.post(3, [note("r3", 4)], T0 + 1);
    expect(board.since(toTwo.cursor, 2, T0 + 1).notes).toEqual([note("r3", 4)]);
  });

  it("keeps one note per replica and prompt end while it is on the board", () => {
    const board = new DispatchBoard();
    expect(board.post(1, [note("r1", 1, 2)], T0)).toBe(1);
    expect(board.post(2, [note("r1", 1, 2), note("r1", 9, 2)], T0 + 1)).toBe(0);
    expect(board.post(2, [note("r2", 1, 2)], T0 + 1)).toBe(1);
    expect(board.size).toBe(2);
    // Once it has left the board, the same note is news again.
    expect(board.post(2, [note("r1", 1, 2)], T0 + DISPATCH_BOARD_TTL_MS)).toBe(1);
  });

  it("forgets notes after its TTL and past its size, oldest first", () => {
    const board = new DispatchBoard(DISPATCH_BOARD_TTL_MS, 3);
    board.post(1, [note("a", 1)], T0);
    board.post(1, [note("b", 2), note("c", 3), note("d", 4)], T0 + 10);
    expect(board.size).toBe(3);
    expect(board.since(0, 2, T0 + 10).notes.map((n) => n.r)).toEqual(["b", "c", "d"]);
    expect(board.since(0, 2, T0 + 10 + DISPATCH_BOARD_TTL_MS).notes).toEqual([]);
    expect(board.size).toBe(0);
  });

  it("answers with the newest notes when more are new than an answer carries", () => {
    const board = new DispatchBoard();
    board.post(1, Array.from({ length: 10 }, (_, i) => note(`r${i}`, i + 1)), T0);
    const a = board.since(0, 2, T0, 4);
    expect(a.notes.map((n) => n.r)).toEqual(["r6", "r7", "r8", "r9"]);
    expect(board.since(a.cursor, 2, T0, 4).notes).toEqual([]);
  });

  it("reads a cursor from before its own restart from the start", () => {
    const board = new DispatchBoard();
    board.post(1, [note("r1", 1)], T0);
    expect(board.since(1_000, 2, T0).notes).toEqual([note("r1", 1)]);
  });

  it("stays bounded over many posts, and compacts its log", () => {
    const board = new DispatchBoard(DISPATCH_BOARD_TTL_MS, 100);
    for (let i = 0; i < 5_000; i++) board.post(i % 7, [note("r", i + 1)], T0 + i);
    expect(board.size).toBe(100);
    expect(board.since(0, 99, T0 + 5_000, 1_000).notes).toHaveLength(100);
  });
});

describe("RelayDispatchPost (what the relay accepts)", () => {
  it("accepts an outbox's notes and refuses malformed or oversized ones", () => {
    expect(RelayDispatchPost.safeParse({ after: 0, notes: [note("r1", 1, 2)] }).success).toBe(true);
    expect(RelayDispatchPost.safeParse({ after: -1, notes: [] }).success).toBe(false);
    expect(RelayDispatchPost.safeParse({ after: 0, notes: [{ r: "r1", k: ["XYZ"] }] }).success).toBe(false);
    expect(RelayDispatchPost.safeParse({ after: 0, notes: [{ r: "r1", k: [] }] }).success).toBe(false);
    expect(RelayDispatchPost.safeParse({ after: 0, notes: [{ r: "r 1", k: [key(1)] }] }).success).toBe(false);
    expect(RelayDispatchPost.safeParse({ after: 0, notes: [{ r: "r1", k: Array.from({ length: MAX_DISPATCH_NOTE_KEYS + 1 }, (_, i) => key(i)) }] }).success).toBe(false);
    expect(RelayDispatchPost.safeParse({ after: 0, notes: Array.from({ length: MAX_DISPATCH_NOTES_PER_POST + 1 }, (_, i) => note("r", i)) }).success).toBe(false);
    expect(RelayDispatchPost.safeParse({ after: 0, notes: [], extra: 1 }).success).toBe(false);
  });
});

describe("DispatchOutbox", () => {
  it("keeps nothing until first taken, then the newest notes, one per replica and prompt end", () => {
    const box = new DispatchOutbox(3);
    box.add("r1", [key(1)]);
    expect(box.take()).toEqual([]);
    box.add("r1", [key(1)]);
    box.add("r1", [key(1)]);
    box.add("r1", []);
    expect(box.size).toBe(1);
    for (let i = 2; i <= 5; i++) box.add(`r${i}`, [key(i)]);
    expect(box.take().map((n) => n.r)).toEqual(["r3", "r4", "r5"]);
    expect(box.size).toBe(0);
    // After a take the same note may be sent again (the board drops repeats itself).
    box.add("r1", [key(1)]);
    expect(box.take()).toEqual([note("r1", 1)]);
  });

  it("has what it posts accepted by the relay's schema", () => {
    const box = new DispatchOutbox();
    box.take();
    for (let i = 0; i < MAX_DISPATCH_NOTES_PER_POST + 10; i++) box.add(`r${i % 5}`, [key(i), key(i + 1)]);
    expect(RelayDispatchPost.safeParse({ after: 0, notes: box.take() }).success).toBe(true);
  });
});
