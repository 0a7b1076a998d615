// Deleting services after traffic: 1,000 ClusterIPs (3 backends each, every
// backend its service's own, so each delete also frees three backends) are
// PUT through the agent's API, then DELETEd (16 requests in flight, as a
// controller's workers would), timed in all and per request. Side by side in
// one run, two agents (a node namespace each):
// - after traffic: before the deletes, the agent's TCP conntrack table holds
//   100,000 entries of connections to those services — per connection the
//   service entry (client → ClusterIP) and the translated one (client →
//   backend), both pinned to the backend the agent gave it, written straight
//   into the pinned map in the datapath's own layout (a native client would
//   take minutes to open 50,000 connections on this machine; what a delete
//   costs depends on what the table holds, not on how it got there);
// - empty table: the same deletes with nothing in conntrack.
// Rounds alternate which side goes first. After the deletes the entries are
// counted again: a delete that walks conntrack would have removed them all.
// The agent's conntrack GC runs on its own schedule (every 30 s by default)
// and may fall into a round; the table's entries do not expire meanwhile.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AgentClient } from '../src/client/agentClient.js';
import { CtFlag, CtKeyFlag, MapName } from '../src/datapath/bpf/constants.js';
import { ct4Key, ctEntry, type CtEntryValue } from '../src/datapath/bpf/layout.js';
import { BpfMap } from '../src/datapath/kernel/bpf/index.js';
import { parseIp } from '../src/netip/index.js';
import { BenchNamespaces, TendrilBenchNode } from './policyDatapath.js';
import { benchServices, cleanupOnSignal, once, programServices, serviceCounts } from './serviceCommon.js';
import { percentile } from './stats.js';

const SERVICES = 1000;
const SERVICE_PORT = 80;
const BACKEND_PORT = 8080;
/** Conntrack entries before the deletes: two per connection. */
const CT_ENTRIES = 100_000;
const CONCURRENCY = 16;
/** Clients the connections come from: 10.250.0.0/16, a range no namespace of the bench has. */
const clientIp = (n: number) => `10.250.${(n >> 8) & 255}.${n & 255}`;

export interface ServiceDeleteRun {
  /** Conntrack entries (TCP table) when the deletes started, and when they were done. */
  ctBefore: number;
  ctAfter: number;
  /** Wall time of all the deletes, ms. */
  ms: number;
  /** Per request, ms. */
  p50: number;
  p99: number;
}

export interface ServiceDeleteReport {
  services: number;
  rounds: number;
  afterTraffic: ServiceDeleteRun[];
  empty: ServiceDeleteRun[];
}

