/**
 * The overlay (--routing-mode tunnel) in the programs, through
 * BPF_PROG_TEST_RUN: what goes to tendril_vxlan with a tunnel key
 * (TC_ACT_REDIRECT and TRACE_TO_OVERLAY) from a pod, from the node and
 * from a NodePort, what stays on the stack, the masquerade exception for
 * destinations inside the cluster, and tendril_from_overlay refusing a
 * packet that carries no tunnel metadata. A test run cannot hand a program
 * a packet with tunnel metadata, nor show where a redirect goes: the
 * receive side with the identity of the VNI, and the encapsulation itself,
 * are overlayPath.test.ts's (real VXLAN devices in namespaces).
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { parseIp, parsePrefix } from '../../netip/index.js';
import { codec, TcAction } from '../kernel/bpf/index.js';
import { ConfigFlag, DropReason, EventType, MapName, NAT_PORT_MAX, NAT_PORT_MIN, ReservedCookie, TraceLevel, TracePoint, TrafficDirection } from './constants.js';
import { deviceInfo, NO_NAT_CONFIG } from './layout.js';
import { assertEvents, checkedTuple as tuple } from './testing/expect.js';
import { IDENTITY, installNode, NODE_IP, POD_A, REMOTE_POD_IP, ROUTER, TEST_IFINDEX, WORLD_IP } from './testing/fixtures.js';
import { LbNode } from './testing/lbNode.js';
import { IpProto, ipv6Frame, TcpFlag, tcpFrame, udpFrame } from './testing/packets.js';
import { HOST_OBJECT, LXC_OBJECT, NETDEV_OBJECT, OVERLAY_OBJECT, ProgramHarness } from './testing/programHarness.js';
import { SnatNode } from './testing/snatNode.js';

requireRoot('the overlay program tests');

const { DROP, TRACE } = EventType;
const { NONE, INGRESS, EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

const REMOTE_NODE_IDENTITY = 6;
/** The node hosting REMOTE_POD_IP, and a pod address it hosts outside the masquerade CIDRs. */
const REMOTE_NODE_IP = '192.168.77.6';
const REMOTE_POD_OUTSIDE_MASQ = '10.202.0.7';
/** A remote node known without tunnel (native routing). */
const NATIVE_NODE_IP = '192.168.77.8';
const TUNNEL_IFINDEX = 42;

const fromA = { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac };
const toTendrilHost = { srcMac: '0a:00:00:00:ff:01', dstMac: '0a:00:00:00:ff:02' };

/** Tunnel routing on (or off); `nodeIp`: the node's InternalIP in the config (none unless given). */
function tunnelMode(h: ProgramHarness, on = true, nodeIp?: string): void {
  const nodeIpv4 = nodeIp === undefined ? 0 : Number(parseIp(nodeIp).bits);
  h.config.set(0, { traceLevel: TraceLevel.ALL, flags: on ? ConfigFlag.TUNNEL : 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: TUNNEL_IFINDEX, nodeIpv4, ...NO_NAT_CONFIG });
}

/** The ipcache as the node subsystem and the kvstore fill it in tunnel mode: remote pods and nodes with their node as endpoint. */
function installRemote(h: ProgramHarness): void {
  const tunnel = (prefix: string, identity: number, endpoint: string) =>
    h.ipcache.set(parsePrefix(`${prefix}/32`), { identity, tunnelIp4: Number(parseIp(endpoint).bits), flags: 0 });
  tunnel(REMOTE_POD_IP, IDENTITY.REMOTE, REMOTE_NODE_IP);
  tunnel(REMOTE_POD_OUTSIDE_MASQ, IDENTITY.REMOTE, REMOTE_NODE_IP);
  tunnel(REMOTE_NODE_IP, REMOTE_NODE_IDENTITY, REMOTE_NODE_IP);
  h.addIpcache(NATIVE_NODE_IP, REMOTE_NODE_IDENTITY);
  // The node's own address carries its own hostIP: never a reason to encapsulate.
  tunnel(NODE_IP, IDENTITY.HOST, NODE_IP);
}


