/**
 * IPv6 services in bpf_lxc.o through BPF_PROG_TEST_RUN, beside lb.test.ts's
 * IPv4 ones: a pod's packet to an IPv6 frontend is DNATed (valid L4
 * checksums over the IPv6 pseudo-header), pinned in a service entry of the
 * IPv6 conntrack table, re-chosen when its backend leaves the service, kept
 * by ClientIP affinity, spread by the shared Maglev table; the backend's
 * reply gets the frontend back as its source.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { formatIp, parseIp } from '../../netip/index.js';
import { codec, TcAction } from '../kernel/bpf/index.js';
import { BackendState, CtFlag, DropReason, EventType, LB_HAIRPIN_IP6, LbScope, MapName, PolicyVerdict, ServiceFlag } from './constants.js';
import { flowHash6 } from './flowHash.js';
import { deviceInfo } from './layout.js';
import { assertEvents } from './testing/expect.js';
import { IDENTITY, installNode, NODE_IP, POD_A, POD_B, POD_C, TEST_IFINDEX } from './testing/fixtures.js';
import { LbNode, type TestFrontend } from './testing/lbNode.js';
import { internetChecksum, IpProto, ipv6Frame, pseudoHeader6, TcpFlag, tcpSegment, udpDatagram } from './testing/packets.js';
import { LXC_OBJECT, NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the IPv6 service load-balancing program tests');

const FROM = 'tendril_from_container';
const TO = 'tendril_to_container';

const A6 = { ...POD_A, ip: 'fd00:10::a' };
const B6 = { ...POD_B, ip: 'fd00:10::b' };
const C6 = { ...POD_C, ip: 'fd00:10::c' };
const VIP6 = 'fd00:96::10';
const WEB: TestFrontend = { ip: VIP6, port: 80, proto: IpProto.TCP };
const DNS: TestFrontend = { ip: VIP6, port: 53, proto: IpProto.UDP };
const BE = {
  B: { id: 201, ip: B6.ip, port: 8080, proto: IpProto.TCP },
  C: { id: 202, ip: C6.ip, port: 8080, proto: IpProto.TCP },
  B_DNS: { id: 203, ip: B6.ip, port: 5353, proto: IpProto.UDP },
  /** A pod on another node. */
  REMOTE: { id: 204, ip: 'fd00:201::5', port: 8080, proto: IpProto.TCP },
  A: { id: 205, ip: A6.ip, port: 8080, proto: IpProto.TCP },
} as const;
const ID = { WEB: 17, DNS: 18 } as const;
const COOKIE_ALLOW = 0x1001;
const fromA = { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac };
const fromB = { srcMac: POD_B.podMac, dstMac: POD_B.lxcMac };

/** An L4 segment with its checksum over the IPv6 pseudo-header (the builders compute IPv4's). */
function withChecksum6(seg: Buffer, src: string, dst: string, proto: number): Buffer {
  const off = proto === IpProto.TCP ? 16 : 6;
  seg.writeUInt16BE(0, off);
  seg.writeUInt16BE(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, proto, seg.length), seg])), off);
  return seg;
}

function tcp6(src: string, dst: string, sport: number, dport: number, flags: number = TcpFlag.SYN, macs = fromA): Buffer {
  const seg = tcpSegment({ src: '0.0.0.0', dst: '0.0.0.0', sport, dport, flags, payload: Buffer.from('hello') });
  return ipv6Frame({ ...macs, src, dst, nextHeader: IpProto.TCP, payload: withChecksum6(seg, src, dst, IpProto.TCP) });
}

function udp6(src: string, dst: string, sport: number, dport: number): Buffer {
  const d = udpDatagram({ src: '0.0.0.0', dst: '0.0.0.0', sport, dport, payload: Buffer.from('query') });
  return ipv6Frame({ ...fromA, src, dst, nextHeader: IpProto.UDP, payload: withChecksum6(d, src, dst, IpProto.UDP) });
}

function addr6(b: Uint8Array): string {
  const groups = Array.from({ length: 8 }, (_, i) => ((b[2 * i]! << 8) | b[2 * i + 1]!).toString(16));
  return formatIp(parseIp(groups.join(':')));
}

