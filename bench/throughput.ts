// Pod-to-pod TCP throughput (iperf3) side by side in one run, runs interleaved:
// two namespaces on a plain veth pair (the physical limit of this path), two
// pods on the reference bridge plugin, and two tendril pods (eBPF datapath) with
// 1,000 rules loaded that all land in the two pods' policy maps: 500 ingress
// rules selecting the server (TCP from the client, one port each) and 500 egress
// rules selecting the client (TCP to the server), the iperf3 port allowed among
// them, so the flow is policy-checked in both directions. The tendril pods are
// dual-stack: the same pods and rules measured over IPv4 and over IPv6 side by
// side, for throughput and for the connection rate (the native crr client:
// connect, 1-byte request and answer, close).
import { spawn } from 'node:child_process';
import { CrrServer, crrErrors, runCrrClient } from '../test/support/crr.js';
import { exec, startBenchAgent, stopBenchAgent } from './benchProcess.js';
import { ingressRuleDoc, runTcpClient } from './policyDatapath.js';
import { percentile } from './stats.js';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const TENDRIL = fileURLToPath(new URL('../../bin/tendril', import.meta.url));
const CNI = fileURLToPath(new URL('../../bin/tendril-cni', import.meta.url));

const inNs = (ns: string, argv: string[]) => ['nsenter', `--net=/var/run/netns/${ns}`, '--', ...argv];
const IPERF_PORT = 5201;
/** The crr server's port on the tendril server pod (allowed by the rules like the iperf3 port). */
const CRR_PORT = 5202;

/** Gbit/s from client ns to server ip, one iperf3 run of `seconds`. */
async function iperf(serverNs: string, clientNs: string, serverIp: string, seconds: number): Promise<number> {
  const server = spawn('nsenter', [`--net=/var/run/netns/${serverNs}`, '--', 'iperf3', '-s', '-1', '-B', serverIp, '-p', String(IPERF_PORT)], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 300));
  try {
    const out = await exec(inNs(clientNs, ['iperf3', '-c', serverIp, '-p', String(IPERF_PORT), '-t', String(seconds), '-J']));
    const j = JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } };
    return j.end.sum_received.bits_per_second / 1e9;
  } finally {
    server.kill('SIGKILL');
  }
}

/** 1,000 rules over the two pods (app=tput-client → app=tput-server), `allowPorts` allowed in both directions among them. */
function thousandRules(allowPorts: readonly number[]): string[] {
  const docs: string[] = [];
  const port = (i: number) => allowPorts[i] ?? 10000 + i;
  for (let i = 0; i < 500; i++) docs.push(ingressRuleDoc(`tput-in-${i}`, 'tput-server', 'tput-client', port(i)));
  for (let i = 0; i < 500; i++) {
    docs.push(
      JSON.stringify({
        apiVersion: 'tendril.io/v1',
        kind: 'TendrilNetworkPolicy',
        metadata: { name: `tput-out-${i}`, namespace: 'bench' },
        spec: {
          endpointSelector: { matchLabels: { app: 'tput-client' } },
          egress: [{ toEndpoints: [{ matchLabels: { app: 'tput-server' } }], toPorts: [{ ports: [{ port: String(port(i)), protocol: 'TCP' }] }] }],
        },
      }),
    );
  }
  return docs;
}

export interface ThroughputReport {
  seconds: number;
  runs: number;
  vethPair: number;
  /** The plain veth pair over IPv6: the kernel's own IPv6 cost, the anchor of the tendril IPv6 / IPv4 ratios. */
  vethPairIpv6: number;
  reference: number;
  tendril: number;
  /** The same tendril pods and rules over IPv6. */
  tendrilIpv6: number;
  /** Connections per second (crr, one thread) between the tendril pods, over each family, median of the runs. */
  connPerS: { ipv4: number; ipv6: number };
  /** The same over the plain veth pair. */
  vethConnPerS: { ipv4: number; ipv6: number };
  /** tendril / veth of each run (the two measured seconds apart). */
  tendrilVsVethPerRun: number[];
  /** Policy-map entries of the client and server endpoints, and whether the agent says the datapath enforces them. */
  tendrilEntries: { client: number; server: number; datapathEnforced: boolean };
  /** A connection from the client pod to a port no rule allows: `timeout` = dropped by policy. */
  otherPort: string;
}