describe('overlay: tendril_from_container', () => {
  const FROM = 'tendril_from_container';
  let h: ProgramHarness;
  let lb: LbNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    installRemote(h);
    // Pod A's egress not enforced (no policy selects it), as the control plane writes it.
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: ReservedCookie.NOT_ENFORCED });
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  const synToRemote = (dst = REMOTE_POD_IP) => tcpFrame({ ...fromA, src: POD_A.ip, dst, sport: 40000, dport: 80, flags: TcpFlag.SYN });

  it('sends a pod\'s packet for a pod on another node to tendril_vxlan, unchanged, with TRACE_TO_OVERLAY and the pod\'s identity', async () => {
    tunnelMode(h);
    const syn = synToRemote();
    const r = await h.run(FROM, syn);
    assert.equal(r.retval, TcAction.REDIRECT);
    // The receiving node delivers and takes the hop off the TTL; the sender leaves the packet as it is.
    assert.deepEqual(r.data, syn);
    assertEvents(await h.takeEvents(1), [
      { type: TRACE, subtype: TracePoint.TO_OVERLAY, direction: EGRESS, saddr: POD_A.ip, daddr: REMOTE_POD_IP, srcIdentity: IDENTITY.A, dstIdentity: IDENTITY.REMOTE, srcEndpoint: POD_A.endpointId },
    ]);
    assert.ok(h.ct({ saddr: POD_A.ip, daddr: REMOTE_POD_IP, sport: 40000, dport: 80, proto: IpProto.TCP }), 'the flow is tracked on the sending node');
  });

  it('sends a pod\'s IPv6 packet for an IPv6 pod on another node to tendril_vxlan with its identity (IPv4 underlay); without a tunnel endpoint, or in native routing, to the stack', async () => {
    const [podA6, remote6, native6] = ['fd00:a::10', 'fd00:b::20', 'fd00:c::30'];
    h.addEndpoint({ ...POD_A, ip: podA6 });
    h.ipcache.set(parsePrefix(`${remote6}/128`), { identity: IDENTITY.REMOTE, tunnelIp4: Number(parseIp(REMOTE_NODE_IP).bits), flags: 0 });
    h.ipcache.set(parsePrefix(`${native6}/128`), { identity: IDENTITY.REMOTE, tunnelIp4: 0, flags: 0 });
    const udp6 = (dst: string) => ipv6Frame({ ...fromA, src: podA6, dst, nextHeader: IpProto.UDP, payload: Buffer.from([0x9c, 0x40, 0, 53, 0, 8, 0, 0]) });
    tunnelMode(h);
    const r = await h.run(FROM, udp6(remote6));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(r.data, udp6(remote6), 'the sender leaves the inner packet as it is');
    assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, direction: EGRESS, saddr: podA6, daddr: remote6, srcIdentity: IDENTITY.A, dstIdentity: IDENTITY.REMOTE, srcEndpoint: POD_A.endpointId }]);
    assert.equal((await h.run(FROM, udp6(native6))).retval, TcAction.OK);
    tunnelMode(h, false);
    assert.equal((await h.run(FROM, udp6(remote6))).retval, TcAction.OK);
    const traces = await h.takeEvents(2);
    assert.deepEqual(traces.map((e) => e.subtype), [TracePoint.TO_STACK, TracePoint.TO_STACK]);
  });

  it('sends a pod\'s packet for a pod whose node is on an IPv6 underlay (the entry\'s tunnel_ip6) to tendril_vxlan, IPv4 and IPv6 pods alike', async () => {
    const [node6, podA6, remote6, remote4] = ['fd00:77::6', 'fd00:a::10', 'fd00:b::21', '10.201.0.21'];
    h.addEndpoint({ ...POD_A, ip: podA6 });
    h.ipcache.set(parsePrefix(`${remote6}/128`), { identity: IDENTITY.REMOTE, tunnelIp4: 0, tunnelIp6: parseIp(node6), flags: 0 });
    h.ipcache.set(parsePrefix(`${remote4}/32`), { identity: IDENTITY.REMOTE, tunnelIp4: 0, tunnelIp6: parseIp(node6), flags: 0 });
    const udp6 = ipv6Frame({ ...fromA, src: podA6, dst: remote6, nextHeader: IpProto.UDP, payload: Buffer.from([0x9c, 0x40, 0, 53, 0, 8, 0, 0]) });
    const udp4 = udpFrame({ ...fromA, src: POD_A.ip, dst: remote4, sport: 40000, dport: 53 });
    tunnelMode(h);
    for (const [frame, saddr, daddr] of [
      [udp6, podA6, remote6],
      [udp4, POD_A.ip, remote4],
    ] as const) {
      const r = await h.run(FROM, frame);
      assert.equal(r.retval, TcAction.REDIRECT, daddr);
      assert.deepEqual(r.data, frame, 'the sender leaves the inner packet as it is');
      assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, direction: EGRESS, saddr, daddr, srcIdentity: IDENTITY.A, dstIdentity: IDENTITY.REMOTE, srcEndpoint: POD_A.endpointId }]);
    }
    // The entry read back as written: the IPv6 endpoint, no IPv4 one.
    assert.deepEqual(h.ipcache.get(parsePrefix(`${remote6}/128`)), { identity: IDENTITY.REMOTE, tunnelIp4: 0, tunnelIp6: parseIp(node6), flags: 0 });
  });

  it('encapsulates every packet of an established flow, not only its first', async () => {
    tunnelMode(h);
    await h.run(FROM, synToRemote());
    const ack = tcpFrame({ ...fromA, src: POD_A.ip, dst: REMOTE_POD_IP, sport: 40000, dport: 80, flags: TcpFlag.ACK });
    for (let i = 0; i < 3; i++) assert.equal((await h.run(FROM, ack)).retval, TcAction.REDIRECT);
    const events = await h.takeEvents(4);
    assert.deepEqual(events.map((e) => e.subtype), [TracePoint.TO_OVERLAY, TracePoint.TO_OVERLAY, TracePoint.TO_OVERLAY, TracePoint.TO_OVERLAY]);
  });

  it('encapsulates to another node\'s own address (its identity REMOTE_NODE), and any address it hosts outside the masquerade CIDRs', async () => {
    tunnelMode(h);
    for (const [dst, identity] of [
      [REMOTE_NODE_IP, REMOTE_NODE_IDENTITY],
      [REMOTE_POD_OUTSIDE_MASQ, IDENTITY.REMOTE],
    ] as const) {
      const r = await h.run(FROM, synToRemote(dst));
      assert.equal(r.retval, TcAction.REDIRECT, dst);
      assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, daddr: dst, dstIdentity: identity }]);
    }
  });

  it('hands the packet to the stack without CONFIG_F_TUNNEL (native routing), for an address without tunnel endpoint, and for the node\'s own address', async () => {
    tunnelMode(h, false);
    assert.equal((await h.run(FROM, synToRemote())).retval, TcAction.OK);
    assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_STACK, daddr: REMOTE_POD_IP }]);
    tunnelMode(h);
    for (const dst of [WORLD_IP, NATIVE_NODE_IP, NODE_IP]) {
      assert.equal((await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst, sport: 40001, dport: 80, flags: TcpFlag.SYN }))).retval, TcAction.OK, dst);
      assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_STACK, daddr: dst }]);
    }
  });

  it('still applies the pod\'s egress policy first: a denied flow is dropped, not encapsulated', async () => {
    tunnelMode(h);
    h.policy.delete({ endpointId: POD_A.endpointId, identity: 0, egress: true, proto: 0, port: 0, portPrefixLen: 0 });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, cookie: 0x1001 });
    const r = await h.run(FROM, synToRemote());
    assert.equal(r.retval, TcAction.SHOT);
    const events = await h.takeEvents(2);
    assertEvents(events.filter((e) => e.type === DROP), [{ type: DROP, subtype: code('POLICY'), direction: EGRESS, dstIdentity: IDENTITY.REMOTE }]);
  });

  it('translates a ClusterIP first: the backend\'s node decides, and the DNATed packet is encapsulated', async () => {
    tunnelMode(h);
    lb.addBackend({ id: 301, ip: REMOTE_POD_IP, port: 8080, proto: IpProto.TCP });
    lb.addService({ id: 31, frontend: { ip: '10.96.0.10', port: 80, proto: IpProto.TCP }, backends: [301] });
    const r = await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: '10.96.0.10', sport: 40002, dport: 80, flags: TcpFlag.SYN }));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple(r.data), { src: POD_A.ip, dst: REMOTE_POD_IP, sport: 40002, dport: 8080 });
    assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, daddr: REMOTE_POD_IP, dstIdentity: IDENTITY.REMOTE }]);
  });
});

