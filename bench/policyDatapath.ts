// What the datapath benchmarks (policy-scale, policy-latency, throughput)
// share: namespaces that are always removed, a tendril node (agent in its own
// node namespace, pins under a bpffs root of its own) with pods made through the
// agent's CNI API, the TCP worker run inside a pod, and the policy documents.
import { type ChildProcess, spawn } from 'node:child_process';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { AgentClient } from '../src/client/agentClient.js';
import { exec, startBenchAgent, stopBenchAgent } from './benchProcess.js';

const WORKER = fileURLToPath(new URL('./tcpWorker.js', import.meta.url));
const PLUGINS = '/usr/lib/cni';

export const netnsPath = (ns: string) => `/var/run/netns/${ns}`;

/**
 * ADD of a pod whose namespace exists, through the agent's CNI API (what
 * tendril-cni relays), labelled `labels` (`k=v,…`); ready when it returns.
 */
export async function cniAddPod(client: AgentClient, pod: { name: string; ns: string; labels: string; network: string }): Promise<{ containerId: string; ip: string; ip6?: string }> {
  const containerId = `tdl-${pod.name}`;
  const result = (await client.cni({
    command: 'ADD',
    containerId,
    netns: netnsPath(pod.ns),
    ifName: 'eth0',
    args: `K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${pod.name};TENDRIL_LABELS=${pod.labels}`,
    path: PLUGINS,
    config: JSON.stringify({ cniVersion: '1.0.0', name: pod.network, type: 'tendril-cni' }),
  })) as { ips?: Array<{ address: string }> } | undefined;
  const ip = result?.ips?.[0]?.address.split('/')[0];
  if (!ip) throw new Error(`ADD of ${pod.name} returned no address`);
  // A dual-stack pod's IPv6 address comes second (the result lists IPv4 first).
  const ip6 = result?.ips?.[1]?.address.split('/')[0];
  return { containerId, ip, ...(ip6 !== undefined ? { ip6 } : {}) };
}
/** DEL of a pod cniAddPod added (the same container id, netns and network). */
export async function cniDelPod(client: AgentClient, pod: { name: string; ns: string; network: string }): Promise<void> {
  await client.cni({
    command: 'DEL',
    containerId: `tdl-${pod.name}`,
    netns: netnsPath(pod.ns),
    ifName: 'eth0',
    args: `K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${pod.name}`,
    path: PLUGINS,
    config: JSON.stringify({ cniVersion: '1.0.0', name: pod.network, type: 'tendril-cni' }),
  });
}
export const inNs = (ns: string, argv: string[]) => ['nsenter', `--net=${netnsPath(ns)}`, '--', ...argv];

/** Network namespaces a bench made, created in batches and all removed by `cleanup`, also after a failure. */
export class BenchNamespaces {
  readonly #created: string[] = [];

  /** Namespaces with loopback up (a pod that serves or connects). */
  async add(...names: string[]): Promise<void> {
    await this.addBare(names);
    for (const n of names) await exec(['ip', '-n', n, 'link', 'set', 'lo', 'up']);
  }

  /** Namespaces as `ip netns add` leaves them, one `ip -batch` per 500: a thousand in a second, not a thousand processes. */
  async addBare(names: string[]): Promise<void> {
    for (let i = 0; i < names.length; i += 500) {
      const chunk = names.slice(i, i + 500);
      this.#created.push(...chunk);
      await exec(['ip', '-batch', '-'], process.env, chunk.map((n) => `netns add ${n}\n`).join(''));
    }
  }

  async cleanup(): Promise<void> {
    const names = this.#created.splice(0).reverse();
    for (let i = 0; i < names.length; i += 500) {
      const chunk = names.slice(i, i + 500);
      await exec(['ip', '-force', '-batch', '-'], process.env, chunk.map((n) => `netns del ${n}\n`).join('')).catch(() => undefined);
    }
  }
}

export interface BenchPod {
  name: string;
  ns: string;
  ip: string;
  /** The pod's IPv6 address, on a dual-stack node. */
  ip6?: string;
  endpointId: number;
  containerId: string;
}

/** A tendril agent in a node namespace of its own; pods are added through its CNI API (what tendril-cni relays). */
export class TendrilBenchNode {
  readonly pods: BenchPod[] = [];
  private constructor(
    readonly node: string,
    readonly client: AgentClient,
    readonly socket: string,
    readonly process: ChildProcess,
    readonly bpffsRoot: string,
  ) {}

