// The watchers against the fake API server (test/support/fakeKubeApi.ts): the
// client's informers talk HTTP to it as to kube-apiserver; the targets are
// recorders standing in for the agent's endpoint manager and policy engine.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { pino } from 'pino';
import { FakeLoadBalancer } from '../datapath/fake/fakeDatapath.js';
import { ServiceManager, ServiceStore } from '../service/index.js';
import { LabelSet } from '../labels/index.js';
import { formatPolicyName, PolicyNotFoundError, type Policy, type PolicyFilter } from '../policy/index.js';
import { FakeKubeApi } from '../../test/support/fakeKubeApi.js';
import { endpointSliceObject, namespaceObject, networkPolicyObject, nodeObject, podObject, serviceObject, tendrilClusterwidePolicyObject, tendrilPolicyObject } from '../../test/support/k8sObjects.js';
import { K8sSyncTimeoutError } from './errors.js';
import type { K8sEndpointTarget, K8sPolicyTarget } from './types.js';
import { K8sWatchers } from './watchers.js';

const NODE = 'tdl-node-a';
const RETRY = { initialMs: 50, maxMs: 400 };
const silent = pino({ level: 'silent' });

interface RecordedEndpoint {
  id: number;
  podNamespace?: string;
  podName?: string;
  labels: string[];
}

class RecordingEndpoints implements K8sEndpointTarget {
  readonly endpoints = new Map<number, RecordedEndpoint>();
  readonly calls: Array<{ id: number; labels: string[] }> = [];
  failures = 0;

  add(ep: RecordedEndpoint): void {
    this.endpoints.set(ep.id, ep);
  }

  list() {
    return [...this.endpoints.values()].map((e) => ({ ...e }));
  }

  async updateLabels(id: number, labels: LabelSet): Promise<unknown> {
    if (this.failures > 0) {
      this.failures--;
      throw new Error('endpoint busy');
    }
    const ep = this.endpoints.get(id);
    if (!ep) throw new Error(`endpoint ${id} not found`);
    ep.labels = labels.toStrings();
    this.calls.push({ id, labels: labels.toStrings() });
    return {};
  }

  callsFor(id: number): string[][] {
    return this.calls.filter((c) => c.id === id).map((c) => c.labels);
  }
}

class RecordingPolicies implements K8sPolicyTarget {
  readonly policies = new Map<string, Policy>();
  readonly calls: string[] = [];
  /** Policies per upsertPolicies call. */
  readonly batches: number[] = [];

  upsertPolicies(policies: readonly Policy[]): unknown {
    this.batches.push(policies.length);
    for (const p of policies) {
      this.policies.set(formatPolicyName(p.name), p);
      this.calls.push(`upsert ${formatPolicyName(p.name)}`);
    }
    return {};
  }

  deletePolicies(filter: PolicyFilter): unknown {
    const key = formatPolicyName({ kind: filter.kind!, namespace: filter.namespace!, name: filter.name! });
    this.calls.push(`delete ${key}`);
    if (!this.policies.delete(key)) throw new PolicyNotFoundError(key);
    return {};
  }
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const pod = (namespace: string, name: string, labels: Record<string, string>, nodeName = NODE) => podObject({ namespace, name, labels, nodeName });
/** Ingress to `app` from role=client pods on TCP `port`. */
const networkPolicy = (ns: string, name: string, app: string, port = 80) =>
  networkPolicyObject(ns, name, {
    podSelector: { matchLabels: { app } },
    policyTypes: ['Ingress'],
    ingress: [{ from: [{ podSelector: { matchLabels: { role: 'client' } } }], ports: [{ protocol: 'TCP', port }] }],
  });

describe('K8sWatchers against the fake API server', () => {
  let fake: FakeKubeApi;
  let kubeconfig: string;
  let endpoints: RecordingEndpoints;
  let policies: RecordingPolicies;
  let watchers: K8sWatchers | undefined;

  before(async () => {
    fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 60_000 });
    kubeconfig = await fake.kubeconfig();
  });
  after(async () => {
    await fake.stop();
  });
  beforeEach(() => {
    endpoints = new RecordingEndpoints();
    policies = new RecordingPolicies();
  });
  afterEach(async () => {
    await watchers?.stop();
    watchers = undefined;
    await fake.resume();
    for (const r of ['pods', 'namespaces', 'nodes', 'networkpolicies', 'tendrilnetworkpolicies', 'tendrilclusterwidenetworkpolicies'] as const) {
      for (const o of fake.list(r) as Array<{ metadata: { namespace?: string; name: string } }>) fake.delete(r, o.metadata.namespace, o.metadata.name);
    }
  });

