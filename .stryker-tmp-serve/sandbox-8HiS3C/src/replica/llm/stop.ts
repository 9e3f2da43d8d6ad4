/**
 * Stop strings for streamed generation, with OpenAI's semantics: generation ends at the
 * first occurrence of any stop string in the generated text, and the stop string itself
 * is not returned. While streaming, text that could be the start of a stop string is held
 * back until the next tokens show whether it is one (so no chunk ever carries part of a
 * stop string). Pure.
 */
// @ts-nocheck

export class StopMatcher {
  readonly #stops: readonly string[];
  /** Generated text not yet released (always a possible start of a stop string). */
  #held = "";
  #stopped = false;

  constructor(stops: readonly string[]) {
    this.#stops = stops.filter((s) => s.length > 0);
  }

  get stopped(): boolean {
    return this.#stopped;
  }

  /**
   * Adds a token's text. Returns the text that may be sent now (possibly "") and whether
   * a stop string was completed (then nothing more is to be generated).
   */
  push(text: string): { emit: string; stopped: boolean } {
    if (this.#stopped) return { emit: "", stopped: true };
    const buffer = this.#held + text;
    let first = -1;
    for (const s of this.#stops) {
      const i = buffer.indexOf(s);
      if (i >= 0 && (first < 0 || i < first)) first = i;
    }
    if (first >= 0) {
      this.#held = "";
      this.#stopped = true;
      return { emit: buffer.slice(0, first), stopped: true };
    }
    // Hold back the longest suffix that is a proper prefix of some stop string.
    let hold = 0;
    for (const s of this.#stops) {
      for (let k = Math.min(s.length - 1, buffer.length); k > hold; k--) {
        if (buffer.endsWith(s.slice(0, k))) {
          hold = k;
          break;
        }
      }
    }
    this.#held = buffer.slice(buffer.length - hold);
    return { emit: buffer.slice(0, buffer.length - hold), stopped: false };
  }

  /** At the end of generation without a stop: the text still held back. */
  flush(): string {
    const rest = this.#stopped ? "" : this.#held;
    this.#held = "";
    return rest;
  }
}
