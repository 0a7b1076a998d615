import { maskBits, tryParseIp, type IpFamily, type IpPrefix } from '../netip/index.js';

/**
 * A longest-prefix-match table, the userspace twin of the datapath's LPM
 * trie: one hash map per (family, prefix length), searched from the longest
 * length present. With the handful of lengths a cluster uses (/32 pods, a
 * few CIDRs) a lookup is a few map probes.
 */
export class PrefixMap<V> {
  readonly #tables: Record<IpFamily, Map<number, Map<bigint, V>>> = { 4: new Map(), 6: new Map() };
  /** Lengths present per family, longest first. */
  readonly #lengths: Record<IpFamily, number[]> = { 4: [], 6: [] };
  #size = 0;

  get size(): number {
    return this.#size;
  }

  get(p: IpPrefix): V | undefined {
    return this.#tables[p.family].get(p.length)?.get(p.bits);
  }

  set(p: IpPrefix, value: V): void {
    const byLen = this.#tables[p.family];
    let table = byLen.get(p.length);
    if (table === undefined) {
      table = new Map();
      byLen.set(p.length, table);
      this.#lengths[p.family] = [...byLen.keys()].sort((a, b) => b - a);
    }
    if (!table.has(p.bits)) this.#size++;
    table.set(p.bits, value);
  }

  delete(p: IpPrefix): boolean {
    const byLen = this.#tables[p.family];
    const table = byLen.get(p.length);
    if (table === undefined || !table.delete(p.bits)) return false;
    this.#size--;
    if (table.size === 0) {
      byLen.delete(p.length);
      this.#lengths[p.family] = [...byLen.keys()].sort((a, b) => b - a);
    }
    return true;
  }

  /** The value of the longest prefix containing the address, with that prefix's length. */
  lookup(ip: string): { value: V; length: number } | undefined {
    const addr = tryParseIp(ip);
    if (addr === undefined) return undefined;
    return this.lookupBits(addr.family, addr.bits);
  }

  lookupBits(family: IpFamily, bits: bigint): { value: V; length: number } | undefined {
    for (const length of this.#lengths[family]) {
      const v = this.#tables[family].get(length)?.get(maskBits(family, bits, length));
      if (v !== undefined) return { value: v, length };
    }
    return undefined;
  }

  *values(): IterableIterator<V> {
    for (const family of [4, 6] as const) for (const table of this.#tables[family].values()) yield* table.values();
  }
}
