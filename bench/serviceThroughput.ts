// Throughput through a ClusterIP against straight to the pod, same pods, one run:
// a tendril node with a client pod and a server pod, and one service whose only
// backend is the server pod (iperf3's control and data connections must reach the
// same server). iperf3 single stream, runs alternating between the pod IP and the
// ClusterIP (every other pair in reverse order), so a busy moment of the shared
// machine falls on both alike; each pair gives a ratio. Next to Gbit/s, Gbit per
// CPU-second (iperf3's own CPU figures, sender and receiver: on veth they carry
// the kernel's packet work, BPF programs included), which others' load on the
// machine moves far less than the rate.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec } from './benchProcess.js';
import { BenchNamespaces, TendrilBenchNode, inNs, netnsPath } from './policyDatapath.js';
import { cleanupOnSignal, clusterIp, once, programServices, serviceCounts } from './serviceCommon.js';
import { percentile } from './stats.js';

const IPERF_PORT = 5201;
const SERVICE_ID = 1;

export interface ServiceThroughputReport {
  seconds: number;
  pairs: number;
  /** Each run: Gbit/s, and Gbit per CPU-second of sender and receiver together. */
  direct: IperfRun[];
  service: IperfRun[];
  /** service / direct of each pair: Gbit/s, and Gbit per CPU-second. */
  ratios: number[];
  cpuRatios: number[];
  realized: boolean;
}

export interface IperfRun {
  gbps: number;
  gbitPerCpuSecond: number;
}

/** One iperf3 run of `seconds` from `clientNs` to ip:port: Gbit/s the server received, and per CPU-second of both ends. */
async function iperfRun(clientNs: string, ip: string, seconds: number): Promise<IperfRun> {
  const out = await exec(inNs(clientNs, ['iperf3', '-c', ip, '-p', String(IPERF_PORT), '-t', String(seconds), '-J']));
  const end = (JSON.parse(out) as { end: { sum_received: { bits_per_second: number }; cpu_utilization_percent: { host_total: number; remote_total: number } } }).end;
  const gbps = end.sum_received.bits_per_second / 1e9;
  const cpus = (end.cpu_utilization_percent.host_total + end.cpu_utilization_percent.remote_total) / 100;
  return { gbps, gbitPerCpuSecond: gbps / Math.max(cpus, 1e-9) };
}

export async function runServiceThroughputBench(seconds = 2, pairs = 6): Promise<ServiceThroughputReport> {
  const tag = `tdlst${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-svctput-'));
  let node: TendrilBenchNode | undefined;
  let server: ChildProcess | undefined;
  const cleanup = once(async () => {
    server?.kill('SIGKILL');
    if (node) await node.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    const [tn, tc, ts] = [`${tag}n`, `${tag}c`, `${tag}s`];
    await namespaces.add(tn, tc, ts);
    node = await TendrilBenchNode.start(tn, join(scratch, 'state'), '10.248.10.0/24');
    await node.addPod('svc-tput-client', tc, 'app=svc-tput-client');
    const serverIp = (await node.addPod('svc-tput-server', ts, 'app=svc-tput-server')).ip;
    const vip = clusterIp(SERVICE_ID);
    await programServices(node.client, [{ id: SERVICE_ID, ip: vip, port: IPERF_PORT, backends: [{ ip: serverIp, port: IPERF_PORT }] }], 1);
    const realized = (await serviceCounts(node.client)).realized === 1;

    // One iperf3 server for every run (a run at a time), bound to the pod's address.
    server = spawn('nsenter', [`--net=${netnsPath(ts)}`, '--', 'iperf3', '-s', '-B', serverIp, '-p', String(IPERF_PORT)], { stdio: 'ignore' });
    const run = async (ip: string) => {
      // The first run may come before the server listens: one retry after a pause.
      try {
        return await iperfRun(tc, ip, seconds);
      } catch {
        await new Promise((r) => setTimeout(r, 500));
        return iperfRun(tc, ip, seconds);
      }
    };
    await new Promise((r) => setTimeout(r, 300));
    const direct: IperfRun[] = [];
    const service: IperfRun[] = [];
    for (let i = 0; i < pairs; i++) {
      const order = i % 2 === 0 ? (['direct', 'service'] as const) : (['service', 'direct'] as const);
      for (const path of order) (path === 'direct' ? direct : service).push(await run(path === 'direct' ? serverIp : vip));
    }
    const ratios = service.map((x, i) => x.gbps / direct[i]!.gbps);
    const cpuRatios = service.map((x, i) => x.gbitPerCpuSecond / direct[i]!.gbitPerCpuSecond);
    return { seconds, pairs, direct, service, ratios, cpuRatios, realized };
  } finally {
    await cleanup();
    unhook();
  }
}

export function printServiceThroughput(r: ServiceThroughputReport): void {
  const med = (xs: number[]) => percentile(xs, 0.5);
  const g = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(', ');
  console.log(`\nThroughput through a ClusterIP vs straight to the pod (tendril, one backend = the same server pod), iperf3 single stream ${r.seconds} s, ${r.pairs} interleaved pairs`);
  const row = (name: string, runs: IperfRun[], note = '') =>
    console.log(`  ${name.padEnd(9)} ${med(runs.map((x) => x.gbps)).toFixed(2).padStart(7)} Gbit/s, ${med(runs.map((x) => x.gbitPerCpuSecond)).toFixed(2)} Gbit per CPU-second, medians (runs: ${g(runs.map((x) => x.gbps))})${note}`);
  row('pod IP', r.direct);
  row('ClusterIP', r.service, r.realized ? '' : ' — the agent reports the service NOT realized');
  console.log(`  ClusterIP / pod IP: ${med(r.ratios).toFixed(2)}x Gbit/s, ${med(r.cpuRatios).toFixed(2)}x Gbit per CPU-second, medians of pairs (goal ≥ 0.95; per pair: ${g(r.ratios)} / ${g(r.cpuRatios)})`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printServiceThroughput(await runServiceThroughputBench(Number(process.argv[2] ?? 2), Number(process.argv[3] ?? 6)));
}
