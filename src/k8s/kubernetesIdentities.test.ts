import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CustomObjectsApi, KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import { FakeKubeApi } from '../../test/support/fakeKubeApi.js';
import { IdentityError, IdentityErrorCode } from '../identity/index.js';
import { runAllocatorContract, type ContractHarness } from '../identity/testing/allocatorContract.js';
import { testLogger, waitFor } from '../identity/testing/cluster.js';
import { LabelSet } from '../labels/index.js';
import { K8sErrorCode, isK8sError } from './errors.js';
import { KubernetesIdentities } from './kubernetesIdentities.js';
import { KubernetesIdentityAllocator } from './kubernetesIdentityAllocator.js';
import { identityOfObject, identityProbeOrder, TENDRIL_IDENTITY_GROUP, TENDRIL_IDENTITY_VERSION } from './tendrilIdentity.js';

const RETRY = { initialMs: 50, maxMs: 500 };
/** Requests that read or write objects (watches and discovery are the informer's background). */
const OBJECT_VERBS = ['list', 'get', 'create', 'update', 'patch', 'delete', 'deletecollection'];

async function kubeConfigOf(fake: FakeKubeApi): Promise<KubeConfig> {
  const kc = new KubeConfig();
  kc.loadFromFile(await fake.kubeconfig());
  return kc;
}

function objectRequests(fake: FakeKubeApi): number {
  const r = fake.requests();
  return OBJECT_VERBS.reduce((s, v) => s + (r[v] ?? 0), 0);
}

/** Every TendrilIdentity object in the fake holding exactly these labels. */
function objectsFor(fake: FakeKubeApi, labels: LabelSet): KubernetesObject[] {
  return (fake.list('tendrilidentities') as KubernetesObject[]).filter((o) => {
    const i = identityOfObject(o);
    return typeof i !== 'string' && i.labels.equals(labels);
  });
}

/** One fake API server per cluster (identities are cluster-scoped: a shared server would mix tests). */
async function kubernetesHarness(): Promise<ContractHarness> {
  const fakes: FakeKubeApi[] = [];
  const allocators: KubernetesIdentityAllocator[] = [];
  return {
    cluster: async () => {
      const fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
      fakes.push(fake);
      return {
        node: async (nodeName) => {
          const allocator = new KubernetesIdentityAllocator({ kubeConfig: await kubeConfigOf(fake), nodeName, logger: testLogger, retry: RETRY });
          allocators.push(allocator);
          await allocator.start();
          // One node per cluster in the tests that count: the server's count is the node's.
          return { name: nodeName, allocator, roundTrips: () => objectRequests(fake) };
        },
      };
    },
    destroy: async () => {
      for (const a of allocators) await a.close();
      for (const f of fakes) await f.stop();
    },
  };
}

runAllocatorContract('kubernetes (fake API server)', kubernetesHarness);

