// Policy cost on packets as rules grow (0, 100, 1,000, 10,000), tendril against
// an iptables baseline, side by side in one run with the same client:
// - tendril: one client pod and one server pod per count on one node; the server
//   of count N is selected by N tendril policies, each allowing TCP from the client
//   to one port (10000+i), one of them allowing the measured port 8080. Every rule
//   is a policy-map entry of that server endpoint (the count is printed).
// - iptables: a client namespace and one server namespace per count routed through
//   a node namespace by veth pairs (tendril's routed-veth topology, no eBPF).
//   FORWARD: conntrack ESTABLISHED,RELATED → ACCEPT, then `-d <server k>` jumps to a
//   chain of N rules: N-1 `-s client -p tcp --dport 10000+i -j ACCEPT` that do not
//   match, the rule accepting port 8080 last, then DROP — the linear chain that
//   Calico/kube-proxy-style iptables policy walks for every new connection
//   (N = 0: the chain only ACCEPTs).
// Measured per point: CRR with the native client (bench/native/crr.c: connect, 1-byte
// request, response, close with RST; 2 threads, `rounds` × `crrSeconds` s) as
// connections/s, latency p50/p99, CPU per connection (client + server) and the pod
// programs' ns per run, plus the agent's CPU over each run (its periodic work shares
// the machine's two cores with the measurement); and RR (1-byte request/response on
// one open connection, the Node.js client) p50/p99. All series interleave round by round. The tendril pods are
// dual-stack: the same pods and rules are measured over IPv6 too (identities are
// family-free: one policy map entry serves both).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec } from './benchProcess.js';
import { CrrServer, type CrrResult as NativeCrrResult, crrErrors, runCrrClient } from '../test/support/crr.js';
import { type BenchPod, BenchNamespaces, BpfRunStats, TcpClientSession, TendrilBenchNode, ingressRuleDoc, inNs, netnsPath, processCpuNs, runTcpClient, startTcpServer } from './policyDatapath.js';
import { percentile } from './stats.js';

const PORT = 8080;
/** RR's port (the Node.js server beside the native one); the rules allow it as they allow PORT. */
const RR_PORT = 8081;
/** tendril over IPv4, tendril over IPv6 (the same pods), the iptables baseline. */
type Side = 'tendril' | 'tendrilIpv6' | 'iptables';
const COUNTS = [0, 100, 1000, 10000];

/** One native crr run and what was measured around it. */
interface CrrRun {
  result: NativeCrrResult;
  /** The server process's CPU over the same run (µs). */
  serverCpuUs: number;
  /** The agent's CPU over the same run (µs); 0 for the iptables side. */
  agentCpuUs: number;
  /** tendril: the pod programs' run time and runs over the same run. */
  bpf?: { ns: number; runs: number };
}
interface RrResult {
  transactions: number;
  latenciesUs: number[];
}

export interface ScalePoint {
  rules: number;
  cps: number;
  crrP50: number;
  crrP99: number;
  rrP50: number;
  rrP99: number;
  errors: number;
  /** Paired against 0 rules: the median over rounds of (this point's / the 0-rule point's) figure in the same round. */
  cpsVs0: number;
  crrP50Vs0: number;
  rrP50Vs0: number;
  /**
   * CPU µs per connection of client and server processes together (on veth the kernel's
   * packet work, programs and rule walks included, runs mostly in the sender's context):
   * a cost that a busy machine disturbs much less than wall-clock rates.
   */
  cpuPerConn: number;
  cpuPerConnVs0: number;
  /** tendril only: ns per run of the pod programs during the CRR runs (kernel BPF statistics), and paired vs 0. */
  bpfNsPerRun?: number;
  bpfNsPerRunVs0?: number;
  /** The agent's CPU over the CRR runs, as a share of one core (tendril only). */
  agentCpuShare?: number;
  /** What a connection to a port no rule allows met: `timeout` = dropped (policy in force). */
  otherPort: string;
}

