// The agent's first sync with a Kubernetes API server, and what it costs in
// memory: the fake API server (in the node namespace, k8sCommon.ts) holds 5,000
// pods on this node in 50 namespaces, 1,000 NetworkPolicies and 1,000 ClusterIP
// Services each with an EndpointSlice of 2–3 backends (and this node's Node).
// A tendril agent (eBPF datapath) is spawned with --k8s-kubeconfig and timed
// from the spawn to GET /healthz saying ok (every watched resource listed once),
// then to every policy and service in force (GET /policy lists all 1,000, GET
// /service all 1,000 realized). Memory: the agent's peak resident memory (VmHWM)
// and its RSS once it is idle after the sync. The reference is the same agent
// started with no Kubernetes in a node namespace of its own: its time to a
// healthy GET /healthz and its memory, idle. Three starts of each, alternating
// (the machine is shared), each with a fresh state dir; medians are printed.
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { boxTag, errorLine, withCleanup } from './clusterCommon.js';
import { createFleet, FakeApiProcess, K8sBenchAgent, k8sFleet, k8sNamespace, k8sNode, loadAverage, msBetween, waitIdle } from './k8sCommon.js';
import { BenchNamespaces } from './policyDatapath.js';
import { mib } from './serviceCommon.js';
import { percentile } from './stats.js';

const NODE_NAME = 'tdl-bench-k8s';
const POD_CIDR = '10.200.0.0/18';
/** The fleet's pods' addresses: in the node's pod CIDR (no endpoint of the agent holds them: no CNI ADD here). */
const podIp = (i: number) => `10.200.${(i + 2) >> 8}.${(i + 2) & 255}`;

export interface AgentStart {
  /** Spawn → GET /healthz ok, ms. */
  healthyMs: number;
  /** Spawn → every policy and service in force (k8s only), ms. */
  inForceMs?: number;
  policies?: number;
  services?: number;
  realized?: number;
  /** VmHWM once idle after the sync, bytes. */
  peak: number;
  /** VmRSS once idle after the sync, bytes. */
  rss: number;
  /** Objects in the agent's caches, by resource (k8s only: GET /healthz). */
  cached?: Record<string, number>;
}

export interface K8sSyncReport {
  pods: number;
  policies: number;
  services: number;
  namespaces: number;
  /** ms to write the fleet into the fake. */
  populateMs: number;
  /** One start per round each, the reference and the Kubernetes one alternating. */
  k8s: AgentStart[];
  k8sError?: string;
  baseline: AgentStart[];
  /** Requests the fake served during the first Kubernetes start, by verb and resource. */
  requests?: Record<string, number>;
  /** The machine's load average before and after. */
  load: [number, number];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type OnCleanup = (fn: () => Promise<void>) => void;

export async function runK8sSyncBench(o: { pods?: number; policies?: number; services?: number; namespaces?: number; rounds?: number } = {}): Promise<K8sSyncReport> {
  const [pods, policies, services, nsCount, rounds] = [o.pods ?? 5000, o.policies ?? 1000, o.services ?? 1000, o.namespaces ?? 50, o.rounds ?? 3];
  return withCleanup(async (onCleanup) => {
    const tag = boxTag('ks');
    const [baseNode, k8sNodeNs] = [`${tag}b`, `${tag}k`];
    const namespaces = new BenchNamespaces();
    onCleanup(() => namespaces.cleanup());
    const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-k8ssync-'));
    onCleanup(() => rm(scratch, { recursive: true, force: true }));
    await namespaces.add(baseNode, k8sNodeNs);

    const load0 = await loadAverage();
    const fake = await FakeApiProcess.start(k8sNodeNs);
    onCleanup(() => fake.stop());
    const fleet = k8sFleet({ nodeName: NODE_NAME, namespaces: nsCount, pods, policies, services, podIp });
    const p0 = performance.now();
    await fake.create('nodes', [k8sNode(NODE_NAME, POD_CIDR, '10.0.0.1')]);
    // crd mode (the default with an API server and no etcd): the node's Lease lives in kube-system.
    await fake.create('namespaces', [k8sNamespace('kube-system')]);
    await createFleet(fake, fleet);
    const populateMs = performance.now() - p0;
    const kubeconfig = await fake.kubeconfig();
    const report: K8sSyncReport = { pods, policies, services, namespaces: nsCount, populateMs, k8s: [], baseline: [], load: [load0, 0] };
    // Each start alone on the machine, with a fresh state dir (nothing to restore); the two kinds alternate so a busy spell hits both.
    for (let round = 0; round < rounds; round++) {
      report.baseline.push(await measureBaselineStart(baseNode, join(scratch, `base${round}`), onCleanup));
      if (report.k8sError) continue;
      const before = await fake.requests();
      try {
        report.k8s.push(await measureK8sStart(k8sNodeNs, join(scratch, `k8s${round}`), kubeconfig, policies, services, onCleanup));
      } catch (err) {
        report.k8sError = errorLine(err);
      }
      if (round === 0) {
        const after = await fake.requests();
        report.requests = Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - (before[k] ?? 0)]).filter(([, v]) => (v as number) > 0));
      }
    }
    report.load[1] = await loadAverage();
    return report;
  });
}

/** The same agent with no Kubernetes: spawn → healthy, then its memory once idle. */
async function measureBaselineStart(nodeNs: string, stateDir: string, onCleanup: OnCleanup): Promise<AgentStart> {
  const agent = await K8sBenchAgent.spawn({ nodeNs, stateDir, podCidr: POD_CIDR, nodeName: NODE_NAME }, (a) => onCleanup(() => a.stop()));
  const healthy = await agent.waitHealthy(120_000);
  await waitIdle(agent.pid);
  const start: AgentStart = { healthyMs: msBetween(agent.spawnedNs, healthy), ...(await agent.memory()) };
  await agent.stop();
  return start;
}

