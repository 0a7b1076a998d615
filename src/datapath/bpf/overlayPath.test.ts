/**
 * The overlay on real devices: two node namespaces joined by a veth
 * underlay, each with a collect_md VXLAN device carrying
 * tendril_from_overlay on its ingress, a pod namespace behind a veth with
 * tendril_from_container, and the node's tendril_host pair with
 * tendril_from_host — the datapath objects loaded per node with their maps
 * pinned under a bpffs directory of the test's own, filled by hand as the
 * agent would. What BPF_PROG_TEST_RUN cannot show (overlay.test.ts):
 * bpf_skb_set_tunnel_key and the redirect really encapsulate to the
 * endpoint with the source identity as VNI, the receiving side takes that
 * identity for the pod's ingress policy whatever the inner source address
 * says, and decapsulated frames reach a pod (bpf_redirect_peer) and the
 * node's own stack (PACKET_HOST).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NetnsPool, untilListening } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { runOk } from '../../../test/support/run.js';
import { parseIp, parsePrefix } from '../../netip/index.js';
import { attach, type Attachment, codec, ensureBpffs, perCpuValue, removePinDir } from '../kernel/bpf/index.js';
import { BackendState, ConfigFlag, DropReason, LbScope, MapName, ReservedCookie, ServiceFlag, TraceLevel, TrafficDirection } from './constants.js';
import { datapathConfig, deviceInfo, endpointInfo, endpointKey, ipcacheKey, ipcacheValue, lb4Backend, lb4Key, lb4MemberKey, lb4ReverseNat, lb4Service, metricsKey, metricsValue, policyEntry, policyKey, NO_NAT_CONFIG } from './layout.js';
import { type DatapathObjects, loadDatapathObjects } from './objects.js';
import { IpProto } from './testing/packets.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the overlay path tests');

const VXLAN_PORT = 8472;
const REMOTE_NODE_IDENTITY = 6;
const HOST_IDENTITY = 1;
/** The agent's next hop for routes into tendril_host. */
const HOST_NEXT_HOP = '169.254.42.2';

interface PodDef {
  name: string;
  ip: string;
  identity: number;
  endpointId: number;
}

interface NodeDef {
  tag: 'a' | 'b';
  underlayIp: string;
  routerIp: string;
  podCidr: string;
  pods: PodDef[];
}

const NODES: NodeDef[] = [
  {
    tag: 'a',
    underlayIp: '192.168.250.1',
    routerIp: '10.210.0.1',
    podCidr: '10.210.0.0/24',
    pods: [
      { name: 'api', ip: '10.210.0.10', identity: 1000, endpointId: 11 },
      // Not allowed into db: with the allowed pod's identity in B's ipcache, as if it had taken an allowed pod's address.
      { name: 'web', ip: '10.210.0.11', identity: 1001, endpointId: 12 },
    ],
  },
  {
    tag: 'b',
    underlayIp: '192.168.250.2',
    routerIp: '10.211.0.1',
    podCidr: '10.211.0.0/24',
    pods: [{ name: 'db', ip: '10.211.0.20', identity: 2000, endpointId: 21 }],
  },
];

interface LiveNode {
  def: NodeDef;
  ns: string;
  objects: DatapathObjects;
  attachments: Attachment[];
}

