// One real agent following a large cluster kept in the Kubernetes API (crd
// mode, no etcd): the fake API server (k8sFakeApiWorker.ts, a process of its
// own in the agent's node namespace, so its memory is not the agent's) holds
// NODES nodes — each a Node, its TendrilNode (owned by the Node) and a node
// Lease renewed now with an hour to run, so every node stays alive through the
// run without renewals — and PODS pods spread over them: each a Pod (the owner)
// and its TendrilEndpoint (identity from LABEL_SETS TendrilIdentities, one
// address), in 50 namespaces. The agent is timed from its spawn to GET /healthz
// ok (every informer listed) and to every remote pod in its ipcache (GET /ip);
// its memory is VmRSS (and VmHWM) once it is idle. The reference is the same
// agent on the same fake holding nothing but this node: per remote pod is
// (RSS at PODS − RSS empty) / PODS, from the medians of three starts of each
// (one sync's RSS differs from the next by up to ±0.4 KiB per pod).
// Anchor: Cilium's agent, 438 MiB at 50,000 pods on 1,000 nodes (+10.5 KiB per
// pod). Goal: ≤ 200 MiB and ≤ 3 KiB per remote pod.
//   node dist/bench/k8sScale.js [pods] [nodes] [rounds]
// With TENDRIL_BENCH_HEAP_SNAPSHOT=<dir> the loaded agent writes a heap
// snapshot there (SIGUSR2, --heapsnapshot-signal) before it is stopped.
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { boxTag, errorLine, withCleanup } from './clusterCommon.js';
import { FakeApiProcess, K8sBenchAgent, k8sNode, loadAverage, msBetween, waitIdle } from './k8sCommon.js';
import { BenchNamespaces } from './policyDatapath.js';
import { mib } from './serviceCommon.js';
import { percentile } from './stats.js';
import { namespaceObject, podObject } from '../test/support/k8sObjects.js';
import { NODE_LEASE_LABEL, nodeLeaseName } from '../src/k8s/nodeLeases.js';

const NODE_NAME = 'tdl-bench-scale';
const NODE_IP = '10.0.0.1';
const POD_CIDR = '10.200.0.0/24';
const LEASE_NAMESPACE = 'kube-system';
const NAMESPACES = 50;

export interface ScaleStart {
  /** Spawn → GET /healthz ok (every informer listed), ms. */
  healthyMs: number;
  /** Spawn → GET /ip holds every remote pod, ms. */
  ipcacheMs: number;
  /** Remote pod entries in GET /ip then. */
  remote: number;
  /** VmRSS / VmHWM once idle, bytes. */
  rss: number;
  peak: number;
  cached: Record<string, number>;
  /** With TENDRIL_BENCH_HEAP_SNAPSHOT: the heap of a snapshot taken once idle. */
  heap?: HeapSummary;
}

