import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { KubeConfig, type KubernetesObject, type V1Lease, V1MicroTime } from '@kubernetes/client-node';
import { FakeKubeApi } from '../../test/support/fakeKubeApi.js';
import { testLogger, waitFor } from '../identity/testing/cluster.js';
import { nodeRecord, runRegistryContract, type ContractHarness } from '../node/testing/registryContract.js';
import type { NodeChange } from '../node/types.js';
import { OwnNode } from '../node/ownNode.js';
import { FakeNodeRouting } from '../datapath/fake/fakeNodeRouting.js';
import { ReservedIdentity } from '../identity/index.js';
import { IPCache } from '../ipcache/ipcache.js';
import { K8sErrorCode, isK8sError } from './errors.js';
import { KubernetesNodeRegistry } from './kubernetesNodeRegistry.js';
import { nodeLeaseName, NODE_LEASE_LABEL } from './nodeLeases.js';
import { nodeRecordOfObject, TENDRIL_NODE_GROUP, TENDRIL_NODE_KIND, TENDRIL_NODE_VERSION } from './tendrilNode.js';

const RETRY = { initialMs: 50, maxMs: 500 };
const NAMESPACE = 'kube-system';
const TTL = 2;

async function kubeConfigOf(fake: FakeKubeApi): Promise<KubeConfig> {
  const kc = new KubeConfig();
  kc.loadFromFile(await fake.kubeconfig());
  return kc;
}

async function startFake(): Promise<FakeKubeApi> {
  const fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
  // Leases are created over HTTP, where a missing namespace is a 404 as on a real server.
  fake.create('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } });
  return fake;
}

/** What another writer (kubectl, an older agent) puts for a node: a TendrilNode and a live Lease. */
function writeForeign(fake: FakeKubeApi, name: string, raw: Record<string, unknown>): void {
  const { name: _name, podCidrs, ...rest } = raw;
  const spec = { ...rest, podCIDRs: podCidrs };
  const existing = fake.get('tendrilnodes', undefined, name) as KubernetesObject | undefined;
  const obj = { apiVersion: `${TENDRIL_NODE_GROUP}/${TENDRIL_NODE_VERSION}`, kind: TENDRIL_NODE_KIND, metadata: existing?.metadata ?? { name }, spec };
  if (existing === undefined) fake.create('tendrilnodes', obj);
  else fake.update('tendrilnodes', obj);
  if (fake.get('leases', NAMESPACE, nodeLeaseName(name)) === undefined) {
    const now = new V1MicroTime().toISOString();
    fake.create('leases', {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: nodeLeaseName(name), namespace: NAMESPACE, labels: { [NODE_LEASE_LABEL]: 'true' } },
      spec: { holderIdentity: name, leaseDurationSeconds: 3600, renewTime: now, acquireTime: now },
    });
  }
}

/** One fake API server per cluster: TendrilNodes are cluster-scoped, a shared server would mix tests. */
async function kubernetesHarness(): Promise<ContractHarness> {
  const fakes: FakeKubeApi[] = [];
  const stops: Array<() => Promise<void>> = [];
  return {
    cluster: async () => {
      const fake = await startFake();
      fakes.push(fake);
      const kubeConfig = await kubeConfigOf(fake);
      const unstarted = (name: string) => {
        const registry = new KubernetesNodeRegistry({ kubeConfig, nodeName: name, namespace: NAMESPACE, leaseTtlSeconds: TTL, logger: testLogger, retry: RETRY });
        stops.push(() => registry.stop());
        return registry;
      };
      return {
        ttlSeconds: TTL,
        unstarted: async (name) => unstarted(name),
        node: async (record) => {
          const registry = unstarted(record.name);
          const changes: NodeChange[] = [];
          registry.subscribe((c) => changes.push(c));
          await registry.start(record);
          // A stopped agent renews nothing and deletes nothing: as after SIGKILL.
          return { name: record.name, registry, changes, crash: () => registry.stop() };
        },
        writeForeign: async (name, raw) => writeForeign(fake, name, raw),
        deleteRecord: async (name) => fake.delete('tendrilnodes', undefined, name),
        stored: async (name) => {
          const obj = fake.get('tendrilnodes', undefined, name) as KubernetesObject | undefined;
          const r = obj === undefined ? undefined : nodeRecordOfObject(obj);
          return typeof r === 'string' ? undefined : r;
        },
      };
    },
    destroy: async () => {
      for (const s of stops.splice(0)) await s();
      for (const f of fakes) await f.stop();
    },
  };
}

runRegistryContract('kubernetes (fake API server)', kubernetesHarness);

