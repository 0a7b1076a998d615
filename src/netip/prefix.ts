import { endianness } from 'node:os';
import { NetipError, NetipErrorCode } from './errors.js';
import { familyBits, formatIp, ipFromBytes, ipToBytes, tryParseIp, type IpAddress, type IpFamily } from './ip.js';

/**
 * IP prefixes (CIDRs) as (family, network address, length). The address is
 * always masked: no bit beyond `length` is set, so two prefixes are equal
 * exactly when their fields are, and `bits` can key a hash map. A prefix is
 * also an IpAddress (its network address) wherever one is expected.
 */
export interface IpPrefix {
  readonly family: IpFamily;
  /** The network address as an unsigned integer, host bits zero. */
  readonly bits: bigint;
  readonly length: number;
}

/**
 * An address with a prefix length whose host bits are kept: an interface
 * address such as "10.0.0.5/24" (CNI's IPConfig.address, a netlink
 * RTM_NEWADDR). `prefixOf(address, length)` is its subnet.
 */
export interface InterfaceAddress {
  readonly address: IpAddress;
  readonly length: number;
}

/** How strictly `addr/len` text is read; each caller states the rules of the input it takes. */
export interface PrefixParseOptions {
  /**
   * Bits set beyond the length ("10.0.0.7/24"): 'reject' (default; the
   * canonical form of a network, as kvstore keys and cidr labels need) or
   * 'mask' (clear them: an interface address read as its subnet).
   */
  hostBits?: 'reject' | 'mask';
  /** Read a bare address as a host prefix (/32, /128). Default: the "/len" is required. */
  bareAddress?: boolean;
  /**
   * Allow leading zeros in the length ("/08", at most three digits), as Go's
   * net.ParseCIDR and so the CNI plugins do. Default: the length is canonical
   * decimal, as Go's netip.ParsePrefix requires.
   */
  leadingZeros?: boolean;
}

// Masks per family and length, so masking is one bigint AND.
const NETMASKS: Record<IpFamily, readonly bigint[]> = { 4: netmasks(32), 6: netmasks(128) };

function netmasks(width: number): bigint[] {
  const all = (1n << BigInt(width)) - 1n;
  return Array.from({ length: width + 1 }, (_, len) => all ^ ((1n << BigInt(width - len)) - 1n));
}

/** `bits` with every bit beyond `length` cleared; `length` must be 0…familyBits(family). */
export function maskBits(family: IpFamily, bits: bigint, length: number): bigint {
  return bits & NETMASKS[family][length]!;
}

/** Why a text is no prefix: the parse outcome before a message is built (only failures pay for one). */
const enum Failure {
  Syntax,
  Address,
  Length,
  HostBits,
}

function scanAddressAndLength(text: string, opts: PrefixParseOptions | undefined): InterfaceAddress | Failure {
  const slash = text.indexOf('/');
  if (slash < 0) {
    if (opts?.bareAddress !== true) return Failure.Syntax;
    const a = tryParseIp(text);
    return a === undefined ? Failure.Address : { address: a, length: familyBits(a.family) };
  }
  const length = parseLength(text, slash + 1, opts?.leadingZeros === true);
  if (length < 0) return Failure.Syntax;
  const a = tryParseIp(text.slice(0, slash));
  if (a === undefined) return Failure.Address;
  if (length > familyBits(a.family)) return Failure.Length;
  return { address: a, length };
}

function scan(text: string, opts: PrefixParseOptions | undefined): IpPrefix | Failure {
  const r = scanAddressAndLength(text, opts);
  if (typeof r === 'number') return r;
  const { family, bits } = r.address;
  const masked = maskBits(family, bits, r.length);
  if (masked !== bits && opts?.hostBits !== 'mask') return Failure.HostBits;
  return { family, bits: masked, length: r.length };
}

/** The decimal length from `start` to the end of the text, or -1. */
function parseLength(s: string, start: number, leadingZeros: boolean): number {
  const digits = s.length - start;
  if (digits < 1 || digits > 3) return -1;
  if (!leadingZeros && digits > 1 && s.charCodeAt(start) === 48) return -1;
  let n = 0;
  for (let i = start; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) return -1;
    n = n * 10 + (c - 48);
  }
  return n;
}

