// Every request tendril-agent's Kubernetes parts make is one AGENT_API_CALLS
// lists (the RBAC in deploy/kubernetes/tendril.yaml is checked against that
// list by test/deploy/manifests.test.ts): two nodes' watchers, identity
// allocators, node registries (TendrilNode + Lease) and ipcache syncs
// (TendrilEndpoint), as the agent wires them in crd mode, run against the
// fake API server through the paths that make each kind of request — an
// identity race (create, 409, get), a node's first write and its updates
// (patch 404, Node get, create, patch), Lease renewals and a conflict (get,
// create, update), a pod's endpoint created, replaced, and deleted after a
// conflicting write by hand (409, get) — and the requests the fake saw are compared
// with the list, both ways for the crd mode's own resources.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { FakeKubeApi } from '../support/fakeKubeApi.js';
import { namespaceObject, nodeObject, podObject } from '../support/k8sObjects.js';
import { AGENT_API_CALLS } from '../../src/k8s/agentApiCalls.js';
import { KubernetesIdentityAllocator } from '../../src/k8s/kubernetesIdentityAllocator.js';
import { KubernetesIPCacheSync } from '../../src/k8s/kubernetesIPCacheSync.js';
import { KubernetesNodeRegistry } from '../../src/k8s/kubernetesNodeRegistry.js';
import { PodEndpointFeed } from '../../src/k8s/podEndpointFeed.js';
import { K8sWatchers } from '../../src/k8s/watchers.js';
import type { K8sPolicyTarget } from '../../src/k8s/types.js';
import { IPCache } from '../../src/ipcache/index.js';
import { LabelSet } from '../../src/labels/index.js';
import { createLogger } from '../../src/logging/logger.js';
import type { NodeRecord } from '../../src/node/types.js';

const NS = 'kube-system';
const RETRY = { initialMs: 50, maxMs: 300 };
const log = createLogger('agent-api-calls-test', process.env.TENDRIL_LOG_LEVEL ?? 'silent');

