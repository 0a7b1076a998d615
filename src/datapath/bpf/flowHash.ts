/**
 * The flow hash the datapath's Maglev lookup indexes with (lb4_flow_hash in
 * bpf/lib/lb.h), in TypeScript: a connection to a Maglev service goes to
 * `table[flowHash4(tuple) % tableSize]`. MurmurHash3 (x86, 32 bits, seed 0)
 * over four host-order 32-bit words: source address, destination address
 * (the frontend, before DNAT), sport << 16 | dport, protocol. The C side
 * and this one must agree bit for bit; lb.test.ts holds them to it.
 */
import { ipToBytes, parseIp } from '../../netip/index.js';

export interface FlowTuple4 {
  /** Dotted quad. */
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
}

function rotl32(x: number, r: number): number {
  return ((x << r) | (x >>> (32 - r))) >>> 0;
}

function round(h: number, k: number): number {
  k = Math.imul(k, 0xcc9e2d51);
  k = rotl32(k, 15);
  k = Math.imul(k, 0x1b873593);
  h = (h ^ k) >>> 0;
  h = rotl32(h, 13);
  return (Math.imul(h, 5) + 0xe6546b64) >>> 0;
}

function ipv4Word(ip: string): number {
  const a = parseIp(ip);
  if (a.family !== 4) throw new RangeError(`${ip} is not an IPv4 address`);
  const b = ipToBytes(a);
  return ((b[0]! << 24) | (b[1]! << 16) | (b[2]! << 8) | b[3]!) >>> 0;
}

function checkU16(n: number, what: string): number {
  if (!Number.isInteger(n) || n < 0 || n > 0xffff) throw new RangeError(`${what} ${n} is not a 16-bit number`);
  return n;
}

/** lb4_flow_hash of a tuple, as an unsigned 32-bit number. */
export function flowHash4(t: FlowTuple4): number {
  if (!Number.isInteger(t.proto) || t.proto < 0 || t.proto > 0xff) throw new RangeError(`protocol ${t.proto} is not an 8-bit number`);
  let h = 0;
  h = round(h, ipv4Word(t.saddr));
  h = round(h, ipv4Word(t.daddr));
  h = round(h, ((checkU16(t.sport, 'source port') << 16) | checkU16(t.dport, 'destination port')) >>> 0);
  h = round(h, t.proto);
  h = (h ^ 16) >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h = (h ^ (h >>> 13)) >>> 0;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

/** The Maglev slot a connection takes in a table of `tableSize` entries. */
export function maglevSlot(t: FlowTuple4, tableSize: number): number {
  if (!Number.isInteger(tableSize) || tableSize < 1) throw new RangeError(`Maglev table size ${tableSize} is not a positive integer`);
  return flowHash4(t) % tableSize;
}

function ipv6Words(ip: string): number[] {
  const a = parseIp(ip);
  if (a.family !== 6) throw new RangeError(`${ip} is not an IPv6 address`);
  const b = ipToBytes(a);
  return [0, 4, 8, 12].map((i) => ((b[i]! << 24) | (b[i + 1]! << 16) | (b[i + 2]! << 8) | b[i + 3]!) >>> 0);
}

/** lb6_flow_hash of an IPv6 tuple: the same hash over ten words (both addresses' four, the ports, the protocol). */
export function flowHash6(t: FlowTuple4): number {
  if (!Number.isInteger(t.proto) || t.proto < 0 || t.proto > 0xff) throw new RangeError(`protocol ${t.proto} is not an 8-bit number`);
  let h = 0;
  for (const w of [...ipv6Words(t.saddr), ...ipv6Words(t.daddr)]) h = round(h, w);
  h = round(h, ((checkU16(t.sport, 'source port') << 16) | checkU16(t.dport, 'destination port')) >>> 0);
  h = round(h, t.proto);
  h = (h ^ 40) >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h = (h ^ (h >>> 13)) >>> 0;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}
