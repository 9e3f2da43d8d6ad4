/** Longest-prefix routing from a request path to a deployment. Pure. */
export interface Routed<T> {
  target: T;
  prefix: string;
}

export class RouteTable<T> {
  readonly #entries: { prefix: string; target: T }[];

  constructor(entries: Iterable<{ prefix: string; target: T }>) {
    this.#entries = [...entries].sort((a, b) => b.prefix.length - a.prefix.length);
  }

  /** Matches whole path segments: "/hello" takes "/hello" and "/hello/x", not "/helloworld". */
  match(path: string): Routed<T> | undefined {
    for (const e of this.#entries) {
      if (e.prefix === "/" || path === e.prefix || path.startsWith(e.prefix + "/")) return e;
    }
    return undefined;
  }

  list(): { prefix: string; target: T }[] {
    return [...this.#entries];
  }
}

/** Path forwarded to the replica when the deployment strips its prefix. */
export function stripRoutePrefix(path: string, prefix: string): string {
  if (prefix === "/") return path;
  const rest = path.slice(prefix.length);
  return rest === "" ? "/" : rest;
}