export interface K8sScaleReport {
  pods: number;
  nodes: number;
  labelSets: number;
  populateMs: number;
  /** Each start's, `rounds` of each (an RSS differs by ±0.4 KiB per pod from one sync to the next on a busy machine); printed: medians. */
  empty: ScaleStart[];
  loaded: ScaleStart[];
  error?: string;
  /** Requests the fake served during the loaded agent's start, by verb and resource. */
  requests?: Record<string, number>;
  load: [number, number];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const nodeName = (n: number) => `node-${String(n).padStart(4, '0')}.bench.example`;
/** Remote node n: 172.<16+n/256>.<n%256>.1 on the underlay, pod CIDR 10.<64+n/256>.<n%256>.0/24 (never this node's 10.200.0.0/24). */
const nodeIp = (n: number) => `172.${16 + (n >> 8)}.${n & 255}.1`;
const podCidrOf = (n: number) => `10.${64 + (n >> 8)}.${n & 255}.0/24`;
/** Pod i lives on node i % nodes, address .2 + i / nodes of that node's CIDR. */
const podIp = (i: number, nodes: number) => {
  const n = i % nodes;
  return `10.${64 + (n >> 8)}.${n & 255}.${2 + Math.floor(i / nodes)}`;
};
/** A MicroTime (6 fractional digits) as the API server takes it. */
const microTime = (d: Date) => d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
const GROUP_VERSION = 'tendril.io/v1';

/** Writes the cluster into the fake: owners first (the fake collects an object whose owner uid does not exist). */
async function populate(fake: FakeApiProcess, pods: number, nodes: number, labelSets: number): Promise<void> {
  const namespaces = Array.from({ length: NAMESPACES }, (_, k) => `team-${k}`);
  await fake.create('namespaces', namespaces.map((n) => namespaceObject(n)));
  const nodeUids = await fake.createWithUids(
    'nodes',
    Array.from({ length: nodes }, (_, n) => k8sNode(nodeName(n), podCidrOf(n), nodeIp(n))),
  );
  const startedAt = new Date().toISOString();
  await fake.create(
    'tendrilnodes',
    Array.from({ length: nodes }, (_, n) => ({
      apiVersion: GROUP_VERSION,
      kind: 'TendrilNode',
      metadata: { name: nodeName(n), labels: { 'app.kubernetes.io/part-of': 'tendril' }, ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: nodeName(n), uid: nodeUids[n]! }] },
      spec: {
        addresses: [{ type: 'InternalIP', ip: nodeIp(n) }],
        podCIDRs: [podCidrOf(n)],
        routingMode: 'tunnel',
        tunnel: { protocol: 'vxlan', port: 8472 },
        health: { status: 'ok' },
        startedAt,
        ipam: { podCIDRs: [podCidrOf(n)] },
      },
    })),
  );
  const renewTime = microTime(new Date());
  await fake.create(
    'leases',
    Array.from({ length: nodes }, (_, n) => ({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: nodeLeaseName(nodeName(n)), namespace: LEASE_NAMESPACE, labels: { 'app.kubernetes.io/part-of': 'tendril', [NODE_LEASE_LABEL]: 'true' } },
      // An hour: alive through the run with nobody renewing it.
      spec: { holderIdentity: nodeName(n), leaseDurationSeconds: 3600, renewTime },
    })),
  );
  const appOf = (i: number) => `app-${i % labelSets}`;
  await fake.create(
    'tendrilidentities',
    Array.from({ length: labelSets }, (_, k) => ({
      apiVersion: GROUP_VERSION,
      kind: 'TendrilIdentity',
      metadata: { name: String(256 + k), labels: { app: `app-${k}` } },
      'security-labels': { 'k8s:app': `app-${k}`, 'k8s:io.kubernetes.pod.namespace': namespaces[k % NAMESPACES]! },
    })),
  );
  // Pods and their endpoints in slices, so a slice's uids come back before its endpoints go in.
  for (let start = 0; start < pods; start += 5000) {
    const idx = Array.from({ length: Math.min(5000, pods - start) }, (_, j) => start + j);
    const name = (i: number) => `${appOf(i)}-7f9c4d8b6c-${(i * 7919).toString(36).slice(-5).padStart(5, 'x')}${i}`;
    const ns = (i: number) => namespaces[(i % labelSets) % NAMESPACES]!;
    const uids = await fake.createWithUids(
      'pods',
      idx.map((i) => podObject({ namespace: ns(i), name: name(i), nodeName: nodeName(i % nodes), labels: { app: appOf(i) }, ip: podIp(i, nodes), hostIP: nodeIp(i % nodes) })),
    );
    await fake.create(
      'tendrilendpoints',
      idx.map((i, j) => ({
        apiVersion: GROUP_VERSION,
        kind: 'TendrilEndpoint',
        metadata: { name: name(i), namespace: ns(i), labels: { 'tendril.io/node': nodeName(i % nodes) }, ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: name(i), uid: uids[j]! }] },
        spec: { node: nodeName(i % nodes), nodeIP: nodeIp(i % nodes), identity: 256 + (i % labelSets), addresses: [podIp(i, nodes)], endpointID: 1 + Math.floor(i / nodes) },
      })),
    );
  }
}

/**
 * SIGUSR2 (--heapsnapshot-signal): the agent writes a snapshot into its cwd
 * (done once the file's size holds for 2 s); answers the heap's size (every
 * node's self size) and its largest kinds of node (V8's constructor names).
 */
