// The fake Kubernetes API server the Kubernetes tests run against, checked
// through the client the agent uses (@kubernetes/client-node 1.4.0): list with
// the global resourceVersion, watch from a resourceVersion in order, bookmarks,
// 410 Gone after a compaction leading an informer to relist and deliver the
// delete it missed, dropped watches resumed without a relist, the server going
// away and coming back, field and label selectors, Status errors, CRDs that
// register their resources in discovery; and what the Kubernetes-backed
// cluster mode relies on: generateName, resourceVersion preconditions, owner
// references and the garbage collector, Leases, status subresources, watches
// of cluster-scoped custom resources. A fake that drifted from the real
// server here would make every Kubernetes test prove less than it claims.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import {
  ApiextensionsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  ListWatch,
  makeInformer,
  PatchStrategy,
  setHeaderOptions,
  type V1Lease,
  V1MicroTime,
  type V1Pod,
  Watch,
} from '@kubernetes/client-node';
import { FakeKubeApi, type FakeResource, KubeStatusError } from '../support/fakeKubeApi.js';
import { NAME_ALPHABET } from '../support/fakeKubeNames.js';
import { TEST_CRD_GROUP, testCrd } from '../support/fakeKubeTestCrds.js';

interface WatchEvent {
  type: string;
  object: { metadata?: { name?: string; resourceVersion?: string }; code?: number; reason?: string; kind?: string };
}

function pod(namespace: string, name: string, o: { labels?: Record<string, string>; nodeName?: string } = {}): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { namespace, name, labels: o.labels ?? {} },
    spec: { nodeName: o.nodeName ?? 'tdl-node-a', containers: [{ name: 'c', image: 'busybox' }] },
  };
}

