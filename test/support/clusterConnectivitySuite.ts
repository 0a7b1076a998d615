/**
 * The connectivity suite every routing mode and IPAM mode of a many-node
 * cluster must pass (registered by one test file per mode and pod family:
 * IPv4, IPv6 or dual-stack pods, the IPv6 ones on a dual-stack underlay):
 * nodes agree, pod MTU fits the underlay, every pod reaches every pod on
 * other nodes over TCP, UDP and ICMP keeping its address, nodes reach
 * remote pods, pods reach remote nodes, traffic leaving the cluster is
 * masqueraded, and in tunnel mode the packets on the underlay are VXLAN
 * carrying the source identity. Each row runs on every IP version the pods
 * have.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { bpfIpcache } from './datapathObserve.js';
import { addressIn, type Family, familyName, hostCidr, type IpFamily, versionsOf } from './family.js';
import { inParallel } from './reachability.js';
import { untilListening } from './netns.js';
import { requireRoot } from './root.js';
import { toolEnv } from './run.js';
import { type ClusterIpam, type ClusterPod, ClusterScene, distinct, POD_TCP_PORT, POD_UDP_PORT, type RoutingMode, type SceneNode, TUNNEL_OVERHEAD, VXLAN_PORT } from './clusterScene.js';
import { failures } from './serviceProcess.js';
import { VxlanCapture } from './vxlanCapture.js';

/** A host on the cluster network that is no node: traffic to it leaves the cluster. */
const OUTSIDE_IP = '10.248.0.200';
/** Its IPv6 address on a dual-stack cluster network. */
const OUTSIDE_IP6 = 'fd00:248::c8';
const UNDERLAY_MTU = 1500;
const IPERF_PORT = 5201;
const T = { timeout: 90_000 };