async function waitFor(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The agent's own targets for the watchers: endpoints to relabel (none here) and the policy repository's part. */
const noEndpoints = { list: () => [], updateLabels: () => Promise.resolve({}) };
const policies: K8sPolicyTarget = { upsertPolicies: () => ({}), deletePolicies: () => ({}) };

interface Node {
  name: string;
  ip: string;
  watchers: K8sWatchers;
  identities: KubernetesIdentityAllocator;
  registry: KubernetesNodeRegistry;
  ipcache: IPCache;
  endpoints: Map<number, { podNamespace?: string; podName?: string }>;
  feed: PodEndpointFeed;
  sync: KubernetesIPCacheSync;
  record: NodeRecord;
}

/** One agent's Kubernetes side, made and started in the order src/agent/clusterState.ts and agent.ts use. */
async function startNode(fake: FakeKubeApi, name: string, ip: string, podCidr: string): Promise<Node> {
  const kubeconfig = await fake.kubeconfig();
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(kubeconfig);
  const watchers = new K8sWatchers({ connection: { kubeconfig }, nodeName: name, logger: log, endpoints: noEndpoints, policy: policies, retry: RETRY });
  await watchers.ownNode(5000);
  const identities = new KubernetesIdentityAllocator({ kubeConfig, nodeName: name, logger: log, syncTimeoutMs: 5000, retry: RETRY });
  const registry = new KubernetesNodeRegistry({ kubeConfig, nodeName: name, namespace: NS, leaseTtlSeconds: 1, logger: log, syncTimeoutMs: 5000, retry: RETRY });
  const ipcache = new IPCache({ logger: log });
  const endpoints = new Map<number, { podNamespace?: string; podName?: string }>();
  const feed = new PodEndpointFeed({ ipcache, endpoints, pods: watchers.podCache, logger: log });
  const sync = new KubernetesIPCacheSync({ kubeConfig, ipcache, nodeName: name, nodeIP: ip, endpoints: feed, nodes: registry, logger: log, syncTimeoutMs: 5000, retry: RETRY });
  await watchers.start({ timeoutMs: 5000 });
  await identities.start();
  const record: NodeRecord = {
    name,
    addresses: [{ type: 'InternalIP', ip }],
    podCidrs: [podCidr],
    routingMode: 'tunnel',
    tunnel: { protocol: 'vxlan', port: 8472 },
    health: { status: 'ok' },
    startedAt: new Date().toISOString(),
  };
  await registry.start(record);
  feed.start();
  await sync.start();
  return { name, ip, watchers, identities, registry, ipcache, endpoints, feed, sync, record };
}

async function stopNode(n: Node): Promise<void> {
  n.feed.stop();
  await n.sync.stop();
  await n.registry.stop();
  await n.identities.close();
  await n.watchers.stop();
}

describe("the agent's Kubernetes requests (crd mode)", () => {
  let fake: FakeKubeApi;
  const nodes: Node[] = [];

  before(async () => {
    fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
    for (const ns of [NS, 'shop']) fake.create('namespaces', namespaceObject(ns));
    fake.create('nodes', nodeObject('node-a', ['10.200.1.0/24'], [{ type: 'InternalIP', address: '192.168.50.1' }]));
    fake.create('nodes', nodeObject('node-b', ['10.200.2.0/24'], [{ type: 'InternalIP', address: '192.168.50.2' }]));
  });
  after(async () => {
    for (const n of nodes.splice(0)) await stopNode(n);
    await fake.stop();
  });

  test('every request the fake saw is in AGENT_API_CALLS, and every crd-mode request listed was made', async () => {
    const a = await startNode(fake, 'node-a', '192.168.50.1', '10.200.1.0/24');
    nodes.push(a);
    const b = await startNode(fake, 'node-b', '192.168.50.2', '10.200.2.0/24');
    nodes.push(b);
    await waitFor('each node sees the other', () => a.registry.get('node-b') !== undefined && b.registry.get('node-a') !== undefined);

    // An identity race: both nodes want the same new label set at once; one create loses (409) and reads the winner's.
    const labels = LabelSet.parse(['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop']);
    const [ia, ib] = await Promise.all([a.identities.allocate(labels), b.identities.allocate(labels)]);
    assert.equal(ia.identity.id, ib.identity.id, 'one identity');
    assert.ok(a.identities.store.conflicts + b.identities.store.conflicts >= 1, 'one create lost the race');
    const id = ia.identity.id;

    // A node's record changes: a merge patch of its TendrilNode.
    await a.registry.update({ ...a.record, health: { status: 'degraded', reason: 'test' } });
    // Someone else writes node-a's Lease: its next renewal conflicts (409), reads it again and updates.
    const leaseName = 'tendril-node-node-a';
    const lease = fake.get('leases', NS, leaseName) as { metadata: Record<string, unknown> };
    fake.update('leases', { ...lease, metadata: { ...lease.metadata, labels: { ...(lease.metadata.labels as object), touched: 'yes' } } });
    await new Promise((r) => setTimeout(r, 1200)); // several renewals (TTL 1 s: every 333 ms)

    // A pod on node-a: its endpoint published (create), its identity changed (replace), then gone (delete).
    fake.create('pods', podObject({ namespace: 'shop', name: 'web-1', nodeName: 'node-a', labels: { app: 'web' } }));
    a.endpoints.set(7, { podNamespace: 'shop', podName: 'web-1' });
    a.ipcache.upsert('10.200.1.7', { source: 'local', owner: 'endpoint:7', identity: id });
    await waitFor('web-1 published', () => fake.get('tendrilendpoints', 'shop', 'web-1') !== undefined);
    await waitFor("node-b's ipcache has web-1", () => b.ipcache.lookup('10.200.1.7')?.identity === id);
    const other = await b.identities.allocate(LabelSet.parse(['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=shop']));
    a.ipcache.upsert('10.200.1.7', { source: 'local', owner: 'endpoint:7', identity: other.identity.id });
    await waitFor('web-1 relabelled', () => (fake.get('tendrilendpoints', 'shop', 'web-1') as { spec: { identity: number } }).spec.identity === other.identity.id);
    // Someone labels the object by hand: the agent's delete (preconditions on its last write) conflicts, reads it again, deletes.
    const written = fake.get('tendrilendpoints', 'shop', 'web-1') as { metadata: Record<string, unknown> };
    fake.update('tendrilendpoints', { ...written, metadata: { ...written.metadata, labels: { ...(written.metadata.labels as object), touched: 'yes' } } });
    a.ipcache.delete('10.200.1.7', { source: 'local', owner: 'endpoint:7' });
    await a.sync.flush();
    await waitFor('web-1 withdrawn', () => fake.get('tendrilendpoints', 'shop', 'web-1') === undefined);

    await a.sync.pruneStale();

    const made = Object.keys(fake.requests()).filter((k) => k.includes(':') && !k.startsWith('discovery'));
    const crd = AGENT_API_CALLS.filter((c) => c.modes.includes('crd'));
    const listed = new Set(crd.flatMap((c) => c.verbs.map((v) => `${v}:${c.resource}`)));
    console.log(`# requests seen: ${made.sort().join(' ')}`);
    for (const k of made) assert.ok(listed.has(k), `request ${k} is in AGENT_API_CALLS`);
    // The crd mode's own grants are no wider than what the agent does (the watchers' get is older than this list).
    const crdOnly = AGENT_API_CALLS.filter((c) => !c.modes.includes('kvstore')).flatMap((c) => c.verbs.map((v) => `${v}:${c.resource}`));
    for (const k of [...crdOnly, 'get:nodes']) assert.ok(made.includes(k), `listed request ${k} was made`);
  });
});
