// Programming 10,000 services through the agent's API, and what they cost the
// agent in memory: a tendril node (agent, eBPF datapath, no pods), then 10,000
// ClusterIP services with 3 backends each (30,000 distinct backend addresses, as
// pods would be) PUT with 16 requests in flight — a controller's worker pool —
// timed until the last answer; GET /service then says how many the datapath
// holds. Memory: the agent's RSS, and the kernel's memory for its pinned
// load-balancing maps, before and after. Then the same 10,000 PUTs again (a
// controller's resync: the upsert is idempotent, nothing should change).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BenchNamespaces, TendrilBenchNode } from './policyDatapath.js';
import { benchServices, cleanupOnSignal, lbMapsMemory, mib, once, programServices, rssBytes, serviceCounts } from './serviceCommon.js';
import { percentile } from './stats.js';

export interface ServiceProgramReport {
  services: number;
  backendsPerService: number;
  concurrency: number;
  programMs: number;
  /** Each PUT's own time, ms: p50 / p99. */
  putP50: number;
  putP99: number;
  resyncMs: number;
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
  let node: TendrilBenchNode | undefined;
  const cleanup = once(async () => {
    if (node) await node.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    await namespaces.add(`${tag}n`);
    node = await TendrilBenchNode.start(`${tag}n`, join(scratch, 'state'), '10.248.20.0/24');
    await node.waitIdle();
    const pid = node.process.pid!;
    const rssBefore = await rssBytes(pid);
    const mapsBefore = await lbMapsMemory(node.bpffsRoot);
    // Every service on placeholder backends (none is reached here).
    const services = benchServices(count, 80, 8080);
    const putMs: number[] = [];
    const programMs = await programServices(node.client, services, concurrency, putMs);
    const counts = await serviceCounts(node.client);
    await node.waitIdle();
    const rssAfter = await rssBytes(pid);
    const mapsAfter = await lbMapsMemory(node.bpffsRoot);
    const resyncMs = await programServices(node.client, services, concurrency);
    return {
      services: count,
      backendsPerService: 3,
      concurrency,
      programMs,
      putP50: percentile(putMs, 0.5),
      putP99: percentile(putMs, 0.99),
      resyncMs,
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
  console.log(`\nProgramming ${r.services.toLocaleString('en')} ClusterIP services × ${r.backendsPerService} backends through PUT /service/{id}, ${r.concurrency} requests in flight (tendril agent, eBPF datapath)`);
  console.log(
    `  all answered in ${(r.programMs / 1000).toFixed(2)} s (${((r.services / r.programMs) * 1000).toFixed(0)} services/s; each PUT p50 ${r.putP50.toFixed(1)} ms, p99 ${r.putP99.toFixed(1)} ms); GET /service: ${r.listed} services, ${r.realized} realized`,
  );
  console.log(`  the same ${r.services.toLocaleString('en')} PUTs again (resync, idempotent): ${(r.resyncMs / 1000).toFixed(2)} s`);
  console.log(`  agent RSS: ${mib(r.rssBefore)} → ${mib(r.rssAfter)} (+${mib(r.rssAfter - r.rssBefore)}, ${((r.rssAfter - r.rssBefore) / r.services / 1024).toFixed(1)} KiB per service)`);
  const names = [...new Set([...Object.keys(r.mapsBefore), ...Object.keys(r.mapsAfter)])];
  console.log(
    `  load-balancing maps (kernel memlock): ${mib(sum(r.mapsBefore))} → ${mib(sum(r.mapsAfter))} (${names.map((n) => `${n} ${mib(r.mapsBefore[n] ?? 0)} → ${mib(r.mapsAfter[n] ?? 0)}`).join(', ')})`,
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printServiceProgram(await runServiceProgramBench(Number(process.argv[2] ?? 10_000)));
}
