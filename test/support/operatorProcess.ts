/**
 * tendril-operator as a Deployment runs it: bin/tendril-operator in a child
 * process, JSON logs kept, started once it logs that it runs (its health
 * address then known).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const OPERATOR_BIN = join(ROOT, 'bin/tendril-operator');

export interface OperatorProcess {
  id: string;
  child: ChildProcess;
  /** stderr, line by line (JSON log records). */
  lines: string[];
  /** Where /healthz and /metrics answer on 127.0.0.1. */
  port: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Starts one replica against a kubeconfig (in the network namespace at
 * `o.netnsPath`, else this process's); rejects with its last log lines if it
 * exits or does not start in 20 s.
 */
export async function spawnOperator(kubeconfig: string, id: string, extra: readonly string[], o: { netnsPath?: string } = {}): Promise<OperatorProcess> {
  const args = ['--k8s-kubeconfig', kubeconfig, '--id', id, '--health-addr', '127.0.0.1:0', '--log-format', 'json', ...extra];
  // nsenter execs the operator: the child process is the operator (a kill reaches it).
  const [cmd, argv] = o.netnsPath === undefined ? [OPERATOR_BIN, args] : ['nsenter', [`--net=${o.netnsPath}`, '--', OPERATOR_BIN, ...args]];
  const child = spawn(cmd, argv, {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const lines: string[] = [];
  let partial = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => {
    const parts = (partial + d).split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${id} exited ${child.exitCode}: ${lines.slice(-5).join('\n')}`);
    const started = lines.map((l) => JSON.parse(l) as { msg?: string; healthAddr?: string }).find((r) => r.msg === 'tendril-operator started');
    if (started !== undefined) return { id, child, lines, port: Number(started.healthAddr!.split(':').pop()), exited };
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${id} did not start in 20 s: ${lines.slice(-5).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** SIGKILL unless it has exited; resolves once it has. */
export async function killOperator(p: OperatorProcess): Promise<void> {
  if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await p.exited;
}
