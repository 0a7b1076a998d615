// Programming 10,000 services, side by side in one run, and what they cost the
// agent in memory. 10,000 ClusterIP services with 3 backends each (30,000
// distinct backend addresses, as pods would be):
// - tendril, batches: a node (agent, eBPF datapath, no pods) takes them through
//   PATCH /service, 250 a batch, 2 batches in flight, timed until the last
//   answer; GET /service then says how many the datapath holds. Then the same
//   batches again (a controller's resync: nothing should change).
// - tendril, one request per service: a second node takes them through PUT
//   /service/{id}, 16 requests in flight (a controller's worker pool).
// - the anchor: kube-proxy's iptables rules for the same services
//   (serviceCommon's kubeProxyStyleRuleset) loaded by one iptables-restore into
//   an empty node namespace.
// Memory: the first agent's RSS, and the kernel's memory for its pinned
// load-balancing maps, before and after.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exec } from './benchProcess.js';
import { BenchNamespaces, TendrilBenchNode, inNs } from './policyDatapath.js';
import { applyServicesInBatches, benchServices, cleanupOnSignal, kubeProxyStyleRuleset, lbMapsMemory, mib, once, programServices, rssBytes, serviceCounts } from './serviceCommon.js';
import { percentile } from './stats.js';

/** The iptables the anchor uses: this machine's default backend unless TENDRIL_BENCH_IPTABLES names another (e.g. iptables-legacy). */
const IPTABLES = process.env.TENDRIL_BENCH_IPTABLES ?? 'iptables';

export interface ServiceProgramReport {
  services: number;
  backendsPerService: number;
  /** PATCH /service batches: wall time, and the same batches again. */
  batchMs: number;
  batchResyncMs: number;
  /** PUT /service/{id}, `concurrency` in flight. */
  concurrency: number;
  putMs: number;
  /** Each PUT's own time, ms: p50 / p99. */
  putP50: number;
  putP99: number;
  /** iptables-restore of kube-proxy's rules for the same services, and the nat rules it left. */
  iptablesMs: number;
  iptablesRules: number;
  iptablesVersion: string;
  listed: number;
  realized: number;
  rssBefore: number;
  rssAfter: number;
  mapsBefore: Record<string, number>;
  mapsAfter: Record<string, number>;
}

export async function runServiceProgramBench(count = 10_000, concurrency = 16): Promise<ServiceProgramReport> {
  const tag = `tdlsp${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-svcprog-'));
  const nodes: TendrilBenchNode[] = [];
  const cleanup = once(async () => {
    for (const node of nodes) await node.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    await namespaces.add(`${tag}n`, `${tag}p`, `${tag}i`);
    // Every service on placeholder backends (none is reached here).
    const services = benchServices(count, 80, 8080);

    const node = await TendrilBenchNode.start(`${tag}n`, join(scratch, 'state'), '10.248.20.0/24');
    nodes.push(node);
    await node.waitIdle();
    const pid = node.process.pid!;
    const rssBefore = await rssBytes(pid);
    const mapsBefore = await lbMapsMemory(node.bpffsRoot);
    const batchMs = await applyServicesInBatches(node.client, services);
    const counts = await serviceCounts(node.client);
    await node.waitIdle();
    const rssAfter = await rssBytes(pid);
    const mapsAfter = await lbMapsMemory(node.bpffsRoot);
    const batchResyncMs = await applyServicesInBatches(node.client, services);

    const perRequest = await TendrilBenchNode.start(`${tag}p`, join(scratch, 'state-put'), '10.248.21.0/24');
    nodes.push(perRequest);
    await perRequest.waitIdle();
    const putTimes: number[] = [];
    const putMs = await programServices(perRequest.client, services, concurrency, putTimes);

    const text = kubeProxyStyleRuleset(services);
    const t0 = performance.now();
    await exec(inNs(`${tag}i`, [`${IPTABLES}-restore`]), process.env, text);
    const iptablesMs = performance.now() - t0;
    const iptablesRules = (await exec(inNs(`${tag}i`, [IPTABLES, '-t', 'nat', '-S']))).split('\n').filter((l) => l.startsWith('-A ')).length;
    return {
      services: count,
      backendsPerService: 3,
      batchMs,
      batchResyncMs,
      concurrency,
      putMs,
      putP50: percentile(putTimes, 0.5),
      putP99: percentile(putTimes, 0.99),
      iptablesMs,
      iptablesRules,
      iptablesVersion: (await exec([IPTABLES, '-V'])).trim(),
      listed: counts.services,
      realized: counts.realized,
      rssBefore,
      rssAfter,
      mapsBefore,
      mapsAfter,
    };
  } finally {
    await cleanup();
    unhook();
  }
}

export function printServiceProgram(r: ServiceProgramReport): void {
  const sum = (m: Record<string, number>) => Object.values(m).reduce((a, b) => a + b, 0);
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  console.log(`\nProgramming ${r.services.toLocaleString('en')} ClusterIP services × ${r.backendsPerService} backends, side by side in one run (tendril agent, eBPF datapath; ${r.iptablesVersion})`);
  console.log(`  tendril, PATCH /service batches (250 a batch, 2 in flight): ${s(r.batchMs)} (${((r.services / r.batchMs) * 1000).toFixed(0)} services/s); GET /service: ${r.listed} services, ${r.realized} realized; the same batches again (resync): ${s(r.batchResyncMs)}`);
  console.log(`  tendril, PUT /service/{id} (${r.concurrency} in flight): ${s(r.putMs)} (each PUT p50 ${r.putP50.toFixed(1)} ms, p99 ${r.putP99.toFixed(1)} ms)`);
  console.log(`  iptables-restore of kube-proxy's rules for the same services: ${s(r.iptablesMs)} (${r.iptablesRules} nat rules)`);
  console.log(`  tendril batches / iptables-restore: ${(r.batchMs / r.iptablesMs).toFixed(2)}x (goal: ≤ 1); per-service PUTs / iptables-restore: ${(r.putMs / r.iptablesMs).toFixed(2)}x`);
  console.log(`  agent RSS: ${mib(r.rssBefore)} → ${mib(r.rssAfter)} (+${mib(r.rssAfter - r.rssBefore)}, ${((r.rssAfter - r.rssBefore) / r.services / 1024).toFixed(1)} KiB per service)`);
  const names = [...new Set([...Object.keys(r.mapsBefore), ...Object.keys(r.mapsAfter)])];
  console.log(
    `  load-balancing maps (kernel memlock): ${mib(sum(r.mapsBefore))} → ${mib(sum(r.mapsAfter))} (${names.map((n) => `${n} ${mib(r.mapsBefore[n] ?? 0)} → ${mib(r.mapsAfter[n] ?? 0)}`).join(', ')})`,
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printServiceProgram(await runServiceProgramBench(Number(process.argv[2] ?? 10_000)));
}
