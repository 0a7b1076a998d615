/**
 * fast-check generators of frames for the datapath programs' fuzz test
 * (packetFuzz.test.ts): well-formed packets between the fixture node's
 * addresses (TCP, UDP, SCTP, GRE, ICMP echo, ICMP errors about tracked and
 * untracked flows, fragments, ARP, IPv6 with extension headers), the same
 * packets mutated (bit flips, truncation at any offset, field overwrites
 * with or without a fixed-up header checksum, trailers past the IP total
 * length), and plain random bytes. Frames stay below FUZZ_MAX_FRAME so a
 * test can use longer frames as markers.
 */
import fc from 'fast-check';
import { CIDR_24, NODE_IP, POD_A, POD_B, POD_C, REMOTE_POD_IP, ROUTER, WORLD_IP } from './fixtures.js';
import {
  arpFrame,
  datagramOf,
  EtherType,
  ethernetFrame,
  icmpEcho,
  icmpError,
  IpProto,
  internetChecksum,
  ipv4Datagram,
  ipv4Frame,
  ipv6Bytes,
  ipv6Frame,
  tcpSegment,
  udpDatagram,
} from './packets.js';

/** No generated frame is this long: longer frames are free for markers. */
export const FUZZ_MAX_FRAME = 1600;

export interface FuzzFrame {
  /** How the frame was made, for the report. */
  readonly label: string;
  readonly frame: Buffer;
}

/** A flow the fuzz test tracks in conntrack before every run (ICMP errors embed these). */
export interface SeedFlow {
  saddr: string;
  daddr: string;
  proto: number;
  sport: number;
  dport: number;
}

export const SEED_FLOWS: readonly SeedFlow[] = [
  { saddr: POD_A.ip, daddr: WORLD_IP, proto: IpProto.UDP, sport: 5353, dport: 53 },
  { saddr: POD_A.ip, daddr: POD_B.ip, proto: IpProto.TCP, sport: 40000, dport: 80 },
  { saddr: NODE_IP, daddr: POD_A.ip, proto: IpProto.TCP, sport: 30001, dport: 8080 },
  { saddr: POD_B.ip, daddr: REMOTE_POD_IP, proto: IpProto.ICMP, sport: 7, dport: 7 },
];

/** A flow whose entry has expired (the GC has not removed it): opens nothing. */
export const EXPIRED_FLOW: SeedFlow = { saddr: POD_A.ip, daddr: '203.0.113.7', proto: IpProto.TCP, sport: 41000, dport: 443 };

/**
 * IPv6 flows tracked (tendril_ct6_*) before every run, between the test
 * device's pod (its link-local fe80::1: the model's endpoints hold no other
 * IPv6 address) and fe80::2: what the ICMPv6 errors below claim to be about,
 * or forge.
 */
export const SEED_FLOWS6: readonly SeedFlow[] = [
  { saddr: 'fe80::1', daddr: 'fe80::2', proto: IpProto.UDP, sport: 5353, dport: 53 },
  { saddr: 'fe80::2', daddr: 'fe80::1', proto: IpProto.TCP, sport: 30001, dport: 8080 },
];

/** The IPv6 fragment record every run starts with (tendril_frag6): (fe80::1 → fe80::2, UDP, id 0x77) carried ports 1000 → 80. */
export const SEED_FRAGMENT6 = { saddr: 'fe80::1', daddr: 'fe80::2', id: 0x77, proto: IpProto.UDP, sport: 1000, dport: 80 };

/** The fragment record every run starts with: (A → B, UDP, id 0x99) carried ports 1000 → 80. */
export const SEED_FRAGMENT = { saddr: POD_A.ip, daddr: POD_B.ip, id: 0x99, proto: IpProto.UDP, sport: 1000, dport: 80 };

const ADDRESSES = [POD_A.ip, POD_B.ip, POD_C.ip, ROUTER.ip, NODE_IP, REMOTE_POD_IP, WORLD_IP, '203.0.113.7', '203.0.113.200', '10.200.0.99', '0.0.0.0', '255.255.255.255', '224.0.0.251'];
if (!CIDR_24.startsWith('203.0.113.')) throw new Error('fixture CIDRs changed: review ADDRESSES');