describe('overlay path on real VXLAN devices', { timeout: 120_000 }, () => {
  const pool = new NetnsPool('ovl');
  const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
  const nodes: LiveNode[] = [];
  const podNs = new Map<string, string>();

  async function inNs(ns: string, argv: string[]): Promise<string> {
    return runOk(['nsenter', `--net=/var/run/netns/${ns}`, '--', ...argv]);
  }
  async function link(ns: string, dev: string): Promise<{ ifindex: number; address: string }> {
    const [l] = JSON.parse(await inNs(ns, ['ip', '-j', 'link', 'show', 'dev', dev])) as Array<{ ifindex: number; address: string }>;
    assert.ok(l, `${dev} in ${ns}`);
    return l;
  }

  before(async () => {
    await ensureBpffs();
    for (const def of NODES) {
      const { name: ns } = await pool.add(`n${def.tag}`);
      const objects = await loadDatapathObjects({ pinDir: join(root, def.tag, 'tendril'), mapSizes: TEST_MAP_SIZES });
      nodes.push({ def, ns, objects, attachments: [] });
    }
    const [a, b] = nodes as [LiveNode, LiveNode];
    await runOk(['ip', '-n', a.ns, 'link', 'add', 'tdlu0', 'type', 'veth', 'peer', 'name', 'tdlu1', 'netns', b.ns]);
    for (const [n, dev] of [
      [a, 'tdlu0'],
      [b, 'tdlu1'],
    ] as const) {
      await inNs(n.ns, ['ip', 'addr', 'add', `${n.def.underlayIp}/24`, 'dev', dev]);
      await inNs(n.ns, ['ip', 'link', 'set', dev, 'up']);
    }

    for (const n of nodes) {
      const { def, ns, objects } = n;
      const ep = objects.lxc.map(MapName.ENDPOINTS, endpointKey, endpointInfo);
      const ipcache = objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue);
      const policy = objects.lxc.map(MapName.POLICY, policyKey, policyEntry);
      const config = objects.lxc.map(MapName.CONFIG, codec.u32, datapathConfig);

      // The overlay device as the agent makes it: collect_md, no learning, MTU of the underlay minus VXLAN's overhead.
      await inNs(ns, ['ip', 'link', 'add', 'tdlvx', 'mtu', '1450', 'type', 'vxlan', 'external', 'dstport', String(VXLAN_PORT), 'nolearning']);
      await inNs(ns, ['ip', 'link', 'set', 'tdlvx', 'up']);
      // Decapsulated packets for the node arrive on a device without address: any reverse-path filter (the larger of
      // `all` and the device's applies) drops them, so the agent turns it off for both. Forwarding on, as the agent
      // has it (bpf_fib_lookup answers nothing for a packet from a device that does not forward).
      await inNs(ns, ['sysctl', '-qw', 'net.ipv4.conf.all.rp_filter=0', 'net.ipv4.conf.tdlvx.rp_filter=0', 'net.ipv4.ip_forward=1']);
      // The host device pair: the router address, and the routes of the other node's pods into it.
      await inNs(ns, ['ip', 'link', 'add', 'tdlhost', 'type', 'veth', 'peer', 'name', 'tdlnet']);
      await inNs(ns, ['ip', 'link', 'set', 'tdlhost', 'mtu', '1450', 'up']);
      await inNs(ns, ['ip', 'link', 'set', 'tdlnet', 'up']);
      await inNs(ns, ['ip', 'addr', 'add', `${def.routerIp}/32`, 'dev', 'tdlhost']);
      const net = await link(ns, 'tdlnet');
      await inNs(ns, ['ip', 'neigh', 'replace', HOST_NEXT_HOP, 'lladdr', net.address, 'dev', 'tdlhost', 'nud', 'permanent']);
      const vx = await link(ns, 'tdlvx');
      const host = await link(ns, 'tdlhost');
      config.set(0, { traceLevel: TraceLevel.OFF, flags: ConfigFlag.TUNNEL, hostIfindex: host.ifindex, maglevTableSize: 0, tunnelIfindex: vx.ifindex, nodeIpv4: 0, ...NO_NAT_CONFIG });
      n.attachments.push(await attach({ ifindex: vx.ifindex, direction: 'ingress', program: objects.fromOverlay, netns: `/var/run/netns/${ns}` }));
      n.attachments.push(await attach({ ifindex: host.ifindex, direction: 'egress', program: objects.fromHost, netns: `/var/run/netns/${ns}` }));
      ipcache.set(parsePrefix(`${def.routerIp}/32`), { identity: HOST_IDENTITY, tunnelIp4: 0, flags: 0 });
      ipcache.set(parsePrefix(`${def.underlayIp}/32`), { identity: HOST_IDENTITY, tunnelIp4: 0, flags: 0 });

      for (const [i, pod] of def.pods.entries()) {
        const { name: pns } = await pool.add(`p${pod.name}`);
        podNs.set(pod.name, pns);
        const lxc = `tdllxc${i}`;
        await inNs(ns, ['ip', 'link', 'add', lxc, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pns]);
        await inNs(ns, ['ip', 'link', 'set', lxc, 'up']);
        // The pod MTU of tunnel mode: the underlay's minus VXLAN's 50 bytes, so the outer packet is never fragmented.
        await inNs(ns, ['ip', 'link', 'set', lxc, 'mtu', '1450']);
        await inNs(pns, ['ip', 'link', 'set', 'eth0', 'mtu', '1450']);
        await inNs(pns, ['ip', 'addr', 'add', `${pod.ip}/32`, 'dev', 'eth0']);
        await inNs(pns, ['ip', 'link', 'set', 'eth0', 'up']);
        await inNs(pns, ['ip', 'route', 'add', 'default', 'dev', 'eth0']);
        const hostSide = await link(ns, lxc);
        const podSide = await link(pns, 'eth0');
        ep.set(parseIp(pod.ip), { ifindex: hostSide.ifindex, identity: pod.identity, endpointId: pod.endpointId, flags: 0, lxcMac: hostSide.address, podMac: podSide.address });
        ipcache.set(parsePrefix(`${pod.ip}/32`), { identity: pod.identity, tunnelIp4: 0, flags: 0 });
        n.attachments.push(await attach({ ifindex: hostSide.ifindex, direction: 'ingress', program: objects.fromContainer, netns: `/var/run/netns/${ns}` }));
        policy.set({ endpointId: pod.endpointId, identity: 0, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: ReservedCookie.NOT_ENFORCED, deny: 0, l4PrefixBits: 0 });
      }
    }

    // Each node learns the other's pods and addresses (as the kvstore and the node registry would write them).
    for (const n of nodes) {
      const other = nodes.find((o) => o !== n)!;
      const ipcache = n.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue);
      const endpoint = Number(parseIp(other.def.underlayIp).bits);
      for (const pod of other.def.pods) ipcache.set(parsePrefix(`${pod.ip}/32`), { identity: pod.identity, tunnelIp4: endpoint, flags: 0 });
      for (const ip of [other.def.routerIp, other.def.underlayIp]) ipcache.set(parsePrefix(`${ip}/32`), { identity: REMOTE_NODE_IDENTITY, tunnelIp4: endpoint, flags: 0 });
      await inNs(n.ns, ['ip', 'route', 'add', other.def.podCidr, 'via', HOST_NEXT_HOP, 'dev', 'tdlhost', 'onlink', 'src', n.def.routerIp]);
    }
    // B's ipcache says web's address is api's identity: only the VNI can tell them apart.
    b.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue).set(parsePrefix('10.210.0.11/32'), { identity: 1000, tunnelIp4: Number(parseIp(NODES[0]!.underlayIp).bits), flags: 0 });
    // db admits api (identity 1000) and the remote node, nothing else.
    const bPolicy = b.objects.lxc.map(MapName.POLICY, policyKey, policyEntry);
    for (const identity of [1000, REMOTE_NODE_IDENTITY]) {
      bPolicy.set({ endpointId: 21, identity, egress: false, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: 0x2000 + identity, deny: 0, l4PrefixBits: 0 });
    }
    // A's pods admit the other node's pods' replies only through conntrack: no ingress rule at all.
  });

  after(async () => {
    for (const n of nodes) {
      for (const a of n.attachments) await a.detach().catch(() => undefined);
      n.objects.close();
    }
    await pool.cleanup();
    await removePinDir(root).catch(() => undefined);
  });

  async function ping(ns: string, dst: string): Promise<boolean> {
    const r = await pool.exec(ns, ['ping', '-c', '1', '-W', '2', dst]);
    return r.code === 0;
  }
  function metric(n: LiveNode, reason: number, direction: number): bigint {
    const m = n.objects.lxc.map(MapName.METRICS, metricsKey, perCpuValue(metricsValue));
    return (m.get({ reason: Math.abs(reason), direction }) ?? []).reduce((s, c) => s + c.packets, 0n);
  }

  it('a pod reaches a pod on the other node and back (encapsulated both ways, delivered into the pod)', async () => {
    assert.ok(await ping(podNs.get('api')!, '10.211.0.20'), 'api → db');
  });

  it('a TCP stream of a few MiB crosses intact (segmentation offload and checksums through encapsulation and delivery)', async () => {
    const server = pool.exec(podNs.get('db')!, ['python3', '-c', TCP_SEND, '8080', String(TCP_BYTES)]);
    await untilListening(podNs.get('db')!, 'tcp', 8080);
    const client = await pool.exec(podNs.get('api')!, ['python3', '-c', TCP_RECEIVE, '10.211.0.20', '8080']);
    const sent = await server;
    assert.equal(sent.code, 0, `server: ${sent.stderr}`);
    assert.equal(client.code, 0, `client: ${client.stderr}`);
    assert.equal(client.stdout.trim(), `${TCP_BYTES} ${sent.stdout.trim()}`, 'every byte, the same digest');
  });

  it('the VNI is the source pod\'s identity, the outer destination the other node: as captured on the underlay', async () => {
    const [a] = nodes as [LiveNode, LiveNode];
    // tcpdump takes 8472 for OTV by default: -T vxlan decodes the header as what it is.
    const capture = pool.exec(a.ns, ['timeout', '5', 'tcpdump', '-n', '-l', '-c', '1', '-T', 'vxlan', '-i', 'tdlu0', 'udp', 'dst', 'port', String(VXLAN_PORT), 'and', 'src', 'host', NODES[0]!.underlayIp]);
    await new Promise((r) => setTimeout(r, 700));
    assert.ok(await ping(podNs.get('api')!, '10.211.0.20'));
    const text = (await capture).stdout;
    assert.match(text, new RegExp(`${NODES[0]!.underlayIp.replaceAll('.', '\\.')}\\.\\d+ > ${NODES[1]!.underlayIp.replaceAll('.', '\\.')}\\.${VXLAN_PORT}`), text);
    assert.match(text, /vni 1000\b/, text);
    assert.match(text, /10\.210\.0\.10 > 10\.211\.0\.20: ICMP echo request/, text);
  });

  it('the receiving node judges by the VNI, not by the inner source: web is denied although B\'s ipcache gives its address api\'s identity', async () => {
    const [, b] = nodes as [LiveNode, LiveNode];
    const before = metric(b, DropReason.POLICY.code, TrafficDirection.INGRESS);
    assert.equal(await ping(podNs.get('web')!, '10.211.0.20'), false, 'web → db must be denied');
    assert.ok(metric(b, DropReason.POLICY.code, TrafficDirection.INGRESS) > before, 'dropped by db\'s ingress policy on B');
  });

  it('a node reaches a pod on the other node (VNI HOST, seen as REMOTE_NODE), and the reply reaches the node\'s own stack', async () => {
    const [a] = nodes as [LiveNode, LiveNode];
    assert.ok(await ping(a.ns, '10.211.0.20'), 'node A → db');
  });

  it('a pod\'s ClusterIP flow to a backend on the other node: DNAT before the overlay, the reply reverse-translated where it arrives', async () => {
    serviceToDb({ ip: '10.96.0.50', port: 53 }, 71);
    const r = await askDb(podNs.get('api')!, '10.96.0.50', 53);
    assert.equal(r.answer, '10.96.0.50:53 hello', 'the answer comes from the frontend');
    assert.equal(r.seenBy, '10.210.0.10', 'the backend sees the client pod\'s own address');
  });

  /** A UDP service on node A with db (on B) as its only backend. */
  function serviceToDb(frontend: { ip: string; port: number }, id: number, flags = 0): void {
    const [a] = nodes as [LiveNode, LiveNode];
    const services = a.objects.lxc.map(MapName.LB_SERVICES, lb4Key, lb4Service);
    const key = (slot: number) => ({ address: parseIp(frontend.ip), dport: frontend.port, backendSlot: slot, proto: IpProto.UDP, scope: LbScope.EXTERNAL });
    a.objects.lxc.map(MapName.LB_BACKENDS, codec.u32, lb4Backend).set(id, { address: parseIp('10.211.0.20'), port: 5353, proto: IpProto.UDP, state: BackendState.ACTIVE });
    services.set(key(0), { backendId: 0, affinityTimeout: 0, count: 1, revNatIndex: id, flags });
    a.objects.lxc.map(MapName.LB_MEMBERS, lb4MemberKey, codec.u8).set({ revNatIndex: id, backendId: id }, 1);
    services.set(key(1), { backendId: id, affinityTimeout: 0, count: 0, revNatIndex: id, flags: 0 });
    a.objects.lxc.map(MapName.LB_REVNAT, codec.u16, lb4ReverseNat).set(id, { address: parseIp(frontend.ip === '0.0.0.0' ? NODES[0]!.underlayIp : frontend.ip), port: frontend.port });
  }

  /** db answers one datagram; returns what the client printed and the address db saw. */
  async function askDb(clientNs: string, ip: string, port: number): Promise<{ answer: string; seenBy: string }> {
    const server = pool.exec(podNs.get('db')!, ['python3', '-c', UDP_ECHO_ONCE, '5353']);
    await untilListening(podNs.get('db')!, 'udp', 5353);
    const client = await pool.exec(clientNs, ['python3', '-c', UDP_ASK, ip, String(port)]);
    const seen = await server;
    assert.equal(client.code, 0, `client: ${client.stderr}`);
    return { answer: client.stdout.trim(), seenBy: seen.stdout.trim() };
  }

  it('the node\'s own ClusterIP connection to a backend on the other node: encapsulated after DNAT, the reply gets the frontend back on arrival', async () => {
    const [a] = nodes as [LiveNode, LiveNode];
    serviceToDb({ ip: '10.96.0.51', port: 53 }, 72);
    // The agent routes each ClusterIP into tendril_host from the router address.
    await inNs(a.ns, ['ip', 'route', 'add', '10.96.0.51/32', 'via', HOST_NEXT_HOP, 'dev', 'tdlhost', 'onlink', 'src', NODES[0]!.routerIp]);
    const r = await askDb(a.ns, '10.96.0.51', 53);
    assert.equal(r.answer, '10.96.0.51:53 hello');
    assert.equal(r.seenBy, NODES[0]!.routerIp, 'the backend sees the node\'s router address');
  });

  it('a NodePort on A to a backend on B: SNAT to A\'s address, encapsulated with the client\'s identity (world) as VNI, not A\'s, the reply back through A to the client outside', async () => {
    const [a, b] = nodes as [LiveNode, LiveNode];
    const dev = await link(a.ns, 'tdlu0');
    a.objects.lxc.map(MapName.DEVICES, codec.u32, deviceInfo).set(dev.ifindex, { ipv4: parseIp(NODES[0]!.underlayIp), flags: 0, mac: dev.address });
    a.attachments.push(await attach({ ifindex: dev.ifindex, direction: 'ingress', program: a.objects.fromNetdev, netns: `/var/run/netns/${a.ns}` }));
    serviceToDb({ ip: '0.0.0.0', port: 30053 }, 73, ServiceFlag.NODEPORT);
    // B's namespace plays the client outside A: it reaches A's address on the underlay, where (tunnel mode) it is world.
    // The VNI is the client's identity, never A's: db, which admits the remote node but not the world, refuses it.
    const before = metric(b, DropReason.POLICY.code, TrafficDirection.INGRESS);
    const server = pool.exec(podNs.get('db')!, ['python3', '-c', UDP_RECEIVE_ANY, '5353', '3']);
    await untilListening(podNs.get('db')!, 'udp', 5353);
    const refused = await pool.exec(b.ns, ['python3', '-c', UDP_ASK, NODES[0]!.underlayIp, '30053']);
    assert.notEqual(refused.code, 0, `no answer without a rule for the world: ${refused.stdout}`);
    assert.equal((await server).stdout.trim(), 'nothing', 'db received the NodePort datagram as A\'s own (remote node)');
    assert.ok(metric(b, DropReason.POLICY.code, TrafficDirection.INGRESS) > before, 'dropped by db\'s ingress policy on B');
    // With the world admitted it goes through: SNAT to A's address, the reply back through A.
    const bPolicy = b.objects.lxc.map(MapName.POLICY, policyKey, policyEntry);
    const world = { endpointId: 21, identity: 2, egress: false, proto: 0, port: 0, portPrefixLen: 0 };
    bPolicy.set(world, { cookie: 0x2002, deny: 0, l4PrefixBits: 0 });
    try {
      const r = await askDb(b.ns, NODES[0]!.underlayIp, 30053);
      assert.equal(r.answer, `${NODES[0]!.underlayIp}:30053 hello`);
      assert.equal(r.seenBy, NODES[0]!.underlayIp, 'the backend sees A\'s address (SNAT)');
    } finally {
      bPolicy.delete(world);
    }
  });

  /** A host outside the cluster on a link of node A's (A routes for it), made once: its namespace. */
  let outsideNs: string | undefined;
  const OUTSIDE_IP = '192.168.249.2';
  async function outsideHost(): Promise<string> {
    if (outsideNs) return outsideNs;
    const [a, b] = nodes as [LiveNode, LiveNode];
    const { name: ns } = await pool.add('out');
    await runOk(['ip', '-n', a.ns, 'link', 'add', 'tdlo1', 'type', 'veth', 'peer', 'name', 'tdlo0', 'netns', ns]);
    await inNs(a.ns, ['ip', 'addr', 'add', '192.168.249.1/24', 'dev', 'tdlo1']);
    await inNs(a.ns, ['ip', 'link', 'set', 'tdlo1', 'up']);
    await inNs(ns, ['ip', 'addr', 'add', `${OUTSIDE_IP}/24`, 'dev', 'tdlo0']);
    await inNs(ns, ['ip', 'link', 'set', 'tdlo0', 'up']);
    await inNs(ns, ['ip', 'route', 'add', 'default', 'via', '192.168.249.1']);
    // B reaches the outside host through A (its answers, were any let through).
    await inNs(b.ns, ['ip', 'route', 'add', '192.168.249.0/24', 'via', NODES[0]!.underlayIp]);
    outsideNs = ns;
    return ns;
  }

  it('a host outside the cluster that routes B\'s pods via A reaches db as world, not with A\'s identity: VNI 2 on the underlay, denied by db\'s policy (which admits the remote node)', async () => {
    const [a, b] = nodes as [LiveNode, LiveNode];
    const out = await outsideHost();
    await inNs(out, ['ip', 'route', 'replace', NODES[1]!.podCidr, 'via', '192.168.249.1']);
    const before = metric(b, DropReason.POLICY.code, TrafficDirection.INGRESS);
    const capture = pool.exec(a.ns, ['timeout', '5', 'tcpdump', '-n', '-l', '-c', '1', '-T', 'vxlan', '-i', 'tdlu0', 'udp', 'dst', 'port', String(VXLAN_PORT), 'and', 'src', 'host', NODES[0]!.underlayIp]);
    await new Promise((r) => setTimeout(r, 700));
    const reached = await ping(out, '10.211.0.20');
    const text = (await capture).stdout;
    assert.match(text, new RegExp(`${OUTSIDE_IP.replaceAll('.', '\\.')} > 10\\.211\\.0\\.20: ICMP echo request`), text);
    assert.match(text, /vni 2\b/, `A forwards the outside host's packet as world (2), not as itself (1): ${text}`);
    assert.equal(reached, false, 'the outside host must not reach db through A');
    assert.ok(metric(b, DropReason.POLICY.code, TrafficDirection.INGRESS) > before, 'dropped by db\'s ingress policy on B');
  });

  it('a VXLAN packet from a host on the underlay that is no node is dropped at B (OVERLAY_NOT_NODE), even with the VNI of an allowed identity', async () => {
    const [, b] = nodes as [LiveNode, LiveNode];
    const out = await outsideHost();
    const ip = (args: string[]) => inNs(out, ['ip', ...args]);
    // A plain VXLAN device with api's identity as VNI, api's address inside, aimed at B's VXLAN port.
    await ip(['link', 'add', 'tdlspoof', 'type', 'vxlan', 'id', '1000', 'remote', NODES[1]!.underlayIp, 'dstport', String(VXLAN_PORT), 'dev', 'tdlo0']);
    try {
      await ip(['addr', 'add', '10.210.0.10/32', 'dev', 'tdlspoof']);
      await ip(['link', 'set', 'tdlspoof', 'up']);
      await ip(['route', 'add', '10.211.0.20/32', 'dev', 'tdlspoof']);
      await ip(['neigh', 'add', '10.211.0.20', 'lladdr', '02:00:00:00:00:01', 'dev', 'tdlspoof', 'nud', 'permanent']);
      const before = metric(b, DropReason.OVERLAY_NOT_NODE.code, TrafficDirection.INGRESS);
      const server = pool.exec(podNs.get('db')!, ['python3', '-c', UDP_RECEIVE_ANY, '5354', '3']);
      await untilListening(podNs.get('db')!, 'udp', 5354);
      for (let i = 0; i < 3; i++) await pool.exec(out, ['python3', '-c', UDP_SEND_FROM, '10.210.0.10', '10.211.0.20', '5354']);
      const seen = (await server).stdout.trim();
      assert.equal(seen, 'nothing', 'db received the forged datagram');
      assert.ok(metric(b, DropReason.OVERLAY_NOT_NODE.code, TrafficDirection.INGRESS) >= before + 3n, 'B counted the forged packets as OVERLAY_NOT_NODE');
    } finally {
      await ip(['link', 'del', 'tdlspoof']);
    }
  });

  describe('an IPv6 underlay (outer IPv6 header)', () => {
    /** The outside host's IPv6 address: B's ipcache names it a node only where a test says so. */
    const SENDER6 = 'fd00:249::5';
    const B6 = 'fd00:250::2';
    let out = '';
    before(async () => {
      const [a, b] = nodes as [LiveNode, LiveNode];
      out = await outsideHost();
      // nodad: usable at once. A forwards IPv6 between the outside host and B.
      await inNs(a.ns, ['ip', '-6', 'addr', 'add', 'fd00:250::1/64', 'dev', 'tdlu0', 'nodad']);
      await inNs(b.ns, ['ip', '-6', 'addr', 'add', `${B6}/64`, 'dev', 'tdlu1', 'nodad']);
      await inNs(a.ns, ['ip', '-6', 'addr', 'add', 'fd00:249::1/64', 'dev', 'tdlo1', 'nodad']);
      await inNs(out, ['ip', '-6', 'addr', 'add', `${SENDER6}/64`, 'dev', 'tdlo0', 'nodad']);
      await inNs(out, ['ip', '-6', 'route', 'add', 'default', 'via', 'fd00:249::1']);
      await inNs(a.ns, ['sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1']);
      await inNs(b.ns, ['ip', '-6', 'route', 'add', 'fd00:249::/64', 'via', 'fd00:250::1']);
    });

    /** Three UDP datagrams from api's address to db inside VXLAN over IPv6 with VNI 1000 (api's identity): what db saw. */
    async function sendOverIpv6(): Promise<string> {
      const ip = (args: string[]) => inNs(out, ['ip', ...args]);
      await ip(['link', 'add', 'tdlspoof6', 'type', 'vxlan', 'id', '1000', 'remote', B6, 'local', SENDER6, 'dstport', String(VXLAN_PORT), 'dev', 'tdlo0']);
      try {
        // No IPv6 on the device itself: its router solicitations and MLD reports would cross to B (NOT_FOR_NODE there).
        await inNs(out, ['sysctl', '-qw', 'net.ipv6.conf.tdlspoof6.disable_ipv6=1']);
        await ip(['addr', 'add', '10.210.0.10/32', 'dev', 'tdlspoof6']);
        await ip(['link', 'set', 'tdlspoof6', 'up']);
        await ip(['route', 'add', '10.211.0.20/32', 'dev', 'tdlspoof6']);
        await ip(['neigh', 'add', '10.211.0.20', 'lladdr', '02:00:00:00:00:01', 'dev', 'tdlspoof6', 'nud', 'permanent']);
        const server = pool.exec(podNs.get('db')!, ['python3', '-c', UDP_RECEIVE_ANY, '5355', '3']);
        await untilListening(podNs.get('db')!, 'udp', 5355);
        for (let i = 0; i < 3; i++) await pool.exec(out, ['python3', '-c', UDP_SEND_FROM, '10.210.0.10', '10.211.0.20', '5355']);
        return (await server).stdout.trim();
      } finally {
        await ip(['link', 'del', 'tdlspoof6']);
      }
    }

    it('a pod reaches a pod on the other node over the IPv6 underlay when the ipcache names the nodes\' IPv6 addresses (tunnel_ip6): outer IPv6 between the nodes, the VNI the pod\'s identity', async () => {
      const [a, b] = nodes as [LiveNode, LiveNode];
      const A6 = 'fd00:250::1';
      // Each node's entries for the other's addresses, as an IPv6-only cluster's agents write them; the old ones put back after.
      const entries: Array<[LiveNode, string, string]> = [
        ...[...NODES[1]!.pods.map((p) => p.ip), NODES[1]!.routerIp, NODES[1]!.underlayIp].map((ip): [LiveNode, string, string] => [a, `${ip}/32`, B6]),
        ...[...NODES[0]!.pods.map((p) => p.ip), NODES[0]!.routerIp, NODES[0]!.underlayIp].map((ip): [LiveNode, string, string] => [b, `${ip}/32`, A6]),
      ];
      const saved = entries.map(([n, prefix]) => [n, prefix, n.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue).get(parsePrefix(prefix))!] as const);
      for (const [n, prefix, endpoint] of entries) {
        const map = n.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue);
        map.set(parsePrefix(prefix), { ...map.get(parsePrefix(prefix))!, tunnelIp4: 0, tunnelIp6: parseIp(endpoint) });
      }
      // The other node's IPv6 address is a node's: the receiving side's trust rule.
      for (const [n, ip] of [[a, B6], [b, A6]] as const) n.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue).set(parsePrefix(`${ip}/128`), { identity: REMOTE_NODE_IDENTITY, tunnelIp4: 0, tunnelIp6: parseIp(ip), flags: 0 });
      try {
        const capture = pool.exec(a.ns, ['timeout', '5', 'tcpdump', '-n', '-l', '-c', '2', '-T', 'vxlan', '-i', 'tdlu0', 'ip6', 'and', 'udp', 'port', String(VXLAN_PORT)]);
        await new Promise((r) => setTimeout(r, 700));
        const notNode = metric(b, DropReason.OVERLAY_NOT_NODE.code, TrafficDirection.INGRESS);
        assert.ok(await ping(podNs.get('api')!, '10.211.0.20'), 'api → db and back over IPv6');
        const text = (await capture).stdout;
        assert.match(text, /IP6 fd00:250::1\.\d+ > fd00:250::2\.8472: VXLAN, flags \[I\] \(0x08\), vni 1000\b/, text);
        assert.match(text, /10\.210\.0\.10 > 10\.211\.0\.20: ICMP echo request/, text);
        assert.match(text, /IP6 fd00:250::2\.\d+ > fd00:250::1\.8472: VXLAN, flags \[I\] \(0x08\), vni 2000\b/, `the reply with db's identity: ${text}`);
        assert.equal(metric(b, DropReason.OVERLAY_NOT_NODE.code, TrafficDirection.INGRESS), notNode, 'a node\'s IPv6 address is a node\'s');
        // The node's own traffic too (VNI HOST, REMOTE_NODE at B, which db admits).
        assert.ok(await ping(a.ns, '10.211.0.20'), 'node A → db over IPv6');
      } finally {
        for (const [n, prefix, value] of saved) n.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue).set(parsePrefix(prefix), value);
        for (const [n, ip] of [[a, B6], [b, A6]] as const) n.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue).delete(parsePrefix(`${ip}/128`));
      }
    });

    it('VXLAN over IPv6 from an address that is no node is dropped at B (OVERLAY_NOT_NODE), even with the VNI of an allowed identity', async () => {
      const [, b] = nodes as [LiveNode, LiveNode];
      const before = metric(b, DropReason.OVERLAY_NOT_NODE.code, TrafficDirection.INGRESS);
      assert.equal(await sendOverIpv6(), 'nothing', 'db received the forged datagram');
      assert.ok(metric(b, DropReason.OVERLAY_NOT_NODE.code, TrafficDirection.INGRESS) >= before + 3n, 'B counted the forged packets as OVERLAY_NOT_NODE');
    });

    it('VXLAN over IPv6 from a registered node\'s IPv6 address is decapsulated and delivered with the VNI\'s identity', async () => {
      const [, b] = nodes as [LiveNode, LiveNode];
      const ipcache = b.objects.lxc.map(MapName.IPCACHE, ipcacheKey, ipcacheValue);
      ipcache.set(parsePrefix(`${SENDER6}/128`), { identity: REMOTE_NODE_IDENTITY, tunnelIp4: 0, flags: 0 });
      try {
        const noKey = metric(b, DropReason.NO_TUNNEL_KEY.code, TrafficDirection.INGRESS);
        assert.equal(await sendOverIpv6(), '10.210.0.10', 'db admits identity 1000, which the VNI carried');
        assert.equal(metric(b, DropReason.NO_TUNNEL_KEY.code, TrafficDirection.INGRESS), noKey);
      } finally {
        ipcache.delete(parsePrefix(`${SENDER6}/128`));
      }
    });
  });

  it('counts nothing as NO_TUNNEL_KEY or NOT_FOR_NODE on the way', () => {
    for (const n of nodes) {
      assert.equal(metric(n, DropReason.NO_TUNNEL_KEY.code, TrafficDirection.INGRESS), 0n, `${n.def.tag}: NO_TUNNEL_KEY`);
      assert.equal(metric(n, DropReason.NOT_FOR_NODE.code, TrafficDirection.INGRESS), 0n, `${n.def.tag}: NOT_FOR_NODE`);
    }
  });
});

