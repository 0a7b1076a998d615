// The native connection client and server (bench/native/crr.c, built into
// build/bench/crr by `make build`) run inside a network namespace: the benches
// and the end-to-end tests that count connections use it, because a Node.js
// client's own cost per connection (~300 µs) would hide the datapath's.
import { type ChildProcess, spawn } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { run, toolEnv } from './run.js';

/** The crr binary; TENDRIL_CRR_BIN swaps in another build of it (`make check-native`: the ASan one). */
export const CRR_BIN = process.env.TENDRIL_CRR_BIN ?? fileURLToPath(new URL('../../../build/bench/crr', import.meta.url));

/** What one `crr client` run prints. */
export interface CrrResult {
  connections: number;
  errorCount: number;
  /** Failed connections by `<step>:<errno name>`: step socket, connect, write or read; `timeout` past -T, `eof` a close before the answer. */
  errors: Record<string, number>;
  seconds: number;
  connPerS: number;
  /** Per answered connection, from socket() to the answer read (µs, ~3% buckets). */
  latencyUs: { p50: number; p99: number; p999: number; max: number };
  /** The client process's CPU time over the run (µs). */
  cpuUs: { user: number; system: number };
  threads: number;
  destinations: number;
  close: 'rst' | 'fin';
  /** Connections answered in each second of the run (the last entry: the tail past the duration). */
  perSecond: number[];
}

export interface CrrClientOptions {
  /** `ADDR:PORT`, ADDR may be a range `FIRST-LAST`, PORT a range `LO-HI`. */
  destinations: readonly string[];
  seconds: number;
  threads?: number;
  /** Per step (connect, write, read); past it the connection counts as an error (default 5000). */
  timeoutMs?: number;
  /** Close with FIN (the client then holds TIME_WAIT) instead of RST. */
  fin?: boolean;
  /** CPUs to run on (taskset's list), e.g. '0'. */
  cpus?: string;
  /** Each thread pauses this long after each connection (µs): a steady rate instead of as fast as it can. */
  pauseUs?: number;
}

const inNetns = (netnsPath: string, argv: readonly string[], cpus?: string) => [...(cpus !== undefined ? ['taskset', '-c', cpus] : []), 'nsenter', `--net=${netnsPath}`, '--', ...argv];

/** One `crr client` run inside the namespace at `netnsPath`; its JSON result. */
export async function runCrrClient(netnsPath: string, opts: CrrClientOptions): Promise<CrrResult> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const argv = [CRR_BIN, 'client', '-t', String(opts.threads ?? 2), '-d', String(opts.seconds), '-T', String(timeoutMs), ...(opts.fin ? ['--fin'] : []), ...(opts.pauseUs !== undefined ? ['-p', String(opts.pauseUs)] : []), ...opts.destinations.flatMap((d) => ['-a', d])];
  // The run ends at its duration plus at most one step timeout per connection in flight (connect, write, read).
  const r = await run(inNetns(netnsPath, argv, opts.cpus), { timeoutMs: opts.seconds * 1000 + 3 * timeoutMs + 30_000 });
  if (r.code !== 0) throw new Error(`crr client in ${netnsPath} exited ${r.code}: ${r.stderr.trim()}`);
  return JSON.parse(r.stdout) as CrrResult;
}

/** A `crr server` echoing on every listen address, running until `stop`. */
export class CrrServer {
  private constructor(private readonly child: ChildProcess) {}

  /** `listen`: `ADDR:PORT` specs as the client takes them; ready (listening) when this resolves. */
  static async start(netnsPath: string, listen: readonly string[], opts: { threads?: number; cpus?: string } = {}): Promise<CrrServer> {
    const argv = inNetns(netnsPath, [CRR_BIN, 'server', '-t', String(opts.threads ?? 2), ...listen.flatMap((l) => ['-l', l])], opts.cpus);
    const child = spawn(argv[0]!, argv.slice(1), { env: toolEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    await new Promise<void>((resolve, reject) => {
      const lines = createInterface({ input: child.stdout! });
      const fail = (why: string) => reject(new Error(`crr server in ${netnsPath} ${why}: ${stderr.trim()}`));
      child.once('error', (e) => fail(e.message));
      child.once('exit', (code) => fail(`exited ${code}`));
      lines.once('line', (l) => (l === 'ready' ? resolve() : fail(`said "${l}"`)));
    });
    child.removeAllListeners('exit');
    return new CrrServer(child);
  }

  /** taskset and nsenter exec in turn: this is the server's own pid. */
  get pid(): number {
    return this.child.pid!;
  }

  /** CPU time (ns) the server's threads have run so far. */
  async cpuNs(): Promise<number> {
    let total = 0;
    for (const tid of await readdir(`/proc/${this.pid}/task`)) {
      const stat = await readFile(`/proc/${this.pid}/task/${tid}/schedstat`, 'utf8').catch(() => undefined); // a thread gone meanwhile
      if (stat !== undefined) total += Number(stat.split(' ')[0]);
    }
    return total;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((r) => this.child.once('exit', () => r()));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }
}

/** The errors of a run as one short text, most frequent first ("none" when there were none). */
export function crrErrors(r: CrrResult): string {
  const e = Object.entries(r.errors).sort((a, b) => b[1] - a[1]);
  return e.length === 0 ? 'none' : e.map(([k, n]) => `${n}× ${k}`).join(', ');
}
