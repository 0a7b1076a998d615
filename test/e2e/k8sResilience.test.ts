// The agent (eBPF datapath) following the fake Kubernetes API server through
// its outages: the API server gone for several seconds and back loses no
// endpoint and drops no policy (a denied flow stays denied throughout, an
// allowed one allowed), changes made meanwhile arrive after, the watches
// resume, and the endpoints are not regenerated for nothing (the agent has no
// regeneration counter in its API: its debug lines 'endpoint regenerated' are
// counted); a compaction while the watches were cut leads to a relist (410
// Gone) that delivers a policy deleted meanwhile.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { requireRoot } from '../support/root.js';
import { K8sStatus, k8sSceneHooks, type K8sPod, networkPolicyObject, policyNames, regenerationsByEndpoint, waitAllRealized } from '../support/k8sScene.js';

requireRoot('the Kubernetes resilience tests');

const NS = 'tdl-k8s-res';
const TCP_PORT = 8080;
const PROBE_MS = 300;
/** How long the API server stays away. */
const OUTAGE_MS = 6000;
/** After the API server is back, changes made meanwhile must arrive within this (the watchers' back-off included). */
const CATCH_UP_MS = 20_000;
const DB_POLICY = `NetworkPolicy/${NS}/db-from-web`;

let db: K8sPod;
let web: K8sPod;
let intruder: K8sPod;

