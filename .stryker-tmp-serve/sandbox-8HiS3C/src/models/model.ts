/**
 * The contract between the reference replica and the models it can serve.
 *
 * A model takes a JSON value (already parsed from the request body), validates
 * it, runs real inference and returns a JSON-serialisable result. Bad input is
 * reported with `ModelInputError`, which the replica maps to a 4xx response;
 * any other error is the replica's fault (5xx).
 */
// @ts-nocheck

export interface InferenceModel {
  /** Stable identifier, e.g. "silero-vad-v5". */
  readonly id: string;
  /** One line: what the model is and where its weights come from. */
  readonly description: string;
  /** A JSON value that is valid input (used in the README curl example and tests). */
  readonly inputExample: unknown;
  /** Validates `input`; throws `ModelInputError` when it is not acceptable. */
  infer(input: unknown): Promise<unknown>;
  /**
   * Frees the model's resources (its ORT session) once the runs already started have
   * finished. Idempotent; `infer` rejects afterwards. Called by the owner of its
   * lifetime (ModelCache), never while a request still uses the model.
   */
  release(): Promise<void>;
}

/** The largest model input (JSON body) a replica, or the edge serving the same model, accepts. */
export const MAX_MODEL_INPUT_BYTES = 4 * 1024 * 1024;

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

/** The named model does not exist (or this replica does not serve it): a 404 for the client. */
export class UnknownModelError extends Error {
  readonly modelId: string;
  /** The ids that would have been accepted. */
  readonly known: readonly string[];

  constructor(modelId: string, known: readonly string[]) {
    super(`unknown model "${modelId}"; known models: ${known.join(", ") || "(none)"}`);
    this.name = "UnknownModelError";
    this.modelId = modelId;
    this.known = known;
  }
}
