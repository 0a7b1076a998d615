/**
 * IPv6 SNAT in bpf_netdev.o through BPF_PROG_TEST_RUN (--ipv6-masquerade,
 * bpf/lib/nat6.h): a pod's IPv6 traffic leaving the IPv6 masquerade CIDRs
 * takes the device's IPv6 address and a port of the ranges, its replies and
 * the ICMPv6 errors about it go back to the pod, and a full tendril_snat6
 * refuses new flows without touching the ones it holds. Checksums are
 * verified here over the bytes the programs wrote.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { formatIp, parseIp, parsePrefix } from '../../netip/index.js';
import { codec, TcAction, type BpfMap } from '../kernel/bpf/index.js';
import { DeviceFlag, DropReason, MapName, NAT_PORT_MAX, NAT_PORT_MIN, NatDirection, NatFlag, TrafficDirection } from './constants.js';
import { deviceInfo, ipmasqKey, nat6Entry, nat6Key, type Nat6EntryValue, type Nat6Key } from './layout.js';
import { NODE_IP, TEST_IFINDEX } from './testing/fixtures.js';
import { Icmp6Type, internetChecksum, IpProto, ipv6Frame, pseudoHeader6, TcpFlag, tcpSegment, udpDatagram } from './testing/packets.js';
import { NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the IPv6 SNAT program tests');

const TO_NETDEV = 'tendril_to_netdev';
const FROM_NETDEV = 'tendril_from_netdev';
const { INGRESS, EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

const NODE6 = 'fd00:77::5';
const POD6 = 'fd10::a';
const POD6_CIDR = 'fd10::/64';
const WORLD6 = '2001:db8::1';
const ROUTER6 = '2001:db8:ff::1';
const outMacs = { srcMac: '0a:00:00:00:ee:01', dstMac: '0a:00:00:00:ee:fe' };
const inMacs = { srcMac: '0a:00:00:00:ee:fe', dstMac: '0a:00:00:00:ee:01' };

/** An L4 payload with its checksum over the IPv6 pseudo-header (offset: TCP 16, UDP 6, ICMPv6 2). */
function withChecksum6(l4: Buffer, src: string, dst: string, proto: number): Buffer {
  const off = proto === IpProto.TCP ? 16 : proto === IpProto.UDP ? 6 : 2;
  l4.writeUInt16BE(0, off);
  l4.writeUInt16BE(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, proto, l4.length), l4])), off);
  return l4;
}

function tcp6(src: string, dst: string, sport: number, dport: number, flags: number = TcpFlag.SYN, macs = outMacs): Buffer {
  const seg = tcpSegment({ src: '0.0.0.0', dst: '0.0.0.0', sport, dport, flags, payload: Buffer.from('hello') });
  return ipv6Frame({ ...macs, src, dst, nextHeader: IpProto.TCP, payload: withChecksum6(seg, src, dst, IpProto.TCP) });
}

function udp6(src: string, dst: string, sport: number, dport: number, macs = outMacs): Buffer {
  const d = udpDatagram({ src: '0.0.0.0', dst: '0.0.0.0', sport, dport, payload: Buffer.from('query') });
  return ipv6Frame({ ...macs, src, dst, nextHeader: IpProto.UDP, payload: withChecksum6(d, src, dst, IpProto.UDP) });
}

function echo6(src: string, dst: string, type: number, id: number, macs = outMacs): Buffer {
  const m = Buffer.concat([Buffer.from([type, 0, 0, 0]), Buffer.from([id >> 8, id & 0xff, 0, 1]), Buffer.from('abcdefgh')]);
  return ipv6Frame({ ...macs, src, dst, nextHeader: IpProto.ICMPV6, payload: withChecksum6(m, src, dst, IpProto.ICMPV6) });
}

function addr6(b: Uint8Array): string {
  const groups = Array.from({ length: 8 }, (_, i) => ((b[2 * i]! << 8) | b[2 * i + 1]!).toString(16));
  return formatIp(parseIp(groups.join(':')));
}

