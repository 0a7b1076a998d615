/**
 * Whether a frame a program rewrote is its input with the model's addresses
 * and ports written (outer header, and an ICMP error's embedded datagram)
 * and nothing else changed, every checksum it carries summing as it did:
 * a checksum valid before is valid after, UDP's 0 (none) stays 0, and a
 * checksum the frame does not carry whole (a first fragment, a truncated
 * embedded datagram) still moves by exactly the rewrite's change. For the
 * fuzz tests' checks of SNAT and reverse NAT.
 */
import type { InnerTuple, Ipv4 } from './packetModel.js';
import { IpProto } from './packets.js';
import type { Rewrite } from './snatModel.js';

/** The one's-complement sum of the parts (16-bit big-endian words, each part padded), folded: 0xffff when a checksum over them verifies. */
function sum16(...parts: Buffer[]): number {
  let s = 0;
  for (const b of parts) for (let i = 0; i < b.length; i += 2) s += (b[i]! << 8) | (b[i + 1] ?? 0);
  while (s > 0xffff) s = (s & 0xffff) + (s >>> 16);
  return s;
}
/** Equal as one's-complement numbers (0 and 0xffff are both zero). */
const sameSum = (a: number, b: number): boolean => a % 0xffff === b % 0xffff;

function pseudo(f: Buffer, saddrOff: number, proto: number, len: number): Buffer {
  const p = Buffer.alloc(12);
  f.copy(p, 0, saddrOff, saddrOff + 8);
  p[9] = proto;
  p.writeUInt16BE(len & 0xffff, 10);
  return p;
}

const L4_CSUM: Record<number, number> = { [IpProto.TCP]: 16, [IpProto.UDP]: 6, [IpProto.ICMP]: 2 };

/** Where a port (or echo identifier) sits, from the L4 header's start. */
function portOffset(proto: number, src: boolean): number | undefined {
  if (proto === IpProto.ICMP) return 4;
  if (proto === IpProto.TCP || proto === IpProto.UDP || proto === IpProto.SCTP) return src ? 0 : 2;
  return undefined;
}

interface Checksum {
  name: string;
  /** The checksum field's offset in the frame. */
  at: number;
  /** The bytes it covers, in the frame given (addresses of a pseudo header included). */
  covers: (f: Buffer) => Buffer[];
  /** UDP: 0 is "none" and stays 0. */
  udp: boolean;
}

/** Every checksum a translated frame carries that the rewrite must keep right. */
export function checksumsOf(ip: Ipv4, inner: InnerTuple | undefined): Checksum[] {
  const out: Checksum[] = [{ name: 'IPv4 header', at: 24, covers: (f) => [f.subarray(14, 14 + ip.hlen)], udp: false }];
  const later = (ip.fragOff & 0x1fff) !== 0;
  const csum = L4_CSUM[ip.proto];
  if (!later && csum !== undefined && ip.l4Off + csum + 2 <= ip.ipEnd) {
    const len = ip.ipEnd - ip.l4Off;
    out.push({
      name: ip.proto === IpProto.ICMP ? 'ICMP' : ip.proto === IpProto.TCP ? 'TCP' : 'UDP',
      at: ip.l4Off + csum,
      covers: (f) => (ip.proto === IpProto.ICMP ? [f.subarray(ip.l4Off, ip.ipEnd)] : [pseudo(f, 26, ip.proto, len), f.subarray(ip.l4Off, ip.ipEnd)]),
      udp: ip.proto === IpProto.UDP,
    });
  }
  if (inner) {
    const ihl = (inner.l4Off - inner.off);
    out.push({ name: 'embedded IPv4 header', at: inner.off + 10, covers: (f) => [f.subarray(inner.off, Math.min(inner.off + ihl, ip.ipEnd))], udp: false });
    const ic = L4_CSUM[inner.proto];
    if (ic !== undefined && inner.l4Off + ic + 2 <= ip.ipEnd) {
      out.push({
        name: `embedded ${inner.proto === IpProto.ICMP ? 'ICMP' : inner.proto === IpProto.TCP ? 'TCP' : 'UDP'}`,
        at: inner.l4Off + ic,
        covers: (f) => (inner.proto === IpProto.ICMP ? [f.subarray(inner.l4Off, ip.ipEnd)] : [pseudo(f, inner.off + 12, inner.proto, 0), f.subarray(inner.l4Off, ip.ipEnd)]),
        udp: inner.proto === IpProto.UDP,
      });
    }
  }
  return out;
}

/** The input with a rewrite's fields written (checksums left as they were). */
export function rewritten(input: Buffer, ip: Ipv4, r: Rewrite): Buffer {
  const f = Buffer.from(input);
  const later = (ip.fragOff & 0x1fff) !== 0;
  const port = (l4Off: number, proto: number, src: boolean, value: number | undefined): void => {
    const off = portOffset(proto, src);
    if (value !== undefined && off !== undefined) f.writeUInt16BE(value, l4Off + off);
  };
  if (r.src) {
    f.writeUInt32BE(r.src.addr, 26);
    if (!later) port(ip.l4Off, ip.proto, true, r.src.port);
  }
  if (r.dst) {
    f.writeUInt32BE(r.dst.addr, 30);
    if (!later) port(ip.l4Off, ip.proto, false, r.dst.port);
  }
  if (r.inner) {
    const i = r.inner.tuple;
    if (r.inner.src) {
      f.writeUInt32BE(r.inner.src.addr, i.off + 12);
      port(i.l4Off, i.proto, true, r.inner.src.port);
    }
    if (r.inner.dst) {
      f.writeUInt32BE(r.inner.dst.addr, i.off + 16);
      port(i.l4Off, i.proto, false, r.inner.dst.port);
    }
  }
  return f;
}

/** Why `out` is not `input` translated by `r`; empty when it is. */
export function translationViolations(input: Buffer, out: Buffer, ip: Ipv4, r: Rewrite): string[] {
  const v: string[] = [];
  if (out.length !== input.length) return [`the translated frame is ${out.length} bytes, the input ${input.length}`];
  const sums = checksumsOf(ip, r.inner?.tuple);
  const masked = (b: Buffer): Buffer => {
    const c = Buffer.from(b);
    for (const s of sums) c.fill(0, s.at, s.at + 2);
    return c;
  };
  const want = rewritten(input, ip, r);
  if (!masked(out).equals(masked(want))) {
    const diff = [...masked(out)].flatMap((byte, i) => (byte !== masked(want)[i] ? [i] : []));
    v.push(`bytes at ${diff.slice(0, 8).join(', ')} are ${diff.slice(0, 8).map((i) => out[i]!.toString(16)).join(' ')}, the model says ${diff.slice(0, 8).map((i) => want[i]!.toString(16)).join(' ')}`);
  }
  for (const s of sums) {
    if (s.udp && input.readUInt16BE(s.at) === 0) {
      if (out.readUInt16BE(s.at) !== 0) v.push(`${s.name} checksum 0 (none) became ${out.readUInt16BE(s.at).toString(16)}`);
      continue;
    }
    const before = sum16(...s.covers(input));
    const after = sum16(...s.covers(out));
    if (!sameSum(before, after)) v.push(before === 0xffff ? `${s.name} checksum no longer verifies` : `${s.name} checksum's residual changed (${before.toString(16)} → ${after.toString(16)})`);
  }
  return v;
}
