import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CoreV1Api, KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { FakeKubeApi } from '../../test/support/fakeKubeApi.js';
import { namespaceObject, podObject } from '../../test/support/k8sObjects.js';
import { testLogger, waitFor } from '../identity/testing/cluster.js';
import { IPCache } from '../ipcache/index.js';
import { runSyncContract, type ContractEndpoint, type SyncContractHarness, type SyncContractNode } from '../ipcache/testing/syncContract.js';
import type { NodeChange, NodeRecord, NodeRegistryView } from '../node/types.js';
import { KubernetesIPCacheSync } from './kubernetesIPCacheSync.js';
import type { EndpointManager } from '../endpoint/index.js';
import { PodEndpointFeed, type EndpointPodLookup } from './podEndpointFeed.js';
import { ResourceInformer } from './resourceInformer.js';
import { TENDRIL_ENDPOINT_GROUP, TENDRIL_ENDPOINT_VERSION, type TendrilEndpointObject } from './tendrilEndpoint.js';

const RETRY = { initialMs: 50, maxMs: 500 };
// The agent hands the feed its EndpointManager (and PodWatcher.pods, as startAgent does below).
const managerIsLookup: (m: EndpointManager) => EndpointPodLookup = (m) => m;
void managerIsLookup;
const WRITE_VERBS = ['create', 'update', 'patch', 'delete'];

async function kubeConfigOf(fake: FakeKubeApi): Promise<KubeConfig> {
  const kc = new KubeConfig();
  kc.loadFromFile(await fake.kubeconfig());
  return kc;
}

/**
 * Which nodes are alive, held in memory: the Kubernetes node registry (Leases)
 * is built beside this sync; any NodeRegistryView works here.
 */
class NodeSet implements NodeRegistryView {
  readonly #nodes = new Map<string, NodeRecord>();
  readonly #listeners = new Set<(c: NodeChange) => void>();

