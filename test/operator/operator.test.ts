// tendril-operator in-process against the fake API server: leader election
// (one leader; a clean stop hands over at once; a leader cut off from the API
// steps down before its Lease could be taken), identity GC, endpoint GC,
// cluster-pool CIDRs (distinct per family, freed on node deletion, rebuilt by
// a new leader, exhaustion counted), /healthz and /metrics.
import assert from 'node:assert/strict';
import { after, afterEach, beforeEach, describe, test } from 'node:test';
import type { FakeKubeApi } from '../support/fakeKubeApi.js';
import type { Operator } from '../../src/operator/operator.js';
import { CustomObjectsApi, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import { ResourceInformer } from '../../src/k8s/resourceInformer.js';
import { CidrPool } from '../../src/operator/cidrPool.js';
import { ClusterPoolController } from '../../src/operator/clusterPoolController.js';
import { LeaderElector } from '../../src/operator/leaderElection.js';
import { OPERATOR_API_CALLS, OperatorApi } from '../../src/operator/operatorApi.js';
import { OperatorMetrics } from '../../src/operator/operatorMetrics.js';
import {
  createEndpoint,
  createIdentity,
  createNodeLease,
  createPod,
  createTendrilNode,
  httpGet,
  ipamOf,
  kubeConfigOf,
  leaseHolder,
  metricValue,
  NS,
  quietLogger,
  sleep,
  startFakeCluster,
  startOperator,
  waitFor,
} from './operatorScene.js';

let api: FakeKubeApi;
const operators: Operator[] = [];
async function operator(flags: Parameters<typeof startOperator>[1] = {}): Promise<Operator> {
  const op = await startOperator(api, flags);
  operators.push(op);
  return op;
}
async function stopAll(): Promise<void> {
  for (const op of operators.splice(0)) await op.stop();
}

beforeEach(async () => {
  api = await startFakeCluster();
});
afterEach(async () => {
  await stopAll();
  await api.stop();
});
after(stopAll);

/** Every request verb:resource the operators made is one OPERATOR_API_CALLS lists (the RBAC is checked against that list). */
function assertCallsListed(): void {
  const listed = new Set(OPERATOR_API_CALLS.flatMap((c) => c.verbs.map((v) => `${v}:${c.resource}`)));
  const made = Object.keys(api.requests()).filter((k) => k.includes(':') && !k.startsWith('discovery'));
  for (const k of made) assert.ok(listed.has(k), `request ${k} is in OPERATOR_API_CALLS`);
}

describe('leader election', () => {
  test('two operators: exactly one leads, the other follows it; both healthy; a clean stop hands over at once', async () => {
    const a = await operator({ id: 'op-a' });
    const b = await operator({ id: 'op-b' });
    const leader = await waitFor('a leader', () => (a.isLeader ? a : b.isLeader ? b : undefined));
    const follower = leader === a ? b : a;
    await sleep(2500); // longer than the lease: the leader renews, the follower never takes over
    assert.equal([a, b].filter((o) => o.isLeader).length, 1, 'one leader');
    assert.equal(leaseHolder(api), leader === a ? 'op-a' : 'op-b');
    for (const op of [a, b]) {
      const h = await httpGet(op.healthAddress.port, '/healthz');
      assert.equal(h.status, 200, h.body);
      assert.equal(JSON.parse(h.body).status, op === leader ? 'leading' : 'following');
    }
    const m = await httpGet(follower.healthAddress.port, '/metrics');
    assert.equal(metricValue(m.body, 'tendril_operator_is_leader'), 0);
    assert.equal(metricValue((await httpGet(leader.healthAddress.port, '/metrics')).body, 'tendril_operator_is_leader'), 1);

    const stoppedAt = Date.now();
    await leader.stop();
    operators.splice(operators.indexOf(leader), 1);
    assert.ok(leaseHolder(api) !== (leader === a ? 'op-a' : 'op-b'), 'released');
    await waitFor('the follower to lead', () => follower.isLeader, 1000);
    const took = Date.now() - stoppedAt;
    console.log(`# clean stop: the follower led ${took} ms after the leader's stop() began (lease 2 s)`);
    assert.equal(leaseHolder(api), follower === a ? 'op-a' : 'op-b', 'taken');
    assert.ok(took < 1000, `took over ${took} ms after a clean stop (lease 2 s)`);
    assertCallsListed();
  });

  test('three electors racing from the start: never two leaders at once, and one all along', async () => {
    const kc = await kubeConfigOf(api);
    const leading = new Set<string>();
    let overlap = 0;
    const electors = ['e1', 'e2', 'e3'].map(
      (id) =>
        new LeaderElector({
          kubeConfig: kc,
          namespace: NS,
          name: 'tdl-race',
          identity: id,
          leaseDurationSeconds: 1,
          logger: quietLogger(),
          onStartedLeading: () => {
            leading.add(id);
            if (leading.size > 1) overlap++;
          },
          onStoppedLeading: () => {
            leading.delete(id);
          },
        }),
    );
    try {
      for (const e of electors) e.start();
      await waitFor('a leader', () => leading.size === 1);
      const first = [...leading][0];
      await sleep(2500); // 2.5 lease durations of renewals
      assert.equal(overlap, 0, 'never two leaders');
      assert.deepEqual([...leading], [first], 'the first leader kept it');
      assert.equal(electors.filter((e) => e.isLeader).length, 1);
      const lease = api.get('leases', NS, 'tdl-race') as { spec: { holderIdentity: string; leaseTransitions: number } };
      assert.deepEqual([lease.spec.holderIdentity, lease.spec.leaseTransitions], [first, 0]);
    } finally {
      for (const e of electors) await e.stop();
    }
  });

  test('a leader cut off from the API steps down before its Lease expires; health says why', async () => {
    const a = await operator({ id: 'op-a' });
    await waitFor('a to lead', () => a.isLeader);
    const lease = () => api.get('leases', NS, 'tendril-operator') as { spec: { renewTime: string; leaseDurationSeconds: number } };
    await api.pause();
    // What the last renewal before the outage promised: nobody may take over before this.
    const expires = Date.parse(lease().spec.renewTime) + lease().spec.leaseDurationSeconds * 1000;
    await waitFor('a to step down', () => !a.isLeader, 5000);
    const steppedDown = Date.now();
    assert.ok(steppedDown < expires, `stepped down ${expires - steppedDown} ms before the lease expired (must be > 0)`);
    const h = await httpGet(a.healthAddress.port, '/healthz');
    assert.equal(h.status, 503);
    assert.match(JSON.parse(h.body).message, /disconnected|not renewed|no leader/);
    await api.resume();
    await waitFor('a to lead again', () => a.isLeader, 8000);
    await waitFor('healthy again', async () => (await httpGet(a.healthAddress.port, '/healthz')).status === 200, 8000);
  });
});

describe('identity GC', () => {
  test('unused → deleted after the grace; used → kept; used again within the grace → kept', async () => {
    const pod = createPod(api, 'web-1');
    createTendrilNode(api, 'node-a');
    createIdentity(api, 7001, 'unused');
    createIdentity(api, 7002, 'used');
    createIdentity(api, 7003, 'comeback');
    createEndpoint(api, { name: 'web-1', node: 'node-a', identity: 7002, owner: pod });
    const started = Date.now();
    const op = await operator({ id: 'op-a', identityGcGrace: '1500ms' });
    await waitFor('leading', () => op.isLeader);
    await sleep(700);
    assert.ok(api.get('tendrilidentities', undefined, '7001') !== undefined, 'not before the grace');
    // 7003 gets a user within its grace.
    const pod2 = createPod(api, 'web-2');
    createEndpoint(api, { name: 'web-2', node: 'node-a', identity: 7003, owner: pod2 });
    await waitFor('7001 collected', () => api.get('tendrilidentities', undefined, '7001') === undefined, 5000);
    assert.ok(Date.now() - started >= 1500, 'collected only after the grace');
    await sleep(1500);
    assert.ok(api.get('tendrilidentities', undefined, '7002') !== undefined, 'used: kept');
    assert.ok(api.get('tendrilidentities', undefined, '7003') !== undefined, 'used again within the grace: kept');
    assert.equal(op.controllers?.identityGc.deleted, 1);
    const m = await httpGet(op.healthAddress.port, '/metrics');
    assert.equal(metricValue(m.body, 'tendril_operator_identities_collected_total'), 1);
    // Its last user gone, 7003 goes after a grace of its own.
    api.delete('tendrilendpoints', 'tdl-apps', 'web-2');
    await waitFor('7003 collected', () => api.get('tendrilidentities', undefined, '7003') === undefined, 5000);
    assert.ok(api.get('tendrilidentities', undefined, '7002') !== undefined);
    assertCallsListed();
  });

  test('a follower collects nothing', async () => {
    createIdentity(api, 7010, 'unused');
    // Another holder owns the lease and keeps it live.
    const a = await operator({ id: 'op-a', identityGcGrace: '200ms' });
    await waitFor('a to lead', () => a.isLeader);
    await a.stop();
    operators.splice(0);
    api.update('leases', { ...(api.get('leases', NS, 'tendril-operator') as object), spec: { holderIdentity: 'someone-else', leaseDurationSeconds: 3600, renewTime: '2999-01-01T00:00:00.000000Z' } });
    createIdentity(api, 7011, 'unused2');
    const b = await operator({ id: 'op-b', identityGcGrace: '200ms' });
    await sleep(1200);
    assert.equal(b.isLeader, false);
    assert.ok(api.get('tendrilidentities', undefined, '7011') !== undefined, 'a follower deletes nothing');
    assert.equal((await httpGet(b.healthAddress.port, '/healthz')).status, 200, 'following a live leader is healthy');
  });
});

describe('endpoint GC', () => {
  test('pod gone, node gone (no TendrilNode, no live Lease): deleted; live pod on a live node: kept', async () => {
    const live = createPod(api, 'live');
    createPod(api, 'unowned-live');
    const onLeaseOnly = createPod(api, 'on-lease-only');
    const onDeadNode = createPod(api, 'on-dead-node');
    const onExpired = createPod(api, 'on-expired-lease');
    createTendrilNode(api, 'node-a');
    createNodeLease(api, 'node-b', 60); // no TendrilNode yet, lease live
    createNodeLease(api, 'node-c', 2, 10_000); // expired
    createEndpoint(api, { name: 'live', node: 'node-a', identity: 300, owner: live });
    // No ownerReference (the API server's GC cannot judge them): judged by the pod of the same name.
    createEndpoint(api, { name: 'unowned-live', node: 'node-a', identity: 300 });
    createEndpoint(api, { name: 'unowned-gone', node: 'node-a', identity: 300 });
    createEndpoint(api, { name: 'on-lease-only', node: 'node-b', identity: 300, owner: onLeaseOnly });
    createEndpoint(api, { name: 'on-dead-node', node: 'node-x', identity: 300, owner: onDeadNode });
    createEndpoint(api, { name: 'on-expired-lease', node: 'node-c', identity: 300, owner: onExpired });
    const op = await operator({ id: 'op-a' });
    await waitFor('leading', () => op.isLeader);
    const exists = (n: string) => api.get('tendrilendpoints', 'tdl-apps', n) !== undefined;
    await waitFor('stale endpoints collected', () => !exists('unowned-gone') && !exists('on-dead-node') && !exists('on-expired-lease'), 5000);
    await sleep(500);
    for (const n of ['live', 'unowned-live', 'on-lease-only']) assert.ok(exists(n), `${n} kept`);
    const m = (await httpGet(op.healthAddress.port, '/metrics')).body;
    assert.equal(metricValue(m, 'tendril_operator_endpoints_collected_total', '{reason="pod-gone"}'), 1);
    assert.equal(metricValue(m, 'tendril_operator_endpoints_collected_total', '{reason="node-gone"}'), 2);
    // A pod re-created under the same name is another pod: the unowned endpoint named after it stays (no uid to compare),
    // and deleting a pod takes its unowned endpoint with it.
    api.delete('pods', 'tdl-apps', 'unowned-live');
    await waitFor('the unowned endpoint of a deleted pod collected', () => !exists('unowned-live'), 5000);
    assertCallsListed();
  });
});

describe('cluster-pool CIDRs', () => {
  const pools = { clusterPoolCidr: ['10.200.0.0/22', 'fd00:200::/110'] }; // four /24 and four /112

  test('three nodes get three distinct CIDRs per family; a deleted node\'s CIDRs are reused; a full pool is counted and the node waits', async () => {
    for (const n of ['node-a', 'node-b', 'node-c']) createTendrilNode(api, n);
    const op = await operator({ id: 'op-a', ...pools });
    const got = await waitFor('three nodes with CIDRs', () => {
      const all = ['node-a', 'node-b', 'node-c'].map((n) => ipamOf(api, n));
      return all.every((c) => c?.length === 2) ? (all as string[][]) : undefined;
    });
    const v4 = got.map((c) => c.find((x) => !x.includes(':'))!);
    const v6 = got.map((c) => c.find((x) => x.includes(':'))!);
    assert.equal(new Set(v4).size, 3, `distinct IPv4: ${v4.join(' ')}`);
    assert.equal(new Set(v6).size, 3, `distinct IPv6: ${v6.join(' ')}`);
    for (const c of v4) assert.match(c, /^10\.200\.[0-3]\.0\/24$/);
    for (const c of v6) assert.match(c, /^fd00:200::(\d+:0)?\/112$|^fd00:200::\/112$/);
    // What the agent owns in spec stays as the agent wrote it.
    const node = api.get('tendrilnodes', undefined, 'node-a') as { spec: { routingMode: string; tunnel: { port: number } } };
    assert.deepEqual([node.spec.routingMode, node.spec.tunnel.port], ['tunnel', 8472]);
    const metrics = async () => (await httpGet(op.healthAddress.port, '/metrics')).body;
    assert.equal(metricValue(await metrics(), 'tendril_operator_cidrs_allocated', '{family="ipv4"}'), 3);

    const bCidrs = ipamOf(api, 'node-b')!;
    api.delete('tendrilnodes', undefined, 'node-b');
    createTendrilNode(api, 'node-d');
    createTendrilNode(api, 'node-e');
    await waitFor('d and e allocated', () => ipamOf(api, 'node-d')?.length === 2 && ipamOf(api, 'node-e')?.length === 2);
    const held = ['node-a', 'node-c', 'node-d', 'node-e'].flatMap((n) => ipamOf(api, n)!);
    assert.equal(new Set(held).size, 8, 'no CIDR twice');
    for (const c of bCidrs) assert.ok(held.includes(c), `node-b's ${c} handed out again`);

    // The IPv4 pool is full now (four /24): node-f waits, counted once.
    createTendrilNode(api, 'node-f');
    await waitFor('exhaustion counted', async () => metricValue(await metrics(), 'tendril_operator_cidr_pool_exhausted_total', '{family="ipv4"}') === 1);
    await sleep(400);
    assert.equal(ipamOf(api, 'node-f'), undefined, 'the node waits');
    assert.equal(metricValue(await metrics(), 'tendril_operator_cidr_pool_exhausted_total', '{family="ipv4"}'), 1, 'counted once per wait');
    api.delete('tendrilnodes', undefined, 'node-a');
    await waitFor('node-f allocated once node-a is gone', () => ipamOf(api, 'node-f')?.filter((c) => !c.includes(':')).length === 1, 5000);
    assertCallsListed();
  });

  test('nodes their agents keep writing: the patch meets 409s, reads again and lands; the agents\' fields survive; no CIDR twice', async () => {
    const names = ['node-a', 'node-b', 'node-c', 'node-d'];
    for (const n of names) createTendrilNode(api, n);
    let writes = 0;
    let running = true;
    // The agents: a spec change every few milliseconds (each a new resourceVersion), keeping spec.ipam as it is.
    const agents = (async () => {
      while (running) {
        for (const n of names) {
          const cur = api.get('tendrilnodes', undefined, n) as { spec: Record<string, unknown> };
          api.update('tendrilnodes', { ...cur, spec: { ...cur.spec, health: { status: 'ok', reason: `beat ${++writes}` } } });
        }
        await sleep(2);
      }
    })();
    const op = await operator({ id: 'op-a', ...pools });
    try {
      await waitFor('every node allocated', () => names.every((n) => ipamOf(api, n)?.length === 2), 8000);
    } finally {
      running = false;
      await agents;
    }
    const held = names.flatMap((n) => ipamOf(api, n)!);
    assert.equal(new Set(held).size, 8, held.join(' '));
    for (const n of names) {
      const spec = (api.get('tendrilnodes', undefined, n) as { spec: { health: { reason: string }; routingMode: string } }).spec;
      assert.match(spec.health.reason, /^beat \d+$/, `${n}: the agent's health survives`);
      assert.equal(spec.routingMode, 'tunnel', `${n}: the agent's routingMode survives`);
    }
    assert.ok((api.requests()['get:tendrilnodes'] ?? 0) > 0, 'conflicts were met and resolved by a read');
    // The API server holds a patch before the operator has read its answer and counted it.
    await waitFor('every patch answered', () => (op.controllers?.clusterPool?.patches ?? 0) >= names.length, 2000);
    assert.equal(op.controllers?.clusterPool?.patches, names.length, 'one successful patch per node');
  });

  test('a new leader whose cache lags behind the previous leader\'s patches hands out none of their CIDRs (it lists afresh)', async () => {
    // The previous leader's work: nodes holding the first CIDRs, which this leader's cache does not show
    // (its informer follows only nodes labelled visible: the stand-in for a watch that has not caught up).
    createTendrilNode(api, 'node-old-1', ['10.200.0.0/24', 'fd00:200::/112']);
    createTendrilNode(api, 'node-old-2', ['10.200.1.0/24', 'fd00:200::1:0/112']);
    api.create('tendrilnodes', { apiVersion: 'tendril.io/v1', kind: 'TendrilNode', metadata: { name: 'node-new', labels: { 'tdl-visible': 'yes' } }, spec: {} });
    const kc = await kubeConfigOf(api);
    const custom = kc.makeApiClient(CustomObjectsApi);
    const nodes = new ResourceInformer<KubernetesObject>({
      resource: 'tendrilnodes',
      kubeConfig: kc,
      path: '/apis/tendril.io/v1/tendrilnodes',
      labelSelector: 'tdl-visible=yes',
      list: () => custom.listClusterCustomObject({ group: 'tendril.io', version: 'v1', plural: 'tendrilnodes', labelSelector: 'tdl-visible=yes' }) as Promise<KubernetesListObject<KubernetesObject>>,
      logger: quietLogger(),
    });
    nodes.start();
    const controller = new ClusterPoolController({
      api: new OperatorApi(kc, NS),
      nodes,
      pool: new CidrPool({ cidrs: pools.clusterPoolCidr, maskSize: { 4: 24, 6: 112 } }),
      logger: quietLogger(),
      metrics: new OperatorMetrics(),
    });
    try {
      await nodes.synced;
      assert.deepEqual(nodes.list().map((n) => n.metadata?.name), ['node-new'], 'the cache shows only the new node');
      await controller.start();
      await waitFor('node-new allocated', () => ipamOf(api, 'node-new')?.length === 2);
      assert.deepEqual(ipamOf(api, 'node-new'), ['10.200.2.0/24', 'fd00:200::2:0/112'], 'the first CIDRs no other node holds');
    } finally {
      await controller.stop();
      await nodes.stop();
    }
  });

  test('a new leader rebuilds the allocation from the objects: nothing moves, nothing is handed out twice; foreign CIDRs are left', async () => {
    for (const n of ['node-a', 'node-b']) createTendrilNode(api, n);
    createTendrilNode(api, 'node-x', ['192.168.9.0/24']);
    const first = await operator({ id: 'op-a', ...pools });
    await waitFor('a, b and x allocated', () => ['node-a', 'node-b', 'node-x'].every((n) => ipamOf(api, n)?.length === 2));
    // node-x: its IPv4 CIDR outside the pools left as it was; it got the family it lacked.
    assert.ok(ipamOf(api, 'node-x')!.includes('192.168.9.0/24'));
    const before = { a: ipamOf(api, 'node-a'), b: ipamOf(api, 'node-b'), x: ipamOf(api, 'node-x') };
    await first.stop();
    operators.splice(0);
    api.resetRequests();
    createTendrilNode(api, 'node-c');
    const second = await operator({ id: 'op-b', ...pools });
    await waitFor('node-c allocated by the new leader', () => ipamOf(api, 'node-c')?.length === 2);
    assert.ok(second.isLeader);
    await sleep(300);
    assert.deepEqual({ a: ipamOf(api, 'node-a'), b: ipamOf(api, 'node-b'), x: ipamOf(api, 'node-x') }, before, 'nothing moved');
    const held = ['node-a', 'node-b', 'node-c', 'node-x'].flatMap((n) => ipamOf(api, n)!);
    assert.equal(new Set(held).size, 8, `no CIDR twice: ${held.join(' ')}`);
    // One patch, node-c's: the others were not written again.
    assert.equal(api.requests()['patch:tendrilnodes'], 1);
  });
});

describe('health and metrics', () => {
  test('/healthz is 503 until the caches sync (a CRD missing keeps them unsynced), /metrics answers; other paths 404', async () => {
    const bare = api;
    // A cluster without the TendrilEndpoint CRD: the caches never sync, nothing is collected.
    bare.delete('customresourcedefinitions', undefined, 'tendrilendpoints.tendril.io');
    createIdentity(bare, 7020, 'unused');
    const op = await operator({ id: 'op-a', identityGcGrace: '100ms' });
    await sleep(1500);
    const h = await httpGet(op.healthAddress.port, '/healthz');
    assert.equal(h.status, 503);
    assert.match(JSON.parse(h.body).message, /tendrilendpoints not synced/);
    assert.ok(bare.get('tendrilidentities', undefined, '7020') !== undefined, 'no GC from unsynced caches');
    const m = await httpGet(op.healthAddress.port, '/metrics');
    assert.equal(m.status, 200);
    for (const name of [
      'tendril_operator_is_leader',
      'tendril_operator_identities_collected_total',
      'tendril_operator_endpoints_collected_total',
      'tendril_operator_cidrs_allocated',
      'tendril_operator_cidr_pool_exhausted_total',
      'tendril_operator_api_errors_total',
      'tendril_operator_watch_restarts_total',
    ]) {
      assert.match(m.body, new RegExp(`^# TYPE ${name} `, 'm'), name);
    }
    assert.equal(metricValue(m.body, 'tendril_operator_is_leader'), 0, 'holding the lease without synced caches is not leading');
    assert.ok((metricValue(m.body, 'tendril_operator_watch_restarts_total', '{resource="tendrilendpoints"}') ?? 0) >= 1, 'the failing list is counted');
    assert.equal((await httpGet(op.healthAddress.port, '/other')).status, 404);
  });
});
