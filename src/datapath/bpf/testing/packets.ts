/**
 * Frames for the datapath programs' BPF_PROG_TEST_RUN tests: Ethernet, ARP,
 * IPv4 (options, fragments), IPv6, TCP, UDP, ICMP and ICMPv6 with correct
 * checksums, plus readers for what the programs rewrite. Addresses are
 * dotted quads (or IPv6 text), MACs colon hex. A test tool, not a packet
 * library: it builds what the tests need and checks its own arguments.
 */
import { ipToBytes, tryParseIp } from '../../../netip/index.js';
import { internetChecksum, ipv4Bytes, ipv4String } from '../../kernel/bpf/testing/packets.js';

export { internetChecksum, ipv4Bytes, ipv4String };

export const EtherType = { IPV4: 0x0800, ARP: 0x0806, IPV6: 0x86dd } as const;
export const IpProto = { ICMP: 1, TCP: 6, UDP: 17, ICMPV6: 58, SCTP: 132, GRE: 47 } as const;
export const TcpFlag = { FIN: 0x01, SYN: 0x02, RST: 0x04, PSH: 0x08, ACK: 0x10 } as const;
export const IcmpType = { ECHO_REPLY: 0, DEST_UNREACH: 3, ECHO: 8, TIME_EXCEEDED: 11, PARAMETER_PROBLEM: 12 } as const;

export const ETH_HLEN = 14;

export function macBytes(mac: string): Buffer {
  const parts = mac.split(':');
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) throw new RangeError(`${mac} is not a MAC address`);
  return Buffer.from(parts.map((p) => parseInt(p, 16)));
}

export function macString(b: Uint8Array): string {
  if (b.length !== 6) throw new RangeError(`a MAC has 6 bytes, not ${b.length}`);
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

export function ipv6Bytes(ip: string): Buffer {
  const a = tryParseIp(ip);
  if (a?.family !== 6) throw new RangeError(`${ip} is not an IPv6 address`);
  return Buffer.from(ipToBytes(a));
}

function u16(n: number, what: string): number {
  if (!Number.isInteger(n) || n < 0 || n > 0xffff) throw new RangeError(`${what} ${n} is not a 16-bit number`);
  return n;
}

export interface EthernetSpec {
  dst?: string;
  src?: string;
  etherType: number;
  payload: Uint8Array;
}

export const DEFAULT_SRC_MAC = '02:00:00:00:00:01';
export const DEFAULT_DST_MAC = '02:00:00:00:00:02';

export function ethernetFrame(spec: EthernetSpec): Buffer {
  const eth = Buffer.alloc(ETH_HLEN);
  macBytes(spec.dst ?? DEFAULT_DST_MAC).copy(eth, 0);
  macBytes(spec.src ?? DEFAULT_SRC_MAC).copy(eth, 6);
  eth.writeUInt16BE(u16(spec.etherType, 'ethertype'), 12);
  return Buffer.concat([eth, spec.payload]);
}

export interface ArpSpec {
  /** 1 request (default), 2 reply. */
  op?: number;
  senderMac: string;
  senderIp: string;
  targetMac?: string;
  targetIp: string;
  /** Ethernet destination; broadcast unless given. */
  ethDst?: string;
  /** Hardware type; 1 (Ethernet) unless given (a wrong one makes an invalid request). */
  htype?: number;
  /** Hardware address length; 6 unless given. */
  hlen?: number;
}

export const ARP_LEN = 28;

/** An Ethernet/IPv4 ARP frame (42 bytes: no padding to 60). */
export function arpFrame(spec: ArpSpec): Buffer {
  const a = Buffer.alloc(ARP_LEN);
  a.writeUInt16BE(spec.htype ?? 1, 0);
  a.writeUInt16BE(EtherType.IPV4, 2);
  a[4] = spec.hlen ?? 6;
  a[5] = 4;
  a.writeUInt16BE(spec.op ?? 1, 6);
  macBytes(spec.senderMac).copy(a, 8);
  ipv4Bytes(spec.senderIp).copy(a, 14);
  macBytes(spec.targetMac ?? '00:00:00:00:00:00').copy(a, 18);
  ipv4Bytes(spec.targetIp).copy(a, 24);
  return ethernetFrame({ dst: spec.ethDst ?? 'ff:ff:ff:ff:ff:ff', src: spec.senderMac, etherType: EtherType.ARP, payload: a });
}

export interface ArpFields {
  ethDst: string;
  ethSrc: string;
  op: number;
  senderMac: string;
  senderIp: string;
  targetMac: string;
  targetIp: string;
}

export function readArp(frame: Uint8Array): ArpFields {
  const b = Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength);
  if (b.length < ETH_HLEN + ARP_LEN || b.readUInt16BE(12) !== EtherType.ARP) throw new RangeError('not an ARP frame');
  const a = ETH_HLEN;
  return {
    ethDst: macString(b.subarray(0, 6)),
    ethSrc: macString(b.subarray(6, 12)),
    op: b.readUInt16BE(a + 6),
    senderMac: macString(b.subarray(a + 8, a + 14)),
    senderIp: ipv4String(b.subarray(a + 14, a + 18)),
    targetMac: macString(b.subarray(a + 18, a + 24)),
    targetIp: ipv4String(b.subarray(a + 24, a + 28)),
  };
}

