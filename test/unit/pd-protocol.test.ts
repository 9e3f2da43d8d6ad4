/**
 * Prefill/decode disaggregation's pure parts (issue 56): the legs' bodies in vLLM's
 * protocol with NixlConnector (src/protocol/disaggregation.ts), as its disaggregated-serving
 * proxy writes them; roles as registration carries them; the agent's reading of an
 * engine's kv_role; the deployment option, whose protocols come from the registry.
 */
import { describe, expect, it } from "vitest";
import { kvRoleOfCommand, parseAgentArgs } from "../../src/agent/cli.ts";
import { DEFAULT_PD_MIN_UNCACHED_TOKENS, defineDeployment } from "../../src/config/deployment.ts";
import { PD_PROTOCOL_NAMES, PD_PROTOCOLS, RegisterMessage } from "../../src/protocol/index.ts";

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
});

describe("openai.disaggregation", () => {
  it("names a registered protocol; minUncachedTokens has its default", () => {
    expect(PD_PROTOCOL_NAMES).toEqual(Object.keys(PD_PROTOCOLS));
    const d = defineDeployment({ name: "pd", routePrefix: "/pd", backend: { kind: "llm", model: "tiny-lm" }, openai: { models: ["tiny-lm"], disaggregation: { protocol: "vllm-nixl" } } });
    expect(d.openai!.disaggregation).toEqual({ protocol: "vllm-nixl", minUncachedTokens: DEFAULT_PD_MIN_UNCACHED_TOKENS });
    expect(() => defineDeployment({ name: "pd", routePrefix: "/pd", backend: { kind: "llm", model: "tiny-lm" }, openai: { models: ["tiny-lm"], disaggregation: { protocol: "nixl" as never } } })).toThrow();
  });
});