export async function runThroughputBench(seconds = 3, runs = 3): Promise<ThroughputReport> {
  const tag = `tdlth${process.pid % 10000}`;
  const created: string[] = [];
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-tput-'));
  let agent: ReturnType<typeof spawn> | undefined;
  let crr: CrrServer | undefined;
  let vethCrr: CrrServer | undefined;
  const ns = async (name: string) => {
    await exec(['ip', 'netns', 'add', name]);
    created.push(name);
    await exec(['ip', '-n', name, 'link', 'set', 'lo', 'up']);
    return name;
  };
  try {
    // 1. plain veth pair between two namespaces.
    const va = await ns(`${tag}va`);
    const vb = await ns(`${tag}vb`);
    await exec(['ip', '-n', va, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', `/var/run/netns/${vb}`]);
    await exec(['ip', '-n', va, 'addr', 'add', '10.244.0.1/30', 'dev', 'eth0']);
    await exec(['ip', '-n', vb, 'addr', 'add', '10.244.0.2/30', 'dev', 'eth0']);
    await exec(['ip', '-n', va, 'addr', 'add', 'fd00:244::1/126', 'dev', 'eth0', 'nodad']);
    await exec(['ip', '-n', vb, 'addr', 'add', 'fd00:244::2/126', 'dev', 'eth0', 'nodad']);
    await exec(['ip', '-n', va, 'link', 'set', 'eth0', 'up']);
    await exec(['ip', '-n', vb, 'link', 'set', 'eth0', 'up']);

    // 2. reference bridge + host-local, in its own node namespace.
    const rnode = await ns(`${tag}rn`);
    const ra = await ns(`${tag}ra`);
    const rb = await ns(`${tag}rb`);
    const net = join(scratch, 'net.d');
    await exec(['mkdir', '-p', net, join(scratch, 'bin')]);
    await writeFile(
      join(net, '10-ref.conflist'),
      JSON.stringify({ cniVersion: '1.0.0', name: 'tdlref', plugins: [{ type: 'bridge', bridge: 'tdlbr0', isGateway: true, ipMasq: false, ipam: { type: 'host-local', subnet: '10.245.0.0/24', dataDir: join(scratch, 'ipam') } }] }),
    );
    const cniEnv = (extra: Record<string, string>) => ({ ...process.env, NETCONFPATH: net, ...extra });
    /** The pod's addresses, IPv4 first (the CNI result's order). */
    const addPod = async (node: string, network: string, pod: string, pluginPath: string, extraEnv: Record<string, string> = {}) => {
      const out = await exec(inNs(node, [TENDRIL, 'cni', 'add', network, `/var/run/netns/${pod}`, '--cache-dir', join(scratch, 'cache')]), cniEnv({ CNI_PATH: pluginPath, ...extraEnv }));
      return (JSON.parse(out) as { ips: Array<{ address: string }> }).ips.map((ip) => ip.address.split('/')[0]!);
    };
    await addPod(rnode, 'tdlref', ra, '/usr/lib/cni');
    const [rbIp] = await addPod(rnode, 'tdlref', rb, '/usr/lib/cni');

    // 3. tendril pods, agent in its own node namespace, 1,000 rules on them.
    const tnode = await ns(`${tag}tn`);
    const ta = await ns(`${tag}ta`);
    const tb = await ns(`${tag}tb`);
    const state = join(scratch, 'state');
    const started = await startBenchAgent(tnode, state, '10.246.0.0/24,fd00:246::/112');
    agent = started.process;
    await symlink(CNI, join(scratch, 'bin', 'tendril-cni'));
    await writeFile(join(net, '20-tdl.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'tdltput', plugins: [{ type: 'tendril-cni', socket: join(state, 'tendril.sock') }] }));
    const podArgs = (name: string) => ({ CNI_ARGS: `K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${name};TENDRIL_LABELS=app=${name}` });
    await addPod(tnode, 'tdltput', ta, join(scratch, 'bin'), podArgs('tput-client'));
    const [tbIp, tbIp6] = await addPod(tnode, 'tdltput', tb, join(scratch, 'bin'), podArgs('tput-server'));
    if (!tbIp6) throw new Error('the tendril server pod got no IPv6 address');
    const c = started.client;
    const revision = (await c.putPolicy({ text: thousandRules([IPERF_PORT, CRR_PORT]).join('\n---\n') })).revision;
    const [clientEp, serverEp] = [await c.getEndpoint('pod-name:bench:tput-client'), await c.getEndpoint('pod-name:bench:tput-server')];
    for (let i = 0; ; i++) {
      const eps = await c.listEndpoints();
      if (eps.every((e) => e.policyRevision >= revision)) break;
      if (i > 3000) throw new Error('the tendril pods never realized the 1,000 rules');
      await new Promise((r) => setTimeout(r, 10));
    }
    const [cp, sp] = [await c.getEndpointPolicy(clientEp.id), await c.getEndpointPolicy(serverEp.id)];
    const tendrilEntries = { client: cp.entries.length, server: sp.entries.length, datapathEnforced: cp.datapathEnforced && sp.datapathEnforced };
    const otherPort = (await runTcpClient<{ result: string }>(ta, ['check', tbIp!, String(IPERF_PORT + 3), '300'])).result;
    crr = await CrrServer.start(`/var/run/netns/${tb}`, [`${tbIp!}:${CRR_PORT}`, `[${tbIp6}]:${CRR_PORT}`], { threads: 1 });
    vethCrr = await CrrServer.start(`/var/run/netns/${vb}`, [`10.244.0.2:${CRR_PORT}`, `[fd00:244::2]:${CRR_PORT}`], { threads: 1 });
    const connRate = async (dst: string, from = ta) => {
      const r = await runCrrClient(`/var/run/netns/${from}`, { destinations: [dst], seconds, threads: 1 });
      if (r.errorCount > 0) throw new Error(`crr to ${dst}: ${crrErrors(r)}`);
      return r.connPerS;
    };

    // Runs interleaved, so a busy moment of the machine falls on every path alike.
    const samples = {
      ...{ vethPair: [] as number[], vethPairIpv6: [] as number[], reference: [] as number[], tendril: [] as number[], tendrilIpv6: [] as number[] },
      ...{ conn4: [] as number[], conn6: [] as number[], vethConn4: [] as number[], vethConn6: [] as number[] },
    };
    const paths = [
      () => iperf(vb, va, '10.244.0.2', seconds).then((g) => samples.vethPair.push(g)),
      () => iperf(vb, va, 'fd00:244::2', seconds).then((g) => samples.vethPairIpv6.push(g)),
      () => iperf(rb, ra, rbIp!, seconds).then((g) => samples.reference.push(g)),
      () => iperf(tb, ta, tbIp!, seconds).then((g) => samples.tendril.push(g)),
      () => iperf(tb, ta, tbIp6, seconds).then((g) => samples.tendrilIpv6.push(g)),
      () => connRate(`${tbIp!}:${CRR_PORT}`).then((n) => samples.conn4.push(n)),
      () => connRate(`[${tbIp6}]:${CRR_PORT}`).then((n) => samples.conn6.push(n)),
      () => connRate(`10.244.0.2:${CRR_PORT}`, va).then((n) => samples.vethConn4.push(n)),
      () => connRate(`[fd00:244::2]:${CRR_PORT}`, va).then((n) => samples.vethConn6.push(n)),
    ];
    // Every other run in reverse order, so no path always runs first.
    for (let i = 0; i < runs; i++) for (const run of i % 2 === 0 ? paths : [...paths].reverse()) await run();
    const med = (xs: number[]) => percentile(xs, 0.5);
    return {
      seconds,
      runs,
      vethPair: med(samples.vethPair),
      vethPairIpv6: med(samples.vethPairIpv6),
      reference: med(samples.reference),
      tendril: med(samples.tendril),
      tendrilIpv6: med(samples.tendrilIpv6),
      connPerS: { ipv4: med(samples.conn4), ipv6: med(samples.conn6) },
      vethConnPerS: { ipv4: med(samples.vethConn4), ipv6: med(samples.vethConn6) },
      tendrilVsVethPerRun: samples.tendril.map((g, i) => g / samples.vethPair[i]!),
      tendrilEntries,
      otherPort,
    };
  } finally {
    await crr?.stop();
    await vethCrr?.stop();
    if (agent) await stopBenchAgent(agent);
    for (const n of created.reverse()) await exec(['ip', 'netns', 'del', n]).catch(() => undefined);
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printThroughput(r: ThroughputReport): void {
  const row = (name: string, g: number) => `  ${name.padEnd(46)} ${g.toFixed(2).padStart(7)} Gbit/s  ${(g / r.vethPair).toFixed(2)}x veth`;
  console.log(`\nPod-to-pod TCP throughput, iperf3 single stream ${r.seconds}s, median of ${r.runs} interleaved runs`);
  console.log(row('plain veth pair (the limit of this path)', r.vethPair));
  console.log(row('plain veth pair over IPv6', r.vethPairIpv6));
  console.log(row('reference bridge + host-local', r.reference));
  console.log(row('tendril, 1,000 rules loaded', r.tendril));
  console.log(row('tendril, the same pods and rules over IPv6', r.tendrilIpv6));
  const e = r.tendrilEntries;
  console.log(
    `  tendril policy maps: client ${e.client} entries (egress), server ${e.server} (ingress)${e.datapathEnforced ? '' : ' — the agent reports them NOT enforced'}; a port no rule allows: ${r.otherPort}${r.otherPort === 'timeout' ? ' (dropped)' : ''}`,
  );
  console.log(
    `  tendril / veth: ${(r.tendril / r.vethPair).toFixed(2)}x (goal ≥ 0.95; per run: ${r.tendrilVsVethPerRun.map((x) => x.toFixed(2)).join(', ')}), tendril / reference: ${(r.tendril / r.reference).toFixed(2)}x`,
  );
  const [c, v] = [r.connPerS, r.vethConnPerS];
  console.log(
    `  IPv6 / IPv4 on the tendril pods: throughput ${(r.tendrilIpv6 / r.tendril).toFixed(2)}x, connection rate ${(c.ipv6 / c.ipv4).toFixed(2)}x (crr, one thread: ${c.ipv4.toFixed(0)} vs ${c.ipv6.toFixed(0)} conn/s; goal ≥ 0.95 for both)`,
  );
  // The kernel's own IPv6 cost on the same machine: what no datapath can take away.
  console.log(
    `  IPv6 / IPv4 on the plain veth pair: throughput ${(r.vethPairIpv6 / r.vethPair).toFixed(2)}x, connection rate ${(v.ipv6 / v.ipv4).toFixed(2)}x (${v.ipv4.toFixed(0)} vs ${v.ipv6.toFixed(0)} conn/s); tendril IPv6 / veth IPv6: throughput ${(r.tendrilIpv6 / r.vethPairIpv6).toFixed(2)}x, connection rate ${(c.ipv6 / v.ipv6).toFixed(2)}x`,
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printThroughput(await runThroughputBench(Number(process.argv[2] ?? 3), Number(process.argv[3] ?? 3)));
}