/** `count` DELETE /service/{id}, `concurrency` in flight; resolves with the wall time, each request's pushed to `requestMs`. */
async function deleteServices(client: AgentClient, ids: readonly number[], requestMs: number[], concurrency = CONCURRENCY): Promise<number> {
  let next = 0;
  let failed: Error | undefined;
  const t0 = performance.now();
  const worker = async () => {
    while (next < ids.length && !failed) {
      const id = ids[next++]!;
      try {
        const r0 = performance.now();
        await client.deleteService(id);
        requestMs.push(performance.now() - r0);
      } catch (err) {
        failed ??= new Error(`DELETE /service/${id}: ${(err as Error).message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (failed) throw failed;
  return performance.now() - t0;
}

/**
 * Connections to every service, spread evenly, pinned to the backends the
 * agent gave them (GET /service): service and translated entries, alive for
 * hours. The same keys every round, so the table holds CT_ENTRIES.
 */
async function fillConntrack(client: AgentClient, ct: BpfMap<ReturnType<typeof ct4Key.read>, CtEntryValue>): Promise<void> {
  const services = await client.listServices();
  const expiresNs = process.hrtime.bigint() + 6n * 3600n * 1_000_000_000n;
  const entries: Array<[ReturnType<typeof ct4Key.read>, CtEntryValue]> = [];
  const connections = CT_ENTRIES / 2;
  for (let c = 0; c < connections; c++) {
    const svc = services[c % services.length]!;
    const be = svc['backend-addresses'][c % svc['backend-addresses'].length]!;
    const saddr = parseIp(clientIp(c % 60_000));
    const sport = 10_000 + Math.floor(c / 60_000);
    const front = parseIp(svc['frontend-address'].ip);
    const value: CtEntryValue = {
      expiresNs,
      packets: 10n,
      bytes: 1000n,
      srcIdentity: 2,
      dstIdentity: 2,
      srcEndpoint: 0,
      dstEndpoint: 0,
      revNatIndex: svc.id,
      tcpFlags: 0x18,
      flags: CtFlag.SERVICE,
      backendId: be.id,
      natAddr: front,
      natPort: SERVICE_PORT,
    };
    entries.push([{ saddr, daddr: front, sport, dport: SERVICE_PORT, proto: 6, flags: CtKeyFlag.SERVICE }, value]);
    entries.push([{ saddr, daddr: parseIp(be.ip), sport, dport: BACKEND_PORT, proto: 6, flags: 0 }, { ...value, flags: CtFlag.REPLY_SEEN }]);
  }
  await ct.setMany(entries);
}

async function countEntries(ct: BpfMap<unknown, unknown>): Promise<number> {
  let n = 0;
  for await (const k of ct.keys()) if (k) n++;
  return n;
}

export async function runServiceDeleteBench(rounds = 3): Promise<ServiceDeleteReport> {
  const tag = `tdlsd${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-svcdel-'));
  const nodes: TendrilBenchNode[] = [];
  const maps: Array<BpfMap<ReturnType<typeof ct4Key.read>, CtEntryValue>> = [];
  const cleanup = once(async () => {
    for (const m of maps) m.close();
    for (const node of nodes) await node.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    const sides = ['afterTraffic', 'empty'] as const;
    for (const [k, side] of sides.entries()) {
      await namespaces.add(`${tag}${k}n`);
      const node = await TendrilBenchNode.start(`${tag}${k}n`, join(scratch, side), `10.249.${k}.0/24`);
      nodes.push(node);
      maps.push(BpfMap.openPinned(join(node.bpffsRoot, 'tendril', MapName.CT_TCP), ct4Key, ctEntry));
    }
    const services = benchServices(SERVICES, SERVICE_PORT, BACKEND_PORT);
    const ids = services.map((s) => s.id);
    const report: ServiceDeleteReport = { services: SERVICES, rounds, afterTraffic: [], empty: [] };
    for (let r = 0; r < rounds; r++) {
      for (const k of r % 2 === 0 ? [0, 1] : [1, 0]) {
        const node = nodes[k]!;
        const side = sides[k]!;
        await programServices(node.client, services);
        const counts = await serviceCounts(node.client);
        if (counts.realized !== SERVICES) throw new Error(`${side}: ${counts.realized} of ${SERVICES} services realized`);
        if (side === 'afterTraffic') await fillConntrack(node.client, maps[k]!);
        await node.waitIdle();
        const ctBefore = await countEntries(maps[k]!);
        const requestMs: number[] = [];
        const ms = await deleteServices(node.client, ids, requestMs);
        const ctAfter = await countEntries(maps[k]!);
        report[side].push({ ctBefore, ctAfter, ms, p50: percentile(requestMs, 0.5), p99: percentile(requestMs, 0.99) });
      }
    }
    return report;
  } finally {
    await cleanup();
    unhook();
  }
}

export function printServiceDelete(r: ServiceDeleteReport): void {
  console.log(`\nService deletes after traffic: ${r.services} ClusterIPs (3 backends each) deleted through DELETE /service/{id}, ${CONCURRENCY} in flight, ${r.rounds} rounds, the two sides alternating`);
  console.log('  after traffic: the TCP conntrack table pre-filled (through its pinned map) with service and translated entries pinned to the services\' backends');
  console.log(`  ${'side'.padEnd(14)} | ${'CT before'.padStart(10)}${'CT after'.padStart(10)}${'all, s'.padStart(9)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}`);
  for (const side of ['afterTraffic', 'empty'] as const) {
    for (const x of r[side]) console.log(`  ${(side === 'afterTraffic' ? 'after traffic' : 'empty table').padEnd(14)} | ${String(x.ctBefore).padStart(10)}${String(x.ctAfter).padStart(10)}${(x.ms / 1000).toFixed(2).padStart(9)}${x.p50.toFixed(2).padStart(9)}${x.p99.toFixed(2).padStart(9)}`);
  }
  const med = (xs: number[]) => percentile(xs, 0.5);
  const a = med(r.afterTraffic.map((x) => x.ms));
  const e = med(r.empty.map((x) => x.ms));
  console.log(`  median: after traffic ${(a / 1000).toFixed(2)} s, empty table ${(e / 1000).toFixed(2)} s (${(a / e).toFixed(2)}x; goal: ≤ 1 s in all after traffic)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printServiceDelete(await runServiceDeleteBench());
}