  const start = async () => {
    watchers = new K8sWatchers({ connection: { kubeconfig }, nodeName: NODE, logger: silent, endpoints, policy: policies, retry: RETRY });
    await watchers.start({ timeoutMs: 5000 });
    return watchers;
  };

  it('relabels an endpoint when its pod is relabelled, keeping labels of other sources', async () => {
    fake.create('namespaces', namespaceObject('shop', { team: 'a' }));
    fake.create('pods', pod('shop', 'web-1', { app: 'web' }));
    const w = await start();
    const first = await w.podLabels('shop', 'web-1', 1000);
    assert.deepEqual(first?.toStrings(), [
      'k8s:app=web',
      'k8s:io.kubernetes.pod.namespace=shop',
      'k8s:io.tendril.k8s.namespace.labels.kubernetes.io/metadata.name=shop',
      'k8s:io.tendril.k8s.namespace.labels.team=a',
      'k8s:io.tendril.k8s.policy.serviceaccount=default',
    ]);
    endpoints.add({ id: 7, podNamespace: 'shop', podName: 'web-1', labels: [...first!.toStrings(), 'container:tier=front'] });
    await w.reconcileEndpoints();
    assert.deepEqual(endpoints.calls, [], 'labels already right: no update');

    fake.update('pods', pod('shop', 'web-1', { app: 'web', version: 'v2' }));
    await waitFor('relabel', () => endpoints.calls.length === 1);
    assert.deepEqual(endpoints.callsFor(7)[0], [
      'container:tier=front',
      'k8s:app=web',
      'k8s:io.kubernetes.pod.namespace=shop',
      'k8s:io.tendril.k8s.namespace.labels.kubernetes.io/metadata.name=shop',
      'k8s:io.tendril.k8s.namespace.labels.team=a',
      'k8s:io.tendril.k8s.policy.serviceaccount=default',
      'k8s:version=v2',
    ]);
    const status = w.status().resources.find((r) => r.resource === 'pods')!;
    assert.equal(status.synced, true);
    assert.equal(status.objects, 1);
    assert.ok(status.events >= 2 && status.lastEventAt !== undefined);
  });

  it('relabels every pod of a namespace whose labels change, and only those', async () => {
    fake.create('namespaces', namespaceObject('shop', { team: 'a' }));
    fake.create('namespaces', namespaceObject('other', { team: 'a' }));
    fake.create('pods', pod('shop', 'web-1', { app: 'web' }));
    fake.create('pods', pod('shop', 'db-1', { app: 'db' }));
    fake.create('pods', pod('other', 'x-1', { app: 'x' }));
    const w = await start();
    let id = 1;
    for (const [ns, name] of [['shop', 'web-1'], ['shop', 'db-1'], ['other', 'x-1']] as const) {
      endpoints.add({ id: id++, podNamespace: ns, podName: name, labels: (await w.podLabels(ns, name, 1000))!.toStrings() });
    }
    fake.update('namespaces', namespaceObject('shop', { team: 'b' }));
    await waitFor('two relabels', () => endpoints.calls.length === 2);
    await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(endpoints.calls.map((c) => c.id).sort(), [1, 2]);
    for (const c of endpoints.calls) assert.ok(c.labels.includes('k8s:io.tendril.k8s.namespace.labels.team=b'));
  });