/** The one's-complement sum of an IPv4 pseudo header, folded into the L4 checksum. */
function pseudoHeader4(src: string, dst: string, proto: number, length: number): Buffer {
  const p = Buffer.alloc(12);
  ipv4Bytes(src).copy(p, 0);
  ipv4Bytes(dst).copy(p, 4);
  p[9] = proto;
  p.writeUInt16BE(length, 10);
  return p;
}

export function pseudoHeader6(src: string, dst: string, proto: number, length: number): Buffer {
  const p = Buffer.alloc(40);
  ipv6Bytes(src).copy(p, 0);
  ipv6Bytes(dst).copy(p, 16);
  p.writeUInt32BE(length, 32);
  p[39] = proto;
  return p;
}

/** The pseudo header of the addresses' family (an IPv6 address has a colon). */
function pseudoHeaderOf(src: string, dst: string, proto: number, length: number): Buffer {
  return src.includes(':') ? pseudoHeader6(src, dst, proto, length) : pseudoHeader4(src, dst, proto, length);
}

export interface TcpSpec {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  /** TcpFlag bits; SYN unless given. */
  flags?: number;
  seq?: number;
  ack?: number;
  payload?: Uint8Array;
}

/** A TCP segment (20-byte header) with its checksum over the IPv4 pseudo header. */
export function tcpSegment(spec: TcpSpec): Buffer {
  const h = Buffer.alloc(20);
  h.writeUInt16BE(u16(spec.sport, 'source port'), 0);
  h.writeUInt16BE(u16(spec.dport, 'destination port'), 2);
  h.writeUInt32BE(spec.seq ?? 1000, 4);
  h.writeUInt32BE(spec.ack ?? 0, 8);
  h[12] = 5 << 4;
  h[13] = spec.flags ?? TcpFlag.SYN;
  h.writeUInt16BE(64240, 14);
  const seg = Buffer.concat([h, spec.payload ?? Buffer.alloc(0)]);
  seg.writeUInt16BE(internetChecksum(Buffer.concat([pseudoHeaderOf(spec.src, spec.dst, IpProto.TCP, seg.length), seg])), 16);
  return seg;
}

export interface UdpSpec {
  src: string;
  dst: string;
  sport: number;
  dport: number;
  payload?: Uint8Array;
}

export function udpDatagram(spec: UdpSpec): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(u16(spec.sport, 'source port'), 0);
  h.writeUInt16BE(u16(spec.dport, 'destination port'), 2);
  const d = Buffer.concat([h, spec.payload ?? Buffer.alloc(0)]);
  d.writeUInt16BE(d.length, 4);
  const sum = internetChecksum(Buffer.concat([pseudoHeaderOf(spec.src, spec.dst, IpProto.UDP, d.length), d]));
  d.writeUInt16BE(sum === 0 ? 0xffff : sum, 6);
  return d;
}