const ipv4Arb: fc.Arbitrary<string> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(POD_A.ip, POD_B.ip) },
  { weight: 6, arbitrary: fc.constantFrom(...ADDRESSES) },
  { weight: 1, arbitrary: fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((b) => b.join('.')) },
);

export const PORTS = [80, 443, 53, 22, 8079, 8080, 8083, 8087, 8088, 9000, 40000, 30001, 5353, 1000, 0, 65535];
const portArb: fc.Arbitrary<number> = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...PORTS) }, { weight: 1, arbitrary: fc.nat(65535) });
const ttlArb = fc.oneof({ weight: 6, arbitrary: fc.constant(64) }, { weight: 1, arbitrary: fc.constantFrom(0, 1, 2, 255) });
const payloadArb = fc.oneof({ weight: 3, arbitrary: fc.constant(Buffer.alloc(0)) }, { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)) });
const tcpFlagsArb = fc.oneof({ weight: 3, arbitrary: fc.constantFrom(0x02, 0x12, 0x10, 0x11, 0x04, 0x14, 0x18) }, { weight: 1, arbitrary: fc.nat(255) });

interface L3 {
  src: string;
  dst: string;
  ttl: number;
  id: number;
  options: boolean;
}
/** Source and destination: mostly pairs the fixture policy has something to say about, else any two. */
const POD_SIDE_PAIRS: Array<[string, string]> = [
  [POD_A.ip, POD_B.ip],
  [POD_B.ip, POD_A.ip],
  [POD_A.ip, WORLD_IP],
  [POD_A.ip, REMOTE_POD_IP],
  [POD_A.ip, NODE_IP],
  [POD_A.ip, ROUTER.ip],
  [POD_A.ip, '203.0.113.200'],
  [POD_A.ip, POD_A.ip],
  [POD_B.ip, POD_C.ip],
  [POD_C.ip, POD_A.ip],
];
const STACK_SIDE_PAIRS: Array<[string, string]> = [
  [NODE_IP, POD_A.ip],
  [WORLD_IP, POD_A.ip],
  [REMOTE_POD_IP, POD_B.ip],
  ['203.0.113.7', POD_B.ip],
  [POD_A.ip, POD_B.ip],
  [WORLD_IP, POD_C.ip],
  [NODE_IP, REMOTE_POD_IP],
  [NODE_IP, '10.200.0.99'],
];

/** Which programs the frames are for: what a pod sends (lxc ingress) or what the node's stack hands on. */
export type FuzzSide = 'pod' | 'stack';

const pairArb = (side: FuzzSide): fc.Arbitrary<[string, string]> =>
  fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...(side === 'pod' ? POD_SIDE_PAIRS : STACK_SIDE_PAIRS)) }, { weight: 1, arbitrary: fc.tuple(ipv4Arb, ipv4Arb) });

const l3Arb = (side: FuzzSide): fc.Arbitrary<L3> => fc.record({
  pair: pairArb(side),
  ttl: ttlArb,
  id: fc.oneof(fc.constantFrom(0x1234, 0x99), fc.nat(65535)),
  options: fc.boolean(),
}).map(({ pair, ...rest }) => ({ src: pair[0], dst: pair[1], ...rest }));

/** Frames from a pod carry its MACs; the programs do not look at them (only the rewrite does). */
const macs = { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac };

function frame(l3: L3, proto: number, payload: Buffer, extra: { moreFragments?: boolean; fragmentOffset?: number } = {}): Buffer {
  return ipv4Frame({
    ...macs,
    src: l3.src,
    dst: l3.dst,
    proto,
    payload,
    ttl: l3.ttl,
    id: l3.id,
    ...(l3.options ? { options: Buffer.from([1, 1, 1, 0]) } : {}),
    ...extra,
  });
}

const tcpArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc.record({ l3: l3Arb(side), sport: portArb, dport: portArb, flags: tcpFlagsArb, payload: payloadArb }).map(
  (p): FuzzFrame => ({ label: 'tcp', frame: frame(p.l3, IpProto.TCP, tcpSegment({ src: p.l3.src, dst: p.l3.dst, sport: p.sport, dport: p.dport, flags: p.flags, payload: p.payload })) }),
);
const udpArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc.record({ l3: l3Arb(side), sport: portArb, dport: portArb, payload: payloadArb }).map(
  (p): FuzzFrame => ({ label: 'udp', frame: frame(p.l3, IpProto.UDP, udpDatagram({ src: p.l3.src, dst: p.l3.dst, sport: p.sport, dport: p.dport, payload: p.payload })) }),
);
const echoArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc.record({ l3: l3Arb(side), id: fc.oneof(fc.constant(7), fc.nat(65535)), reply: fc.boolean() }).map(
  (p): FuzzFrame => ({ label: p.reply ? 'icmp-echo-reply' : 'icmp-echo', frame: frame(p.l3, IpProto.ICMP, icmpEcho({ id: p.id, reply: p.reply })) }),
);
const otherProtoArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc.record({ l3: l3Arb(side), proto: fc.constantFrom(IpProto.SCTP, IpProto.GRE, 0, 4, 41, 50, 255), payload: fc.uint8Array({ minLength: 0, maxLength: 40 }) }).map(
  (p): FuzzFrame => ({ label: `proto-${p.proto}`, frame: frame(p.l3, p.proto, Buffer.from(p.payload)) }),
);

/** The datagram an ICMP error is about: a seeded flow (either orientation), or any. */
const offendingArb: fc.Arbitrary<Buffer> = fc.oneof(
  fc.record({ flow: fc.constantFrom(...SEED_FLOWS, EXPIRED_FLOW), reversed: fc.boolean() }).map(({ flow, reversed }) => {
    const f = reversed ? { saddr: flow.daddr, daddr: flow.saddr, sport: flow.dport, dport: flow.sport, proto: flow.proto } : flow;
    return offending(f.saddr, f.daddr, f.proto, f.sport, f.dport);
  }),
  fc.record({ s: ipv4Arb, d: ipv4Arb, proto: fc.constantFrom(IpProto.TCP, IpProto.UDP, IpProto.ICMP, IpProto.GRE), sp: portArb, dp: portArb }).map((x) => offending(x.s, x.d, x.proto, x.sp, x.dp)),
);

function offending(src: string, dst: string, proto: number, sport: number, dport: number): Buffer {
  const payload =
    proto === IpProto.TCP
      ? tcpSegment({ src, dst, sport, dport })
      : proto === IpProto.UDP
        ? udpDatagram({ src, dst, sport, dport })
        : proto === IpProto.ICMP
          ? icmpEcho({ id: sport })
          : Buffer.alloc(8);
  return ipv4Datagram({ src, dst, proto, payload });
}

const icmpErrorArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc
  .record({ l3: l3Arb(side), type: fc.constantFrom(3, 11, 12), code: fc.nat(15), inner: offendingArb, embed: fc.option(fc.nat(48), { nil: undefined }) })
  .map((p): FuzzFrame => ({ label: `icmp-error-${p.type}`, frame: frame(p.l3, IpProto.ICMP, icmpError(p.type, p.code, p.inner, p.embed)) }));