  it('watches only the pods of this node, and podLabels waits for a pod to appear', async () => {
    fake.create('namespaces', namespaceObject('shop'));
    fake.create('pods', pod('shop', 'elsewhere', { app: 'web' }, 'tdl-node-b'));
    const w = await start();
    assert.equal(await w.podLabels('shop', 'elsewhere', 100), undefined);
    const waiting = w.podLabels('shop', 'late', 3000);
    setTimeout(() => fake.create('pods', pod('shop', 'late', { app: 'late' })), 100);
    assert.equal((await waiting)?.get('app')?.value, 'late');
  });

  it('reconcilePod fixes an endpoint created with labels read before a relabel', async () => {
    fake.create('namespaces', namespaceObject('shop'));
    fake.create('pods', pod('shop', 'web-1', { app: 'web' }));
    const w = await start();
    const stale = (await w.podLabels('shop', 'web-1', 1000))!.toStrings();
    fake.update('pods', pod('shop', 'web-1', { app: 'api' }));
    await waitFor('the relabel in the cache', () => w.status().resources.find((r) => r.resource === 'pods')!.events >= 2);
    endpoints.add({ id: 9, podNamespace: 'shop', podName: 'web-1', labels: stale });
    await w.reconcilePod('shop', 'web-1');
    assert.ok(endpoints.callsFor(9)[0]!.includes('k8s:app=api'));
  });

  it('retries a relabel that failed', async () => {
    fake.create('namespaces', namespaceObject('shop'));
    fake.create('pods', pod('shop', 'web-1', { app: 'web' }));
    const w = await start();
    endpoints.add({ id: 3, podNamespace: 'shop', podName: 'web-1', labels: (await w.podLabels('shop', 'web-1', 1000))!.toStrings() });
    endpoints.failures = 2;
    fake.update('pods', pod('shop', 'web-1', { app: 'api' }));
    await waitFor('relabel after retries', () => endpoints.calls.length === 1);
    assert.equal(endpoints.failures, 0);
    assert.ok(endpoints.callsFor(3)[0]!.includes('k8s:app=api'));
  });

  it('feeds NetworkPolicy add, update and delete to the policy target', async () => {
    const w = await start();
    fake.create('networkpolicies', networkPolicy('shop', 'allow-web', 'web'));
    await waitFor('upsert', () => policies.calls.length === 1);
    assert.deepEqual(policies.calls, ['upsert NetworkPolicy/shop/allow-web']);
    const stored = policies.policies.get('NetworkPolicy/shop/allow-web')!;
    assert.equal(stored.rules[0]!.ingress.allow[0]!.ports === 'all' ? 0 : stored.rules[0]!.ingress.allow[0]!.ports[0]!.port, 80);

    fake.update('networkpolicies', networkPolicy('shop', 'allow-web', 'web', 8080));
    await waitFor('replace', () => policies.calls.length === 2);
    const replaced = policies.policies.get('NetworkPolicy/shop/allow-web')!;
    assert.equal(replaced.rules[0]!.ingress.allow[0]!.ports === 'all' ? 0 : replaced.rules[0]!.ingress.allow[0]!.ports[0]!.port, 8080);

    fake.delete('networkpolicies', 'shop', 'allow-web');
    await waitFor('delete', () => policies.calls.length === 3);
    assert.equal(policies.calls[2], 'delete NetworkPolicy/shop/allow-web');
    assert.equal(policies.policies.size, 0);
    assert.equal(w.status().resources.find((r) => r.resource === 'networkpolicies')!.lastError, undefined);
  });

  it('feeds tendril policies (namespaced and cluster-wide) to the policy target', async () => {
    await start();
    fake.create('tendrilnetworkpolicies', tendrilPolicyObject('shop', 'deny-db', { endpointSelector: { matchLabels: { app: 'db' } }, ingressDeny: [{ fromEntities: ['world'] }] }));
    fake.create('tendrilclusterwidenetworkpolicies', tendrilClusterwidePolicyObject('host-ok', [{ endpointSelector: {}, ingress: [{ fromEntities: ['host'] }] }]));
    await waitFor('two upserts', () => policies.calls.length === 2);
    assert.deepEqual([...policies.policies.keys()].sort(), ['TendrilClusterwideNetworkPolicy/host-ok', 'TendrilNetworkPolicy/shop/deny-db']);
    fake.delete('tendrilclusterwidenetworkpolicies', undefined, 'host-ok');
    await waitFor('delete', () => policies.calls.length === 3);
    assert.equal(policies.calls[2], 'delete TendrilClusterwideNetworkPolicy/host-ok');
  });