describe('identities as TendrilIdentity objects', () => {
  let fake: FakeKubeApi;
  const closers: Array<() => Promise<void>> = [];

  before(async () => {
    fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
  });
  after(async () => {
    for (const c of closers.reverse()) await c();
    await fake?.stop();
  });

  async function allocator(nodeName: string, api = fake, o: { syncTimeoutMs?: number } = {}): Promise<KubernetesIdentityAllocator> {
    const a = new KubernetesIdentityAllocator({ kubeConfig: await kubeConfigOf(api), nodeName, logger: testLogger, retry: RETRY, ...o });
    closers.push(() => a.close());
    await a.start();
    return a;
  }

  async function store(): Promise<KubernetesIdentities> {
    const s = new KubernetesIdentities({ kubeConfig: await kubeConfigOf(fake), logger: testLogger, retry: RETRY });
    closers.push(() => s.stop());
    await s.start();
    return s;
  }

  /** Occupies a number with another label set's object, as an earlier allocation would have. */
  function occupy(id: number, securityLabels: Record<string, string>): void {
    fake.create('tendrilidentities', {
      apiVersion: `${TENDRIL_IDENTITY_GROUP}/${TENDRIL_IDENTITY_VERSION}`,
      kind: 'TendrilIdentity',
      metadata: { name: String(id) },
      'security-labels': securityLabels,
    });
  }

  it('three allocators, 100 concurrent allocations of one label set whose first number is taken: one object, every caller gets it', async () => {
    const labels = LabelSet.parse(['k8s:app=race', 'k8s:io.kubernetes.pod.namespace=hot']);
    const [first, second] = identityProbeOrder(labels.toString(), 256, 65535);
    occupy(first!, { 'k8s:app': 'squatter' });
    const nodes = await Promise.all(['node-a', 'node-b', 'node-c'].map((n) => allocator(n)));
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => nodes[i % 3]!.allocate(labels)));
    const ids = new Set(results.map((r) => r.identity.id));
    assert.deepEqual([...ids], [second], 'every caller got the second number of the label set');
    assert.equal(objectsFor(fake, labels).length, 1, 'one TendrilIdentity for the labels');
    assert.deepEqual(nodes.map((n) => n.references(second!)), [34, 33, 33]);
    for (const n of nodes) await waitFor(`${n.nodeName} mirrors it`, () => n.lookupByLabels(labels)?.id === second);
  });

  it('twelve stores creating at once (no per-node queue): exactly one create succeeds, the rest join it', async () => {
    const labels = LabelSet.parse(['k8s:app=stampede']);
    const stores = await Promise.all(Array.from({ length: 12 }, () => store()));
    const results = await Promise.all(stores.map((s) => s.acquire(labels)));
    assert.equal(new Set(results.map((r) => r.id)).size, 1);
    const creates = stores.reduce((s, x) => s + x.creates, 0);
    const conflicts = stores.reduce((s, x) => s + x.conflicts, 0);
    assert.equal(creates - conflicts, 1, `${creates} creates, ${conflicts} answered 409`);
    assert.equal(objectsFor(fake, labels).length, 1);
  });

  it('the object: named by its number, every label in security-labels, the valid k8s: ones as metadata.labels for selectors', async () => {
    const a = await allocator('node-a');
    const labels = LabelSet.parse(['k8s:app=shop-web', 'k8s:io.kubernetes.pod.namespace=shop', 'container:build=42']);
    const { identity } = await a.allocate(labels);
    const obj = fake.get('tendrilidentities', undefined, String(identity.id)) as Record<string, unknown> & KubernetesObject;
    assert.deepEqual(obj['security-labels'], { 'container:build': '42', 'k8s:app': 'shop-web', 'k8s:io.kubernetes.pod.namespace': 'shop' });
    assert.deepEqual(obj.metadata?.labels, { app: 'shop-web', 'io.kubernetes.pod.namespace': 'shop' });
    const custom = (await kubeConfigOf(fake)).makeApiClient(CustomObjectsApi);
    const listed = (await custom.listClusterCustomObject({
      group: TENDRIL_IDENTITY_GROUP,
      version: TENDRIL_IDENTITY_VERSION,
      plural: 'tendrilidentities',
      labelSelector: 'app=shop-web,io.kubernetes.pod.namespace=shop',
    })) as { items: KubernetesObject[] };
    assert.deepEqual(listed.items.map((o) => o.metadata?.name), [String(identity.id)]);
  });

  it('numbers held by other labels or by unreadable objects are stepped over, in the same order on every node', async () => {
    const labels = LabelSet.parse(['k8s:app=stepper']);
    const [n0, n1, n2] = identityProbeOrder(labels.toString(), 256, 65535);
    occupy(n0!, { 'k8s:app': 'someone-else' });
    occupy(n1!, { 'no-source-here': 'x' });
    const [a, b] = await Promise.all([allocator('node-a'), allocator('node-b')]);
    const [ra, rb] = await Promise.all([a.allocate(labels), b.allocate(labels)]);
    assert.equal(ra.identity.id, n2);
    assert.equal(rb.identity.id, n2);
    assert.equal(a.lookupById(n1!), undefined, 'an unreadable object is no identity');
  });

  it('a new identity costs one API write; joining one the mirror knows costs no request', async () => {
    const [a, b] = await Promise.all([allocator('node-a'), allocator('node-b')]);
    const labels = LabelSet.parse(['k8s:app=frugal']);
    fake.resetRequests();
    const { identity } = await a.allocate(labels);
    assert.equal(objectRequests(fake), 1);
    assert.equal(fake.requests().create, 1);
    await waitFor('mirrored on b', () => b.lookupById(identity.id));
    fake.resetRequests();
    assert.equal((await b.allocate(labels)).identity.id, identity.id);
    assert.equal(objectRequests(fake), 0);
  });

  it('two objects for one label set (written by hand, or after a deletion): every node uses the one earliest in its order', async () => {
    const labels = LabelSet.parse(['k8s:app=twin']);
    const [first] = identityProbeOrder(labels.toString(), 256, 65535);
    // first - 1 comes last in the label set's order, though it is the lower number.
    const last = first! === 256 ? 65535 : first! - 1;
    occupy(last, { 'k8s:app': 'twin' });
    occupy(first!, { 'k8s:app': 'twin' });
    const [a, b] = await Promise.all([allocator('node-a'), allocator('node-b')]);
    assert.equal((await a.allocate(labels)).identity.id, first);
    assert.equal(b.lookupByLabels(labels)?.id, first);
  });

  it('release leaves the object (the operator collects), and agents do not run a GC', async () => {
    const a = await allocator('node-a');
    const labels = LabelSet.parse(['k8s:app=short-lived']);
    const { identity } = await a.allocate(labels);
    assert.equal(await a.release(identity), true);
    assert.ok(fake.get('tendrilidentities', undefined, String(identity.id)), 'still in the API');
    await assert.rejects(a.gc(), (err: unknown) => err instanceof IdentityError && err.code === IdentityErrorCode.UNSUPPORTED);
    const again = await a.allocate(labels);
    assert.equal(again.identity.id, identity.id);
  });

  it('an identity deleted while in use is created again under its number', async () => {
    const a = await allocator('node-a');
    const labels = LabelSet.parse(['k8s:app=resilient']);
    const { identity } = await a.allocate(labels);
    await waitFor('mirrored', () => a.store.get(identity.id));
    fake.delete('tendrilidentities', undefined, String(identity.id));
    const back = await waitFor('re-created', () => {
      const o = fake.get('tendrilidentities', undefined, String(identity.id));
      return o === undefined ? undefined : identityOfObject(o as KubernetesObject);
    });
    assert.ok(typeof back !== 'string' && back.labels.equals(labels));
    assert.equal(a.lookupByLabels(labels)?.id, identity.id);
    assert.equal(a.references(identity.id), 1);
  });

  it('API server down: identities the mirror knows are still handed out, a new label set fails (nothing invented), and works again after', async () => {
    const own = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
    closers.push(() => own.stop());
    const [a, b] = await Promise.all([allocator('node-a', own), allocator('node-b', own)]);
    const known = LabelSet.parse(['k8s:app=before-outage']);
    const { identity } = await a.allocate(known);
    await waitFor('mirrored on b', () => b.lookupById(identity.id));
    await own.pause();
    try {
      assert.equal((await b.allocate(known)).identity.id, identity.id);
      await assert.rejects(b.allocate(LabelSet.parse(['k8s:app=during-outage'])));
    } finally {
      await own.resume();
    }
    const later = await b.allocate(LabelSet.parse(['k8s:app=during-outage']));
    assert.equal(later.identity.scope, 'global');
  });

  it('start fails at once with K8S_CRD_MISSING, naming what to install, when the TendrilIdentity CRD is not installed', async () => {
    const bare = await FakeKubeApi.start();
    closers.push(() => bare.stop());
    const t0 = Date.now();
    await assert.rejects(allocator('node-a', bare, { syncTimeoutMs: 30_000 }), (err: unknown) => isK8sError(err, K8sErrorCode.CRD_MISSING) && /tendrilidentities\.tendril\.io.*kubectl apply -f deploy\/kubernetes\/crds\//.test((err as Error).message));
    assert.ok(Date.now() - t0 < 5000, 'not after a sync timeout');
  });

  it('start waits through an API server that does not answer yet, then syncs (only a 404 is an answer)', async () => {
    const own = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
    closers.push(() => own.stop());
    await own.pause();
    setTimeout(() => void own.resume(), 700);
    const a = await allocator('node-a', own, { syncTimeoutMs: 20_000 });
    assert.equal((await a.allocate(LabelSet.parse(['k8s:app=after-pause']))).identity.scope, 'global');
  });
});