/** First fragments (MF, offset 0) and later ones (offset > 0) of UDP/TCP/ICMP datagrams. */
const fragmentArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc
  .record({ l3: l3Arb(side), proto: fc.constantFrom(IpProto.UDP, IpProto.TCP, IpProto.ICMP), sport: portArb, dport: portArb, later: fc.boolean(), offset: fc.integer({ min: 1, max: 64 }), more: fc.boolean() })
  .map((p): FuzzFrame => {
    if (p.later) return { label: 'fragment-later', frame: frame(p.l3, p.proto, Buffer.alloc(16, 0xab), { fragmentOffset: p.offset * 8, moreFragments: p.more }) };
    const whole =
      p.proto === IpProto.TCP
        ? tcpSegment({ src: p.l3.src, dst: p.l3.dst, sport: p.sport, dport: p.dport, payload: Buffer.alloc(16) })
        : p.proto === IpProto.UDP
          ? udpDatagram({ src: p.l3.src, dst: p.l3.dst, sport: p.sport, dport: p.dport, payload: Buffer.alloc(16) })
          : icmpEcho({ id: p.sport, payload: Buffer.alloc(16) });
    return { label: 'fragment-first', frame: frame(p.l3, p.proto, whole.subarray(0, 24), { moreFragments: true }) };
  });

const arpArb = fc
  .record({
    op: fc.oneof({ weight: 4, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.constantFrom(2, 0, 3, 0x100) }),
    sender: ipv4Arb,
    target: ipv4Arb,
    htype: fc.oneof({ weight: 6, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.nat(0xffff) }),
    hlen: fc.oneof({ weight: 6, arbitrary: fc.constant(6) }, { weight: 1, arbitrary: fc.nat(255) }),
    plen: fc.oneof({ weight: 6, arbitrary: fc.constant(4) }, { weight: 1, arbitrary: fc.nat(255) }),
    pad: fc.constantFrom(0, 18),
  })
  .map((p): FuzzFrame => {
    const f = arpFrame({ op: p.op, senderMac: POD_A.podMac, senderIp: p.sender, targetIp: p.target, htype: p.htype, hlen: p.hlen });
    f[14 + 5] = p.plen;
    return { label: 'arp', frame: Buffer.concat([f, Buffer.alloc(p.pad)]) };
  });

/**
 * ICMPv6 types a pod's device tells apart (neighbour discovery, MLD, router
 * advertisement and redirect, echo) and some it does not.
 */
const icmpv6TypeArb = fc.constantFrom(128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 143, 1, 3, 200);

/**
 * IPv6: ICMPv6 of every kind (neighbour solicitations with and without a
 * source link-layer option, the pod's MAC or another), straight or behind
 * extension headers (up to seven, one past the programs' bound, with AH and
 * fragment headers: a fragment header with an offset ends the walk), other
 * next headers; sources link-local, unspecified or forged, destinations
 * multicast or link-local; hop limits as ND wants them or not.
 */
const ipv6Arb = fc
  .record({
    chain: fc.array(fc.constantFrom(0, 43, 44, 51, 60), { maxLength: 7 }),
    fragOffset: fc.constantFrom(0, 0, 8),
    last: fc.constantFrom(IpProto.ICMPV6, IpProto.ICMPV6, IpProto.UDP, IpProto.TCP, 59),
    type: icmpv6TypeArb,
    body: fc.uint8Array({ maxLength: 24 }),
    src: fc.constantFrom('fe80::1', 'fe80::1', '::', 'fd00::99'),
    dst: fc.constantFrom('ff02::1:ff00:1', 'fe80::2'),
    hopLimit: fc.constantFrom(255, 64),
    ns: fc.constantFrom<'none' | 'plain' | 'lladdr' | 'other-lladdr'>('none', 'plain', 'lladdr', 'other-lladdr'),
  })
  .map((p): FuzzFrame => {
    const headers: Buffer[] = [];
    const nexts = [...p.chain.slice(1), p.last];
    for (const [i, n] of nexts.slice(0, p.chain.length).entries()) {
      const h = Buffer.from([n, 0, 0, 0, 0, 0, 0, 0]);
      if (p.chain[i] === 44) h.writeUInt16BE(p.fragOffset | 1, 2);
      if (p.chain[i] === 51) h[1] = 0; // AH: (0 + 2) * 4 = 8 bytes
      headers.push(h);
    }
    const first = p.chain.length > 0 ? p.chain[0]! : p.last;
    let icmp = Buffer.concat([Buffer.from([p.type, 0, 0, 0]), Buffer.from(p.body)]);
    if (p.ns !== 'none') {
      const target = Buffer.from('fd000000000000000000000000000001', 'hex');
      const opt = p.ns === 'plain' ? Buffer.alloc(0) : Buffer.concat([Buffer.from([1, 1]), Buffer.from((p.ns === 'lladdr' ? POD_A.podMac : '0a:00:00:00:ee:ee').replace(/:/g, ''), 'hex')]);
      icmp = Buffer.concat([Buffer.from([135, 0, 0, 0, 0, 0, 0, 0]), target, opt]);
    }
    const payload = Buffer.concat([...headers, icmp]);
    return { label: `ipv6-${[...p.chain, p.last].join('-')}-t${p.ns === 'none' ? p.type : `ns-${p.ns}`}`, frame: ipv6Frame({ ...macs, src: p.src, dst: p.dst, hopLimit: p.hopLimit, nextHeader: first, payload }) };
  });

