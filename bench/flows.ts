// What recording flows costs.
//
// flows-cost: the connection rate pod→pod (native crr client: connect, 1-byte
// request and answer, close) between two tendril pods whose policies make every
// connection report a verdict in each direction and a trace, on two agents side
// by side in one run: one as it starts by default (flow history of 16,384,
// flow metrics on) and one with --flow-history-size 0 --no-flow-metrics, which
// decodes no event at all. Runs alternate between the two, every other pair in
// reverse order, so a busy moment of the machine falls on both; the ratio of
// each pair and their median, and each agent's CPU per connection.
//
// flows-memory: the flow history's memory, in a process of its own: a
// FlowRing of 100,000 filled with distinct flows, each a datapath record
// encoded with the contract's codec, recorded as the agent's hub
// does (200 pods in 20 namespaces, with their labels and pods, NetworkPolicy
// rules whose cookies resolve to their text, random source ports), against
// the same process before; heap after a full GC and RSS, per flow.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CrrServer, crrErrors, runCrrClient } from '../test/support/crr.js';
import type { AgentClient } from '../src/client/agentClient.js';
import { exec, startBenchAgent, stopBenchAgent } from './benchProcess.js';
import { percentile } from './stats.js';

const TENDRIL = fileURLToPath(new URL('../../bin/tendril', import.meta.url));
const CNI = fileURLToPath(new URL('../../bin/tendril-cni', import.meta.url));
const CRR_PORT = 5202;

/** Client and server pods with an ingress and an egress rule between them: two verdicts and a trace per connection. */
function rules(): string {
  const doc = (name: string, spec: object) => JSON.stringify({ apiVersion: 'tendril.io/v1', kind: 'TendrilNetworkPolicy', metadata: { name, namespace: 'bench' }, spec });
  const port = { toPorts: [{ ports: [{ port: String(CRR_PORT), protocol: 'TCP' }] }] };
  return [
    doc('flows-in', { endpointSelector: { matchLabels: { app: 'flows-server' } }, ingress: [{ fromEndpoints: [{ matchLabels: { app: 'flows-client' } }], ...port }] }),
    doc('flows-out', { endpointSelector: { matchLabels: { app: 'flows-client' } }, egress: [{ toEndpoints: [{ matchLabels: { app: 'flows-server' } }], ...port }] }),
  ].join('\n---\n');
}

/** CPU seconds a process used so far (utime + stime of /proc/<pid>/stat). */
async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

interface FlowsNode {
  name: string;
  agent: ChildProcess;
  client: AgentClient;
  clientNs: string;
  server: CrrServer;
  serverAddr: string;
}

export interface FlowsCostReport {
  seconds: number;
  runs: number;
  /** Connections per second, one entry per run. */
  recording: number[];
  off: number[];
  /** The agents' CPU seconds per 1,000 connections, one entry per run. */
  recordingCpuPerK: number[];
  offCpuPerK: number[];
  /** Events the recording agent decoded over all its runs, and the connections of those runs. */
  events: number;
  connections: number;
}

