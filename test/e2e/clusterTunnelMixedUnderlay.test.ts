// A cluster that mixes a dual-stack node (its node IP IPv4, an IPv6 address
// beside it) with an IPv6-only one (its node IP IPv6, --node-ip) in tunnel
// mode: each reaches the other over the IPv6 underlay, the overlay carrying
// both families of dual-stack pods. The IPv6-only node's IPv4 VXLAN is
// dropped both ways on its eth0 (nftables in its namespace; its IPv4 stays
// for etcd alone), so a tunnel endpoint chosen by the peer's IPv4 node IP
// would lose every packet.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TUNNEL_DEFAULT_PORT } from '../../src/datapath/bpf/constants.js';
import { type ClusterPod, ClusterScene, POD_TCP_PORT } from '../support/clusterScene.js';
import { requireRoot } from '../support/root.js';
import { runOk } from '../support/run.js';

requireRoot('the mixed-underlay cluster test');

const T = { timeout: 90_000 };
/** The dual-stack underlay's IPv6 address of node i (clusterInABox's). */
const nodeIp6 = (i: number) => `fd00:248::${11 + i}`;

describe('tunnel mode, a dual-stack node beside an IPv6-only one', () => {
  let scene: ClusterScene | undefined;
  const s = () => scene!;
  const pods: ClusterPod[] = [];

  before(async () => {
    scene = await ClusterScene.create({
      tag: 'ctmx',
      nodeCount: 2,
      routingMode: 'tunnel',
      ipam: 'block',
      family: 'dual',
      nodeArgs: (i) => (i === 1 ? ['--node-ip', nodeIp6(1)] : []),
      beforeAgents: async (cluster) => {
        const ns = cluster.nodes[1]!.netns;
        await runOk(['ip', 'netns', 'exec', ns, 'nft', 'add', 'table', 'inet', 'tdlmix']);
        for (const [hook, dir] of [['input', 'dport'], ['output', 'dport']] as const) {
          await runOk(['ip', 'netns', 'exec', ns, 'nft', 'add', 'chain', 'inet', 'tdlmix', hook, `{ type filter hook ${hook} priority 0; }`]);
          await runOk(['ip', 'netns', 'exec', ns, 'nft', 'add', 'rule', 'inet', 'tdlmix', hook, 'meta', 'nfproto', 'ipv4', 'udp', dir, String(TUNNEL_DEFAULT_PORT), 'counter', 'drop']);
        }
      },
    });
    // (ClusterScene.waitConverged expects every tunnel endpoint at a node's IPv4 node IP: the first test waits instead.)
    for (const i of [0, 1]) pods.push(await s().addPod(i, { name: `m${i}`, labels: { app: `m${i}` } }));
  });

  after(async () => {
    await scene?.cleanup();
  });

  test('each node names the other\'s IPv6 address as the tunnel endpoint of its pods', T, async () => {
    for (const [index, peer] of [[0, 1], [1, 0]] as const) {
      const deadline = Date.now() + 20_000;
      const want = pods[peer]!.addresses;
      let cache = await s().ipcache(index);
      const endpointOf = (ip: string) => cache.find((e) => e.prefix === ip || e.prefix === `${ip}/${ip.includes(':') ? 128 : 32}`)?.hostIP;
      while ((endpointOf(want[4]!) === undefined || endpointOf(want[6]!) === undefined) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        cache = await s().ipcache(index);
      }
      assert.deepEqual([endpointOf(want[4]!), endpointOf(want[6]!)], [nodeIp6(peer), nodeIp6(peer)], `node ${index}'s ipcache for the pod on node ${peer}`);
    }
  });

  test('the pods reach each other on both families (ICMP, TCP), with their own addresses', T, async () => {
    const [m0, m1] = pods as [ClusterPod, ClusterPod];
    const seen: Record<string, string> = {};
    const want: Record<string, string> = {};
    for (const v of [4, 6] as const) {
      for (const [a, b] of [[m0, m1], [m1, m0]] as const) {
        const what = `${a.spec.name} -> ${b.spec.name} IPv${v}`;
        seen[`${what} icmp`] = (await s().ping(a.netns, b.addresses[v]!, { count: 3, waitSeconds: 2 })).ok ? 'ok' : 'lost';
        const r = await a.agent.tcpOnce({ dst: b.addresses[v]!, port: POD_TCP_PORT }, 3000);
        seen[`${what} tcp`] = r.outcome === 'open' ? `seen as ${r.answers[0]?.peer ?? '?'}` : r.outcome;
        want[`${what} icmp`] = 'ok';
        want[`${what} tcp`] = `seen as ${a.addresses[v]}`;
      }
    }
    assert.deepEqual(seen, want);
  });
});
