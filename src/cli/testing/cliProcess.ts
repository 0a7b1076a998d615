/**
 * The real CLI run as a process, for tests: exit codes and stderr are part
 * of its contract, so they are tested the way a user meets them.
 */
import { fileURLToPath } from 'node:url';
import { run, type RunResult } from '../../testing/run.js';

/** The compiled CLI entry point (dist/src/cli/main.js). */
export const CLI_MAIN = fileURLToPath(new URL('../main.js', import.meta.url));

export function runCli(args: readonly string[], opts: { input?: string } = {}): Promise<RunResult> {
  return run([process.execPath, CLI_MAIN, ...args], opts);
}