  add(name: string, ip: string, podCidrs: string[] = []): void {
    const node: NodeRecord = { name, addresses: [{ type: 'InternalIP', ip }], podCidrs, routingMode: 'tunnel', health: { status: 'ok' }, startedAt: new Date().toISOString() };
    const previous = this.#nodes.get(name);
    this.#nodes.set(name, node);
    for (const l of this.#listeners) l({ type: 'upsert', node, ...(previous === undefined ? {} : { previous }) });
  }

  remove(name: string): void {
    const node = this.#nodes.get(name);
    if (node === undefined) return;
    this.#nodes.delete(name);
    for (const l of this.#listeners) l({ type: 'delete', node });
  }

  list(): NodeRecord[] {
    return [...this.#nodes.values()];
  }

  get(name: string): NodeRecord | undefined {
    return this.#nodes.get(name);
  }

  subscribe(listener: (c: NodeChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}

/** One agent's part: its ipcache, its pod cache, the feed and the sync, as the agent wires them. */
interface Agent {
  name: string;
  nodeIP: string;
  ipcache: IPCache;
  sync: KubernetesIPCacheSync;
  feed: PodEndpointFeed;
  pods: ResourceInformer<V1Pod>;
  /** endpoint id → its pod (EndpointManager.get's part the feed reads). */
  endpoints: Map<number, { podNamespace?: string; podName?: string }>;
  stop(): Promise<void>;
}

async function startAgent(fake: FakeKubeApi, nodes: NodeRegistryView, name: string, nodeIP: string, o: { nodeIP6?: string } = {}): Promise<Agent> {
  const kubeConfig = await kubeConfigOf(fake);
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const fieldSelector = `spec.nodeName=${name}`;
  const pods = new ResourceInformer<V1Pod>({
    resource: 'pods',
    kubeConfig,
    path: '/api/v1/pods',
    fieldSelector,
    model: 'V1Pod',
    list: () => core.listPodForAllNamespaces({ fieldSelector }),
    logger: testLogger,
    retry: RETRY,
  });
  pods.start();
  const ipcache = new IPCache({ logger: testLogger });
  const endpoints = new Map<number, { podNamespace?: string; podName?: string }>();
  const feed = new PodEndpointFeed({ ipcache, endpoints, pods, logger: testLogger });
  feed.start();
  const sync = new KubernetesIPCacheSync({ kubeConfig, ipcache, nodeName: name, nodeIP, ...o, endpoints: feed, nodes, logger: testLogger, retry: RETRY, listPageSize: 2 });
  await Promise.all([pods.synced, sync.start()]);
  let stopped = false;
  return {
    name,
    nodeIP,
    ipcache,
    sync,
    feed,
    pods,
    endpoints,
    stop: async () => {
      if (stopped) return;
      stopped = true;
      feed.stop();
      await sync.stop();
      await pods.stop();
    },
  };
}

/** The Pod in the API (scheduled to the node), created once; its uid. */
function ensurePod(fake: FakeKubeApi, namespace: string, name: string, nodeName: string): string {
  // HTTP creates need the namespace (the server's NamespaceLifecycle admission).
  if (fake.get('namespaces', undefined, namespace) === undefined) fake.create('namespaces', namespaceObject(namespace));
  const had = fake.get('pods', namespace, name) as V1Pod | undefined;
  const pod = had ?? fake.create('pods', podObject({ namespace, name, nodeName, labels: { app: name } }));
  return (pod as V1Pod).metadata!.uid!;
}

/** What the endpoint manager does with a ready endpoint: its pod known, its addresses in the ipcache. */
async function publish(fake: FakeKubeApi, agent: Agent, ep: ContractEndpoint): Promise<void> {
  ensurePod(fake, ep.namespace, ep.pod, agent.name);
  agent.endpoints.set(ep.id, { podNamespace: ep.namespace, podName: ep.pod });
  for (const ip of ep.addresses) agent.ipcache.upsert(ip, { source: 'local', owner: `endpoint:${ep.id}`, identity: ep.identity });
  // The feed reports it once the pod is in the agent's pod cache.
  await waitFor(`endpoint ${ep.id} reported on ${agent.name}`, () => agent.feed.list().some((p) => p.id === ep.id && p.identity === ep.identity));
}

function withdraw(agent: Agent, ep: ContractEndpoint): void {
  for (const ip of ep.addresses) agent.ipcache.delete(ip, { source: 'local', owner: `endpoint:${ep.id}` });
}

function contractNode(fake: FakeKubeApi, agent: Agent): SyncContractNode {
  return {
    name: agent.name,
    ipcache: agent.ipcache,
    publish: (ep) => publish(fake, agent, ep),
    withdraw: (ep) => withdraw(agent, ep),
    flush: () => agent.sync.flush(),
    pruneStale: () => agent.sync.pruneStale(),
  };
}

/** One fake API server per cluster (every node follows every namespace: a shared server would mix tests). */
async function kubernetesHarness(): Promise<SyncContractHarness> {
  const fakes: FakeKubeApi[] = [];
  const agents: Agent[] = [];
  return {
    cluster: async () => {
      const fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
      fakes.push(fake);
      const nodes = new NodeSet();
      const lives = new Map<string, { agent: Agent; endpoints: Map<number, ContractEndpoint> }>();
      const start = async (name: string, nodeIP: string, endpoints: Map<number, ContractEndpoint>): Promise<SyncContractNode> => {
        await lives.get(name)?.agent.stop();
        nodes.add(name, nodeIP);
        const agent = await startAgent(fake, nodes, name, nodeIP);
        agents.push(agent);
        lives.set(name, { agent, endpoints });
        const node = contractNode(fake, agent);
        for (const ep of endpoints.values()) await node.publish(ep);
        return {
          ...node,
          publish: async (ep) => {
            endpoints.set(ep.id, ep);
            await node.publish(ep);
          },
          withdraw: (ep) => {
            endpoints.delete(ep.id);
            node.withdraw(ep);
          },
        };
      };
      const life = (name: string) => {
        const l = lives.get(name);
        if (l === undefined) throw new Error(`no node ${name}`);
        return l;
      };
      return {
        node: (name, nodeIP) => start(name, nodeIP, new Map()),
        // A clean stop leaves the node's Lease (and so its entries) alive, as the agent does.
        stop: (name) => life(name).agent.stop(),
        // Its agent gone and its Lease expired: it leaves the registry; its objects stay.
        kill: async (name) => {
          await life(name).agent.stop();
          nodes.remove(name);
        },
        revive: (name) => start(name, life(name).agent.nodeIP, life(name).endpoints),
        writeBroken: async (ip) => {
          // A live node, so only the object's content can keep it out; valid for the CRD schema, not for tendril.
          nodes.add('node-x', '192.168.0.99');
          if (fake.get('namespaces', undefined, 'shop') === undefined) fake.create('namespaces', namespaceObject('shop'));
          fake.create('tendrilendpoints', {
            apiVersion: `${TENDRIL_ENDPOINT_GROUP}/${TENDRIL_ENDPOINT_VERSION}`,
            kind: 'TendrilEndpoint',
            metadata: { name: 'broken', namespace: 'shop', labels: { 'tendril.io/node': 'node-x' } },
            spec: { node: 'node-x', nodeIP: '192.168.0.99', identity: 300, addresses: [ip, '10.0.0.300'], endpointID: 9 },
          });
        },
      };
    },
    destroy: async () => {
      for (const a of agents) await a.stop();
      for (const f of fakes) await f.stop();
    },
  };
}

runSyncContract('kubernetes (fake API server)', kubernetesHarness, { deathTimeoutMs: 5000 });

describe('ipcache over TendrilEndpoint objects', () => {
  let fake: FakeKubeApi;
  let nodes: NodeSet;
  const agents: Agent[] = [];

  before(async () => {
    fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
    nodes = new NodeSet();
  });
  after(async () => {
    for (const a of agents) await a.stop();
    await fake?.stop();
  });

  async function agent(name: string, nodeIP: string, o: { nodeIP6?: string } = {}): Promise<Agent> {
    nodes.add(name, nodeIP);
    const a = await startAgent(fake, nodes, name, nodeIP, o);
    agents.push(a);
    return a;
  }

  const writes = (): number => {
    const r = fake.requests();
    return WRITE_VERBS.reduce((s, v) => s + (r[v] ?? 0), 0);
  };
  const object = (namespace: string, name: string) => fake.get('tendrilendpoints', namespace, name) as TendrilEndpointObject | undefined;

  it('a pod start is one create (owned by the pod, labelled with the node); an identity change one update; a delete one delete', async () => {
    const a = await agent('wr-a', '192.168.1.1', { nodeIP6: 'fd00:168::1' });
    const b = await agent('wr-b', '192.168.1.2');
    await waitFor('informers settled', () => a.sync.informer.isSynced && b.sync.informer.isSynced);
    const uid = ensurePod(fake, 'count', 'web-1', 'wr-a');
    fake.resetRequests();
    const ep: ContractEndpoint = { id: 11, namespace: 'count', pod: 'web-1', identity: 300, addresses: ['10.1.0.11', 'fd00:1::11'] };
    await publish(fake, a, ep);
    await a.sync.flush();
    assert.deepEqual(fake.requests()['create'], 1);
    assert.equal(writes(), 1, `writes for one pod start: ${JSON.stringify(fake.requests())}`);
    const obj = object('count', 'web-1')!;
    assert.deepEqual(obj.metadata?.ownerReferences, [{ apiVersion: 'v1', kind: 'Pod', name: 'web-1', uid }]);
    assert.deepEqual(obj.metadata?.labels, { 'tendril.io/node': 'wr-a' });
    assert.deepEqual(obj.spec, { node: 'wr-a', nodeIP: '192.168.1.1', nodeIP6: 'fd00:168::1', identity: 300, addresses: ['10.1.0.11', 'fd00:1::11'], endpointID: 11 });
    await waitFor('on b', () => b.ipcache.lookup('fd00:1::11')?.identity === 300);
    // Nothing more is written for it while nothing changes (the watch echo included).
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(writes(), 1);
    fake.resetRequests();
    await publish(fake, a, { ...ep, identity: 301 });
    await a.sync.flush();
    assert.deepEqual(fake.requests()['update'], 1);
    assert.equal(writes(), 1, `writes for an identity change: ${JSON.stringify(fake.requests())}`);
    await waitFor('new identity on b', () => b.ipcache.lookup('10.1.0.11')?.identity === 301);
    fake.resetRequests();
    withdraw(a, ep);
    await a.sync.flush();
    assert.equal(writes(), 1, `writes for a delete: ${JSON.stringify(fake.requests())}`);
    assert.deepEqual(fake.requests()['delete'], 1);
    assert.equal(object('count', 'web-1'), undefined);
    await waitFor('gone on b', () => b.ipcache.lookup('10.1.0.11') === undefined);
    assert.deepEqual([a.sync.stats.writes, a.sync.stats.deletes, a.sync.stats.conflicts], [2, 1, 0]);
  });

  it('the first list pages through every object (two per page here)', async () => {
    nodes.add('pg-x', '192.168.11.9');
    fake.create('namespaces', namespaceObject('paged'));
    for (let i = 1; i <= 7; i++) {
      fake.create('tendrilendpoints', {
        apiVersion: 'tendril.io/v1',
        kind: 'TendrilEndpoint',
        metadata: { name: `p-${i}`, namespace: 'paged', labels: { 'tendril.io/node': 'pg-x' } },
        spec: { node: 'pg-x', nodeIP: '192.168.11.9', identity: 300 + i, addresses: [`10.11.0.${i}`], endpointID: i },
      });
    }
    const a = await agent('pg-a', '192.168.11.1');
    // Synced: every object is in, with no watch event needed.
    for (let i = 1; i <= 7; i++) assert.equal(a.ipcache.lookup(`10.11.0.${i}`)?.identity, 300 + i, `object ${i}`);
  });

  it('a watch that cannot resume (410 Gone after compaction) re-lists and reconciles what it missed', async () => {
    nodes.add('rl-x', '192.168.12.9');
    fake.create('namespaces', namespaceObject('relist'));
    const teps = (name: string, identity: number, ip: string) => ({
      apiVersion: 'tendril.io/v1',
      kind: 'TendrilEndpoint',
      metadata: { name, namespace: 'relist', labels: { 'tendril.io/node': 'rl-x' } },
      spec: { node: 'rl-x', nodeIP: '192.168.12.9', identity, addresses: [ip], endpointID: identity },
    });
    fake.create('tendrilendpoints', teps('kept', 300, '10.12.0.1'));
    fake.create('tendrilendpoints', teps('deleted', 301, '10.12.0.2'));
    const b = await agent('rl-b', '192.168.12.2');
    await waitFor('both on b', () => b.ipcache.lookup('10.12.0.1') !== undefined && b.ipcache.lookup('10.12.0.2') !== undefined);
    const resyncs = b.sync.stats.resyncs;
    await fake.pause();
    fake.delete('tendrilendpoints', 'relist', 'deleted');
    fake.update('tendrilendpoints', teps('kept', 302, '10.12.0.1'));
    fake.create('tendrilendpoints', teps('added', 303, '10.12.0.3'));
    fake.compact();
    await fake.resume();
    await waitFor('reconciled', () => b.ipcache.lookup('10.12.0.2') === undefined && b.ipcache.lookup('10.12.0.1')?.identity === 302 && b.ipcache.lookup('10.12.0.3')?.identity === 303, 10_000);
    assert.ok(b.sync.stats.resyncs > resyncs, `resyncs ${resyncs} → ${b.sync.stats.resyncs}`);
  });

  it('a node with an IPv6 node IP reaches a dual-stack node through its nodeIP6', async () => {
    const a = await agent('v6-a', '192.168.2.1', { nodeIP6: 'fd00:168::2:1' });
    const c = await agent('v6-c', 'fd00:168::2:3');
    await publish(fake, a, { id: 1, namespace: 'v6', pod: 'p', identity: 300, addresses: ['10.2.0.1'] });
    await waitFor('on c via nodeIP6', () => c.ipcache.lookup('10.2.0.1')?.hostIP === 'fd00:168::2:1');
  });

  it('an agent restart rewrites nothing for endpoints it still has', async () => {
    const first = await agent('rs-a', '192.168.3.1');
    const ep: ContractEndpoint = { id: 3, namespace: 'restart', pod: 'web', identity: 300, addresses: ['10.3.0.3'] };
    await publish(fake, first, ep);
    await first.sync.flush();
    await first.stop();
    fake.resetRequests();
    const again = await agent('rs-a', '192.168.3.1');
    await publish(fake, again, ep);
    await again.sync.flush();
    assert.equal(await again.sync.pruneStale(), 0);
    assert.equal(writes(), 0, JSON.stringify(fake.requests()));
  });

  it('an object claiming addresses outside its node\'s pod CIDRs (another node\'s InternalIP, another node\'s pod) is held back and counted; taken in once the node holds the CIDR', async () => {
    nodes.add('pc-a', '192.168.20.1', ['10.20.1.0/24']);
    const b = await agent('pc-b', '192.168.20.2');
    nodes.add('pc-b', '192.168.20.2', ['10.20.2.0/24']);
    // A hostile or broken writer names node pc-a for addresses that are not pc-a's to give.
    const claim = (pod: string, address: string) => {
      const uid = ensurePod(fake, 'hostile', pod, 'pc-a');
      fake.create('tendrilendpoints', {
        apiVersion: 'tendril.io/v1',
        kind: 'TendrilEndpoint',
        metadata: { name: pod, namespace: 'hostile', labels: { 'tendril.io/node': 'pc-a' }, ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: pod, uid }] },
        spec: { node: 'pc-a', nodeIP: '192.168.20.1', identity: 300, addresses: [address], endpointID: 1 },
      });
    };
    claim('node-ip', '192.168.20.2');
    claim('other-pod', '10.20.2.7');
    claim('later', '10.20.9.4');
    claim('own', '10.20.1.5');
    await waitFor('the legitimate one on b', () => b.ipcache.lookup('10.20.1.5')?.identity === 300);
    await waitFor('the other three seen', () => b.sync.stats.outsidePodCidrs >= 3);
    assert.equal(b.ipcache.lookup('192.168.20.2'), undefined, 'b\'s own InternalIP is not made a pod');
    assert.equal(b.ipcache.lookup('10.20.2.7'), undefined, 'nor b\'s pod address');
    assert.equal(b.ipcache.lookup('10.20.9.4'), undefined);
    // The node publishes that CIDR: the endpoint is judged again and taken in; withdrawn, it goes again.
    nodes.add('pc-a', '192.168.20.1', ['10.20.1.0/24', '10.20.9.0/24']);
    assert.equal(b.ipcache.lookup('10.20.9.4')?.identity, 300);
    nodes.add('pc-a', '192.168.20.1', ['10.20.1.0/24']);
    assert.equal(b.ipcache.lookup('10.20.9.4'), undefined);
    assert.equal(b.ipcache.lookup('10.20.1.5')?.identity, 300);
  });

  it('a node name longer than a label value holds (over 63 characters) labels its objects with its hash: published, selected and pruned after a restart', async () => {
    const long = `ln-${'a'.repeat(40)}.${'b'.repeat(30)}`;
    const first = await agent(long, '192.168.9.1');
    const ep: ContractEndpoint = { id: 9, namespace: 'longname', pod: 'web', identity: 300, addresses: ['10.9.0.9'] };
    await publish(fake, first, ep);
    await first.sync.flush();
    assert.match(object('longname', 'web')?.metadata?.labels?.['tendril.io/node'] ?? '', /^sha256-[0-9a-f]{40}$/);
    assert.equal(object('longname', 'web')?.spec.node, long);
    await first.stop();
    // Started again without the endpoint: its object is this node's, found by the label, and pruned.
    const again = await agent(long, '192.168.9.1');
    assert.equal(await again.sync.pruneStale(), 1);
    assert.equal(object('longname', 'web'), undefined);
  });

  it("an earlier pod of the name's object (another uid, another node) is replaced; one another node holds for this very pod is not", async () => {
    const a = await agent('cf-a', '192.168.4.1');
    const b = await agent('cf-b', '192.168.4.2');
    // The pod ran on node b before, under another uid: its object is left (b's agent missed the delete).
    const ghostOwner = fake.create('pods', podObject({ namespace: 'conflict', name: 'ghost-owner', nodeName: 'cf-b', labels: {} })) as V1Pod;
    fake.create('tendrilendpoints', {
      apiVersion: 'tendril.io/v1',
      kind: 'TendrilEndpoint',
      metadata: { name: 'web', namespace: 'conflict', labels: { 'tendril.io/node': 'cf-b' }, ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'ghost-owner', uid: ghostOwner.metadata!.uid! }] },
      spec: { node: 'cf-b', nodeIP: '192.168.4.2', identity: 400, addresses: ['10.4.0.9'], endpointID: 5 },
    });
    await waitFor('the old object on a', () => a.sync.informer.get('web', 'conflict') !== undefined);
    await publish(fake, a, { id: 4, namespace: 'conflict', pod: 'web', identity: 300, addresses: ['10.4.0.4'] });
    await a.sync.flush();
    assert.equal(object('conflict', 'web')?.spec.node, 'cf-a');
    assert.equal(object('conflict', 'web')?.metadata?.ownerReferences?.[0]?.uid, (fake.get('pods', 'conflict', 'web') as V1Pod).metadata!.uid);
    await waitFor('the new one on b, the old address gone', () => b.ipcache.lookup('10.4.0.4')?.identity === 300 && b.ipcache.lookup('10.4.0.9') === undefined);

    // Another node's object owned by the same pod uid: not replaced, retried until that node lets go.
    const uid = ensurePod(fake, 'conflict', 'held', 'cf-a');
    fake.create('tendrilendpoints', {
      apiVersion: 'tendril.io/v1',
      kind: 'TendrilEndpoint',
      metadata: { name: 'held', namespace: 'conflict', labels: { 'tendril.io/node': 'cf-b' }, ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: 'held', uid }] },
      spec: { node: 'cf-b', nodeIP: '192.168.4.2', identity: 401, addresses: ['10.4.0.10'], endpointID: 6 },
    });
    await publish(fake, a, { id: 5, namespace: 'conflict', pod: 'held', identity: 300, addresses: ['10.4.0.5'] });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(object('conflict', 'held')?.spec.node, 'cf-b', 'left alone');
    fake.delete('tendrilendpoints', 'conflict', 'held');
    await waitFor('written once free', () => object('conflict', 'held')?.spec.node === 'cf-a', 5000);
  });

