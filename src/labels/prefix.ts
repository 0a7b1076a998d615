import { isIPv4, isIPv6 } from 'node:net';

/**
 * IP prefixes as (family, address bits, length), the one representation the
 * CIDR labels and the ipcache's longest-prefix match both need. Bits are a
 * bigint so IPv4 and IPv6 share the code.
 */
export type IpFamily = 4 | 6;

export interface IpPrefix {
  readonly family: IpFamily;
  /** Address as an unsigned integer (32 or 128 bits). */
  readonly bits: bigint;
  readonly length: number;
}

export function familyWidth(family: IpFamily): number {
  return family === 4 ? 32 : 128;
}

function ipv4ToBits(ip: string): bigint {
  return ip.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

function ipv6ToBits(ip: string): bigint {
  let text = ip;
  // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two hextets.
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const v4 = ipv4ToBits(tail);
    text = `${text.slice(0, lastColon + 1)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const headParts = head === '' ? [] : head.split(':');
  const restParts = rest === undefined || rest === '' ? [] : rest.split(':');
  const fill = rest === undefined ? 0 : 8 - headParts.length - restParts.length;
  const parts = [...headParts, ...Array<string>(fill).fill('0'), ...restParts];
  return parts.reduce((acc, h) => (acc << 16n) | BigInt(parseInt(h, 16)), 0n);
}

/** Parses a bare address; undefined when the text is not one (zone IDs are refused). */
export function parseIpAddress(ip: string): { family: IpFamily; bits: bigint } | undefined {
  if (isIPv4(ip)) return { family: 4, bits: ipv4ToBits(ip) };
  if (isIPv6(ip) && !ip.includes('%')) return { family: 6, bits: ipv6ToBits(ip) };
  return undefined;
}

/**
 * Parses `a.b.c.d/n`, `x::y/n` or a bare address (a host prefix). With
 * `strict`, host bits beyond the length must be zero; otherwise they are
 * cleared. Returns undefined for anything else.
 */
export function parseIpPrefix(text: string, options: { strict?: boolean } = {}): IpPrefix | undefined {
  const slash = text.indexOf('/');
  const addr = slash < 0 ? text : text.slice(0, slash);
  const parsed = parseIpAddress(addr);
  if (parsed === undefined) return undefined;
  const width = familyWidth(parsed.family);
  let length = width;
  if (slash >= 0) {
    const lenText = text.slice(slash + 1);
    if (!/^(0|[1-9][0-9]{0,2})$/.test(lenText)) return undefined;
    length = Number(lenText);
    if (length > width) return undefined;
  }
  const masked = maskBits(parsed.bits, length, width);
  if (options.strict === true && masked !== parsed.bits) return undefined;
  return { family: parsed.family, bits: masked, length };
}

export function maskBits(bits: bigint, length: number, width: number): bigint {
  if (length === 0) return 0n;
  const hostBits = BigInt(width - length);
  return (bits >> hostBits) << hostBits;
}

function formatIpv4(bits: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => ((bits >> s) & 0xffn).toString()).join('.');
}

/** RFC 5952 canonical text: lower case, longest zero run (≥2) compressed. */
function formatIpv6(bits: bigint): string {
  const hextets = [];
  for (let i = 7; i >= 0; i--) hextets.push(Number((bits >> BigInt(i * 16)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (hextets[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && hextets[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = hextets.map((h) => h.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

export function formatIpAddress(family: IpFamily, bits: bigint): string {
  return family === 4 ? formatIpv4(bits) : formatIpv6(bits);
}

/** Canonical `addr/len` text. */
export function formatIpPrefix(p: IpPrefix): string {
  return `${formatIpAddress(p.family, p.bits)}/${p.length}`;
}

/** Does `outer` contain `inner` (same family, shorter-or-equal length, same leading bits)? */
export function prefixContains(outer: IpPrefix, inner: IpPrefix): boolean {
  if (outer.family !== inner.family || outer.length > inner.length) return false;
  return maskBits(inner.bits, outer.length, familyWidth(outer.family)) === outer.bits;
}
