/**
 * Services across nodes, in either routing mode (one test file per mode): a
 * ClusterIP whose backends are one pod on each of three nodes, reached from a
 * pod on every node and from every node itself (new connections spread over
 * backends on several nodes, pod clients seen with their own address); a
 * NodePort on node A's address whose only backend is on node B, from an
 * outside host behind node A (the backend sees A's address with the Cluster
 * policy; with Local, A has no backend and refuses). The ClusterIP answers
 * no one outside the cluster, however a router sends its traffic to a node
 * (through a --devices device, or a link that is none): dropped as
 * CLUSTERIP_FROM_OUTSIDE, while the NodePort answers the same host.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { bpfMetrics, dropCounts } from './datapathObserve.js';
import { type ClusterPod, ClusterScene, distinct, POD_TCP_PORT, POD_UDP_PORT, type RoutingMode, type SceneNode } from './clusterScene.js';
import { addOutsideHost, type OutsideHost } from './datapathNode.js';
import { requireRoot } from './root.js';
import { runOk } from './run.js';
import { assertAllAnswered as assertAnsweredOnNode, upsertService } from './serviceApi.js';
import { type ServiceAgentProcess, shareByBackend } from './serviceProcess.js';

export function clusterServicesSuite(opts: { tag: string; routingMode: RoutingMode }): void {
  requireRoot(`clusterServicesSuite (${opts.routingMode})`);

  const T = { timeout: 90_000 };
  const VIP = '10.96.0.10';
  const NODE_PORT_CLUSTER = 30080;
  const NODE_PORT_LOCAL = 30081;
  const OUTSIDE_GATEWAY = '10.199.0.1';
  const OUTSIDE_CLIENT = '10.199.0.10';
  /** A client on the cluster network itself (the hub bridge), no node: it reaches node A's eth0 directly. */
  const LAN_CLIENT = '10.248.0.201';
  const A = 0;
  const B = 1;

  let scene: ClusterScene | undefined;
  let outside: OutsideHost | undefined;
  let outsideAgent: ServiceAgentProcess | undefined;
  let lanAgent: ServiceAgentProcess | undefined;
  const backends: ClusterPod[] = [];
  const clients: ClusterPod[] = [];
  const s = () => scene!;

  before(async () => {
    scene = await ClusterScene.create({
      tag: opts.tag,
      routingMode: opts.routingMode,
      ipam: 'block',
      // Node A's agent takes the link to the outside host as a NodePort device.
      devices: (i) => (i === A ? ['eth0', 'tdlout0'] : ['eth0']),
      beforeAgents: async (cluster) => {
        const nodeA = cluster.nodes[A]!;
        outside = await addOutsideHost(cluster.pool, nodeA.netns, { gateway: OUTSIDE_GATEWAY, addresses: [OUTSIDE_CLIENT], podCidr: '10.248.0.0/24' });
      },
    });
    for (const i of [0, 1, 2]) {
      backends.push(await scene.addPod(i, { name: `be${i}`, labels: { app: 'be' } }));
      clients.push(await scene.addPod(i, { name: `client${i}`, labels: { app: 'client' } }));
    }
    outsideAgent = await scene.agentIn(outside!.netnsPath, 'outside');
    lanAgent = await scene.agentIn((await scene.cluster.addUnderlayHost('lan', LAN_CLIENT)).netnsPath, 'lan');
    await scene.waitConverged(20_000);
    for (const n of scene.nodes) {
      await upsertService(n, 1, { frontend: { ip: VIP, port: 80 }, backends: backends.map((b) => ({ ip: b.ip, port: POD_TCP_PORT })) });
      await upsertService(n, 2, { frontend: { ip: VIP, port: 53, protocol: 'UDP' }, backends: backends.map((b) => ({ ip: b.ip, port: POD_UDP_PORT })) });
    }
    const onlyB = [{ ip: backends[B]!.ip, port: POD_TCP_PORT }];
    await upsertService(scene.node(A), 3, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_CLUSTER }, backends: onlyB, trafficPolicy: 'Cluster' });
    await upsertService(scene.node(A), 4, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_LOCAL }, backends: onlyB, trafficPolicy: 'Local' });
  });

  after(async () => {
    await scene?.cleanup();
  });

  /** assertAllAnswered, the failure message completed with what every node routes toward the others. */
  const assertAllAnswered = async (...args: Parameters<typeof assertAnsweredOnNode>): Promise<void> => {
    try {
      await assertAnsweredOnNode(...args);
    } catch (err) {
      throw new Error(`${(err as Error).message}\n${await s().diagnostics()}`);
    }
  };
  const nodeOfBackend = (name: string) => backends.find((b) => b.spec.name === name)?.node.index;

  async function nodeAddresses(n: SceneNode): Promise<string[]> {
    return (await s().nodeStatus(n.index)).find((x) => x.local)!.addresses.map((a) => a.ip);
  }

  describe('a ClusterIP with a backend on each of three nodes', () => {
    test('from a pod on every node: every connection answered, spread over backends on several nodes, the backend sees the client pod', T, async (t) => {
      for (const c of clients) {
        const sessions = await c.agent.tcpSessions({ dst: VIP, port: 80 }, { count: 30, requests: 2, concurrency: 6 });
        await assertAllAnswered(c.node, sessions, `${c.spec.name}@n${c.node.index} -> ${VIP}:80`);
        const share = Object.fromEntries(shareByBackend(sessions));
        t.diagnostic(`${c.spec.name}@n${c.node.index}: ${JSON.stringify(share)}`);
        assert.ok(distinct(Object.keys(share).map(nodeOfBackend)).length >= 2, `connections from ${c.spec.name} reach backends on several nodes: ${JSON.stringify(share)}`);
        assert.deepEqual(distinct(sessions.flatMap((x) => x.answers.map((a) => a.peer))), [c.ip], 'no SNAT between pods across nodes');
        const shots = await c.agent.udpShots({ dst: VIP, port: 53 }, { count: 20, concurrency: 5 });
        await assertAllAnswered(c.node, shots, `${c.spec.name}@n${c.node.index} -> ${VIP}:53/udp`);
        assert.ok(distinct(shots.map((x) => nodeOfBackend(x.answer!.name))).length >= 2, `UDP spread: ${JSON.stringify(Object.fromEntries(shareByBackend(shots)))}`);
      }
    });

    test('from every node itself: every connection answered, spread over backends on several nodes', T, async (t) => {
      for (const n of s().nodes) {
        const agent = await s().nodeAgent(n.index);
        const sessions = await agent.tcpSessions({ dst: VIP, port: 80 }, { count: 30, requests: 2, concurrency: 6 });
        await assertAllAnswered(n, sessions, `node ${n.index} -> ${VIP}:80`);
        const share = Object.fromEntries(shareByBackend(sessions));
        t.diagnostic(`node ${n.index}: ${JSON.stringify(share)}, seen as ${JSON.stringify(distinct(sessions.flatMap((x) => x.answers.map((a) => `${a.name}:${a.peer}`))))}`);
        assert.ok(distinct(Object.keys(share).map(nodeOfBackend)).length >= 2, `node ${n.index}'s connections reach backends on several nodes: ${JSON.stringify(share)}`);
      }
    });
  });

  describe('a NodePort on node A whose only backend is on node B, from an outside host behind A', () => {
    test('trafficPolicy Cluster: answered by the backend on B, which sees node A\'s address', T, async (t) => {
      const a = s().node(A);
      const sessions = await outsideAgent!.tcpSessions({ dst: a.ip, port: NODE_PORT_CLUSTER }, { count: 20, requests: 3, concurrency: 5 });
      await assertAllAnswered(a, sessions, `outside -> ${a.ip}:${NODE_PORT_CLUSTER}`);
      const answers = sessions.flatMap((x) => x.answers);
      assert.deepEqual(distinct(answers.map((x) => x.name)), [backends[B]!.spec.name]);
      const peers = distinct(answers.map((x) => x.peer));
      const addrs = await nodeAddresses(a);
      t.diagnostic(`the backend on B saw ${JSON.stringify(peers)} (node A's addresses ${JSON.stringify(addrs)})`);
      assert.equal(peers.length, 1);
      assert.ok(addrs.includes(peers[0]!) || peers[0] === OUTSIDE_GATEWAY, `the backend saw an address of node A, not the client ${OUTSIDE_CLIENT}: ${peers[0]}`);
    });

    test('trafficPolicy Cluster from a client on the underlay network (arriving on A\'s eth0): answered by the backend on B, which sees node A\'s address', T, async (t) => {
      const a = s().node(A);
      const sessions = await lanAgent!.tcpSessions({ dst: a.ip, port: NODE_PORT_CLUSTER }, { count: 10, requests: 3, concurrency: 5 });
      await assertAllAnswered(a, sessions, `underlay client -> ${a.ip}:${NODE_PORT_CLUSTER}`);
      const answers = sessions.flatMap((x) => x.answers);
      assert.deepEqual(distinct(answers.map((x) => x.name)), [backends[B]!.spec.name]);
      const peers = distinct(answers.map((x) => x.peer));
      t.diagnostic(`the backend on B saw ${JSON.stringify(peers)}`);
      assert.deepEqual(peers, [a.ip], 'SNAT to node A\'s address on the underlay');
    });

    test('trafficPolicy Local: node A has no backend of its own and refuses', T, async () => {
      const a = s().node(A);
      const before = dropCounts(await bpfMetrics(a));
      const r = await outsideAgent!.tcpOnce({ dst: a.ip, port: NODE_PORT_LOCAL }, 700);
      const after = dropCounts(await bpfMetrics(a));
      const noService = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('NO_SERVICE')).reduce((sum, [, v]) => sum + v, 0);
      assert.notEqual(r.outcome, 'open', `outside -> Local NodePort without a local backend: ${JSON.stringify(r.answers)}`);
      assert.ok(noService(after) > noService(before), `counted as NO_SERVICE on A: ${JSON.stringify(before)} -> ${JSON.stringify(after)} (client saw ${r.outcome})`);
      // A pod is internal traffic: every backend of the service, B's too.
      const fromPod = await clients[A]!.agent.tcpSessions({ dst: a.ip, port: NODE_PORT_LOCAL }, { count: 3, requests: 1, concurrency: 3 });
      await assertAllAnswered(a, fromPod, 'a pod on A reaches the Local NodePort\'s backend on B');
    });
  });

  describe('the ClusterIP from outside the cluster', () => {
    const clusterIpDrops = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('CLUSTERIP_FROM_OUTSIDE')).reduce((sum, [, v]) => sum + v, 0);

    test('hosts that route the service CIDR via node A (behind A, on the underlay) are refused as CLUSTERIP_FROM_OUTSIDE; the NodePort answers them', T, async (t) => {
      const a = s().node(A);
      await runOk(['ip', '-n', outside!.netns, 'route', 'replace', '10.96.0.0/12', 'via', OUTSIDE_GATEWAY]);
      const lanNs = `${s().cluster.pool.prefix}lan`;
      await runOk(['ip', '-n', lanNs, 'route', 'replace', '10.96.0.0/12', 'via', a.ip]);
      const before = dropCounts(await bpfMetrics(a));
      const behindA = await outsideAgent!.tcpOnce({ dst: VIP, port: 80 }, 1000);
      const onUnderlay = await lanAgent!.tcpOnce({ dst: VIP, port: 80 }, 1000);
      const after = dropCounts(await bpfMetrics(a));
      t.diagnostic(`behind A: ${behindA.outcome} ${JSON.stringify(behindA.answers)}; on the underlay: ${onUnderlay.outcome} ${JSON.stringify(onUnderlay.answers)}; A's drops ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
      assert.deepEqual({ behindA: behindA.outcome, onUnderlay: onUnderlay.outcome }, { behindA: 'timeout', onUnderlay: 'timeout' }, 'no backend answers the outside');
      assert.ok(clusterIpDrops(after) - clusterIpDrops(before) >= 2, `node A counted them as CLUSTERIP_FROM_OUTSIDE: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
      const nodePort = await outsideAgent!.tcpOnce({ dst: a.ip, port: NODE_PORT_CLUSTER }, 2000);
      assert.equal(nodePort.outcome, 'open', 'the NodePort answers the same host');
    });

    test('a host on a link of node B that is not in --devices, routing the service CIDR via B, is refused too (at tendril_host)', T, async (t) => {
      const b = s().node(B);
      const pool = s().cluster.pool;
      const { name: ns, path } = await pool.add('outb');
      await runOk(['ip', '-n', b.node, 'link', 'add', 'tdloutb', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', path]);
      try {
        await runOk(['ip', '-n', b.node, 'addr', 'add', '10.198.0.1/24', 'dev', 'tdloutb']);
        await runOk(['ip', '-n', b.node, 'link', 'set', 'tdloutb', 'up']);
        await runOk(['ip', '-n', ns, 'addr', 'add', '10.198.0.10/24', 'dev', 'eth0']);
        await runOk(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
        await runOk(['ip', '-n', ns, 'route', 'add', '10.96.0.0/12', 'via', '10.198.0.1']);
        const client = await s().agentIn(path, 'outb');
        const before = dropCounts(await bpfMetrics(b));
        const r = await client.tcpOnce({ dst: VIP, port: 80 }, 1000);
        const after = dropCounts(await bpfMetrics(b));
        t.diagnostic(`${r.outcome} ${JSON.stringify(r.answers)}; B's drops ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
        assert.equal(r.outcome, 'timeout', 'no backend answers a host outside the cluster');
        assert.ok(clusterIpDrops(after) > clusterIpDrops(before), `node B counted it as CLUSTERIP_FROM_OUTSIDE: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
      } finally {
        await runOk(['ip', '-n', b.node, 'link', 'del', 'tdloutb']);
      }
    });
  });
}
