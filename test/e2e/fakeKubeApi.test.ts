// The fake Kubernetes API server the Kubernetes tests run against, checked
// through the client the agent uses (@kubernetes/client-node 1.4.0): list with
// the global resourceVersion, watch from a resourceVersion in order, bookmarks,
// 410 Gone after a compaction leading an informer to relist and deliver the
// delete it missed, dropped watches resumed without a relist, the server going
// away and coming back, field and label selectors, Status errors, CRDs that
// register their resources in discovery. A fake that drifted from the real
// server here would make every Kubernetes test prove less than it claims.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import {
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  ListWatch,
  makeInformer,
  type V1Pod,
  Watch,
} from '@kubernetes/client-node';
import { FakeKubeApi, KubeStatusError } from '../support/fakeKubeApi.js';

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
    try {
      await onNode.start();
      await labelled.start();
      await until('both watches', () => fake.openWatches === 2);
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
