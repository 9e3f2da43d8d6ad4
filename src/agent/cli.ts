/** `replica agent`: placeholder until the agent lands (see issue 4). */
export async function agentMain(argv: string[]): Promise<void> {
  process.stderr.write(`replica agent: not built yet (${argv.join(" ")})\n`);
  process.exit(2);
}
