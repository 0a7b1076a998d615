import { spawn } from 'node:child_process';

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * The environment for tools a test runs (ip, nft, ping…): the test's own,
 * without a sanitizer preload. `make check-native` preloads ASan into node to
 * test the native addon; iproute2 itself trips ASan (strncpy overlap in
 * print_route), and the tools are not what is under test.
 */
export function toolEnv(env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  if (env.LD_PRELOAD === undefined) return env;
  const { LD_PRELOAD: _preload, ...rest } = env;
  return rest;
}

/** Runs a command with an argv array (never a shell) and collects its output. */
export function run(argv: readonly string[], opts: { env?: NodeJS.ProcessEnv; input?: string; timeoutMs?: number } = {}): Promise<RunResult> {
  const [cmd, ...args] = argv;
  if (!cmd) throw new Error('run: empty argv');
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: opts.env ?? toolEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal ? 128 : 1), stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() });
    });
  });
}

/** Runs a command and fails with its stderr when it exits non-zero. */
export async function runOk(argv: readonly string[], opts: { env?: NodeJS.ProcessEnv; input?: string } = {}): Promise<string> {
  const r = await run(argv, opts);
  if (r.code !== 0) throw new Error(`${argv.join(' ')} exited ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
  return r.stdout;
}
