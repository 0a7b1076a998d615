// IPv6 pods across nodes, in either routing mode (one test file per mode):
// a two-node cluster whose block IPAM has an IPv6 pool next to the IPv4 one
// (dual-stack pods), on an underlay that is dual-stack (each node's eth0
// gets an IPv6 address before the agents start) or IPv6 only (`underlay: 6`:
// no IPv4 address on any node's eth0, etcd on IPv6, the node IPs IPv6).
// Native: each node routes the other's IPv6 pod CIDR via that node's IPv6
// InternalIP. Tunnel: the pod packets cross the underlay in VXLAN with the
// source pod's identity as VNI, in an outer header of the underlay's family.
// Traffic really flows pod to pod (ICMPv6, TCP, UDP; IPv4 too), and the
// receiving node classifies the source (native: by its ipcache; tunnel: by
// the VNI), so a policy admitting that pod admits it, and one admitting only
// `host` does not; a reply reaches a pod whose ingress policy does not admit
// the peer (conntrack), a new connection from the peer does not. On an IPv6
// underlay only nodes may send VXLAN: a host on it that is no node is
// dropped with OVERLAY_NOT_NODE.
// In tunnel mode the node's own IPv6 packets to a remote pod take its route
// into tendril_host and cross with the host identity; the node reaches an
// IPv6 ClusterIP whose backends are on both nodes.
// An IPv6 NodePort on one node whose backend is on the other answers a host
// on the underlay, SNATed to the node's IPv6 address (tunnel: with the
// client's identity as VNI).
// The scene is built here: a second pool and an IPv6 underlay on top of the cluster box.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { VxlanCapture } from '../support/vxlanCapture.js';
import { bpfMetrics, dropCounts } from '../support/datapathObserve.js';
import { deletePolicyAndWait, importPolicyAndWait } from '../support/datapathNode.js';
import type { ClusterInABox, UnderlayFamily } from '../support/clusterInABox.js';
import { type ClusterPod, ClusterScene, NODE_ROUTE_PROTOCOL, POD_TCP_PORT, type RoutingMode, TUNNEL_OVERHEAD, VXLAN_PORT } from '../support/clusterScene.js';
import { tendrilPolicy } from '../support/policyDocuments.js';
import { untilListening } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { runOk, toolEnv } from '../support/run.js';
import { HOST_NEXTHOP6 } from '../../src/datapath/linux/hostNextHop.js';
import { ReservedIdentity } from '../../src/identity/constants.js';
import { assertAllAnswered, upsertService } from '../support/serviceApi.js';
import { ServiceAgentProcess, shareByBackend } from '../support/serviceProcess.js';

const NS = 'tdl-cluster';
const POD_POOL6 = 'fd00:249::/48';
const nodeIp6 = (index: number) => `fd00:248::${11 + index}`;
const IPERF_PORT = 5201;
/** An IPv6 ClusterIP, and the port its IPv6 backends (p0 and p1, one per node) listen on. */
const VIP6 = 'fd00:96::10';
const BACKEND6_PORT = 8086;
/** A host on the IPv6 underlay that is no node. */
const ATTACKER_IP6 = 'fd00:248::66';
const T = { timeout: 90_000 };
/** An IPv6 NodePort on node 0's IPv6 address, and a host on the underlay (no node) with both families. */
const NODE_PORT6 = 30090;
const LAN_CLIENT4 = '10.248.0.201';
const LAN_CLIENT6 = 'fd00:248::201';

/**
 * `ipv6Only`: each node's node IP is its IPv6 address (--node-ip), so its
 * record has no IPv4 InternalIP, as an IPv6-only node's (the underlay keeps
 * IPv4 for etcd). `underlay: 6`: the same node IPs on an underlay that has
 * no IPv4 at all (etcd on the hub's IPv6 address).
 */
