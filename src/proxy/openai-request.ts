/**
 * What the edge reads from an OpenAI-style request body to route it: the model
 * (which picks the deployment and, with multiplexing, the replica), whether it
 * streams, and the session (`user`). The body itself is forwarded byte for byte;
 * the replica validates everything else. Pure.
 */
import { z } from "zod";
import type { Deployment } from "../config/deployment.ts";
import type { ErrorCode } from "../protocol/index.ts";
import { SESSION_ID } from "./request-keys.ts";

/** The POST endpoints under /v1 the edge routes by body. */
export const OPENAI_ENDPOINTS = {
  "/v1/chat/completions": "chat",
  "/v1/completions": "completions",
  "/v1/embeddings": "embeddings",
} as const;

export type OpenAIEndpoint = (typeof OPENAI_ENDPOINTS)[keyof typeof OPENAI_ENDPOINTS];

export interface OpenAIRouting {
  model: string;
  stream: boolean;
  /** Session key from the body's `user` (percent-encoded when it is not a plain session id). */
  user?: string;
}

export type OpenAIRoutingResult = { ok: true; routing: OpenAIRouting } | { ok: false; code: ErrorCode; message: string };

const TokenIds = z.array(z.number().int());
const PromptInput = z.union([z.string(), z.array(z.string()), TokenIds, z.array(TokenIds)]);

// Only the fields routing needs, plus the one field each endpoint cannot do
// without, so an obviously malformed call is refused at the edge; unknown
// fields pass through untouched (the body is forwarded as received).
const Common = {
  model: z.string().min(1, "`model` must not be empty").max(256),
  stream: z.boolean().optional(),
  user: z.string().max(256).optional(),
};

const SCHEMAS: Record<OpenAIEndpoint, z.ZodType<{ model: string; stream?: boolean | undefined; user?: string | undefined }>> = {
  chat: z.looseObject({
    ...Common,
    messages: z.array(z.looseObject({ role: z.string() })).min(1, "`messages` must not be empty"),
  }),
  completions: z.looseObject({ ...Common, prompt: PromptInput }),
  embeddings: z.looseObject({
    ...Common,
    stream: z.literal(false).optional(),
    input: PromptInput,
  }),
};

function firstIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return "invalid request body";
  const where = issue.path.length > 0 ? `\`${issue.path.join(".")}\`: ` : "";
  return `${where}${issue.message}`;
}

/** Parses and checks a request body (bytes as received) for `endpoint`. */
export function parseOpenAIBody(endpoint: OpenAIEndpoint, bytes: ArrayBuffer): OpenAIRoutingResult {
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes));
  } catch {
    return { ok: false, code: "bad_request", message: "request body is not valid JSON" };
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    return { ok: false, code: "bad_request", message: "request body must be a JSON object" };
  }
  const parsed = SCHEMAS[endpoint].safeParse(json);
  if (!parsed.success) return { ok: false, code: "bad_request", message: firstIssue(parsed.error) };
  const routing: OpenAIRouting = { model: parsed.data.model, stream: parsed.data.stream === true };
  const user = parsed.data.user;
  if (user !== undefined && user !== "") {
    // Session ids travel in a header: anything beyond visible ASCII is percent-encoded.
    const key = SESSION_ID.test(user) ? user : encodeURIComponent(user);
    if (!SESSION_ID.test(key)) return { ok: false, code: "bad_request", message: "`user` is too long to serve as a session key (at most 256 bytes once percent-encoded)" };
    routing.user = key;
  }
  return { ok: true, routing };
}

/** Model name → the deployment serving it on /v1 (names are unique, checkDeployments enforces it). */
export function openaiModelTable(deployments: readonly Deployment[]): Map<string, Deployment> {
  const table = new Map<string, Deployment>();
  for (const d of deployments) for (const m of d.openai?.models ?? []) table.set(m, d);
  return table;
}

/** The largest body any /v1 deployment accepts: the bound for reading a body before its model is known. */
export function openaiBodyLimit(deployments: readonly Deployment[]): number {
  let limit = 0;
  for (const d of deployments) if (d.openai) limit = Math.max(limit, d.limits.maxRequestBodyBytes);
  return limit;
}
