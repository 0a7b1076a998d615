/**
 * How the datapath programs read a frame, in TypeScript, for the fuzz tests'
 * reference models (packetFuzz.test.ts, natFuzz.test.ts): the IPv4 header as
 * ipv4_load validates it, the ports (or ICMP identifier) and the tuple
 * inside an ICMP error as l4_load finds them, later fragments' ports from
 * the first fragment's record. Addresses are host-order numbers.
 */
import { DropReason } from '../constants.js';
import { IpProto } from './packets.js';

const reason = (r: keyof typeof DropReason): number => -DropReason[r].code;

export const ipNum = (ip: string): number => ip.split('.').reduce((a, b) => a * 256 + Number(b), 0);
export const numIp = (n: number): string => [24, 16, 8, 0].map((s) => (n >>> s) & 0xff).join('.');

/** A flow's tuple as the tests print it (conntrack and SNAT keys). */
export function tupleString(saddr: number, daddr: number, sport: number, dport: number, proto: number): string {
  return `${numIp(saddr)}:${sport}>${numIp(daddr)}:${dport}/${proto}`;
}

/** A validated IPv4 header; offsets from the start of the frame. */
export interface Ipv4 {
  saddr: number;
  daddr: number;
  proto: number;
  ttl: number;
  id: number;
  fragOff: number;
  l4Off: number;
  ipEnd: number;
  hlen: number;
}

/** ipv4_load: undefined where it answers DROP_INVALID_PACKET (the caller has checked the ethertype). */
export function parseIpv4(f: Buffer): Ipv4 | undefined {
  if (f.length < 14 + 20) return undefined;
  const vihl = f[14]!;
  const hlen = (vihl & 0x0f) * 4;
  const tot = f.readUInt16BE(16);
  if (vihl >> 4 !== 4 || hlen < 20 || tot < hlen || 14 + tot > f.length) return undefined;
  return { saddr: f.readUInt32BE(26), daddr: f.readUInt32BE(30), proto: f[23]!, ttl: f[22]!, id: f.readUInt16BE(18), fragOff: f.readUInt16BE(20), l4Off: 14 + hlen, ipEnd: 14 + tot, hlen };
}

export const isLaterFragment = (ip: Ipv4): boolean => (ip.fragOff & 0x1fff) !== 0;

/** The tuple inside an ICMP error; `off`: where its IP header starts. */
export interface InnerTuple {
  saddr: number;
  daddr: number;
  proto: number;
  sport: number;
  dport: number;
  off: number;
  /** Where its L4 header starts. */
  l4Off: number;
}

export interface L4 {
  sport: number;
  dport: number;
  /** An ICMP error: the tuple it is about, when the datagram carries enough of it. */
  icmpError: boolean;
  inner?: InnerTuple;
}

export const hasPorts = (p: number): boolean => p === IpProto.TCP || p === IpProto.UDP || p === IpProto.SCTP;
// l4_min_len is shared by both families: ICMPv6's 8 bytes hold in an IPv4 datagram claiming protocol 58 too.
const MIN_L4: Record<number, number> = { [IpProto.TCP]: 20, [IpProto.UDP]: 8, [IpProto.SCTP]: 12, [IpProto.ICMP]: 8, [IpProto.ICMPV6]: 8 };

/** Conntrack's ports for an ICMP echo: the identifier is a request's source port and a reply's destination port. */
export function echoPorts(type: number, id: number): { sport: number; dport: number } {
  return type === 8 ? { sport: id, dport: 0 } : { sport: 0, dport: id };
}

/** icmp_load_inner: the tuple inside an ICMP error, read within `end` (the error's datagram, never its trailer). */
export function parseInner(f: Buffer, off: number, end: number): InnerTuple | undefined {
  if (off + 20 > end) return undefined;
  const vihl = f[off]!;
  if (vihl >> 4 !== 4 || (vihl & 0x0f) < 5) return undefined;
  const l4 = off + (vihl & 0x0f) * 4;
  const proto = f[off + 9]!;
  const base = { saddr: f.readUInt32BE(off + 12), daddr: f.readUInt32BE(off + 16), proto, off, l4Off: l4 };
  if (hasPorts(proto)) return l4 + 4 > end ? undefined : { ...base, sport: f.readUInt16BE(l4), dport: f.readUInt16BE(l4 + 2) };
  if (proto === IpProto.ICMP) {
    if (l4 + 8 > end || (f[l4] !== 0 && f[l4] !== 8)) return undefined;
    return { ...base, ...echoPorts(f[l4]!, f.readUInt16BE(l4 + 4)) };
  }
  return { ...base, sport: 0, dport: 0 };
}

/** The key of a fragment record (tendril_frag4) as the tests print it. */
export const fragKeyString = (saddr: number, daddr: number, id: number, proto: number): string => `${saddr}|${daddr}|${id}|${proto}`;

/** l4_load: the ports, or the drop reason (positive code) it answers. */
export function parseL4(f: Buffer, ip: Ipv4, frags: Map<string, { sport: number; dport: number }>): L4 | number {
  if (isLaterFragment(ip)) {
    const rec = frags.get(fragKeyString(ip.saddr, ip.daddr, ip.id, ip.proto));
    return rec ? { sport: rec.sport, dport: rec.dport, icmpError: false } : reason('FRAG_NOT_FOUND');
  }
  const need = MIN_L4[ip.proto] ?? 0;
  if (need === 0) return { sport: 0, dport: 0, icmpError: false };
  if (ip.l4Off + need > ip.ipEnd) return reason('CT_INVALID_HEADER');
  if (ip.proto === IpProto.ICMP) {
    const type = f[ip.l4Off]!;
    if (type === 0 || type === 8) return { ...echoPorts(type, f.readUInt16BE(ip.l4Off + 4)), icmpError: false };
    if (type === 3 || type === 11 || type === 12) {
      const inner = parseInner(f, ip.l4Off + 8, ip.ipEnd);
      return { sport: 0, dport: 0, icmpError: true, ...(inner ? { inner } : {}) };
    }
    return { sport: 0, dport: 0, icmpError: false };
  }
  return { sport: f.readUInt16BE(ip.l4Off), dport: f.readUInt16BE(ip.l4Off + 2), icmpError: false };
}
