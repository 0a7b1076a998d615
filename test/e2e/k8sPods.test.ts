// Pods from the Kubernetes API (the fake API server on loopback; no real one
// can run here) on a real agent with the eBPF datapath: a CNI ADD that
// carries only kubelet's CNI_ARGS gets the pod's labels, its namespace's
// labels and its service account from the API; a pod relabelled or its
// namespace relabelled in the API changes the endpoint's identity; a Pod
// object that reaches the agent's cache after ADD started is waited for; a
// pod deleted from the API keeps its endpoint until CNI DEL (kubelet's
// teardown); pods of other nodes are not watched.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { requireRoot } from '../support/root.js';
import { podObject } from '../support/k8sObjects.js';
import { K8sStatus, k8sSceneHooks, type K8sPod } from '../support/k8sScene.js';

requireRoot('the Kubernetes pod tests');

const NS_A = 'tdl-k8s-a';
const NS_B = 'tdl-k8s-b';
const NS_LABEL = 'k8s:io.tendril.k8s.namespace.labels.';
const TCP_PORT = 8080;
/** How long a change in the API may take to reach an endpoint (a watch event, an identity, a regeneration). */
const FOLLOW_MS = 10_000;

let web: K8sPod;
let db: K8sPod;

const scene = k8sSceneHooks('k8p', { nodeName: 'tdl-node-k8p', podCidr: '10.243.0.0/24', namespaces: { [NS_A]: { team: 'a' }, [NS_B]: { team: 'b' } }, tcpPorts: [TCP_PORT] }, async (s) => {
  web = await s.addPod({ name: 'web', namespace: NS_A, labels: { app: 'web' }, serviceAccount: 'web-sa' });
  db = await s.addPod({ name: 'db', namespace: NS_A, labels: { app: 'db' } });
});

const has = (e: Endpoint, label: string) => e.labels.includes(label);

test('CNI ADD with kubelet\'s CNI_ARGS only: the endpoint carries the pod\'s labels, its namespace\'s labels and service account from the API', async () => {
  const e = await scene().endpoint(web);
  assert.equal(e.podNamespace, NS_A);
  assert.equal(e.podName, 'web');
  for (const l of ['k8s:app=web', `k8s:io.kubernetes.pod.namespace=${NS_A}`, `${NS_LABEL}team=a`, 'k8s:io.tendril.k8s.policy.serviceaccount=web-sa']) {
    assert.ok(has(e, l), `endpoint labels hold ${l}: ${JSON.stringify(e.labels)}`);
  }
  assert.ok(e.identity !== undefined && e.identity > 0, `an identity: ${e.identity}`);
  const d = await scene().endpoint(db);
  assert.notEqual(d.identity, e.identity, 'web and db differ in labels, so in identity');
  assert.ok(has(d, 'k8s:io.tendril.k8s.policy.serviceaccount=default'), JSON.stringify(d.labels));
  // The pods talk (no policy): the datapath holds both.
  const r = await scene().agent(web.key).tcpOnce({ dst: db.ip, port: TCP_PORT });
  assert.equal(r.outcome, 'open', `web -> db: ${JSON.stringify(r)}`);
  assert.equal(r.answers[0]?.name, db.key);

  const k8s = await K8sStatus.of(scene().node);
  assert.ok(k8s.connected && k8s.synced, `GET /status kubernetes: ${JSON.stringify(k8s)}`);
  assert.equal(k8s.apiServer.replace(/\/$/, ''), scene().fake.url.replace(/\/$/, ''));
  assert.equal(k8s.resource('pods').objects, 2, `pods in the agent's cache: ${JSON.stringify(k8s.resource('pods'))}`);
  for (const r of ['pods', 'namespaces', 'networkpolicies', 'services', 'endpointslices']) assert.ok(k8s.resource(r).synced, `${r} synced: ${JSON.stringify(k8s.resource(r))}`);
});

test('a pod relabelled in the API: the endpoint\'s labels and identity follow', async (t) => {
  const before = await scene().endpoint(web);
  const started = Date.now();
  scene().setPodLabels(web, { app: 'web', tier: 'front' });
  const { endpoint, ms } = await scene().waitEndpoint(web, (e) => has(e, 'k8s:tier=front') && e.identity !== before.identity && e.state === 'ready', FOLLOW_MS, 'web relabelled tier=front');
  t.diagnostic(`pod label change -> new identity ${before.identity} -> ${endpoint.identity}, endpoint ready: ${ms} ms (${Date.now() - started} ms since the update)`);
  assert.ok(has(endpoint, 'k8s:app=web'), JSON.stringify(endpoint.labels));
  assert.ok(endpoint.identityLabels?.includes('k8s:tier=front'), `the identity is made of the new labels: ${JSON.stringify(endpoint.identityLabels)}`);
  // A label taken away goes too.
  scene().setPodLabels(web, { app: 'web' });
  const back = await scene().waitEndpoint(web, (e) => !has(e, 'k8s:tier=front') && e.state === 'ready', FOLLOW_MS, 'web without tier');
  // The identity number may be a new one (the old was released when nothing held it); its labels are the old ones.
  assert.deepEqual([...(back.endpoint.identityLabels ?? [])].sort(), [...(before.identityLabels ?? [])].sort(), 'the same labels as before: an identity of the same labels');
});