async function until(what: string, cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Opens a raw watch and collects its events until stopped or the server ends it. */
async function collectWatch(kc: KubeConfig, path: string, params: Record<string, string | boolean>) {
  const events: WatchEvent[] = [];
  let ended: unknown = 'open';
  const controller = await new Watch(kc).watch(
    path,
    params,
    (type, object) => events.push({ type, object }),
    (err) => {
      ended = err ?? null;
    },
  );
  return {
    events,
    ended: () => ended !== 'open',
    endError: () => ended,
    stop: () => controller.abort(),
  };
}

function statusCode(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

describe('fake Kubernetes API server, through @kubernetes/client-node', () => {
  let fake: FakeKubeApi;
  let kc: KubeConfig;
  let core: CoreV1Api;

  before(async () => {
    fake = await FakeKubeApi.start({ bookmarkIntervalMs: 100 });
    kc = new KubeConfig();
    kc.loadFromFile(await fake.kubeconfig());
    core = kc.makeApiClient(CoreV1Api);
  });
  after(async () => {
    await fake.stop();
  });

  test('list: every namespace or one, the global resourceVersion, selectors, pages', async () => {
    fake.create('pods', pod('tdl-l1', 'a', { labels: { app: 'web', tier: 'front' } }));
    fake.create('pods', pod('tdl-l1', 'b', { labels: { app: 'db' } }));
    fake.create('pods', pod('tdl-l2', 'c', { labels: { app: 'web' } }));
    fake.create('namespaces', { metadata: { name: 'tdl-l1' } });

    const all = await core.listPodForAllNamespaces({ labelSelector: 'app' });
    assert.deepEqual(
      all.items.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`),
      ['tdl-l1/a', 'tdl-l1/b', 'tdl-l2/c'],
    );
    // The list's version is the store's, not the newest pod's: a watch from it misses nothing.
    assert.equal(all.metadata?.resourceVersion, String(fake.resourceVersion));
    assert.ok(Number(all.items[2]!.metadata?.resourceVersion) < fake.resourceVersion);

    const one = await core.listNamespacedPod({ namespace: 'tdl-l1' });
    assert.deepEqual(one.items.map((p) => p.metadata?.name), ['a', 'b']);
    const web = await core.listPodForAllNamespaces({ labelSelector: 'app=web,tier!=front' });
    assert.deepEqual(web.items.map((p) => p.metadata?.name), ['c']);
    const setBased = await core.listPodForAllNamespaces({ labelSelector: 'app in (db, web),!tier' });
    assert.deepEqual(setBased.items.map((p) => p.metadata?.name), ['b', 'c']);
    const byName = await core.listPodForAllNamespaces({ fieldSelector: 'metadata.name=b' });
    assert.deepEqual(byName.items.map((p) => p.metadata?.name), ['b']);

    const page1 = await core.listPodForAllNamespaces({ labelSelector: 'app', limit: 2 });
    assert.deepEqual(page1.items.map((p) => p.metadata?.name), ['a', 'b']);
    assert.equal(page1.metadata?.remainingItemCount, 1);
    assert.ok(page1.metadata?._continue);
    const page2 = await core.listPodForAllNamespaces({ labelSelector: 'app', limit: 2, _continue: page1.metadata._continue });
    assert.deepEqual(page2.items.map((p) => p.metadata?.name), ['c']);
    assert.equal(page2.metadata?._continue, undefined);

    // The raw list: built-in items carry no apiVersion/kind, as kube-apiserver encodes typed lists.
    const raw = (await (await fetch(`${fake.url}/api/v1/namespaces/tdl-l1/pods`)).json()) as { kind: string; apiVersion: string; items: object[] };
    assert.equal(raw.kind, 'PodList');
    assert.equal(raw.apiVersion, 'v1');
    assert.ok(!('kind' in raw.items[0]!) && !('apiVersion' in raw.items[0]!));
  });

  test('get, create, replace, patch, delete answer with objects, or Status errors', async () => {
    // As NamespaceLifecycle admission does: no create in a namespace that does not exist.
    await assert.rejects(core.createNamespacedPod({ namespace: 'tdl-crud', body: pod('tdl-crud', 'p') }), (err) => {
      assert.equal(statusCode(err), 404);
      assert.match(String((err as { body: unknown }).body), /namespaces \\"tdl-crud\\" not found/);
      return true;
    });
    await core.createNamespace({ body: { metadata: { name: 'tdl-crud' } } });
    const created = await core.createNamespacedPod({ namespace: 'tdl-crud', body: pod('tdl-crud', 'p', { labels: { v: '1' } }) });
    assert.ok(created.metadata?.uid);
    assert.ok(created.metadata?.creationTimestamp);
    assert.equal(created.metadata?.resourceVersion, String(fake.resourceVersion));

    await assert.rejects(core.createNamespacedPod({ namespace: 'tdl-crud', body: pod('tdl-crud', 'p') }), (err) => {
      assert.equal(statusCode(err), 409);
      assert.match(String((err as { body: unknown }).body), /"reason":"AlreadyExists"/);
      return true;
    });
    await assert.rejects(core.readNamespacedPod({ namespace: 'tdl-crud', name: 'nope' }), (err) => {
      assert.equal(statusCode(err), 404);
      assert.match(String((err as { body: unknown }).body), /"reason":"NotFound".*pods \\"nope\\" not found|pods \\"nope\\" not found/);
      return true;
    });

    const replaced = await core.replaceNamespacedPod({ namespace: 'tdl-crud', name: 'p', body: { ...created, metadata: { ...created.metadata, labels: { v: '2' } } } });
    assert.equal(replaced.metadata?.labels?.v, '2');
    assert.ok(Number(replaced.metadata?.resourceVersion) > Number(created.metadata?.resourceVersion));
    // A PUT carrying the old resourceVersion lost a race: 409 Conflict.
    await assert.rejects(core.replaceNamespacedPod({ namespace: 'tdl-crud', name: 'p', body: created }), (err) => statusCode(err) === 409);

    const res = await fetch(`${fake.url}/api/v1/namespaces/tdl-crud/pods/p`, {
      method: 'PATCH',
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: JSON.stringify({ metadata: { labels: { v: null, w: '3' } } }),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(((await res.json()) as V1Pod).metadata?.labels, { w: '3' });
    assert.deepEqual((fake.get('pods', 'tdl-crud', 'p') as V1Pod).metadata?.labels, { w: '3' });

    // A write that changes nothing keeps the resourceVersion (no event), as on the real server.
    const rv = fake.resourceVersion;
    fake.update('pods', fake.get('pods', 'tdl-crud', 'p')!);
    assert.equal(fake.resourceVersion, rv);

    await core.deleteNamespacedPod({ namespace: 'tdl-crud', name: 'p' });
    assert.equal(fake.get('pods', 'tdl-crud', 'p'), undefined);
    assert.throws(() => fake.delete('pods', 'tdl-crud', 'p'), /not found/);
  });

  test('a Service gets the defaults and addresses the real server fills in, and keeps them', async () => {
    fake.create('namespaces', { metadata: { name: 'tdl-svc' } });
    const svc = await core.createNamespacedService({
      namespace: 'tdl-svc',
      body: { metadata: { name: 'np' }, spec: { type: 'NodePort', selector: { app: 'x' }, ports: [{ name: 'http', port: 80 }] } },
    });
    // Dynamic allocation takes the top of 10.96.0.0/12 and of 30000-32767 first, away from addresses tests choose.
    assert.equal(svc.spec?.clusterIP, '10.111.255.254');
    assert.deepEqual(svc.spec?.clusterIPs, ['10.111.255.254']);
    assert.deepEqual(JSON.parse(JSON.stringify(svc.spec?.ports)), [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 80, nodePort: 32767 }]);
    assert.deepEqual([svc.spec?.sessionAffinity, svc.spec?.ipFamilies, svc.spec?.ipFamilyPolicy, svc.spec?.internalTrafficPolicy, svc.spec?.externalTrafficPolicy], [
      'None',
      ['IPv4'],
      'SingleStack',
      'Cluster',
      'Cluster',
    ]);
    // An update that leaves out the allocated fields keeps them (the tests write whole objects).
    const updated = fake.update('services', { metadata: { namespace: 'tdl-svc', name: 'np' }, spec: { type: 'NodePort', ports: [{ name: 'http', port: 80 }] } }) as typeof svc;
    assert.equal(updated.spec?.clusterIP, '10.111.255.254');
    assert.equal(updated.spec?.ports?.[0]?.nodePort, 32767);
    await assert.rejects(
      core.createNamespacedService({ namespace: 'tdl-svc', body: { metadata: { name: 'dup' }, spec: { clusterIP: '10.111.255.254', ports: [{ port: 81 }] } } }),
      (err) => statusCode(err) === 422 && /already allocated/.test(String((err as { body: unknown }).body)),
    );
    const headless = fake.create('services', { metadata: { namespace: 'tdl-svc', name: 'h' }, spec: { clusterIP: 'None', ports: [{ port: 53, protocol: 'UDP' }] } }) as typeof svc;
    assert.deepEqual(headless.spec?.clusterIPs, ['None']);
    fake.delete('services', 'tdl-svc', 'np');
    fake.delete('services', 'tdl-svc', 'h');
  });

  test('a protobuf body is refused with 415; an unknown field selector with 400', async () => {
    const res = await fetch(`${fake.url}/api/v1/namespaces/tdl-pb/pods`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/vnd.kubernetes.protobuf' },
      body: Buffer.from([0x6b, 0x38, 0x73, 0x00]),
    });
    assert.equal(res.status, 415);
    const status = (await res.json()) as { kind: string; reason: string; code: number };
    assert.deepEqual([status.kind, status.reason, status.code], ['Status', 'UnsupportedMediaType', 415]);
    await assert.rejects(core.listPodForAllNamespaces({ fieldSelector: 'spec.bogus=1' }), (err) => statusCode(err) === 400);
    // Services take only metadata.* field selectors; pods take spec.nodeName.
    await assert.rejects(core.listServiceForAllNamespaces({ fieldSelector: 'spec.nodeName=x' }), (err) => statusCode(err) === 400);
  });

  test('watch from a resourceVersion replays the changes after it, in order, then follows', async () => {
    const from = fake.resourceVersion;
    fake.create('pods', pod('tdl-w', 'x', { labels: { n: '1' } }));
    fake.update('pods', { ...pod('tdl-w', 'x', { labels: { n: '2' } }) });
    fake.create('pods', pod('tdl-w', 'y'));
    fake.create('pods', pod('tdl-other', 'z'));
    fake.delete('pods', 'tdl-w', 'x');
    const w = await collectWatch(kc, '/api/v1/namespaces/tdl-w/pods', { resourceVersion: String(from) });
    await until('the replay', () => w.events.length >= 4);
    fake.create('pods', pod('tdl-w', 'live'));
    await until('the live event', () => w.events.length >= 5);
    w.stop();
    assert.deepEqual(
      w.events.map((e) => `${e.type} ${e.object.metadata?.name}`),
      ['ADDED x', 'MODIFIED x', 'ADDED y', 'DELETED x', 'ADDED live'],
    );
    const rvs = w.events.map((e) => Number(e.object.metadata?.resourceVersion));
    assert.deepEqual(rvs, [...rvs].sort((a, b) => a - b));
    assert.equal(new Set(rvs).size, rvs.length);
    assert.ok(rvs[0]! > from);
    // The DELETED event carries the version of the deletion.
    assert.equal(rvs[3], fake.resourceVersion - 1);

    // Without a resourceVersion: the current objects as ADDED first.
    const fresh = await collectWatch(kc, '/api/v1/namespaces/tdl-w/pods', {});
    await until('the initial state', () => fresh.events.length >= 2);
    fresh.stop();
    assert.deepEqual(fresh.events.map((e) => `${e.type} ${e.object.metadata?.name}`), ['ADDED live', 'ADDED y']);
  });

  test('bookmarks carry the current resourceVersion when asked for', async () => {
    const w = await collectWatch(kc, '/api/v1/pods', { resourceVersion: String(fake.resourceVersion), allowWatchBookmarks: true });
    fake.create('pods', pod('tdl-bm', 'b1'));
    await until('two bookmarks', () => w.events.filter((e) => e.type === 'BOOKMARK').length >= 2);
    const plain = await collectWatch(kc, '/api/v1/pods', { resourceVersion: String(fake.resourceVersion) });
    await sleep(350);
    w.stop();
    plain.stop();
    const bookmark = w.events.find((e) => e.type === 'BOOKMARK')!;
    assert.equal(bookmark.object.kind, 'Pod');
    assert.equal(bookmark.object.metadata?.resourceVersion, String(fake.resourceVersion));
    assert.deepEqual(plain.events, []);
  });

  test('a watch from a compacted resourceVersion gets one ERROR 410 Expired, then the stream ends', async () => {
    const old = fake.resourceVersion;
    fake.create('pods', pod('tdl-gone', 'g'));
    fake.compact();
    const w = await collectWatch(kc, '/api/v1/pods', { resourceVersion: String(old) });
    await until('the stream to end', () => w.ended());
    assert.equal(w.events.length, 1);
    assert.equal(w.events[0]!.type, 'ERROR');
    assert.equal(w.events[0]!.object.kind, 'Status');
    assert.equal(w.events[0]!.object.code, 410);
    assert.equal(w.events[0]!.object.reason, 'Expired');
    assert.equal(w.endError(), null);
    // From the compaction point on, nothing was lost: the watch is served.
    const ok = await collectWatch(kc, '/api/v1/pods', { resourceVersion: String(fake.resourceVersion) });
    fake.create('pods', pod('tdl-gone', 'h'));
    await until('the event after compaction', () => ok.events.length === 1);
    ok.stop();
  });

  test('an informer resumes a dropped watch from its resourceVersion without relisting', async () => {
    const ns = 'tdl-drop';
    fake.create('pods', pod(ns, 'd1'));
    fake.resetRequests();
    const informer = makeInformer(kc, `/api/v1/namespaces/${ns}/pods`, () => core.listNamespacedPod({ namespace: ns }));
    const seen: string[] = [];
    informer.on('add', (p) => seen.push(`add ${p.metadata?.name}`));
    informer.on('delete', (p) => seen.push(`delete ${p.metadata?.name}`));
    try {
      await informer.start();
      await until('the watch', () => fake.openWatches === 1);
      fake.dropWatches();
      await until('the watch to come back', () => (fake.requests()['watch:pods'] ?? 0) === 2 && fake.openWatches === 1);
      fake.create('pods', pod(ns, 'd2'));
      await until('the new pod', () => seen.includes('add d2'));
      assert.deepEqual(seen, ['add d1', 'add d2']);
      assert.equal(fake.requests()['list:pods'], 1);
      assert.equal(fake.requests()['watch:pods'], 2);
    } finally {
      await informer.stop();
    }
  });

  test('the server going away and coming back; a 410 on return makes the informer relist and deliver the delete it missed', async () => {
    const ns = 'tdl-relist';
    fake.create('pods', pod(ns, 'keep'));
    fake.create('pods', pod(ns, 'doomed'));
    fake.resetRequests();
    const informer = makeInformer(kc, `/api/v1/namespaces/${ns}/pods`, () => core.listNamespacedPod({ namespace: ns }));
    const seen: string[] = [];
    const errors: unknown[] = [];
    informer.on('add', (p) => seen.push(`add ${p.metadata?.name}`));
    informer.on('update', (p) => seen.push(`update ${p.metadata?.name}`));
    informer.on('delete', (p) => seen.push(`delete ${p.metadata?.name}`));
    informer.on('error', (err) => errors.push(err));
    try {
      await informer.start();
      await until('the watch', () => fake.openWatches === 1);
      await fake.pause();
      await until('the informer to see the connection die', () => errors.length === 1);
      // While it is away: a delete, and the history that would have told of it is compacted.
      fake.delete('pods', ns, 'doomed');
      fake.compact();
      const refused = await fetch(`${fake.url}/version`).then(
        () => 'answered',
        () => 'refused',
      );
      assert.equal(refused, 'refused');
      await fake.resume();
      // client-node stops an informer on a connection error: the caller starts it again.
      await informer.start();
      await until('the missed delete', () => seen.includes('delete doomed'));
      assert.deepEqual(seen, ['add doomed', 'add keep', 'delete doomed']);
      assert.deepEqual(informer.list().map((p) => p.metadata?.name), ['keep']);
      // The watch before the outage, the one answered 410, the one after the relist. (Waiting for the last
      // matters: client-node's stop() does not abort a watch still connecting, which would outlive it.)
      await until('the watch after the relist', () => fake.requests()['watch:pods'] === 3 && fake.openWatches === 1);
      assert.equal(fake.requests()['list:pods'], 2);
    } finally {
      await informer.stop();
    }
  });

  test('a field selector on spec.nodeName limits a ListWatch to one node; a label change leaving a selector is a delete', async () => {
    const ns = 'tdl-node';
    fake.create('pods', pod(ns, 'mine', { nodeName: 'tdl-n1', labels: { app: 'x' } }));
    fake.create('pods', pod(ns, 'theirs', { nodeName: 'tdl-n2', labels: { app: 'x' } }));
    const path = `/api/v1/namespaces/${ns}/pods`;
    const onNode = new ListWatch<V1Pod>(
      path,
      new Watch(kc),
      () => core.listNamespacedPod({ namespace: ns, fieldSelector: 'spec.nodeName=tdl-n1' }),
      false,
      undefined,
      'spec.nodeName=tdl-n1',
    );
    const labelled = new ListWatch<V1Pod>(path, new Watch(kc), () => core.listNamespacedPod({ namespace: ns, labelSelector: 'app=x' }), false, 'app=x');
    const seen: string[] = [];
    const seenLabelled: string[] = [];
    onNode.on('add', (p) => seen.push(`add ${p.metadata?.name}`));
    labelled.on('add', (p) => seenLabelled.push(`add ${p.metadata?.name}`));
    labelled.on('update', (p) => seenLabelled.push(`update ${p.metadata?.name}`));
    labelled.on('delete', (p) => seenLabelled.push(`delete ${p.metadata?.name}`));
    // Counted by request, not by open connections: a watch an earlier test stopped may still be closing on a busy machine.
    const watchesBefore = fake.requests()['watch:pods'] ?? 0;
    try {
      await onNode.start();
      await labelled.start();
      await until('both watches', () => (fake.requests()['watch:pods'] ?? 0) >= watchesBefore + 2);
      fake.create('pods', pod(ns, 'later-theirs', { nodeName: 'tdl-n2' }));
      fake.create('pods', pod(ns, 'later-mine', { nodeName: 'tdl-n1' }));
      fake.update('pods', pod(ns, 'theirs', { nodeName: 'tdl-n2', labels: { app: 'y' } }));
      fake.update('pods', pod(ns, 'theirs', { nodeName: 'tdl-n2', labels: { app: 'x' } }));
      await until('the later pod', () => seen.includes('add later-mine'));
      await until('theirs back in the selection', () => seenLabelled.length === 4);
      assert.deepEqual(seen, ['add mine', 'add later-mine']);
      assert.deepEqual(seenLabelled, ['add mine', 'add theirs', 'delete theirs', 'add theirs']);
    } finally {
      await onNode.stop();
      await labelled.stop();
    }
  });

  test('a CRD created through the API registers its resource in discovery; deleting it takes its objects', async () => {
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    const custom = kc.makeApiClient(CustomObjectsApi);
    await ext.createCustomResourceDefinition({
      body: {
        apiVersion: 'apiextensions.k8s.io/v1',
        kind: 'CustomResourceDefinition',
        metadata: { name: 'widgets.tdl.example.com' },
        spec: {
          group: 'tdl.example.com',
          names: { plural: 'widgets', singular: 'widget', kind: 'Widget', shortNames: ['wdg'] },
          scope: 'Namespaced',
          versions: [{ name: 'v1', served: true, storage: true, schema: { openAPIV3Schema: { type: 'object', x_kubernetes_preserve_unknown_fields: true } } }],
        },
      },
    });
    const discovery = (await (await fetch(`${fake.url}/apis/tdl.example.com/v1`)).json()) as { resources: Array<Record<string, unknown>> };
    assert.deepEqual(discovery.resources, [
      { name: 'widgets', singularName: 'widget', namespaced: true, kind: 'Widget', verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'], shortNames: ['wdg'] },
    ]);
    const groups = (await (await fetch(`${fake.url}/apis`)).json()) as { groups: Array<{ name: string }> };
    assert.ok(groups.groups.some((g) => g.name === 'tdl.example.com'));

    fake.create('namespaces', { metadata: { name: 'tdl-crd' } });
    await custom.createNamespacedCustomObject({
      group: 'tdl.example.com',
      version: 'v1',
      namespace: 'tdl-crd',
      plural: 'widgets',
      body: { apiVersion: 'tdl.example.com/v1', kind: 'Widget', metadata: { name: 'w1' }, spec: { size: 3 } },
    });
    const list = (await custom.listClusterCustomObject({ group: 'tdl.example.com', version: 'v1', plural: 'widgets' })) as {
      items: Array<{ kind: string; metadata: { namespace: string } }>;
    };
    // Custom resources are unstructured: list items keep their kind.
    assert.deepEqual(list.items.map((i) => [i.kind, i.metadata.namespace]), [['Widget', 'tdl-crd']]);
    // A CRD whose name is not plural.group is invalid (422), as on the real server.
    await assert.rejects(
      ext.createCustomResourceDefinition({
        body: { metadata: { name: 'wrong' }, spec: { group: 'g.example.com', names: { plural: 'gs', kind: 'G' }, scope: 'Cluster', versions: [{ name: 'v1', served: true, storage: true }] } },
      }),
      (err) => statusCode(err) === 422,
    );

    await ext.deleteCustomResourceDefinition({ name: 'widgets.tdl.example.com' });
    assert.equal((await fetch(`${fake.url}/apis/tdl.example.com/v1`)).status, 404);
    assert.equal((await fetch(`${fake.url}/apis/tdl.example.com/v1/namespaces/tdl-crd/widgets`)).status, 404);
  });

  test('requests() counts one per request, by verb and resource', async () => {
    fake.resetRequests();
    await core.listNamespacedPod({ namespace: 'tdl-count' });
    await core.listNamespacedPod({ namespace: 'tdl-count' });
    await assert.rejects(core.readNamespacedPod({ namespace: 'tdl-count', name: 'none' }));
    await core.listNamespace();
    assert.deepEqual(fake.requests(), { list: 3, 'list:pods': 2, 'list:namespaces': 1, get: 1, 'get:pods': 1 });
  });
});

describe('fake Kubernetes API server options and teardown', () => {
  test("crds: 'tendril' serves the tendril policy resources from the start", async () => {
    const fake = await FakeKubeApi.start({ crds: 'tendril' });
    try {
      const kc = new KubeConfig();
      kc.loadFromFile(await fake.kubeconfig());
      fake.create('tendrilclusterwidenetworkpolicies', { apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name: 'c' }, spec: { endpointSelector: {} } });
      fake.create('tendrilnetworkpolicies', { apiVersion: 'tendril.io/v1', kind: 'TendrilNetworkPolicy', metadata: { name: 'n', namespace: 'tdl-t' }, spec: { endpointSelector: {} } });
      const custom = kc.makeApiClient(CustomObjectsApi);
      const cw = (await custom.listClusterCustomObject({ group: 'tendril.io', version: 'v1', plural: 'tendrilclusterwidenetworkpolicies' })) as { items: Array<{ metadata: { name: string; namespace?: string } }> };
      assert.deepEqual(cw.items.map((i) => i.metadata), [{ ...cw.items[0]!.metadata, name: 'c' }]);
      assert.equal(cw.items[0]!.metadata.namespace, undefined);
      const ns = (await custom.listClusterCustomObject({ group: 'tendril.io', version: 'v1', plural: 'tendrilnetworkpolicies' })) as { items: Array<{ metadata: { name: string } }> };
      assert.deepEqual(ns.items.map((i) => i.metadata.name), ['n']);
      // The CRDs are deploy/'s, schema included: a field it does not declare is pruned, a wrong type refused.
      const pruned = fake.create('tendrilnetworkpolicies', {
        apiVersion: 'tendril.io/v1',
        kind: 'TendrilNetworkPolicy',
        metadata: { name: 'p', namespace: 'tdl-t' },
        spec: { endpointSelector: {}, notInTheSchema: true },
      }) as { spec: Record<string, unknown> };
      assert.deepEqual(pruned.spec, { endpointSelector: {} });
      assert.throws(
        () => fake.create('tendrilnetworkpolicies', { apiVersion: 'tendril.io/v1', kind: 'TendrilNetworkPolicy', metadata: { name: 'q', namespace: 'tdl-t' }, spec: { endpointSelector: 5 } }),
        (err) => err instanceof KubeStatusError && err.status.code === 422 && /spec\.endpointSelector/.test(err.message),
      );
    } finally {
      await fake.stop();
    }
  });

  test('stop() closes the listener, every connection and the kubeconfig dir', async () => {
    const fake = await FakeKubeApi.start();
    const kc = new KubeConfig();
    const file = await fake.kubeconfig();
    kc.loadFromFile(file);
    const w = await collectWatch(kc, '/api/v1/pods', {});
    await until('the watch', () => fake.openWatches === 1);
    await fake.stop();
    await until('the watch to end', () => w.ended());
    assert.equal(fake.openWatches, 0);
    assert.equal(existsSync(dirname(file)), false);
    await assert.rejects(fetch(`${fake.url}/version`));
    await fake.resume();
    await assert.rejects(fetch(`${fake.url}/version`));
  });
});

/** The Status body of a client-node ApiException. */
function statusBody(err: unknown): { kind: string; reason: string; code: number; message: string; details?: Record<string, unknown> } {
  const body = (err as { body?: unknown }).body;
  return JSON.parse(typeof body === 'string' ? body : JSON.stringify(body)) as ReturnType<typeof statusBody>;
}

/** The test CRDs' resources (registered at run time, so not in FakeResource's list). */
const WIDGETS = 'widgets' as FakeResource;

const GENERATED = new RegExp(`^[${NAME_ALPHABET}]{5}$`);

interface Custom {
  apiVersion?: string;
  kind?: string;
  metadata: { name: string; namespace?: string; resourceVersion?: string; generation?: number; uid?: string; labels?: Record<string, string>; finalizers?: string[]; deletionTimestamp?: string; ownerReferences?: object[] };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
}

describe('fake Kubernetes API server: what the API-backed cluster mode relies on, through @kubernetes/client-node', () => {
  let fake: FakeKubeApi;
  let kc: KubeConfig;
  let core: CoreV1Api;
  let custom: CustomObjectsApi;
  let leases: CoordinationV1Api;
  const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
  const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);
  const gadgets = { group: TEST_CRD_GROUP, version: 'v1', plural: 'gadgets' };
  const widgets = { group: TEST_CRD_GROUP, version: 'v1', plural: 'widgets' };
  const things = { group: TEST_CRD_GROUP, version: 'v1', plural: 'clusterthings' };

  before(async () => {
    fake = await FakeKubeApi.start({ bookmarkIntervalMs: 100 });
    kc = new KubeConfig();
    kc.loadFromFile(await fake.kubeconfig());
    core = kc.makeApiClient(CoreV1Api);
    custom = kc.makeApiClient(CustomObjectsApi);
    leases = kc.makeApiClient(CoordinationV1Api);
    fake.create('customresourcedefinitions', testCrd({ plural: 'gadgets', kind: 'Gadget', scope: 'Namespaced', status: true }));
    fake.create('customresourcedefinitions', testCrd({ plural: 'widgets', kind: 'Widget', scope: 'Namespaced' }));
    fake.create('customresourcedefinitions', testCrd({ plural: 'clusterthings', kind: 'ClusterThing', scope: 'Cluster' }));
    for (const ns of ['tdl-gen', 'tdl-rv', 'tdl-gc', 'tdl-lease', 'tdl-status']) fake.create('namespaces', { metadata: { name: ns } });
  });
  after(async () => {
    await fake.stop();
  });

  test('generateName: 5 characters of the real alphabet after the prefix (cut to 58), name wins, a clash is 409', async () => {
    const names = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const p = await core.createNamespacedPod({ namespace: 'tdl-gen', body: { metadata: { generateName: 'tdl-gen-' }, spec: { containers: [{ name: 'c', image: 'i' }] } } });
      const name = p.metadata!.name!;
      assert.ok(name.startsWith('tdl-gen-'), name);
      assert.match(name.slice('tdl-gen-'.length), GENERATED);
      assert.equal(p.metadata?.generateName, 'tdl-gen-');
      names.add(name);
    }
    assert.equal(names.size, 40);
    const long = 'x'.repeat(70);
    const cut = (await custom.createNamespacedCustomObject({ ...widgets, namespace: 'tdl-gen', body: { apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'Widget', metadata: { generateName: long } } })) as Custom;
    assert.equal(cut.metadata.name.length, 63);
    assert.ok(cut.metadata.name.startsWith('x'.repeat(58)));
    const named = await core.createNamespacedPod({ namespace: 'tdl-gen', body: { metadata: { name: 'tdl-fixed', generateName: 'tdl-gen-' }, spec: { containers: [{ name: 'c', image: 'i' }] } } });
    assert.equal(named.metadata?.name, 'tdl-fixed');
    await assert.rejects(
      core.createNamespacedPod({ namespace: 'tdl-gen', body: { metadata: { name: 'tdl-fixed', generateName: 'tdl-gen-' }, spec: { containers: [{ name: 'c', image: 'i' }] } } }),
      (err) => {
        const st = statusBody(err);
        assert.deepEqual([st.code, st.reason, st.message, st.details], [409, 'AlreadyExists', 'pods "tdl-fixed" already exists', { name: 'tdl-fixed', kind: 'pods' }]);
        return true;
      },
    );
  });

  test('generateName: a generated name that is taken is drawn again, up to 8 attempts, then 409 AlreadyExists', async () => {
    const draws: string[] = [];
    let script = ['bbbbb', 'bbbbb', 'ccccc'];
    const own = await FakeKubeApi.start({
      nameSuffix: () => {
        const s = script.length > 1 ? script.shift()! : script[0]!;
        draws.push(s);
        return s;
      },
    });
    try {
      const okc = new KubeConfig();
      okc.loadFromFile(await own.kubeconfig());
      const c = okc.makeApiClient(CoreV1Api);
      own.create('namespaces', { metadata: { name: 'tdl-gen' } });
      own.create('configmaps', { metadata: { namespace: 'tdl-gen', name: 'cm-bbbbb' } });
      const got = await c.createNamespacedConfigMap({ namespace: 'tdl-gen', body: { metadata: { generateName: 'cm-' }, data: { a: '1' } } });
      assert.equal(got.metadata?.name, 'cm-ccccc');
      assert.deepEqual(draws, ['bbbbb', 'bbbbb', 'ccccc']);
      draws.length = 0;
      script = ['bbbbb'];
      await assert.rejects(c.createNamespacedConfigMap({ namespace: 'tdl-gen', body: { metadata: { generateName: 'cm-' } } }), (err) => {
        const st = statusBody(err);
        assert.equal(st.code, 409);
        assert.equal(st.reason, 'AlreadyExists');
        assert.equal(st.message, 'configmaps "cm-bbbbb" already exists, the server was not able to generate a unique name for the object');
        assert.equal(st.details?.retryAfterSeconds, 1);
        return true;
      });
      assert.equal(draws.length, 8);
      assert.deepEqual(own.list('configmaps').map((o) => (o as Custom).metadata.name).sort(), ['cm-bbbbb', 'cm-ccccc']);
    } finally {
      await own.stop();
    }
  });

  test('update and patch: a stale resourceVersion is 409 Conflict; a custom resource PUT without one is 422, a pod PUT without one is unconditional', async () => {
    const body = { apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'Widget', metadata: { name: 'w' }, spec: { size: 1 } };
    const v1 = (await custom.createNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', body })) as Custom;
    const v2 = (await custom.replaceNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', name: 'w', body: { ...v1, spec: { size: 2 } } })) as Custom;
    assert.ok(Number(v2.metadata.resourceVersion) > Number(v1.metadata.resourceVersion));
    const conflict = {
      code: 409,
      reason: 'Conflict',
      message: `Operation cannot be fulfilled on widgets.${TEST_CRD_GROUP} "w": the object has been modified; please apply your changes to the latest version and try again`,
      details: { name: 'w', group: TEST_CRD_GROUP, kind: 'widgets' },
    };
    const isConflict = (err: unknown): boolean => {
      const st = statusBody(err);
      assert.deepEqual({ code: st.code, reason: st.reason, message: st.message, details: st.details }, conflict);
      return true;
    };
    await assert.rejects(custom.replaceNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', name: 'w', body: { ...v1, spec: { size: 3 } } }), isConflict);
    await assert.rejects(
      custom.patchNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', name: 'w', body: { metadata: { resourceVersion: v1.metadata.resourceVersion }, spec: { size: 3 } } }, merge),
      isConflict,
    );
    await assert.rejects(
      custom.patchNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', name: 'w', body: [{ op: 'replace', path: '/metadata/resourceVersion', value: v1.metadata.resourceVersion }, { op: 'replace', path: '/spec/size', value: 3 }] }, jsonPatch),
      isConflict,
    );
    // The current resourceVersion in a patch passes; a patch without one is unconditional.
    const v3 = (await custom.patchNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', name: 'w', body: { metadata: { resourceVersion: v2.metadata.resourceVersion }, spec: { size: 3 } } }, merge)) as Custom;
    const v4 = (await custom.patchNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', name: 'w', body: { spec: { size: 4 } } }, merge)) as Custom;
    assert.deepEqual([v3.spec?.size, v4.spec?.size, v4.metadata.generation], [3, 4, 4]);
    // kube-apiserver's custom resource strategy refuses unconditional updates (AllowUnconditionalUpdate false).
    await assert.rejects(custom.replaceNamespacedCustomObject({ ...widgets, namespace: 'tdl-rv', name: 'w', body }), (err) => {
      const st = statusBody(err);
      assert.equal(st.code, 422);
      assert.equal(st.reason, 'Invalid');
      assert.equal(st.message, `widgets.${TEST_CRD_GROUP} "w" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`);
      return true;
    });
    assert.equal((fake.get(WIDGETS, 'tdl-rv', 'w') as Custom).spec?.size, 4);

    // A pod's strategy allows them: PUT without a resourceVersion overwrites; with a stale one, strategic merge patch included, 409.
    const p1 = await core.createNamespacedPod({ namespace: 'tdl-rv', body: pod('tdl-rv', 'p', { labels: { v: '1' } }) });
    const p2 = await core.replaceNamespacedPod({ namespace: 'tdl-rv', name: 'p', body: pod('tdl-rv', 'p', { labels: { v: '2' } }) });
    assert.equal(p2.metadata?.labels?.v, '2');
    await assert.rejects(
      core.patchNamespacedPod({ namespace: 'tdl-rv', name: 'p', body: { metadata: { resourceVersion: p1.metadata?.resourceVersion, labels: { v: '3' } } } }, setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch)),
      (err) => statusBody(err).reason === 'Conflict' && statusBody(err).message.startsWith('Operation cannot be fulfilled on pods "p"'),
    );
  });

  test('delete with preconditions: a uid or resourceVersion that no longer holds is 409 Conflict, and nothing is deleted', async () => {
    const body = { apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'ClusterThing', metadata: { name: 'tdl-pre' }, spec: { size: 1 } };
    const v1 = (await custom.createClusterCustomObject({ ...things, body })) as Custom;
    await custom.patchClusterCustomObject({ ...things, name: 'tdl-pre', body: { spec: { size: 2 } } }, merge);
    await assert.rejects(custom.deleteClusterCustomObject({ ...things, name: 'tdl-pre', body: { preconditions: { resourceVersion: v1.metadata.resourceVersion } } }), (err) => {
      const st = statusBody(err);
      assert.equal(st.code, 409);
      assert.match(st.message, new RegExp(`^Operation cannot be fulfilled on clusterthings\\.${TEST_CRD_GROUP.replace(/\./g, '\\.')} "tdl-pre": Precondition failed: ResourceVersion in precondition: ${v1.metadata.resourceVersion}, ResourceVersion in object meta: \\d+$`));
      return true;
    });
    await assert.rejects(
      custom.deleteClusterCustomObject({ ...things, name: 'tdl-pre', body: { preconditions: { uid: '00000000-0000-0000-0000-00000000dead' } } }),
      (err) => statusBody(err).code === 409 && /Precondition failed: UID in precondition/.test(statusBody(err).message),
    );
    assert.ok(fake.get('clusterthings' as FakeResource, undefined, 'tdl-pre'));
    await custom.deleteClusterCustomObject({ ...things, name: 'tdl-pre', body: { preconditions: { uid: v1.metadata.uid } } });
    assert.equal(fake.get('clusterthings' as FakeResource, undefined, 'tdl-pre'), undefined);
  });

  test('owner references: deleting an owner (Background) takes its dependents shortly after; a second live owner keeps one', async () => {
    const owner = fake.create('configmaps', { metadata: { namespace: 'tdl-gc', name: 'owner' } }) as Custom;
    const other = fake.create('configmaps', { metadata: { namespace: 'tdl-gc', name: 'other' } }) as Custom;
    const ref = (o: Custom, extra: object = {}): object => ({ apiVersion: 'v1', kind: 'ConfigMap', name: o.metadata.name, uid: o.metadata.uid, ...extra });
    for (const n of ['d1', 'd2']) fake.create('pods', { ...pod('tdl-gc', n), metadata: { namespace: 'tdl-gc', name: n, ownerReferences: [ref(owner)] } });
    fake.create('pods', { ...pod('tdl-gc', 'shared'), metadata: { namespace: 'tdl-gc', name: 'shared', ownerReferences: [ref(owner), ref(other)] } });
    const w = await collectWatch(kc, '/api/v1/namespaces/tdl-gc/pods', { resourceVersion: String(fake.resourceVersion) });
    try {
      fake.delete('configmaps', 'tdl-gc', 'owner');
      // The collector runs after the delete has been answered, as kube-controller-manager's does.
      assert.ok(fake.get('pods', 'tdl-gc', 'd1') !== undefined && fake.get('pods', 'tdl-gc', 'd2') !== undefined);
      await until('the dependents to go', () => fake.get('pods', 'tdl-gc', 'd1') === undefined && fake.get('pods', 'tdl-gc', 'd2') === undefined);
      await until('the watch to see both DELETED', () => w.events.filter((e) => e.type === 'DELETED').length === 2);
      assert.deepEqual(w.events.filter((e) => e.type === 'DELETED').map((e) => e.object.metadata?.name).sort(), ['d1', 'd2']);
      await until('the dead reference to be dropped', () => ((fake.get('pods', 'tdl-gc', 'shared') as Custom).metadata.ownerReferences ?? []).length === 1);
      assert.deepEqual((fake.get('pods', 'tdl-gc', 'shared') as Custom).metadata.ownerReferences, [ref(other)]);
      assert.deepEqual(fake.gcFailures(), []);
    } finally {
      w.stop();
      fake.delete('pods', 'tdl-gc', 'shared');
      fake.delete('configmaps', 'tdl-gc', 'other');
    }
  });

  test('owner references: Foreground keeps the owner (deletionTimestamp, foregroundDeletion) until its blocking dependents are gone', async () => {
    const owner = (await custom.createNamespacedCustomObject({ ...widgets, namespace: 'tdl-gc', body: { apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'Widget', metadata: { name: 'fg' } } })) as Custom;
    const ref = { apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'Widget', name: 'fg', uid: owner.metadata.uid, blockOwnerDeletion: true };
    // One dependent holds a finalizer of its own: the owner must wait for it.
    fake.create('configmaps', { metadata: { namespace: 'tdl-gc', name: 'held', ownerReferences: [ref], finalizers: ['tdl.example.com/hold'] } });
    fake.create('configmaps', { metadata: { namespace: 'tdl-gc', name: 'free', ownerReferences: [ref] } });
    const from = String(fake.resourceVersion);
    const ownerWatch = await collectWatch(kc, `/apis/${TEST_CRD_GROUP}/v1/namespaces/tdl-gc/widgets`, { resourceVersion: from });
    const depWatch = await collectWatch(kc, '/api/v1/namespaces/tdl-gc/configmaps', { resourceVersion: from });
    try {
      const answered = (await custom.deleteNamespacedCustomObject({ ...widgets, namespace: 'tdl-gc', name: 'fg', propagationPolicy: 'Foreground' })) as Custom;
      assert.deepEqual(answered.metadata.finalizers, ['foregroundDeletion']);
      assert.ok(answered.metadata.deletionTimestamp);
      await until('the free dependent to go', () => fake.get('configmaps', 'tdl-gc', 'free') === undefined);
      await until('the held dependent to be deleting', () => (fake.get('configmaps', 'tdl-gc', 'held') as Custom | undefined)?.metadata.deletionTimestamp !== undefined);
      await sleep(100);
      const waiting = fake.get(WIDGETS, 'tdl-gc', 'fg') as Custom | undefined;
      assert.ok(waiting, 'the owner waits for its blocking dependent');
      assert.deepEqual(waiting.metadata.finalizers, ['foregroundDeletion']);
      // The dependent's own controller lets go: the dependent goes, then the owner.
      await core.patchNamespacedConfigMap({ namespace: 'tdl-gc', name: 'held', body: { metadata: { finalizers: null } } }, merge);
      await until('the owner to go', () => fake.get(WIDGETS, 'tdl-gc', 'fg') === undefined);
      await until('the DELETED events', () => ownerWatch.events.some((e) => e.type === 'DELETED') && depWatch.events.filter((e) => e.type === 'DELETED').length === 2);
      assert.deepEqual(ownerWatch.events.map((e) => e.type), ['MODIFIED', 'DELETED']);
      const ownerGone = Number(ownerWatch.events[1]!.object.metadata?.resourceVersion);
      for (const e of depWatch.events.filter((x) => x.type === 'DELETED')) assert.ok(Number(e.object.metadata?.resourceVersion) < ownerGone);
      assert.deepEqual(fake.gcFailures(), []);
    } finally {
      ownerWatch.stop();
      depWatch.stop();
    }
  });

  test('owner references: Orphan removes the owner and leaves its dependents without the reference', async () => {
    const owner = fake.create('configmaps', { metadata: { namespace: 'tdl-gc', name: 'orphaner' } }) as Custom;
    const keep = fake.create('configmaps', { metadata: { namespace: 'tdl-gc', name: 'keeper' } }) as Custom;
    const ref = (o: Custom): object => ({ apiVersion: 'v1', kind: 'ConfigMap', name: o.metadata.name, uid: o.metadata.uid });
    fake.create('pods', { ...pod('tdl-gc', 'o1'), metadata: { namespace: 'tdl-gc', name: 'o1', ownerReferences: [ref(owner)] } });
    fake.create('pods', { ...pod('tdl-gc', 'o2'), metadata: { namespace: 'tdl-gc', name: 'o2', ownerReferences: [ref(owner), ref(keep)] } });
    // client-node types a DELETE's answer as a Status; the server answers with the object while it stays.
    const res = await fetch(`${fake.url}/api/v1/namespaces/tdl-gc/configmaps/orphaner`, {
      method: 'DELETE',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Orphan' }),
    });
    const answered = (await res.json()) as Custom;
    assert.equal(res.status, 200);
    assert.deepEqual([answered.metadata.finalizers, typeof answered.metadata.deletionTimestamp], [['orphan'], 'string']);
    await until('the owner to go', () => fake.get('configmaps', 'tdl-gc', 'orphaner') === undefined);
    assert.equal((fake.get('pods', 'tdl-gc', 'o1') as Custom).metadata.ownerReferences, undefined);
    assert.deepEqual((fake.get('pods', 'tdl-gc', 'o2') as Custom).metadata.ownerReferences, [ref(keep)]);
    await sleep(50);
    assert.ok(fake.get('pods', 'tdl-gc', 'o1') && fake.get('pods', 'tdl-gc', 'o2'), 'orphans stay');
    fake.delete('pods', 'tdl-gc', 'o1');
    fake.delete('pods', 'tdl-gc', 'o2');
    fake.delete('configmaps', 'tdl-gc', 'keeper');
  });

  test('owner references: a uid that names no object (or not the one of that name) is collected; an unserved kind is left alone', async () => {
    const live = fake.create('configmaps', { metadata: { namespace: 'tdl-gc', name: 'live' } }) as Custom;
    await core.createNamespacedConfigMap({
      namespace: 'tdl-gc',
      body: { metadata: { name: 'dangling', ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'never', uid: '00000000-0000-0000-0000-000000000001' }] } },
    });
    await core.createNamespacedConfigMap({
      namespace: 'tdl-gc',
      body: { metadata: { name: 'wrong-uid', ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'live', uid: '00000000-0000-0000-0000-000000000002' }] } },
    });
    await core.createNamespacedConfigMap({
      namespace: 'tdl-gc',
      body: { metadata: { name: 'unresolvable', ownerReferences: [{ apiVersion: 'nowhere.example.com/v1', kind: 'Nothing', name: 'x', uid: '00000000-0000-0000-0000-000000000003' }] } },
    });
    await until('the dangling dependents to go', () => fake.get('configmaps', 'tdl-gc', 'dangling') === undefined && fake.get('configmaps', 'tdl-gc', 'wrong-uid') === undefined);
    assert.ok(fake.get('configmaps', 'tdl-gc', 'live'));
    assert.ok(fake.get('configmaps', 'tdl-gc', 'unresolvable'));
    // A malformed reference is refused by the API, as the real ObjectMeta validation does.
    await assert.rejects(
      core.createNamespacedConfigMap({ namespace: 'tdl-gc', body: { metadata: { name: 'bad', ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'live', uid: '' }] } } }),
      (err) => statusBody(err).code === 422 && /metadata\.ownerReferences\.uid/.test(statusBody(err).message),
    );
    assert.equal(live.metadata.name, 'live');
    fake.delete('configmaps', 'tdl-gc', 'live');
    fake.delete('configmaps', 'tdl-gc', 'unresolvable');
  });

  /** One round of a LeaseLock-style leader election (client-go's tryAcquireOrRenew): true when `me` holds the lease after it. */
  async function tryAcquireOrRenew(me: string, name: string, durationSeconds: number): Promise<boolean> {
    const now = new V1MicroTime();
    let current: V1Lease;
    try {
      current = await leases.readNamespacedLease({ namespace: 'tdl-lease', name });
    } catch (err) {
      if (statusCode(err) !== 404) throw err;
      try {
        await leases.createNamespacedLease({
          namespace: 'tdl-lease',
          body: { metadata: { name }, spec: { holderIdentity: me, leaseDurationSeconds: durationSeconds, acquireTime: now, renewTime: now, leaseTransitions: 0 } },
        });
        return true;
      } catch (createErr) {
        if (statusCode(createErr) === 409) return false;
        throw createErr;
      }
    }
    const spec = current.spec ?? {};
    const renewed = Date.parse(String(spec.renewTime));
    const held = spec.holderIdentity !== undefined && spec.holderIdentity !== '' && spec.holderIdentity !== me;
    if (held && renewed + (spec.leaseDurationSeconds ?? 0) * 1000 > Date.now()) return false;
    const next: V1Lease = {
      ...current,
      spec: {
        ...spec,
        holderIdentity: me,
        leaseDurationSeconds: durationSeconds,
        renewTime: now,
        acquireTime: spec.holderIdentity === me ? spec.acquireTime : now,
        leaseTransitions: (spec.leaseTransitions ?? 0) + (spec.holderIdentity === me ? 0 : 1),
      },
    };
    try {
      await leases.replaceNamespacedLease({ namespace: 'tdl-lease', name, body: next });
      return true;
    } catch (err) {
      if (statusCode(err) === 409) return false;
      throw err;
    }
  }

  test('Leases: LeaseLock-style election has one winner per round; a stale renew is 409; the lease moves on expiry with leaseTransitions', async () => {
    const w = await collectWatch(kc, '/apis/coordination.k8s.io/v1/namespaces/tdl-lease/leases', { resourceVersion: String(fake.resourceVersion) });
    try {
      const first = await Promise.all(['a', 'b', 'c'].map((me) => tryAcquireOrRenew(me, 'tdl-leader', 2)));
      assert.equal(first.filter(Boolean).length, 1, `one winner: ${JSON.stringify(first)}`);
      const leader = (fake.get('leases', 'tdl-lease', 'tdl-leader') as V1Lease).spec!.holderIdentity!;
      // MicroTime as the real server stores it: six fractional digits, UTC.
      const stored = fake.get('leases', 'tdl-lease', 'tdl-leader') as { spec: { renewTime: string; acquireTime: string } };
      assert.match(stored.spec.renewTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
      assert.equal(await tryAcquireOrRenew(leader, 'tdl-leader', 2), true);
      const others = ['a', 'b', 'c'].filter((x) => x !== leader);
      assert.deepEqual(await Promise.all(others.map((me) => tryAcquireOrRenew(me, 'tdl-leader', 2))), [false, false]);

      // Two writers racing on the same resourceVersion: one update wins, the other gets 409 Conflict.
      const seen = await leases.readNamespacedLease({ namespace: 'tdl-lease', name: 'tdl-leader' });
      const race = await Promise.allSettled(others.map((me) => leases.replaceNamespacedLease({ namespace: 'tdl-lease', name: 'tdl-leader', body: { ...seen, spec: { ...seen.spec, holderIdentity: me } } })));
      assert.equal(race.filter((r) => r.status === 'fulfilled').length, 1);
      const lost = race.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      assert.deepEqual([statusBody(lost.reason).code, statusBody(lost.reason).reason, statusBody(lost.reason).details], [409, 'Conflict', { name: 'tdl-leader', group: 'coordination.k8s.io', kind: 'leases' }]);
      // The Lease strategy refuses an update without a resourceVersion.
      await assert.rejects(
        leases.replaceNamespacedLease({ namespace: 'tdl-lease', name: 'tdl-leader', body: { metadata: { name: 'tdl-leader' }, spec: { holderIdentity: 'x' } } }),
        (err) => statusBody(err).code === 422 && /must be specified for an update/.test(statusBody(err).message),
      );
      const holder = (fake.get('leases', 'tdl-lease', 'tdl-leader') as V1Lease).spec!.holderIdentity!;
      const transitions = (fake.get('leases', 'tdl-lease', 'tdl-leader') as V1Lease).spec!.leaseTransitions!;
      await sleep(2100);
      const taker = ['a', 'b', 'c'].find((x) => x !== holder)!;
      assert.equal(await tryAcquireOrRenew(taker, 'tdl-leader', 2), true);
      const after = fake.get('leases', 'tdl-lease', 'tdl-leader') as V1Lease;
      assert.deepEqual([after.spec?.holderIdentity, after.spec?.leaseTransitions], [taker, transitions + 1]);

      const list = await leases.listNamespacedLease({ namespace: 'tdl-lease' });
      assert.deepEqual(list.items.map((l) => l.metadata?.name), ['tdl-leader']);
      await until('the watch to follow', () => w.events.some((e) => e.type === 'MODIFIED' && Number(e.object.metadata?.resourceVersion) === Number(after.metadata?.resourceVersion)));
      assert.equal(w.events[0]!.type, 'ADDED');
    } finally {
      w.stop();
    }
  });

  test('Leases: a MicroTime with milliseconds (Date#toISOString) is 400 as on kube-apiserver; leaseDurationSeconds 0 is 422', async () => {
    await assert.rejects(
      leases.createNamespacedLease({ namespace: 'tdl-lease', body: { metadata: { name: 'tdl-ms' }, spec: { holderIdentity: 'a', renewTime: new Date() as V1MicroTime } } }),
      (err) => {
        const st = statusBody(err);
        assert.equal(st.code, 400);
        assert.match(st.message, /^Lease in version "v1" cannot be handled as a Lease: .*2006-01-02T15:04:05\.000000Z07:00/);
        return true;
      },
    );
    await assert.rejects(
      leases.createNamespacedLease({ namespace: 'tdl-lease', body: { metadata: { name: 'tdl-zero' }, spec: { holderIdentity: 'a', leaseDurationSeconds: 0 } } }),
      (err) => statusBody(err).code === 422 && /spec\.leaseDurationSeconds: Invalid value: 0: must be greater than 0/.test(statusBody(err).message),
    );
    // An offset is stored as UTC.
    const l = await leases.createNamespacedLease({ namespace: 'tdl-lease', body: { metadata: { name: 'tdl-tz' }, spec: { renewTime: '2026-01-01T10:00:00.123456+02:00' as unknown as V1MicroTime } } });
    assert.equal(String(l.spec?.renewTime), '2026-01-01T08:00:00.123456Z');
  });

  test('status subresource: the main resource ignores .status, /status changes only .status; generation moves on spec changes only', async () => {
    const base = { apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'Gadget', metadata: { name: 'g' }, spec: { size: 1 }, status: { phase: 'Made-up' } };
    const created = (await custom.createNamespacedCustomObject({ ...gadgets, namespace: 'tdl-status', body: base })) as Custom;
    assert.equal(created.status, undefined, 'a create does not set status');
    assert.equal(created.metadata.generation, 1);

    const s1 = (await custom.replaceNamespacedCustomObjectStatus({ ...gadgets, namespace: 'tdl-status', name: 'g', body: { ...created, spec: { size: 99 }, metadata: { ...created.metadata, labels: { x: 'y' } }, status: { phase: 'Ready', observedGeneration: 1 } } })) as Custom;
    assert.deepEqual([s1.spec, s1.status, s1.metadata.labels, s1.metadata.generation], [{ size: 1 }, { phase: 'Ready', observedGeneration: 1 }, undefined, 1]);
    assert.ok(Number(s1.metadata.resourceVersion) > Number(created.metadata.resourceVersion));

    const m1 = (await custom.replaceNamespacedCustomObject({ ...gadgets, namespace: 'tdl-status', name: 'g', body: { ...s1, spec: { size: 2 }, status: { phase: 'Overwritten' } } })) as Custom;
    assert.deepEqual([m1.spec, m1.status, m1.metadata.generation], [{ size: 2 }, { phase: 'Ready', observedGeneration: 1 }, 2]);

    const p1 = (await custom.patchNamespacedCustomObjectStatus({ ...gadgets, namespace: 'tdl-status', name: 'g', body: { spec: { size: 7 }, status: { observedGeneration: 2 } } }, merge)) as Custom;
    assert.deepEqual([p1.spec, p1.status, p1.metadata.generation], [{ size: 2 }, { phase: 'Ready', observedGeneration: 2 }, 2]);

    // A patch of the main resource that touches only status changes nothing: same resourceVersion, no event.
    const rv = fake.resourceVersion;
    const p2 = (await custom.patchNamespacedCustomObject({ ...gadgets, namespace: 'tdl-status', name: 'g', body: { status: { phase: 'Ignored' } } }, merge)) as Custom;
    assert.deepEqual([p2.status?.phase, p2.metadata.resourceVersion, fake.resourceVersion], ['Ready', p1.metadata.resourceVersion, rv]);
    // A label change is a new resourceVersion, not a new generation.
    const p3 = (await custom.patchNamespacedCustomObject({ ...gadgets, namespace: 'tdl-status', name: 'g', body: { metadata: { labels: { l: '1' } } } }, merge)) as Custom;
    assert.deepEqual([p3.metadata.generation, Number(p3.metadata.resourceVersion) > Number(p2.metadata.resourceVersion)], [2, true]);
    // /status takes preconditions too.
    await assert.rejects(
      custom.replaceNamespacedCustomObjectStatus({ ...gadgets, namespace: 'tdl-status', name: 'g', body: { ...p1, status: { phase: 'Stale' } } }),
      (err) => statusBody(err).reason === 'Conflict',
    );
    const discovery = (await (await fetch(`${fake.url}/apis/${TEST_CRD_GROUP}/v1`)).json()) as { resources: Array<{ name: string; verbs: string[] }> };
    assert.deepEqual(discovery.resources.find((r) => r.name === 'gadgets/status')?.verbs, ['get', 'patch', 'update']);
    assert.equal(discovery.resources.find((r) => r.name === 'widgets/status'), undefined);

    // Without the subresource: /status is not served, and the main resource writes status, which counts as a change of generation.
    const w = (await custom.createNamespacedCustomObject({ ...widgets, namespace: 'tdl-status', body: { ...base, kind: 'Widget', metadata: { name: 'nw' } } })) as Custom;
    assert.deepEqual(w.status, { phase: 'Made-up' });
    const w2 = (await custom.patchNamespacedCustomObject({ ...widgets, namespace: 'tdl-status', name: 'nw', body: { status: { phase: 'Ready' } } }, merge)) as Custom;
    assert.deepEqual([w2.status?.phase, w2.metadata.generation], ['Ready', 2]);
    assert.equal((await fetch(`${fake.url}/apis/${TEST_CRD_GROUP}/v1/namespaces/tdl-status/widgets/nw/status`)).status, 404);

    // Built-ins with a status subresource: a pod PUT does not change its status (kubelet writes it through /status).
    fake.create('pods', { ...pod('tdl-status', 'sp'), status: { phase: 'Running', podIP: '10.0.0.9' } });
    const cur = await core.readNamespacedPod({ namespace: 'tdl-status', name: 'sp' });
    const put = await core.replaceNamespacedPod({ namespace: 'tdl-status', name: 'sp', body: { ...cur, status: { phase: 'Failed' } } });
    assert.equal(put.status?.phase, 'Running');
    const st = await core.replaceNamespacedPodStatus({ namespace: 'tdl-status', name: 'sp', body: { ...cur, status: { ...cur.status, podIP: '10.0.0.10' } } });
    assert.equal(st.status?.podIP, '10.0.0.10');
  });

  test('cluster-scoped custom resources: list, watch from a resourceVersion in order, bookmarks, an informer', async () => {
    const body = (name: string, size: number): object => ({ apiVersion: `${TEST_CRD_GROUP}/v1`, kind: 'ClusterThing', metadata: { name }, spec: { size } });
    await custom.createClusterCustomObject({ ...things, body: body('t1', 1) });
    const listed = (await custom.listClusterCustomObject(things)) as { metadata: { resourceVersion: string }; items: Custom[] };
    assert.deepEqual(listed.items.map((i) => [i.metadata.name, i.metadata.namespace]), [['t1', undefined]]);
    assert.equal(listed.metadata.resourceVersion, String(fake.resourceVersion));
    const path = `/apis/${TEST_CRD_GROUP}/v1/clusterthings`;
    const w = await collectWatch(kc, path, { resourceVersion: listed.metadata.resourceVersion, allowWatchBookmarks: true });
    const informer = makeInformer(kc, path, () => custom.listClusterCustomObject(things) as never);
    const seen: string[] = [];
    informer.on('add', (o: { metadata?: { name?: string } }) => seen.push(`add ${o.metadata?.name}`));
    informer.on('update', (o: { metadata?: { name?: string } }) => seen.push(`update ${o.metadata?.name}`));
    informer.on('delete', (o: { metadata?: { name?: string } }) => seen.push(`delete ${o.metadata?.name}`));
    try {
      await informer.start();
      await custom.createClusterCustomObject({ ...things, body: body('t2', 2) });
      await custom.patchClusterCustomObject({ ...things, name: 't1', body: { spec: { size: 10 } } }, merge);
      await custom.deleteClusterCustomObject({ ...things, name: 't2' });
      await until('the changes and a bookmark', () => w.events.filter((e) => e.type !== 'BOOKMARK').length === 3 && w.events.some((e) => e.type === 'BOOKMARK'));
      const changes = w.events.filter((e) => e.type !== 'BOOKMARK');
      assert.deepEqual(changes.map((e) => `${e.type} ${e.object.metadata?.name}`), ['ADDED t2', 'MODIFIED t1', 'DELETED t2']);
      const rvs = changes.map((e) => Number(e.object.metadata?.resourceVersion));
      assert.deepEqual(rvs, [...rvs].sort((a, b) => a - b));
      assert.equal(w.events.find((e) => e.type === 'BOOKMARK')!.object.kind, 'ClusterThing');
      await until('the informer', () => seen.includes('delete t2'));
      assert.deepEqual(seen, ['add t1', 'add t2', 'update t1', 'delete t2']);
      // A cluster-scoped resource is not served under a namespace.
      assert.equal((await fetch(`${fake.url}/apis/${TEST_CRD_GROUP}/v1/namespaces/default/clusterthings`)).status, 404);
    } finally {
      w.stop();
      await informer.stop();
    }
  });
});
