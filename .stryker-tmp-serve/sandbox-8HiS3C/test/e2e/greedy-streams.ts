/**
 * Greedy tiny-lm chat streams for the drain tests (migration-drain, migration-agent):
 * the answers an uninterrupted run gives, computed in-process by the same engine, and
 * many streams run at once through the edge, each read event by event, with a hook
 * that sees every stream's progress (to drain a replica once all are under way).
 */
// @ts-nocheck

import { expect } from "vitest";
import { LlmEngine } from "../../src/replica/llm/engine.ts";
import { loadTinyLm } from "../../src/replica/llm/load-tiny-lm.ts";
import { tinyLmGenerator } from "../../src/replica/llm/tiny-lm.ts";
import { sseData } from "../fixtures/sse.ts";

export type Messages = { role: string; content: string }[];

/** Each stream's uninterrupted greedy text and its usage, from the engine itself. */
export async function uninterrupted(messagesOf: (i: number) => Messages, streams: number, tokens: number): Promise<{ text: string; usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } }[]> {
  const { model } = await loadTinyLm({ warmupRuns: 0 });
  const engine = new LlmEngine({ model: tinyLmGenerator(model), kvBlocks: 4096 });
  const out = [];
  for (let i = 0; i < streams; i++) {
    const prompt = engine.model.prompts.chat(messagesOf(i));
    let text = "";
    for await (const piece of engine.generate({ prompt, maxTokens: tokens, sampling: { temperature: 0, topP: 1 }, ignoreEos: true })) text += piece;
    out.push({ text, usage: { prompt_tokens: prompt.length, completion_tokens: tokens, total_tokens: prompt.length + tokens } });
  }
  return out;
}

/** A stream as it goes: the replica that answered its head, and the content events so far. */
export interface Live {
  replica: string;
  chunks: number;
}

/** Runs `streams` greedy chat streams at once through `url`; `onProgress` sees them all after each content event. */
export async function greedyStreams(
  url: string,
  messagesOf: (i: number) => Messages,
  streams: number,
  tokens: number,
  onProgress: (live: readonly Live[]) => void,
): Promise<{ text: string; error: boolean; done: boolean; usage: unknown; replica: string }[]> {
  const live: Live[] = [];
  return Promise.all(
    Array.from({ length: streams }, async (_, i) => {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "tiny-lm", messages: messagesOf(i), max_tokens: tokens, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
      });
      expect(res.status).toBe(200);
      const s = { replica: res.headers.get("x-switchyard-replica")!, chunks: 0 };
      live.push(s);
      let text = "";
      let error = false;
      let done = false;
      let usage: unknown;
      for await (const data of sseData(res.body!)) {
        if (data === "[DONE]") {
          done = true;
          continue;
        }
        const chunk = JSON.parse(data) as { error?: unknown; choices?: { delta?: { content?: string } }[]; usage?: unknown };
        if (chunk.error) error = true;
        if (chunk.usage) usage = chunk.usage;
        const piece = chunk.choices?.[0]?.delta?.content;
        if (!piece) continue;
        text += piece;
        s.chunks++;
        if (live.length === streams) onProgress(live);
      }
      return { text, error, done, usage, replica: s.replica };
    }),
  );
}
