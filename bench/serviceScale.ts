// Connect cost through a ClusterIP as services grow (10, 1,000, 10,000), tendril
// against a kube-proxy-style iptables baseline, side by side in one run:
// - tendril: one node namespace (agent, eBPF datapath) per count, with a client pod
//   and three server pods; N services through the agent's API (PUT /service/{id}),
//   3 backends each: the measured service (ID N) is backed by the three server pods,
//   the others by addresses no pod has.
// - iptables: the same per count in a node namespace of its own, pods on routed
//   veth pairs, and the same N services as kube-proxy's iptables mode would write
//   them (nat: a services chain with one rule per service → per-service chain of
//   `statistic --mode random` rules → per-endpoint DNAT chains), loaded with one
//   iptables-restore (the machine's iptables; TENDRIL_BENCH_IPTABLES=iptables-legacy
//   for the legacy backend). The measured service's rule is LAST in the services
//   chain: its connections walk every rule — the worst case, which is what a chain
//   of N services costs the service found last.
// Measured per point: CRR with the native client (bench/native/crr.c: connect,
// 1-byte request, response, close with RST; 2 threads, `rounds` × `seconds` s) to the
// measured ClusterIP: connections/s and latency p50/p99; all series interleave round
// by round, and each round's figures are also compared with the 10-service figures of
// the same round (the machine is shared). Clients run on CPU 0 and servers on CPU 1,
// every series alike.
// Beside latency, figures a busy machine moves less: CPU per connection of client
// and servers, and for tendril the pod programs' ns per run (kernel BPF stats).
// IPv6: the tendril nodes are dual-stack and hold N IPv6 services too (IDs apart,
// fd00:96::/112, the measured one backed by the server pods' IPv6 addresses), and
// a fourth series connects to the IPv6 ClusterIP from the same client pod; the two
// families' services live in maps of their own (tendril_lb4_svc, tendril_lb6_svc).
// TENDRIL_BENCH_SERVICE_SCALE_QUICK=1: 10 and 1,000 services, 1 s runs (a check, not a measurement).
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec } from './benchProcess.js';
import { CrrServer, type CrrResult, crrErrors, runCrrClient } from '../test/support/crr.js';
import { BenchNamespaces, BpfRunStats, TendrilBenchNode, inNs, netnsPath, runTcpClient } from './policyDatapath.js';
import { benchServices, benchServices6, cleanupOnSignal, clusterIp, clusterIp6, kubeProxyStyleRuleset, once, programServices, routedVethPods, serviceCounts } from './serviceCommon.js';
import { percentile } from './stats.js';

const QUICK = process.env.TENDRIL_BENCH_SERVICE_SCALE_QUICK === '1';
const COUNTS = QUICK ? [10, 1000] : [10, 1000, 10000];
/** The first IPv6 service's ID: past every IPv4 one (IDs are one number space across families). */
const FIRST_ID6 = 20001;
const SERVICE_PORT = 80;
const BACKEND_PORT = 8080;
const median = (xs: number[]) => percentile(xs, 0.5);
/** The iptables the baseline uses: `iptables` (this machine's default backend) unless TENDRIL_BENCH_IPTABLES names another (e.g. iptables-legacy). */
const IPTABLES = process.env.TENDRIL_BENCH_IPTABLES ?? 'iptables';
const loadAverage = async () => Number((await readFile('/proc/loadavg', 'utf8')).split(' ')[0]);

/** The series: tendril to the IPv4 ClusterIP, tendril to the IPv6 one (the same nodes and pods), the iptables baseline. */
const SIDES = ['tendril', 'tendrilIpv6', 'iptables'] as const;
type Side = (typeof SIDES)[number];

export interface ServiceScalePoint {
  services: number;
  p50: number;
  p99: number;
  connPerS: number;
  errors: number;
  /** Median over rounds of (this point's p50 / the 10-service p50 of the same round). */
  p50Vs10: number;
  /** Median over rounds of (this point's connections/s / the 10-service figure of the same round). */
  connPerSVs10: number;
  /**
   * CPU µs per connection of the client and the three servers together, median
   * over rounds, and paired vs 10: the kernel's work for a connection (netfilter
   * walks, BPF programs) runs mostly in their context on veth, so this cost moves
   * far less than latency when others load the machine.
   */
  cpuPerConn: number;
  cpuPerConnVs10: number;
  /** tendril: ns per run of the pod programs during the runs (kernel BPF statistics), and paired vs 10. */
  bpfNsPerRun?: number;
  bpfNsPerRunVs10?: number;
}

