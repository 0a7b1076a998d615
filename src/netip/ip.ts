import { NetipError, NetipErrorCode } from './errors.js';

/**
 * IPv4 and IPv6 addresses as (family, unsigned integer), the one form that
 * IPAM arithmetic, prefix matching and the datapath's map keys all need: a
 * bigint lets both families share every code path, and it is the address's
 * value in network bit order, so bytes and text are plain conversions.
 *
 * Text is parsed by hand (no regex, no node:net): it accepts exactly what
 * node:net's isIP accepts except zone IDs ("fe80::1%eth0"), which Go's
 * net.ParseIP — and so every CNI plugin — refuses; a property test holds the
 * two parsers to that.
 */
export type IpFamily = 4 | 6;

export interface IpAddress {
  readonly family: IpFamily;
  /** The address as an unsigned integer of 32 or 128 bits (its bigint form). */
  readonly bits: bigint;
}

export function familyBits(family: IpFamily): 32 | 128 {
  return family === 4 ? 32 : 128;
}

const MAX_BITS: Record<IpFamily, bigint> = { 4: (1n << 32n) - 1n, 6: (1n << 128n) - 1n };

/** The address, or undefined when the text is not one. */
export function tryParseIp(text: string): IpAddress | undefined {
  // A dotted quad fails at once on IPv6 text (a ':' or hex letter within five characters).
  const v = parseIpv4(text, 0, text.length);
  if (v >= 0) return { family: 4, bits: BigInt(v) };
  return scanIpv6(text) ? { family: 6, bits: groupsToBits() } : undefined;
}

/** The address; throws NetipError (NETIP_INVALID_ADDRESS) when the text is not one. */
export function parseIp(text: string): IpAddress {
  const a = tryParseIp(text);
  if (a === undefined) throw invalidAddress(text);
  return a;
}

/** 4 or 6 for an address, 0 for anything else (zone IDs included). Validates without building the value. */
export function ipFamilyOf(text: string): 0 | IpFamily {
  if (parseIpv4(text, 0, text.length) >= 0) return 4;
  return scanIpv6(text) ? 6 : 0;
}

function invalidAddress(text: string): NetipError {
  return new NetipError(NetipErrorCode.INVALID_ADDRESS, `"${text}" is not an IP address`, text);
}

/**
 * Dotted quad between start and end: four decimal octets 0–255 without
 * leading zeros (a leading zero would mean octal to inet_aton). Returns the
 * value as an unsigned 32-bit number, or -1.
 */
function parseIpv4(s: string, start: number, end: number): number {
  let value = 0;
  let dots = 0;
  let octet = 0;
  let digits = 0;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) {
      if (digits === 1 && octet === 0) return -1;
      octet = octet * 10 + (c - 48);
      if (octet > 255) return -1;
      digits++;
    } else if (c === 46 && digits > 0 && dots < 3) {
      value = value * 256 + octet;
      dots++;
      octet = 0;
      digits = 0;
    } else {
      return -1;
    }
  }
  return digits === 0 || dots !== 3 ? -1 : value * 256 + octet;
}

function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  if (c >= 65 && c <= 70) return c - 55;
  return -1;
}

// Parsing is synchronous and never re-entered, so one scratch array serves every call.
const groups = new Array<number>(8).fill(0);

/**
 * RFC 4291 §2.2 text: eight groups of 1–4 hex digits; one "::" standing for
 * one or more zero groups; the last 32 bits optionally as a dotted quad.
 * Leaves the eight groups in `groups` and says whether the text is one.
 */
function scanIpv6(s: string): boolean {
  const len = s.length;
  let n = 0;
  let gap = -1;
  let i = 0;
  if (s.charCodeAt(0) === 58) {
    if (s.charCodeAt(1) !== 58) return false;
    gap = 0;
    i = 2;
  }
  while (i < len) {
    const start = i;
    let v = 0;
    let h: number;
    while (i < len && (h = hexValue(s.charCodeAt(i))) >= 0) {
      v = v * 16 + h;
      i++;
    }
    if (i < len && s.charCodeAt(i) === 46) {
      if (n > 6) return false;
      const v4 = parseIpv4(s, start, len);
      if (v4 < 0) return false;
      groups[n++] = Math.floor(v4 / 65536);
      groups[n++] = v4 % 65536;
      break;
    }
    if (i === start || i - start > 4 || n === 8) return false;
    groups[n++] = v;
    if (i === len) break;
    if (s.charCodeAt(i) !== 58) return false;
    i++;
    if (i < len && s.charCodeAt(i) === 58) {
      if (gap >= 0) return false;
      gap = n;
      i++;
    } else if (i === len) {
      return false;
    }
  }
  if (gap < 0 ? n !== 8 : n > 7) return false;
  if (gap >= 0) {
    // Slide the groups after "::" to the end and zero the hole.
    const tail = n - gap;
    for (let k = 0; k < tail; k++) groups[7 - k] = groups[n - 1 - k]!;
    for (let k = gap; k < 8 - tail; k++) groups[k] = 0;
  }
  return true;
}

/** The value of the groups scanIpv6 left. */
function groupsToBits(): bigint {
  const g = groups as [number, number, number, number, number, number, number, number];
  return (
    (BigInt(g[0] * 65536 + g[1]) << 96n) |
    (BigInt(g[2] * 65536 + g[3]) << 64n) |
    (BigInt(g[4] * 65536 + g[5]) << 32n) |
    BigInt(g[6] * 65536 + g[7])
  );
}

