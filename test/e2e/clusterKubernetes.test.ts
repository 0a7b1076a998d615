/**
 * A cluster with no etcd: three agents in crd mode on one fake API server,
 * tendril-operator beside them (tunnel mode). What the Kubernetes-backed mode
 * must hold beyond connectivity (clusterKubernetes{Tunnel,Native}.test.ts)
 * and node death (clusterKubernetesNodeDeath.test.ts):
 * - a NetworkPolicy enforced across nodes by the identities in TendrilIdentity objects;
 * - 100 pods with one label set started at once on three nodes: one identity;
 * - the operator killed: a new one leads, the CIDRs it handed out stay, nothing is lost;
 * - the API server away longer than the lease TTL: what is in force stays, and
 *   what changed meanwhile arrives once it is back.
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import type { Pod } from '../support/datapathNode.js';
import { CLUSTER_POD_NAMESPACE, type ClusterPod, ClusterScene, POD_TCP_PORT } from '../support/clusterScene.js';
import { networkPolicyObject } from '../support/k8sObjects.js';
import { requireRoot } from '../support/root.js';

requireRoot('the crd-mode cluster suite');

const T = { timeout: 120_000 };

interface Obj {
  metadata?: { name?: string; uid?: string; resourceVersion?: string };
  spec?: Record<string, unknown>;
  'security-labels'?: Record<string, string>;
}

describe('a cluster on the Kubernetes API and no etcd (crd mode, tunnel)', () => {
  let scene: ClusterScene | undefined;
  const s = () => scene!;
  const api = () => s().fake!;
  const pods: Record<string, ClusterPod> = {};

  before(async () => {
    scene = await ClusterScene.create({ tag: 'ckube', routingMode: 'tunnel', ipam: 'cluster-pool', store: 'kubernetes', leaseTtl: 3 });
    pods.web = await scene.addPod(0, { name: 'web', labels: { app: 'web' } });
    pods.client = await scene.addPod(1, { name: 'client', labels: { app: 'client' } });
    pods.other = await scene.addPod(2, { name: 'other', labels: { app: 'other' } });
    await scene.waitConverged(30_000);
  });

  after(async () => {
    await scene?.cleanup();
  });

  async function tcp(from: ClusterPod, to: ClusterPod): Promise<string> {
    return (await from.agent.tcpOnce({ dst: to.ip, port: POD_TCP_PORT }, 1000)).outcome;
  }

  async function until(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<number> {
    const t0 = performance.now();
    while (!(await check())) {
      if (performance.now() - t0 > timeoutMs) assert.fail(`${what}: not within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return performance.now() - t0;
  }

  const identities = () => api().list('tendrilidentities') as Obj[];
  const nodeCidrs = () => new Map((api().list('tendrilnodes') as Obj[]).map((n) => [n.metadata!.name!, JSON.stringify((n.spec?.ipam as { podCIDRs?: string[] } | undefined)?.podCIDRs ?? [])]));

  test('the cluster state is in the API server: a TendrilNode with operator-given CIDRs and a Lease per node, a TendrilEndpoint and an identity per pod', T, async () => {
    const cidrs = nodeCidrs();
    assert.deepEqual([...cidrs.keys()].sort(), s().nodes.map((n) => n.name).sort());
    assert.equal(new Set(cidrs.values()).size, 3, `distinct CIDRs per node: ${JSON.stringify([...cidrs])}`);
    const leases = (api().list('leases') as Obj[]).map((l) => l.metadata!.name!);
    for (const n of s().nodes) assert.ok(leases.includes(`tendril-node-${n.name}`), `${n.name}'s Lease in ${JSON.stringify(leases)}`);
    assert.ok(leases.includes('tendril-operator'), 'the operator\'s election Lease');
    for (const p of Object.values(pods)) {
      const tep = api().get('tendrilendpoints', CLUSTER_POD_NAMESPACE, p.spec.name) as Obj | undefined;
      assert.ok(tep, `TendrilEndpoint of ${p.spec.name}`);
      assert.equal(tep.spec?.node, p.node.name);
      assert.deepEqual(tep.spec?.addresses, [p.ip]);
      assert.equal(tep.spec?.identity, (await s().endpointOf(p)).identity);
      assert.ok(identities().some((i) => i.metadata?.name === String(tep.spec?.identity)), `TendrilIdentity ${String(tep.spec?.identity)}`);
    }
  });

  test('a NetworkPolicy selects by labels, and the nodes enforce it on the identities they read from the API server', T, async (t) => {
    assert.deepEqual({ client: await tcp(pods.client!, pods.web!), other: await tcp(pods.other!, pods.web!) }, { client: 'open', other: 'open' });
    api().create(
      'networkpolicies',
      networkPolicyObject(CLUSTER_POD_NAMESPACE, 'web-from-client', {
        podSelector: { matchLabels: { app: 'web' } },
        policyTypes: ['Ingress'],
        ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ protocol: 'TCP', port: POD_TCP_PORT }] }],
      }),
    );
    const ms = await until('the policy in force on node 0', async () => (await tcp(pods.other!, pods.web!)) === 'timeout', 20_000);
    t.diagnostic(`the policy is in force ${ms.toFixed(0)} ms after its create`);
    assert.equal(await tcp(pods.client!, pods.web!), 'open', 'the allowed remote pod still connects');
    assert.equal(await tcp(pods.other!, pods.web!), 'timeout', 'the other remote pod is dropped');
    api().delete('networkpolicies', CLUSTER_POD_NAMESPACE, 'web-from-client');
    await until('the policy gone', async () => (await tcp(pods.other!, pods.web!)) === 'open', 20_000);
  });

  test('100 pods with one label set started at once on three nodes end with one TendrilIdentity, which every endpoint carries', T, async (t) => {
    const before = new Set(identities().map((i) => i.metadata!.name!));
    const t0 = performance.now();
    const started: Pod[] = [];
    const queue = Array.from({ length: 100 }, (_, i) => i);
    // 24 ADDs in flight at once, spread over the three nodes: the three agents race for the label set.
    await Promise.all(
      Array.from({ length: 24 }, async () => {
        for (let i = queue.shift(); i !== undefined; i = queue.shift()) started.push(await s().addBarePod(i % 3, { name: `race-${i}`, labels: { app: 'race' } }));
      }),
    );
    t.diagnostic(`100 pods added in ${(performance.now() - t0).toFixed(0)} ms`);
    const raceIds = identities().filter((i) => i['security-labels']?.['k8s:app'] === 'race');
    assert.equal(raceIds.length, 1, `one TendrilIdentity for app=race: ${JSON.stringify(raceIds.map((i) => i.metadata?.name))}`);
    const id = Number(raceIds[0]!.metadata!.name);
    assert.ok(!before.has(String(id)));
    const held = new Set(started.map((p) => p.endpoint.identity));
    assert.deepEqual([...held], [id], 'every endpoint has that identity');
    // And every node's ipcache agrees for the pods of the others.
    await until('every node maps every race pod to the identity', async () => {
      for (const n of s().nodes) {
        const ipc = new Map((await s().ipcache(n.index)).map((e) => [e.prefix, e.identity]));
        if (!started.every((p) => ipc.get(`${p.ip}/32`) === id)) return false;
      }
      return true;
    }, 20_000);
    const teps = (api().list('tendrilendpoints') as Obj[]).filter((e) => e.metadata?.name?.startsWith('race-'));
    assert.equal(teps.length, 100);
  });

  test('the operator killed: a new replica leads, every node keeps its CIDRs, a node added later still gets one', T, async (t) => {
    const cidrs = nodeCidrs();
    const holder = () => (api().get('leases', 'kube-system', 'tendril-operator') as { spec?: { holderIdentity?: string } }).spec?.holderIdentity;
    const first = holder();
    await s().killOperator();
    const next = await s().startOperator();
    const ms = await until('the new replica to lead', async () => holder() === next.id, 15_000);
    t.diagnostic(`${next.id} leads ${ms.toFixed(0)} ms after it started (the killed ${String(first)}'s Lease had to run out)`);
    assert.deepEqual(nodeCidrs(), cidrs, 'the CIDRs handed out stay as they were');
    // A TendrilNode the new leader has not seen allocated gets a CIDR no node holds.
    api().create('tendrilnodes', { apiVersion: 'tendril.io/v1', kind: 'TendrilNode', metadata: { name: 'tdl-ckube-late' }, spec: { addresses: [], podCIDRs: [], routingMode: 'tunnel', health: { status: 'ok' }, startedAt: new Date().toISOString() } });
    await until('the late node allocated', async () => nodeCidrs().get('tdl-ckube-late') !== '[]', 10_000);
    const all = [...nodeCidrs().values()];
    assert.equal(new Set(all).size, all.length, `no CIDR twice: ${JSON.stringify(all)}`);
    api().delete('tendrilnodes', undefined, 'tdl-ckube-late');
    assert.equal(await tcp(pods.client!, pods.web!), 'open');
  });

  test('the API server away for three lease TTLs: pods keep reaching each other across nodes; a pod deleted meanwhile is gone everywhere once it is back', T, async (t) => {
    const gone = await s().addPod(2, { name: 'leaving', labels: { app: 'leaving' } });
    await s().waitConverged(20_000);
    await api().pause();
    const t0 = performance.now();
    try {
      const during: string[] = [];
      while (performance.now() - t0 < 3 * s().leaseTtl * 1000) {
        during.push(await tcp(pods.client!, pods.web!), await tcp(pods.web!, pods.other!));
        await new Promise((r) => setTimeout(r, 300));
      }
      t.diagnostic(`${during.length} connections across nodes during the outage`);
      assert.deepEqual([...new Set(during)], ['open'], 'every connection during the outage');
      const listed = (await s().nodeStatus(0)).map((n) => n.name).sort();
      assert.deepEqual(listed, s().nodes.map((n) => n.name).sort(), 'no node is taken for dead while the Leases cannot be read');
      // The pod goes while the API server is away: its node tells the others once it is back.
      await s().delPod(gone);
    } finally {
      await api().resume();
    }
    const ms = await until('the deleted pod\'s entry gone from the other nodes', async () => {
      for (const i of [0, 1]) if ((await s().ipcache(i)).some((e) => e.prefix === `${gone.ip}/32`)) return false;
      return true;
    }, 30_000);
    t.diagnostic(`its entries gone ${ms.toFixed(0)} ms after the API server came back`);
    await s().waitConverged(30_000);
    assert.equal(await tcp(pods.client!, pods.web!), 'open');
  });
});
