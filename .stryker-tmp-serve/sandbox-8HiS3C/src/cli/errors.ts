/** Exit codes: 0 success, 1 runtime failure, 2 usage error (with the usage on stderr). */
// @ts-nocheck

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/** A failure the CLI reports as one line on stderr and an exit code. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT_FAILURE,
  ) {
    super(message);
  }
}

/** A usage error: exit 2, the message and then the command's usage on stderr. */
export class UsageError extends CliError {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message, EXIT_USAGE);
  }
}