/** A bare IPv6 header (payload length, next header, hop limit 64) and what follows it. */
function ipv6Packet(src: string, dst: string, nextHeader: number, payload: Buffer): Buffer {
  return datagramOf(ipv6Frame({ src, dst, nextHeader, payload }));
}

/**
 * ICMPv6 errors (destination unreachable, packet too big, time exceeded,
 * parameter problem) whose embedded datagram names a tracked flow as it was
 * sent, reversed, with a forged port or address, or a flow that never was;
 * sent to the flow's sender or to someone else; the embedded datagram cut
 * short. Related only when it goes back to the sender of a tracked flow:
 * any other must meet policy, never pass as the flow's.
 */
const icmp6ErrorArb = fc
  .record({
    seed: fc.constantFrom(...SEED_FLOWS6),
    claim: fc.constantFrom<'as-sent' | 'reversed' | 'forged-port' | 'forged-address' | 'never'>('as-sent', 'reversed', 'forged-port', 'forged-address', 'never'),
    to: fc.constantFrom<'sender' | 'other'>('sender', 'sender', 'other'),
    type: fc.constantFrom(1, 2, 3, 4),
    cut: fc.constantFrom(0, 0, 0, 4, 30),
    outerPeer: fc.constantFrom('fe80::2', 'fe80::9', 'fd00::99'),
  })
  .map((p): FuzzFrame => {
    let { saddr, daddr, sport, dport } = p.seed;
    const proto = p.seed.proto;
    if (p.claim === 'reversed') [saddr, daddr, sport, dport] = [daddr, saddr, dport, sport];
    if (p.claim === 'forged-port') sport = (sport + 1) & 0xffff;
    if (p.claim === 'forged-address') daddr = 'fe80::7';
    if (p.claim === 'never') [saddr, daddr, sport, dport] = ['fe80::1', 'fe80::5', 4444, 4445];
    const l4 = proto === IpProto.TCP ? tcpSegment({ src: '10.0.0.1', dst: '10.0.0.2', sport, dport }) : udpDatagram({ src: '10.0.0.1', dst: '10.0.0.2', sport, dport });
    let inner = ipv6Packet(saddr, daddr, proto, l4.subarray(0, 8));
    if (p.cut > 0) inner = inner.subarray(0, inner.length - p.cut);
    // The error goes to the embedded datagram's sender (whoever sent it is the peer), or elsewhere.
    const dst = p.to === 'sender' ? saddr : saddr === 'fe80::1' ? 'fe80::2' : 'fe80::1';
    const src = p.outerPeer === dst ? 'fe80::3' : p.outerPeer;
    const icmp = Buffer.concat([Buffer.from([p.type, 0, 0, 0, 0, 0, 0, 0]), inner]);
    return { label: `icmp6-error-t${p.type}-${p.claim}-to-${p.to}${p.cut ? `-cut${p.cut}` : ''}`, frame: ipv6Frame({ ...macs, src, dst, hopLimit: 64, nextHeader: IpProto.ICMPV6, payload: icmp }) };
  });