async function measureK8sStart(nodeNs: string, stateDir: string, kubeconfig: string, policies: number, services: number, onCleanup: OnCleanup): Promise<AgentStart> {
  const agent = await K8sBenchAgent.spawn(
    { nodeNs, stateDir, podCidr: POD_CIDR, nodeName: NODE_NAME, args: ['--k8s-kubeconfig', kubeconfig, '--k8s-sync-timeout', '600'] },
    (a) => onCleanup(() => a.stop()),
  );
  const healthy = await agent.waitHealthy(600_000);
  const healthyMs = msBetween(agent.spawnedNs, healthy);
  // In force: GET /policy lists every policy and GET /service holds every service realized (polled back to back).
  const deadline = Date.now() + 300_000;
  let counts = { policies: 0, services: 0, realized: 0 };
  for (;;) {
    const [pol, svc] = await Promise.all([agent.client.getPolicy(), agent.client.listServices()]);
    counts = { policies: pol.policies.length, services: svc.length, realized: svc.filter((s) => s.realized).length };
    if (counts.policies >= policies && counts.realized >= services) break;
    if (Date.now() > deadline) throw new Error(`not in force 300 s after healthy: ${counts.policies}/${policies} policies, ${counts.realized}/${services} services realized (${counts.services} listed): ${agent.log}`);
    await sleep(20);
  }
  const inForceMs = msBetween(agent.spawnedNs, process.hrtime.bigint());
  await waitIdle(agent.pid);
  const health = await agent.client.health();
  const cached = Object.fromEntries((health.kubernetes?.resources ?? []).map((r) => [r.resource, r.objects]));
  const mem = await agent.memory();
  await agent.stop();
  return { healthyMs, inForceMs, ...counts, ...mem, cached };
}

export function printK8sSync(r: K8sSyncReport): void {
  const med = (xs: AgentStart[], get: (a: AgentStart) => number) => percentile(xs.map(get), 0.5);
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  console.log(
    `\nInitial Kubernetes sync: ${r.pods.toLocaleString('en')} pods on this node in ${r.namespaces} namespaces, ${r.policies.toLocaleString('en')} NetworkPolicies, ${r.services.toLocaleString('en')} Services × 2–3 backends (fake API server; tendril agent, eBPF datapath; medians of ${r.baseline.length} starts each, alternating; load average ${r.load[0].toFixed(1)} → ${r.load[1].toFixed(1)} on ${availableParallelism()} CPUs)`,
  );
  console.log(`  ${''.padEnd(36)} ${'→ healthz ok'.padStart(13)} ${'→ in force'.padStart(11)} ${'peak (VmHWM)'.padStart(13)} ${'RSS idle'.padStart(10)}   each start → healthz`);
  const row = (name: string, xs: AgentStart[]) => {
    if (xs.length === 0) return console.log(`  ${name.padEnd(36)} ${'n/a'.padStart(13)}`);
    const each = xs.map((a) => (a.healthyMs / 1000).toFixed(2)).join(', ');
    console.log(
      `  ${name.padEnd(36)} ${s(med(xs, (a) => a.healthyMs)).padStart(13)} ${s(med(xs, (a) => a.inForceMs ?? a.healthyMs)).padStart(11)} ${mib(med(xs, (a) => a.peak)).padStart(13)} ${mib(med(xs, (a) => a.rss)).padStart(10)}   ${each}`,
    );
  };
  row('agent following the API server', r.k8s);
  row('reference: the agent, no Kubernetes', r.baseline);
  if (r.k8s.length > 0 && r.baseline.length > 0) {
    const k = r.k8s[0]!;
    console.log(`  GET /policy: ${k.policies} policies; GET /service: ${k.services} services, ${k.realized} realized; cached: ${Object.entries(k.cached ?? {}).map(([n, c]) => `${n} ${c}`).join(', ')}`);
    const ratio = (get: (a: AgentStart) => number, ref: (a: AgentStart) => number = get) => `${(med(r.k8s, get) / med(r.baseline, ref)).toFixed(2)}x`;
    const extraRss = med(r.k8s, (a) => a.rss) - med(r.baseline, (a) => a.rss);
    console.log(
      `  ratio Kubernetes/reference (medians): start to healthz ${ratio((a) => a.healthyMs)}, to in force ${ratio((a) => a.inForceMs!, (a) => a.healthyMs)}, peak memory ${ratio((a) => a.peak)}, RSS idle ${ratio((a) => a.rss)} (+${mib(extraRss)}, ${(extraRss / (r.pods + r.policies + 2 * r.services) / 1024).toFixed(2)} KiB per object)`,
    );
  }
  if (r.k8sError) console.log(`  Kubernetes start FAILED: ${r.k8sError}`);
  if (r.requests) console.log(`  the fake served during the first sync: ${Object.entries(r.requests).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  console.log(`  (writing the objects into the fake took ${s(r.populateMs)})`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  if (process.getuid?.() !== 0) {
    console.error('bench: needs root (network namespaces, BPF)');
    process.exit(1);
  }
  const [pods, policies, services, rounds] = process.argv.slice(2).map(Number);
  printK8sSync(await runK8sSyncBench({ ...(pods ? { pods } : {}), ...(policies ? { policies } : {}), ...(services ? { services } : {}), ...(rounds ? { rounds } : {}) }));
}