/** Canonical text: dotted quad, or RFC 5952 for IPv6 (lower case, longest run of two or more zero groups as "::", the first on a tie). */
export function formatIp(addr: IpAddress): string {
  if (addr.family === 4) {
    const n = Number(addr.bits);
    return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
  }
  return formatIpv6(addr.bits);
}

function formatIpv6(bits: bigint): string {
  const g = new Array<number>(8);
  for (let w = 0; w < 4; w++) {
    const word = Number(BigInt.asUintN(32, bits >> BigInt(96 - 32 * w)));
    g[2 * w] = Math.floor(word / 65536);
    g[2 * w + 1] = word % 65536;
  }
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (bestStart < 0) return g.map((x) => x.toString(16)).join(':');
  const head = g.slice(0, bestStart).map((x) => x.toString(16)).join(':');
  const tail = g.slice(bestStart + bestLen).map((x) => x.toString(16)).join(':');
  return `${head}::${tail}`;
}

/** The address of the family with this integer value; throws NETIP_OUT_OF_RANGE when it does not fit. */
export function ipFromBigInt(family: IpFamily, value: bigint): IpAddress {
  if (value < 0n || value > MAX_BITS[family]) {
    throw new NetipError(NetipErrorCode.OUT_OF_RANGE, `${value} is not an IPv${family} address (0 to ${MAX_BITS[family]})`, String(value));
  }
  return { family, bits: value };
}

export function byteLength(family: IpFamily): 4 | 16 {
  return family === 4 ? 4 : 16;
}

/**
 * The address in network byte order (4 or 16 bytes), written into `out` at
 * `offset` when given (for map keys that hold an address among other fields).
 */
export function ipToBytes(addr: IpAddress, out?: Uint8Array, offset = 0): Uint8Array {
  const n = byteLength(addr.family);
  const target = out ?? new Uint8Array(n);
  if (offset < 0 || offset + n > target.length) throw new RangeError(`${n} address bytes do not fit at offset ${offset} of ${target.length}`);
  for (let w = n / 4 - 1, shift = 0n; w >= 0; w--, shift += 32n) {
    const word = Number(BigInt.asUintN(32, addr.bits >> shift));
    const at = offset + 4 * w;
    target[at] = word >>> 24;
    target[at + 1] = (word >>> 16) & 255;
    target[at + 2] = (word >>> 8) & 255;
    target[at + 3] = word & 255;
  }
  return target;
}

/**
 * Reads an address in network byte order: `family` bytes at `offset`, or,
 * without a family, the whole array (4 bytes IPv4, 16 IPv6).
 */
export function ipFromBytes(bytes: Uint8Array, family?: IpFamily, offset = 0): IpAddress {
  const f: IpFamily | undefined = family ?? (bytes.length === 4 ? 4 : bytes.length === 16 ? 6 : undefined);
  if (f === undefined) throw new NetipError(NetipErrorCode.OUT_OF_RANGE, `${bytes.length} bytes are no IP address (4 or 16)`, String(bytes.length));
  const n = byteLength(f);
  if (offset < 0 || offset + n > bytes.length) {
    throw new NetipError(NetipErrorCode.OUT_OF_RANGE, `${n} address bytes at offset ${offset} run past ${bytes.length}`, String(bytes.length));
  }
  let bits = 0n;
  for (let at = offset; at < offset + n; at += 4) {
    const word = ((bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!) >>> 0;
    bits = (bits << 32n) | BigInt(word);
  }
  return { family: f, bits };
}

/** Total order: every IPv4 address before every IPv6 one, then by value. */
export function compareIp(a: IpAddress, b: IpAddress): -1 | 0 | 1 {
  if (a.family !== b.family) return a.family < b.family ? -1 : 1;
  return a.bits < b.bits ? -1 : a.bits > b.bits ? 1 : 0;
}

/** The next address, or undefined after the family's last one. */
export function nextIp(addr: IpAddress): IpAddress | undefined {
  return addr.bits === MAX_BITS[addr.family] ? undefined : { family: addr.family, bits: addr.bits + 1n };
}

/** The previous address, or undefined before the family's first one. */
export function prevIp(addr: IpAddress): IpAddress | undefined {
  return addr.bits === 0n ? undefined : { family: addr.family, bits: addr.bits - 1n };
}

/**
 * Why an address cannot be a unicast address of a host (a service's, or a
 * node's next hop), or undefined when it can: unspecified, loopback,
 * multicast, link-local, IPv4's reserved and broadcast range, an
 * IPv4-mapped IPv6 address (another family's address in IPv6 clothing,
 * which the datapath would never see as either).
 */
export function notUnicast(addr: IpAddress): string | undefined {
  const v = addr.bits;
  if (addr.family === 4) {
    const first = Number(v >> 24n);
    if (first === 0) return 'is not a unicast address (0.0.0.0/8)';
    if (first === 127) return 'is a loopback address';
    if (first >= 224 && first <= 239) return 'is a multicast address';
    if (first >= 240) return 'is not a unicast address (240.0.0.0/4, broadcast)';
    if (v >> 16n === 0xa9fen) return 'is a link-local address (169.254.0.0/16)';
    return undefined;
  }
  if (v === 0n) return 'is the unspecified address (::)';
  if (v === 1n) return 'is a loopback address (::1)';
  if (v >> 120n === 0xffn) return 'is a multicast address (ff00::/8)';
  if (v >> 118n === 0x3fan) return 'is a link-local address (fe80::/10)';
  if (v >> 32n === 0xffffn) return 'is an IPv4-mapped address (::ffff:0:0/96); use the IPv4 address';
  if (v >> 64n === 0x0100_0000_0000_0000n) return 'is a discard-only address (100::/64)';
  return undefined;
}
