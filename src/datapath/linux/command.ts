import { spawn } from 'node:child_process';
import { DatapathError, type DatapathErrorKind } from '../types.js';

// One error type for every datapath implementation (the fake included) lives beside the interface.
export { DatapathError, type DatapathErrorKind };

function classify(stderr: string): DatapathErrorKind {
  if (/Cannot find device|does not exist|No such device|not found/i.test(stderr)) return 'not-found';
  if (/File exists/i.test(stderr)) return 'exists';
  return 'failed';
}

export interface CommandOptions {
  input?: string;
}

/**
 * Runs a network tool with an argv array, never a shell. Only one-time node
 * setup uses it (`nft` for masquerading); pods are plumbed through netlink
 * (../kernel/netlink) without any process.
 */
export function runCommand(argv: readonly string[], opts: CommandOptions = {}): Promise<string> {
  const full = [...argv];
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
