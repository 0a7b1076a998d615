// Pod-to-pod TCP throughput (iperf3) side by side in one run: two namespaces
// on a plain veth pair (the physical limit of this path), two pods on the
// reference bridge plugin, two tendril pods, and the tendril path with 1,000
// non-matching iptables FORWARD rules (an iptables-policy baseline).
import { spawn } from 'node:child_process';
import { exec, startBenchAgent, stopBenchAgent } from './benchProcess.js';
import { percentile } from './stats.js';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const TENDRIL = fileURLToPath(new URL('../../bin/tendril', import.meta.url));
const CNI = fileURLToPath(new URL('../../bin/tendril-cni', import.meta.url));


const inNs = (ns: string, argv: string[]) => ['nsenter', `--net=/var/run/netns/${ns}`, '--', ...argv];

/** Gbit/s from client ns to server ip, median of `runs` iperf3 runs of `seconds` each. */
async function iperf(serverNs: string, clientNs: string, serverIp: string, seconds: number, runs: number): Promise<number> {
  const results: number[] = [];
  for (let i = 0; i < runs; i++) {
    const server = spawn('nsenter', [`--net=/var/run/netns/${serverNs}`, '--', 'iperf3', '-s', '-1', '-B', serverIp], { stdio: 'ignore' });
    await new Promise((r) => setTimeout(r, 300));
    try {
      const out = await exec(inNs(clientNs, ['iperf3', '-c', serverIp, '-t', String(seconds), '-J']));
      const j = JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } };
      results.push(j.end.sum_received.bits_per_second / 1e9);
    } finally {
      server.kill('SIGKILL');
    }
  }
  return percentile(results, 0.5);
}

export interface ThroughputReport {
  seconds: number;
  runs: number;
  vethPair: number;
  reference: number;
  tendril: number;
  tendrilWithIptables: number;
}

export async function runThroughputBench(seconds = 3, runs = 3): Promise<ThroughputReport> {
  const tag = `tdlth${process.pid % 10000}`;
  const created: string[] = [];
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-tput-'));
  let agent: ReturnType<typeof spawn> | undefined;
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
    await exec(['ip', '-n', va, 'link', 'set', 'eth0', 'up']);
    await exec(['ip', '-n', vb, 'link', 'set', 'eth0', 'up']);
    const vethPair = await iperf(vb, va, '10.244.0.2', seconds, runs);

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
    const addPod = async (node: string, network: string, pod: string, pluginPath: string) => {
      const out = await exec(inNs(node, [TENDRIL, 'cni', 'add', network, `/var/run/netns/${pod}`, '--cache-dir', join(scratch, 'cache')]), cniEnv({ CNI_PATH: pluginPath }));
      return (JSON.parse(out) as { ips: Array<{ address: string }> }).ips[0]!.address.split('/')[0]!;
    };
    await addPod(rnode, 'tdlref', ra, '/usr/lib/cni');
    const rbIp = await addPod(rnode, 'tdlref', rb, '/usr/lib/cni');
    const reference = await iperf(rb, ra, rbIp, seconds, runs);

    // 3. tendril pods, agent in its own node namespace.
    const tnode = await ns(`${tag}tn`);
    const ta = await ns(`${tag}ta`);
    const tb = await ns(`${tag}tb`);
    const state = join(scratch, 'state');
    agent = (await startBenchAgent(tnode, state, '10.246.0.0/24')).process;
    await symlink(CNI, join(scratch, 'bin', 'tendril-cni'));
    await writeFile(join(net, '20-tdl.conflist'), JSON.stringify({ cniVersion: '1.0.0', name: 'tdltput', plugins: [{ type: 'tendril-cni', socket: join(state, 'tendril.sock') }] }));
    await addPod(tnode, 'tdltput', ta, join(scratch, 'bin'));
    const tbIp = await addPod(tnode, 'tdltput', tb, join(scratch, 'bin'));
    const tendril = await iperf(tb, ta, tbIp, seconds, runs);

    // 4. the same tendril path with 1,000 iptables rules that every forwarded packet walks.
    const rules = ['*filter', ':FORWARD ACCEPT [0:0]'];
    for (let i = 0; i < 1000; i++) rules.push(`-A FORWARD -s 192.0.2.${i % 250}/32 -p tcp --dport ${10000 + i} -j DROP`);
    rules.push('COMMIT', '');
    await exec(inNs(tnode, ['iptables-restore']), process.env, rules.join('\n'));
    const tendrilWithIptables = await iperf(tb, ta, tbIp, seconds, runs);
    return { seconds, runs, vethPair, reference, tendril, tendrilWithIptables };
  } finally {
    if (agent) await stopBenchAgent(agent);
    for (const n of created.reverse()) await exec(['ip', 'netns', 'del', n]).catch(() => undefined);
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printThroughput(r: ThroughputReport): void {
  const row = (name: string, g: number) => `  ${name.padEnd(46)} ${g.toFixed(2).padStart(7)} Gbit/s  ${(g / r.vethPair).toFixed(2)}x veth`;
  console.log(`\nPod-to-pod TCP throughput, iperf3 ${r.seconds}s, median of ${r.runs}`);
  console.log(row('plain veth pair (the limit of this path)', r.vethPair));
  console.log(row('reference bridge + host-local', r.reference));
  console.log(row('tendril (routed veth, Linux datapath)', r.tendril));
  console.log(row('tendril + 1,000 iptables FORWARD rules', r.tendrilWithIptables));
  console.log(`  tendril / reference: ${(r.tendril / r.reference).toFixed(2)}x`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printThroughput(await runThroughputBench(Number(process.argv[2] ?? 3), Number(process.argv[3] ?? 3)));
}
