/**
 * Prefill/decode disaggregation's pure parts (issue 56): the legs' bodies in vLLM's
 * protocol with NixlConnector (src/protocol/disaggregation.ts), as its disaggregated-serving
 * proxy writes them, and in SGLang's, as its router writes them; roles and bootstrap
 * ports as registration carries them; the agent's reading of an engine's kv_role or
 * --disaggregation-mode; the deployment option, whose protocols come from the registry.
 */
import { describe, expect, it } from "vitest";
import { SGLANG_BOOTSTRAP_PORT, kvRoleOfCommand, parseAgentArgs, sglangModeOfCommand } from "../../src/agent/cli.ts";
import { DEFAULT_PD_MIN_UNCACHED_TOKENS, DEFAULT_PREFIX_POLICY, defineDeployment } from "../../src/config/deployment.ts";
import { createBalancer } from "../../src/policy/balancers/index.ts";
import { PD_PROTOCOL_NAMES, PD_PROTOCOLS, RegisterMessage } from "../../src/protocol/index.ts";
import { chooseFor } from "../../src/proxy/serve/choose.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { Membership } from "../../src/state/membership.ts";
import { registerMessage, T0 } from "../fixtures/control-messages.ts";

const bytes = (x: unknown) => new TextEncoder().encode(JSON.stringify(x)).buffer as ArrayBuffer;
const parsed = (b: ArrayBuffer | null | undefined) => JSON.parse(new TextDecoder().decode(b!)) as Record<string, unknown>;
const vllm = PD_PROTOCOLS["vllm-nixl"];

describe("vLLM's NixlConnector legs", () => {
  it("the prefill leg asks for the blocks to be kept, one token, no stream, no stream_options or min_tokens; every other byte is the client's", () => {
    const client = { model: "m", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true }, max_completion_tokens: 300, min_tokens: 5, seed: 12345678901234567890, temperature: 0.7 };
    const raw = bytes(client);
    const leg = vllm.prefillBody(raw, "chat")!;
    // Appended, not rewritten: the client's bytes come first, unchanged.
    expect(new TextDecoder().decode(leg).startsWith(new TextDecoder().decode(raw).slice(0, -1))).toBe(true);
    expect(parsed(leg)).toEqual({
      ...client,
      seed: client.seed,
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null },
      stream: false,
      stream_options: null,
      max_tokens: 1,
      max_completion_tokens: 1,
      min_tokens: 0,
    });
    // A completion has no max_completion_tokens.
    expect(parsed(vllm.prefillBody(bytes({ model: "m", prompt: "x" }), "completions"))).not.toHaveProperty("max_completion_tokens");
    expect(vllm.prefillBody(new TextEncoder().encode("[1]").buffer as ArrayBuffer, "chat")).toBeNull();
  });

  it("the decode leg carries the prefill's kv_transfer_params unchanged, and nothing when the prefill kept none", () => {
    const client = { model: "m", prompt: "x", max_tokens: 50, stream: true };
    const params = { do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [3, 4, 5], remote_engine_id: "e-1", remote_request_id: "r-1", remote_host: "10.0.0.2", remote_port: 5600, tp_size: 1, extra_field: { kept: true } };
    expect(parsed(vllm.decodeBody(bytes(client), { id: "cmpl-1", choices: [], kv_transfer_params: params }))).toEqual({ ...client, kv_transfer_params: params });
    for (const answer of [{ kv_transfer_params: null }, {}, { kv_transfer_params: [1] }, { kv_transfer_params: { do_remote_prefill: false } }, null, "x"]) {
      expect(vllm.decodeBody(bytes(client), answer)).toBeUndefined();
    }
  });
});

const sglang = PD_PROTOCOLS.sglang;

