// agent-memory: what the agent holds, and its peak, through a large node's
// life: an agent (eBPF datapath) with `pods` local endpoints (network
// namespaces, added through its CNI API as tendril-cni would), then 10,000
// policy rules imported through the API (each an ingress rule of one server
// pod, 2,000 a request) until the server's policy map holds them, then 10,000
// ClusterIP services with 3 backends through PATCH /service batches. After
// each phase: the agent's RSS, its peak so far (VmHWM), its V8 heap in use
// (the agent's own metrics), and how long the phase took. The goal: a peak
// of at most 200 MiB.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BenchNamespaces, ingressRuleDoc, TendrilBenchNode } from './policyDatapath.js';
import { applyServicesInBatches, benchServices, cleanupOnSignal, mib, once } from './serviceCommon.js';

export interface AgentMemoryPhase {
  phase: string;
  ms: number;
  rssBytes: number;
  peakBytes: number;
  heapUsedBytes: number;
}

export interface AgentMemoryReport {
  pods: number;
  rules: number;
  services: number;
  phases: AgentMemoryPhase[];
}

async function status(pid: number): Promise<{ rss: number; peak: number }> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { rss: kib('VmRSS'), peak: kib('VmHWM') };
}

async function heapUsed(node: TendrilBenchNode): Promise<number> {
  const m = /^tendril_agent_nodejs_heap_size_used_bytes (\d+)/m.exec(await node.client.metrics());
  return Number(m?.[1] ?? 0);
}

export async function runAgentMemoryBench(pods = 1000, rules = 10_000, services = 10_000): Promise<AgentMemoryReport> {
  const tag = `tdlam${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-agentmem-'));
  let node: TendrilBenchNode | undefined;
  const cleanup = once(async () => {
    if (node) await node.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    const podNs = Array.from({ length: pods }, (_, i) => `${tag}p${i}`);
    await namespaces.add(`${tag}n`, `${tag}s`, ...podNs);
    // A /20: room for every pod, the server and the router.
    node = await TendrilBenchNode.start(`${tag}n`, join(scratch, 'state'), '10.250.0.0/20');
    const n = node;
    const pid = n.process.pid!;
    const phases: AgentMemoryPhase[] = [];
    const record = async (phase: string, t0: number) => {
      await n.waitIdle();
      const s = await status(pid);
      phases.push({ phase, ms: performance.now() - t0, rssBytes: s.rss, peakBytes: s.peak, heapUsedBytes: await heapUsed(n) });
    };
    await record('started', performance.now());
    let t0 = performance.now();
    const server = await n.addPod('mem-server', `${tag}s`, 'app=mem-server');
    for (const [i, ns] of podNs.entries()) await n.addPod(`mem-pod-${i}`, ns, `app=mem-pod-${i % 20}`);
    await record(`${pods} local endpoints added`, t0);
    t0 = performance.now();
    const docs: string[] = [];
    for (let i = 0; i < rules; i++) docs.push(ingressRuleDoc(`mem-${i}`, 'mem-server', `mem-pod-${i % 20}`, 10000 + (i % 50000)));
    const revision = await n.importPolicies(docs);
    await n.waitRealized(revision, new Set([server.endpointId]), 300_000);
    await record(`${rules} policy rules imported and realized`, t0);
    t0 = performance.now();
    await applyServicesInBatches(n.client, benchServices(services, 80, 8080));
    await record(`${services} services programmed`, t0);
    return { pods, rules, services, phases };
  } finally {
    await cleanup();
    unhook();
  }
}

export function printAgentMemory(r: AgentMemoryReport): void {
  console.log(`\nAgent memory through a large node's life: ${r.pods} local endpoints, ${r.rules} policy rules (one server), ${r.services} services × 3 backends (eBPF datapath)`);
  console.log(`  ${'phase'.padEnd(44)} ${'took'.padStart(9)} ${'RSS'.padStart(11)} ${'peak'.padStart(11)} ${'V8 heap used'.padStart(13)}`);
  for (const p of r.phases) {
    console.log(`  ${p.phase.padEnd(44)} ${`${(p.ms / 1000).toFixed(1)} s`.padStart(9)} ${mib(p.rssBytes).padStart(11)} ${mib(p.peakBytes).padStart(11)} ${mib(p.heapUsedBytes).padStart(13)}`);
  }
  const peak = Math.max(...r.phases.map((p) => p.peakBytes));
  console.log(`  peak RSS ${mib(peak)} (goal: ≤ 200 MiB)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printAgentMemory(await runAgentMemoryBench(Number(process.argv[2] ?? 1000)));
}