  it('hands the policies of the first list over in one call', async () => {
    for (let i = 0; i < 5; i++) fake.create('networkpolicies', networkPolicy('shop', `p${i}`, `app${i}`));
    const w = await start();
    await w.policiesSettled();
    assert.deepEqual(policies.batches, [5]);
    fake.create('networkpolicies', networkPolicy('shop', 'later', 'web'));
    await waitFor('the later one', () => policies.batches.length === 2);
    assert.deepEqual(policies.batches, [5, 1]);
  });

  it('refuses an invalid policy: logged in status lastError, no call, nothing crashes', async () => {
    const w = await start();
    const bad = networkPolicy('shop', 'bad', 'web');
    (bad.spec.ingress[0]!.from[0] as Record<string, unknown>).ipBlock = { cidr: 'not-a-cidr' };
    fake.create('networkpolicies', bad);
    await waitFor('lastError', () => w.status().resources.find((r) => r.resource === 'networkpolicies')!.lastError !== undefined);
    const status = w.status().resources.find((r) => r.resource === 'networkpolicies')!;
    assert.match(status.lastError!, /NetworkPolicy shop\/bad: .*ipBlock cannot be combined/);
    fake.delete('networkpolicies', 'shop', 'bad');
    fake.create('networkpolicies', networkPolicy('shop', 'good', 'web'));
    await waitFor('the next policy', () => policies.calls.includes('upsert NetworkPolicy/shop/good'));
    assert.deepEqual(policies.calls.filter((c) => c.includes('/bad')), ['delete NetworkPolicy/shop/bad'], 'only the delete of the refused one, which the target does not know');
    assert.equal(w.status().connected, true);
  });

  it('an invalid update leaves the version in force before it', async () => {
    const w = await start();
    fake.create('networkpolicies', networkPolicy('shop', 'p', 'web', 80));
    await waitFor('upsert', () => policies.calls.length === 1);
    const bad = networkPolicy('shop', 'p', 'web', 80);
    (bad.spec.ingress[0]!.ports[0] as Record<string, unknown>).port = 70000;
    fake.update('networkpolicies', bad);
    await waitFor('lastError', () => /port 70000/.test(w.status().resources.find((r) => r.resource === 'networkpolicies')!.lastError ?? ''));
    assert.deepEqual(policies.calls, ['upsert NetworkPolicy/shop/p']);
    assert.ok(policies.policies.has('NetworkPolicy/shop/p'));
  });

  it('survives the API server going away: restarts with back-off and catches up without a full list', async () => {
    fake.create('namespaces', namespaceObject('shop'));
    fake.create('pods', pod('shop', 'web-1', { app: 'web' }));
    const w = await start();
    endpoints.add({ id: 1, podNamespace: 'shop', podName: 'web-1', labels: (await w.podLabels('shop', 'web-1', 1000))!.toStrings() });
    await fake.pause();
    await waitFor('disconnected', () => !w.status().connected);
    fake.update('pods', pod('shop', 'web-1', { app: 'web', moved: 'yes' }));
    fake.create('networkpolicies', networkPolicy('shop', 'while-away', 'web'));
    await waitFor('a second restart', () => w.status().resources.every((r) => r.restarts >= 2), 5000);
    assert.equal(w.synced, true, 'still synced while away');
    fake.resetRequests();
    await fake.resume();
    await waitFor('caught up', () => endpoints.calls.length === 1 && policies.calls.length === 1, 5000);
    await waitFor('connected', () => w.status().connected);
    assert.ok(endpoints.callsFor(1)[0]!.includes('k8s:moved=yes'));
    assert.deepEqual(policies.calls, ['upsert NetworkPolicy/shop/while-away']);
    const requests = fake.requests();
    assert.equal(requests.list ?? 0, 0, `no relist after a reconnect without compaction: ${JSON.stringify(requests)}`);
    assert.ok((requests.watch ?? 0) >= w.status().resources.length);
    for (const r of w.status().resources) assert.match(r.lastError ?? '', /ECONNREFUSED|socket|reset|closed/i, `${r.resource}: ${r.lastError}`);
  });

