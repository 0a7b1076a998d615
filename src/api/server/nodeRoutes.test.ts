// /v1/node and the agent's node wiring: two real agents over the fake
// datapath on one real etcd (a cluster of two), each API served with every
// response checked against api/openapi.yaml. Each node publishes its record
// (node IP from its underlay, router address, pod CIDRs, tunnel), installs the
// other's routes and ipcache entries, drops them when the other's lease
// expires; pods get the underlay's MTU less the overlay's; policies report the
// same cluster revision on both nodes; an MTU the underlay cannot carry stops
// the start with one clear message.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { startEtcd, type EtcdHarness } from '../../../test/support/etcdHarness.js';
import type { Result100 } from '../../cni/index.js';
import { AgentClient, AgentResponseError } from '../../client/agentClient.js';
import { TUNNEL_DEFAULT_PORT } from '../../datapath/bpf/constants.js';
import type { Underlay } from '../../datapath/linux/underlay.js';
import { ReservedIdentity } from '../../identity/index.js';
import { NodeErrorCode } from '../../node/index.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../../agent/testing/fakeNodeAgent.js';
import { buildServer, listenOnSocket } from './server.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlnodes', type: 'tendril-cni' });
const A = 'tdl-nodes-a';
const B = 'tdl-nodes-b';
const underlay = (ip: string, mtu = 1500): Underlay => ({ device: 'eth0', ifindex: 2, mtu, ip });