describe('node registry over TendrilNode objects and Leases', () => {
  let fake: FakeKubeApi;
  let kubeConfig: KubeConfig;
  const stops: Array<() => Promise<void>> = [];

  before(async () => {
    fake = await startFake();
    kubeConfig = await kubeConfigOf(fake);
  });
  afterEach(async () => {
    for (const s of stops.splice(0).reverse()) await s();
    for (const o of fake.list('tendrilnodes') as KubernetesObject[]) fake.delete('tendrilnodes', undefined, o.metadata!.name!);
    for (const o of fake.list('leases') as KubernetesObject[]) fake.delete('leases', o.metadata!.namespace, o.metadata!.name!);
    for (const o of fake.list('nodes') as KubernetesObject[]) fake.delete('nodes', undefined, o.metadata!.name!);
  });
  after(async () => {
    await fake.stop();
  });

  function registry(name: string, ttl = TTL): KubernetesNodeRegistry {
    const r = new KubernetesNodeRegistry({ kubeConfig, nodeName: name, namespace: NAMESPACE, leaseTtlSeconds: ttl, logger: testLogger, retry: RETRY });
    stops.push(() => r.stop());
    return r;
  }
  const object = (name: string) => fake.get('tendrilnodes', undefined, name) as (KubernetesObject & { spec: Record<string, unknown> }) | undefined;
  const lease = (name: string) => fake.get('leases', NAMESPACE, nodeLeaseName(name)) as V1Lease | undefined;

  it('writes a TendrilNode named by the node and a labelled Lease held by it; both are owned by the Node when one exists', async () => {
    const node = fake.create('nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-a' } }) as KubernetesObject;
    const a = registry('node-a');
    await a.start(nodeRecord('node-a', 1));
    const obj = object('node-a')!;
    assert.deepEqual(obj.metadata?.ownerReferences, [{ apiVersion: 'v1', kind: 'Node', name: 'node-a', uid: node.metadata!.uid }]);
    assert.deepEqual(obj.spec.podCIDRs, ['10.200.1.0/24']);
    assert.equal(obj.spec.ipam, undefined);
    const l = lease('node-a')!;
    assert.equal(l.spec?.holderIdentity, 'node-a');
    assert.equal(l.spec?.leaseDurationSeconds, TTL);
    assert.deepEqual(l.metadata?.labels, { 'app.kubernetes.io/part-of': 'tendril', [NODE_LEASE_LABEL]: 'true' });
    assert.equal(a.revisionOf('node-a'), Number(obj.metadata?.resourceVersion));
    assert.deepEqual(l.metadata?.ownerReferences, obj.metadata?.ownerReferences, 'the Lease is the Node\'s too');
    // Deleting the Node deletes the TendrilNode and the Lease (the garbage collector follows the owner references).
    await a.stop();
    fake.delete('nodes', undefined, 'node-a');
    await waitFor('TendrilNode and Lease collected', () => object('node-a') === undefined && lease('node-a') === undefined);
    // Without a Node object: no owner reference (an owner that does not exist would get it collected).
    const b = registry('node-b');
    await b.start(nodeRecord('node-b', 2));
    assert.equal(object('node-b')!.metadata?.ownerReferences, undefined);
    assert.equal(lease('node-b')!.metadata?.ownerReferences, undefined);
  });

  it('renews its Lease every third of the TTL, re-reading it after a 409; a deleted Lease is created again', async () => {
    const a = registry('node-a', 3);
    await a.start(nodeRecord('node-a', 1));
    const first = Date.parse(String(lease('node-a')!.spec!.renewTime));
    await waitFor('a renewal', () => Date.parse(String(lease('node-a')?.spec?.renewTime)) > first, 3000);
    const writes0 = a.leaseWrites;
    await new Promise((r) => setTimeout(r, 3000));
    // 3 s at one renewal per second.
    assert.ok(a.leaseWrites - writes0 >= 2 && a.leaseWrites - writes0 <= 4, `${a.leaseWrites - writes0} renewals in 3 s`);
    // Someone else writes the Lease: the next renewal's resourceVersion is stale.
    const l = lease('node-a')!;
    fake.update('leases', { ...l, metadata: { ...l.metadata, annotations: { touched: 'yes' } } });
    const touched = Number(lease('node-a')!.metadata!.resourceVersion);
    await waitFor('renewed after the conflict', () => Number(lease('node-a')?.metadata?.resourceVersion) > touched, 3000);
    assert.equal(lease('node-a')!.metadata?.annotations?.touched, 'yes', 'renewed on top of the other write, not over it');
    fake.delete('leases', NAMESPACE, nodeLeaseName('node-a'));
    await waitFor('Lease created again', () => lease('node-a'), 3000);
  });

  it('never writes spec.ipam: the operator\'s CIDRs survive the agent\'s updates; one patch per update', async () => {
    const a = registry('node-a');
    await a.start(nodeRecord('node-a', 1));
    const obj = object('node-a')!;
    fake.update('tendrilnodes', { ...obj, spec: { ...obj.spec, ipam: { podCIDRs: ['10.244.7.0/24', 'fd00:244:7::/64'] } } });
    await waitFor('ipam seen', () => a.allocatedPodCidrs().length === 2);
    assert.deepEqual(a.allocatedPodCidrs(), ['10.244.7.0/24', 'fd00:244:7::/64']);
    fake.resetRequests();
    await a.update(nodeRecord('node-a', 1, { podCidrs: ['10.244.7.0/24', 'fd00:244:7::/64'], routingMode: 'native', tunnel: undefined }));
    assert.deepEqual(fake.requests().patch, 1);
    assert.equal(fake.requests().update, undefined);
    const after = object('node-a')!;
    assert.deepEqual(after.spec.ipam, { podCIDRs: ['10.244.7.0/24', 'fd00:244:7::/64'] });
    assert.equal(after.spec.tunnel, undefined, 'the tunnel field went with tunnel mode');
    assert.equal(after.spec.routingMode, 'native');
  });

  it('ensureOwnObject publishes the object without a Lease; waitForAllocatedPodCidrs waits for the operator, then times out typed', async () => {
    const b = registry('node-b');
    await b.start(nodeRecord('node-b', 2));
    const changes: NodeChange[] = [];
    b.subscribe((c) => changes.push(c));
    const a = registry('node-a');
    await a.ensureOwnObject(nodeRecord('node-a', 1, { podCidrs: [] }));
    assert.ok(object('node-a'));
    assert.equal(lease('node-a'), undefined, 'no Lease before start: no node routes to it yet');
    const waiting = a.waitForAllocatedPodCidrs(5000);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(b.get('node-a'), undefined);
    // The operator hands out the CIDRs with a merge patch of spec.ipam.
    const obj = object('node-a')!;
    fake.update('tendrilnodes', { ...obj, spec: { ...obj.spec, ipam: { podCIDRs: ['10.244.1.0/24'] } } });
    assert.deepEqual(await waiting, ['10.244.1.0/24']);
    await a.start(nodeRecord('node-a', 1, { podCidrs: ['10.244.1.0/24'] }));
    await waitFor('a on b', () => b.get('node-a'));
    assert.deepEqual(b.get('node-a')?.podCidrs, ['10.244.1.0/24']);
    assert.deepEqual(changes.map((c) => [c.type, c.node.name]), [['upsert', 'node-a']]);
    assert.deepEqual(object('node-a')!.spec.ipam, { podCIDRs: ['10.244.1.0/24'] });

    const c = registry('node-c');
    await c.ensureOwnObject(nodeRecord('node-c', 3, { podCidrs: [] }));
    await assert.rejects(c.waitForAllocatedPodCidrs(200), (e: unknown) => isK8sError(e, K8sErrorCode.POD_CIDR_TIMEOUT));
    await assert.rejects(registry('node-d').waitForAllocatedPodCidrs(200), /does not follow/);
  });

  it('a Lease held under another node\'s name is no liveness', async () => {
    const a = registry('node-a');
    await a.start(nodeRecord('node-a', 1));
    writeForeign(fake, 'node-b', { ...nodeRecord('node-b', 2) });
    await waitFor('b on a', () => a.get('node-b'));
    // A Lease held by another name than its own: not node-b's liveness.
    const l = lease('node-b')!;
    fake.update('leases', { ...l, spec: { ...l.spec, holderIdentity: 'node-z' } });
    await waitFor('b gone on a', () => a.get('node-b') === undefined);
    assert.equal(a.leases.isAlive('node-z'), false);
  });

  it('OwnNode runs over it: the other nodes\' routes and ipcache entries come and go with their Leases; a pod CIDR change is published', async () => {
    const ipcache = new IPCache({ logger: testLogger });
    const routing = new FakeNodeRouting('tunnel');
    let podCidrs = ['10.200.1.0/24'];
    let cidrsChanged: (() => void) | undefined;
    const own = new OwnNode({
      registry: registry('node-a'),
      nodeName: 'node-a',
      ipcache,
      routing,
      logger: testLogger,
      facts: async () => ({
        nodeIp: '192.168.50.1',
        otherAddresses: [],
        routerAddresses: ['10.200.1.1'],
        podCidrs,
        routingMode: 'tunnel',
        tunnel: { protocol: 'vxlan', port: 8472 },
        kvstore: { backend: 'embedded', connected: true, revision: 0, detail: '' },
        startedAt: new Date(0),
      }),
      onPodCidrsChanged: (cb) => {
        cidrsChanged = cb;
        return () => (cidrsChanged = undefined);
      },
    });
    stops.push(() => own.stop());
    const b = registry('node-b');
    await b.start(nodeRecord('node-b', 2));
    await own.start();
    assert.ok(own.routesInstalled('node-b'));
    assert.deepEqual(routing.remoteNodes().get('node-b'), { name: 'node-b', nodeIp: '192.168.50.2', podCidrs: ['10.200.2.0/24'] });
    assert.equal(ipcache.lookup('192.168.50.2')?.identity, ReservedIdentity.RemoteNode);
    podCidrs = ['10.200.1.0/24', '10.200.9.0/24'];
    cidrsChanged!();
    await waitFor('published', () => b.get('node-a')?.podCidrs.length === 2);
    assert.deepEqual(object('node-a')!.spec.podCIDRs, podCidrs);
    // node-b dies: its Lease runs out, its routes and entries go; the object stays.
    await b.stop();
    await waitFor('b removed', () => !routing.remoteNodes().has('node-b') && ipcache.lookup('192.168.50.2') === undefined, (TTL + 5) * 1000);
    assert.ok(object('node-b'), 'the TendrilNode stays; its Lease said the node is gone');
  });

  it('spec.flows carries the node\'s flows address (removed when it goes); a reader (follow, the relay) lists it and writes nothing', async () => {
    const a = registry('node-f');
    await a.start(nodeRecord('node-f', 6, { flows: { address: '192.168.50.6:4245', tls: true } }));
    assert.deepEqual(object('node-f')!.spec.flows, { address: '192.168.50.6:4245', tls: true });
    const reader = registry('tdl-relay');
    await reader.follow();
    assert.deepEqual(reader.get('node-f')?.flows, { address: '192.168.50.6:4245', tls: true });
    assert.deepEqual(reader.list().map((n) => n.name), ['node-f']);
    assert.equal(reader.writes + reader.leaseWrites, 0);
    assert.equal(object('tdl-relay'), undefined);
    assert.equal(lease('tdl-relay'), undefined);
    await a.update(nodeRecord('node-f', 6));
    assert.equal(object('node-f')!.spec.flows, undefined);
    await waitFor('the reader sees the flows address go', () => reader.get('node-f')?.flows === undefined);
  });

  it('refuses a node name that cannot name a Kubernetes object', () => {
    assert.throws(() => new KubernetesNodeRegistry({ kubeConfig, nodeName: 'Node_A', logger: testLogger }), /lowercase DNS subdomain/);
  });

  it('an API server outage longer than the TTL: no node counts as gone meanwhile; after it, one that died gets a TTL to renew, then goes', async () => {
    const a = registry('node-a');
    const b = registry('node-b');
    const c = registry('node-c');
    const changes: NodeChange[] = [];
    a.subscribe((ch) => changes.push(ch));
    await a.start(nodeRecord('node-a', 1));
    await b.start(nodeRecord('node-b', 2));
    await c.start(nodeRecord('node-c', 3));
    await waitFor('b and c on a', () => a.get('node-b') && a.get('node-c'));
    await fake.pause();
    // node-c dies during the outage; nobody can renew anything.
    await c.stop();
    await new Promise((r) => setTimeout(r, (TTL + 1.5) * 1000));
    assert.ok(a.get('node-b') && a.get('node-c'), 'every Lease ran out unseen: the mirror stands');
    await fake.resume();
    const resumed = Date.now();
    const before = Date.parse(String(lease('node-a')!.spec!.renewTime));
    await waitFor('a renews after the outage', () => Date.parse(String(lease('node-a')?.spec?.renewTime)) > before, 5000);
    await waitFor('c gone on a', () => a.get('node-c') === undefined, (TTL + 5) * 1000);
    assert.ok(Date.now() - resumed >= TTL * 1000 - 200, `c went ${Date.now() - resumed} ms after the API server came back, not before a TTL`);
    assert.ok(a.get('node-b'), 'b renewed in time');
    assert.deepEqual(changes.map((ch) => [ch.type, ch.node.name]), [['upsert', 'node-b'], ['upsert', 'node-c'], ['delete', 'node-c']]);
  });
});