/**
 * Neighbour advertisements and solicitations a pod may forge: the target its
 * own link-local address, another pod's or the router's; a target or source
 * link-layer option with the pod's MAC, another MAC, or a malformed one; from
 * the pod's link-local address, the unspecified address or a forged global
 * one; solicited, override or router flags set.
 */
const ndSpoofArb = fc
  .record({
    type: fc.constantFrom(135, 136, 136),
    target: fc.constantFrom('fe80::1', 'fd00::2', 'fd00::1', 'fe80::2'),
    option: fc.constantFrom<'none' | 'own' | 'other' | 'bad-length' | 'other-type'>('none', 'own', 'other', 'other', 'bad-length', 'other-type'),
    src: fc.constantFrom('fe80::1', 'fe80::1', '::', 'fd00::2'),
    dst: fc.constantFrom('ff02::1', 'fe80::2', 'ff02::1:ff00:1'),
    flags: fc.constantFrom(0, 0x20, 0x40, 0x60, 0x80, 0xe0),
    hopLimit: fc.constantFrom(255, 255, 64),
  })
  .map((p): FuzzFrame => {
    const optType = p.option === 'other-type' ? (p.type === 136 ? 1 : 2) : p.type === 136 ? 2 : 1;
    const mac = p.option === 'own' ? POD_A.podMac : '0a:00:00:00:ee:ee';
    const opt = p.option === 'none' ? Buffer.alloc(0) : Buffer.concat([Buffer.from([optType, p.option === 'bad-length' ? 2 : 1]), Buffer.from(mac.replace(/:/g, ''), 'hex')]);
    const head = Buffer.from([p.type, 0, 0, 0, p.type === 136 ? p.flags : 0, 0, 0, 0]);
    const icmp = Buffer.concat([head, ipv6Bytes(p.target), opt]);
    return { label: `nd-${p.type === 136 ? 'na' : 'ns'}-${p.target}-${p.option}-from-${p.src}`, frame: ipv6Frame({ ...macs, src: p.src, dst: p.dst, hopLimit: p.hopLimit, nextHeader: IpProto.ICMPV6, payload: icmp }) };
  });

/**
 * IPv6 fragments: first ones (offset 0, more to come) of UDP, TCP and ICMPv6
 * echo, and later ones of the recorded datagram (SEED_FRAGMENT6), of it with
 * another ID or reversed, or of a datagram never seen: a later fragment has
 * no ports of its own and takes them only from the record of its own first.
 */
const fragment6Arb = fc
  .record({
    later: fc.boolean(),
    proto: fc.constantFrom(IpProto.UDP, IpProto.TCP, IpProto.ICMPV6),
    id: fc.constantFrom(SEED_FRAGMENT6.id, SEED_FRAGMENT6.id, 0x78),
    reversed: fc.boolean(),
    offset: fc.constantFrom(1, 8, 100),
    more: fc.boolean(),
    dport: fc.constantFrom(80, 53, 8080, 22),
  })
  .map((p): FuzzFrame => {
    const [src, dst] = p.reversed ? [SEED_FRAGMENT6.daddr, SEED_FRAGMENT6.saddr] : [SEED_FRAGMENT6.saddr, SEED_FRAGMENT6.daddr];
    const proto = p.later ? SEED_FRAGMENT6.proto : p.proto;
    const fh = Buffer.alloc(8);
    fh[0] = proto;
    fh.writeUInt16BE(((p.later ? p.offset : 0) << 3) | (p.later && !p.more ? 0 : 1), 2);
    fh.writeUInt32BE(p.id, 4);
    const body = p.later
      ? Buffer.alloc(16, 0xab)
      : proto === IpProto.ICMPV6
        ? Buffer.concat([Buffer.from([128, 0, 0, 0, 0, 7, 0, 1]), Buffer.alloc(16)])
        : (proto === IpProto.TCP ? tcpSegment({ src: '10.0.0.1', dst: '10.0.0.2', sport: 1000, dport: p.dport }) : udpDatagram({ src: '10.0.0.1', dst: '10.0.0.2', sport: 1000, dport: p.dport })).subarray(0, 16);
    return { label: `fragment6-${p.later ? `later-id${p.id}${p.reversed ? '-reversed' : ''}` : `first-${proto}`}`, frame: ipv6Frame({ ...macs, src, dst, hopLimit: 64, nextHeader: 44, payload: Buffer.concat([fh, body]) }) };
  });