export interface PolicyScaleReport {
  rounds: number;
  crrSeconds: number;
  threads: number;
  rrMs: number;
  tendril: ScalePoint[];
  /** The same tendril pods and rules, over IPv6. */
  tendrilIpv6: ScalePoint[];
  iptables: ScalePoint[];
  /** Each point's server endpoint: policy-map entries and whether the agent says they are enforced. */
  tendrilEntries: Array<{ entries: number; datapathEnforced: boolean }>;
  /** Importing all 11,100 rules (in batches) until every server realized them. */
  importMs: number;
}

/**
 * iptables-restore input for the baseline: one chain per server, `counts[k]` rules
 * in the chain of server k (N = 0: the chain only ACCEPTs).
 */
function iptablesRuleset(counts: readonly number[], clientIp: string, serverIps: readonly string[]): string {
  const lines = ['*filter', ':INPUT ACCEPT [0:0]', ':FORWARD ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]'];
  counts.forEach((_, k) => lines.push(`:TDL-POL-${k} - [0:0]`));
  lines.push('-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT');
  counts.forEach((_, k) => lines.push(`-A FORWARD -d ${serverIps[k]}/32 -j TDL-POL-${k}`));
  counts.forEach((n, k) => {
    if (n === 0) lines.push(`-A TDL-POL-${k} -j ACCEPT`);
    else {
      for (let i = 0; i < n - 1; i++) lines.push(`-A TDL-POL-${k} -s ${clientIp}/32 -p tcp -m tcp --dport ${10000 + i} -j ACCEPT`);
      lines.push(`-A TDL-POL-${k} -s ${clientIp}/32 -p tcp -m tcp --dport ${PORT} -j ACCEPT`);
      lines.push(`-A TDL-POL-${k} -s ${clientIp}/32 -p tcp -m tcp --dport ${RR_PORT} -j ACCEPT`);
      lines.push(`-A TDL-POL-${k} -j DROP`);
    }
  });
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** Namespaces routed through `node` by veth pairs: the client 10.249.1.2, server k 10.249.(2+k).2. */
async function routedNamespaces(node: string, client: string, servers: readonly string[]): Promise<{ clientIp: string; serverIps: string[] }> {
  await exec(inNs(node, ['sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']));
  const plumb = async (ns: string, hostIf: string, subnet: number) => {
    await exec(['ip', '-n', node, 'link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', `/var/run/netns/${ns}`]);
    await exec(['ip', '-n', node, 'addr', 'add', `10.249.${subnet}.1/24`, 'dev', hostIf]);
    await exec(['ip', '-n', node, 'link', 'set', hostIf, 'up']);
    await exec(['ip', '-n', ns, 'addr', 'add', `10.249.${subnet}.2/24`, 'dev', 'eth0']);
    await exec(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
    await exec(['ip', '-n', ns, 'route', 'add', 'default', 'via', `10.249.${subnet}.1`]);
  };
  await plumb(client, 'vclient', 1);
  for (const [k, ns] of servers.entries()) await plumb(ns, `vserver${k}`, 2 + k);
  return { clientIp: '10.249.1.2', serverIps: servers.map((_, k) => `10.249.${2 + k}.2`) };
}

async function checkPort(ns: string, ip: string, port: number): Promise<string> {
  return (await runTcpClient<{ result: string }>(ns, ['check', ip, String(port), '300'])).result;
}

/** The tendril rules of the server for `n` rules: the allowing one first (the CRR and RR ports), then n-1 that allow other ports. */
function tendrilRules(n: number): string[] {
  const docs: string[] = [];
  for (let i = 0; i < n; i++) docs.push(ingressRuleDoc(`scale-${n}-${i}`, `scale-server-${n}`, 'scale-client', i === 0 ? [PORT, RR_PORT] : 10000 + i - 1));
  return docs;
}

/**
 * Every rule count is in place at once — one server pod (and one baseline server
 * namespace with its own chain) per count, one client — so the measurements of
 * all points interleave round by round and the machine's load drifts onto all of
 * them alike, instead of onto whichever count happened to run during a busy spell.
 */
export async function runPolicyScaleBench(rounds = 3, crrSeconds = 5, rrMs = 300, threads = 2): Promise<PolicyScaleReport> {
  const tag = `tdlps${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-pscale-'));
  const stoppers: Array<() => void | Promise<void>> = [];
  let tendrilNode: TendrilBenchNode | undefined;
  let bpfStats: BpfRunStats | undefined;
  try {
    const [tn, tc, bn, bc] = [`${tag}tn`, `${tag}tc`, `${tag}bn`, `${tag}bc`];
    const tServersNs = COUNTS.map((_, k) => `${tag}ts${k}`);
    const bServersNs = COUNTS.map((_, k) => `${tag}bs${k}`);
    await namespaces.add(tn, tc, bn, bc, ...tServersNs, ...bServersNs);

    tendrilNode = await TendrilBenchNode.start(tn, join(scratch, 'state'), '10.248.0.0/24,fd00:248::/112');
    await tendrilNode.addPod('scale-client', tc, 'app=scale-client');
    const tServers: BenchPod[] = [];
    for (const [k, n] of COUNTS.entries()) tServers.push(await tendrilNode.addPod(`scale-server-${n}`, tServersNs[k]!, `app=scale-server-${n}`));
    const base = await routedNamespaces(bn, bc, bServersNs);

    const ip6 = (pod: BenchPod) => {
      if (pod.ip6 === undefined) throw new Error(`${pod.name} got no IPv6 address`);
      return pod.ip6;
    };
    // The native server answers CRR; the Node.js one RR (on the next port: both listen in every server namespace).
    const crrServers: Record<Side, CrrServer[]> = { tendril: [], tendrilIpv6: [], iptables: [] };
    const rrServers: Record<Side, Awaited<ReturnType<typeof startTcpServer>>[]> = { tendril: [], tendrilIpv6: [], iptables: [] };
    for (const [k, pod] of tServers.entries()) {
      const s = await CrrServer.start(netnsPath(tServersNs[k]!), [`${pod.ip}:${PORT}`, `[${ip6(pod)}]:${PORT}`], { threads });
      stoppers.push(() => s.stop());
      crrServers.tendril.push(s);
      crrServers.tendrilIpv6.push(s);
      rrServers.tendril.push(await startTcpServer(tServersNs[k]!, pod.ip, RR_PORT));
      rrServers.tendrilIpv6.push(await startTcpServer(tServersNs[k]!, ip6(pod), RR_PORT));
    }
    for (const [k, ip] of base.serverIps.entries()) {
      const s = await CrrServer.start(netnsPath(bServersNs[k]!), [`${ip}:${PORT}`], { threads });
      stoppers.push(() => s.stop());
      crrServers.iptables.push(s);
      rrServers.iptables.push(await startTcpServer(bServersNs[k]!, ip, RR_PORT));
    }
    for (const s of [...rrServers.tendril, ...rrServers.tendrilIpv6, ...rrServers.iptables]) stoppers.push(s.stop);

    // tendril: every count's rules, then wait until each server realizes them and the agent is idle.
    const t0 = performance.now();
    const revision = await tendrilNode.importPolicies(COUNTS.flatMap(tendrilRules));
    await tendrilNode.waitRealized(revision, new Set(tServers.map((p) => p.endpointId)), 120_000);
    const importMs = performance.now() - t0;
    await tendrilNode.waitIdle();
    const tendrilEntries: PolicyScaleReport['tendrilEntries'] = [];
    for (const pod of tServers) {
      const pol = await tendrilNode.client.getEndpointPolicy(pod.endpointId);
      tendrilEntries.push({ entries: pol.entries.length, datapathEnforced: pol.datapathEnforced });
    }
    // iptables: the same counts, one chain per server; RR's port is allowed as the measured one is.
    await exec(inNs(bn, ['iptables-restore']), process.env, iptablesRuleset(COUNTS, base.clientIp, base.serverIps));

    const tendrilClient = TcpClientSession.start(tc);
    const rrClients: Record<Side, TcpClientSession> = { tendril: tendrilClient, tendrilIpv6: tendrilClient, iptables: TcpClientSession.start(bc) };
    stoppers.push(() => rrClients.tendril.stop(), () => rrClients.iptables.stop());
    type Series = { side: Side; k: number; clientNs: string; serverIp: string; dest: string; crr: CrrRun[]; rr: RrResult[] };
    const series: Series[] = [];
    for (const k of COUNTS.keys()) {
      series.push({ side: 'tendril', k, clientNs: tc, serverIp: tServers[k]!.ip, dest: `${tServers[k]!.ip}:${PORT}`, crr: [], rr: [] });
      series.push({ side: 'tendrilIpv6', k, clientNs: tc, serverIp: ip6(tServers[k]!), dest: `[${ip6(tServers[k]!)}]:${PORT}`, crr: [], rr: [] });
      series.push({ side: 'iptables', k, clientNs: bc, serverIp: base.serverIps[k]!, dest: `${base.serverIps[k]!}:${PORT}`, crr: [], rr: [] });
    }
    const agentPid = tendrilNode.process.pid!;
    for (const s of series) {
      const warm = await runCrrClient(netnsPath(s.clientNs), { destinations: [s.dest], seconds: 1, threads, timeoutMs: 1000 });
      if (warm.connections === 0) throw new Error(`${s.side} ${COUNTS[s.k]} rules: no connection to ${s.dest} answered (${crrErrors(warm)})`);
    }
    bpfStats = await BpfRunStats.enable(tendrilNode);
    for (let r = 0; r < rounds; r++) {
      // Each round starts one series further on, so no series always runs first.
      const order = series.map((_, i) => series[(i + r) % series.length]!);
      for (const s of order) {
        const server = crrServers[s.side][s.k]!;
        const tendril = s.side !== 'iptables';
        const bpf0 = tendril ? await bpfStats.read() : undefined;
        const [cpu0, agent0] = [await server.cpuNs(), await processCpuNs(agentPid)];
        const result = await runCrrClient(netnsPath(s.clientNs), { destinations: [s.dest], seconds: crrSeconds, threads, timeoutMs: 1000 });
        const run: CrrRun = { result, serverCpuUs: ((await server.cpuNs()) - cpu0) / 1000, agentCpuUs: tendril ? ((await processCpuNs(agentPid)) - agent0) / 1000 : 0 };
        if (bpf0) {
          const bpf1 = await bpfStats.read();
          run.bpf = { ns: bpf1.ns - bpf0.ns, runs: bpf1.runs - bpf0.runs };
        }
        s.crr.push(run);
      }
      for (const s of order) s.rr.push(await rrClients[s.side].run<RrResult>({ op: 'rr', ip: s.serverIp, port: RR_PORT, ms: rrMs }));
    }
    await bpfStats.restore();
    bpfStats = undefined;
    const points = async (side: Series['side']) => {
      const out: ScalePoint[] = [];
      const zero = series.find((x) => x.side === side && x.k === 0)!;
      const roundCps = (x: CrrRun) => x.result.connPerS;
      const roundCpu = (x: CrrRun) => (x.result.cpuUs.user + x.result.cpuUs.system + x.serverCpuUs) / x.result.connections;
      const roundBpf = (x: CrrRun) => x.bpf!.ns / x.bpf!.runs;
      const roundCrrP50 = (x: CrrRun) => x.result.latencyUs.p50;
      const roundRrP50 = (x: RrResult) => percentile(x.latenciesUs, 0.5);
      // The machine is shared: a busy spell moves every point measured in it, so each
      // round's figure is compared with the 0-rule figure of the same round.
      const paired = <T>(of: (s: Series) => T[], s: Series, fig: (x: T) => number) => percentile(of(s).map((x, r) => fig(x) / fig(of(zero)[r]!)), 0.5);
      const crrOf = (s: Series) => s.crr;
      const rrOf = (s: Series) => s.rr;
      for (const s of series.filter((x) => x.side === side)) {
        const rrLat = s.rr.flatMap((x) => x.latenciesUs);
        out.push({
          rules: COUNTS[s.k]!,
          cps: percentile(s.crr.map(roundCps), 0.5),
          crrP50: percentile(s.crr.map(roundCrrP50), 0.5),
          crrP99: percentile(s.crr.map((x) => x.result.latencyUs.p99), 0.5),
          rrP50: percentile(rrLat, 0.5),
          rrP99: percentile(rrLat, 0.99),
          errors: s.crr.reduce((a, x) => a + x.result.errorCount, 0),
          cpsVs0: paired(crrOf, s, roundCps),
          crrP50Vs0: paired(crrOf, s, roundCrrP50),
          rrP50Vs0: paired(rrOf, s, roundRrP50),
          cpuPerConn: percentile(s.crr.map(roundCpu), 0.5),
          cpuPerConnVs0: paired(crrOf, s, roundCpu),
          ...(side !== 'iptables'
            ? { bpfNsPerRun: percentile(s.crr.map(roundBpf), 0.5), bpfNsPerRunVs0: paired(crrOf, s, roundBpf), agentCpuShare: percentile(s.crr.map((x) => x.agentCpuUs / (x.result.seconds * 1e6)), 0.5) }
            : {}),
          otherPort: await checkPort(s.clientNs, s.serverIp, PORT + 2),
        });
      }
      return out;
    };
    return { rounds, crrSeconds, threads, rrMs, tendril: await points('tendril'), tendrilIpv6: await points('tendrilIpv6'), iptables: await points('iptables'), tendrilEntries, importMs };
  } finally {
    if (bpfStats) await bpfStats.restore();
    for (const stop of stoppers) await stop();
    if (tendrilNode) await tendrilNode.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  }
}

const spread = (xs: number[]) => (Math.max(...xs) - Math.min(...xs)) / Math.max(...xs);

export function printPolicyScale(r: PolicyScaleReport): void {
  const f = (x: number, d = 0) => x.toFixed(d).padStart(9);
  console.log(`\nPolicy cost vs rule count, pod→pod TCP on one node: CRR (native client: connect+1B req/resp+close with RST, ${r.threads} threads, ${r.rounds}×${r.crrSeconds} s) and RR (1B on an open connection, ${r.rounds}×${r.rrMs} ms), interleaved`);
  console.log('  iptables baseline: routed veths through a node netns; FORWARD = ct ESTABLISHED accept, then a linear chain of N rules (allowing rule last)');
  console.log(`  ${'rules'.padStart(6)} | ${'tendril'.padEnd(99)} | ${'iptables'.padEnd(99)} | tendril server map`);
  const head = ['conn/s', 'vs 0', 'CPU/conn', 'vs 0', 'CRR p50', 'vs 0', 'CRR p99', 'RR p50', 'vs 0', 'RR p99', ''].map((h) => h.padStart(9)).join('');
  console.log(`  ${''.padStart(6)} | ${head} | ${head} | (latencies µs; port ${PORT + 2}: timeout = dropped)`);
  r.tendril.forEach((t, i) => {
    const b = r.iptables[i]!;
    const e = r.tendrilEntries[i]!;
    const cols = (p: ScalePoint) => `${f(p.cps)}${f(p.cpsVs0, 2)}${f(p.cpuPerConn, 1)}${f(p.cpuPerConnVs0, 2)}${f(p.crrP50)}${f(p.crrP50Vs0, 2)}${f(p.crrP99)}${f(p.rrP50)}${f(p.rrP50Vs0, 2)}${f(p.rrP99)}${(p.errors ? `e${p.errors}` : '').padStart(9)}`;
    console.log(`  ${String(t.rules).padStart(6)} | ${cols(t)} | ${cols(b)} | ${e.entries} entries${e.datapathEnforced ? '' : ' (agent: not enforced)'}; ${PORT + 2}: ${t.otherPort}/${b.otherPort}`);
  });
  const tc = r.tendril.map((p) => p.cps);
  const bc = r.iptables.map((p) => p.cps);
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
  const pairedSpread = (xs: number[]) => Math.max(...xs.map((x) => Math.abs(1 - x)));
  console.log(
    `  tendril spread 0→10,000 rules, paired per round: conn/s ${pct(pairedSpread(r.tendril.map((p) => p.cpsVs0)))}, CPU/conn ${pct(pairedSpread(r.tendril.map((p) => p.cpuPerConnVs0)))}, RR p50 ${pct(pairedSpread(r.tendril.map((p) => p.rrP50Vs0)))}, CRR p50 ${pct(pairedSpread(r.tendril.map((p) => p.crrP50Vs0)))} (goal: within 5%);` +
      ` of the medians: conn/s ${pct(spread(tc))}, CRR p50 ${pct(spread(r.tendril.map((p) => p.crrP50)))}, RR p50 ${pct(spread(r.tendril.map((p) => p.rrP50)))}`,
  );
  console.log(
    `  tendril pod programs, ns per run during CRR (kernel BPF stats): ${r.tendril.map((p) => `${p.rules}: ${p.bpfNsPerRun!.toFixed(0)}`).join(', ')}; paired vs 0: ${r.tendril.map((p) => p.bpfNsPerRunVs0!.toFixed(2)).join(' → ')}`,
  );
  console.log(`  the agent's CPU during the CRR runs (share of one core): ${r.tendril.map((p) => `${p.rules}: ${(p.agentCpuShare! * 100).toFixed(1)}%`).join(', ')}`);
  console.log(`  CPU µs per connection (client + server processes) at 10,000 vs 0 rules (paired): tendril ${r.tendril.at(-1)!.cpuPerConnVs0.toFixed(2)}x, iptables ${r.iptables.map((p) => p.cpuPerConnVs0.toFixed(2)).join(' → ')}`);
  console.log(
    `  conn/s at 10,000 vs 0 rules (paired): tendril ${r.tendril.at(-1)!.cpsVs0.toFixed(2)}x, iptables ${r.iptables.at(-1)!.cpsVs0.toFixed(2)}x (${r.iptables.map((p) => p.cpsVs0.toFixed(2)).join(' → ')}); tendril / iptables at 10,000: ${(tc.at(-1)! / bc.at(-1)!).toFixed(2)}x`,
  );
  const v6 = r.tendrilIpv6;
  console.log(
    `  tendril over IPv6 (the same pods and rules): conn/s ${v6.map((p) => p.cps.toFixed(0)).join(' → ')}, paired vs 0 ${v6.map((p) => p.cpsVs0.toFixed(2)).join(' → ')}; pod programs ns per run ${v6.map((p) => `${p.rules}: ${p.bpfNsPerRun!.toFixed(0)}`).join(', ')}, paired vs 0 ${v6.map((p) => p.bpfNsPerRunVs0!.toFixed(2)).join(' → ')}; IPv6 / IPv4 conn/s at 0 and 10,000 rules: ${(v6[0]!.cps / r.tendril[0]!.cps).toFixed(2)}x, ${(v6.at(-1)!.cps / r.tendril.at(-1)!.cps).toFixed(2)}x`,
  );
  console.log(`  tendril: ${r.tendril.map((p) => p.rules).reduce((a, b) => a + b, 0)} rules imported and realized in ${(r.importMs / 1000).toFixed(1)} s`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const env = (name: string, dflt: number) => Number(process.env[name] ?? dflt);
  printPolicyScale(await runPolicyScaleBench(env('TENDRIL_BENCH_ROUNDS', 3), env('TENDRIL_BENCH_CRR_SECONDS', 5)));
}