/** Addresses and ports of an IPv6 TCP/UDP frame, its L4 checksum checked over the pseudo-header. */
function tuple6(frame: Uint8Array): { src: string; dst: string; sport: number; dport: number } {
  const b = Buffer.from(frame);
  assert.equal(b.readUInt16BE(12), 0x86dd);
  const proto = b[14 + 6]!;
  const src = addr6(b.subarray(22, 38));
  const dst = addr6(b.subarray(38, 54));
  const l4 = b.subarray(54, 54 + b.readUInt16BE(18));
  assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, proto, l4.length), l4])), 0, `${proto === IpProto.TCP ? 'TCP' : 'UDP'} checksum over the IPv6 pseudo-header`);
  return { src, dst, sport: l4.readUInt16BE(0), dport: l4.readUInt16BE(2) };
}

const ipOf = (id: number) => Object.values(BE).find((b) => b.id === id)?.ip;

describe('IPv6 services in bpf_lxc', () => {
  let h: ProgramHarness;
  let lb: LbNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    for (const ep of [A6, B6, C6]) {
      h.addEndpoint(ep);
      h.addIpcache(`${ep.ip}/128`, ep.identity);
    }
    for (const b of Object.values(BE)) lb.addBackend(b);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: COOKIE_ALLOW });
    for (const ep of [POD_A, POD_B, POD_C]) {
      h.addPolicy({ endpointId: ep.endpointId, identity: 0, egress: false, cookie: COOKIE_ALLOW });
      h.addPolicy({ endpointId: ep.endpointId, identity: 0, egress: true, cookie: COOKIE_ALLOW });
    }
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  it('DNATs TCP and UDP to IPv6 frontends with valid checksums; other ports and addresses pass untouched', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id] });
    lb.addService({ id: ID.DNS, frontend: DNS, backends: [BE.B_DNS.id] });

    const syn = tcp6(A6.ip, VIP6, 40000, 80);
    let r = await h.run(FROM, syn);
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(r.data), { src: A6.ip, dst: B6.ip, sport: 40000, dport: 8080 });
    assert.deepEqual(r.data.subarray(54 + 20), syn.subarray(54 + 20), 'payload untouched');
    const svc = lb.serviceCt({ saddr: A6.ip, daddr: VIP6, sport: 40000, dport: 80, proto: IpProto.TCP })!;
    assert.ok(svc, 'a service entry in the IPv6 conntrack table');
    assert.deepEqual([svc.revNatIndex, svc.backendId, svc.natPort, svc.flags & CtFlag.SERVICE], [ID.WEB, BE.B.id, 80, CtFlag.SERVICE]);
    assert.ok(h.ct({ saddr: A6.ip, daddr: B6.ip, sport: 40000, dport: 8080, proto: IpProto.TCP }), 'the translated flow is tracked');

    r = await h.run(FROM, udp6(A6.ip, VIP6, 33000, 53));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(r.data), { src: A6.ip, dst: B6.ip, sport: 33000, dport: 5353 });

    for (const miss of [tcp6(A6.ip, VIP6, 40001, 53), udp6(A6.ip, VIP6, 40002, 80), tcp6(A6.ip, 'fd00:96::11', 40003, 80)]) {
      const m = await h.run(FROM, miss);
      assert.equal(m.retval, TcAction.OK);
      assert.deepEqual(m.data, miss, 'no service: untouched');
    }
  });

  it('gives the backend\'s reply the frontend as its source, delivered to the client', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id] });
    assert.equal((await h.run(FROM, tcp6(A6.ip, VIP6, 40100, 80))).retval, TcAction.REDIRECT);
    const synAck = tcp6(B6.ip, A6.ip, 8080, 40100, TcpFlag.SYN | TcpFlag.ACK, fromB);
    const r = await h.run(FROM, synAck);
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(r.data), { src: VIP6, dst: A6.ip, sport: 80, dport: 40100 });
    assert.equal(h.ct({ saddr: A6.ip, daddr: B6.ip, sport: 40100, dport: 8080, proto: IpProto.TCP })!.flags & CtFlag.REPLY_SEEN, CtFlag.REPLY_SEEN);

    // The service is gone (no reverse NAT entry): nothing to undo, the reply goes as sent.
    lb.revNat6.delete(ID.WEB);
    const again = await h.run(FROM, tcp6(B6.ip, A6.ip, 8080, 40100, TcpFlag.ACK, fromB));
    assert.deepEqual(tuple6(again.data).src, B6.ip);
  });

  it('a backend on another node: the packet goes to the stack translated; the reply coming back through the stack gets the frontend', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.REMOTE.id] });
    const r = await h.run(FROM, tcp6(A6.ip, VIP6, 40200, 80));
    assert.equal(r.retval, TcAction.OK);
    assert.deepEqual(tuple6(r.data), { src: A6.ip, dst: BE.REMOTE.ip, sport: 40200, dport: 8080 });
    const toA = { srcMac: POD_A.lxcMac, dstMac: POD_A.podMac };
    const reply = await h.runForwarded(TO, tcp6(BE.REMOTE.ip, A6.ip, 8080, 40200, TcpFlag.SYN | TcpFlag.ACK, toA), 9);
    assert.equal(reply.retval, TcAction.OK);
    assert.deepEqual(tuple6(reply.data), { src: VIP6, dst: A6.ip, sport: 80, dport: 40200 });
  });

  it('lets a pod reach its own IPv6 service: source LB_HAIRPIN_IP6 there, both addresses restored on the reply', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.A.id] });
    const r = await h.run(FROM, tcp6(A6.ip, VIP6, 40300, 80));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(r.data), { src: LB_HAIRPIN_IP6, dst: A6.ip, sport: 40300, dport: 8080 });
    assert.equal(h.ct({ saddr: LB_HAIRPIN_IP6, daddr: A6.ip, sport: 40300, dport: 8080, proto: IpProto.TCP })!.flags & CtFlag.HAIRPIN, CtFlag.HAIRPIN);
    const synAck = await h.run(FROM, tcp6(A6.ip, LB_HAIRPIN_IP6, 8080, 40300, TcpFlag.SYN | TcpFlag.ACK));
    assert.equal(synAck.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(synAck.data), { src: VIP6, dst: A6.ip, sport: 80, dport: 40300 });
  });

  it('translates the backend\'s ICMPv6 error about the client\'s datagram: frontend outside and inside, every checksum right', async () => {
    lb.addService({ id: ID.DNS, frontend: DNS, backends: [BE.B_DNS.id] });
    const query = await h.run(FROM, udp6(A6.ip, VIP6, 33100, 53));
    assert.deepEqual(tuple6(query.data), { src: A6.ip, dst: B6.ip, sport: 33100, dport: 5353 });
    // B answers port unreachable, quoting the datagram it got (A → B:5353).
    const quoted = Buffer.from(query.data.subarray(14));
    const msg = Buffer.concat([Buffer.from([1, 4, 0, 0, 0, 0, 0, 0]), quoted]);
    msg.writeUInt16BE(internetChecksum(Buffer.concat([pseudoHeader6(B6.ip, A6.ip, IpProto.ICMPV6, msg.length), msg])), 2);
    const r = await h.run(FROM, ipv6Frame({ ...fromB, src: B6.ip, dst: A6.ip, nextHeader: IpProto.ICMPV6, payload: msg }));
    assert.equal(r.retval, TcAction.REDIRECT, 'delivered to the client');
    const out = Buffer.from(r.data);
    const icmp = out.subarray(54);
    assert.equal(addr6(out.subarray(22, 38)), VIP6, 'outer source: the frontend');
    assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(VIP6, A6.ip, IpProto.ICMPV6, icmp.length), icmp])), 0, 'ICMPv6 checksum');
    const inner = icmp.subarray(8);
    assert.equal(addr6(inner.subarray(8, 24)), A6.ip);
    assert.equal(addr6(inner.subarray(24, 40)), VIP6, 'quoted destination: the frontend');
    const udp = inner.subarray(40);
    assert.deepEqual([udp.readUInt16BE(0), udp.readUInt16BE(2)], [33100, 53]);
    assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(A6.ip, VIP6, IpProto.UDP, udp.length), udp])), 0, 'quoted UDP checksum');
  });

  it('pins a connection to its backend and chooses again when the backend leaves the service', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id, BE.C.id] });
    const chosen = new Set<string>();
    for (let sport = 41000; sport < 41024; sport++) {
      const first = tuple6((await h.run(FROM, tcp6(A6.ip, VIP6, sport, 80))).data).dst;
      chosen.add(first);
      assert.equal(ipOf(lb.serviceCt({ saddr: A6.ip, daddr: VIP6, sport, dport: 80, proto: IpProto.TCP })!.backendId), first);
      const ack = tcp6(A6.ip, VIP6, sport, 80, TcpFlag.ACK);
      assert.equal(tuple6((await h.run(FROM, ack)).data).dst, first, 'the same backend for the connection\'s life');
    }
    assert.equal(chosen.size, 2, 'both backends got connections');

    const t = { saddr: A6.ip, daddr: VIP6, sport: 41000, dport: 80, proto: IpProto.TCP };
    const pinned = lb.serviceCt(t)!.backendId;
    const other = pinned === BE.B.id ? BE.C.id : BE.B.id;
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [other] });
    lb.services6.delete({ address: parseIp(VIP6), dport: 80, backendSlot: 2, proto: IpProto.TCP, scope: 0 });
    lb.removeMember(ID.WEB, pinned);
    const next = tuple6((await h.run(FROM, tcp6(A6.ip, VIP6, 41000, 80, TcpFlag.ACK))).data).dst;
    assert.equal(next, ipOf(other));
    assert.equal(lb.serviceCt(t)!.backendId, other);
  });

  it('drops with DROP_NO_SERVICE when the IPv6 frontend has no backend', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [] });
    const r = await h.run(FROM, tcp6(A6.ip, VIP6, 40000, 80));
    assert.equal(r.retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: EventType.DROP, subtype: -DropReason.NO_SERVICE.code, saddr: A6.ip, daddr: VIP6 }]);
  });

  it('keeps a client on its affinity backend across connections while the backend is active', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id, BE.C.id], flags: ServiceFlag.AFFINITY, affinityTimeout: 60 });
    const first = tuple6((await h.run(FROM, tcp6(A6.ip, VIP6, 42000, 80))).data).dst;
    for (let sport = 42001; sport < 42012; sport++) assert.equal(tuple6((await h.run(FROM, tcp6(A6.ip, VIP6, sport, 80))).data).dst, first);
    const aff = lb.affinity6.get({ client: parseIp(A6.ip), revNatIndex: ID.WEB })!;
    assert.equal(ipOf(aff.backendId), first);
    // No longer active: the next connection goes to the other backend.
    const id = aff.backendId;
    lb.backends6.set(id, { ...lb.backends6.get(id)!, state: BackendState.TERMINATING });
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [id === BE.B.id ? BE.C.id : BE.B.id], flags: ServiceFlag.AFFINITY, affinityTimeout: 60 });
    lb.services6.delete({ address: parseIp(VIP6), dport: 80, backendSlot: 2, proto: IpProto.TCP, scope: 0 });
    assert.notEqual(tuple6((await h.run(FROM, tcp6(A6.ip, VIP6, 42100, 80))).data).dst, first);
  });

  it('takes the backend the Maglev table (shared with IPv4, by service ID) gives the flow hash of the IPv6 tuple', async () => {
    const size = 7;
    h.config.set(0, { ...h.config.get(0)!, maglevTableSize: size });
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id, BE.C.id], flags: ServiceFlag.MAGLEV });
    const table = [BE.B.id, BE.C.id, BE.C.id, BE.B.id, BE.C.id, BE.B.id, BE.B.id];
    await lb.setMaglev(ID.WEB, table);
    for (let sport = 43000; sport < 43020; sport++) {
      const slot = flowHash6({ saddr: A6.ip, daddr: VIP6, sport, dport: 80, proto: IpProto.TCP }) % size;
      assert.equal(tuple6((await h.run(FROM, tcp6(A6.ip, VIP6, sport, 80))).data).dst, ipOf(table[slot]!));
    }
  });
});