/** An IPv6 frame's addresses, protocol, ports (an echo's identifier as sport) and L4 bytes, its L4 checksum checked. */
function read6(frame: Uint8Array): { src: string; dst: string; proto: number; sport: number; dport: number; l4: Buffer } {
  const b = Buffer.from(frame);
  assert.equal(b.readUInt16BE(12), 0x86dd);
  const proto = b[20]!;
  const src = addr6(b.subarray(22, 38));
  const dst = addr6(b.subarray(38, 54));
  const l4 = b.subarray(54, 54 + b.readUInt16BE(18));
  assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, proto, l4.length), l4])), 0, `L4 checksum (proto ${proto}) over the pseudo-header`);
  if (proto === IpProto.ICMPV6) return { src, dst, proto, sport: l4.readUInt16BE(4), dport: 0, l4 };
  return { src, dst, proto, sport: l4.readUInt16BE(0), dport: l4.readUInt16BE(2), l4 };
}

/** An ICMPv6 error (type, code) from `src` to `dst` quoting `datagram` (an IPv6 packet without its Ethernet header). */
function icmp6Error(src: string, dst: string, type: number, datagram: Buffer): Buffer {
  const m = Buffer.concat([Buffer.from([type, type === 1 ? 4 : 0, 0, 0, 0, 0, 0, 0]), datagram]);
  return ipv6Frame({ ...inMacs, src, dst, nextHeader: IpProto.ICMPV6, payload: withChecksum6(m, src, dst, IpProto.ICMPV6) });
}

const inRange = (port: number): boolean => port >= NAT_PORT_MIN && port <= NAT_PORT_MAX;