/** The prefix, or undefined when the text is not one under `opts`. */
export function tryParsePrefix(text: string, opts?: PrefixParseOptions): IpPrefix | undefined {
  const r = scan(text, opts);
  return typeof r === 'number' ? undefined : r;
}

/** The prefix; throws NetipError saying what is wrong with the text. */
export function parsePrefix(text: string, opts?: PrefixParseOptions): IpPrefix {
  const r = scan(text, opts);
  if (typeof r !== 'number') return r;
  return failed(text, r, opts);
}

/** The interface address, or undefined when the text is not `addr/len` (host bits are its point, so they never fail it). */
export function tryParseInterfaceAddress(text: string, opts?: Pick<PrefixParseOptions, 'leadingZeros'>): InterfaceAddress | undefined {
  const r = scanAddressAndLength(text, opts);
  return typeof r === 'number' ? undefined : r;
}

/** The interface address; throws NetipError saying what is wrong with the text. */
export function parseInterfaceAddress(text: string, opts?: Pick<PrefixParseOptions, 'leadingZeros'>): InterfaceAddress {
  const r = scanAddressAndLength(text, opts);
  if (typeof r !== 'number') return r;
  return failed(text, r, opts);
}

/** Canonical `addr/len` text of an interface address (host bits kept). */
export function formatInterfaceAddress(a: InterfaceAddress): string {
  return `${formatIp(a.address)}/${a.length}`;
}

function failed(text: string, r: Failure, opts: PrefixParseOptions | undefined): never {
  const slash = text.indexOf('/');
  switch (r) {
    case Failure.Syntax:
      return fail(NetipErrorCode.INVALID_PREFIX, `"${text}" is not a CIDR (expected address/prefix-length)`, text);
    case Failure.Address: {
      const addr = slash < 0 ? text : text.slice(0, slash);
      return fail(NetipErrorCode.INVALID_ADDRESS, `"${addr}" is not an IP address`, text);
    }
    case Failure.Length: {
      const a = tryParseIp(text.slice(0, slash))!;
      return fail(NetipErrorCode.INVALID_PREFIX, `"${text}": prefix length ${Number(text.slice(slash + 1))} > ${familyBits(a.family)}`, text);
    }
    case Failure.HostBits: {
      const p = scan(text, { ...opts, hostBits: 'mask' }) as IpPrefix;
      return fail(NetipErrorCode.HOST_BITS, `"${text}" has host bits set (did you mean ${formatPrefix(p)}?)`, text);
    }
  }
}

function fail(code: NetipErrorCode, message: string, input: string): never {
  throw new NetipError(code, message, input);
}

/** Canonical `addr/len` text. */
export function formatPrefix(p: IpPrefix): string {
  return `${formatIp(p)}/${p.length}`;
}

/** The prefix of `length` holding `addr` (host bits cleared). */
export function prefixOf(addr: IpAddress, length: number): IpPrefix {
  const width = familyBits(addr.family);
  if (!Number.isInteger(length) || length < 0 || length > width) {
    throw new NetipError(NetipErrorCode.INVALID_PREFIX, `prefix length ${length} is not 0…${width}`, String(length));
  }
  return { family: addr.family, bits: maskBits(addr.family, addr.bits, length), length };
}

/** The /32 or /128 of one address. */
export function hostPrefix(addr: IpAddress): IpPrefix {
  return { family: addr.family, bits: addr.bits, length: familyBits(addr.family) };
}

export function prefixContainsIp(p: IpPrefix, addr: IpAddress): boolean {
  return p.family === addr.family && maskBits(p.family, addr.bits, p.length) === p.bits;
}

/** Whether `outer` contains all of `inner` (same family, shorter or equal length, same leading bits). */
export function prefixContains(outer: IpPrefix, inner: IpPrefix): boolean {
  return outer.family === inner.family && outer.length <= inner.length && maskBits(outer.family, inner.bits, outer.length) === outer.bits;
}

/** Whether the two share any address (for prefixes: one contains the other). */
export function prefixOverlaps(a: IpPrefix, b: IpPrefix): boolean {
  return a.length <= b.length ? prefixContains(a, b) : prefixContains(b, a);
}

/** Number of addresses in the prefix. */
export function prefixSize(p: IpPrefix): bigint {
  return 1n << BigInt(familyBits(p.family) - p.length);
}

