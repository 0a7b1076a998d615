import { endianness } from 'node:os';
import { type IpAddress, type IpFamily, type IpPrefix, byteLength, ipFromBytes, ipToBytes, lpmKey as netipLpmKey, lpmKeyLength, prefixFromLpmKey } from '../../../netip/index.js';

/**
 * Fixed-size binary codecs for BPF map keys and values. A codec knows its
 * size and C alignment, so `struct()` lays fields out as clang does for the
 * BPF target (natural alignment, padding zeroed), and a codec's size can be
 * checked against the map's key or value size before any bytes move.
 *
 * Map keys and values are in host byte order unless the C side says
 * otherwise (addresses and ports straight from packet headers are in network
 * order: use the `be` codecs for those).
 */
export interface Codec<T> {
  /** Encoded size in bytes. */
  readonly size: number;
  /** Alignment in a C struct (1, 2, 4 or 8). */
  readonly align: number;
  write(value: T, buf: Buffer, offset: number): void;
  read(buf: Buffer, offset: number): T;
}

/** The value type a codec encodes. */
export type CodecValue<C> = C extends Codec<infer T> ? T : never;

/** Encodes into a fresh zero-filled Buffer of exactly `codec.size` bytes. */
export function encode<T>(codec: Codec<T>, value: T): Buffer {
  const buf = Buffer.alloc(codec.size);
  codec.write(value, buf, 0);
  return buf;
}

/** Decodes a buffer that must be exactly `codec.size` bytes. */
export function decode<T>(codec: Codec<T>, buf: Uint8Array): T {
  if (buf.length !== codec.size) throw new RangeError(`cannot decode ${buf.length} bytes with a codec of ${codec.size}`);
  return codec.read(asBuffer(buf), 0);
}

export function asBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

function integer<T>(size: number, write: (b: Buffer, v: T, o: number) => unknown, read: (b: Buffer, o: number) => T): Codec<T> {
  return {
    size,
    align: size,
    write: (v, b, o) => {
      write(b, v, o);
    },
    read: (b, o) => read(b, o),
  };
}

export const u8: Codec<number> = integer(1, (b, v: number, o) => b.writeUInt8(v, o), (b, o) => b.readUInt8(o));
export const i8: Codec<number> = integer(1, (b, v: number, o) => b.writeInt8(v, o), (b, o) => b.readInt8(o));

export const u16le: Codec<number> = integer(2, (b, v: number, o) => b.writeUInt16LE(v, o), (b, o) => b.readUInt16LE(o));
export const u16be: Codec<number> = integer(2, (b, v: number, o) => b.writeUInt16BE(v, o), (b, o) => b.readUInt16BE(o));
export const u32le: Codec<number> = integer(4, (b, v: number, o) => b.writeUInt32LE(v, o), (b, o) => b.readUInt32LE(o));
export const u32be: Codec<number> = integer(4, (b, v: number, o) => b.writeUInt32BE(v, o), (b, o) => b.readUInt32BE(o));
export const i32le: Codec<number> = integer(4, (b, v: number, o) => b.writeInt32LE(v, o), (b, o) => b.readInt32LE(o));
export const i32be: Codec<number> = integer(4, (b, v: number, o) => b.writeInt32BE(v, o), (b, o) => b.readInt32BE(o));
export const u64le: Codec<bigint> = integer(8, (b, v: bigint, o) => b.writeBigUInt64LE(v, o), (b, o) => b.readBigUInt64LE(o));
export const u64be: Codec<bigint> = integer(8, (b, v: bigint, o) => b.writeBigUInt64BE(v, o), (b, o) => b.readBigUInt64BE(o));
export const i64le: Codec<bigint> = integer(8, (b, v: bigint, o) => b.writeBigInt64LE(v, o), (b, o) => b.readBigInt64LE(o));

const little = endianness() === 'LE';
/** Host byte order: how BPF programs store their own integers. */
export const u16: Codec<number> = little ? u16le : u16be;
export const u32: Codec<number> = little ? u32le : u32be;
export const i32: Codec<number> = little ? i32le : i32be;
export const u64: Codec<bigint> = little ? u64le : u64be;

/** `n` raw bytes (a copy on read; exactly `n` required on write). */
export function bytes(n: number): Codec<Uint8Array> {
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`bytes(${n}): size must be a non-negative integer`);
  return {
    size: n,
    align: 1,
    write(v, b, o) {
      if (v.length !== n) throw new RangeError(`expected ${n} bytes, got ${v.length}`);
      b.set(v, o);
    },
    read: (b, o) => Buffer.from(b.subarray(o, o + n)),
  };
}

/** `n` bytes of explicit padding: written as zeros, absent from struct values. */
export function pad(n: number): Codec<undefined> {
  return {
    size: n,
    align: 1,
    write(_v, b, o) {
      b.fill(0, o, o + n);
    },
    read: () => undefined,
  };
}

type Fields = Record<string, Codec<unknown>>;
/** The value of a struct: every field but the padding ones. */
export type StructValue<F extends Fields> = {
  [K in keyof F as F[K] extends Codec<undefined> ? never : K]: CodecValue<F[K]>;
};

function alignUp(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}

/**
 * A C struct: fields in declaration order at their natural alignment, the
 * size rounded up to the largest alignment, padding written as zeros (hash
 * map keys compare every byte, padding included).
 */