describe('IPv6 SNAT (bpf_netdev, --ipv6-masquerade)', () => {
  let h: ProgramHarness;
  let snat: BpfMap<Nat6Key, Nat6EntryValue>;

  async function load(sizes: Record<string, number> = {}): Promise<void> {
    h = await ProgramHarness.load(NETDEV_OBJECT, sizes);
    snat = h.object.map(MapName.SNAT6, nat6Key, nat6Entry);
    h.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(TEST_IFINDEX, { ipv4: parseIp(NODE_IP), ipv6: parseIp(NODE6), flags: DeviceFlag.MASQUERADE, mac: outMacs.srcMac });
    const ipmasq = h.object.map(MapName.NO_MASQUERADE, ipmasqKey, codec.u8);
    ipmasq.set(parsePrefix(POD6_CIDR), 1);
    ipmasq.set(parsePrefix('10.200.0.0/16'), 1);
  }
  beforeEach(() => load());
  afterEach(async () => {
    await h?.close();
  });

  const egressKey = (sport: number, dport: number, proto: number, dst = WORLD6): Nat6Key => ({
    saddr: parseIp(POD6),
    daddr: parseIp(dst),
    sport,
    dport,
    proto,
    dir: NatDirection.EGRESS,
  });
  const ingressKey = (sport: number, natPort: number, proto: number, src = WORLD6): Nat6Key => ({
    saddr: parseIp(src),
    daddr: parseIp(NODE6),
    sport,
    dport: natPort,
    proto,
    dir: NatDirection.INGRESS,
  });
  const side = (v: Nat6EntryValue | undefined) => (v ? { toAddr: formatIp(v.toAddr), toPort: v.toPort, flags: v.flags } : undefined);
  async function count(): Promise<number> {
    let n = 0;
    for await (const _ of snat.keys()) n++;
    return n;
  }

  /** Sends `frame` out of the device; the translated frame, its source the node's IPv6 address and a port of the ranges. */
  async function masquerade(frame: Buffer) {
    const r = await h.run(TO_NETDEV, frame);
    assert.equal(r.retval, TcAction.OK);
    const out = read6(r.data);
    assert.equal(out.src, NODE6, 'source is the device\'s IPv6 address');
    assert.ok(inRange(out.sport), `port ${out.sport} in ${NAT_PORT_MIN}..${NAT_PORT_MAX}`);
    return { data: r.data, ...out };
  }

  it('translates a TCP SYN to the device\'s IPv6 address, both sides recorded, and its reply back to the pod', async () => {
    const out = await masquerade(tcp6(POD6, WORLD6, 40000, 443));
    assert.equal(out.dst, WORLD6);
    assert.deepEqual(side(snat.get(egressKey(40000, 443, IpProto.TCP))), { toAddr: NODE6, toPort: out.sport, flags: NatFlag.MASQUERADE });
    assert.deepEqual(side(snat.get(ingressKey(443, out.sport, IpProto.TCP))), { toAddr: POD6, toPort: 40000, flags: NatFlag.MASQUERADE });
    assert.equal(h.metric(0, EGRESS).packets, 1n, 'counted as tendril\'s');

    const r = await h.run(FROM_NETDEV, tcp6(WORLD6, NODE6, 443, out.sport, TcpFlag.SYN | TcpFlag.ACK, inMacs));
    assert.equal(r.retval, TcAction.OK);
    const back = read6(r.data);
    assert.deepEqual([back.src, back.dst, back.sport, back.dport], [WORLD6, POD6, 443, 40000]);
    assert.equal(h.metric(0, INGRESS).packets, 1n);

    // The same tuple again reuses its mapping.
    assert.equal((await masquerade(tcp6(POD6, WORLD6, 40000, 443, TcpFlag.ACK))).sport, out.sport);
    assert.equal(await count(), 2);
  });

  it('translates UDP and an ICMPv6 echo request (the identifier is the port), and their replies', async () => {
    const u = await masquerade(udp6(POD6, WORLD6, 5353, 53));
    let r = await h.run(FROM_NETDEV, udp6(WORLD6, NODE6, 53, u.sport, inMacs));
    let back = read6(r.data);
    assert.deepEqual([back.dst, back.dport], [POD6, 5353]);

    const e = await masquerade(echo6(POD6, WORLD6, Icmp6Type.ECHO_REQUEST, 0x4242));
    assert.deepEqual(side(snat.get(ingressKey(0, e.sport, IpProto.ICMPV6))), { toAddr: POD6, toPort: 0x4242, flags: NatFlag.MASQUERADE });
    r = await h.run(FROM_NETDEV, echo6(WORLD6, NODE6, Icmp6Type.ECHO_REPLY, e.sport, inMacs));
    assert.equal(r.retval, TcAction.OK);
    back = read6(r.data);
    assert.deepEqual([back.dst, back.sport], [POD6, 0x4242]);
  });

  it('leaves IPv6 untouched without an IPv6 masquerade CIDR (--ipv6-masquerade off), inside the CIDRs, and the node\'s own traffic', async () => {
    await h.close();
    h = await ProgramHarness.load(NETDEV_OBJECT);
    h.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(TEST_IFINDEX, { ipv4: parseIp(NODE_IP), ipv6: parseIp(NODE6), flags: DeviceFlag.MASQUERADE, mac: outMacs.srcMac });
    h.object.map(MapName.NO_MASQUERADE, ipmasqKey, codec.u8).set(parsePrefix('10.200.0.0/16'), 1);
    const syn = tcp6(POD6, WORLD6, 40000, 443);
    assert.deepEqual(Buffer.from((await h.run(TO_NETDEV, syn)).data), syn, 'no IPv6 CIDR: the pod\'s address stays');
    await h.close();
    await load();
    const inside = tcp6(POD6, 'fd10::b', 40000, 443);
    assert.deepEqual(Buffer.from((await h.run(TO_NETDEV, inside)).data), inside);
    const own = tcp6(NODE6, WORLD6, 40000, 443);
    assert.deepEqual(Buffer.from((await h.run(TO_NETDEV, own)).data), own);
    assert.equal(await count(), 0);
  });

  it('drops a protocol it cannot translate (NAT_UNSUPPORTED_PROTO) rather than let it out with the pod\'s address', async () => {
    const gre = ipv6Frame({ ...outMacs, src: POD6, dst: WORLD6, nextHeader: IpProto.GRE, payload: Buffer.alloc(8) });
    assert.equal((await h.run(TO_NETDEV, gre)).retval, TcAction.SHOT);
    assert.equal(h.metric(code('NAT_UNSUPPORTED_PROTO'), EGRESS).packets, 1n);
  });

  describe('ICMPv6 errors', () => {
    /** The pod's datagram as it left, and a router's error about it, run through from_netdev. */
    async function errorRoundTrip(frame: Buffer) {
      const out = await masquerade(frame);
      const quoted = Buffer.from(out.data.subarray(14));
      const r = await h.run(FROM_NETDEV, icmp6Error(ROUTER6, NODE6, 1, quoted));
      return { sent: Buffer.from(frame.subarray(14)), r };
    }

    for (const [name, frame] of [
      ['UDP', udp6(POD6, WORLD6, 5353, 53)],
      ['TCP', tcp6(POD6, WORLD6, 40001, 443)],
      ['an echo request', echo6(POD6, WORLD6, Icmp6Type.ECHO_REQUEST, 0x1234)],
    ] as const) {
      it(`a destination unreachable about ${name} goes back to the pod, the quoted datagram its own again byte for byte`, async () => {
        const { sent, r } = await errorRoundTrip(frame);
        assert.equal(r.retval, TcAction.OK);
        const back = read6(r.data); // the ICMPv6 checksum, over the outer pseudo-header
        assert.deepEqual([back.src, back.dst], [ROUTER6, POD6]);
        assert.deepEqual(back.l4.subarray(8), sent);
      });
    }

    it('an error about no mapping (another destination), or not addressed to the mapped source, passes untouched', async () => {
      await masquerade(udp6(POD6, WORLD6, 5353, 53));
      const foreign = Buffer.from(udp6(NODE6, '2001:db8::2', 61000, 53).subarray(14));
      const err = icmp6Error(ROUTER6, NODE6, 1, foreign);
      assert.deepEqual(Buffer.from((await h.run(FROM_NETDEV, err)).data), err);
    });

    it('the pod\'s own error about a reply that reached it through a mapping leaves as the node\'s', async () => {
      const out = await masquerade(udp6(POD6, WORLD6, 5353, 53));
      const reply = await h.run(FROM_NETDEV, udp6(WORLD6, NODE6, 53, out.sport, inMacs));
      const delivered = Buffer.from(reply.data.subarray(14));
      const podErr = ipv6Frame({
        ...outMacs,
        src: POD6,
        dst: WORLD6,
        nextHeader: IpProto.ICMPV6,
        payload: withChecksum6(Buffer.concat([Buffer.from([1, 4, 0, 0, 0, 0, 0, 0]), delivered]), POD6, WORLD6, IpProto.ICMPV6),
      });
      const r = await h.run(TO_NETDEV, podErr);
      assert.equal(r.retval, TcAction.OK);
      const left = read6(r.data);
      assert.deepEqual([left.src, left.dst], [NODE6, WORLD6]);
      // The quoted datagram is the one the peer sent, to the node's address and port.
      const quoted = left.l4.subarray(8);
      assert.equal(addr6(quoted.subarray(24, 40)), NODE6);
      assert.equal(quoted.readUInt16BE(42), out.sport);
      assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(WORLD6, NODE6, IpProto.UDP, quoted.length - 40), quoted.subarray(40)])), 0, 'quoted UDP checksum');
    });
  });

  it('a full table refuses a new flow (NAT_FULL, counted) and the flows it holds keep their mappings', async () => {
    await h.close();
    await load({ [MapName.SNAT6]: 5 });
    const ports: number[] = [];
    for (const sport of [40001, 40002]) ports.push((await masquerade(tcp6(POD6, WORLD6, sport, 443))).sport);
    // Four sides of two mappings; the fifth entry (a reply side) fits, its original side does not.
    assert.equal((await h.run(TO_NETDEV, tcp6(POD6, WORLD6, 40003, 443))).retval, TcAction.SHOT);
    assert.equal(h.metric(code('NAT_FULL'), EGRESS).packets, 1n);
    assert.equal(await count(), 4, 'the half-made mapping was taken back');
    for (const [i, sport] of [40001, 40002].entries()) {
      const again = await masquerade(tcp6(POD6, WORLD6, sport, 443, TcpFlag.ACK));
      assert.equal(again.sport, ports[i], 'a live flow keeps its port');
    }
  });
});