  /** `node` must already exist (in `namespaces`). */
  static async start(node: string, stateDir: string, podCidr: string, extraArgs: string[] = []): Promise<TendrilBenchNode> {
    const a = await startBenchAgent(node, stateDir, podCidr, ['--datapath', 'bpf', ...extraArgs]);
    return new TendrilBenchNode(node, a.client, a.socket, a.process, a.bpffsRoot);
  }

  /** ADD of a pod whose namespace exists, with `labels` (`k=v,…`); ready when the call returns. */
  async addPod(name: string, ns: string, labels: string): Promise<BenchPod> {
    const { containerId, ip, ip6 } = await cniAddPod(this.client, { name, ns, labels, network: 'tdlbenchpol' });
    const ep = await this.client.getEndpoint(`container-id:${containerId}`);
    const pod: BenchPod = { name, ns, ip, ...(ip6 !== undefined ? { ip6 } : {}), endpointId: ep.id, containerId };
    this.pods.push(pod);
    return pod;
  }

  /** Imports policy documents through the API in batches under the API's 1 MiB body limit; returns the last revision. */
  async importPolicies(docs: string[], perBatch = 2000): Promise<number> {
    let revision = 0;
    for (let i = 0; i < docs.length; i += perBatch) revision = (await this.client.putPolicy({ text: docs.slice(i, i + perBatch).join('\n---\n') })).revision;
    return revision;
  }

