// Masquerade under load, side by side in one run: the same native client
// (build/bench/crr: connect, 1-byte request, 1-byte answer, close with RST)
// in a client namespace behind
// - tendril: a pod of a node running the agent with the eBPF datapath; the
//   node's device towards the servers (`tdlext0`, found by the agent as it has
//   a global address) gets the masquerade program;
// - linux: a router namespace doing `iptables -t nat -A POSTROUTING -o ext0
//   -j MASQUERADE` (the machine's iptables: nft backend; TENDRIL_BENCH_IPTABLES
//   for another), the client on a routed veth;
// - plain: a router namespace with no NAT at all (the path's own cost).
// The servers are alike: a namespace on the far side holding 10.197.0.10 and
// 10.197.1.1–100, the crr server on each. Under NAT a server has no route back
// to the clients: only translated flows are answered.
// Measured: connections/s to ONE outside address:port (2 client threads, 60 s,
// or 20 s with TENDRIL_BENCH_MASQ_QUICK=1), with errors, SYN retransmits and
// latency; connections/s over 100 destinations (one port on each of 100
// addresses), rounds interleaved; iperf3 throughput through each path, rounds
// interleaved. For tendril, the datapath's drop counters and its SNAT
// mappings around every run. Clients run on CPU 0 and servers on CPU 1.
// IPv6 too: the tendril pod is dual-stack (--ipv6-masquerade), linux masquerades
// with `ip6tables -t nat -A POSTROUTING -o ext0 -j MASQUERADE`
// (TENDRIL_BENCH_IP6TABLES for another), plain routes; one destination,
// fd74:10:197::a, over the same namespaces.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { CrrServer, crrErrors, type CrrResult, runCrrClient } from '../test/support/crr.js';
import { tcpCounters } from '../test/support/datapathObserve.js';
import { exec } from './benchProcess.js';
import { BenchNamespaces, inNs, netnsPath, TendrilBenchNode } from './policyDatapath.js';
import { cleanupOnSignal, once, routedVethPods } from './serviceCommon.js';
import { percentile } from './stats.js';

const QUICK = process.env.TENDRIL_BENCH_MASQ_QUICK === '1';
const IPTABLES = process.env.TENDRIL_BENCH_IPTABLES ?? 'iptables';
const IP6TABLES = process.env.TENDRIL_BENCH_IP6TABLES ?? 'ip6tables';
const SERVER_IP = '10.197.0.10';
const ROUTER_IP = '10.197.0.1';
/** The IPv6 side of the same link (family.ts's mirrors of the IPv4 addresses). */
const SERVER_IP6 = 'fd74:10:197::a';
const ROUTER_IP6 = 'fd74:10:197::1';
/** Each side's IPv6 client prefix: the tendril pod's CIDR, the routed clients' (vpod0) /120s. */
const CLIENT_NET6: Record<'tendril' | 'linux' | 'plain', string> = { tendril: 'fd74:10:235::/120', linux: 'fd74:10:236:1::/120', plain: 'fd74:10:237:1::/120' };
const EXTRA_NET = '10.197.1';
const DESTINATIONS = 100;
const CRR_PORT = 7000;
/** A port of the same servers for the check before timing: the measured destination starts unused. */
const CHECK_PORT = 7001;
const IPERF_PORT = 5201;
const SIDES = ['tendril', 'linux', 'plain'] as const;
type Side = (typeof SIDES)[number];
const median = (xs: number[]) => percentile(xs, 0.5);

export interface MasqueradeOptions {
  /** Seconds of the one-destination run (one per side). */
  oneSeconds: number;
  /** Rounds of the 100-destination runs, and seconds each. */
  manyRounds: number;
  manySeconds: number;
  /** Rounds of iperf3, and seconds each. */
  iperfRounds: number;
  iperfSeconds: number;
}

export const MASQUERADE_DEFAULTS: MasqueradeOptions = QUICK
  ? { oneSeconds: 20, manyRounds: 2, manySeconds: 5, iperfRounds: 2, iperfSeconds: 3 }
  : { oneSeconds: 60, manyRounds: 3, manySeconds: 10, iperfRounds: 3, iperfSeconds: 5 };