const scene = k8sSceneHooks('k8r', { nodeName: 'tdl-node-k8r', podCidr: '10.246.0.0/24', namespaces: { [NS]: { env: 'res' } }, tcpPorts: [TCP_PORT] }, async (s) => {
  db = await s.addPod({ name: 'db', namespace: NS, labels: { app: 'db' } });
  web = await s.addPod({ name: 'web', namespace: NS, labels: { app: 'web' } });
  intruder = await s.addPod({ name: 'intruder', namespace: NS, labels: { app: 'intruder' } });
  s.fake.create('networkpolicies', networkPolicyObject(NS, 'db-from-web', { podSelector: { matchLabels: { app: 'db' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ podSelector: { matchLabels: { app: 'web' } } }] }] }));
  await until(async () => (await policyNames(s.node)).includes(DB_POLICY), 10_000, 'the NetworkPolicy reaches the agent');
  await waitAllRealized(s.node);
});

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<number> {
  const started = Date.now();
  for (;;) {
    if (await check()) return Date.now() - started;
    if (Date.now() - started > timeoutMs) throw new Error(`${what}: not so after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function verdict(from: K8sPod, to: K8sPod): Promise<'allowed' | 'denied'> {
  const r = await scene().agent(from.key).tcpOnce({ dst: to.ip, port: TCP_PORT }, PROBE_MS);
  if (r.outcome === 'open') return 'allowed';
  if (r.outcome === 'timeout') return 'denied';
  throw new Error(`${from.key} -> ${to.key}: ${r.outcome} ${r.detail ?? ''}`);
}

/** What must hold at every moment: the flows' verdicts, the endpoints (ID, identity), the policy. */
async function invariants(): Promise<{ flows: Record<string, string>; endpoints: string[]; policy: boolean }> {
  const eps = (await scene().node.agent.client.listEndpoints()) as unknown as Endpoint[];
  return {
    flows: { 'web->db': await verdict(web, db), 'intruder->db': await verdict(intruder, db) },
    endpoints: eps.map((e) => `${e.id} ${e.podNamespace}/${e.podName} identity ${e.identity} ${e.state}`).sort(),
    policy: (await policyNames(scene().node)).includes(DB_POLICY),
  };
}

/** Requests of one verb the fake served (its `requests()` counts by verb and by resource). */
function served(verb: string): number {
  const r = scene().fake.requests();
  if (typeof r[verb] === 'number') return r[verb];
  return Object.entries(r).filter(([k]) => k.startsWith(`${verb} `) || k.startsWith(`${verb}:`) || k.startsWith(`${verb}/`)).reduce((s, [, v]) => s + v, 0);
}

function regenerationTotal(): number {
  return [...regenerationsByEndpoint(scene().node.agent).values()].reduce((a, b) => a + b, 0);
}

test('before the outage: the NetworkPolicy from the API is enforced', async () => {
  const s = await invariants();
  assert.deepEqual(s.flows, { 'web->db': 'allowed', 'intruder->db': 'denied' });
  assert.equal(s.endpoints.length, 3, JSON.stringify(s.endpoints));
  assert.ok(regenerationTotal() > 0, 'the agent logs its regenerations at debug level (the count this file relies on)');
});

test('the API server away for several seconds and back: nothing lost, nothing regenerated for nothing, the watches resume', async (t) => {
  const baseline = await invariants();
  const regenBefore = regenerationTotal();
  const watchesBefore = served('watch');
  const listsBefore = served('list');
  const resources = (await K8sStatus.of(scene().node)).resources.map((r) => r.resource);
  const watchesOf = () => Object.fromEntries(resources.map((r) => [r, served(`watch:${r}`)]));
  const perResourceBefore = watchesOf();
  await scene().fake.pause();
  const pausedAt = Date.now();
  let sawDisconnected = false;
  try {
    while (Date.now() - pausedAt < OUTAGE_MS) {
      assert.deepEqual(await invariants(), baseline, `${Date.now() - pausedAt} ms into the outage: flows, endpoints and policy as before`);
      const k8s = await K8sStatus.of(scene().node);
      if (!k8s.connected) sawDisconnected = true;
      await new Promise((r) => setTimeout(r, 500));
    }
    // The health check says so (status degraded) while the API server is away.
    const h = await scene().node.agent.client.request<{ status: string }>('GET', '/status');
    t.diagnostic(`during the outage: GET /status status ${h.status}, kubernetes.connected seen false: ${sawDisconnected}`);
  } finally {
    await scene().fake.resume();
  }
  const resumedAt = Date.now();
  const resumedAll = () => resources.every((r) => served(`watch:${r}`) > perResourceBefore[r]!);
  const ms = await until(async () => (await K8sStatus.of(scene().node)).connected && resumedAll(), CATCH_UP_MS, `every resource's watch resumed after the outage (watches before ${JSON.stringify(perResourceBefore)}, now ${JSON.stringify(watchesOf())})`);
  t.diagnostic(`API server back -> connected again with the watches resumed in ${ms} ms; requests ${JSON.stringify(scene().fake.requests())}`);
  await new Promise((r) => setTimeout(r, 1000));
  assert.deepEqual(await invariants(), baseline, 'after the outage: flows, endpoints and policy as before');
  const k8s = await K8sStatus.of(scene().node);
  assert.ok(k8s.synced, JSON.stringify(k8s));
  const restarts = k8s.resources.map((r) => `${r.resource}:${r.restarts}`);
  t.diagnostic(`watch restarts per resource: ${restarts.join(' ')}; lists ${listsBefore} -> ${served('list')}, watches ${watchesBefore} -> ${served('watch')}`);
  assert.ok(sawDisconnected, 'GET /status kubernetes.connected was false while the API server was away');
  const regenerations = regenerationTotal() - regenBefore;
  t.diagnostic(`endpoint regenerations from the outage and resync with nothing changed: ${regenerations} (${Date.now() - resumedAt} ms after the API came back)`);
  assert.equal(regenerations, 0, `a resync that finds nothing changed regenerates nothing: ${JSON.stringify(Object.fromEntries(regenerationsByEndpoint(scene().node.agent)))}`);
});

test('changes made while the API server was away arrive after it is back; regenerations stay bounded', async (t) => {
  const regenBefore = regenerationsByEndpoint(scene().node.agent);
  const webBefore = await scene().endpoint(web);
  await scene().fake.pause();
  try {
    // Meanwhile: web gets a label, and a new policy isolates web from everyone.
    scene().setPodLabels(web, { app: 'web', rev: '2' });
    scene().fake.create('networkpolicies', networkPolicyObject(NS, 'web-isolated', { podSelector: { matchLabels: { app: 'web' } }, policyTypes: ['Ingress'], ingress: [] }));
    await new Promise((r) => setTimeout(r, OUTAGE_MS / 2));
    assert.equal(await verdict(intruder, db), 'denied', 'the denied flow stays denied during the outage');
    assert.equal(await verdict(db, web), 'allowed', 'the new policy is not known yet');
  } finally {
    await scene().fake.resume();
  }
  const resumed = Date.now();
  const { endpoint, ms } = await scene().waitEndpoint(web, (e) => e.labels.includes('k8s:rev=2') && e.state === 'ready', CATCH_UP_MS, 'web\'s label added during the outage');
  assert.notEqual(endpoint.identity, webBefore.identity);
  await until(async () => (await policyNames(scene().node)).includes(`NetworkPolicy/${NS}/web-isolated`), CATCH_UP_MS, 'the policy created during the outage');
  await waitAllRealized(scene().node);
  const policyMs = Date.now() - resumed;
  assert.equal(await verdict(db, web), 'denied', 'the policy created during the outage is enforced');
  assert.equal(await verdict(intruder, db), 'denied', 'the denied flow stays denied after');
  assert.equal(await verdict(web, db), 'allowed', 'web (relabelled, still app=web) still reaches db');
  t.diagnostic(`after the API server came back: the label in ${ms} ms, the policy enforced in ${policyMs} ms`);
  const regenAfter = regenerationsByEndpoint(scene().node.agent);
  const delta = Object.fromEntries([db, web, intruder].map((p) => [p.key, (regenAfter.get(p.endpointId) ?? 0) - (regenBefore.get(p.endpointId) ?? 0)]));
  t.diagnostic(`endpoint regenerations for one relabel and one new policy: ${JSON.stringify(delta)}`);
  // web: its new identity, the new policy; db: its peer web's new identity; intruder: maybe the same. A storm is one per object relisted.
  for (const [k, n] of Object.entries(delta)) assert.ok(n <= 4, `${k} regenerated ${n} times for two changes: ${JSON.stringify(delta)}`);
});

test('watches cut mid-stream (connections reset): they come back and a change made meanwhile arrives', async (t) => {
  const resources = (await K8sStatus.of(scene().node)).resources.map((r) => r.resource);
  const watchesBefore = Object.fromEntries(resources.map((r) => [r, served(`watch:${r}`)]));
  const listsBefore = served('list');
  const regenBefore = regenerationsByEndpoint(scene().node.agent);
  scene().fake.dropWatches({ abrupt: true });
  const cut = Date.now();
  scene().setPodLabels(intruder, { app: 'intruder', cut: '1' });
  const { ms } = await scene().waitEndpoint(intruder, (e) => e.labels.includes('k8s:cut=1') && e.state === 'ready', CATCH_UP_MS, 'intruder\'s label added as the watches were cut');
  await until(async () => resources.every((r) => served(`watch:${r}`) > watchesBefore[r]!), CATCH_UP_MS, 'every watch back after the cut');
  t.diagnostic(`watches reset -> the change made meanwhile arrived in ${ms} ms (${Date.now() - cut} ms until every watch was back); lists ${listsBefore} -> ${served('list')}`);
  await waitAllRealized(scene().node);
  assert.equal(await verdict(intruder, db), 'denied', 'the denied flow stays denied');
  assert.equal(await verdict(web, db), 'allowed');
  const regenAfter = regenerationsByEndpoint(scene().node.agent);
  const delta = Object.fromEntries([db, web, intruder].map((p) => [p.key, (regenAfter.get(p.endpointId) ?? 0) - (regenBefore.get(p.endpointId) ?? 0)]));
  t.diagnostic(`endpoint regenerations for one relabel across the cut: ${JSON.stringify(delta)}`);
  for (const [k, n] of Object.entries(delta)) assert.ok(n <= 3, `${k} regenerated ${n} times for one relabel: ${JSON.stringify(delta)}`);
});

test('a compaction while the watches were cut: the 410 relist delivers a policy deleted meanwhile', async (t) => {
  assert.equal(await verdict(db, web), 'denied', 'web-isolated in force');
  const listsBefore = served('list');
  const npListsBefore = served('list:networkpolicies');
  const npBefore = (await K8sStatus.of(scene().node)).resource('networkpolicies');
  // In one turn of the event loop: the watch streams end, the policy goes, history is forgotten.
  // The watchers come back with a resourceVersion from before the compaction: 410 Gone, then a list.
  scene().fake.dropWatches();
  scene().fake.delete('networkpolicies', NS, 'web-isolated');
  scene().fake.compact();
  const started = Date.now();
  await until(async () => !(await policyNames(scene().node)).includes(`NetworkPolicy/${NS}/web-isolated`), CATCH_UP_MS, 'the policy deleted during the cut is gone');
  await waitAllRealized(scene().node);
  t.diagnostic(`compaction + dropped watches -> the deleted policy gone after the relist in ${Date.now() - started} ms; lists ${listsBefore} -> ${served('list')}; requests ${JSON.stringify(scene().fake.requests())}`);
  assert.equal(await verdict(db, web), 'allowed', 'the deletion is enforced');
  assert.equal(await verdict(intruder, db), 'denied', 'the policy that was not deleted stays');
  assert.ok(served('list:networkpolicies') > npListsBefore, `the NetworkPolicy watcher listed again after its 410 Gone: ${JSON.stringify(scene().fake.requests())}`);
  const npAfter = (await K8sStatus.of(scene().node)).resource('networkpolicies');
  assert.equal(npAfter.objects, npBefore.objects - 1, `the cache holds what the API holds: ${JSON.stringify(npAfter)}`);
});