  it("two objects of one node claim an address: the older one's delete leaves the newer's entry; the newer's gives it back", async () => {
    const b = await agent('cl-b', '192.168.9.2');
    nodes.add('cl-x', '192.168.9.9');
    fake.create('namespaces', namespaceObject('claims'));
    const claim = (name: string, identity: number) =>
      fake.create('tendrilendpoints', {
        apiVersion: 'tendril.io/v1',
        kind: 'TendrilEndpoint',
        metadata: { name, namespace: 'claims', labels: { 'tendril.io/node': 'cl-x' } },
        spec: { node: 'cl-x', nodeIP: '192.168.9.9', identity, addresses: ['10.9.0.1'], endpointID: identity },
      });
    claim('old', 300);
    await waitFor('old on b', () => b.ipcache.lookup('10.9.0.1')?.identity === 300);
    // The address went to a new pod on the same node before the old pod's object was deleted.
    claim('new', 301);
    await waitFor('new on b', () => b.ipcache.lookup('10.9.0.1')?.identity === 301);
    fake.delete('tendrilendpoints', 'claims', 'old');
    await waitFor('old object gone from b', () => b.sync.informer.get('old', 'claims') === undefined);
    assert.equal(b.ipcache.lookup('10.9.0.1')?.identity, 301, "the new pod's entry stays");
    // The other way round: the newest claim goes first, the older one takes the address back.
    claim('newer', 302);
    await waitFor('newer on b', () => b.ipcache.lookup('10.9.0.1')?.identity === 302);
    fake.delete('tendrilendpoints', 'claims', 'newer');
    await waitFor('back to the older claim', () => b.ipcache.lookup('10.9.0.1')?.identity === 301);
    fake.delete('tendrilendpoints', 'claims', 'new');
    await waitFor('gone with the last claim', () => b.ipcache.lookup('10.9.0.1') === undefined);
  });