describe('IPv6 services from outside, bpf_netdev', () => {
  let h: ProgramHarness;
  let lb: LbNode;
  const FROM_NETDEV = 'tendril_from_netdev';
  const NODE6 = 'fd00:77::5';
  const CLIENT6 = '2001:db8:99::9';
  const wire = { srcMac: '0a:00:00:00:99:01', dstMac: '0a:00:00:00:ee:01' };
  const NODE_PORT: TestFrontend = { ip: NODE6, port: 30080, proto: IpProto.TCP };
  const syn = (dst: string, dport: number, sport = 50000) => tcp6(CLIENT6, dst, sport, dport, TcpFlag.SYN, wire);

  beforeEach(async () => {
    h = await ProgramHarness.load(NETDEV_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    h.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(TEST_IFINDEX, { ipv4: parseIp(NODE_IP), flags: 0, mac: wire.dstMac });
    h.addEndpoint(A6);
    h.addIpcache(`${NODE6}/128`, IDENTITY.HOST);
    lb.addBackend(BE.A);
    lb.addBackend(BE.REMOTE);
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  it('a NodePort from outside: the client is world, never the node (GO-2023-1643): a policy allowing only host drops it', async () => {
    lb.addService({ id: ID.WEB, frontend: NODE_PORT, backends: [BE.A.id], flags: ServiceFlag.NODEPORT });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: COOKIE_ALLOW });
    assert.equal((await h.run(FROM_NETDEV, syn(NODE6, 30080))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, srcIdentity: IDENTITY.WORLD_IPV6, dstEndpoint: POD_A.endpointId, daddr: A6.ip, dport: 8080 },
      { type: EventType.DROP, subtype: -DropReason.POLICY.code },
    ]);
    // Even a client whose address the ipcache gives the host identity (spoofed from outside) is not the host here.
    h.addIpcache(`${CLIENT6}/128`, IDENTITY.HOST);
    assert.equal((await h.run(FROM_NETDEV, syn(NODE6, 30080, 50001))).retval, TcAction.SHOT);
  });

  it('a NodePort from outside allowed for world: DNAT to the local backend, hop limit - 1, the pod\'s MACs, client address kept', async () => {
    lb.addService({ id: ID.WEB, frontend: NODE_PORT, backends: [BE.A.id], flags: ServiceFlag.NODEPORT });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: false, cookie: COOKIE_ALLOW });
    const r = await h.run(FROM_NETDEV, syn(NODE6, 30080));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(r.data), { src: CLIENT6, dst: A6.ip, sport: 50000, dport: 8080 });
    assert.equal(r.data[14 + 7], 63, 'hop limit - 1');
    assert.equal(h.ct({ saddr: CLIENT6, daddr: A6.ip, sport: 50000, dport: 8080, proto: IpProto.TCP })!.flags & CtFlag.NODEPORT, CtFlag.NODEPORT);
  });

  it('a Local service from outside chooses only among its backends here (EXTERNAL scope), however many others the service has', async () => {
    const others = Array.from({ length: 6 }, (_, i) => ({ id: 210 + i, ip: `fd00:202::${i + 1}`, port: 8080, proto: IpProto.TCP }));
    for (const b of others) lb.addBackend(b);
    const flags = ServiceFlag.NODEPORT | ServiceFlag.LOCAL_TRAFFIC | ServiceFlag.TWO_SCOPES;
    lb.addService({ id: ID.WEB, frontend: NODE_PORT, backends: [BE.A.id], flags });
    lb.addService({ id: ID.WEB, frontend: NODE_PORT, backends: [...others.map((b) => b.id), BE.A.id], flags, scope: LbScope.INTERNAL });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: false, cookie: COOKIE_ALLOW });
    for (let sport = 51000; sport < 51012; sport++) {
      const r = await h.run(FROM_NETDEV, syn(NODE6, 30080, sport));
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.equal(tuple6(r.data).dst, A6.ip);
    }
  });

  it('a ClusterIP from outside is dropped (CLUSTERIP_FROM_OUTSIDE); a Local service with its backend elsewhere is refused, not forwarded untranslated; other traffic passes', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.A.id] });
    assert.equal((await h.run(FROM_NETDEV, syn(VIP6, 80))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: EventType.DROP, subtype: -DropReason.CLUSTERIP_FROM_OUTSIDE.code, srcIdentity: IDENTITY.WORLD_IPV6 }]);
    lb.addService({ id: ID.DNS, frontend: NODE_PORT, backends: [BE.REMOTE.id], flags: ServiceFlag.NODEPORT | ServiceFlag.LOCAL_TRAFFIC });
    assert.equal((await h.run(FROM_NETDEV, syn(NODE6, 30080))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: EventType.DROP, subtype: -DropReason.NO_SERVICE.code }]);
    const other = syn(NODE6, 22);
    const r = await h.run(FROM_NETDEV, other);
    assert.equal(r.retval, TcAction.OK);
    assert.deepEqual(r.data, other);
  });
});
