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
 * One test file per routing mode and pod family (IPv4, IPv6, dual-stack
 * pods on a dual-stack underlay): each row runs on every IP version the
 * pods have. An IPv6 NodePort is on node A's IPv6 address (there is no
 * IPv6 every-address frontend).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { bpfMetrics, dropCounts } from './datapathObserve.js';
import { type ClusterPod, ClusterScene, distinct, POD_TCP_PORT, POD_UDP_PORT, type RoutingMode, type SceneNode } from './clusterScene.js';
import { addOutsideHost, type OutsideHost } from './datapathNode.js';
import { addressIn, cidrIn, type Family, familyName, type IpFamily, ipIn, versionsOf } from './family.js';
import { requireRoot } from './root.js';
import { runOk } from './run.js';
import { assertAllAnswered as assertAnsweredOnNode, upsertService } from './serviceApi.js';
import { type ServiceAgentProcess, shareByBackend } from './serviceProcess.js';

export function clusterServicesSuite(opts: { tag: string; routingMode: RoutingMode; family?: Family }): void {
  const family = opts.family ?? 4;
  requireRoot(`clusterServicesSuite (${opts.routingMode}, ${familyName(family)})`);

  const T = { timeout: 90_000 };
  const versions = versionsOf(family);
  const VIP4 = '10.96.0.10';
  /** The service CIDR an outside router sends to a node: IPv4's /12; IPv6's the VIP's mirror /120. */
  const serviceCidr = (v: IpFamily) => (v === 4 ? '10.96.0.0/12' : cidrIn(6, '10.96.0.0/24'));
  /** Service IDs: one number space across families, IPv6's 1000 above. */
  const sid = (v: IpFamily, id: number) => (v === 4 ? id : id + 1000);
  /** Row titles: marked with the IP version on dual-stack pods only, so an IPv4 run keeps its titles. */
  const title = (v: IpFamily, text: string) => (family === 'dual' ? `${text} [IPv${v}]` : family === 4 ? text : `[ipv6] ${text}`);
  const NODE_PORT_CLUSTER = 30080;
  const NODE_PORT_LOCAL = 30081;
  const OUTSIDE_GATEWAY = '10.199.0.1';
  const OUTSIDE_CLIENT = '10.199.0.10';
  /** A client on the cluster network itself (the hub bridge), no node: it reaches node A's eth0 directly. */
  const LAN_CLIENT = '10.248.0.201';
  /** Its IPv6 address on the dual-stack underlay. */
  const LAN_CLIENT6 = 'fd00:248::201';
  const UNDERLAY6 = 'fd00:248::/64';
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
      family,
      // Node A's agent takes the link to the outside host as a NodePort device.
      devices: (i) => (i === A ? ['eth0', 'tdlout0'] : ['eth0']),
      beforeAgents: async (cluster) => {
        const nodeA = cluster.nodes[A]!;
        // The outside host routes the cluster network (the nodes' underlay addresses) via node A.
        outside = await addOutsideHost(cluster.pool, nodeA.netns, {
          gateway: versions.map((v) => ipIn(v, OUTSIDE_GATEWAY)),
          addresses: versions.map((v) => ipIn(v, OUTSIDE_CLIENT)),
          podCidr: versions.map((v) => (v === 4 ? '10.248.0.0/24' : UNDERLAY6)),
        });
      },
    });
    for (const i of [0, 1, 2]) {
      backends.push(await scene.addPod(i, { name: `be${i}`, labels: { app: 'be' } }));
      clients.push(await scene.addPod(i, { name: `client${i}`, labels: { app: 'client' } }));
    }
    outsideAgent = await scene.agentIn(outside!.netnsPath, 'outside');
    lanAgent = await scene.agentIn((await scene.cluster.addUnderlayHost('lan', LAN_CLIENT, family === 4 ? undefined : LAN_CLIENT6)).netnsPath, 'lan');
    await scene.waitConverged(20_000);
    for (const v of versions) {
      for (const n of scene.nodes) {
        await upsertService(n, sid(v, 1), { frontend: { ip: ipIn(v, VIP4), port: 80 }, backends: backends.map((b) => ({ ip: ipOf(b, v), port: POD_TCP_PORT })) });
        await upsertService(n, sid(v, 2), { frontend: { ip: ipIn(v, VIP4), port: 53, protocol: 'UDP' }, backends: backends.map((b) => ({ ip: ipOf(b, v), port: POD_UDP_PORT })) });
      }
      const onlyB = [{ ip: ipOf(backends[B]!, v), port: POD_TCP_PORT }];
      const frontend = v === 4 ? '0.0.0.0' : nodeIp(scene.node(A), 6);
      await upsertService(scene.node(A), sid(v, 3), { type: 'NodePort', frontend: { ip: frontend, port: NODE_PORT_CLUSTER }, backends: onlyB, trafficPolicy: 'Cluster' });
      await upsertService(scene.node(A), sid(v, 4), { type: 'NodePort', frontend: { ip: frontend, port: NODE_PORT_LOCAL }, backends: onlyB, trafficPolicy: 'Local' });
    }
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
  const ipOf = (p: ClusterPod, v: IpFamily) => addressIn(p.spec.name, p.addresses, v);
  /** A node's address of IP version v on the cluster network (its IPv6 one on the dual-stack underlay). */
  const nodeIp = (n: SceneNode, v: IpFamily) => addressIn(n.name, { 4: n.ip, ...(n.ip6 !== undefined ? { 6: n.ip6 } : {}) }, v);

  async function nodeAddresses(n: SceneNode): Promise<string[]> {
    return (await s().nodeStatus(n.index)).find((x) => x.local)!.addresses.map((a) => a.ip);
  }

  describe('a ClusterIP with a backend on each of three nodes', () => {
    for (const v of versions) test(title(v, 'from a pod on every node: every connection answered, spread over backends on several nodes, the backend sees the client pod'), T, async (t) => {
      const VIP = ipIn(v, VIP4);
      for (const c of clients) {
        const sessions = await c.agent.tcpSessions({ dst: VIP, port: 80 }, { count: 30, requests: 2, concurrency: 6 });
        await assertAllAnswered(c.node, sessions, `${c.spec.name}@n${c.node.index} -> ${VIP}:80`);
        const share = Object.fromEntries(shareByBackend(sessions));
        t.diagnostic(`${c.spec.name}@n${c.node.index}: ${JSON.stringify(share)}`);
        assert.ok(distinct(Object.keys(share).map(nodeOfBackend)).length >= 2, `connections from ${c.spec.name} reach backends on several nodes: ${JSON.stringify(share)}`);
        assert.deepEqual(distinct(sessions.flatMap((x) => x.answers.map((a) => a.peer))), [ipOf(c, v)], 'no SNAT between pods across nodes');
        const shots = await c.agent.udpShots({ dst: VIP, port: 53 }, { count: 20, concurrency: 5 });
        await assertAllAnswered(c.node, shots, `${c.spec.name}@n${c.node.index} -> ${VIP}:53/udp`);
        assert.ok(distinct(shots.map((x) => nodeOfBackend(x.answer!.name))).length >= 2, `UDP spread: ${JSON.stringify(Object.fromEntries(shareByBackend(shots)))}`);
      }
    });

    for (const v of versions) test(title(v, 'from every node itself: every connection answered, spread over backends on several nodes'), T, async (t) => {
      const VIP = ipIn(v, VIP4);
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
    for (const v of versions) test(title(v, 'trafficPolicy Cluster: answered by the backend on B, which sees node A\'s address'), T, async (t) => {
      const a = s().node(A);
      const dst = nodeIp(a, v);
      const sessions = await outsideAgent!.tcpSessions({ dst, port: NODE_PORT_CLUSTER }, { count: 20, requests: 3, concurrency: 5 });
      await assertAllAnswered(a, sessions, `outside -> ${dst}:${NODE_PORT_CLUSTER}`);
      const answers = sessions.flatMap((x) => x.answers);
      assert.deepEqual(distinct(answers.map((x) => x.name)), [backends[B]!.spec.name]);
      const peers = distinct(answers.map((x) => x.peer));
      const addrs = [...(await nodeAddresses(a)), nodeIp(a, v)];
      t.diagnostic(`the backend on B saw ${JSON.stringify(peers)} (node A's addresses ${JSON.stringify(addrs)})`);
      assert.equal(peers.length, 1);
      assert.ok(addrs.includes(peers[0]!) || peers[0] === ipIn(v, OUTSIDE_GATEWAY), `the backend saw an address of node A, not the client ${ipIn(v, OUTSIDE_CLIENT)}: ${peers[0]}`);
    });

    for (const v of versions) test(title(v, 'trafficPolicy Cluster from a client on the underlay network (arriving on A\'s eth0): answered by the backend on B, which sees node A\'s address'), T, async (t) => {
      const a = s().node(A);
      const dst = nodeIp(a, v);
      const sessions = await lanAgent!.tcpSessions({ dst, port: NODE_PORT_CLUSTER }, { count: 10, requests: 3, concurrency: 5 });
      await assertAllAnswered(a, sessions, `underlay client -> ${dst}:${NODE_PORT_CLUSTER}`);
      const answers = sessions.flatMap((x) => x.answers);
      assert.deepEqual(distinct(answers.map((x) => x.name)), [backends[B]!.spec.name]);
      const peers = distinct(answers.map((x) => x.peer));
      t.diagnostic(`the backend on B saw ${JSON.stringify(peers)}`);
      assert.deepEqual(peers, [dst], 'SNAT to node A\'s address on the underlay');
    });

    for (const v of versions) test(title(v, 'trafficPolicy Local: node A has no backend of its own and refuses'), T, async () => {
      const a = s().node(A);
      const dst = nodeIp(a, v);
      const before = dropCounts(await bpfMetrics(a));
      const r = await outsideAgent!.tcpOnce({ dst, port: NODE_PORT_LOCAL }, 700);
      const after = dropCounts(await bpfMetrics(a));
      const noService = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('NO_SERVICE')).reduce((sum, [, n]) => sum + n, 0);
      assert.notEqual(r.outcome, 'open', `outside -> Local NodePort without a local backend: ${JSON.stringify(r.answers)}`);
      assert.ok(noService(after) > noService(before), `counted as NO_SERVICE on A: ${JSON.stringify(before)} -> ${JSON.stringify(after)} (client saw ${r.outcome})`);
      // A pod is internal traffic: every backend of the service, B's too.
      const fromPod = await clients[A]!.agent.tcpSessions({ dst, port: NODE_PORT_LOCAL }, { count: 3, requests: 1, concurrency: 3 });
      await assertAllAnswered(a, fromPod, 'a pod on A reaches the Local NodePort\'s backend on B');
    });
  });

  describe('the ClusterIP from outside the cluster', () => {
    const clusterIpDrops = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('CLUSTERIP_FROM_OUTSIDE')).reduce((sum, [, n]) => sum + n, 0);

    for (const v of versions) test(title(v, 'hosts that route the service CIDR via node A (behind A, on the underlay) are refused as CLUSTERIP_FROM_OUTSIDE; the NodePort answers them'), T, async (t) => {
      const a = s().node(A);
      const VIP = ipIn(v, VIP4);
      await runOk(['ip', '-n', outside!.netns, 'route', 'replace', serviceCidr(v), 'via', ipIn(v, OUTSIDE_GATEWAY)]);
      const lanNs = `${s().cluster.pool.prefix}lan`;
      await runOk(['ip', '-n', lanNs, 'route', 'replace', serviceCidr(v), 'via', nodeIp(a, v)]);
      const before = dropCounts(await bpfMetrics(a));
      const behindA = await outsideAgent!.tcpOnce({ dst: VIP, port: 80 }, 1000);
      const onUnderlay = await lanAgent!.tcpOnce({ dst: VIP, port: 80 }, 1000);
      const after = dropCounts(await bpfMetrics(a));
      t.diagnostic(`behind A: ${behindA.outcome} ${JSON.stringify(behindA.answers)}; on the underlay: ${onUnderlay.outcome} ${JSON.stringify(onUnderlay.answers)}; A's drops ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
      assert.deepEqual({ behindA: behindA.outcome, onUnderlay: onUnderlay.outcome }, { behindA: 'timeout', onUnderlay: 'timeout' }, 'no backend answers the outside');
      assert.ok(clusterIpDrops(after) - clusterIpDrops(before) >= 2, `node A counted them as CLUSTERIP_FROM_OUTSIDE: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
      const nodePort = await outsideAgent!.tcpOnce({ dst: nodeIp(a, v), port: NODE_PORT_CLUSTER }, 2000);
      assert.equal(nodePort.outcome, 'open', 'the NodePort answers the same host');
    });

    for (const v of versions) test(title(v, 'a host on a link of node B that is not in --devices, routing the service CIDR via B, is refused too (at tendril_host)'), T, async (t) => {
      const b = s().node(B);
      const pool = s().cluster.pool;
      const { name: ns, path } = await pool.add(`outb${v}`);
      const link = `tdloutb${v}`;
      const len = v === 4 ? 24 : 120;
      const nodad = v === 6 ? ['nodad'] : [];
      await runOk(['ip', '-n', b.node, 'link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', path]);
      try {
        await runOk(['ip', '-n', b.node, 'addr', 'add', `${ipIn(v, '10.198.0.1')}/${len}`, 'dev', link, ...nodad]);
        await runOk(['ip', '-n', b.node, 'link', 'set', link, 'up']);
        await runOk(['ip', '-n', ns, 'addr', 'add', `${ipIn(v, '10.198.0.10')}/${len}`, 'dev', 'eth0', ...nodad]);
        await runOk(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
        await runOk(['ip', '-n', ns, 'route', 'add', serviceCidr(v), 'via', ipIn(v, '10.198.0.1')]);
        const client = await s().agentIn(path, `outb${v}`);
        const before = dropCounts(await bpfMetrics(b));
        const r = await client.tcpOnce({ dst: ipIn(v, VIP4), port: 80 }, 1000);
        const after = dropCounts(await bpfMetrics(b));
        t.diagnostic(`${r.outcome} ${JSON.stringify(r.answers)}; B's drops ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
        assert.equal(r.outcome, 'timeout', 'no backend answers a host outside the cluster');
        assert.ok(clusterIpDrops(after) > clusterIpDrops(before), `node B counted it as CLUSTERIP_FROM_OUTSIDE: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
      } finally {
        await runOk(['ip', '-n', b.node, 'link', 'del', link]);
      }
    });
  });
}