const randomArb: fc.Arbitrary<FuzzFrame> = fc.oneof(
  fc.uint8Array({ maxLength: 120 }).map((b) => ({ label: 'random', frame: Buffer.from(b) })),
  fc
    .record({ etherType: fc.constantFrom(EtherType.IPV4, EtherType.ARP, EtherType.IPV6, 0x8100, 0x88cc, 0), body: fc.uint8Array({ maxLength: 100 }) })
    .map((p) => ({ label: `random-after-${p.etherType.toString(16)}`, frame: ethernetFrame({ ...{ src: POD_A.podMac, dst: POD_A.lxcMac }, etherType: p.etherType, payload: Buffer.from(p.body) }) })),
);

export const wellFormedFrameArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc.oneof(
  { weight: 5, arbitrary: tcpArb(side) },
  { weight: 4, arbitrary: udpArb(side) },
  { weight: 2, arbitrary: echoArb(side) },
  { weight: 3, arbitrary: icmpErrorArb(side) },
  { weight: 1, arbitrary: otherProtoArb(side) },
  { weight: 2, arbitrary: fragmentArb(side) },
  { weight: 2, arbitrary: arpArb },
  { weight: 2, arbitrary: ipv6Arb },
  { weight: 2, arbitrary: icmp6ErrorArb },
  { weight: 1, arbitrary: ndSpoofArb },
  { weight: 1, arbitrary: fragment6Arb },
);

/** One change to a frame; `fix` recomputes the IPv4 header checksum afterwards (an inconsistent header that still verifies). */
export type Mutation =
  | { kind: 'flip'; at: number; bit: number }
  | { kind: 'truncate'; at: number }
  | { kind: 'byte'; at: number; value: number }
  | { kind: 'field'; field: 'ihl' | 'version' | 'totlen' | 'frag' | 'proto' | 'ttl' | 'tcpflags' | 'icmptype' | 'ethertype'; value: number; fix: boolean }
  | { kind: 'trailer'; bytes: Uint8Array };

export const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(200), bit: fc.nat(7) }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat(120) }),
  fc.record({ kind: fc.constant('byte' as const), at: fc.nat(100), value: fc.nat(255) }),
  fc.record({
    kind: fc.constant('field' as const),
    field: fc.constantFrom('ihl', 'version', 'totlen', 'frag', 'proto', 'ttl', 'tcpflags', 'icmptype', 'ethertype'),
    value: fc.nat(0xffff),
    fix: fc.boolean(),
  }),
  fc.record({ kind: fc.constant('trailer' as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 48 }) }),
);

function fixChecksum(f: Buffer): void {
  if (f.length < 34) return;
  const ihl = (f[14]! & 0x0f) * 4;
  if (ihl < 20 || 14 + ihl > f.length) return;
  f.writeUInt16BE(0, 24);
  f.writeUInt16BE(internetChecksum(f.subarray(14, 14 + ihl)), 24);
}

