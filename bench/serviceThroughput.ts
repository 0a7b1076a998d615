// Throughput through a ClusterIP against straight to the pod, same pods, one run:
// a tendril node with a client pod and a server pod, and one service whose only
// backend is the server pod (iperf3's control and data connections must reach the
// same server). iperf3 single stream, runs alternating between the pod IP and the
// ClusterIP (every other pair in reverse order), so a busy moment of the shared
// machine falls on both alike; each pair gives a ratio.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec } from './benchProcess.js';
import { BenchNamespaces, TendrilBenchNode, inNs, netnsPath } from './policyDatapath.js';
import { clusterIp, programServices, serviceCounts } from './serviceCommon.js';
import { percentile } from './stats.js';

const IPERF_PORT = 5201;
const SERVICE_ID = 1;

export interface ServiceThroughputReport {
  seconds: number;
  pairs: number;
  /** Gbit/s of each run. */
  direct: number[];
  service: number[];
  /** service / direct of each pair. */
  ratios: number[];
  realized: boolean;
}

/** Gbit/s received by the server of one iperf3 run of `seconds` from `clientNs` to ip:port. */
async function iperfRun(clientNs: string, ip: string, seconds: number): Promise<number> {
  const out = await exec(inNs(clientNs, ['iperf3', '-c', ip, '-p', String(IPERF_PORT), '-t', String(seconds), '-J']));
  return (JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } }).end.sum_received.bits_per_second / 1e9;
}

export async function runServiceThroughputBench(seconds = 3, pairs = 4): Promise<ServiceThroughputReport> {
  const tag = `tdlst${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-svctput-'));
  let node: TendrilBenchNode | undefined;
  let server: ChildProcess | undefined;
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
    const direct: number[] = [];
    const service: number[] = [];
    for (let i = 0; i < pairs; i++) {
      const order = i % 2 === 0 ? (['direct', 'service'] as const) : (['service', 'direct'] as const);
      for (const path of order) (path === 'direct' ? direct : service).push(await run(path === 'direct' ? serverIp : vip));
    }
    return { seconds, pairs, direct, service, ratios: service.map((g, i) => g / direct[i]!), realized };
  } finally {
    server?.kill('SIGKILL');
    if (node) await node.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printServiceThroughput(r: ServiceThroughputReport): void {
  const med = (xs: number[]) => percentile(xs, 0.5);
  const g = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(', ');
  console.log(`\nThroughput through a ClusterIP vs straight to the pod (tendril, one backend = the same server pod), iperf3 single stream ${r.seconds} s, ${r.pairs} interleaved pairs`);
  console.log(`  pod IP    ${med(r.direct).toFixed(2).padStart(7)} Gbit/s median (runs: ${g(r.direct)})`);
  console.log(`  ClusterIP ${med(r.service).toFixed(2).padStart(7)} Gbit/s median (runs: ${g(r.service)})${r.realized ? '' : ' — the agent reports the service NOT realized'}`);
  console.log(`  ClusterIP / pod IP: ${med(r.ratios).toFixed(2)}x median of pairs (goal ≥ 0.95; per pair: ${g(r.ratios)})`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printServiceThroughput(await runServiceThroughputBench(Number(process.argv[2] ?? 3), Number(process.argv[3] ?? 4)));
}
