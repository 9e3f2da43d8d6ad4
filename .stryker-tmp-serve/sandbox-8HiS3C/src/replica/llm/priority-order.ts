/**
 * The order of an engine's waiting requests, wherever they wait (the prefill lane's
 * queue, the KV cache's waiting queue): higher priority first, first come first served
 * within a priority. Priorities are Switchyard's (the edge's x-switchyard-priority:
 * critical 1, standard 0, sheddable -1), so with every request at 0 the order is the
 * plain FIFO it was. Pure; the queues are small arrays, kept in order on insertion.
 */
// @ts-nocheck

export interface Prioritised {
  readonly priority: number;
}

/** Adds `item` behind every item of its priority or higher (FIFO within a priority). O(1) when all are equal. */
export function enqueueByPriority<T extends Prioritised>(queue: T[], item: T): void {
  let at = queue.length;
  while (at > 0 && queue[at - 1]!.priority < item.priority) at--;
  queue.splice(at, 0, item);
}

/**
 * Puts `item` back ahead of every item of its priority, behind every higher one: a
 * preempted request, which was scheduled before any of them (vLLM puts it back at the
 * front of its waiting queue).
 */
export function requeueFirstInPriority<T extends Prioritised>(queue: T[], item: T): void {
  let at = 0;
  while (at < queue.length && queue[at]!.priority > item.priority) at++;
  queue.splice(at, 0, item);
}

/**
 * The running request to preempt when a running one needs a block and none is free:
 * the lowest priority, and of those the most recently scheduled (`running` is in
 * scheduling order), so a critical request is not recomputed for a sheddable one.
 */
export function preemptionVictim<T extends Prioritised>(running: readonly T[]): T | undefined {
  let victim = running[running.length - 1];
  for (let i = running.length - 2; i >= 0; i--) if (running[i]!.priority < victim!.priority) victim = running[i];
  return victim;
}