  it("an address taken over by another endpoint of the node leaves the first endpoint's object", async () => {
    const a = await agent('to-a', '192.168.10.1');
    await publish(fake, a, { id: 1, namespace: 'takeover', pod: 'old', identity: 300, addresses: ['10.10.0.1', 'fd00:10::1'] });
    await a.sync.flush();
    await publish(fake, a, { id: 2, namespace: 'takeover', pod: 'new', identity: 301, addresses: ['10.10.0.1'] });
    await a.sync.flush();
    assert.deepEqual(object('takeover', 'old')?.spec.addresses, ['fd00:10::1']);
    await publish(fake, a, { id: 3, namespace: 'takeover', pod: 'newer', identity: 302, addresses: ['fd00:10::1'] });
    await a.sync.flush();
    assert.equal(object('takeover', 'old'), undefined, 'no address left: deleted');
    // The old endpoint's own (late) withdrawal changes nothing.
    withdraw(a, { id: 1, namespace: 'takeover', pod: 'old', identity: 300, addresses: ['10.10.0.1', 'fd00:10::1'] });
    await a.sync.flush();
    assert.deepEqual(object('takeover', 'new')?.spec.addresses, ['10.10.0.1']);
    assert.deepEqual(object('takeover', 'newer')?.spec.addresses, ['fd00:10::1']);
  });

