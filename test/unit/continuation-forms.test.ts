/**
 * Continuation forms (docs/migration.md, docs/protocol.md §1): a replica may declare at
 * register which stream continuations its engine takes (the agent's --engine-continues);
 * the routing object keeps the declaration with the replica's identity, snapshots carry
 * it, and the choice of a replica for a continuation takes only those that take its form.
 */
import { describe, expect, it } from "vitest";
import { DEFAULT_PREFIX_POLICY, defineDeployment } from "../../src/config/deployment.ts";
import { createBalancer } from "../../src/policy/balancers/index.ts";
import { RegisterMessage } from "../../src/protocol/index.ts";
import { chooseFor } from "../../src/proxy/serve/choose.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { Membership } from "../../src/state/membership.ts";
import { registerMessage, reportMessage, T0 } from "../fixtures/control-messages.ts";

describe("continuation forms", () => {
  it("are declared at register: none, chat, completion or both; anything else is refused", () => {
    for (const continues of [[], ["chat"], ["completion"], ["chat", "completion"]]) expect(RegisterMessage.safeParse(registerMessage("r", { continues } as never)).success).toBe(true);
    expect(RegisterMessage.safeParse({ ...registerMessage("r"), continues: ["tokens"] }).success).toBe(false);
    expect(RegisterMessage.safeParse({ ...registerMessage("r"), continues: ["chat", "completion", "chat"] }).success).toBe(false);
  });

  it("are kept with the replica's identity and shown in snapshots only where declared", () => {
    const m = new Membership();
    expect(m.register(registerMessage("a", { continues: ["chat"] }), T0)).toBe(true);
    expect(m.register(registerMessage("b"), T0)).toBe(true);
    // A register that changes only the forms is a change to persist.
    expect(m.register(registerMessage("a", { continues: ["chat"] }), T0 + 1)).toBe(false);
    expect(m.register(registerMessage("a", { continues: [] }), T0 + 2)).toBe(true);
    m.report(reportMessage("a", 1), T0 + 3);
    m.report(reportMessage("b", 1), T0 + 3);
    const byId = new Map(m.snapshot("llm", T0 + 4).replicas.map((r) => [r.id, r]));
    expect(byId.get("a")!.continues).toEqual([]);
    expect(byId.get("b")).not.toHaveProperty("continues");
  });

  it("narrow the replicas a continuation may go to: those that declared its form, or declared none", async () => {
    const d = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "external" } });
    const m = new Membership();
    m.register(registerMessage("chat-only", { continues: ["chat"] }), T0);
    m.register(registerMessage("none", { continues: [] }), T0);
    m.register(registerMessage("both"), T0);
    const now = Date.now();
    const view = new RoutingView();
    view.applySnapshot(m.snapshot("llm", T0), now);
    const choose = async (continuation?: "chat" | "completion") => {
      const seen = new Set<string>();
      const choice = chooseFor({ deployment: d, target: { path: "/v1/chat/completions" }, view, balancer: createBalancer(d.policy.balancer, d.policy.prefix ?? DEFAULT_PREFIX_POLICY), client: "c", background: () => undefined, ...(continuation ? { continuation } : {}) }, undefined, undefined, undefined);
      // Every replica the choice offers, one attempt after another.
      for (let attempt = 1; ; attempt++) {
        const r = await choice.next(attempt, seen);
        if (!r) return [...seen].sort();
        seen.add(r.id);
      }
    };
    expect(await choose()).toEqual(["both", "chat-only", "none"]);
    expect(await choose("chat")).toEqual(["both", "chat-only"]);
    expect(await choose("completion")).toEqual(["both"]);
  });
});