/** The network address (the first one). */
export function prefixFirst(p: IpPrefix): IpAddress {
  return { family: p.family, bits: p.bits };
}

/** The last address (IPv4's broadcast address). */
export function prefixLast(p: IpPrefix): IpAddress {
  return { family: p.family, bits: p.bits + prefixSize(p) - 1n };
}

/** The `index`-th subnet of length `length` inside `p` (IPAM carves pools into blocks this way). */
export function subnetAt(p: IpPrefix, length: number, index: bigint): IpPrefix {
  const step = 1n << BigInt(familyBits(p.family) - length);
  return { family: p.family, bits: p.bits + step * index, length };
}

/** How many subnets of length `length` `p` holds. */
export function subnetCount(p: IpPrefix, length: number): bigint {
  return 1n << BigInt(length - p.length);
}

const LITTLE_ENDIAN = endianness() === 'LE';

/** Size in bytes of an lpmKey of the family: 8 for IPv4, 20 for IPv6. */
export function lpmKeyLength(family: IpFamily): 8 | 20 {
  return family === 4 ? 8 : 20;
}

/**
 * The key of a BPF_MAP_TYPE_LPM_TRIE entry for the prefix: struct
 * bpf_lpm_trie_key's `__u32 prefixlen` (host byte order, as the kernel reads
 * it) followed by the address in network byte order — 8 bytes for IPv4, 20
 * for IPv6 — written into `out` at `offset` when given (the datapath's map
 * codecs write in place). Keys with more fields (Cilium's ipcache key has a
 * family byte) build on ipToBytes and count those bits in prefixlen
 * themselves.
 *
 * The prefix is checked first, since the kernel keeps a key's bits past its
 * length and hands them back when the map is read: a length outside the
 * family is NETIP_INVALID_PREFIX, host bits (a prefix not made by this
 * module) are NETIP_HOST_BITS.
 */
export function lpmKey(p: IpPrefix, out?: Uint8Array, offset = 0): Uint8Array {
  const width = familyBits(p.family);
  if (!Number.isInteger(p.length) || p.length < 0 || p.length > width) {
    throw new NetipError(NetipErrorCode.INVALID_PREFIX, `prefix length ${p.length} is not 0…${width}`, String(p.length));
  }
  if (maskBits(p.family, p.bits, p.length) !== p.bits) {
    const text = `${formatIp(p)}/${p.length}`;
    throw new NetipError(NetipErrorCode.HOST_BITS, `${text} has host bits set`, text);
  }
  const n = lpmKeyLength(p.family);
  const key = out ?? new Uint8Array(n);
  if (offset < 0 || offset + n > key.length) throw new RangeError(`an LPM key of ${n} bytes does not fit at offset ${offset} of ${key.length}`);
  new DataView(key.buffer, key.byteOffset, key.byteLength).setUint32(offset, p.length, LITTLE_ENDIAN);
  ipToBytes(p, key, offset + 4);
  return key;
}

/**
 * Reads an lpmKey back: the whole array (the family from its size, 8 or 20
 * bytes), or, given a family, the key of that family at `offset`.
 */
export function prefixFromLpmKey(key: Uint8Array, family?: IpFamily, offset = 0): IpPrefix {
  const f: IpFamily | undefined = family ?? (key.length === 8 ? 4 : key.length === 20 ? 6 : undefined);
  if (f === undefined) throw new NetipError(NetipErrorCode.OUT_OF_RANGE, `${key.length} bytes are no LPM key (8 or 20)`, String(key.length));
  if (offset < 0 || offset + lpmKeyLength(f) > key.length) {
    throw new NetipError(NetipErrorCode.OUT_OF_RANGE, `an IPv${f} LPM key at offset ${offset} runs past ${key.length} bytes`, String(key.length));
  }
  const length = new DataView(key.buffer, key.byteOffset, key.byteLength).getUint32(offset, LITTLE_ENDIAN);
  const addr = ipFromBytes(key, f, offset + 4);
  const p = prefixOf(addr, length);
  if (p.bits !== addr.bits) throw new NetipError(NetipErrorCode.HOST_BITS, `LPM key ${formatIp(addr)}/${length} has host bits set`, formatIp(addr));
  return p;
}