  /** Waits until every endpoint in `ids` (all when omitted) reports a realized policy revision ≥ `revision`. */
  async waitRealized(revision: number, ids?: ReadonlySet<number>, timeoutMs = 60_000, pollMs = 10): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const eps = await this.client.listEndpoints();
      const behind = eps.filter((e) => (!ids || ids.has(e.id)) && e.policyRevision < revision);
      if (behind.length === 0) return;
      if (Date.now() > deadline) throw new Error(`${behind.length} endpoints still below policy revision ${revision} after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  /**
   * Waits until the agent has used at most `maxCpuShare` of a CPU over 300 ms (its
   * work after an import — regeneration, kvstore writes — done), so a measurement
   * right after does not share the CPU with it; gives up quietly after `timeoutMs`.
   */
  async waitIdle(maxCpuShare = 0.04, timeoutMs = 20_000): Promise<void> {
    const pid = this.process.pid;
    if (pid === undefined) return;
    const ticks = async () => {
      const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
      return Number(f[11]) + Number(f[12]); // utime + stime, in clock ticks (100/s)
    };
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const a = await ticks();
      await new Promise((r) => setTimeout(r, 300));
      if ((await ticks()) - a <= maxCpuShare * 30) return;
    }
  }

  async stop(): Promise<void> {
    await stopBenchAgent(this.process);
  }
}

/** CPU time (ns) a process's threads have run, from /proc/<pid>/task/<tid>/schedstat. */
export async function processCpuNs(pid: number): Promise<number> {
  let total = 0;
  for (const tid of await readdir(`/proc/${pid}/task`)) {
    try {
      total += Number((await readFile(`/proc/${pid}/task/${tid}/schedstat`, 'utf8')).split(' ')[0]);
    } catch {
      // a thread that ended meanwhile
    }
  }
  return total;
}

/**
 * Run time of the agent's pod programs (from/to container), from the kernel's BPF
 * statistics: a cost per packet measured inside the kernel, which a busy machine
 * hardly disturbs. The statistics are a machine-wide switch
 * (kernel.bpf_stats_enabled); `enable` turns it on and `restore` puts back what was
 * there.
 */
export class BpfRunStats {
  private constructor(
    readonly programIds: number[],
    private readonly previous: string,
  ) {}

  static async enable(node: TendrilBenchNode): Promise<BpfRunStats> {
    // This agent's pod programs: the container programs that use its pinned policy map
    // (other agents on the machine load programs of the same names).
    const policyMap = (JSON.parse(await exec(['bpftool', 'map', 'show', 'pinned', join(node.bpffsRoot, 'tendril', 'tendril_policy'), '-j'])) as { id: number }).id;
    const progs = JSON.parse(await exec(['bpftool', 'prog', 'show', '-j'])) as Array<{ id: number; name?: string; map_ids?: number[] }>;
    const ids = progs.filter((p) => /^tendril_(from|to)_c/.test(p.name ?? '') && p.map_ids?.includes(policyMap)).map((p) => p.id);
    if (ids.length === 0) throw new Error(`no container programs use the policy map ${policyMap}`);
    const previous = (await readFile(STATS_SWITCH, 'utf8')).trim();
    await writeFile(STATS_SWITCH, '1');
    return new BpfRunStats(ids, previous);
  }

  /** Total run time (ns) and runs of the programs so far. */
  async read(): Promise<{ ns: number; runs: number }> {
    let ns = 0;
    let runs = 0;
    for (const id of this.programIds) {
      const p = JSON.parse(await exec(['bpftool', 'prog', 'show', 'id', String(id), '-j'])) as { run_time_ns?: number; run_cnt?: number };
      ns += p.run_time_ns ?? 0;
      runs += p.run_cnt ?? 0;
    }
    return { ns, runs };
  }

  async restore(): Promise<void> {
    await writeFile(STATS_SWITCH, this.previous);
  }
}
const STATS_SWITCH = '/proc/sys/kernel/bpf_stats_enabled';

/** The TCP worker serving inside `ns`; `stop` ends it, `cpuNs` is the CPU its threads have used so far. */
export async function startTcpServer(ns: string, ip: string, port: number): Promise<{ stop: () => void; cpuNs: () => Promise<number> }> {
  const proc = spawn('nsenter', [`--net=${netnsPath(ns)}`, '--', process.execPath, WORKER, 'serve', ip, String(port)], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    proc.once('error', reject);
    proc.once('exit', (code) => reject(new Error(`tcp server in ${ns} exited ${code}`)));
    createInterface({ input: proc.stdout! }).once('line', () => resolve());
  });
  proc.removeAllListeners('exit');
  // nsenter execs the worker: the child's pid is the server's.
  return { stop: () => proc.kill('SIGKILL'), cpuNs: () => processCpuNs(proc.pid!) };
}

/** One run of the TCP worker as a client inside `ns`; its JSON result. */
export async function runTcpClient<T>(ns: string, args: string[]): Promise<T> {
  return JSON.parse(await exec(inNs(ns, [process.execPath, WORKER, ...args]))) as T;
}

/** A TCP client kept running inside `ns` (the worker's session mode): one command at a time. */
export class TcpClientSession {
  readonly #proc: ChildProcess;
  readonly #lines: AsyncIterator<string>;
  private constructor(proc: ChildProcess) {
    this.#proc = proc;
    this.#lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  }

  static start(ns: string): TcpClientSession {
    return new TcpClientSession(spawn('nsenter', [`--net=${netnsPath(ns)}`, '--', process.execPath, WORKER, 'session'], { stdio: ['pipe', 'pipe', 'inherit'] }));
  }

  async run<T>(cmd: { op: 'crr' | 'rr'; ip: string; port: number; ms: number; concurrency?: number }): Promise<T> {
    this.#proc.stdin!.write(JSON.stringify(cmd) + '\n');
    const next = await this.#lines.next();
    if (next.done) throw new Error(`tcp client session exited (${this.#proc.exitCode})`);
    return JSON.parse(next.value) as T;
  }

  stop(): void {
    this.#proc.kill('SIGKILL');
  }
}

/** A connection prober inside `ns`: one new connection attempt every `everyMs`, each line handed to `onAttempt`. */
export function startProbe(ns: string, ip: string, port: number, onAttempt: (startNs: bigint, ok: boolean) => void, everyMs = 1, timeoutMs = 50): { stop: () => Promise<void> } {
  const proc = spawn('nsenter', [`--net=${netnsPath(ns)}`, '--', process.execPath, WORKER, 'probe', ip, String(port), String(everyMs), String(timeoutMs)], { stdio: ['pipe', 'pipe', 'inherit'] });
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    const [t, ok] = line.split(' ');
    onAttempt(BigInt(t!), ok === '1');
  });
  return {
    stop: async () => {
      if (proc.exitCode !== null) return;
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      proc.stdin!.end();
      const timer = setTimeout(() => proc.kill('SIGKILL'), 2000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * A tendril policy of one ingress rule: pods with app=`server` accept TCP `port` from
 * pods with app=`client`. Its name is `name` (a re-import replaces it).
 */
export function ingressRuleDoc(name: string, server: string, client: string, port: number | readonly number[]): string {
  const ports = typeof port === 'number' ? [port] : port;
  return JSON.stringify({
    apiVersion: 'tendril.io/v1',
    kind: 'TendrilNetworkPolicy',
    metadata: { name, namespace: 'bench' },
    spec: {
      endpointSelector: { matchLabels: { app: server } },
      ingress: [{ fromEndpoints: [{ matchLabels: { app: client } }], toPorts: [{ ports: ports.map((p) => ({ port: String(p), protocol: 'TCP' })) }] }],
    },
  });
}
