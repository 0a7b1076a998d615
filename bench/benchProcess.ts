import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '../src/client/agentClient.js';

const AGENT = fileURLToPath(new URL('../../bin/tendril-agent', import.meta.url));

/** Runs a command (argv, never a shell) and resolves with its stdout; rejects with its stderr's tail. */
export function exec(argv: string[], env: NodeJS.ProcessEnv = process.env, input = ''): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = spawn(argv[0]!, argv.slice(1), { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (err += d.toString()));
    c.on('error', reject);
    c.stdin.on('error', () => undefined); // a tool that never reads stdin closes it early
    c.stdin.end(input);
    c.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${argv.join(' ')} exited ${code}: ${err.slice(-2000)}`))));
  });
}

/** Each bench agent's own bpffs root (its pinned maps and links), removed when it stops. */
const bpffsRoots = new WeakMap<ChildProcess, string>();

/**
 * A tendril-agent for a benchmark, in a node namespace, ready to serve; `extraArgs` go to
 * the agent as they are, then TENDRIL_BENCH_AGENT_ARGS (space-separated) if set, so a
 * whole bench run can try an agent flag (e.g. `--bpf-lxc-attach clsact`).
 */
export async function startBenchAgent(node: string, stateDir: string, podCidr: string, extraArgs: string[] = []): Promise<{ process: ChildProcess; client: AgentClient; socket: string; bpffsRoot: string }> {
  const socket = join(stateDir, 'tendril.sock');
  // Never the node's /sys/fs/bpf/tendril: a bench's pins live in a directory of their own on bpffs.
  const bpffsRoot = `/sys/fs/bpf/tdl-bench-${randomBytes(4).toString('hex')}`;
  await mkdir(bpffsRoot, { recursive: true });
  const proc = spawn(
    'nsenter',
    [`--net=/var/run/netns/${node}`, '--', AGENT, '--state-dir', stateDir, '--lib-dir', join(stateDir, 'lib'), '--node-name', 'tdl-bench', '--pod-cidr', podCidr, '--bpffs-root', bpffsRoot, '--log-level', 'warn', ...extraArgs, ...(process.env.TENDRIL_BENCH_AGENT_ARGS ?? '').split(' ').filter((a) => a !== '')],
    { stdio: 'ignore' },
  );
  bpffsRoots.set(proc, bpffsRoot);
  const client = new AgentClient({ socketPath: socket, timeoutMs: 30_000 });
  for (let i = 0; ; i++) {
    try {
      if ((await client.health()).status === 'ok') return { process: proc, client, socket, bpffsRoot };
    } catch (err) {
      if (i > 200 || proc.exitCode !== null) {
        proc.kill('SIGKILL');
        await rm(bpffsRoot, { recursive: true, force: true });
        throw err;
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Stops a bench agent and waits for it, so its netns and state dir can go; SIGKILL after 10 s. Its bpffs root goes too. */
export async function stopBenchAgent(proc: ChildProcess): Promise<void> {
  if (proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  const root = bpffsRoots.get(proc);
  if (root) await rm(root, { recursive: true, force: true });
}