describe('overlay: tendril_from_host', () => {
  const FROM_HOST = 'tendril_from_host';
  let h: ProgramHarness;
  let lb: LbNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(HOST_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    installRemote(h);
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  it('encapsulates the node\'s packet for a remote pod with the node\'s identity', async () => {
    tunnelMode(h);
    const f = udpFrame({ ...toTendrilHost, src: ROUTER.ip, dst: REMOTE_POD_IP, sport: 5000, dport: 53 });
    const r = await h.run(FROM_HOST, f);
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(r.data, f);
    assertEvents(await h.takeEvents(1), [
      { type: TRACE, subtype: TracePoint.TO_OVERLAY, direction: NONE, saddr: ROUTER.ip, daddr: REMOTE_POD_IP, srcIdentity: IDENTITY.HOST, dstIdentity: IDENTITY.REMOTE },
    ]);
  });

  it('encapsulates the node\'s packet for a remote pod whose node is on an IPv6 underlay, with the node\'s identity', async () => {
    tunnelMode(h);
    const remote4 = '10.201.0.22';
    h.ipcache.set(parsePrefix(`${remote4}/32`), { identity: IDENTITY.REMOTE, tunnelIp4: 0, tunnelIp6: parseIp('fd00:77::6'), flags: 0 });
    const r = await h.run(FROM_HOST, udpFrame({ ...toTendrilHost, src: ROUTER.ip, dst: remote4, sport: 5000, dport: 53 }));
    assert.equal(r.retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, direction: NONE, saddr: ROUTER.ip, daddr: remote4, srcIdentity: IDENTITY.HOST, dstIdentity: IDENTITY.REMOTE }]);
  });

  it('drops it as before without CONFIG_F_TUNNEL: no local endpoint holds the address', async () => {
    tunnelMode(h, false);
    const r = await h.run(FROM_HOST, udpFrame({ ...toTendrilHost, src: ROUTER.ip, dst: REMOTE_POD_IP, sport: 5000, dport: 53 }));
    assert.equal(r.retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('UNKNOWN_ENDPOINT'), daddr: REMOTE_POD_IP }]);
  });

  it('encapsulates the node\'s ClusterIP connection to a backend on another node after DNAT, tracked with the node\'s identity', async () => {
    tunnelMode(h);
    lb.addBackend({ id: 302, ip: REMOTE_POD_IP, port: 8080, proto: IpProto.TCP });
    lb.addService({ id: 32, frontend: { ip: '10.96.0.11', port: 80, proto: IpProto.TCP }, backends: [302] });
    const r = await h.run(FROM_HOST, tcpFrame({ ...toTendrilHost, src: ROUTER.ip, dst: '10.96.0.11', sport: 36002, dport: 80, flags: TcpFlag.SYN }));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple(r.data), { src: ROUTER.ip, dst: REMOTE_POD_IP, sport: 36002, dport: 8080 });
    const entry = h.ct({ saddr: ROUTER.ip, daddr: REMOTE_POD_IP, sport: 36002, dport: 8080, proto: IpProto.TCP });
    assert.ok(entry);
    assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.revNatIndex], [IDENTITY.HOST, IDENTITY.REMOTE, 32]);
    assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, srcIdentity: IDENTITY.HOST, daddr: REMOTE_POD_IP }]);
  });

  // A device of the node a router sends traffic in on (skb->ingress_ifindex of a forwarded packet).
  const OUTSIDE_DEVICE = 9;

  it('gives a packet it forwards to a remote pod the source\'s own identity as VNI, never the node\'s: world (a CIDR\'s identity is node-local), and world for a forged node or remote pod address', async () => {
    tunnelMode(h);
    const cases: Array<[string, number]> = [
      [WORLD_IP, IDENTITY.WORLD],
      // A CIDR's identity is this node's alone (local scope): another node knows the address as world.
      ['203.0.113.7', IDENTITY.WORLD],
      // Forged: the node's own addresses, another node's, a pod another node hosts.
      [NODE_IP, IDENTITY.WORLD],
      [ROUTER.ip, IDENTITY.WORLD],
      [REMOTE_NODE_IP, IDENTITY.WORLD],
      [REMOTE_POD_OUTSIDE_MASQ, IDENTITY.WORLD],
      // A local pod's address from a device that is not the pod's.
      [POD_A.ip, IDENTITY.WORLD],
    ];
    for (const [src, identity] of cases) {
      const r = await h.runForwarded(FROM_HOST, udpFrame({ ...toTendrilHost, src, dst: REMOTE_POD_IP, sport: 5000, dport: 53 }), OUTSIDE_DEVICE);
      assert.equal(r.retval, TcAction.REDIRECT, src);
      assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, saddr: src, daddr: REMOTE_POD_IP, srcIdentity: identity, dstIdentity: IDENTITY.REMOTE }]);
    }
    // A local pod's packet from its own device keeps the pod's identity.
    const r = await h.runForwarded(FROM_HOST, udpFrame({ ...toTendrilHost, src: POD_A.ip, dst: REMOTE_POD_IP, sport: 5000, dport: 53 }), POD_A.ifindex);
    assert.equal(r.retval, TcAction.REDIRECT);
    assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, srcIdentity: IDENTITY.A, srcEndpoint: POD_A.endpointId }]);
  });

  it('drops a ClusterIP packet forwarded from outside (CLUSTERIP_FROM_OUTSIDE) instead of encapsulating it to the backend\'s node', async () => {
    tunnelMode(h);
    lb.addBackend({ id: 303, ip: REMOTE_POD_IP, port: 8080, proto: IpProto.TCP });
    lb.addService({ id: 33, frontend: { ip: '10.96.0.12', port: 80, proto: IpProto.TCP }, backends: [303] });
    const r = await h.runForwarded(FROM_HOST, tcpFrame({ ...toTendrilHost, src: WORLD_IP, dst: '10.96.0.12', sport: 36003, dport: 80, flags: TcpFlag.SYN }), OUTSIDE_DEVICE);
    assert.equal(r.retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('CLUSTERIP_FROM_OUTSIDE'), saddr: WORLD_IP, daddr: '10.96.0.12', srcIdentity: IDENTITY.WORLD }]);
    assert.equal(await h.ctCount(), 0, 'no backend chosen, nothing tracked');
  });
});

