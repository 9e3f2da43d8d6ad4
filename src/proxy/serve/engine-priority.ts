/**
 * A request's priority in its engine's own terms, for deployments whose engines
 * schedule by a request field (`openai.enginePriority`, docs/agent.md). The replica
 * agent is not on the request path (the edge dispatches straight to the engine), so
 * the edge says it, in the body it forwards. Pure.
 *
 * vLLM (`--scheduling-policy priority`): `priority` of ChatCompletionRequest,
 * CompletionRequest, ResponsesRequest and the embedding requests, an integer, default
 * 0, lower values served first; any other value than 0 is refused by an engine without
 * priority scheduling. Switchyard's priority is higher first (docs/admission.md), so
 * the engine gets it negated. Every route whose body vLLM reads `priority` from is
 * written, so a client's own `priority` never reaches the engine past its key's cap.
 */
import { OPENAI_ENDPOINTS } from "../../protocol/index.ts";

/** The engines' request fields the edge knows (`openai.enginePriority`). */
export type EnginePriority = "vllm";

/** vLLM's `priority` for a Switchyard priority: negated (vLLM serves lower first). */
export function vllmPriority(priority: number): number {
  return priority === 0 ? 0 : -priority;
}

/**
 * The /v1 body the engine gets: `body` (a JSON object, as the route checked) with its
 * top-level `priority` set to the engine's value for `priority`, or `body` itself when
 * nothing is to be said (no engine field, another path, or priority 0 and no
 * `priority` of the client's to override, since 0 is vLLM's default).
 * `bodyHasPriority`: the client's body has its own top-level `priority`.
 */
export function bodyForEngine(engine: EnginePriority | undefined, path: string, body: ArrayBuffer, priority: number, bodyHasPriority: boolean): ArrayBuffer {
  // Every /v1 body route the edge serves has vLLM's `priority`.
  if (engine !== "vllm" || !Object.hasOwn(OPENAI_ENDPOINTS, path)) return body;
  if (priority === 0 && !bodyHasPriority) return body;
  return withLastMember(body, "priority", String(vllmPriority(priority))) ?? body;
}

const isSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

/**
 * `body` with `"name":json` added as the object's last member, every other byte as it
 * was (no parse, no re-serialisation: numbers, escapes and key order untouched; the
 * body digest is taken after). A member of the same name earlier in the body is
 * overridden rather than removed: the last of duplicate names wins in Python's `json`
 * (which vLLM's FastAPI server parses bodies with; its documentation says so) and in
 * JSON.parse. Null when `body` does not end with an object's `}`.
 */
export function withLastMember(body: ArrayBuffer, name: string, json: string): ArrayBuffer | null {
  const bytes = new Uint8Array(body);
  let close = bytes.length - 1;
  while (close >= 0 && isSpace(bytes[close]!)) close--;
  if (close < 0 || bytes[close] !== 0x7d) return null;
  let before = close - 1;
  while (before >= 0 && isSpace(bytes[before]!)) before--;
  // `{}`: the member is the first, with no comma before it.
  const member = new TextEncoder().encode(`${bytes[before] === 0x7b ? "" : ","}${JSON.stringify(name)}:${json}`);
  const out = new Uint8Array(bytes.length + member.length);
  out.set(bytes.subarray(0, close), 0);
  out.set(member, close);
  out.set(bytes.subarray(close), close + member.length);
  return out.buffer;
}
