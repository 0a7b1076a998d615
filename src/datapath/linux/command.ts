import { spawn } from 'node:child_process';
import { validateAbsolutePath } from '../../cni/index.js';

/** Why a kernel-facing command failed, as far as callers need to branch on it. */
export type DatapathErrorKind = 'not-found' | 'exists' | 'netns-gone' | 'failed';

export class DatapathError extends Error {
  constructor(
    readonly kind: DatapathErrorKind,
    message: string,
    readonly argv: readonly string[] = [],
    readonly stderr: string = '',
  ) {
    super(message);
    this.name = 'DatapathError';
  }
}

function classify(stderr: string): DatapathErrorKind {
  if (/Cannot find device|does not exist|No such device|not found/i.test(stderr)) return 'not-found';
  if (/File exists/i.test(stderr)) return 'exists';
  if (/nsenter: .*No such file or directory|reassociate to namespace/i.test(stderr)) return 'netns-gone';
  return 'failed';
}

export interface CommandOptions {
  /** Run inside this network namespace (a path such as /var/run/netns/x or /proc/<pid>/ns/net). */
  netns?: string;
  input?: string;
}

/**
 * Runs a network tool with an argv array — never a shell — optionally inside
 * a network namespace via nsenter, which (unlike `ip netns exec`) leaves /sys
 * and the mount namespace alone.
 */
export function runCommand(argv: readonly string[], opts: CommandOptions = {}): Promise<string> {
  let full = [...argv];
  if (opts.netns !== undefined) {
    validateAbsolutePath(opts.netns, 'netns path');
    full = ['nsenter', `--net=${opts.netns}`, '--', ...argv];
  }
  const [cmd, ...args] = full;
  return new Promise((resolve, reject) => {
    const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    child.on('error', (e) => reject(new DatapathError('failed', `cannot run ${cmd}: ${e.message}`, full)));
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
    child.on('close', (code) => {
      const stdout = Buffer.concat(out).toString();
      const stderr = Buffer.concat(err).toString().trim();
      if (code === 0) resolve(stdout);
      else reject(new DatapathError(classify(stderr), `${full.join(' ')}: ${stderr || `exit ${code}`}`, full, stderr));
    });
  });
}

/** `ip` with arguments; `ip -batch -` when given several commands, one process for all. */
export function ip(args: readonly string[], opts: CommandOptions = {}): Promise<string> {
  return runCommand(['ip', ...args], opts);
}

/** Runs several `ip` commands in one process; stops at the first failure. */
export function ipBatch(commands: ReadonlyArray<readonly string[]>, opts: Omit<CommandOptions, 'input'> = {}): Promise<string> {
  for (const c of commands) {
    for (const token of c) {
      // Batch lines are split on whitespace: a token with whitespace or quoting would change meaning.
      if (token === '' || /[\s"'\\#]/.test(token)) throw new DatapathError('failed', `unsafe token in ip batch: ${JSON.stringify(token)}`);
    }
  }
  return runCommand(['ip', '-batch', '-'], { ...opts, input: commands.map((c) => c.join(' ')).join('\n') + '\n' });
}