  it('the pod deleted: the garbage collector deletes its object, and the other nodes forget the address', async () => {
    const a = await agent('gc-a', '192.168.5.1');
    const b = await agent('gc-b', '192.168.5.2');
    await publish(fake, a, { id: 1, namespace: 'gc', pod: 'web', identity: 300, addresses: ['10.5.0.1'] });
    await waitFor('on b', () => b.ipcache.lookup('10.5.0.1')?.identity === 300);
    fake.delete('pods', 'gc', 'web');
    await waitFor('object collected', () => object('gc', 'web') === undefined);
    await waitFor('gone on b', () => b.ipcache.lookup('10.5.0.1') === undefined);
  });

  it('an object of a live endpoint deleted by another writer is created again', async () => {
    const a = await agent('re-a', '192.168.6.1');
    const b = await agent('re-b', '192.168.6.2');
    await publish(fake, a, { id: 1, namespace: 'recreate', pod: 'web', identity: 300, addresses: ['10.6.0.1'] });
    await a.sync.flush();
    const before = object('recreate', 'web')!.metadata!.uid;
    fake.delete('tendrilendpoints', 'recreate', 'web');
    await waitFor('created again', () => {
      const o = object('recreate', 'web');
      return o !== undefined && o.metadata?.uid !== before;
    });
    await waitFor('on b', () => b.ipcache.lookup('10.6.0.1')?.identity === 300);
  });

