/**
 * A minimal DevTools-protocol client for workerd's V8 inspector (the local stack
 * opens it with SWITCHYARD_WORKERD_INSPECTOR): connects to the edge isolate and
 * sends commands. Used by bench/profile/profile-proxy.ts (CPU profile) and
 * bench/request-path/request-path.ts (precise coverage).
 */
export interface Inspector {
  call(method: string, params?: object): Promise<unknown>;
  on(event: string, listener: (params: never) => void): void;
  close(): void;
}

export async function connectInspector(port: number): Promise<Inspector> {
  if (typeof WebSocket === "undefined") throw new Error("needs a global WebSocket (Node 22 or later)");
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as { title: string; webSocketDebuggerUrl: string }[];
  const edge = targets.find((t) => t.title.includes("edge")) ?? targets[0];
  if (!edge) throw new Error("workerd's inspector lists no isolate");
  const ws = new WebSocket(edge.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.addEventListener("open", resolve);
    ws.addEventListener("error", reject);
  });
  let nextId = 0;
  const waiting = new Map<number, { resolve: (result: unknown) => void; reject: (err: Error) => void }>();
  const listeners = new Map<string, ((params: never) => void)[]>();
  ws.addEventListener("message", (e) => {
    const m = JSON.parse(String(e.data)) as { id?: number; result?: unknown; error?: { message?: string }; method?: string; params?: unknown };
    if (m.id !== undefined) {
      const w = waiting.get(m.id);
      waiting.delete(m.id);
      if (m.error) w?.reject(new Error(`inspector: ${m.error.message ?? JSON.stringify(m.error)}`));
      else w?.resolve(m.result);
    } else if (m.method) for (const l of listeners.get(m.method) ?? []) l(m.params as never);
  });
  return {
    call: (method, params = {}) =>
      new Promise((resolve, reject) => {
        const id = ++nextId;
        waiting.set(id, { resolve, reject });
        ws.send(JSON.stringify({ id, method, params }));
      }),
    on: (event, listener) => listeners.set(event, [...(listeners.get(event) ?? []), listener]),
    close: () => ws.close(),
  };
}