export function mutate(input: Buffer, m: Mutation): Buffer {
  const f = Buffer.from(input);
  const ihl = f.length > 14 ? (f[14]! & 0x0f) * 4 : 20;
  const setU8 = (at: number, v: number): void => {
    if (at < f.length) f[at] = v & 0xff;
  };
  switch (m.kind) {
    case 'flip':
      if (f.length > 0) f[m.at % f.length]! ^= 1 << m.bit;
      return f;
    case 'truncate':
      return f.subarray(0, Math.min(m.at, f.length));
    case 'byte':
      if (f.length > 0) f[m.at % f.length] = m.value & 0xff;
      return f;
    case 'trailer':
      return Buffer.concat([f, m.bytes]);
    case 'field': {
      const v = m.value;
      switch (m.field) {
        case 'ihl':
          setU8(14, (f[14] ?? 0x40) & 0xf0 | (v & 0x0f));
          break;
        case 'version':
          setU8(14, ((v & 0x0f) << 4) | ((f[14] ?? 0) & 0x0f));
          break;
        case 'totlen':
          if (f.length >= 18) f.writeUInt16BE(v % 3 === 0 ? v : Math.max(0, f.length - 14 + ((v % 9) - 4)) & 0xffff, 16);
          break;
        case 'frag':
          if (f.length >= 22) f.writeUInt16BE(v & 0xbfff, 20);
          break;
        case 'proto':
          setU8(23, v % 4 === 0 ? v : [1, 6, 17, 132][v % 4]!);
          break;
        case 'ttl':
          setU8(22, v % 3);
          break;
        case 'tcpflags':
          setU8(14 + ihl + 13, v);
          break;
        case 'icmptype':
          setU8(14 + ihl, v % 2 === 0 ? v : [0, 3, 8, 11, 12, 5][v % 6]!);
          break;
        case 'ethertype':
          if (f.length >= 14) f.writeUInt16BE(v % 2 === 0 ? v : [EtherType.IPV4, EtherType.ARP, EtherType.IPV6][v % 3]!, 12);
          break;
      }
      if (m.fix) fixChecksum(f);
      return f;
    }
  }
}

export const mutatedFrameArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc
  .record({ base: wellFormedFrameArb(side), mutations: fc.array(mutationArb, { minLength: 1, maxLength: 3 }) })
  .map(({ base, mutations }) => ({
    label: `${base.label}+${mutations.map((m) => (m.kind === 'field' ? `${m.field}${m.fix ? '!' : ''}` : m.kind)).join('+')}`,
    frame: mutations.reduce((f, m) => mutate(f, m), base.frame),
  }));

/** BPF_PROG_TEST_RUN refuses a sched_cls frame shorter than an Ethernet header (EINVAL); tc never sees one. */
export const MIN_FRAME = 14;

/** Every frame of the fuzz test: well-formed, mutated, random; MIN_FRAME bytes or more, never FUZZ_MAX_FRAME. */
export const fuzzFrameArb = (side: FuzzSide): fc.Arbitrary<FuzzFrame> => fc
  .oneof({ weight: 4, arbitrary: wellFormedFrameArb(side) }, { weight: 5, arbitrary: mutatedFrameArb(side) }, { weight: 1, arbitrary: randomArb })
  .map((f) => (f.frame.length >= FUZZ_MAX_FRAME ? { ...f, frame: f.frame.subarray(0, FUZZ_MAX_FRAME - 1) } : f))
  .map((f) => (f.frame.length < MIN_FRAME ? { label: `${f.label}+pad`, frame: Buffer.concat([f.frame, Buffer.alloc(MIN_FRAME - f.frame.length)]) } : f));

/**
 * Whether BPF_PROG_TEST_RUN runs the frame: it refuses (EINVAL) one shorter
 * than an Ethernet header, and an IPv4 or IPv6 ethertype whose frame cannot
 * hold the fixed IP header (the kernel sets up the skb's network header
 * first). A pod can still send such frames on its veth; the programs read
 * them through bpf_skb_load_bytes, whose failure they turn into drops.
 */
export function testRunAccepts(frame: Uint8Array): boolean {
  if (frame.length < MIN_FRAME) return false;
  const type = (frame[12]! << 8) | frame[13]!;
  if (type === EtherType.IPV4) return frame.length >= MIN_FRAME + 20;
  if (type === EtherType.IPV6) return frame.length >= MIN_FRAME + 40;
  return true;
}

/** Every truncation of a frame the kernel will run: the first `n` bytes for each n below its length. */
export function truncations(frame: Buffer): Buffer[] {
  return Array.from({ length: frame.length }, (_, n) => Buffer.from(frame.subarray(0, n))).filter(testRunAccepts);
}

export { datagramOf };
