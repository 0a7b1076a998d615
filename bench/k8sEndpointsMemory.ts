// What following a large cluster's TendrilEndpoints costs one agent: the fake
// API server (k8sFakeApiWorker.js, its own process, so its memory is not
// counted) holds PODS objects of NODES nodes; this process runs what the agent
// runs to follow them, and reports heap and RSS growth after a GC, per pod.
//   node --expose-gc dist/bench/k8sEndpointsMemory.js [sync|plain] [pods] [nodes]
// `sync`: KubernetesIPCacheSync with its IPCache (the agent's cost).
// `plain`: a ResourceInformer caching the client's whole objects (what an
// informer without the transform keeps), for comparison.
// Objects carry no ownerReferences (the fake would collect them without their
// pods); the agent's compact record keeps the owner uid only, the plain cache
// would hold ~150 bytes more per object.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { CustomObjectsApi, KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import { IPCache } from '../src/ipcache/index.js';
import { KubernetesIPCacheSync } from '../src/k8s/kubernetesIPCacheSync.js';
import { ResourceInformer } from '../src/k8s/resourceInformer.js';
import { TENDRIL_ENDPOINT_GROUP, TENDRIL_ENDPOINT_PATH, TENDRIL_ENDPOINT_PLURAL, TENDRIL_ENDPOINT_VERSION } from '../src/k8s/tendrilEndpoint.js';
import { createLogger } from '../src/logging/logger.js';
import type { NodeChange, NodeRecord, NodeRegistryView } from '../src/node/types.js';
import type { FakeApiReply } from './k8sFakeApiWorker.js';

const mode = process.argv[2] ?? 'sync';
const PODS = Number(process.argv[3] ?? 50_000);
const NODES = Number(process.argv[4] ?? 1_000);
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with node --expose-gc');

const worker = spawn(process.execPath, [fileURLToPath(new URL('./k8sFakeApiWorker.js', import.meta.url)), JSON.stringify({ crds: 'tendril' })], { stdio: ['pipe', 'pipe', 'inherit'] });
const replies = new Map<number, (r: FakeApiReply) => void>();
let ready!: () => void;
const isReady = new Promise<void>((r) => (ready = r));
createInterface({ input: worker.stdout }).on('line', (line) => {
  const msg = JSON.parse(line) as FakeApiReply & { ready?: boolean };
  if (msg.ready) ready();
  else replies.get(msg.id)?.(msg);
});
let nextId = 1;
function ask(cmd: object): Promise<FakeApiReply> {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    replies.set(id, (r) => (r.error === undefined ? resolve(r) : reject(new Error(r.error))));
    worker.stdin.write(`${JSON.stringify({ id, ...cmd })}\n`);
  });
}

await isReady;
const nodeName = (n: number) => `node-${String(n).padStart(4, '0')}.cluster.example`;
const namespaces = Array.from({ length: 50 }, (_, i) => `team-${i}`);
await ask({ op: 'create', resource: 'namespaces', objects: namespaces.map((name) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } })) });
for (let start = 0; start < PODS; start += 5000) {
  const objects = [];
  for (let i = start; i < Math.min(PODS, start + 5000); i++) {
    const node = i % NODES;
    objects.push({
      apiVersion: `${TENDRIL_ENDPOINT_GROUP}/${TENDRIL_ENDPOINT_VERSION}`,
      kind: 'TendrilEndpoint',
      metadata: { name: `app-${i}-7f9c4d8b6c-${(i * 7919).toString(36).slice(-5).padStart(5, 'x')}`, namespace: namespaces[i % namespaces.length], labels: { 'tendril.io/node': nodeName(node) } },
      spec: {
        node: nodeName(node),
        nodeIP: `192.168.${node >> 8}.${node & 255}`,
        identity: 256 + (i % 2000),
        addresses: [`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, `fd00::${i.toString(16)}`],
        endpointID: 1 + (i % 4000),
      },
    });
  }
  await ask({ op: 'create', resource: 'tendrilendpoints', objects });
}
const { path } = await ask({ op: 'kubeconfig' });
const kubeConfig = new KubeConfig();
kubeConfig.loadFromFile(path!);
const logger = createLogger('bench', 'error');

class AllAlive implements NodeRegistryView {
  readonly #nodes = new Map<string, NodeRecord>();
  constructor() {
    for (let n = 0; n < NODES; n++) {
      this.#nodes.set(nodeName(n), { name: nodeName(n), addresses: [], podCidrs: [], routingMode: 'tunnel', health: { status: 'ok' }, startedAt: '' });
    }
  }
  list(): NodeRecord[] {
    return [...this.#nodes.values()];
  }
  get(name: string): NodeRecord | undefined {
    return this.#nodes.get(name);
  }
  subscribe(_l: (c: NodeChange) => void): () => void {
    return () => undefined;
  }
}
const nodes = new AllAlive();

gc();
const before = process.memoryUsage();
const t0 = performance.now();
let stop: () => Promise<void>;
let size: () => number;
if (mode === 'plain') {
  const custom = kubeConfig.makeApiClient(CustomObjectsApi);
  const informer = new ResourceInformer<KubernetesObject>({
    resource: TENDRIL_ENDPOINT_PLURAL,
    kubeConfig,
    path: TENDRIL_ENDPOINT_PATH,
    list: () => custom.listClusterCustomObject({ group: TENDRIL_ENDPOINT_GROUP, version: TENDRIL_ENDPOINT_VERSION, plural: TENDRIL_ENDPOINT_PLURAL }) as Promise<KubernetesListObject<KubernetesObject>>,
    logger,
  });
  informer.start();
  await informer.synced;
  stop = () => informer.stop();
  size = () => informer.list().length;
} else {
  const ipcache = new IPCache();
  const sync = new KubernetesIPCacheSync({
    kubeConfig,
    ipcache,
    nodeName: 'this-node',
    nodeIP: '192.168.255.254',
    endpoints: { list: () => [], subscribe: () => () => undefined },
    nodes,
    logger,
  });
  await sync.start();
  stop = () => sync.stop();
  size = () => ipcache.size;
}
const syncedMs = performance.now() - t0;
const peakRss = process.memoryUsage().rss;
gc();
await new Promise((r) => setTimeout(r, 200));
gc();
const after = process.memoryUsage();
const mib = (b: number) => (b / 2 ** 20).toFixed(1);
const kib = (b: number) => (b / 1024).toFixed(2);
console.log(
  JSON.stringify({
    mode,
    pods: PODS,
    nodes: NODES,
    cached: size(),
    syncedMs: Math.round(syncedMs),
    heapBeforeMiB: mib(before.heapUsed),
    heapAfterMiB: mib(after.heapUsed),
    heapPerPodKiB: kib((after.heapUsed - before.heapUsed) / PODS),
    rssBeforeMiB: mib(before.rss),
    rssAfterMiB: mib(after.rss),
    rssPeakMiB: mib(peakRss),
    rssPerPodKiB: kib((after.rss - before.rss) / PODS),
  }),
);
await stop();
worker.stdin.end();