/** python3: receive one UDP datagram on argv[1], send it back, print the sender's address. */
const UDP_ECHO_ONCE = [
  'import socket, sys',
  's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
  "s.bind(('0.0.0.0', int(sys.argv[1])))",
  's.settimeout(10)',
  'd, a = s.recvfrom(100)',
  's.sendto(d, a)',
  'print(a[0])',
].join('\n');

/** python3: send "hello" to argv[1]:argv[2], print who answered and what. */
const UDP_ASK = [
  'import socket, sys',
  's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
  's.settimeout(5)',
  "s.sendto(b'hello', (sys.argv[1], int(sys.argv[2])))",
  'd, a = s.recvfrom(100)',
  "print(f'{a[0]}:{a[1]} {d.decode()}')",
].join('\n');

/** python3: wait argv[2] seconds for one UDP datagram on argv[1]; print its sender, or "nothing". */
const UDP_RECEIVE_ANY = [
  'import socket, sys',
  's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
  "s.bind(('0.0.0.0', int(sys.argv[1])))",
  's.settimeout(float(sys.argv[2]))',
  'try:',
  '    d, a = s.recvfrom(100)',
  '    print(a[0])',
  'except socket.timeout:',
  "    print('nothing')",
].join('\n');

/** python3: one datagram from address argv[1] to argv[2]:argv[3]. */
const UDP_SEND_FROM = [
  'import socket, sys',
  's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
  "s.bind((sys.argv[1], 0))",
  "s.sendto(b'forged', (sys.argv[2], int(sys.argv[3])))",
].join('\n');

const TCP_BYTES = 4 * 1024 * 1024;

/** python3: accept one TCP connection on argv[1], send argv[2] pseudo-random bytes, print their sha256. */
const TCP_SEND = [
  'import hashlib, os, socket, sys',
  's = socket.socket(socket.AF_INET, socket.SOCK_STREAM)',
  's.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)',
  "s.bind(('0.0.0.0', int(sys.argv[1])))",
  's.listen(1)',
  's.settimeout(10)',
  'c, _ = s.accept()',
  'data = os.urandom(int(sys.argv[2]))',
  'c.sendall(data)',
  'c.close()',
  'print(hashlib.sha256(data).hexdigest())',
].join('\n');

/** python3: connect to argv[1]:argv[2], read to the end, print the length and the sha256. */
const TCP_RECEIVE = [
  'import hashlib, socket, sys',
  's = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)',
  'h = hashlib.sha256()',
  'n = 0',
  'while True:',
  '    b = s.recv(65536)',
  '    if not b:',
  '        break',
  '    h.update(b)',
  '    n += len(b)',
  "print(n, h.hexdigest())",
].join('\n');
