/**
 * The contract between the reference replica and the models it can serve.
 *
 * A model takes a JSON value (already parsed from the request body), validates
 * it, runs real inference and returns a JSON-serialisable result. Bad input is
 * reported with `ModelInputError`, which the replica maps to a 4xx response;
 * any other error is the replica's fault (5xx).
 */
export interface InferenceModel {
  /** Stable identifier, e.g. "silero-vad". */
  readonly id: string;
  /** One line: what the model is and where its weights come from. */
  readonly description: string;
  /** A JSON value that is valid input (used in the README curl example and tests). */
  readonly inputExample: unknown;
  /** Validates `input`; throws `ModelInputError` when it is not acceptable. */
  infer(input: unknown): Promise<unknown>;
}

/** The request's input was rejected by the model's schema (a client error). */
export class ModelInputError extends Error {
  /** Machine-readable details (zod issues), safe to return to the client. */
  readonly issues?: unknown;

  constructor(message: string, issues?: unknown) {
    super(message);
    this.name = "ModelInputError";
    this.issues = issues;
  }
}