async function heapSnapshot(agent: K8sBenchAgent, dir: string): Promise<HeapSummary> {
  const before = new Set(await readdir(dir));
  agent.process.kill('SIGUSR2');
  let size = -1;
  let file: string | undefined;
  for (let stable = 0; stable < 4; ) {
    await sleep(500);
    file = (await readdir(dir)).find((f) => !before.has(f) && f.endsWith('.heapsnapshot'));
    const now = file === undefined ? -1 : (await stat(join(dir, file))).size;
    stable = now > 0 && now === size ? stable + 1 : 0;
    size = now;
  }
  const snap = JSON.parse(await readFile(join(dir, file!), 'utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snap.snapshot.meta.node_fields;
  const [type, name, self] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [number, number, number];
  const kinds = new Map<string, number>();
  let bytes = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const t = snap.snapshot.meta.node_types[0][snap.nodes[i + type]!]!;
    const kind = t === 'object' || t === 'closure' ? snap.strings[snap.nodes[i + name]!]! : `(${t})`;
    bytes += snap.nodes[i + self]!;
    kinds.set(kind, (kinds.get(kind) ?? 0) + snap.nodes[i + self]!);
  }
  return { bytes, top: [...kinds].sort((a, b) => b[1] - a[1]).slice(0, 8) };
}

interface HeapSummary {
  bytes: number;
  /** The largest kinds of heap node by their self sizes' sum. */
  top: Array<[string, number]>;
}

async function measureStart(nodeNs: string, stateDir: string, kubeconfig: string, remote: number, onCleanup: (fn: () => Promise<void>) => void, snapshotDir?: string): Promise<ScaleStart> {
  const args = ['--k8s-kubeconfig', kubeconfig, '--identity-allocation-mode', 'crd', '--k8s-namespace', LEASE_NAMESPACE, '--k8s-sync-timeout', '600', '--node-ip', NODE_IP, '--routing-mode', 'tunnel'];
  const agent = await K8sBenchAgent.spawn(
    { nodeNs, stateDir, podCidr: POD_CIDR, nodeName: NODE_NAME, args, ...(snapshotDir === undefined ? {} : { env: { NODE_OPTIONS: '--heapsnapshot-signal=SIGUSR2' }, cwd: snapshotDir }) },
    (a) => onCleanup(() => a.stop()),
  );
  const healthy = await agent.waitHealthy(600_000);
  const healthyMs = msBetween(agent.spawnedNs, healthy);
  // Every remote pod in the ipcache (entries whose host is another node), polled every 200 ms: 50,000 entries are a large answer.
  const deadline = Date.now() + 300_000;
  let seen = 0;
  for (;;) {
    seen = (await agent.client.listIpcache()).filter((e) => e.hostIP !== undefined && e.hostIP !== NODE_IP && e.prefix.startsWith('10.')).length;
    if (seen >= remote) break;
    if (Date.now() > deadline) throw new Error(`${seen}/${remote} remote pods in the ipcache 300 s after healthy: ${agent.log}`);
    await sleep(200);
  }
  const ipcacheMs = msBetween(agent.spawnedNs, process.hrtime.bigint());
  await waitIdle(agent.pid, 60_000);
  const health = await agent.client.health();
  const cached = Object.fromEntries((health.kubernetes?.resources ?? []).map((r) => [r.resource, r.objects]));
  const mem = await agent.memory();
  const heap = snapshotDir === undefined ? undefined : await heapSnapshot(agent, snapshotDir);
  await agent.stop();
  return { healthyMs, ipcacheMs, remote: seen, ...mem, cached, ...(heap === undefined ? {} : { heap }) };
}

export async function runK8sScaleBench(o: { pods?: number; nodes?: number; labelSets?: number; rounds?: number } = {}): Promise<K8sScaleReport> {
  const [pods, nodes, labelSets, rounds] = [o.pods ?? 50_000, o.nodes ?? 1_000, o.labelSets ?? 500, o.rounds ?? 3];
  return withCleanup(async (onCleanup) => {
    const tag = boxTag('kx');
    const nodeNs = `${tag}n`;
    const namespaces = new BenchNamespaces();
    onCleanup(() => namespaces.cleanup());
    const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-k8sscale-'));
    onCleanup(() => rm(scratch, { recursive: true, force: true }));
    await namespaces.add(nodeNs);
    const load0 = await loadAverage();
    const fake = await FakeApiProcess.start(nodeNs);
    onCleanup(() => fake.stop());
    await fake.create('namespaces', [namespaceObject(LEASE_NAMESPACE)]);
    await fake.create('nodes', [k8sNode(NODE_NAME, POD_CIDR, NODE_IP)]);
    const kubeconfig = await fake.kubeconfig();
    const report: K8sScaleReport = { pods, nodes, labelSets, populateMs: 0, empty: [], loaded: [], load: [load0, 0] };
    const snapshotDir = process.env.TENDRIL_BENCH_HEAP_SNAPSHOT;
    try {
      // Snapshots of the first start of each only (a snapshot is seconds of work and doubles the agent's memory for a while).
      for (let i = 0; i < rounds; i++) report.empty.push(await measureStart(nodeNs, join(scratch, `empty${i}`), kubeconfig, 0, onCleanup, i === 0 ? snapshotDir : undefined));
      const p0 = performance.now();
      await populate(fake, pods, nodes, labelSets);
      report.populateMs = performance.now() - p0;
      await fake.resetRequests();
      for (let i = 0; i < rounds; i++) {
        report.loaded.push(await measureStart(nodeNs, join(scratch, `loaded${i}`), kubeconfig, pods, onCleanup, i === 0 ? snapshotDir : undefined));
        if (i === 0) report.requests = await fake.requests();
      }
      if (snapshotDir !== undefined) console.error(`heap snapshots in ${snapshotDir}: ${(await readdir(snapshotDir)).join(', ')}`);
    } catch (err) {
      report.error = errorLine(err);
    }
    report.load[1] = await loadAverage();
    return report;
  });
}

export function printK8sScale(r: K8sScaleReport): void {
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const med = (xs: ScaleStart[], get: (x: ScaleStart) => number) => percentile(xs.map(get), 0.5);
  console.log(
    `\nScale in crd mode: one agent following ${r.nodes.toLocaleString('en')} nodes (Node, TendrilNode, Lease each) and ${r.pods.toLocaleString('en')} remote pods (Pod, TendrilEndpoint each; ${r.labelSets} TendrilIdentities) in the fake API server (its own process; medians of ${r.loaded.length} starts each; load average ${r.load[0].toFixed(1)} → ${r.load[1].toFixed(1)})`,
  );
  console.log(`  ${''.padEnd(40)} ${'→ healthz ok'.padStart(13)} ${'→ ipcache full'.padStart(15)} ${'RSS idle'.padStart(10)} ${'peak (VmHWM)'.padStart(13)}   each start's RSS`);
  const row = (name: string, xs: ScaleStart[]) =>
    console.log(
      xs.length === 0
        ? `  ${name.padEnd(40)} ${'n/a'.padStart(13)}`
        : `  ${name.padEnd(40)} ${s(med(xs, (x) => x.healthyMs)).padStart(13)} ${s(med(xs, (x) => x.ipcacheMs)).padStart(15)} ${mib(med(xs, (x) => x.rss)).padStart(10)} ${mib(med(xs, (x) => x.peak)).padStart(13)}   ${xs.map((x) => mib(x.rss)).join(', ')}`,
    );
  row(`agent, ${r.pods.toLocaleString('en')} remote pods`, r.loaded);
  row('reference: the agent, empty cluster', r.empty);
  if (r.loaded.length > 0 && r.empty.length > 0) {
    const [loaded, empty] = [med(r.loaded, (x) => x.rss), med(r.empty, (x) => x.rss)];
    const perPod = (loaded - empty) / r.pods / 1024;
    console.log(`  per remote pod: ${perPod.toFixed(2)} KiB RSS ((RSS loaded − RSS empty) / pods; goal ≤ 3 KiB: ${perPod <= 3 ? 'met' : 'NOT met'}; Cilium's agent +10.5 KiB)`);
    console.log(`  total: ${mib(loaded)} (goal ≤ 200 MiB: ${loaded <= 200 * 2 ** 20 ? 'met' : 'NOT met'}; Cilium's agent 438 MiB at 50,000 pods on 1,000 nodes); ratio to the empty agent ${(loaded / empty).toFixed(2)}x`);
    const [he, hl] = [r.empty[0]!.heap, r.loaded[0]!.heap];
    if (he && hl) {
      console.log(`  heap (snapshots, first starts): ${mib(hl.bytes)} loaded, ${mib(he.bytes)} empty, ${((hl.bytes - he.bytes) / r.pods / 1024).toFixed(2)} KiB per remote pod`);
      const emptyKind = new Map(he.top);
      console.log(`    largest kinds loaded (empty): ${hl.top.map(([k, b]) => `${k} ${mib(b)} (${emptyKind.has(k) ? mib(emptyKind.get(k)!) : '?'})`).join(', ')}`);
    }
    const l = r.loaded[0]!;
    console.log(`  remote pods in GET /ip: ${l.remote}; cached by the agent: ${Object.entries(l.cached).map(([n, c]) => `${n} ${c}`).join(', ')}`);
  }
  if (r.requests) console.log(`  the fake served during the first loaded start: ${Object.entries(r.requests).filter(([k]) => !k.includes(':')).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  if (r.error) console.log(`  FAILED: ${r.error}`);
  console.log(`  (writing the objects into the fake took ${s(r.populateMs)})`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  if (process.getuid?.() !== 0) {
    console.error('bench: needs root (network namespaces, BPF)');
    process.exit(1);
  }
  const [pods, nodes, rounds] = process.argv.slice(2).map(Number);
  printK8sScale(await runK8sScaleBench({ ...(pods ? { pods } : {}), ...(nodes ? { nodes } : {}), ...(rounds ? { rounds } : {}) }));
}