export function clusterConnectivitySuite(opts: { tag: string; routingMode: RoutingMode; ipam: ClusterIpam; family?: Family; store?: 'etcd' | 'kubernetes' }): void {
  const family = opts.family ?? 4;
  requireRoot(`the cluster connectivity suite (${opts.routingMode}, ${opts.ipam}, ${familyName(family)})`);
  let scene: ClusterScene | undefined;
  const pods: ClusterPod[] = [];
  const s = () => scene!;
  const label = `${opts.routingMode}/${opts.ipam}${family === 4 ? '' : `/${familyName(family)}`}`;
  const versions = versionsOf(family);
  const ipOf = (p: ClusterPod, v: IpFamily) => addressIn(p.spec.name, p.addresses, v);
  /** A node's address of IP version v on the cluster network (its IPv6 one on a dual-stack underlay). */
  const nodeAddr = (n: SceneNode, v: IpFamily) => addressIn(n.name, { 4: n.ip, ...(n.ip6 !== undefined ? { 6: n.ip6 } : {}) }, v);
  const outsideIp = (v: IpFamily) => (v === 4 ? OUTSIDE_IP : OUTSIDE_IP6);
  /** The inner line tcpdump prints for an echo request or reply. */
  const echo = (v: IpFamily, src: string, dst: string, what: 'request' | 'reply') => (v === 4 ? `IP ${src} > ${dst}: ICMP echo ${what}` : `IP6 ${src} > ${dst}: ICMP6, echo ${what}`);

  before(async () => {
    scene = await ClusterScene.create({ tag: opts.tag, routingMode: opts.routingMode, ipam: opts.ipam, family, ...(opts.store ? { store: opts.store } : {}) });
    for (const i of [0, 1, 2]) pods.push(await scene.addPod(i, { name: `p${i}`, labels: { app: `p${i}` } }));
    const out = await scene.cluster.addUnderlayHost('out', OUTSIDE_IP, family === 4 ? undefined : OUTSIDE_IP6);
    await scene.agentIn(out.netnsPath, 'outside', { tcp: [POD_TCP_PORT], udp: [POD_UDP_PORT] });
  });

  after(async () => {
    await scene?.cleanup();
  });

  test(`[${label}] every node lists every node, with the routing mode, and installs the others' routes`, T, async (t) => {
    const ms = await s().waitConverged(20_000);
    t.diagnostic(`converged ${ms.toFixed(0)} ms after the last pod's ADD`);
    for (const n of s().nodes) {
      const status = await s().nodeStatus(n.index);
      for (const peer of s().nodes) {
        const st = status.find((x) => x.name === peer.name)!;
        assert.equal(st.routingMode, opts.routingMode, `${n.name} sees ${peer.name}'s routing mode`);
        assert.ok(st.addresses.some((a) => a.type === 'InternalIP' && a.ip === peer.ip), `${peer.name}'s InternalIP ${peer.ip}: ${JSON.stringify(st.addresses)}`);
        if (opts.routingMode === 'tunnel') assert.deepEqual(st.tunnel, { protocol: 'vxlan', port: VXLAN_PORT });
        assert.equal(st.local, peer.index === n.index);
      }
      // Native: every remote pod CIDR via its node's InternalIP of the CIDR's family. Tunnel: the IPv4 ones into tendril_host.
      const routes = [...(await s().nodeRoutes(n.index, 4)), ...(opts.routingMode === 'native' ? await s().nodeRoutes(n.index, 6) : [])];
      const remoteCidrs = status.filter((x) => !x.local).flatMap((x) => x.podCidrs.filter((c) => opts.routingMode === 'native' || !c.includes(':')));
      assert.deepEqual(distinct(routes.map((r) => r.dst)), distinct(remoteCidrs), `${n.name}: one proto-212 route per remote pod CIDR: ${JSON.stringify(routes)}`);
      if (opts.routingMode === 'native') {
        for (const r of routes) {
          const owner = status.find((x) => x.podCidrs.includes(r.dst))!;
          const gateway = owner.addresses.find((a) => a.type === 'InternalIP' && a.ip.includes(':') === r.dst.includes(':'))?.ip;
          assert.equal(r.gateway, gateway, `native: ${r.dst} via ${owner.name}'s node IP of its family`);
        }
      } else {
        assert.ok(routes.every((r) => r.dev === 'tendril_host'), `tunnel: remote pod CIDRs go to tendril_host: ${JSON.stringify(routes)}`);
      }
    }
  });

  test(`[${label}] the pods' MTU: the underlay's${opts.routingMode === 'tunnel' ? ' minus the VXLAN overhead' : ''}`, T, async () => {
    const want = opts.routingMode === 'tunnel' ? UNDERLAY_MTU - TUNNEL_OVERHEAD : UNDERLAY_MTU;
    const seen: Record<string, number | undefined> = {};
    for (const p of pods) seen[p.spec.name] = await s().mtuOf(p.netns, 'eth0');
    assert.deepEqual(seen, Object.fromEntries(pods.map((p) => [p.spec.name, want])));
    for (const n of s().nodes) {
      const vxlan = await s().mtuOf(n.node, 'tendril_vxlan');
      assert.equal(vxlan, opts.routingMode === 'tunnel' ? want : undefined, `${n.name}: tendril_vxlan ${opts.routingMode === 'tunnel' ? `with MTU ${want}` : 'absent in native mode'}`);
      if (opts.routingMode === 'tunnel') assert.equal(await s().mtuOf(n.node, 'tendril_host'), want, `${n.name}: tendril_host carries node -> remote pod traffic into the overlay`);
    }
  });

  for (const v of versions) {
    test(`[${label}] IPv${v}: packets of the full pod MTU cross between nodes whole (ICMP with DF set)`, T, async () => {
      const mtu = (await s().mtuOf(pods[0]!.netns, 'eth0'))!;
      // The echo's payload is the MTU less the IP header (20, IPv6 40) and ICMP's 8 bytes.
      const payload = mtu - (v === 4 ? 28 : 48);
      const seen: Record<string, string> = {};
      for (const [a, b] of [[pods[0]!, pods[1]!], [pods[2]!, pods[0]!]] as const) {
        // Three tries, 2 s each: the first IPv6 packet of a path waits for neighbour discovery on the way.
        const r = await s().exec(a.netns, ['ping', `-${v}`, '-n', '-q', '-M', 'do', '-s', String(payload), '-c', '3', '-i', '0.2', '-W', '2', ipOf(b, v)]);
        seen[`${a.spec.name} -> ${b.spec.name}`] = r.code === 0 ? 'ok' : `${r.stdout}${r.stderr}`.trim();
      }
      assert.deepEqual(seen, { 'p0 -> p1': 'ok', 'p2 -> p0': 'ok' }, `${mtu}-byte packets`);
    });
  }

  for (const v of versions) test(`[${label}] IPv${v}: a bulk TCP stream crosses between nodes (iperf3, full-size and offloaded segments)`, T, async (t) => {
    const [a, b] = [pods[0]!, pods[1]!];
    const server = spawn('nsenter', [`--net=${b.netnsPath}`, '--', 'iperf3', '-s', '-1', '-p', String(IPERF_PORT)], { env: toolEnv(), stdio: 'ignore' });
    try {
      await untilListening(b.netns, 'tcp', IPERF_PORT, 5000);
      const r = await s().exec(a.netns, ['iperf3', '-c', ipOf(b, v), '-p', String(IPERF_PORT), '-t', '1', '-J', '--connect-timeout', '2000']);
      const report = JSON.parse(r.stdout || '{}') as { error?: string; end?: { sum_sent?: { bytes: number; retransmits?: number }; sum_received?: { bytes: number } } };
      assert.equal(report.error, undefined, `iperf3: ${report.error ?? ''}${r.stderr}`);
      const [sent, received] = [report.end?.sum_sent, report.end?.sum_received];
      t.diagnostic(`${a.spec.name} -> ${b.spec.name} for 1 s: ${(((received?.bytes ?? 0) * 8) / 1e9).toFixed(2)} Gbit received, ${sent?.retransmits ?? '?'} retransmits (a loaded 2-core machine: not a benchmark)`);
      assert.ok((received?.bytes ?? 0) >= 8 * 1024 * 1024, `at least 8 MiB arrived in a second: ${JSON.stringify(report.end).slice(0, 600)}`);
    } finally {
      server.kill('SIGKILL');
    }
  });

  test(`[${label}] a --mtu above what the underlay carries is a start-up error`, T, async () => {
    const limit = opts.routingMode === 'tunnel' ? UNDERLAY_MTU - TUNNEL_OVERHEAD : UNDERLAY_MTU;
    const host = await s().cluster.addUnderlayHost('mtu', '10.248.0.99');
    const agent = await s().extraAgent({ netns: host.netns, nodeName: `tdl-${opts.tag}-mtu`, ip: '10.248.0.99', extraArgs: ['--mtu', String(limit + 1)] });
    await assert.rejects(agent.start(), (err: Error) => /exited during start-up/.test(err.message) && err.message.includes(`--mtu ${limit + 1} is larger than the underlay carries`), `--mtu ${limit + 1} must stop the agent with an MTU error`);
  });

  for (const v of versions) test(`[${label}] IPv${v}: every pod reaches every pod on the other nodes (TCP, UDP, ICMP); the server sees the client pod's address`, T, async () => {
    await s().waitConverged();
    const pairs = pods.flatMap((a) => pods.filter((b) => b.node.index !== a.node.index).map((b) => [a, b] as const));
    const seen: Record<string, string> = {};
    await inParallel(pairs, 3, async ([a, b]) => {
      const key = `${a.spec.name}@n${a.node.index} -> ${b.spec.name}@n${b.node.index}`;
      const tcp = await a.agent.tcpSessions({ dst: ipOf(b, v), port: POD_TCP_PORT }, { count: 3, requests: 2, concurrency: 3 });
      const udp = await a.agent.udpShots({ dst: ipOf(b, v), port: POD_UDP_PORT }, { count: 3, concurrency: 3 });
      const icmp = await s().ping(a.netns, ipOf(b, v), { count: 2, waitSeconds: 2 });
      const peers = distinct([...tcp.flatMap((x) => x.answers.map((an) => an.peer)), ...udp.flatMap((x) => (x.answer ? [x.answer.peer] : []))]);
      seen[key] = `tcp ${failures(tcp)}, udp ${failures(udp)}, icmp ${icmp.ok ? 'ok' : 'lost'}, seen as ${peers.join(' ')}`;
    });
    const want = Object.fromEntries(pairs.map(([a, b]) => [`${a.spec.name}@n${a.node.index} -> ${b.spec.name}@n${b.node.index}`, `tcp none, udp none, icmp ok, seen as ${ipOf(a, v)}`]));
    assert.deepEqual(seen, want);
  });

  for (const v of versions) test(`[${label}] IPv${v}: each node reaches the pods of the other nodes (TCP, UDP, ICMP)`, T, async (t) => {
    const seen: Record<string, string> = {};
    const want: Record<string, string> = {};
    const sources: Record<string, string[]> = {};
    for (const n of s().nodes) {
      const agent = await s().nodeAgent(n.index);
      for (const p of pods.filter((x) => x.node.index !== n.index)) {
        const key = `node ${n.index} -> ${p.spec.name}@n${p.node.index}`;
        const tcp = await agent.tcpSessions({ dst: ipOf(p, v), port: POD_TCP_PORT }, { count: 3, requests: 2, concurrency: 3 });
        const udp = await agent.udpShots({ dst: ipOf(p, v), port: POD_UDP_PORT }, { count: 3, concurrency: 3 });
        const icmp = await s().ping(n.node, ipOf(p, v), { count: 2, waitSeconds: 2 });
        seen[key] = `tcp ${failures(tcp)}, udp ${failures(udp)}, icmp ${icmp.ok ? 'ok' : 'lost'}`;
        want[key] = 'tcp none, udp none, icmp ok';
        sources[key] = distinct(tcp.flatMap((x) => x.answers.map((a) => a.peer)));
      }
    }
    t.diagnostic(`the pods saw the nodes as ${JSON.stringify(sources)}`);
    assert.deepEqual(seen, want);
  });

  for (const v of versions) test(`[${label}] IPv${v}: a pod reaches the other nodes' addresses, seen with its own address (no masquerade inside the cluster)`, T, async () => {
    const seen: Record<string, string> = {};
    const want: Record<string, string> = {};
    for (const n of s().nodes) await s().nodeAgent(n.index);
    for (const p of pods) {
      for (const n of s().nodes.filter((x) => x.index !== p.node.index)) {
        const key = `${p.spec.name}@n${p.node.index} -> node ${n.index} (${nodeAddr(n, v)})`;
        const tcp = await p.agent.tcpSessions({ dst: nodeAddr(n, v), port: POD_TCP_PORT }, { count: 2, requests: 1, concurrency: 2 });
        seen[key] = `tcp ${failures(tcp)}, seen as ${distinct(tcp.flatMap((x) => x.answers.map((a) => a.peer))).join(' ')}`;
        want[key] = `tcp none, seen as ${ipOf(p, v)}`;
      }
    }
    assert.deepEqual(seen, want);
  });

  for (const v of versions) test(`[${label}] IPv${v}: a pod reaching a host outside the cluster is masqueraded to its node's address`, T, async () => {
    const seen: Record<string, string> = {};
    const want: Record<string, string> = {};
    for (const p of pods) {
      const tcp = await p.agent.tcpSessions({ dst: outsideIp(v), port: POD_TCP_PORT }, { count: 3, requests: 2, concurrency: 3 });
      const udp = await p.agent.udpShots({ dst: outsideIp(v), port: POD_UDP_PORT }, { count: 3, concurrency: 3 });
      const icmp = await s().ping(p.netns, outsideIp(v), { count: 2 });
      const peers = distinct([...tcp.flatMap((x) => x.answers.map((a) => a.peer)), ...udp.flatMap((x) => (x.answer ? [x.answer.peer] : []))]);
      seen[p.spec.name] = `tcp ${failures(tcp)}, udp ${failures(udp)}, icmp ${icmp.ok ? 'ok' : 'lost'}, seen as ${peers.join(' ')}`;
      want[p.spec.name] = `tcp none, udp none, icmp ok, seen as ${nodeAddr(p.node, v)}`;
    }
    assert.deepEqual(seen, want);
  });

  if (opts.routingMode === 'tunnel') {
    for (const v of versions) test(`[${label}] IPv${v}: on the underlay, pod to pod is VXLAN on UDP ${VXLAN_PORT} with the source pod's identity as VNI`, T, async (t) => {
      const [a, b] = [pods[0]!, pods[1]!];
      const [ipA, ipB] = [ipOf(a, v), ipOf(b, v)];
      const identity = (await s().endpointOf(a)).identity;
      assert.ok(identity !== undefined && identity >= 256, `the source pod has a cluster identity: ${identity}`);
      const cap = await VxlanCapture.start(a.node.nodePath, 'eth0', `udp port ${VXLAN_PORT} and src host ${a.node.ip} and dst host ${b.node.ip}`, 3);
      const ping = await s().ping(a.netns, ipB, { count: 5, waitSeconds: 2 });
      const { packets, text } = await cap.done(5000);
      for (const p of packets) t.diagnostic(`captured on ${a.node.name} eth0: ${p.outerSrc} > ${p.outerDst}:${p.dstPort} VXLAN vni ${p.vni} | ${p.inner}`);
      if (packets.length === 0) t.diagnostic(`tcpdump on ${a.node.name} eth0: ${text}`);
      assert.ok(ping.ok, `ping ${ipB}: ${ping.output}`);
      const echoes = packets.filter((p) => p.inner.includes(echo(v, ipA, ipB, 'request')));
      assert.ok(echoes.length >= 3, `the echo requests crossed the underlay encapsulated: ${JSON.stringify(packets)}`);
      assert.deepEqual(distinct(echoes.map((p) => `${p.outerSrc} > ${p.outerDst}:${p.dstPort} vni ${p.vni}`)), [`${a.node.ip} > ${b.node.ip}:${VXLAN_PORT} vni ${identity}`]);
      // The reply carries the other pod's identity back.
      const idB = (await s().endpointOf(b)).identity;
      const back = await VxlanCapture.start(a.node.nodePath, 'eth0', `udp port ${VXLAN_PORT} and src host ${b.node.ip}`, 2);
      await s().ping(a.netns, ipB, { count: 3 });
      const replies = (await back.done(5000)).packets.filter((p) => p.inner.includes(echo(v, ipB, ipA, 'reply')));
      assert.ok(replies.length >= 2 && replies.every((p) => p.vni === idB), `replies carry ${b.spec.name}'s identity ${idB}: ${JSON.stringify(replies)}`);
    });

    for (const v of versions) test(`[${label}] IPv${v}: the node to a remote pod is VXLAN with the host identity (1)`, T, async () => {
      const [a, b] = [s().node(0), pods[1]!];
      const cap = await VxlanCapture.start(a.nodePath, 'eth0', `udp port ${VXLAN_PORT} and src host ${a.ip} and dst host ${b.node.ip}`, 2);
      const ping = await s().ping(a.node, ipOf(b, v), { count: 3, waitSeconds: 2 });
      const { packets } = await cap.done(5000);
      assert.ok(ping.ok, ping.output);
      const echoes = packets.filter((p) => p.inner.includes(`> ${ipOf(b, v)}: ICMP${v === 6 ? '6,' : ''} echo request`));
      assert.ok(echoes.length >= 2 && echoes.every((p) => p.vni === 1), `node -> remote pod carries VNI 1: ${JSON.stringify(packets)}`);
    });

    test(`[${label}] the datapath ipcache names each remote pod's node as its tunnel endpoint, for each of its addresses`, T, async () => {
      const a = s().node(0);
      const rows = await bpfIpcache(a);
      for (const p of pods.filter((x) => x.node.index !== a.index)) {
        for (const ip of Object.values(p.addresses)) {
          const row = rows.find((r) => r.prefix === hostCidr(ip));
          assert.equal(row?.tunnelEndpoint, p.node.ip, `${a.name}'s datapath ipcache: ${ip} tunnels to ${p.node.ip}: ${JSON.stringify(row)}`);
        }
      }
    });
  }
}