export interface IcmpEchoSpec {
  /** An echo reply instead of a request. */
  reply?: boolean;
  id: number;
  seq?: number;
  payload?: Uint8Array;
}

export function icmpEcho(spec: IcmpEchoSpec): Buffer {
  const h = Buffer.alloc(8);
  h[0] = spec.reply ? IcmpType.ECHO_REPLY : IcmpType.ECHO;
  h.writeUInt16BE(u16(spec.id, 'identifier'), 4);
  h.writeUInt16BE(spec.seq ?? 1, 6);
  const m = Buffer.concat([h, spec.payload ?? Buffer.alloc(0)]);
  m.writeUInt16BE(internetChecksum(m), 2);
  return m;
}

/**
 * An ICMP error about `offending` (an IPv4 datagram, header first): its
 * header and the first 8 bytes after it, as routers send (RFC 792).
 * `embed` overrides how many bytes of the datagram are carried.
 */
export function icmpError(type: number, code: number, offending: Uint8Array, embed?: number): Buffer {
  const ihl = (offending[0]! & 0x0f) * 4;
  const body = Buffer.from(offending.subarray(0, Math.min(offending.length, embed ?? ihl + 8)));
  const h = Buffer.alloc(8);
  h[0] = type;
  h[1] = code;
  const m = Buffer.concat([h, body]);
  m.writeUInt16BE(internetChecksum(m), 2);
  return m;
}

export interface Ipv4Spec {
  src: string;
  dst: string;
  proto: number;
  payload: Uint8Array;
  ttl?: number;
  id?: number;
  dontFragment?: boolean;
  moreFragments?: boolean;
  /** Byte offset of this fragment's payload (a multiple of 8). */
  fragmentOffset?: number;
  /** Option bytes (padded to a multiple of 4 with zeros). */
  options?: Uint8Array;
  /** Overrides the header's total length field (to build inconsistent datagrams). */
  totalLength?: number;
  /** Overrides the IHL nibble. */
  ihl?: number;
  /** Overrides the version nibble. */
  version?: number;
}

export function ipv4Datagram(spec: Ipv4Spec): Buffer {
  const opts = Buffer.alloc(Math.ceil((spec.options?.length ?? 0) / 4) * 4);
  if (spec.options) Buffer.from(spec.options).copy(opts);
  const hlen = 20 + opts.length;
  const h = Buffer.alloc(hlen);
  h[0] = ((spec.version ?? 4) << 4) | (spec.ihl ?? hlen / 4);
  h.writeUInt16BE(u16(spec.totalLength ?? hlen + spec.payload.length, 'total length'), 2);
  h.writeUInt16BE(u16(spec.id ?? 0x1234, 'identification'), 4);
  const offset = spec.fragmentOffset ?? 0;
  if (offset % 8 !== 0 || offset / 8 > 0x1fff) throw new RangeError(`fragment offset ${offset} is not a multiple of 8 below 65536`);
  h.writeUInt16BE((spec.dontFragment ? 0x4000 : 0) | (spec.moreFragments ? 0x2000 : 0) | (offset / 8), 6);
  h[8] = spec.ttl ?? 64;
  h[9] = spec.proto;
  ipv4Bytes(spec.src).copy(h, 12);
  ipv4Bytes(spec.dst).copy(h, 16);
  opts.copy(h, 20);
  h.writeUInt16BE(internetChecksum(h), 10);
  return Buffer.concat([h, spec.payload]);
}

export interface FrameMacs {
  srcMac?: string;
  dstMac?: string;
}

export function ipv4Frame(spec: Ipv4Spec & FrameMacs): Buffer {
  return ethernetFrame({
    ...(spec.dstMac !== undefined ? { dst: spec.dstMac } : {}),
    ...(spec.srcMac !== undefined ? { src: spec.srcMac } : {}),
    etherType: EtherType.IPV4,
    payload: ipv4Datagram(spec),
  });
}