export function struct<F extends Fields>(fields: F): Codec<StructValue<F>> {
  const layout: PlacedField[] = [];
  let offset = 0;
  let align = 1;
  for (const [name, codec] of Object.entries(fields)) {
    offset = alignUp(offset, codec.align);
    layout.push({ name, codec, offset });
    offset += codec.size;
    align = Math.max(align, codec.align);
  }
  return placedStruct<StructValue<F>>(alignUp(offset, align), align, layout);
}

/** A struct member at a byte offset the caller knows (computed by `struct`, or read from BTF). */
export interface PlacedField {
  name: string;
  codec: Codec<unknown>;
  offset: number;
}

/** A struct of `size` bytes with each field at its given offset; the bytes between them are written as zeros. */
export function placedStruct<V>(size: number, align: number, layout: readonly PlacedField[]): Codec<V> {
  return {
    size,
    align,
    write(value, b, o) {
      b.fill(0, o, o + size);
      const v = value as Record<string, unknown>;
      for (const f of layout) f.codec.write(v[f.name], b, o + f.offset);
    },
    read(b, o) {
      const out: Record<string, unknown> = {};
      for (const f of layout) {
        const x = f.codec.read(b, o + f.offset);
        if (x !== undefined) out[f.name] = x;
      }
      return out as V;
    },
  };
}

/** A fixed-length C array. */
export function array<T>(codec: Codec<T>, length: number): Codec<T[]> {
  const stride = alignUp(codec.size, codec.align);
  return {
    size: stride * length,
    align: codec.align,
    write(v, b, o) {
      if (v.length !== length) throw new RangeError(`expected an array of ${length} elements, got ${v.length}`);
      v.forEach((x, i) => codec.write(x, b, o + i * stride));
    },
    read(b, o) {
      return Array.from({ length }, (_, i) => codec.read(b, o + i * stride));
    },
  };
}

/**
 * A per-CPU value: one slot per possible CPU, each rounded up to 8 bytes,
 * as the kernel lays out lookups of PERCPU_* maps.
 */
export function perCpu<T>(codec: Codec<T>, cpus: number): Codec<T[]> {
  if (!Number.isInteger(cpus) || cpus < 1) throw new RangeError(`perCpu: ${cpus} is not a CPU count`);
  const stride = alignUp(codec.size, 8);
  return {
    size: stride * cpus,
    align: 8,
    write(v, b, o) {
      if (v.length !== cpus) throw new RangeError(`expected a value for each of ${cpus} CPUs, got ${v.length}`);
      b.fill(0, o, o + stride * cpus);
      v.forEach((x, i) => codec.write(x, b, o + i * stride));
    },
    read(b, o) {
      return Array.from({ length: cpus }, (_, i) => codec.read(b, o + i * stride));
    },
  };
}

/**
 * An IP address of one family as 4 or 16 bytes in network order (packet
 * headers, and so map keys taken from them), through src/netip.
 */
export function ipAddress(family: IpFamily): Codec<IpAddress> {
  return {
    size: byteLength(family),
    align: 1,
    write(v, b, o) {
      if (v.family !== family) throw new RangeError(`an IPv${v.family} address in an IPv${family} field`);
      ipToBytes(v, b, o);
    },
    read: (b, o) => ipFromBytes(b, family, o),
  };
}

/**
 * A BPF_MAP_TYPE_LPM_TRIE key holding one IP prefix of `family` (struct
 * bpf_lpm_trie_key with the address as its data: 8 bytes for IPv4, 20 for
 * IPv6). The layout is src/netip's lpmKey, written in place; a lookup of an
 * address is a lookup of its host prefix (`hostPrefix(addr)`, /32 or /128).
 * Reading refuses keys with host bits or a length past the family (NetipError).
 */
export function lpmPrefix(family: IpFamily): Codec<IpPrefix> {
  const size = lpmKeyLength(family);
  return {
    size,
    align: 4,
    write(p, b, o) {
      if (p.family !== family) throw new RangeError(`an IPv${p.family} prefix in an IPv${family} LPM key`);
      netipLpmKey(p, b, o);
    },
    read: (b, o) => prefixFromLpmKey(b, family, o),
  };
}

export interface LpmKey<T> {
  /** Significant leading bits of `data`. */
  prefixLen: number;
  data: T;
}

/**
 * A BPF_MAP_TYPE_LPM_TRIE key (struct bpf_lpm_trie_key): a host-order u32
 * prefix length, then the data, compared most significant bit first (so an
 * address goes in network order). For data other than one IP prefix (a key
 * that adds fields before the address); an IP prefix is `lpmPrefix`.
 */
export function lpmKey<T>(data: Codec<T>): Codec<LpmKey<T>> {
  const maxBits = data.size * 8;
  return {
    size: 4 + data.size,
    align: 4,
    write(v, b, o) {
      if (!Number.isInteger(v.prefixLen) || v.prefixLen < 0 || v.prefixLen > maxBits) {
        throw new RangeError(`LPM prefix length ${v.prefixLen} is outside 0..${maxBits}`);
      }
      u32.write(v.prefixLen, b, o);
      data.write(v.data, b, o + 4);
    },
    read: (b, o) => ({ prefixLen: u32.read(b, o), data: data.read(b, o + 4) }),
  };
}

/** A codec for another representation of the same bytes (e.g. an address string over 4 bytes). */
export function mapped<A, B>(codec: Codec<A>, from: (a: A) => B, to: (b: B) => A): Codec<B> {
  return {
    size: codec.size,
    align: codec.align,
    write: (v, b, o) => codec.write(to(v), b, o),
    read: (b, o) => from(codec.read(b, o)),
  };
}