  it('writes made while the API server is down land once it is back', async () => {
    const a = await agent('dn-a', '192.168.7.1');
    const ep: ContractEndpoint = { id: 1, namespace: 'down', pod: 'web', identity: 300, addresses: ['10.7.0.1'] };
    ensurePod(fake, ep.namespace, ep.pod, 'dn-a');
    await waitFor('pod cached', () => a.pods.get('web', 'down') !== undefined);
    await fake.pause();
    try {
      await publish(fake, a, ep);
      await new Promise((r) => setTimeout(r, 400));
    } finally {
      await fake.resume();
    }
    await waitFor('written after the outage', () => object('down', 'web')?.spec.identity === 300, 10_000);
  });

  it('an endpoint without a Kubernetes pod is not published; one whose pod is not cached yet (or only a terminating earlier pod of its name) waits for it', async () => {
    const a = await agent('np-a', '192.168.8.1');
    a.ipcache.upsert('10.8.0.1', { source: 'local', owner: 'endpoint:1', identity: 300 });
    // A terminating earlier pod of the name is not the pod of an endpoint made now.
    const earlier = fake.create('pods', { ...podObject({ namespace: 'late', name: 'web', nodeName: 'np-a', labels: {} }), metadata: { namespace: 'late', name: 'web', finalizers: ['tendril.io/test'] } }) as V1Pod;
    fake.delete('pods', 'late', 'web');
    await waitFor('the earlier pod terminating in the cache', () => a.pods.get('web', 'late')?.metadata?.deletionTimestamp !== undefined);
    a.endpoints.set(2, { podNamespace: 'late', podName: 'web' });
    a.ipcache.upsert('10.8.0.2', { source: 'local', owner: 'endpoint:2', identity: 300 });
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(a.feed.list(), []);
    // An earlier life's object of that pod is not stale while its endpoint waits.
    fake.create('tendrilendpoints', {
      apiVersion: 'tendril.io/v1',
      kind: 'TendrilEndpoint',
      metadata: { name: 'web', namespace: 'late', labels: { 'tendril.io/node': 'np-a' } },
      spec: { node: 'np-a', nodeIP: '192.168.8.1', identity: 300, addresses: ['10.8.0.2'], endpointID: 2 },
    });
    assert.equal(await a.sync.pruneStale(), 0);
    fake.update('pods', { ...earlier, metadata: { ...earlier.metadata, finalizers: [] } });
    await waitFor('the earlier pod gone', () => fake.get('pods', 'late', 'web') === undefined);
    const uid = ensurePod(fake, 'late', 'web', 'np-a');
    // The earlier life's object is taken over: owned by the pod now.
    await waitFor('written once the pod is cached', () => object('late', 'web')?.metadata?.ownerReferences?.[0]?.uid === uid);
    assert.equal(object('late', 'web')?.spec.endpointID, 2);
    assert.deepEqual(fake.list('tendrilendpoints').filter((o) => (o as TendrilEndpointObject).spec.node === 'np-a').length, 1);
  });
});