async function until<T>(what: string, fn: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

let etcd: EtcdHarness;
let dir: string;
const apps: FastifyInstance[] = [];
const nodes: FakeNodeAgent[] = [];

/** A fake node on the shared etcd, with its API served (responses validated) on a socket of the test's own. */
async function startNode(name: string, podCidr: string, ip: string): Promise<{ node: FakeNodeAgent; client: AgentClient }> {
  const node = await startFakeNodeAgent({
    nodeName: name,
    podCidr,
    kvstore: { etcdEndpoint: etcd.endpoint },
    // A short lease: a stopped node leaves the others' view within seconds.
    config: { leaseTtlSeconds: 2 },
    underlay: underlay(ip),
  });
  nodes.push(node);
  const app = buildServer(node.agent.api(), { validateResponses: true });
  apps.push(app);
  const socket = join(dir, `${name}.sock`);
  await listenOnSocket(app, socket);
  return { node, client: new AgentClient({ socketPath: socket, timeoutMs: 10_000 }) };
}

before(async () => {
  etcd = await startEtcd();
  dir = await mkdtemp(join(tmpdir(), 'tdl-nodes-api-'));
});

after(async () => {
  for (const app of apps) await app.close().catch(() => undefined);
  for (const n of nodes) await n.stop().catch(() => undefined);
  await etcd?.destroy();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('/v1/node over two agents on one etcd', () => {
  let a: { node: FakeNodeAgent; client: AgentClient };
  let b: { node: FakeNodeAgent; client: AgentClient };

  before(async () => {
    a = await startNode(A, '10.97.1.0/24', '192.0.2.11');
    b = await startNode(B, '10.97.2.0/24', '192.0.2.12');
  });

  test('each node lists both, itself first, with the record the other wrote and whether its routes are in', async () => {
    const list = await until('A sees B with its routes installed', async () => {
      const l = await a.client.listNodes();
      return l.length === 2 && l[1]!.routesInstalled === true ? l : undefined;
    });
    assert.deepEqual(
      list.map((n) => [n.name, n.local]),
      [
        [A, true],
        [B, false],
      ],
    );
    const [self, other] = list as [(typeof list)[0], (typeof list)[0]];
    assert.equal(self.routesInstalled, undefined, 'no routes to itself');
    assert.deepEqual(self.addresses, [
      { type: 'InternalIP', ip: '192.0.2.11' },
      { type: 'RouterIP', ip: '10.97.1.1' },
    ]);
    assert.deepEqual(other.addresses, [
      { type: 'InternalIP', ip: '192.0.2.12' },
      { type: 'RouterIP', ip: '10.97.2.1' },
    ]);
    assert.deepEqual(other.podCidrs, ['10.97.2.0/24']);
    // With etcd the default is the overlay.
    assert.equal(other.routingMode, 'tunnel');
    assert.deepEqual(other.tunnel, { protocol: 'vxlan', port: TUNNEL_DEFAULT_PORT });
    assert.deepEqual(other.health, { status: 'ok' });
    assert.ok(Date.parse(other.startedAt) <= Date.now());
    assert.ok(other.revision > 0 && self.revision > 0, 'kvstore revisions of the records');

    // What A installed for B: its pod CIDR routed via its node IP, its addresses in the ipcache as remote-node behind that IP.
    assert.deepEqual(a.node.datapath.nodeRouting.remoteNodes().get(B), { name: B, nodeIp: '192.0.2.12', podCidrs: ['10.97.2.0/24'] });
    const entries = a.node.agent.api().ipcache.list().filter((e) => e.owner === `node:${B}`);
    assert.deepEqual(entries.map((e) => [e.prefix, e.identity, e.hostIP]).sort(), [
      ['10.97.2.1/32', ReservedIdentity.RemoteNode, '192.0.2.12'],
      ['192.0.2.12/32', ReservedIdentity.RemoteNode, '192.0.2.12'],
    ]);

    // B sees the same two records.
    const fromB = await until('B sees A', async () => {
      const l = await b.client.listNodes();
      return l.length === 2 ? l : undefined;
    });
    assert.deepEqual(
      fromB.map((n) => [n.name, n.local]),
      [
        [B, true],
        [A, false],
      ],
    );
  });

  test('GET /node/{name} answers one node, 404 with a message for a name the registry does not hold', async () => {
    const other = await a.client.getNode(B);
    assert.equal(other.name, B);
    assert.equal(other.local, false);
    assert.deepEqual(other.podCidrs, ['10.97.2.0/24']);
    assert.equal((await a.client.getNode(A)).local, true);
    for (const name of ['tdl-nodes-nobody', 'not a node']) {
      const err = await a.client.getNode(name).then(
        () => assert.fail('answered'),
        (e: unknown) => e as AgentResponseError,
      );
      assert.ok(err instanceof AgentResponseError);
      assert.equal(err.status, 404);
      assert.equal(err.body.code, 'NOT_FOUND');
      assert.match(err.message, /not found in the node registry/);
    }
  });

  test('health counts the nodes and names the routing mode; the config shows the mode in effect and the automatic MTU', async () => {
    const h = await a.client.health();
    assert.equal(h.nodes, 2);
    assert.equal(h.routingMode, 'tunnel');
    const c = await a.client.getConfig();
    assert.equal(c.routingMode, 'tunnel');
    assert.equal(c.tunnelPort, TUNNEL_DEFAULT_PORT);
    assert.equal(c.mtu, undefined);
  });

  test('a pod gets the underlay MTU less the overlay\'s 50 bytes', async () => {
    const netns = '/var/run/netns/tdlnodes-pod1';
    a.node.datapath.addNetns(netns);
    const { result } = (await a.node.agent.api().cni.handle({ command: 'ADD', containerId: 'tdlnodes-pod1', netns, ifName: 'eth0', args: '', config: CONF })) as { result?: Result100 };
    assert.ok(result?.ips?.[0]);
    const ep = (await a.client.listEndpoints()).find((e) => e.containerId === 'tdlnodes-pod1');
    assert.equal(ep?.mtu, 1450);
  });

  test('a policy imported on A: both nodes report the same cluster revision, and a delete on B moves both on', async () => {
    const policy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: tdl-nodes-db, namespace: prod }
spec:
  podSelector: { matchLabels: { app: db } }
  ingress: [ { from: [ { podSelector: { matchLabels: { app: api } } } ] } ]
`;
    await a.client.putPolicy({ text: policy });
    const onA = (await a.client.getPolicy()).clusterRevision;
    assert.ok(onA > 0);
    await until('B reports A\'s revision', async () => (await b.client.getPolicy()).clusterRevision === onA);
    assert.deepEqual((await b.client.getPolicy()).policies.map((p) => p.name), ['NetworkPolicy/prod/tdl-nodes-db']);

    await b.client.deletePolicy({ name: 'tdl-nodes-db' });
    const afterDelete = (await b.client.getPolicy()).clusterRevision;
    assert.ok(afterDelete > onA, `a delete raises the revision: ${onA} -> ${afterDelete}`);
    await until('A reports B\'s delete', async () => (await a.client.getPolicy()).clusterRevision === afterDelete);
    assert.deepEqual((await a.client.getPolicy()).policies, []);
  });

  test('a node that stops leaves the other\'s list, routes and ipcache when its lease expires', async () => {
    await b.node.stop();
    nodes.splice(nodes.indexOf(b.node), 1);
    await until('A no longer lists B', async () => (await a.client.listNodes()).length === 1, 15_000);
    await until('A removed B\'s routes', () => !a.node.datapath.nodeRouting.remoteNodes().has(B));
    await until('A removed B\'s ipcache entries', () => !a.node.agent.api().ipcache.list().some((e) => e.owner === `node:${B}`));
    assert.equal((await a.client.health()).nodes, 1);
    const err = await a.client.getNode(B).then(
      () => undefined,
      (e: unknown) => e as AgentResponseError,
    );
    assert.equal(err?.status, 404);
  });
});

describe('the pod MTU at start', () => {
  test('an --mtu above what the underlay carries in tunnel mode stops the start with one clear message', async () => {
    await assert.rejects(
      startFakeNodeAgent({ nodeName: 'tdl-nodes-mtu', podCidr: '10.97.9.0/24', config: { routingMode: 'tunnel', mtu: 1480 }, underlay: underlay('192.0.2.19') }),
      (err: unknown) =>
        (err as { code?: string }).code === NodeErrorCode.CONFIG &&
        /--mtu 1480 is larger than the underlay carries in tunnel mode: underlay MTU 1500 - 50 bytes of VXLAN = 1450 \(underlay eth0, MTU 1500\)/.test((err as Error).message),
    );
  });

  test('native mode gives pods the underlay\'s MTU; a lower --mtu is taken', async () => {
    const native = await startFakeNodeAgent({ nodeName: 'tdl-nodes-native', podCidr: '10.97.8.0/24', underlay: underlay('192.0.2.18', 9000) });
    nodes.push(native);
    assert.equal(native.config.routingMode, 'native', 'the embedded store defaults to native');
    const netns = '/var/run/netns/tdlnodes-native';
    native.datapath.addNetns(netns);
    await native.agent.api().cni.handle({ command: 'ADD', containerId: 'tdlnodes-native', netns, ifName: 'eth0', args: '', config: CONF });
    assert.equal(native.agent.api().endpoints.list().find((e) => e.containerId === 'tdlnodes-native')?.mtu, 9000);
    const [self] = native.agent.api().nodes!.registry.list();
    assert.equal(self?.routingMode, 'native');
    assert.equal(self?.tunnel, undefined);
    assert.deepEqual(self?.addresses[0], { type: 'InternalIP', ip: '192.0.2.18' });

    const lower = await startFakeNodeAgent({ nodeName: 'tdl-nodes-lower', podCidr: '10.97.7.0/24', config: { mtu: 1400 }, underlay: underlay('192.0.2.17') });
    nodes.push(lower);
    lower.datapath.addNetns('/var/run/netns/tdlnodes-lower');
    await lower.agent.api().cni.handle({ command: 'ADD', containerId: 'tdlnodes-lower', netns: '/var/run/netns/tdlnodes-lower', ifName: 'eth0', args: '', config: CONF });
    assert.equal(lower.agent.api().endpoints.list().find((e) => e.containerId === 'tdlnodes-lower')?.mtu, 1400);
  });
});