test('a namespace relabelled in the API: the identity of every pod in it follows', async (t) => {
  const [w0, d0] = [await scene().endpoint(web), await scene().endpoint(db)];
  scene().setNamespaceLabels(NS_A, { team: 'a2', env: 'prod' });
  const w = await scene().waitEndpoint(web, (e) => has(e, `${NS_LABEL}team=a2`) && has(e, `${NS_LABEL}env=prod`) && !has(e, `${NS_LABEL}team=a`) && e.state === 'ready', FOLLOW_MS, 'web after the namespace relabel');
  const d = await scene().waitEndpoint(db, (e) => has(e, `${NS_LABEL}team=a2`) && e.state === 'ready', FOLLOW_MS, 'db after the namespace relabel');
  t.diagnostic(`namespace label change -> both pods' identities changed in ${Math.max(w.ms, d.ms)} ms`);
  assert.notEqual(w.endpoint.identity, w0.identity);
  assert.notEqual(d.endpoint.identity, d0.identity);
  assert.ok(has(w.endpoint, 'k8s:app=web'), 'pod labels kept');
});

test('a Pod object that reaches the agent after ADD started: ADD waits for it and takes its labels', async () => {
  const late = await scene().addPod({ name: 'late', namespace: NS_B, labels: { app: 'late' } }, { objectDelayMs: 700 });
  const e = await scene().endpoint(late);
  assert.ok(has(e, 'k8s:app=late') && has(e, `${NS_LABEL}team=b`), `ADD took the labels of the object created 700 ms after it started: ${JSON.stringify(e.labels)}`);
});

test('pods of other nodes are not in the agent\'s cache (field selector spec.nodeName)', async () => {
  const pods = async () => (await K8sStatus.of(scene().node)).resource('pods');
  const waitPods = async (want: (p: { objects: number; events: number }) => boolean, what: string) => {
    const deadline = Date.now() + FOLLOW_MS;
    for (;;) {
      const p = await pods();
      if (want(p)) return p;
      if (Date.now() > deadline) throw new Error(`${what}: the agent's pods ${JSON.stringify(p)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const before = await pods();
  scene().fake.create('pods', podObject({ namespace: NS_B, name: 'elsewhere', nodeName: 'tdl-node-other', labels: { app: 'x' } }));
  // A marker on this node, created after: once it is in the cache, the other node's pod would be too (events come in order).
  scene().fake.create('pods', podObject({ namespace: NS_B, name: 'marker', nodeName: scene().nodeName, labels: { app: 'marker' } }));
  await waitPods((p) => p.objects > before.objects, 'the marker pod reaches the agent');
  // Both came in one stream, in order, the other node's first: had it been delivered, it is counted by now.
  await new Promise((r) => setTimeout(r, 500));
  const now = await pods();
  assert.equal(now.objects, before.objects + 1, `only this node's new pod is cached: before ${JSON.stringify(before)}, now ${JSON.stringify(now)}`);
  scene().fake.delete('pods', NS_B, 'elsewhere');
  scene().fake.delete('pods', NS_B, 'marker');
  await waitPods((p) => p.objects === before.objects, 'the marker pod\'s deletion reaches the agent');
});

test('a pod deleted from the API keeps its endpoint and traffic until CNI DEL; CNI DEL removes it', async () => {
  const before = await scene().endpoint(db);
  const podsBefore = (await K8sStatus.of(scene().node)).resource('pods');
  scene().deletePodObject(db);
  // The agent has seen the delete once its cache holds one pod fewer.
  const deadline = Date.now() + FOLLOW_MS;
  for (;;) {
    const p = (await K8sStatus.of(scene().node)).resource('pods');
    if (p.objects === podsBefore.objects - 1) break;
    if (Date.now() > deadline) throw new Error(`the agent never saw db's deletion: ${JSON.stringify(p)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 500));
  const after = await scene().endpoint(db);
  assert.equal(after.id, before.id);
  assert.equal(after.identity, before.identity, 'identity kept while the sandbox lives');
  assert.deepEqual([...after.labels].sort(), [...before.labels].sort(), 'labels kept');
  const r = await scene().agent(web.key).tcpOnce({ dst: db.ip, port: TCP_PORT });
  assert.equal(r.outcome, 'open', `web -> db while db is terminating: ${JSON.stringify(r)}`);

  await scene().cniDel(db);
  const ids = ((await scene().node.agent.client.listEndpoints()) as unknown as Endpoint[]).map((e) => e.id);
  assert.ok(!ids.includes(before.id), `endpoint ${before.id} gone after CNI DEL: ${JSON.stringify(ids)}`);
});
