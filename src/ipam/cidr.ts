import { isIP } from 'node:net';
import { IpamError, IpamErrorCode } from './errors.js';
import type { IpFamily } from './types.js';

/**
 * IP arithmetic on bigints, so IPv4 and IPv6 share one code path: an address
 * is its integer value, a CIDR is (base, prefix length). Only canonical forms
 * leave this module, because CIDRs and IPs are used as kvstore keys and must
 * compare equal as strings.
 */
export interface Cidr {
  family: IpFamily;
  /** Network address (host bits zero). */
  base: bigint;
  prefixLength: number;
}

export function familyBits(family: IpFamily): number {
  return family === 4 ? 32 : 128;
}

export function parseIp(text: string): { family: IpFamily; value: bigint } {
  const family = isIP(text);
  if (family === 4) {
    const parts = text.split('.').map(Number);
    let v = 0n;
    for (const p of parts) v = (v << 8n) | BigInt(p);
    return { family: 4, value: v };
  }
  if (family === 6) {
    let t = text;
    // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two hex groups.
    const lastColon = t.lastIndexOf(':');
    const tail = t.slice(lastColon + 1);
    if (tail.includes('.')) {
      const v4 = parseIp(tail).value;
      t = `${t.slice(0, lastColon + 1)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
    }
    const [head, rest] = t.split('::') as [string, string | undefined];
    const h = head === '' ? [] : head.split(':');
    const r = rest === undefined || rest === '' ? [] : rest.split(':');
    const groups = rest === undefined ? h : [...h, ...Array<string>(8 - h.length - r.length).fill('0'), ...r];
    let v = 0n;
    for (const g of groups) v = (v << 16n) | BigInt(parseInt(g, 16));
    return { family: 6, value: v };
  }
  throw new IpamError(IpamErrorCode.INVALID_CIDR, `"${text}" is not an IP address`);
}

export function formatIp(family: IpFamily, value: bigint): string {
  if (family === 4) {
    return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 0xffn)).join('.');
  }
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((value >> BigInt(i * 16)) & 0xffffn));
  // RFC 5952: compress the longest run (>= 2) of zero groups, the first one on a tie.
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** Parses "addr/len"; host bits must be zero unless `allowHostBits` (then they are dropped). */
export function parseCidr(text: string, allowHostBits = false): Cidr {
  const slash = text.indexOf('/');
  const lenText = slash < 0 ? '' : text.slice(slash + 1);
  if (slash < 0 || !/^\d{1,3}$/.test(lenText)) {
    throw new IpamError(IpamErrorCode.INVALID_CIDR, `"${text}" is not a CIDR (expected address/prefix-length)`);
  }
  const { family, value } = parseIp(text.slice(0, slash));
  const prefixLength = Number(lenText);
  const bits = familyBits(family);
  if (prefixLength > bits) throw new IpamError(IpamErrorCode.INVALID_CIDR, `"${text}": prefix length ${prefixLength} > ${bits}`);
  const hostMask = (1n << BigInt(bits - prefixLength)) - 1n;
  if ((value & hostMask) !== 0n && !allowHostBits) {
    throw new IpamError(IpamErrorCode.INVALID_CIDR, `"${text}" has host bits set (did you mean ${formatCidr({ family, base: value & ~hostMask, prefixLength })}?)`);
  }
  return { family, base: value & ~hostMask, prefixLength };
}

export function formatCidr(c: Cidr): string {
  return `${formatIp(c.family, c.base)}/${c.prefixLength}`;
}

/** Number of addresses in the CIDR. */
export function cidrSize(c: Cidr): bigint {
  return 1n << BigInt(familyBits(c.family) - c.prefixLength);
}

export function cidrContains(c: Cidr, family: IpFamily, value: bigint): boolean {
  return family === c.family && value >= c.base && value < c.base + cidrSize(c);
}

export function cidrOverlaps(a: Cidr, b: Cidr): boolean {
  if (a.family !== b.family) return false;
  return a.base < b.base + cidrSize(b) && b.base < a.base + cidrSize(a);
}

/** The i-th subnet of length `prefixLength` inside `c`. */
export function subnetAt(c: Cidr, prefixLength: number, index: bigint): Cidr {
  const step = 1n << BigInt(familyBits(c.family) - prefixLength);
  return { family: c.family, base: c.base + step * index, prefixLength };
}

export function subnetCount(c: Cidr, prefixLength: number): bigint {
  return 1n << BigInt(prefixLength - c.prefixLength);
}
