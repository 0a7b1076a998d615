// Cross-node pod→pod TCP throughput against the underlay, one run: three boxes
// of two node namespaces on a hub bridge — the underlay (the veths and the bridge
// alone, iperf3 between the node namespaces themselves), a tendril cluster in
// native routing and one in tunnel routing (VXLAN), each with a client pod on
// node 0 and a server pod on node 1. iperf3 single stream, the three paths'
// runs interleaved (every other round reversed) so a busy moment of the shared
// machine falls on all alike. Next to Gbit/s, Gbit per CPU-second (iperf3's own
// CPU figures of both ends: on veths they carry the kernel's packet work, the
// BPF programs and the encapsulation included), which others' load moves less.
import { type ChildProcess, spawn } from 'node:child_process';
import { exec } from './benchProcess.js';
import { type BenchRoutingMode, CLUSTER_PATHS, type ClusterPath, crossNodePaths, errorLine, withCleanup } from './clusterCommon.js';
import { inNs, netnsPath } from './policyDatapath.js';
import { percentile } from './stats.js';

const IPERF_PORT = 5201;

export interface IperfRun {
  gbps: number;
  gbitPerCpuSecond: number;
}

export interface ClusterThroughputPath {
  /** Client namespace and the server's address (the node's own for the underlay, a pod's for the others). */
  clientNs: string;
  serverIp: string;
  /** MTU of the client's eth0 (a pod's: what tendril chose for the mode). */
  mtu?: number;
  runs: IperfRun[];
  /** Why the path could not be measured (set up or a run failed); its runs stop there. */
  error?: string;
}

export interface ClusterThroughputReport {
  seconds: number;
  rounds: number;
  paths: Record<ClusterPath, ClusterThroughputPath>;
  /** The native cluster's node namespaces between themselves: the underlay with tendril's programs on the nodes' devices (where a pod path's cost is not the pods' own). */
  clusterNodes?: ClusterThroughputPath;
  /** Per round, path / underlay (Gbit/s and Gbit per CPU-second), where both ran; tunnel6 / tunnel (the IPv6 outer header's cost). */
  ratios: Record<BenchRoutingMode | 'tunnel6', { gbps: number[]; cpu: number[] }>;
  setupMs: number;
}

async function iperfRun(clientNs: string, ip: string, seconds: number, pin: boolean): Promise<IperfRun> {
  // -A 0,1: the client on CPU 0 and the server on CPU 1 for every path, so where the scheduler happens to put them does not differ between paths.
  const out = await exec(inNs(clientNs, ['iperf3', '-c', ip, '-p', String(IPERF_PORT), '-t', String(seconds), ...(pin ? ['-A', '0,1'] : []), '-J']));
  const end = (JSON.parse(out) as { end: { sum_received: { bits_per_second: number }; cpu_utilization_percent: { host_total: number; remote_total: number } } }).end;
  const gbps = end.sum_received.bits_per_second / 1e9;
  const cpus = (end.cpu_utilization_percent.host_total + end.cpu_utilization_percent.remote_total) / 100;
  return { gbps, gbitPerCpuSecond: gbps / Math.max(cpus, 1e-9) };
}

async function linkMtu(ns: string, dev: string): Promise<number> {
  return (JSON.parse(await exec(['ip', '-n', ns, '-j', 'link', 'show', 'dev', dev])) as Array<{ mtu: number }>)[0]!.mtu;
}

/** An iperf3 server for every run of a path (one run at a time), bound to `ip` in `ns`. */
function iperfServer(ns: string, ip: string): ChildProcess {
  return spawn('nsenter', [`--net=${netnsPath(ns)}`, '--', 'iperf3', '-s', '-B', ip, '-p', String(IPERF_PORT)], { stdio: 'ignore' });
}