  it('relists after 410 Gone: a delete made while the watch was down arrives as a delete', async () => {
    fake.create('networkpolicies', networkPolicy('shop', 'p1', 'web'));
    fake.create('networkpolicies', networkPolicy('shop', 'p2', 'db'));
    const w = await start();
    await waitFor('two upserts', () => policies.calls.length === 2);
    fake.resetRequests();
    // The watch ends before the delete, and the history it would resume from is gone.
    fake.dropWatches();
    fake.delete('networkpolicies', 'shop', 'p1');
    fake.compact();
    await waitFor('delete via relist', () => policies.calls.length === 3);
    assert.equal(policies.calls[2], 'delete NetworkPolicy/shop/p1');
    assert.deepEqual([...policies.policies.keys()], ['NetworkPolicy/shop/p2']);
    const requests = fake.requests();
    assert.equal(requests['list:networkpolicies'], 1, JSON.stringify(requests));
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(policies.calls.length, 3, 'p2 unchanged: no update on relist');
    assert.equal(w.synced, true);
  });

  it('a watch that ends cleanly resumes from its resourceVersion (no list)', async () => {
    fake.create('namespaces', namespaceObject('shop'));
    await start();
    fake.resetRequests();
    fake.dropWatches();
    fake.create('networkpolicies', networkPolicy('shop', 'after-drop', 'web'));
    await waitFor('upsert', () => policies.calls.length === 1);
    assert.equal(fake.requests().list ?? 0, 0, JSON.stringify(fake.requests()));
  });

  it('counts a policy CRD the server does not serve as synced and empty, not as a lost connection', async () => {
    const bare = await FakeKubeApi.start();
    try {
      const w = new K8sWatchers({ connection: { kubeconfig: await bare.kubeconfig() }, nodeName: NODE, logger: silent, endpoints, policy: policies, retry: RETRY });
      watchers = w;
      await w.start({ timeoutMs: 5000 });
      await new Promise((r) => setTimeout(r, 200));
      const status = w.status();
      assert.equal(status.connected, true);
      const crd = status.resources.find((r) => r.resource === 'tendrilnetworkpolicies')!;
      assert.equal(crd.synced, true);
      assert.equal(crd.restarts, 0);
      assert.match(crd.lastError ?? '', /CRD not installed/);
    } finally {
      await watchers?.stop();
      watchers = undefined;
      await bare.stop();
    }
  });