describe('overlay: bpf_netdev', () => {
  let h: ProgramHarness;
  let node: SnatNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(NETDEV_OBJECT);
    node = new SnatNode(h);
    node.addDevice();
    node.addMasqueradeCidrs();
    installNode(h);
    installRemote(h);
  });
  afterEach(async () => {
    await h?.close();
  });

  const out = { srcMac: '0a:00:00:00:ee:01', dstMac: '0a:00:00:00:ee:fe' };

  it('masquerades a pod\'s traffic to the world only: not to a node of the cluster (tunnel or not), nor to an address another node hosts', async () => {
    for (const mode of [true, false]) {
      tunnelMode(h, mode);
      for (const dst of [REMOTE_NODE_IP, NATIVE_NODE_IP, REMOTE_POD_OUTSIDE_MASQ]) {
        const f = tcpFrame({ ...out, src: POD_A.ip, dst, sport: 40010, dport: 80, flags: TcpFlag.SYN });
        const r = await h.run('tendril_to_netdev', f);
        assert.equal(r.retval, TcAction.OK);
        assert.deepEqual(r.data, f, `${dst} keeps the pod's address (tunnel mode ${mode})`);
      }
      const r = await h.run('tendril_to_netdev', tcpFrame({ ...out, src: POD_A.ip, dst: WORLD_IP, sport: 40011 + Number(mode), dport: 80, flags: TcpFlag.SYN }));
      assert.equal(r.retval, TcAction.OK);
      assert.equal(tuple(r.data).src, NODE_IP, 'the world sees the node');
    }
  });

  it('SNATs a NodePort flow to a backend on another node to the node\'s InternalIP (not the device\'s address) and encapsulates it (with the client\'s identity as VNI: overlayPath.test.ts sees it at the backend\'s node)', async () => {
    // The client came in on a device of another network, which the backend's node could not send back to.
    tunnelMode(h, true, NODE_IP);
    const lb = new LbNode(h);
    try {
      h.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(TEST_IFINDEX, { ipv4: parseIp('10.199.0.1'), flags: 0, mac: out.srcMac });
      lb.addBackend({ id: 303, ip: REMOTE_POD_IP, port: 8080, proto: IpProto.TCP });
      lb.addService({ id: 33, frontend: { ip: '0.0.0.0', port: 30080, proto: IpProto.TCP }, backends: [303], flags: 1 /* NODEPORT */ });
      const r = await h.run('tendril_from_netdev', tcpFrame({ srcMac: out.dstMac, dstMac: out.srcMac, src: WORLD_IP, dst: NODE_IP, sport: 50010, dport: 30080, flags: TcpFlag.SYN }));
      assert.equal(r.retval, TcAction.REDIRECT);
      const t = tuple(r.data);
      assert.deepEqual([t.src, t.dst, t.dport], [NODE_IP, REMOTE_POD_IP, 8080]);
      assert.ok(t.sport >= NAT_PORT_MIN && t.sport <= NAT_PORT_MAX, `NAT port ${t.sport}`);
      const events = await h.takeEvents(1);
      assertEvents(events.slice(-1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, saddr: NODE_IP, daddr: REMOTE_POD_IP, dstIdentity: IDENTITY.REMOTE }]);
    } finally {
      lb.close();
    }
  });
});

describe('overlay: tendril_from_overlay', () => {
  const FROM_OVERLAY = 'tendril_from_overlay';
  let h: ProgramHarness;

  beforeEach(async () => {
    h = await ProgramHarness.load(OVERLAY_OBJECT);
    installNode(h);
    installRemote(h);
    tunnelMode(h);
  });
  afterEach(async () => {
    await h?.close();
  });

  it('drops a packet without tunnel metadata (DROP_NO_TUNNEL_KEY): its source identity would be a guess', async () => {
    const f = tcpFrame({ srcMac: '0a:00:00:00:aa:01', dstMac: '0a:00:00:00:aa:02', src: REMOTE_POD_IP, dst: POD_A.ip, sport: 40000, dport: 80, flags: TcpFlag.SYN });
    const r = await h.run(FROM_OVERLAY, f);
    assert.equal(r.retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NO_TUNNEL_KEY'), direction: INGRESS, saddr: REMOTE_POD_IP, daddr: POD_A.ip, srcIdentity: 0 }]);
    assert.equal(h.metric(DropReason.NO_TUNNEL_KEY.code, INGRESS).packets, 1n);
    assert.equal(await h.ctCount(), 0);
  });
});