/** One crr run and what happened around it. */
export interface CrrRun {
  result: CrrResult;
  /** SYNs the client namespace sent again during the run (each a connection attempt lost on the way). */
  synRetransmits: number;
  /** CPU µs per answered connection, client and server together. */
  cpuPerConn: number;
  /** tendril: datapath drops during the run, by reason/direction, and its SNAT mappings (both directions) after it. */
  drops?: Record<string, number>;
  snatMappings?: number;
  /** tendril: egress SNAT mappings to the run's destinations after it (each holds a port for its destination). */
  snatToDestinations?: number;
  /** tendril: the agent's tendril_datapath_map_pressure of the conntrack and SNAT maps after the run. */
  pressure?: Record<string, number>;
}

export interface MasqueradeReport {
  opts: MasqueradeOptions;
  one: Record<Side, CrrRun>;
  /** The one-destination run over IPv6. */
  one6: Record<Side, CrrRun>;
  many: Record<Side, CrrRun[]>;
  iperf: Record<Side, number[]>;
  iptablesVersion: string;
  pinned: boolean;
}

/** Sysctls of a server namespace: queues deep enough that the server never drops a connection the path delivered. */
async function tuneServer(ns: string): Promise<void> {
  for (const kv of ['net.core.somaxconn=8192', 'net.ipv4.tcp_max_syn_backlog=8192']) await exec(inNs(ns, ['sysctl', '-q', '-w', kv]));
}

/**
 * The server namespace `server` on a veth to `router` (router side `dev`,
 * 10.197.0.1/24), holding 10.197.0.10 and 10.197.1.1–100 (the router routes
 * 10.197.1.0/24 through it); with `routeBack`, a route to `routeBack` via the router.
 */
async function serverSide(router: string, server: string, dev: string, routeBack?: string): Promise<void> {
  await exec(['ip', '-n', router, 'link', 'add', dev, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netnsPath(server)]);
  await exec(['ip', '-n', router, 'addr', 'add', `${ROUTER_IP}/24`, 'dev', dev]);
  await exec(['ip', '-n', router, 'link', 'set', dev, 'up']);
  const lines = [`addr add ${SERVER_IP}/24 dev eth0`, ...Array.from({ length: DESTINATIONS }, (_, i) => `addr add ${EXTRA_NET}.${i + 1}/24 dev eth0`), 'link set eth0 up'];
  await exec(['ip', '-n', server, '-batch', '-'], process.env, lines.map((l) => `${l}\n`).join(''));
  await exec(['ip', '-n', router, 'route', 'add', `${EXTRA_NET}.0/24`, 'via', SERVER_IP]);
  if (routeBack) await exec(['ip', '-n', server, 'route', 'add', routeBack, 'via', ROUTER_IP]);
  // IPv6 on the same link, usable at once (nodad).
  await exec(['ip', '-n', router, 'addr', 'add', `${ROUTER_IP6}/120`, 'dev', dev, 'nodad']);
  await exec(['ip', '-n', server, 'addr', 'add', `${SERVER_IP6}/120`, 'dev', 'eth0', 'nodad']);
  await tuneServer(server);
}

/** IPv6 for a routedVethPods client (its first pod, vpod0): the /120 `net`, the router's ::1 on vpod0, the client ::2 via it. */
async function routedVethIpv6(router: string, client: string, net: string): Promise<void> {
  const base = net.slice(0, net.indexOf('/'));
  await exec(inNs(router, ['sysctl', '-q', '-w', 'net.ipv6.conf.all.forwarding=1']));
  await exec(['ip', '-n', router, 'addr', 'add', `${base}1/120`, 'dev', 'vpod0', 'nodad']);
  await exec(['ip', '-n', client, 'addr', 'add', `${base}2/120`, 'dev', 'eth0', 'nodad']);
  await exec(['ip', '-n', client, '-6', 'route', 'add', 'default', 'via', `${base}1`]);
}