export interface ServiceScaleReport {
  rounds: number;
  seconds: number;
  threads: number;
  tendril: ServiceScalePoint[];
  /** The same tendril nodes and client pods, to the IPv6 ClusterIP among N IPv6 services. */
  tendrilIpv6: ServiceScalePoint[];
  iptables: ServiceScalePoint[];
  /** Per count: wall time to PUT the services (16 in flight), and what GET /service then said. */
  tendrilProgram: Array<{ ms: number; services: number; realized: number }>;
  /** Per count: wall time to PUT the N IPv6 services after the IPv4 ones. */
  tendrilProgram6: Array<{ ms: number }>;
  /** Per count: iptables-restore of the whole ruleset, and the nat rules it left. */
  iptablesProgram: Array<{ ms: number; rules: number }>;
  /** Whether clients ran pinned to CPU 0 and servers to CPU 1. */
  pinned: boolean;
  /** `iptables -V` of the baseline's iptables (its backend: nf_tables or legacy). */
  iptablesVersion: string;
  /** The machine's 1-minute load average when the measurement started and ended (the machine is shared). */
  load: [number, number];
}

export async function runServiceScaleBench(rounds = 3, seconds = QUICK ? 1 : 5, threads = 2): Promise<ServiceScaleReport> {
  const tag = `tdlss${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-svcscale-'));
  const stoppers: Array<() => void | Promise<void>> = [];
  const nodes: TendrilBenchNode[] = [];
  const bpfStats: BpfRunStats[] = [];
  const cleanup = once(async () => {
    while (bpfStats.length > 0) await bpfStats.pop()!.restore();
    for (const stop of stoppers) await stop();
    for (const node of nodes) await node.stop();
    // The baseline's rules live only in its node namespaces: they go with them.
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    const names = (side: string, k: number) => ({ node: `${tag}${side}${k}n`, client: `${tag}${side}${k}c`, servers: [0, 1, 2].map((j) => `${tag}${side}${k}s${j}`) });
    const tNames = COUNTS.map((_, k) => names('t', k));
    const bNames = COUNTS.map((_, k) => names('b', k));
    for (const n of [...tNames, ...bNames]) await namespaces.add(n.node, n.client, ...n.servers);

    // tendril: an agent per count, a client and three server pods each.
    const tServerIps: string[][] = [];
    const tServerIps6: string[][] = [];
    for (const [k, n] of tNames.entries()) {
      // Dual-stack: every pod gets an IPv4 and an IPv6 address.
      const node = await TendrilBenchNode.start(n.node, join(scratch, `state${k}`), `10.248.${k}.0/24,fd00:248:${k}::/112`);
      nodes.push(node);
      await node.addPod(`svc-client-${k}`, n.client, 'app=svc-client');
      const ips: string[] = [];
      const ips6: string[] = [];
      for (const [j, ns] of n.servers.entries()) {
        const pod = await node.addPod(`svc-server-${k}-${j}`, ns, 'app=svc-server');
        if (pod.ip6 === undefined) throw new Error(`${pod.name} got no IPv6 address`);
        ips.push(pod.ip);
        ips6.push(pod.ip6);
      }
      tServerIps.push(ips);
      tServerIps6.push(ips6);
    }
    // iptables: routed veth pods per count.
    const bServerIps: string[][] = [];
    for (const [k, n] of bNames.entries()) bServerIps.push((await routedVethPods(n.node, [n.client, ...n.servers], 240 + k)).slice(1));
    const pinned = availableParallelism() >= 2;
    // One native server per server namespace, on every address the series reach it by (tendril: IPv4 and IPv6).
    const servers: Record<'tendril' | 'iptables', CrrServer[][]> = { tendril: [], iptables: [] };
    for (const [k, n] of tNames.entries()) {
      servers.tendril.push(
        await Promise.all(n.servers.map((ns, j) => CrrServer.start(netnsPath(ns), [`${tServerIps[k]![j]}:${BACKEND_PORT}`, `[${tServerIps6[k]![j]}]:${BACKEND_PORT}`], { threads, ...(pinned ? { cpus: '1' } : {}) }))),
      );
    }
    for (const [k, n] of bNames.entries()) {
      servers.iptables.push(await Promise.all(n.servers.map((ns, j) => CrrServer.start(netnsPath(ns), [`${bServerIps[k]![j]}:${BACKEND_PORT}`], { threads, ...(pinned ? { cpus: '1' } : {}) }))));
    }
    for (const s of [...servers.tendril.flat(), ...servers.iptables.flat()]) stoppers.push(() => s.stop());
    const serversCpuNs = async (side: Side, k: number) => (await Promise.all(servers[side === 'iptables' ? 'iptables' : 'tendril'][k]!.map((s) => s.cpuNs()))).reduce((a, b) => a + b, 0);

    // Services: the agents program theirs at the same time (each its own process).
    const realOf = (ips: string[]) => ips.map((ip) => ({ ip, port: BACKEND_PORT }));
    const tendrilProgram = await Promise.all(
      nodes.map(async (node, k) => {
        const ms = await programServices(node.client, benchServices(COUNTS[k]!, SERVICE_PORT, BACKEND_PORT, realOf(tServerIps[k]!)));
        return { ms, ...(await serviceCounts(node.client)) };
      }),
    );
    const tendrilProgram6 = await Promise.all(
      nodes.map(async (node, k) => ({ ms: await programServices(node.client, benchServices6(COUNTS[k]!, SERVICE_PORT, BACKEND_PORT, realOf(tServerIps6[k]!), FIRST_ID6)) })),
    );
    const iptablesProgram: ServiceScaleReport['iptablesProgram'] = [];
    for (const [k, n] of bNames.entries()) {
      const text = kubeProxyStyleRuleset(benchServices(COUNTS[k]!, SERVICE_PORT, BACKEND_PORT, realOf(bServerIps[k]!)));
      const t0 = performance.now();
      await exec(inNs(n.node, [`${IPTABLES}-restore`]), process.env, text);
      const restoreMs = performance.now() - t0;
      const rules = (await exec(inNs(n.node, [IPTABLES, '-t', 'nat', '-S']))).split('\n').filter((l) => l.startsWith('-A ')).length;
      iptablesProgram.push({ ms: restoreMs, rules });
    }
    for (const node of nodes) await node.waitIdle();

    // Every measured ClusterIP answers before anything is timed.
    const target = (side: Side, k: number) => (side === 'tendrilIpv6' ? clusterIp6(COUNTS[k]!) : clusterIp(COUNTS[k]!));
    for (const [side, all] of [['tendril', tNames], ['tendrilIpv6', tNames], ['iptables', bNames]] as const) {
      for (const [k, n] of all.entries()) {
        const r = (await runTcpClient<{ result: string }>(n.client, ['check', target(side, k), String(SERVICE_PORT), '1000'])).result;
        if (r !== 'connected') throw new Error(`${n.client} → ${target(side, k)}:${SERVICE_PORT} (${COUNTS[k]} services): ${r}`);
      }
    }

    type Series = { side: Side; k: number; runs: CrrResult[]; cpuPerConn: number[]; bpf: Array<{ ns: number; runs: number }> };
    const series: Series[] = [];
    for (const k of COUNTS.keys()) {
      for (const side of SIDES) series.push({ side, k, runs: [], cpuPerConn: [], bpf: [] });
    }
    const clientNs = (s: Series) => (s.side === 'iptables' ? bNames : tNames)[s.k]!.client;
    const dest = (s: Series) => (s.side === 'tendrilIpv6' ? `[${target(s.side, s.k)}]:${SERVICE_PORT}` : `${target(s.side, s.k)}:${SERVICE_PORT}`);
    const run = (s: Series, runSeconds: number) => runCrrClient(netnsPath(clientNs(s)), { destinations: [dest(s)], seconds: runSeconds, threads, timeoutMs: 1000, ...(pinned ? { cpus: '0' } : {}) });
    for (const s of series) {
      const warm = await run(s, 1);
      if (warm.connections === 0) throw new Error(`${s.side} ${COUNTS[s.k]} services: no connection to ${dest(s)} answered (${crrErrors(warm)})`);
    }
    for (const node of nodes) bpfStats.push(await BpfRunStats.enable(node));
    const loadStart = await loadAverage();
    for (let r = 0; r < rounds; r++) {
      // Each round starts one series further on, so no series always runs first.
      for (const s of series.map((_, i) => series[(i + r) % series.length]!)) {
        const b0 = s.side !== 'iptables' ? await bpfStats[s.k]!.read() : undefined;
        const cpu0 = await serversCpuNs(s.side, s.k);
        const res = await run(s, seconds);
        s.cpuPerConn.push((res.cpuUs.user + res.cpuUs.system + ((await serversCpuNs(s.side, s.k)) - cpu0) / 1000) / Math.max(1, res.connections));
        s.runs.push(res);
        if (b0) {
          const b1 = await bpfStats[s.k]!.read();
          s.bpf.push({ ns: b1.ns - b0.ns, runs: b1.runs - b0.runs });
        }
      }
    }
    while (bpfStats.length > 0) await bpfStats.pop()!.restore();
    const load: [number, number] = [loadStart, await loadAverage()];

    const points = (side: Series['side']): ServiceScalePoint[] => {
      const mine = series.filter((s) => s.side === side);
      const base = mine[0]!;
      return mine.map((s) => {
        const nsPerRun = (b: { ns: number; runs: number }) => b.ns / Math.max(1, b.runs);
        return {
          services: COUNTS[s.k]!,
          p50: median(s.runs.map((x) => x.latencyUs.p50)),
          p99: median(s.runs.map((x) => x.latencyUs.p99)),
          connPerS: median(s.runs.map((x) => x.connPerS)),
          errors: s.runs.reduce((a, x) => a + x.errorCount, 0),
          p50Vs10: median(s.runs.map((x, r) => x.latencyUs.p50 / base.runs[r]!.latencyUs.p50)),
          connPerSVs10: median(s.runs.map((x, r) => x.connPerS / base.runs[r]!.connPerS)),
          cpuPerConn: median(s.cpuPerConn),
          cpuPerConnVs10: median(s.cpuPerConn.map((c, r) => c / base.cpuPerConn[r]!)),
          ...(side !== 'iptables' ? { bpfNsPerRun: median(s.bpf.map(nsPerRun)), bpfNsPerRunVs10: median(s.bpf.map((b, r) => nsPerRun(b) / nsPerRun(base.bpf[r]!))) } : {}),
        };
      });
    };
    const iptablesVersion = (await exec([IPTABLES, '-V'])).trim();
    return { rounds, seconds, threads, tendril: points('tendril'), tendrilIpv6: points('tendrilIpv6'), iptables: points('iptables'), tendrilProgram, tendrilProgram6, iptablesProgram, load, iptablesVersion, pinned };
  } finally {
    await cleanup();
    unhook();
  }
}

export function printServiceScale(r: ServiceScaleReport): void {
  const f = (x: number, d = 0) => x.toFixed(d).padStart(9);
  console.log(
    `\nService connect cost vs services installed: pod → ClusterIP TCP CRR (native client: connect + 1-byte request/response + close with RST, ${r.threads} threads), ${r.rounds}×${r.seconds} s per point, all points interleaved${r.pinned ? ', clients on CPU 0 and servers on CPU 1' : ''} (load average ${r.load[0].toFixed(1)} → ${r.load[1].toFixed(1)} on ${availableParallelism()} CPUs)`,
  );
  console.log('  tendril: services via PUT /service/{id}, 3 backends each (the measured one: 3 server pods on the node), eBPF lookup at the client pod');
  console.log(
    `  iptables (${r.iptablesVersion}): kube-proxy-style nat chains (services chain → statistic-probability chain → DNAT chain), routed veth pods; the measured service is the LAST rule of the services chain (worst case: every rule walked)`,
  );
  const head = ['p50 µs', 'p99 µs', 'p50 vs10', 'conn/s', 'vs 10', 'CPU/conn', 'vs 10'].map((h) => h.padStart(9)).join('');
  console.log(`  ${'services'.padStart(8)} | ${'tendril'.padEnd(72)} | ${'iptables'.padEnd(54)} |`);
  console.log(`  ${''.padStart(8)} | ${head}${'BPF ns/run'.padStart(11)}${'vs 10'.padStart(7)} | ${head} | programmed in (tendril API, 16 in flight / iptables-restore)`);
  r.tendril.forEach((t, i) => {
    const b = r.iptables[i]!;
    const tp = r.tendrilProgram[i]!;
    const bp = r.iptablesProgram[i]!;
    const cols = (p: ServiceScalePoint) => `${f(p.p50)}${f(p.p99)}${f(p.p50Vs10, 2)}${f(p.connPerS)}${f(p.connPerSVs10, 2)}${f(p.cpuPerConn, 1)}${f(p.cpuPerConnVs10, 2)}`;
    const errs = t.errors + b.errors > 0 ? `  errors ${t.errors}/${b.errors}` : '';
    console.log(
      `  ${String(t.services).padStart(8)} | ${cols(t)}${t.bpfNsPerRun!.toFixed(0).padStart(11)}${t.bpfNsPerRunVs10!.toFixed(2).padStart(7)} | ${cols(b)} | ${(tp.ms / 1000).toFixed(2)} s (${tp.realized}/${tp.services} realized) / ${(bp.ms / 1000).toFixed(2)} s (${bp.rules} nat rules)${errs}`,
    );
  });
  const last = r.tendril.length - 1;
  const ratio = (xs: ServiceScalePoint[], key: 'p50' | 'p99') => (xs[last]![key] / xs[0]![key]).toFixed(2);
  console.log(
    `  ${r.tendril[last]!.services} / 10 services: tendril p50 ${ratio(r.tendril, 'p50')}x (paired per round ${r.tendril[last]!.p50Vs10.toFixed(2)}x), p99 ${ratio(r.tendril, 'p99')}x, CPU/conn ${r.tendril[last]!.cpuPerConnVs10.toFixed(2)}x, BPF ns/run ${r.tendril[last]!.bpfNsPerRunVs10!.toFixed(2)}x conn/s ${r.tendril[last]!.connPerSVs10.toFixed(2)}x (goal: ≥ 0.95x);` +
      ` iptables p50 ${ratio(r.iptables, 'p50')}x (paired ${r.iptables[last]!.p50Vs10.toFixed(2)}x), p99 ${ratio(r.iptables, 'p99')}x, CPU/conn ${r.iptables[last]!.cpuPerConnVs10.toFixed(2)}x`,
  );
  const v6 = r.tendrilIpv6;
  console.log(`  tendril over IPv6 (the same nodes and client pods, N IPv6 services beside the N IPv4 ones; PUT in ${r.tendrilProgram6.map((p) => `${(p.ms / 1000).toFixed(2)} s`).join(' / ')}):`);
  for (const p of v6) {
    console.log(`  ${String(p.services).padStart(8)} | ${f(p.p50)}${f(p.p99)}${f(p.p50Vs10, 2)}${f(p.connPerS)}${f(p.connPerSVs10, 2)}${f(p.cpuPerConn, 1)}${f(p.cpuPerConnVs10, 2)}${p.bpfNsPerRun!.toFixed(0).padStart(11)}${p.bpfNsPerRunVs10!.toFixed(2).padStart(7)}${p.errors > 0 ? `  errors ${p.errors}` : ''}`);
  }
  console.log(
    `  ${v6.at(-1)!.services} / 10 services over IPv6: p50 paired ${v6.at(-1)!.p50Vs10.toFixed(2)}x, CPU/conn ${v6.at(-1)!.cpuPerConnVs10.toFixed(2)}x, BPF ns/run ${v6.at(-1)!.bpfNsPerRunVs10!.toFixed(2)}x (goal: flat); IPv6 / IPv4 conn/s at ${v6[0]!.services} and ${v6.at(-1)!.services}: ${(v6[0]!.connPerS / r.tendril[0]!.connPerS).toFixed(2)}x, ${(v6.at(-1)!.connPerS / r.tendril.at(-1)!.connPerS).toFixed(2)}x`,
  );
  console.log(`  at ${r.tendril[last]!.services} services: tendril p50 ${(r.tendril[last]!.p50 / r.iptables[last]!.p50).toFixed(2)}x the baseline's, p99 ${(r.tendril[last]!.p99 / r.iptables[last]!.p99).toFixed(2)}x`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const env = (name: string, dflt: number) => Number(process.env[name] ?? dflt);
  printServiceScale(await runServiceScaleBench(env('TENDRIL_BENCH_ROUNDS', 3), env('TENDRIL_BENCH_CRR_SECONDS', QUICK ? 1 : 5)));
}