export async function runClusterThroughputBench(seconds = 2, rounds = 4, pin = true): Promise<ClusterThroughputReport> {
  return withCleanup(async (onCleanup) => {
    const t0 = performance.now();
    const servers: ChildProcess[] = [];
    const killServers = async () => {
      for (const s of servers) s.kill('SIGKILL');
    };
    onCleanup(killServers);
    const ends = await crossNodePaths('ctput', onCleanup);
    // The servers go first at cleanup (before their namespaces).
    onCleanup(killServers);
    const paths = {} as Record<ClusterPath, ClusterThroughputPath>;
    for (const name of CLUSTER_PATHS) {
      const e = ends[name];
      paths[name] = { clientNs: e.clientNs, serverIp: e.serverIp, runs: [], ...(e.error ? { error: e.error } : {}) };
      if (e.error) continue;
      servers.push(iperfServer(e.serverNs, e.serverIp));
      paths[name].mtu = await linkMtu(e.clientNs, 'eth0').catch(() => undefined);
    }
    const nodes = ends.native.nodes;
    const clusterNodes: ClusterThroughputPath | undefined = nodes ? { clientNs: nodes.clientNs, serverIp: nodes.serverIp, runs: [] } : undefined;
    if (nodes) servers.push(iperfServer(nodes.serverNs, nodes.serverIp));
    const setupMs = performance.now() - t0;
    await new Promise((r) => setTimeout(r, 300));

    const run = async (p: ClusterThroughputPath) => {
      if (p.error) return;
      // The first run may come before the server listens: one retry after a pause.
      try {
        p.runs.push(await iperfRun(p.clientNs, p.serverIp, seconds, pin));
      } catch {
        await new Promise((r) => setTimeout(r, 500));
        try {
          p.runs.push(await iperfRun(p.clientNs, p.serverIp, seconds, pin));
        } catch (err) {
          p.error = `iperf3: ${errorLine(err)}`;
        }
      }
    };
    const roundOf: Record<ClusterPath, number[]> = { underlay: [], native: [], tunnel: [], tunnel6: [] };
    for (let i = 0; i < rounds; i++) {
      for (const name of i % 2 === 0 ? CLUSTER_PATHS : [...CLUSTER_PATHS].reverse()) {
        const before = paths[name].runs.length;
        await run(paths[name]);
        if (paths[name].runs.length > before) roundOf[name].push(i);
      }
      if (clusterNodes) await run(clusterNodes);
    }
    // A ratio per round in which both the path and the underlay ran.
    const ratios = {} as ClusterThroughputReport['ratios'];
    for (const [mode, against] of [['native', 'underlay'], ['tunnel', 'underlay'], ['tunnel6', 'tunnel']] as const) {
      ratios[mode] = { gbps: [], cpu: [] };
      roundOf[mode].forEach((round, k) => {
        const u = roundOf[against].indexOf(round);
        if (u < 0) return;
        const [x, ref] = [paths[mode].runs[k]!, paths[against].runs[u]!];
        ratios[mode].gbps.push(x.gbps / ref.gbps);
        ratios[mode].cpu.push(x.gbitPerCpuSecond / ref.gbitPerCpuSecond);
      });
    }
    return { seconds, rounds, paths, ...(clusterNodes ? { clusterNodes } : {}), ratios, setupMs };
  });
}

export function printClusterThroughput(r: ClusterThroughputReport): void {
  const med = (xs: number[]) => (xs.length ? percentile(xs, 0.5).toFixed(2) : ' n/a');
  const list = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(', ');
  console.log(`\nCross-node TCP throughput, pod on node 0 → pod on node 1, vs the underlay (node namespace → node namespace over the same veths and bridge, no tendril); iperf3 single stream ${r.seconds} s, ${r.rounds} interleaved rounds`);
  const names: Record<ClusterPath, string> = { underlay: 'underlay (node → node)', native: 'native routing (pod → pod)', tunnel: 'tunnel, VXLAN (pod → pod)', tunnel6: 'tunnel, VXLAN over IPv6' };
  for (const p of CLUSTER_PATHS) {
    const x = r.paths[p];
    const body = x.runs.length
      ? `${med(x.runs.map((y) => y.gbps)).padStart(7)} Gbit/s, ${med(x.runs.map((y) => y.gbitPerCpuSecond))} Gbit per CPU-second (runs: ${list(x.runs.map((y) => y.gbps))})`
      : '    n/a';
    console.log(`  ${names[p].padEnd(28)} ${body}${x.mtu ? `, MTU ${x.mtu}` : ''}${x.error ? ` — FAILED: ${x.error}` : ''}`);
  }
  const n = r.clusterNodes;
  if (n) {
    const g = n.runs.map((y) => y.gbps);
    const ug = r.paths.underlay.runs.map((y) => y.gbps);
    const vsUnderlay = g.length && ug.length ? `, ${(percentile(g, 0.5) / percentile(ug, 0.5)).toFixed(2)}x the underlay` : '';
    console.log(
      `  ${'native nodes (node → node)'.padEnd(28)} ${g.length ? `${med(g).padStart(7)} Gbit/s, ${med(n.runs.map((y) => y.gbitPerCpuSecond))} Gbit per CPU-second (runs: ${list(g)})${vsUnderlay}: tendril's programs on the nodes' devices alone` : '    n/a'}${n.error ? ` — FAILED: ${n.error}` : ''}`,
    );
  }
  const ratio = (mode: BenchRoutingMode | 'tunnel6', label: string, note: string) => {
    const q = r.ratios[mode];
    console.log(`  ${label.padEnd(28)} ${med(q.gbps).padStart(7)}x Gbit/s, ${med(q.cpu)}x Gbit per CPU-second, medians of rounds (${note}; per round: ${list(q.gbps)})`);
  };
  ratio('native', 'native / underlay', 'goal ≥ 0.90x');
  ratio('tunnel', 'tunnel / underlay', 'the overlay\'s cost: encapsulation, a 50-byte smaller MTU');
  ratio('tunnel6', 'tunnel over IPv6 / tunnel', 'an outer IPv6 header: 20 bytes more, a UDP checksum');
  console.log(`  (four boxes built at once, three of them tendril clusters on etcd, set up in ${(r.setupMs / 1000).toFixed(1)} s)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printClusterThroughput(await runClusterThroughputBench(Number(process.argv[2] ?? 2), Number(process.argv[3] ?? 4), process.argv[4] !== 'unpinned'));
}