/** Gbit/s of one iperf3 run from `clientNs` to the server namespace. */
async function iperf(serverNs: string, clientNs: string, seconds: number, pinned: boolean): Promise<number> {
  const pin = (cpu: string, argv: string[]) => (pinned ? ['taskset', '-c', cpu, ...argv] : argv);
  const argv = pin('1', inNs(serverNs, ['iperf3', '-s', '-1', '-B', SERVER_IP, '-p', String(IPERF_PORT)]));
  const server = spawn(argv[0]!, argv.slice(1), { stdio: 'ignore' });
  try {
    // iperf3 -s has no "ready" line in this mode: try until it listens.
    for (let i = 0; ; i++) {
      try {
        const out = await exec(pin('0', inNs(clientNs, ['iperf3', '-c', SERVER_IP, '-p', String(IPERF_PORT), '-t', String(seconds), '-J'])));
        return (JSON.parse(out) as { end: { sum_received: { bits_per_second: number } } }).end.sum_received.bits_per_second / 1e9;
      } catch (err) {
        if (i >= 20) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } finally {
    server.kill('SIGKILL');
  }
}

export async function runMasqueradeBench(opts: MasqueradeOptions = MASQUERADE_DEFAULTS): Promise<MasqueradeReport> {
  const tag = `tdlmq${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-masq-'));
  const servers: CrrServer[] = [];
  let tendril: TendrilBenchNode | undefined;
  const cleanup = once(async () => {
    for (const s of servers.splice(0)) await s.stop();
    await tendril?.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    const ns = (side: Side) => ({ router: `${tag}${side[0]}n`, client: `${tag}${side[0]}c`, server: `${tag}${side[0]}s` });
    for (const side of SIDES) await namespaces.add(ns(side).router, ns(side).client, ns(side).server);

    // tendril: the device towards the servers exists before the agent starts (it detects its devices then).
    await serverSide(ns('tendril').router, ns('tendril').server, 'tdlext0');
    tendril = await TendrilBenchNode.start(ns('tendril').router, join(scratch, 'state'), '10.235.0.0/24', ['--pod-cidr', CLIENT_NET6.tendril, '--ipv6-masquerade']);
    await tendril.addPod('masq-client', ns('tendril').client, 'app=masq-client');
    // linux: routed veth client, MASQUERADE out of ext0.
    await routedVethPods(ns('linux').router, [ns('linux').client], 236);
    await serverSide(ns('linux').router, ns('linux').server, 'ext0');
    await exec(inNs(ns('linux').router, [IPTABLES, '-t', 'nat', '-A', 'POSTROUTING', '-o', 'ext0', '-j', 'MASQUERADE']));
    await routedVethIpv6(ns('linux').router, ns('linux').client, CLIENT_NET6.linux);
    await exec(inNs(ns('linux').router, [IP6TABLES, '-t', 'nat', '-A', 'POSTROUTING', '-o', 'ext0', '-j', 'MASQUERADE']));
    // plain: the same routed path, no NAT; the servers route back to the client.
    await routedVethPods(ns('plain').router, [ns('plain').client], 237);
    await serverSide(ns('plain').router, ns('plain').server, 'ext0', '10.237.0.0/16');
    await routedVethIpv6(ns('plain').router, ns('plain').client, CLIENT_NET6.plain);
    await exec(['ip', '-n', ns('plain').server, '-6', 'route', 'add', CLIENT_NET6.plain, 'via', ROUTER_IP6]);

    const pinned = availableParallelism() >= 2;
    const clientCpus = pinned ? { cpus: '0' } : {};
    const crrServers = {} as Record<Side, CrrServer>;
    for (const side of SIDES) {
      const s = await CrrServer.start(netnsPath(ns(side).server), [`0.0.0.0:${CRR_PORT}-${CHECK_PORT}`, `[::]:${CRR_PORT}-${CHECK_PORT}`], pinned ? { cpus: '1' } : {});
      servers.push(s);
      crrServers[side] = s;
    }
    await tendril.waitIdle();

    // Every path answers before anything is timed (on a port the measured runs do not use).
    for (const side of SIDES) {
      for (const dst of [`${SERVER_IP}:${CHECK_PORT}`, `[${SERVER_IP6}]:${CHECK_PORT}`]) {
        // IPv6's first packets may wait on neighbour discovery (a link-local address in DAD): a few tries.
        for (let i = 0; ; i++) {
          const r = await runCrrClient(netnsPath(ns(side).client), { destinations: [dst], seconds: 1, threads: 1, timeoutMs: 1000 });
          if (r.connections > 0) break;
          if (i >= 4) throw new Error(`${side}: no connection to ${dst} answered (${crrErrors(r)})`);
        }
      }
    }

    const node = tendril;
    const tendrilState = async (destinations: ReadonlySet<string>) => {
      const rows = await node.client.listBpfMetrics();
      const drops: Record<string, number> = {};
      for (const r of rows) if (r.reason !== 0) drops[`${r.reasonName}/${r.direction}`] = (drops[`${r.reasonName}/${r.direction}`] ?? 0) + r.packets;
      const mappings = (await node.client.listBpfNat()).mappings;
      const pressure: Record<string, number> = {};
      for (const m of (await node.client.metrics()).matchAll(/^tendril_datapath_map_pressure\{map="(tendril_(?:ct|snat)[^"]*)"\} (\S+)$/gm)) pressure[m[1]!] = Number(m[2]);
      return {
        drops,
        snat: mappings.length,
        snatToDestinations: mappings.filter((m) => m.direction === 'egress' && destinations.has(`${m.daddr}:${m.dport}`)).length,
        pressure,
      };
    };
    const measure = async (side: Side, destinations: string[], seconds: number, each: ReadonlySet<string>): Promise<CrrRun> => {
      const clientPath = netnsPath(ns(side).client);
      const before = side === 'tendril' ? await tendrilState(each) : undefined;
      const syn0 = (await tcpCounters(clientPath)).synRetrans;
      const server0 = await crrServers[side].cpuNs();
      const result = await runCrrClient(clientPath, { destinations, seconds, threads: 2, ...clientCpus });
      const serverUs = ((await crrServers[side].cpuNs()) - server0) / 1000;
      const run: CrrRun = {
        result,
        synRetransmits: (await tcpCounters(clientPath)).synRetrans - syn0,
        cpuPerConn: (result.cpuUs.user + result.cpuUs.system + serverUs) / Math.max(1, result.connections),
      };
      if (before) {
        const after = await tendrilState(each);
        run.drops = Object.fromEntries(Object.entries(after.drops).flatMap(([k, v]) => (v > (before.drops[k] ?? 0) ? [[k, v - (before.drops[k] ?? 0)]] : [])));
        run.snatMappings = after.snat;
        run.snatToDestinations = after.snatToDestinations;
        run.pressure = after.pressure;
      }
      return run;
    };

    // One destination, sustained: one run per side (a run leaves its NAT state behind, so a second round would not start where the first did).
    const one = {} as Record<Side, CrrRun>;
    for (const side of SIDES) one[side] = await measure(side, [`${SERVER_IP}:${CRR_PORT}`], opts.oneSeconds, new Set([`${SERVER_IP}:${CRR_PORT}`]));
    const one6 = {} as Record<Side, CrrRun>;
    for (const side of SIDES) one6[side] = await measure(side, [`[${SERVER_IP6}]:${CRR_PORT}`], opts.oneSeconds, new Set([`${SERVER_IP6}:${CRR_PORT}`]));
    // 100 destinations, rounds interleaved, each round starting one side further on.
    const many: Record<Side, CrrRun[]> = { tendril: [], linux: [], plain: [] };
    const manyDests = [`${EXTRA_NET}.1-${EXTRA_NET}.${DESTINATIONS}:${CRR_PORT}`];
    const manyEach = new Set(Array.from({ length: DESTINATIONS }, (_, i) => `${EXTRA_NET}.${i + 1}:${CRR_PORT}`));
    for (let r = 0; r < opts.manyRounds; r++) for (const side of SIDES.map((_, i) => SIDES[(i + r) % SIDES.length]!)) many[side].push(await measure(side, manyDests, opts.manySeconds, manyEach));
    // Throughput, rounds interleaved.
    const iperfGbps: Record<Side, number[]> = { tendril: [], linux: [], plain: [] };
    for (let r = 0; r < opts.iperfRounds; r++) for (const side of SIDES.map((_, i) => SIDES[(i + r) % SIDES.length]!)) iperfGbps[side].push(await iperf(ns(side).server, ns(side).client, opts.iperfSeconds, pinned));

    const iptablesVersion = (await exec([IPTABLES, '-V'])).trim();
    return { opts, one, one6, many, iperf: iperfGbps, iptablesVersion, pinned };
  } finally {
    await cleanup();
    unhook();
  }
}

export function printMasquerade(r: MasqueradeReport): void {
  const w = 12;
  const col = (s: string) => s.padStart(w);
  const n0 = (x: number) => col(x.toFixed(0));
  const ratio = (a: number, b: number) => col(b > 0 ? `${(a / b).toFixed(2)}x` : '-');
  const mid = (runs: CrrRun[], f: (x: CrrRun) => number) => median(runs.map(f));
  console.log(
    `\nMasquerade under load: pod → outside server through the node's SNAT; crr client (connect + 1-byte request/response + close with RST), 2 threads${r.pinned ? ', clients on CPU 0, servers on CPU 1' : ''}`,
  );
  console.log(`  tendril: eBPF masquerade on the node's device; linux: ${IPTABLES} -t nat -A POSTROUTING -o ext0 -j MASQUERADE (${r.iptablesVersion}), ${IP6TABLES} the same for IPv6; plain: routed, no NAT`);
  console.log(`  ${''.padEnd(34)}${col('tendril')}${col('linux')}${col('plain')}${col('tendril/lnx')}`);
  const row = (label: string, f: (s: Side) => number, ratioToo = true) =>
    console.log(`  ${label.padEnd(34)}${n0(f('tendril'))}${n0(f('linux'))}${n0(f('plain'))}${ratioToo ? ratio(f('tendril'), f('linux')) : ''}`);
  const oneRun = (s: Side) => r.one[s];
  row(`1 dest, ${r.opts.oneSeconds} s: conn/s`, (s) => oneRun(s).result.connPerS);
  row('  errors', (s) => oneRun(s).result.errorCount, false);
  row('  SYN retransmits', (s) => oneRun(s).synRetransmits, false);
  row('  p50 µs', (s) => oneRun(s).result.latencyUs.p50);
  row('  p99 µs', (s) => oneRun(s).result.latencyUs.p99);
  row('  p99.9 µs', (s) => oneRun(s).result.latencyUs.p999);
  row('  CPU µs/conn (client+server)', (s) => oneRun(s).cpuPerConn);
  const one6 = (s: Side) => r.one6[s];
  row(`IPv6 1 dest, ${r.opts.oneSeconds} s: conn/s`, (s) => one6(s).result.connPerS);
  row('  errors', (s) => one6(s).result.errorCount, false);
  row('  SYN retransmits', (s) => one6(s).synRetransmits, false);
  row('  p50 µs', (s) => one6(s).result.latencyUs.p50);
  row('  p99 µs', (s) => one6(s).result.latencyUs.p99);
  row('  p99.9 µs', (s) => one6(s).result.latencyUs.p999);
  row('  CPU µs/conn (client+server)', (s) => one6(s).cpuPerConn);
  row(`${DESTINATIONS} dests, ${r.opts.manyRounds}×${r.opts.manySeconds} s: conn/s`, (s) => mid(r.many[s], (x) => x.result.connPerS));
  row('  errors (all rounds)', (s) => r.many[s].reduce((a, x) => a + x.result.errorCount, 0), false);
  row('  SYN retransmits (all rounds)', (s) => r.many[s].reduce((a, x) => a + x.synRetransmits, 0), false);
  row('  p99 µs', (s) => mid(r.many[s], (x) => x.result.latencyUs.p99));
  row('  p99.9 µs', (s) => mid(r.many[s], (x) => x.result.latencyUs.p999));
  row('  CPU µs/conn (client+server)', (s) => mid(r.many[s], (x) => x.cpuPerConn));
  const gbps = (s: Side) => median(r.iperf[s]);
  console.log(
    `  ${`iperf3 ${r.opts.iperfRounds}×${r.opts.iperfSeconds} s: Gbit/s`.padEnd(34)}${col(gbps('tendril').toFixed(2))}${col(gbps('linux').toFixed(2))}${col(gbps('plain').toFixed(2))}${ratio(gbps('tendril'), gbps('linux'))}` +
      `   vs plain: tendril ${(gbps('tendril') / gbps('plain')).toFixed(2)}x, linux ${(gbps('linux') / gbps('plain')).toFixed(2)}x (runs: ${SIDES.map((s) => `${s} ${r.iperf[s].map((x) => x.toFixed(2)).join('/')}`).join(', ')})`,
  );
  for (const [label, runs] of [
    ['1 dest', [r.one.tendril]],
    ['IPv6 1 dest', [r.one6.tendril]],
    [`${DESTINATIONS} dests`, r.many.tendril],
  ] as const) {
    runs.forEach((x, i) => {
      const drops = Object.entries(x.drops ?? {}).map(([k, v]) => `${k} +${v}`);
      const pressure = Object.entries(x.pressure ?? {}).map(([k, v]) => `${k.replace(/^tendril_/, '')} ${v.toFixed(3)}`);
      console.log(
        `  tendril ${label}${runs.length > 1 ? ` round ${i + 1}` : ''}: drops during the run ${drops.length > 0 ? drops.join(', ') : 'none'}; errors ${crrErrors(x.result)}; after it: SNAT mappings ${x.snatMappings} (egress to the run's destinations ${x.snatToDestinations}), map pressure ${pressure.join(', ') || '-'}`,
      );
    });
  }
  for (const s of ['tendril', 'linux'] as const) console.log(`  ${s} 1 dest, connections per second: ${r.one[s].result.perSecond.join(' ')}`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printMasquerade(await runMasqueradeBench());
}