describe("SGLang's legs (its router's mini_lb: one body to both servers)", () => {
  it("appends bootstrap_host, bootstrap_port and bootstrap_room to the client's bytes, as the router's dict update does", () => {
    const client = { model: "m", messages: [{ role: "user", content: "hi" }], stream: true, max_tokens: 48, seed: 7 };
    const raw = bytes(client);
    const leg = sglang.legBody(raw, { host: "10.0.0.2", port: 8998 }, 2 ** 53 - 1)!;
    expect(new TextDecoder().decode(leg).startsWith(new TextDecoder().decode(raw).slice(0, -1))).toBe(true);
    expect(parsed(leg)).toEqual({ ...client, bootstrap_host: "10.0.0.2", bootstrap_port: 8998, bootstrap_room: 2 ** 53 - 1 });
    // An IPv6 host in brackets (maybe_wrap_ipv6_address); a prefill registered without a bootstrap port: null, as the router's None.
    expect(parsed(sglang.legBody(raw, { host: "::1", port: undefined }, 0))).toMatchObject({ bootstrap_host: "[::1]", bootstrap_port: null, bootstrap_room: 0 });
    expect(sglang.legBody(new TextEncoder().encode("[1]").buffer as ArrayBuffer, { host: "h", port: 1 }, 1)).toBeNull();
    expect(sglang.legs).toBe("concurrent");
    expect(sglang.singleRole).toBe(true);
  });
});

describe("roles", () => {
  const register = (roles: unknown) => RegisterMessage.safeParse({ protocol: 1, deployment: "d", replica_id: "r", url: "http://127.0.0.1:1", max_ongoing_requests: 1, roles });
  it("registration takes prefill, decode or both, once each; absent is both", () => {
    expect(register(["prefill"]).success).toBe(true);
    expect(register(["decode", "prefill"]).success).toBe(true);
    expect(register(undefined).success).toBe(true);
    for (const bad of [[], ["prefill", "prefill"], ["encode"], "prefill"]) expect(register(bad).success, JSON.stringify(bad)).toBe(false);
  });

  it("the agent reads an engine's kv_role from its --kv-transfer-config, or takes --engine-role", () => {
    const cfg = (role: string) => JSON.stringify({ kv_connector: "NixlConnector", kv_role: role });
    expect(kvRoleOfCommand(["vllm", "serve", "m", "--kv-transfer-config", cfg("kv_producer")])).toEqual(["prefill"]);
    expect(kvRoleOfCommand(["vllm", "serve", "m", `--kv-transfer-config=${cfg("kv_consumer")}`])).toEqual(["decode"]);
    expect(kvRoleOfCommand(["vllm", "serve", "m", "--kv-transfer-config", cfg("kv_both")])).toEqual(["prefill", "decode"]);
    expect(kvRoleOfCommand(["vllm", "serve", "m"])).toBeUndefined();
    expect(kvRoleOfCommand(["vllm", "serve", "m", "--kv-transfer-config", "{not json"])).toBeUndefined();
    const base = ["--deployment", "d", "--edge", "http://127.0.0.1:8787", "--engine-url", "http://127.0.0.1:8000"];
    const roles = (argv: string[]) => {
      const a = parseAgentArgs(argv);
      return a === "help" ? undefined : a.engines[0]!.options.roles;
    };
    expect(roles([...base, "--engine-role", "decode"])).toEqual(["decode"]);
    expect(roles([...base, "--", "vllm", "serve", "m", "--kv-transfer-config", cfg("kv_producer")])).toEqual(["prefill"]);
    expect(roles(base)).toBeUndefined();
    expect(() => roles([...base, "--engine-role", "encode"])).toThrow(/--engine-role: "encode" is not a role/);
  });

  it("the agent reads SGLang's --disaggregation-mode and bootstrap port from its command, or takes --engine-bootstrap-port", () => {
    const sg = ["python", "-m", "sglang.launch_server", "--model-path", "m"];
    expect(sglangModeOfCommand([...sg, "--disaggregation-mode", "prefill"])).toEqual({ roles: ["prefill"], bootstrapPort: SGLANG_BOOTSTRAP_PORT });
    expect(sglangModeOfCommand([...sg, "--disaggregation-mode=prefill", "--disaggregation-bootstrap-port", "30001"])).toEqual({ roles: ["prefill"], bootstrapPort: 30001 });
    expect(sglangModeOfCommand([...sg, "--disaggregation-mode", "decode", "--disaggregation-bootstrap-port", "30001"])).toEqual({ roles: ["decode"] });
    expect(sglangModeOfCommand([...sg, "--disaggregation-mode", "null"])).toBeUndefined();
    expect(sglangModeOfCommand(sg)).toBeUndefined();
    const base = ["--deployment", "d", "--edge", "http://127.0.0.1:8787", "--engine-url", "http://127.0.0.1:8000"];
    const options = (argv: string[]) => {
      const a = parseAgentArgs(argv);
      if (a === "help") throw new Error("help");
      const { roles, bootstrapPort } = a.engines[0]!.options;
      return { roles, bootstrapPort };
    };
    expect(options([...base, "--", ...sg, "--disaggregation-mode", "prefill"])).toEqual({ roles: ["prefill"], bootstrapPort: 8998 });
    expect(options([...base, "--", ...sg, "--disaggregation-mode", "decode"])).toEqual({ roles: ["decode"], bootstrapPort: undefined });
    expect(options([...base, "--engine-role", "prefill", "--engine-bootstrap-port", "9001"])).toEqual({ roles: ["prefill"], bootstrapPort: 9001 });
    expect(() => options([...base, "--engine-bootstrap-port", "70000"])).toThrow(/--engine-bootstrap-port/);
  });

  it("registration carries a bootstrap port (1-65535)", () => {
    const register = (bootstrap_port: unknown) => RegisterMessage.safeParse({ protocol: 1, deployment: "d", replica_id: "r", url: "http://127.0.0.1:1", max_ongoing_requests: 1, roles: ["prefill"], bootstrap_port });
    expect(register(8998).success).toBe(true);
    expect(register(undefined).success).toBe(true);
    for (const bad of [0, 65_536, 1.5, "8998", null]) expect(register(bad).success, JSON.stringify(bad)).toBe(false);
  });
});