type L3Options = Omit<Ipv4Spec, 'src' | 'dst' | 'proto' | 'payload'> & FrameMacs;

/** An IPv6 frame for a transport payload when the addresses are IPv6 (the IPv4 options other than the TTL do not apply). */
function ipv6FrameOf(spec: { src: string; dst: string; ttl?: number } & FrameMacs, nextHeader: number, payload: Buffer): Buffer {
  return ipv6Frame({ ...spec, nextHeader, payload, ...(spec.ttl !== undefined ? { hopLimit: spec.ttl } : {}) });
}

export function tcpFrame(spec: TcpSpec & L3Options): Buffer {
  if (spec.src.includes(':')) return ipv6FrameOf(spec, IpProto.TCP, tcpSegment(spec));
  return ipv4Frame({ ...spec, proto: IpProto.TCP, payload: tcpSegment(spec) });
}

export function udpFrame(spec: UdpSpec & L3Options): Buffer {
  if (spec.src.includes(':')) return ipv6FrameOf(spec, IpProto.UDP, udpDatagram(spec));
  return ipv4Frame({ ...spec, proto: IpProto.UDP, payload: udpDatagram(spec) });
}

export function icmpEchoFrame(spec: IcmpEchoSpec & { src: string; dst: string } & L3Options): Buffer {
  return ipv4Frame({ ...spec, proto: IpProto.ICMP, payload: icmpEcho(spec) });
}

/** The frame's IPv4 datagram (everything after the Ethernet header). */
export function datagramOf(frame: Uint8Array): Buffer {
  return Buffer.from(frame.subarray(ETH_HLEN));
}

/**
 * Splits an IPv4 frame's payload into fragments of at most `size` bytes
 * (a multiple of 8), each a frame with the original's header, id and MACs.
 */
export function fragmentFrame(spec: Ipv4Spec & FrameMacs, size: number): Buffer[] {
  if (size <= 0 || size % 8 !== 0) throw new RangeError(`fragment size ${size} is not a positive multiple of 8`);
  const out: Buffer[] = [];
  for (let off = 0; off < spec.payload.length; off += size) {
    const part = spec.payload.subarray(off, off + size);
    out.push(ipv4Frame({ ...spec, payload: part, fragmentOffset: off, moreFragments: off + size < spec.payload.length, dontFragment: false }));
  }
  return out;
}

/** The first `length` bytes of a frame (a header cut short), as a copy. */
export function truncate(frame: Uint8Array, length: number): Buffer {
  return Buffer.from(frame.subarray(0, length));
}

export interface Ipv6Spec extends FrameMacs {
  src: string;
  dst: string;
  nextHeader: number;
  payload: Uint8Array;
  hopLimit?: number;
}

export function ipv6Frame(spec: Ipv6Spec): Buffer {
  const h = Buffer.alloc(40);
  h.writeUInt32BE(0x60000000, 0);
  h.writeUInt16BE(u16(spec.payload.length, 'payload length'), 4);
  h[6] = spec.nextHeader;
  h[7] = spec.hopLimit ?? 64;
  ipv6Bytes(spec.src).copy(h, 8);
  ipv6Bytes(spec.dst).copy(h, 24);
  return ethernetFrame({
    ...(spec.dstMac !== undefined ? { dst: spec.dstMac } : {}),
    ...(spec.srcMac !== undefined ? { src: spec.srcMac } : {}),
    etherType: EtherType.IPV6,
    payload: Buffer.concat([h, spec.payload]),
  });
}

/** An ICMPv6 neighbour solicitation for `target`, with its checksum. */
export function icmpv6NeighborSolicitation(src: string, dst: string, target: string): Buffer {
  const m = Buffer.alloc(24);
  m[0] = 135;
  ipv6Bytes(target).copy(m, 8);
  m.writeUInt16BE(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, IpProto.ICMPV6, m.length), m])), 2);
  return m;
}