  it('follows bookmarks: after a compaction a resumed watch needs no relist', async () => {
    const quick = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 50 });
    try {
      const w = new K8sWatchers({ connection: { kubeconfig: await quick.kubeconfig() }, nodeName: NODE, logger: silent, endpoints, policy: policies, retry: RETRY });
      watchers = w;
      await w.start({ timeoutMs: 5000 });
      // Other resources move the resourceVersion; bookmarks carry it to the policy watch, which sees no event.
      for (let i = 0; i < 5; i++) quick.create('namespaces', namespaceObject(`tdl-ns-${i}`));
      const rv = String(quick.resourceVersion);
      await new Promise((r) => setTimeout(r, 300));
      quick.compact();
      quick.resetRequests();
      quick.dropWatches();
      quick.create('networkpolicies', networkPolicy('shop', 'after-compaction', 'web'));
      await waitFor('upsert', () => policies.calls.length === 1);
      assert.equal(quick.requests()['list:networkpolicies'] ?? 0, 0, `resumed from a bookmark at ${rv}: ${JSON.stringify(quick.requests())}`);
    } finally {
      await watchers?.stop();
      watchers = undefined;
      await quick.stop();
    }
  });

  it('hands Services with their EndpointSlices to the service API, after both lists, and follows scaling and deletion', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-k8s-watch-svc-'));
    try {
      const services = new ServiceManager({
        loadBalancer: new FakeLoadBalancer(),
        store: new ServiceStore(join(dir, 'services')),
        log: silent,
        localAddresses: () => [],
        nodeAddresses: () => ['192.0.2.10'],
      });
      const slice = (name: string, ips: string[]) => endpointSliceObject('shop', name, 'web', ips.map((ip) => ({ ip })), [{ name: 'http', port: 8080 }]);
      fake.create('services', serviceObject('shop', 'web', { clusterIP: '10.96.0.10', ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
      fake.create('endpointslices', slice('web-a', ['10.0.1.1', '10.0.1.2']));
      const backends = () => services.list().flatMap((s) => s['backend-addresses'].map((b) => `${s['frontend-address'].ip}>${b.ip}`)).sort();
      watchers = new K8sWatchers({ connection: { kubeconfig }, nodeName: NODE, logger: silent, endpoints, policy: policies, services, retry: RETRY });
      await watchers.start({ timeoutMs: 5000 });
      await watchers.servicesSynced();
      assert.deepEqual(backends(), ['10.96.0.10>10.0.1.1', '10.96.0.10>10.0.1.2'], 'the first pass has every slice');
      fake.create('endpointslices', slice('web-b', ['10.0.1.3']));
      await waitFor('scaled up', () => backends().length === 3);
      fake.delete('endpointslices', 'shop', 'web-a');
      await waitFor('scaled down', () => backends().length === 1);
      assert.deepEqual(backends(), ['10.96.0.10>10.0.1.3']);
      fake.delete('services', 'shop', 'web');
      await waitFor('service deleted', () => services.list().length === 0);
    } finally {
      await watchers?.stop();
      watchers = undefined;
      for (const o of fake.list('endpointslices') as Array<{ metadata: { namespace: string; name: string } }>) fake.delete('endpointslices', o.metadata.namespace, o.metadata.name);
      for (const o of fake.list('services') as Array<{ metadata: { namespace: string; name: string } }>) fake.delete('services', o.metadata.namespace, o.metadata.name);
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('ownNode gives pod CIDRs and addresses, before start(), and reports later changes', async () => {
    const node = (cidrs: string[]) => nodeObject(NODE, cidrs, [{ type: 'InternalIP', address: '192.0.2.10' }, { type: 'Hostname', address: NODE }]);
    fake.create('nodes', nodeObject('tdl-node-b', ['10.9.0.0/24'], []));
    watchers = new K8sWatchers({ connection: { kubeconfig }, nodeName: NODE, logger: silent, endpoints, policy: policies, retry: RETRY });
    const waiting = watchers.ownNode(3000);
    setTimeout(() => fake.create('nodes', node(['10.1.0.0/24', 'fd00:1::/64'])), 100);
    assert.deepEqual(await waiting, {
      name: NODE,
      podCidrs: ['10.1.0.0/24', 'fd00:1::/64'],
      addresses: [
        { type: 'InternalIP', address: '192.0.2.10' },
        { type: 'Hostname', address: NODE },
      ],
    });
    const seen: string[][] = [];
    watchers.onNodeChange((n) => seen.push(n.podCidrs));
    fake.update('nodes', node(['10.1.1.0/24']));
    await waitFor('node change', () => seen.length === 1);
    assert.deepEqual(seen, [['10.1.1.0/24']]);
    await watchers.start({ timeoutMs: 5000 });
    assert.equal(watchers.status().resources.find((r) => r.resource === 'nodes')!.objects, 1, 'only this node');
  });

  it('start() rejects with K8sSyncTimeoutError while the API server is away, and syncs once it is back', async () => {
    await fake.pause();
    watchers = new K8sWatchers({ connection: { kubeconfig }, nodeName: NODE, logger: silent, endpoints, policy: policies, retry: RETRY });
    await assert.rejects(watchers.start({ timeoutMs: 300 }), (err: unknown) => err instanceof K8sSyncTimeoutError && err.pending.includes('pods'));
    const status = watchers.status();
    assert.equal(status.synced, false);
    assert.equal(status.connected, false);
    assert.equal(status.apiServer, fake.url);
    await fake.resume();
    await watchers.start({ timeoutMs: 5000 });
    assert.equal(watchers.synced, true);
  });
});