describe("the legs' candidates", () => {
  it("a role takes replicas that declared it or none; with singleRole (SGLang's one mode per server) only those that declared it alone", async () => {
    const d = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "external" } });
    const m = new Membership();
    m.register(registerMessage("prefill", { roles: ["prefill"], bootstrap_port: 8998 }), T0);
    m.register(registerMessage("decode", { roles: ["decode"] }), T0);
    m.register(registerMessage("both", { roles: ["prefill", "decode"] }), T0);
    m.register(registerMessage("unified"), T0);
    const view = new RoutingView();
    view.applySnapshot(m.snapshot("llm", T0), Date.now());
    const offered = async (role: "prefill" | "decode", singleRole: boolean) => {
      const seen = new Set<string>();
      const choice = chooseFor({ deployment: d, target: { path: "/v1/chat/completions" }, view, balancer: createBalancer(d.policy.balancer, d.policy.prefix ?? DEFAULT_PREFIX_POLICY), client: "c", background: () => undefined, role, singleRole }, undefined, undefined, undefined);
      for (let attempt = 1; ; attempt++) {
        const r = await choice.next(attempt, seen);
        if (!r) return [...seen].sort();
        seen.add(r.id);
      }
    };
    expect(await offered("prefill", false)).toEqual(["both", "prefill", "unified"]);
    expect(await offered("decode", false)).toEqual(["both", "decode", "unified"]);
    expect(await offered("prefill", true)).toEqual(["prefill"]);
    expect(await offered("decode", true)).toEqual(["decode"]);
    // The bootstrap port travels with the replica to the edge's view.
    expect(view.describe(Date.now()).find((r) => r.id === "prefill")).toMatchObject({ roles: ["prefill"], bootstrapPort: 8998 });
  });
});

describe("openai.disaggregation", () => {
  it("names a registered protocol; minUncachedTokens has its default", () => {
    expect(PD_PROTOCOL_NAMES).toEqual(Object.keys(PD_PROTOCOLS));
    const d = defineDeployment({ name: "pd", routePrefix: "/pd", backend: { kind: "llm", model: "tiny-lm" }, openai: { models: ["tiny-lm"], disaggregation: { protocol: "vllm-nixl" } } });
    expect(d.openai!.disaggregation).toEqual({ protocol: "vllm-nixl", minUncachedTokens: DEFAULT_PD_MIN_UNCACHED_TOKENS });
    expect(() => defineDeployment({ name: "pd", routePrefix: "/pd", backend: { kind: "llm", model: "tiny-lm" }, openai: { models: ["tiny-lm"], disaggregation: { protocol: "nixl" as never } } })).toThrow();
  });
});