/** ICMPv6 types the pod programs tell apart (RFC 4443, 4861, 2710, 3810). */
export const Icmp6Type = {
  ECHO_REQUEST: 128,
  ECHO_REPLY: 129,
  MLD_QUERY: 130,
  MLD_REPORT: 131,
  MLD_DONE: 132,
  ROUTER_SOLICIT: 133,
  ROUTER_ADVERT: 134,
  NEIGH_SOLICIT: 135,
  NEIGH_ADVERT: 136,
  REDIRECT: 137,
  MLD2_REPORT: 143,
} as const;

/** An ICMPv6 message of any type (code 0): the 4-byte header then `body`, with its checksum. */
export function icmpv6Message(src: string, dst: string, type: number, body: Uint8Array = Buffer.alloc(4)): Buffer {
  const m = Buffer.concat([Buffer.from([type, 0, 0, 0]), body]);
  m.writeUInt16BE(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, IpProto.ICMPV6, m.length), m])), 2);
  return m;
}

export interface Ipv4Fields {
  ethDst: string;
  ethSrc: string;
  ttl: number;
  proto: number;
  src: string;
  dst: string;
  /** The header checksum verifies (sums to zero). */
  checksumValid: boolean;
}

export function readIpv4(frame: Uint8Array): Ipv4Fields {
  const b = Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength);
  if (b.length < ETH_HLEN + 20 || b.readUInt16BE(12) !== EtherType.IPV4) throw new RangeError('not an IPv4 frame');
  const ihl = (b[ETH_HLEN]! & 0x0f) * 4;
  const header = b.subarray(ETH_HLEN, ETH_HLEN + ihl);
  return {
    ethDst: macString(b.subarray(0, 6)),
    ethSrc: macString(b.subarray(6, 12)),
    ttl: header[8]!,
    proto: header[9]!,
    src: ipv4String(header.subarray(12, 16)),
    dst: ipv4String(header.subarray(16, 20)),
    checksumValid: internetChecksum(header) === 0,
  };
}

export interface TransportFields {
  proto: number;
  /** TCP/UDP ports; ICMP: 0. */
  sport: number;
  dport: number;
  /** ICMP type and echo identifier (0 for other ICMP and other protocols). */
  icmpType: number;
  icmpId: number;
  /** The L4 checksum verifies over the whole datagram (pseudo header for TCP/UDP; UDP's 0 = none counts as valid). */
  checksumValid: boolean;
}

/** The L4 header of an unfragmented IPv4 frame (TCP, UDP or ICMP), with its checksum checked. */
export function readTransport(frame: Uint8Array): TransportFields {
  const b = Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength);
  if (b.length < ETH_HLEN + 20 || b.readUInt16BE(12) !== EtherType.IPV4) throw new RangeError('not an IPv4 frame');
  const ip = b.subarray(ETH_HLEN, ETH_HLEN + b.readUInt16BE(ETH_HLEN + 2));
  const ihl = (ip[0]! & 0x0f) * 4;
  const proto = ip[9]!;
  const l4 = ip.subarray(ihl);
  const src = ipv4String(ip.subarray(12, 16));
  const dst = ipv4String(ip.subarray(16, 20));
  if (proto === IpProto.ICMP) {
    const type = l4[0]!;
    const echo = type === IcmpType.ECHO || type === IcmpType.ECHO_REPLY;
    return { proto, sport: 0, dport: 0, icmpType: type, icmpId: echo ? l4.readUInt16BE(4) : 0, checksumValid: internetChecksum(l4) === 0 };
  }
  if (proto !== IpProto.TCP && proto !== IpProto.UDP) throw new RangeError(`protocol ${proto} is not TCP, UDP or ICMP`);
  const noChecksum = proto === IpProto.UDP && l4.readUInt16BE(6) === 0;
  const valid = noChecksum || internetChecksum(Buffer.concat([pseudoHeader4(src, dst, proto, l4.length), l4])) === 0;
  return { proto, sport: l4.readUInt16BE(0), dport: l4.readUInt16BE(2), icmpType: 0, icmpId: 0, checksumValid: valid };
}