export function clusterIpv6Suite(opts: { tag: string; routingMode: RoutingMode; ipv6Only?: boolean; underlay?: UnderlayFamily }): void {
  requireRoot(`the IPv6 cross-node suite (${opts.routingMode})`);
  const underlay6 = opts.underlay === 6;
  /** Each node's record has its IPv6 address as its only InternalIP. */
  const v6NodeIp = opts.ipv6Only === true || underlay6;
  const label = `${opts.routingMode}${underlay6 ? ', IPv6 underlay' : ''}`;
  let scene: ClusterScene | undefined;
  const s = () => scene!;
  const pods: ClusterPod[] = [];
  const ip6: Map<ClusterPod, string> = new Map();
  /** IPv6 backends in p0 and p1 (the scene's pod agents listen on IPv4 only). */
  const backends6: ServiceAgentProcess[] = [];

  /** The global IPv6 address of a pod's eth0. */
  async function podIp6(pod: ClusterPod): Promise<string> {
    const out = JSON.parse(await runOk(['ip', '-n', pod.netns, '-j', '-6', 'addr', 'show', 'dev', 'eth0', 'scope', 'global'])) as Array<{ addr_info: Array<{ local: string }> }>;
    const a = out[0]?.addr_info[0]?.local;
    assert.ok(a, `${pod.spec.name} has a global IPv6 address: ${JSON.stringify(out)}`);
    return a;
  }

  async function ping6(netns: string, dst: string): Promise<string> {
    // Three tries, 2 s each: the first packet of a path waits for neighbour discovery on every hop (a retried NS takes 1 s).
    const r = await s().exec(netns, ['ping', '-6', '-n', '-q', '-c', '3', '-i', '0.2', '-W', '2', dst]);
    return r.code === 0 ? 'ok' : 'lost';
  }

  /** One iperf3 run (TCP, or UDP with `udp`) from `from` to `to` over IPv6: the client address the server saw, or the error. */
  async function iperf6(from: ClusterPod, to: ClusterPod, udp = false): Promise<string> {
    const server = spawn('nsenter', [`--net=${to.netnsPath}`, '--', 'iperf3', '-s', '-1', '-J', '-p', String(IPERF_PORT)], { env: toolEnv(), stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    server.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise((r) => server.once('exit', r));
    try {
      await untilListening(to.netns, 'tcp', IPERF_PORT, 5000);
      const r = await s().exec(from.netns, ['iperf3', '-6', '-c', ip6.get(to)!, '-p', String(IPERF_PORT), '-t', '1', '-J', '--connect-timeout', '2000', ...(udp ? ['-u', '-b', '10M'] : [])]);
      const report = JSON.parse(r.stdout || '{}') as { error?: string };
      if (report.error !== undefined) return `error: ${report.error}`;
      // The one-off server writes its report when it exits, after the client's test: on a busy machine that takes a while.
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      const seen = JSON.parse(out || '{}') as { error?: string; start?: { connected?: Array<{ remote_host: string }> } };
      const peer = seen.start?.connected?.[0]?.remote_host;
      return peer !== undefined ? `seen as ${peer}` : `no server report (${seen.error ?? (out === '' ? 'the server wrote nothing' : out.slice(0, 200))})`;
    } finally {
      server.kill('SIGKILL');
      await exited;
    }
  }

  before(async () => {
    scene = await ClusterScene.create({
      tag: opts.tag,
      nodeCount: 2,
      routingMode: opts.routingMode,
      ipam: 'block',
      // On an IPv6 underlay the nodes' addresses are these very nodeIp6(i), and their node IPs.
      ...(underlay6
        ? { underlay: 6 as const }
        : {
            beforeAgents: async (cluster: ClusterInABox) => {
              // nodad: the addresses are usable at once (the agents read them at start).
              for (const [i, n] of cluster.nodes.entries()) await runOk(['ip', '-n', n.netns, '-6', 'addr', 'add', `${nodeIp6(i)}/64`, 'dev', 'eth0', 'nodad']);
            },
          }),
      nodeArgs: (i) => ['--pool-cidr', POD_POOL6, ...(opts.ipv6Only === true ? ['--node-ip', nodeIp6(i)] : [])],
    });
    if (underlay6) assert.deepEqual(scene.nodes.map((n) => n.ip), scene.nodes.map((n) => nodeIp6(n.index)), 'the IPv6 underlay\'s node addresses');
    for (const [i, name] of [[0, 'p0'], [1, 'p1'], [0, 'q0']] as const) pods.push(await scene.addPod(i, { name, labels: { app: name }, namespace: NS }));
    for (const p of pods) ip6.set(p, await podIp6(p));
    for (const p of pods.slice(0, 2)) backends6.push(await ServiceAgentProcess.start(p.netnsPath, { name: p.spec.name, tcpPorts: [BACKEND6_PORT], udpPorts: [], versions: [6] }));
    await waitConverged6(20_000);
  });

  /** The node's IPv6 routes of protocol 212, as `dst via gateway dev device`. */
  async function routes6(index: number): Promise<string[]> {
    const out = await runOk(['ip', '-n', s().node(index).node, '-j', '-6', 'route', 'show', 'proto', String(NODE_ROUTE_PROTOCOL)]);
    return (JSON.parse(out || '[]') as Array<{ dst: string; gateway?: string; dev?: string }>).map((r) => `${r.dst} via ${r.gateway} dev ${r.dev}`).sort();
  }

  /**
   * ClusterScene.waitConverged looks at IPv4 routes only: here, until each
   * node has an IPv6 route to every IPv6 pod CIDR of the other and every pod's
   * IPv6 address in its ipcache.
   */
  async function waitConverged6(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let gap = '';
    for (;;) {
      gap = '';
      for (const n of s().nodes) {
        const status = await s().nodeStatus(n.index);
        const want = status.filter((x) => !x.local).flatMap((x) => x.podCidrs.filter((c) => c.includes(':')));
        const have = (await routes6(n.index)).map((r) => r.split(' ')[0]!);
        const missing = want.filter((c) => !have.includes(c));
        if (want.length === 0 || missing.length > 0) gap += `${n.name}: IPv6 routes missing for ${JSON.stringify(want.length === 0 ? 'any' : missing)}; `;
        const cache = await s().ipcache(n.index);
        for (const p of pods) if (!cache.some((e) => e.prefix === ip6.get(p) || e.prefix === `${ip6.get(p)}/128`)) gap += `${n.name}: no ipcache entry for ${p.spec.name} ${ip6.get(p)}; `;
      }
      if (gap === '') return;
      if (Date.now() > deadline) throw new Error(`not converged: ${gap}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  after(async () => {
    for (const a of backends6.splice(0)) await a.stop();
    await scene?.cleanup();
  });

  /** The node's IPv6 router address (on tendril_host): the source of what it sends into tendril_host. */
  async function router6(index: number): Promise<string> {
    const out = JSON.parse(await runOk(['ip', '-n', s().node(index).node, '-j', '-6', 'addr', 'show', 'dev', 'tendril_host', 'scope', 'global'])) as Array<{ addr_info: Array<{ local: string }> }>;
    const a = out[0]?.addr_info[0]?.local;
    assert.ok(a, `node ${index} has an IPv6 router address: ${JSON.stringify(out)}`);
    return a;
  }

  test(`[${label}] each node publishes its IPv6 InternalIP; native: routes the other node's IPv6 pod CIDR via it (protocol 212), tunnel: into tendril_host via the IPv6 next hop (the node's own packets are encapsulated there)`, T, async () => {
    for (const n of s().nodes) {
      const status = await s().nodeStatus(n.index);
      for (const peer of s().nodes) {
        const st = status.find((x) => x.name === peer.name)!;
        assert.deepEqual(st.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.ip), v6NodeIp ? [nodeIp6(peer.index)] : [peer.ip, nodeIp6(peer.index)], `${n.name} sees ${peer.name}'s InternalIPs`);
      }
      const other = status.find((x) => !x.local)!;
      const cidrs6 = other.podCidrs.filter((c) => c.includes(':'));
      assert.ok(cidrs6.length > 0, `${other.name} has an IPv6 pod CIDR: ${JSON.stringify(other.podCidrs)}`);
      if (opts.routingMode === 'tunnel') {
        assert.deepEqual(await routes6(n.index), cidrs6.map((c) => `${c} via ${HOST_NEXTHOP6} dev tendril_host`).sort(), `${n.name}: its IPv6 routes to ${other.name}'s pods lead into tendril_host`);
        continue;
      }
      assert.deepEqual(
        await routes6(n.index),
        cidrs6.map((c) => `${c} via ${nodeIp6(s().nodes.find((x) => x.name === other.name)!.index)} dev eth0`).sort(),
        `${n.name}: its IPv6 routes to ${other.name}'s pods`,
      );
    }
  });

  test(`[${label}] IPv6 flows pod to pod across nodes (ICMPv6, TCP, UDP), with the client pod's own address`, T, async () => {
    const [p0, p1] = [pods[0]!, pods[1]!];
    const seen = {
      'p0 -> p1 icmp': await ping6(p0.netns, ip6.get(p1)!),
      'p1 -> p0 icmp': await ping6(p1.netns, ip6.get(p0)!),
      'p0 -> p1 tcp': await iperf6(p0, p1),
      'p1 -> p0 udp': await iperf6(p1, p0, true),
      'node 0 -> p1 icmp': await ping6(s().node(0).node, ip6.get(p1)!),
    };
    assert.deepEqual(seen, {
      'p0 -> p1 icmp': 'ok',
      'p1 -> p0 icmp': 'ok',
      'p0 -> p1 tcp': `seen as ${ip6.get(p0)}`,
      'p1 -> p0 udp': `seen as ${ip6.get(p1)}`,
      'node 0 -> p1 icmp': 'ok',
    });
  });

  test(`[${label}] each node reaches the other node's IPv6 pods (TCP), and an IPv6 ClusterIP with a backend on each node, from its IPv6 router address`, T, async () => {
    const [p0, p1] = [pods[0]!, pods[1]!];
    for (const n of s().nodes) await upsertService(n, 61, { frontend: { ip: VIP6, port: 80 }, backends: [p0, p1].map((p) => ({ ip: ip6.get(p)!, port: BACKEND6_PORT })) });
    for (const [index, remote] of [[0, p1], [1, p0]] as const) {
      const node = await s().nodeAgent(index);
      const direct = await node.tcpOnce({ dst: ip6.get(remote)!, port: BACKEND6_PORT }, 3000);
      assert.deepEqual(direct.answers.map((a) => a.name), [remote.spec.name], `node ${index} -> ${remote.spec.name} [${ip6.get(remote)}]:${BACKEND6_PORT}: ${JSON.stringify(direct)}`);
      // Tunnel mode: through tendril_host, from the router address; native: the kernel's route on eth0 picks the source.
      if (opts.routingMode === 'tunnel') assert.deepEqual(direct.answers.map((a) => a.peer), [await router6(index)], 'the node reaches a remote pod from its IPv6 router address');
      const sessions = await node.tcpSessions({ dst: VIP6, port: 80 }, { count: 24, requests: 2, concurrency: 6, timeoutMs: 3000 });
      await assertAllAnswered(s().node(index), sessions, `node ${index} -> [${VIP6}]:80`);
      assert.deepEqual([...shareByBackend(sessions).keys()].sort(), ['p0', 'p1'], `node ${index}'s connections reach the backends on both nodes: ${JSON.stringify(Object.fromEntries(shareByBackend(sessions)))}`);
      const peers = [...new Set(sessions.flatMap((x) => x.answers.map((a) => a.peer)))];
      assert.deepEqual(peers, [await router6(index)], 'the node reaches an IPv6 service from its IPv6 router address (the route through tendril_host)');
    }
  });

  // Native routing reaches IPv4 pod CIDRs via an IPv4 InternalIP only (remoteNodeRoutes.ts): a node known by its IPv6 address alone has none.
  if (!(opts.routingMode === 'native' && v6NodeIp)) test(`[${label}] the dual-stack pods reach each other on IPv4 too (ICMP, TCP), with the client pod's own address`, T, async () => {
    const [p0, p1] = [pods[0]!, pods[1]!];
    const tcp = async (a: ClusterPod, b: ClusterPod) => {
      const r = await a.agent.tcpOnce({ dst: b.ip, port: POD_TCP_PORT }, 3000);
      return r.outcome === 'open' ? `seen as ${r.answers[0]?.peer ?? '?'}` : r.outcome;
    };
    const seen = {
      'p0 -> p1 icmp': (await s().ping(p0.netns, p1.ip, { count: 3, waitSeconds: 2 })).ok,
      'p1 -> p0 icmp': (await s().ping(p1.netns, p0.ip, { count: 3, waitSeconds: 2 })).ok,
      'p0 -> p1 tcp': await tcp(p0, p1),
      'p1 -> p0 tcp': await tcp(p1, p0),
    };
    assert.deepEqual(seen, { 'p0 -> p1 icmp': true, 'p1 -> p0 icmp': true, 'p0 -> p1 tcp': `seen as ${p0.ip}`, 'p1 -> p0 tcp': `seen as ${p1.ip}` });
  });

  test(`[${label}] an IPv6 reply from another node reaches a pod whose ingress policy does not admit the peer (conntrack); a new connection from that peer does not`, T, async () => {
    const [p0, p1, q0] = pods as [ClusterPod, ClusterPod, ClusterPod];
    const n0 = s().node(0);
    // p0 admits q0 only: p1 (on the other node) is no peer it admits.
    await importPolicyAndWait(n0, tendrilPolicy(NS, 'p0-from-q0', 'endpointSelector: {matchLabels: {app: p0}}\ningress:\n- fromEndpoints: [{matchLabels: {app: q0}}]'));
    try {
      const tcp6 = async (a: ClusterPod, b: ClusterPod) => (await a.agent.tcpOnce({ dst: ip6.get(b)!, port: POD_TCP_PORT }, 1500)).outcome;
      const before = dropCounts(await bpfMetrics(n0));
      const seen = {
        'p0 -> p1 tcp (replies come back over the other node)': await tcp6(p0, p1),
        'p0 -> p1 icmp': await ping6(p0.netns, ip6.get(p1)!),
        'p1 -> p0 tcp (new)': await tcp6(p1, p0),
        'q0 -> p0 tcp (admitted)': await tcp6(q0, p0),
      };
      assert.deepEqual(seen, { 'p0 -> p1 tcp (replies come back over the other node)': 'open', 'p0 -> p1 icmp': 'ok', 'p1 -> p0 tcp (new)': 'timeout', 'q0 -> p0 tcp (admitted)': 'open' });
      const policyDrops = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('POLICY')).reduce((sum, [, v]) => sum + v, 0);
      assert.ok(policyDrops(dropCounts(await bpfMetrics(n0))) > policyDrops(before), 'node 0 counted the new connection\'s policy drops');
    } finally {
      await deletePolicyAndWait(n0, ['--namespace', NS, '--name', 'p0-from-q0']);
    }
  });

  if (opts.routingMode === 'tunnel') {
    test(`[${label}] pod to pod is VXLAN on the tunnel port between the node IPs (outer IPv${underlay6 ? 6 : 4}) with the source pod's identity as VNI, for IPv6${underlay6 ? ' and IPv4' : ''} pods`, T, async (t) => {
      const [a, b] = [pods[0]!, pods[1]!];
      const identity = (await s().endpointOf(a)).identity;
      const cap = await VxlanCapture.start(a.node.nodePath, 'eth0', `udp port ${VXLAN_PORT} and src host ${a.node.ip} and dst host ${b.node.ip}`, 3);
      const ping = await ping6(a.netns, ip6.get(b)!);
      const { packets, text } = await cap.done(5000);
      for (const p of packets) t.diagnostic(`captured: ${p.outerSrc} > ${p.outerDst}:${p.dstPort} vni ${p.vni} | ${p.inner}`);
      if (packets.length === 0) t.diagnostic(`tcpdump: ${text}`);
      assert.equal(ping, 'ok');
      const echoes = packets.filter((p) => p.inner.includes(`IP6 ${ip6.get(a)} > ${ip6.get(b)}: ICMP6, echo request`));
      assert.ok(echoes.length >= 1, `the echo requests crossed the underlay encapsulated: ${JSON.stringify(packets)}`);
      assert.deepEqual([...new Set(echoes.map((p) => `${p.outerSrc} > ${p.outerDst}:${p.dstPort} vni ${p.vni}`))], [`${a.node.ip} > ${b.node.ip}:${VXLAN_PORT} vni ${identity}`]);
      if (!underlay6) return;
      // The IPv4 side of the dual-stack pods crosses the same IPv6 underlay.
      const cap4 = await VxlanCapture.start(a.node.nodePath, 'eth0', `udp port ${VXLAN_PORT} and src host ${a.node.ip} and dst host ${b.node.ip}`, 3);
      const ping4 = await s().ping(a.netns, b.ip, { count: 3, waitSeconds: 2 });
      const four = (await cap4.done(5000)).packets.filter((p) => p.inner.includes(`IP ${a.ip} > ${b.ip}: ICMP echo request`));
      assert.ok(ping4.ok, ping4.output);
      assert.ok(four.length >= 1, `the IPv4 echo requests crossed the IPv6 underlay encapsulated: ${JSON.stringify(four)}`);
      assert.deepEqual([...new Set(four.map((p) => `${p.outerSrc} > ${p.outerDst}:${p.dstPort} vni ${p.vni}`))], [`${a.node.ip} > ${b.node.ip}:${VXLAN_PORT} vni ${identity}`]);
    });

    test('[tunnel] the node to a remote IPv6 pod is VXLAN from its IPv6 router address with the host identity (1) as VNI', T, async (t) => {
      const [a, b] = [s().node(0), pods[1]!];
      const source = await router6(0);
      const cap = await VxlanCapture.start(a.nodePath, 'eth0', `udp port ${VXLAN_PORT} and src host ${a.ip} and dst host ${b.node.ip}`, 2);
      const ping = await ping6(a.node, ip6.get(b)!);
      const { packets } = await cap.done(5000);
      for (const p of packets) t.diagnostic(`captured: ${p.outerSrc} > ${p.outerDst}:${p.dstPort} vni ${p.vni} | ${p.inner}`);
      assert.equal(ping, 'ok');
      const echoes = packets.filter((p) => p.inner.includes(`IP6 ${source} > ${ip6.get(b)}: ICMP6, echo request`));
      assert.ok(echoes.length >= 2 && echoes.every((p) => p.vni === 1), `node -> remote IPv6 pod carries VNI 1: ${JSON.stringify(packets)}`);
    });
  }

  if (opts.routingMode === 'tunnel' && underlay6) {
    test(`[${label}] the pod MTU leaves room for an outer IPv6 header (70 bytes below the underlay's): packets of the full pod MTU cross whole with DF set, IPv4 and IPv6`, T, async () => {
      const [a, b] = [pods[0]!, pods[1]!];
      const want = 1500 - TUNNEL_OVERHEAD - 20;
      assert.deepEqual({ pod: await s().mtuOf(a.netns, 'eth0'), vxlan: await s().mtuOf(a.node.node, 'tendril_vxlan') }, { pod: want, vxlan: want });
      const seen: Record<string, string> = {};
      // The echo's payload: the MTU less the IP header (20, IPv6 40) and ICMP's 8 bytes.
      for (const [v, dst, payload] of [[4, b.ip, want - 28], [6, ip6.get(b)!, want - 48]] as const) {
        const r = await s().exec(a.netns, ['ping', `-${v}`, '-n', '-q', '-M', 'do', '-s', String(payload), '-c', '3', '-i', '0.2', '-W', '2', dst]);
        seen[`IPv${v}`] = r.code === 0 ? 'ok' : `${r.stdout}${r.stderr}`.trim();
      }
      assert.deepEqual(seen, { IPv4: 'ok', IPv6: 'ok' }, `${want}-byte packets`);
    });

    test(`[${label}] only nodes may send VXLAN: a host on the IPv6 underlay that is no node is dropped as OVERLAY_NOT_NODE, even with an admitted pod's identity as VNI`, T, async () => {
      const [p0, p1] = [pods[0]!, pods[1]!];
      const n1 = s().node(1);
      const attacker = await s().cluster.addUnderlayHost('atk', ATTACKER_IP6);
      const ip = (args: string[]) => runOk(['ip', '-n', attacker.netns, ...args]);
      const identity = (await s().endpointOf(p0)).identity!;
      // p1 admits p0 only: the forged packets carry p0's identity as VNI and p0's address inside.
      await importPolicyAndWait(n1, tendrilPolicy(NS, 'p1-from-p0', 'endpointSelector: {matchLabels: {app: p1}}\ningress:\n- fromEndpoints: [{matchLabels: {app: p0}}]'));
      await ip(['link', 'add', 'tdlspoof', 'type', 'vxlan', 'id', String(identity), 'remote', n1.ip, 'local', ATTACKER_IP6, 'dstport', String(VXLAN_PORT), 'dev', 'eth0']);
      try {
        // No IPv6 on the device itself: its router solicitations and MLD reports are not the test's packets.
        await runOk(['ip', 'netns', 'exec', attacker.netns, 'sysctl', '-qw', 'net.ipv6.conf.tdlspoof.disable_ipv6=1']);
        await ip(['addr', 'add', `${p0.ip}/32`, 'dev', 'tdlspoof']);
        await ip(['link', 'set', 'tdlspoof', 'up']);
        await ip(['route', 'add', `${p1.ip}/32`, 'dev', 'tdlspoof']);
        await ip(['neigh', 'add', p1.ip, 'lladdr', '02:00:00:00:00:01', 'dev', 'tdlspoof', 'nud', 'permanent']);
        const before = dropCounts(await bpfMetrics(n1));
        const cap = await VxlanCapture.start(attacker.netnsPath, 'eth0', `udp port ${VXLAN_PORT} and dst host ${n1.ip}`, 3);
        const forged = await s().ping(attacker.netns, p1.ip, { count: 3, waitSeconds: 1 });
        const sent = (await cap.done(3000)).packets.filter((p) => p.vni === identity && p.inner.includes(`IP ${p0.ip} > ${p1.ip}: ICMP echo request`));
        const after = dropCounts(await bpfMetrics(n1));
        assert.ok(sent.length >= 3, `the forged packets left over IPv6 to ${n1.ip}: ${JSON.stringify(sent)}`);
        assert.equal(forged.ok, false, 'no echo reply to a forged VXLAN packet');
        assert.ok((after['OVERLAY_NOT_NODE/ingress'] ?? 0) >= (before['OVERLAY_NOT_NODE/ingress'] ?? 0) + 3, `node 1 dropped them as OVERLAY_NOT_NODE: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
        // The same packet from p0 through its node is admitted: the drop was the sender's, not the policy's.
        assert.ok((await s().ping(p0.netns, p1.ip, { count: 2, waitSeconds: 2 })).ok, 'p0 -> p1 through node 0');
      } finally {
        await ip(['link', 'del', 'tdlspoof']);
        await deletePolicyAndWait(n1, ['--namespace', NS, '--name', 'p1-from-p0']);
      }
    });
  }


  test(`[${label}] an IPv6 NodePort on node 0 whose only backend is on node 1, from a host on the underlay: answered, the backend sees node 0's IPv6 InternalIP (tunnel: in VXLAN with world-ipv6 as VNI); a policy admitting only host refuses the outside client`, T, async (t) => {
    const p1 = pods[1]!;
    const node0 = s().node(0);
    const lan = await s().cluster.addUnderlayHost('lan6', underlay6 ? LAN_CLIENT6 : LAN_CLIENT4, underlay6 ? undefined : LAN_CLIENT6);
    const client = await s().agentIn(lan.netnsPath, 'lan6');
    await upsertService(node0, 62, { type: 'NodePort', frontend: { ip: nodeIp6(0), port: NODE_PORT6 }, backends: [{ ip: ip6.get(p1)!, port: BACKEND6_PORT }], trafficPolicy: 'Cluster' });
    const cap = opts.routingMode === 'tunnel' ? await VxlanCapture.start(node0.nodePath, 'eth0', `udp port ${VXLAN_PORT} and src host ${node0.ip} and dst host ${p1.node.ip}`, 4) : undefined;
    const sessions = await client.tcpSessions({ dst: nodeIp6(0), port: NODE_PORT6 }, { count: 8, requests: 2, concurrency: 4, timeoutMs: 3000 });
    await assertAllAnswered(node0, sessions, `underlay host [${LAN_CLIENT6}] -> [${nodeIp6(0)}]:${NODE_PORT6}`);
    const answers = sessions.flatMap((x) => x.answers);
    assert.deepEqual([...new Set(answers.map((a) => a.name))], ['p1'], 'the backend on node 1 answers');
    assert.deepEqual([...new Set(answers.map((a) => a.peer))], [nodeIp6(0)], 'the backend sees node 0\'s IPv6 address (SNAT), not the client');
    if (cap) {
      const { packets } = await cap.done(5000);
      for (const p of packets.slice(0, 4)) t.diagnostic(`captured: ${p.outerSrc} > ${p.outerDst}:${p.dstPort} vni ${p.vni} | ${p.inner}`);
      const syns = packets.filter((p) => p.inner.includes(`IP6 ${nodeIp6(0)}.`) && p.inner.includes(`> ${ip6.get(p1)}.${BACKEND6_PORT}`));
      assert.ok(syns.length >= 1, `the NodePort flow crossed the underlay encapsulated: ${JSON.stringify(packets)}`);
      assert.deepEqual([...new Set(syns.map((p) => p.vni))], [ReservedIdentity.WorldIpv6], 'the VNI carries the outside client\'s identity (world-ipv6), never host');
    }
    // p1 admits the host only: the outside client is no host on node 1, whichever way the flow came.
    const n1 = s().node(1);
    const before = dropCounts(await bpfMetrics(n1));
    await importPolicyAndWait(n1, tendrilPolicy(NS, 'p1-from-p0', 'endpointSelector: {matchLabels: {app: p1}}\ningress:\n- fromEntities: [host]'));
    const refused = await client.tcpOnce({ dst: nodeIp6(0), port: NODE_PORT6 }, 1500);
    assert.notEqual(refused.outcome, 'open', `refused under a host-only policy: ${JSON.stringify(refused)}`);
    const policyDrops = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('POLICY')).reduce((sum, [, v]) => sum + v, 0);
    assert.ok(policyDrops(dropCounts(await bpfMetrics(n1))) > policyDrops(before), 'node 1 counted the policy drop');
  });


  test(`[${label}] the receiving node classifies an IPv6 source from another node as the remote pod, never host`, T, async () => {
    const [p0, p1, q0] = pods as [ClusterPod, ClusterPod, ClusterPod];
    const n1 = s().node(1);
    // p1 admits p0 only: p0 passes (its identity, not host or world); q0 on the same node does not.
    await importPolicyAndWait(n1, tendrilPolicy(NS, 'p1-from-p0', 'endpointSelector: {matchLabels: {app: p1}}\ningress:\n- fromEndpoints: [{matchLabels: {app: p0}}]'));
    assert.deepEqual({ p0: await ping6(p0.netns, ip6.get(p1)!), q0: await ping6(q0.netns, ip6.get(p1)!) }, { p0: 'ok', q0: 'lost' });
    // p1 admits the host only: a pod of another node is not the host, whatever way it came in.
    const before = dropCounts(await bpfMetrics(n1));
    await importPolicyAndWait(n1, tendrilPolicy(NS, 'p1-from-p0', 'endpointSelector: {matchLabels: {app: p1}}\ningress:\n- fromEntities: [host]'));
    assert.equal(await ping6(p0.netns, ip6.get(p1)!), 'lost');
    const drops = dropCounts(await bpfMetrics(n1));
    const policyDrops = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('POLICY')).reduce((sum, [, v]) => sum + v, 0);
    assert.ok(policyDrops(drops) > policyDrops(before), `node 1 counted policy drops: ${JSON.stringify(drops)}`);
  });
}
