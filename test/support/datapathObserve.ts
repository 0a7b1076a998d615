import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { MonitorEvent } from '../../src/monitor/types.js';
import type { CtRow, IpcacheMapRow, MetricsRow } from '../../src/datapath/bpf/inspect.js';
import { cliJson, type DatapathNode } from './datapathNode.js';
import { run } from './run.js';
import { TENDRIL_BIN } from './tendrilBin.js';
import { Backoff } from '../../src/async/backoff.js';

/**
 * `tendril monitor -o json` running against a node's agent, every JSON line
 * kept. `waitFor` resolves with the first event (seen or still to come) that
 * passes a predicate.
 */
export class MonitorStream {
  readonly events: MonitorEvent[] = [];
  private stderr = '';
  private readonly waiters: Array<{ pred: (e: MonitorEvent) => boolean; resolve: (e: MonitorEvent) => void }> = [];

  private constructor(private readonly child: ChildProcess) {
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      if (line.trim() === '') return;
      let e: MonitorEvent;
      try {
        e = JSON.parse(line) as MonitorEvent;
      } catch {
        this.stderr += `not JSON: ${line}\n`;
        return;
      }
      this.events.push(e);
      for (const w of this.waiters.splice(0)) {
        if (w.pred(e)) w.resolve(e);
        else this.waiters.push(w);
      }
    });
    child.stderr!.on('data', (c: Buffer) => (this.stderr += c.toString()));
  }

  static start(node: DatapathNode, extraArgs: readonly string[] = []): MonitorStream {
    const child = spawn(TENDRIL_BIN, ['monitor', '-o', 'json', ...extraArgs, '--socket', node.agent.socket], { stdio: ['ignore', 'pipe', 'pipe'] });
    return new MonitorStream(child);
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  get errors(): string {
    return this.stderr;
  }

  waitFor(pred: (e: MonitorEvent) => boolean, timeoutMs: number, what: string): Promise<MonitorEvent> {
    const seen = this.events.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(new Error(`monitor: no ${what} in ${timeoutMs} ms (${this.events.length} events seen, running ${this.running}) ${this.stderr.slice(-500)}`));
      }, timeoutMs);
      const waiter = {
        pred,
        resolve: (e: MonitorEvent) => {
          clearTimeout(timer);
          resolve(e);
        },
      };
      this.waiters.push(waiter);
    });
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    await exited;
    clearTimeout(timer);
  }
}

/** Accepts a bare array or an object holding one array (the CLI's JSON for lists). */
function rowsOf<T>(body: unknown, what: string): T[] {
  if (Array.isArray(body)) return body as T[];
  if (body && typeof body === 'object') {
    const arrays = Object.values(body).filter(Array.isArray);
    if (arrays.length === 1) return arrays[0] as T[];
  }
  throw new Error(`tendril ${what} -o json: unexpected shape ${JSON.stringify(body).slice(0, 300)}`);
}

/** `tendril bpf metrics -o json`: packets per (reason, direction). */
export async function bpfMetrics(node: DatapathNode): Promise<MetricsRow[]> {
  return rowsOf<MetricsRow>(await cliJson<unknown>(node, ['bpf', 'metrics']), 'bpf metrics');
}

/** Packets dropped, per `reasonName/direction`, forwarded packets left out. */
export function dropCounts(rows: readonly MetricsRow[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of rows) if (r.reason !== 0) out[`${r.reasonName}/${r.direction}`] = (out[`${r.reasonName}/${r.direction}`] ?? 0) + r.packets;
  return out;
}

/** `tendril bpf ct list -o json`. */
export async function bpfConntrack(node: DatapathNode): Promise<CtRow[]> {
  return rowsOf<CtRow>(await cliJson<unknown>(node, ['bpf', 'ct', 'list']), 'bpf ct list');
}

/** `tendril bpf ipcache list -o json`: what the programs' ipcache holds. */
export async function bpfIpcache(node: DatapathNode): Promise<IpcacheMapRow[]> {
  return rowsOf<IpcacheMapRow>(await cliJson<unknown>(node, ['bpf', 'ipcache', 'list']), 'bpf ipcache list');
}

/**
 * Polls `check` until it holds or `timeoutMs` passes; returns how long it took, or throws with `what`. The pause
 * between checks doubles from 50 ms to 1 s: a check is often a CLI run (a process of its own), and ten a second
 * through a wait of several seconds (conntrack's closing lifetime) cost the machine more CPU than the test itself.
 */
export async function eventually(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<number> {
  const started = Date.now();
  const pause = new Backoff({ initialMs: 50, maxMs: 1000 });
  for (;;) {
    if (await check()) return Date.now() - started;
    if (Date.now() - started > timeoutMs) throw new Error(`${what}: not so after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, pause.next()));
  }
}

/** TCP counters of a network namespace (/proc/net/snmp and /proc/net/netstat as seen from inside it). */
export interface TcpCounters {
  /** Segments retransmitted. */
  retransSegs: number;
  /** Retransmitted segments the receiver reported as duplicates (D-SACK): spurious, nothing was lost. */
  dsackRecvSegs: number;
  /** Retransmission timeouts: the sender heard nothing for a whole RTO (a stall). */
  timeouts: number;
  /** Tail loss probes sent (a late ACK is enough to send one). */
  lossProbes: number;
  /** Receiver side: segments that arrived after a gap (one lost or reordered before them). */
  ofoQueue: number;
  /** Receiver side: out-of-order segments dropped. */
  ofoDrop: number;
  /** SYNs (and SYN-ACKs) sent again: a connection attempt whose first one went unanswered. */
  synRetrans: number;
  /** Listener side: connections dropped because the accept or SYN queue was full (the server, not the path, lost them). */
  listenDrops: number;
}

function parseSnmpTable(text: string, prefix: string): Map<string, number> {
  const rows = text.split('\n').filter((l) => l.startsWith(`${prefix}:`));
  const out = new Map<string, number>();
  for (let i = 0; i + 1 < rows.length; i += 2) {
    const names = rows[i]!.split(/\s+/).slice(1);
    const values = rows[i + 1]!.split(/\s+/).slice(1);
    names.forEach((n, j) => out.set(n, Number(values[j])));
  }
  return out;
}

export async function tcpCounters(netnsPath: string): Promise<TcpCounters> {
  const read = async (file: string) => {
    const r = await run(['nsenter', `--net=${netnsPath}`, '--', 'cat', file]);
    if (r.code !== 0) throw new Error(`cannot read ${file} in ${netnsPath}: ${r.stderr}`);
    return r.stdout;
  };
  const tcp = parseSnmpTable(await read('/proc/net/snmp'), 'Tcp');
  const ext = parseSnmpTable(await read('/proc/net/netstat'), 'TcpExt');
  return {
    retransSegs: tcp.get('RetransSegs') ?? 0,
    dsackRecvSegs: ext.get('TCPDSACKRecvSegs') ?? 0,
    timeouts: ext.get('TCPTimeouts') ?? 0,
    lossProbes: ext.get('TCPLossProbes') ?? 0,
    ofoQueue: ext.get('TCPOFOQueue') ?? 0,
    ofoDrop: ext.get('TCPOFODrop') ?? 0,
    synRetrans: ext.get('TCPSynRetrans') ?? 0,
    listenDrops: ext.get('ListenDrops') ?? 0,
  };
}
