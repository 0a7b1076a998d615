/**
 * The real CLI run as a process, for tests: exit codes and stderr are part
 * of its contract, so they are tested the way a user meets them.
 */
import { installPath } from '../../installLayout.js';
import { run, type RunResult } from '../../testing/run.js';

/** The CLI users run (bin/tendril runs it): the bundle `make build` writes. */
export const CLI_MAIN = installPath('dist', 'bundle', 'tendril.js');

export function runCli(args: readonly string[], opts: { input?: string } = {}): Promise<RunResult> {
  return run([process.execPath, CLI_MAIN, ...args], opts);
}
