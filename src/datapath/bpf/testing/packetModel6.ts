/**
 * How the pod programs read an IPv6 frame, in TypeScript, for the fuzz
 * tests' reference model (packetFuzz.test.ts): the header and its extension
 * headers as ipv6_load walks them, the ports (or ICMPv6 identifier) and the
 * tuple inside an ICMPv6 error as l4_load6 finds them, later fragments'
 * ports from the first fragment's record (tendril_frag6). Addresses are
 * strings as formatIp writes them.
 */
import { formatIp, ipFromBytes } from '../../../netip/index.js';
import { DropReason, IPV6_MAX_EXT_HEADERS } from '../constants.js';
import { hasPorts, type L4 } from './packetModel.js';
import { IpProto } from './packets.js';

const reason = (r: keyof typeof DropReason): number => -DropReason[r].code;

/** Hop-by-hop, routing, fragment, AH, destination options. */
const EXT_HEADERS = new Set([0, 43, 44, 51, 60]);
const MIN_L4: Record<number, number> = { [IpProto.TCP]: 20, [IpProto.UDP]: 8, [IpProto.SCTP]: 12, [IpProto.ICMP]: 8, [IpProto.ICMPV6]: 8 };

export interface Ipv6 {
  saddr: string;
  daddr: string;
  /** The raw addresses, for the scope checks. */
  src: Buffer;
  dst: Buffer;
  proto: number;
  hopLimit: number;
  l4Off: number;
  ipEnd: number;
  /** The fragment header's offset (bytes), M flag and identification, when there is one. */
  frag?: { offset: number; more: boolean; id: number };
}

const addr = (b: Buffer): string => formatIp(ipFromBytes(b, 6));

/** ipv6_load: the validated header, or the drop reason (positive code) it answers. */
export function parseIpv6(f: Buffer): Ipv6 | number {
  if (f.length < 14 + 40 || f[14]! >> 4 !== 6) return reason('INVALID_PACKET');
  const ipEnd = 14 + 40 + f.readUInt16BE(18);
  if (ipEnd > f.length) return reason('INVALID_PACKET');
  const src = Buffer.from(f.subarray(22, 38));
  const dst = Buffer.from(f.subarray(38, 54));
  const base = { saddr: addr(src), daddr: addr(dst), src, dst, hopLimit: f[21]!, ipEnd };
  let next = f[20]!;
  let off = 14 + 40;
  let frag: Ipv6['frag'];
  for (let i = 0; i < IPV6_MAX_EXT_HEADERS && EXT_HEADERS.has(next); i++) {
    if (off + 8 > ipEnd) return reason('INVALID_PACKET');
    if (next === 44) {
      const fo = f.readUInt16BE(off + 2);
      frag = { offset: fo & 0xfff8, more: (fo & 1) !== 0, id: f.readUInt32BE(off + 4) };
      next = f[off]!;
      off += 8;
      if (frag.offset !== 0) return { ...base, proto: next, l4Off: off, frag };
      continue;
    }
    const len = next === 51 ? (f[off + 1]! + 2) * 4 : (f[off + 1]! + 1) * 8;
    if (off + len > ipEnd) return reason('INVALID_PACKET');
    next = f[off]!;
    off += len;
  }
  if (EXT_HEADERS.has(next)) return reason('INVALID_EXTHDR');
  return { ...base, proto: next, l4Off: off, ...(frag ? { frag } : {}) };
}

export const isLaterFragment6 = (ip: Ipv6): boolean => (ip.frag?.offset ?? 0) !== 0;
export const isLinkLocal6 = (b: Buffer): boolean => b[0] === 0xfe && (b[1]! & 0xc0) === 0x80;
export const isMulticast6 = (b: Buffer): boolean => b[0] === 0xff;
export const isUnspecified6 = (b: Buffer): boolean => b.every((x) => x === 0);

/** An IPv6 flow's tuple as the tests print it (tendril_ct6_* keys). */
export const tuple6String = (saddr: string, daddr: string, sport: number, dport: number, proto: number): string => `[${saddr}]:${sport}>[${daddr}]:${dport}/${proto}`;

/** The key of a fragment record (tendril_frag6) as the tests print it. */
export const frag6KeyString = (saddr: string, daddr: string, id: number, proto: number): string => `[${saddr}]|[${daddr}]|${id}|${proto}`;

/** The tuple inside an ICMPv6 error (addresses as strings). */
export interface InnerTuple6 {
  saddr: string;
  daddr: string;
  proto: number;
  sport: number;
  dport: number;
}

export interface L4v6 extends Omit<L4, 'inner'> {
  inner?: InnerTuple6;
}

const echoPorts6 = (type: number, id: number) => (type === 128 ? { sport: id, dport: 0 } : { sport: 0, dport: id });

/** icmp6_load_inner: the tuple inside an ICMPv6 error, read within `end`. */
export function parseInner6(f: Buffer, off: number, end: number): InnerTuple6 | undefined {
  if (off + 40 > end || f[off]! >> 4 !== 6) return undefined;
  const proto = f[off + 6]!;
  const l4 = off + 40;
  const base = { saddr: addr(f.subarray(off + 8, off + 24)), daddr: addr(f.subarray(off + 24, off + 40)), proto };
  if (hasPorts(proto)) return l4 + 4 > end ? undefined : { ...base, sport: f.readUInt16BE(l4), dport: f.readUInt16BE(l4 + 2) };
  if (proto === IpProto.ICMPV6) {
    if (l4 + 8 > end || (f[l4] !== 128 && f[l4] !== 129)) return undefined;
    return { ...base, ...echoPorts6(f[l4]!, f.readUInt16BE(l4 + 4)) };
  }
  if (EXT_HEADERS.has(proto)) return undefined;
  return { ...base, sport: 0, dport: 0 };
}

/** l4_load6: the ports, or the drop reason (positive code) it answers. */
export function parseL4v6(f: Buffer, ip: Ipv6, frags: Map<string, { sport: number; dport: number }>): L4v6 | number {
  if (isLaterFragment6(ip)) {
    const rec = frags.get(frag6KeyString(ip.saddr, ip.daddr, ip.frag!.id, ip.proto));
    return rec ? { sport: rec.sport, dport: rec.dport, icmpError: false } : reason('FRAG_NOT_FOUND');
  }
  const need = MIN_L4[ip.proto] ?? 0;
  if (need === 0) return { sport: 0, dport: 0, icmpError: false };
  if (ip.l4Off + need > ip.ipEnd) return reason('CT_INVALID_HEADER');
  if (ip.proto === IpProto.ICMPV6) {
    const type = f[ip.l4Off]!;
    if (type === 128 || type === 129) return { ...echoPorts6(type, f.readUInt16BE(ip.l4Off + 4)), icmpError: false };
    if (type >= 1 && type <= 4) {
      const inner = parseInner6(f, ip.l4Off + 8, ip.ipEnd);
      return { sport: 0, dport: 0, icmpError: true, ...(inner ? { inner } : {}) };
    }
    return { sport: 0, dport: 0, icmpError: false };
  }
  if (ip.proto === IpProto.ICMP) return { sport: 0, dport: 0, icmpError: false };
  return { sport: f.readUInt16BE(ip.l4Off), dport: f.readUInt16BE(ip.l4Off + 2), icmpError: false };
}