export async function runFlowsCostBench(seconds = 5, runs = 6): Promise<FlowsCostReport> {
  const tag = `tdlfc${process.pid % 10000}`;
  const created: string[] = [];
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-flows-'));
  const nodes: FlowsNode[] = [];
  const ns = async (name: string) => {
    await exec(['ip', 'netns', 'add', name]);
    created.push(name);
    await exec(['ip', '-n', name, 'link', 'set', 'lo', 'up']);
    return name;
  };
  const agents: ChildProcess[] = [];
  try {
    await exec(['mkdir', '-p', join(scratch, 'bin'), join(scratch, 'net.d')]);
    await symlink(CNI, join(scratch, 'bin', 'tendril-cni'));
    const setups: Array<{ name: string; cidr: string; args: string[] }> = [
      { name: 'recording', cidr: '10.247.0.0/24', args: [] },
      { name: 'off', cidr: '10.248.0.0/24', args: ['--flow-history-size', '0', '--no-flow-metrics'] },
    ];
    for (const [i, s] of setups.entries()) {
      const node = await ns(`${tag}n${i}`);
      const [podA, podB] = [await ns(`${tag}a${i}`), await ns(`${tag}b${i}`)];
      const state = join(scratch, `state${i}`);
      const started = await startBenchAgent(node, state, s.cidr, s.args);
      agents.push(started.process);
      const network = `tdlflows${i}`;
      const net = join(scratch, 'net.d', String(i));
      await exec(['mkdir', '-p', net]);
      await writeFile(join(net, '10-tdl.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: network, plugins: [{ type: 'tendril-cni', socket: started.socket }] }));
      const addPod = async (pod: string, app: string) => {
        const env = { ...process.env, NETCONFPATH: net, CNI_PATH: join(scratch, 'bin'), CNI_ARGS: `K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${app};TENDRIL_LABELS=app=${app}` };
        const out = await exec(['nsenter', `--net=/var/run/netns/${node}`, '--', TENDRIL, 'cni', 'add', network, `/var/run/netns/${pod}`, '--cache-dir', join(scratch, `cache${i}`)], env);
        return (JSON.parse(out) as { ips: Array<{ address: string }> }).ips[0]!.address.split('/')[0]!;
      };
      await addPod(podA, 'flows-client');
      const serverIp = await addPod(podB, 'flows-server');
      const revision = (await started.client.putPolicy({ text: rules() })).revision;
      for (let t = 0; !(await started.client.listEndpoints()).every((e) => e.policyRevision >= revision); t++) {
        if (t > 3000) throw new Error(`${s.name}: the pods never realized the rules`);
        await new Promise((r) => setTimeout(r, 10));
      }
      const server = await CrrServer.start(`/var/run/netns/${podB}`, [`${serverIp}:${CRR_PORT}`], { threads: 1 });
      nodes.push({ name: s.name, agent: started.process, client: started.client, clientNs: podA, server, serverAddr: `${serverIp}:${CRR_PORT}` });
    }
    const [recording, off] = [nodes[0]!, nodes[1]!];
    const samples = { recording: [] as number[], off: [] as number[], recordingCpuPerK: [] as number[], offCpuPerK: [] as number[] };
    let connections = 0;
    const eventsBefore = await flowEvents(recording.client);
    const run = async (n: FlowsNode) => {
      const cpu0 = await cpuSeconds(n.agent.pid!);
      const r = await runCrrClient(`/var/run/netns/${n.clientNs}`, { destinations: [n.serverAddr], seconds, threads: 1 });
      if (r.errorCount > 0) throw new Error(`${n.name}: crr ${crrErrors(r)}`);
      const cpu = ((await cpuSeconds(n.agent.pid!)) - cpu0) / (r.connections / 1000);
      if (n === recording) connections += r.connections;
      (n === recording ? samples.recording : samples.off).push(r.connPerS);
      (n === recording ? samples.recordingCpuPerK : samples.offCpuPerK).push(cpu);
    };
    // A warm-up of each, not counted: the first connections of a pod pay for its first ARP and conntrack entries.
    await runCrrClient(`/var/run/netns/${recording.clientNs}`, { destinations: [recording.serverAddr], seconds: 1, threads: 1 });
    await runCrrClient(`/var/run/netns/${off.clientNs}`, { destinations: [off.serverAddr], seconds: 1, threads: 1 });
    const warmEvents = (await flowEvents(recording.client)) - eventsBefore;
    for (let i = 0; i < runs; i++) for (const n of i % 2 === 0 ? [recording, off] : [off, recording]) await run(n);
    // The hub reads the ring buffer on its own thread's wakeups: give it the last batch.
    await new Promise((r) => setTimeout(r, 500));
    const events = (await flowEvents(recording.client)) - eventsBefore - warmEvents;
    return { seconds, runs, ...samples, events, connections };
  } finally {
    for (const n of nodes) await n.server.stop();
    for (const a of agents) await stopBenchAgent(a);
    for (const n of created.reverse()) await exec(['ip', 'netns', 'del', n]).catch(() => undefined);
    await rm(scratch, { recursive: true, force: true });
  }
}

/** Events the agent's flow metrics counted so far (all types and verdicts). */
async function flowEvents(client: AgentClient): Promise<number> {
  const text = await client.metrics();
  let n = 0;
  for (const m of text.matchAll(/^tendril_flows_processed_total\{[^}]*\} (\S+)$/gm)) n += Number(m[1]);
  return n;
}

export function printFlowsCost(r: FlowsCostReport): void {
  const med = (xs: number[]) => percentile(xs, 0.5);
  const ratios = r.recording.map((x, i) => x / r.off[i]!);
  console.log(`\nFlow recording cost: crr pod→pod, one thread, ${r.seconds}s runs, ${r.runs} alternating pairs (2 verdicts + 1 trace per connection)`);
  console.log(`  flow history 16384 + flow metrics   ${med(r.recording).toFixed(0).padStart(7)} conn/s  agent ${med(r.recordingCpuPerK).toFixed(3)} CPU-s per 1,000 connections`);
  console.log(`  --flow-history-size 0, no metrics   ${med(r.off).toFixed(0).padStart(7)} conn/s  agent ${med(r.offCpuPerK).toFixed(3)} CPU-s per 1,000 connections`);
  console.log(`  recording / off: ${med(ratios).toFixed(3)}x median of pairs (per pair: ${ratios.map((x) => x.toFixed(3)).join(', ')}; goal ≥ 0.95)`);
  console.log(
    `  the recording agent decoded ${r.events} events for ${r.connections} connections (${(r.events / Math.max(1, r.connections)).toFixed(2)} each)`,
  );
}

export interface FlowsMemoryReport {
  flows: number;
  held: number;
  heapBytes: number;
  rssBytes: number;
  seconds: number;
}

/** Runs the memory measurement in a fresh Node.js process with --expose-gc. */
export async function runFlowsMemoryBench(flows = 100_000): Promise<FlowsMemoryReport> {
  const out = await exec([process.execPath, '--expose-gc', fileURLToPath(new URL('./flowsMemoryWorker.js', import.meta.url)), String(flows)]);
  return JSON.parse(out) as FlowsMemoryReport;
}

export function printFlowsMemory(r: FlowsMemoryReport): void {
  const mib = (b: number) => (b / 2 ** 20).toFixed(1);
  console.log(`\nFlow history memory: a FlowRing of ${r.flows} filled with distinct flows (in-process, records encoded and recorded as the hub does)`);
  console.log(`  held ${r.held} flows in ${r.seconds.toFixed(2)} s; heap +${mib(r.heapBytes)} MiB (${(r.heapBytes / r.held).toFixed(0)} bytes per flow), RSS +${mib(r.rssBytes)} MiB (${(r.rssBytes / r.held).toFixed(0)} bytes per flow)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printFlowsCost(await runFlowsCostBench(Number(process.argv[2] ?? 5), Number(process.argv[3] ?? 6)));
}
