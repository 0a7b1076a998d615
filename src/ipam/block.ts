import { type IpPrefix, familyBits, formatIp, formatPrefix, prefixContainsIp, prefixOverlaps, prefixSize } from '../netip/index.js';
import { parseCidr, parseIp } from './cidr.js';
import type { BlockRecord } from './records.js';

/**
 * Pure operations on a block's allocation table; the kvstore code around them
 * only reads, calls these on a copy and writes back by CAS.
 */

export interface NewBlockOptions {
  pool: string;
  affinity: string | null;
  /** Reserve the subnet's network address (and IPv4 broadcast): set for per-node CIDRs, which are real subnets. */
  reserveSubnetEnds: boolean;
  /** CIDRs inside the pool that are never handed out. */
  reserved: readonly IpPrefix[];
}

export function newBlock(cidr: IpPrefix, opts: NewBlockOptions): BlockRecord {
  const size = prefixSize(cidr);
  const ranges: [bigint, bigint][] = [];
  if (opts.reserveSubnetEnds && size > 2n) {
    ranges.push([0n, 0n]);
    if (cidr.family === 4) ranges.push([size - 1n, size - 1n]);
  }
  for (const r of opts.reserved) {
    if (!prefixOverlaps(cidr, r)) continue;
    const lo = r.bits > cidr.bits ? r.bits - cidr.bits : 0n;
    const hiAbs = r.bits + prefixSize(r) - 1n;
    const hi = hiAbs < cidr.bits + size - 1n ? hiAbs - cidr.bits : size - 1n;
    ranges.push([lo, hi]);
  }
  return {
    cidr: formatPrefix(cidr),
    pool: opts.pool,
    affinity: opts.affinity,
    seq: 0,
    next: '0',
    reserved: ranges.map(([a, b]) => [a.toString(), b.toString()]),
    allocs: {},
  };
}

export function isReserved(b: BlockRecord, ord: bigint): boolean {
  return b.reserved.some(([lo, hi]) => ord >= BigInt(lo) && ord <= BigInt(hi));
}

/** Addresses that can ever be handed out from this block. */
export function capacity(b: BlockRecord): bigint {
  const size = prefixSize(parseCidr(b.cidr));
  // Reserved ranges may overlap each other; count each ordinal once by merging.
  const sorted = b.reserved.map(([lo, hi]) => [BigInt(lo), BigInt(hi)] as const).sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
  let reserved = 0n;
  let end = -1n;
  for (const [lo, hi] of sorted) {
    const from = lo > end ? lo : end + 1n;
    if (hi >= from) reserved += hi - from + 1n;
    if (hi > end) end = hi;
  }
  return size - reserved;
}

export function usedCount(b: BlockRecord): number {
  return Object.keys(b.allocs).length;
}

export function isFull(b: BlockRecord): boolean {
  return BigInt(usedCount(b)) >= capacity(b);
}

/** First free ordinal at or after the cursor, wrapping; undefined when full. */
export function findFree(b: BlockRecord): bigint | undefined {
  if (isFull(b)) return undefined;
  const size = prefixSize(parseCidr(b.cidr));
  let ord = BigInt(b.next) % size;
  for (let i = 0n; i < size; i++) {
    if (!isReserved(b, ord) && b.allocs[ord.toString()] === undefined) return ord;
    ord = ord + 1n === size ? 0n : ord + 1n;
  }
  return undefined;
}

/** Assigns `ord` to owner in place; returns the address's sequence number. */
export function assign(b: BlockRecord, ord: bigint, owner: string): number {
  const size = prefixSize(parseCidr(b.cidr));
  b.seq += 1;
  b.allocs[ord.toString()] = { owner, seq: b.seq };
  b.next = ((ord + 1n) % size).toString();
  return b.seq;
}

export function ipAt(b: BlockRecord, ord: bigint): string {
  const c = parseCidr(b.cidr);
  return formatIp({ family: c.family, bits: c.bits + ord });
}

/** Ordinal of `ip` in the block, or undefined when outside it. */
export function ordinalOf(b: BlockRecord, ip: string): bigint | undefined {
  const c = parseCidr(b.cidr);
  const a = parseIp(ip);
  return prefixContainsIp(c, a) ? a.bits - c.bits : undefined;
}

export function fullLength(cidr: string): number {
  return familyBits(parseCidr(cidr).family);
}
