/**
 * The local actuator's decisions (src/local/actuator.ts) over a fleet whose starts
 * and stops the test completes by hand; test/e2e/scale-to-zero.test.ts runs it on
 * the real stack.
 */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { LocalActuator, type ReplicaFleet } from "../../src/local/actuator.ts";

function fleet(desired: number | null) {
  const running: string[] = [];
  const pending: (() => void)[] = [];
  const stopped: string[] = [];
  let n = 0;
  const f: ReplicaFleet & { want: number | null } = {
    want: desired,
    desired: () => Promise.resolve(f.want),
    running: () => [...running],
    start: () =>
      new Promise<void>((resolve) => {
        const id = `r-${++n}`;
        pending.push(() => {
          running.push(id);
          resolve();
        });
      }),
    stop: (id) => {
      stopped.push(id);
      running.splice(running.indexOf(id), 1);
      return Promise.resolve();
    },
  };
  return { f, running, pending, stopped };
}

const settle = () => new Promise<void>((r) => setTimeout(r, 0));

describe("LocalActuator", () => {
  it("does nothing while the count is not settled (a restarted routing object counting replicas it has not heard from)", async () => {
    const { f, pending, running, stopped } = fleet(null);
    const a = new LocalActuator(f, ["d"]);
    await a.tick();
    expect(pending).toHaveLength(0);
    f.want = 1;
    await a.tick();
    pending.shift()!();
    await settle();
    expect(running).toEqual(["r-1"]);
    f.want = null;
    await a.tick();
    expect({ pending: pending.length, stopped }).toEqual({ pending: 0, stopped: [] });
  });

  it("from zero starts one replica, and the rest once it has registered", async () => {
    const { f, pending, running } = fleet(4);
    const a = new LocalActuator(f, ["d"]);
    await a.tick();
    expect(pending).toHaveLength(1);
    await a.tick(); // still starting: no second one
    expect(pending).toHaveLength(1);
    pending.shift()!();
    await settle();
    expect(running).toEqual(["r-1"]);
    await a.tick();
    expect(pending).toHaveLength(3);
    for (const p of pending.splice(0)) p();
    await settle();
    await a.tick();
    expect(running).toHaveLength(4);
    expect(pending).toHaveLength(0);
  });

  it("with replicas running, starts every missing one at once", async () => {
    const { f, pending, running } = fleet(1);
    const a = new LocalActuator(f, ["d"]);
    await a.tick();
    pending.shift()!();
    await settle();
    f.want = 3;
    await a.tick();
    expect(pending).toHaveLength(2);
    expect(running).toHaveLength(1);
  });

  it("scales down newest first, and to zero", async () => {
    const { f, pending, running, stopped } = fleet(1);
    const a = new LocalActuator(f, ["d"]);
    await a.tick();
    pending.shift()!();
    await settle();
    f.want = 3;
    await a.tick();
    for (const p of pending.splice(0)) p();
    await settle();
    f.want = 1;
    await a.tick();
    await settle();
    expect(stopped.sort()).toEqual(["r-2", "r-3"]);
    f.want = 0;
    await a.tick();
    await settle();
    expect(running).toEqual([]);
  });
});
