/**
 * The cluster pools' bookkeeping, in memory: which per-node CIDR each node
 * holds. It is rebuilt from the TendrilNode objects whenever this operator
 * becomes the leader (the objects are the record: nothing is lost across
 * restarts or leader changes), and kept by the cluster-pool controller as it
 * hands CIDRs out and nodes go. The pools are src/ipam's (parsePools: the
 * same validation as the agent's cluster-pool flags); the arithmetic is
 * src/netip's.
 */
import { parsePools, type Pool } from '../ipam/pools.js';
import { formatPrefix, prefixContains, prefixOverlaps, subnetAt, subnetCount, tryParsePrefix, type IpPrefix } from '../netip/index.js';

export type Family = 4 | 6;

export interface CidrPoolConfig {
  cidrs: readonly string[];
  maskSize: { 4: number; 6: number };
}

/** A CIDR a node holds that does not fit the pools: left as it is, kept out of what is handed out. */
export interface ForeignCidr {
  node: string;
  cidr: string;
  why: 'outside the pools' | 'not a per-node CIDR of its pool' | 'held by another node too' | 'not a CIDR';
}

export class CidrPool {
  readonly pools: readonly Pool[];
  /** Canonical CIDR → the node holding it (in-pool, per-node CIDRs only). */
  readonly #owner = new Map<string, string>();
  readonly #byNode = new Map<string, Set<string>>();
  /** Prefixes inside the pools held in another shape (or twice): nothing overlapping them is handed out. */
  #blocked: { node: string; prefix: IpPrefix }[] = [];

  /** Throws IpamError (INVALID_CIDR / INVALID_CONFIG) for a bad CIDR, overlapping pools, or a mask that does not fit. */
  constructor(config: CidrPoolConfig) {
    this.pools = parsePools(
      config.cidrs.map((cidr) => ({ cidr })),
      (c) => config.maskSize[c.family],
    );
  }

  families(): Family[] {
    return ([4, 6] as const).filter((f) => this.pools.some((p) => p.family === f));
  }

  /** Forgets everything and takes what the nodes hold; returns what does not fit (for the log). */
  rebuild(nodes: Iterable<{ name: string; cidrs: readonly string[] }>): ForeignCidr[] {
    this.#owner.clear();
    this.#byNode.clear();
    this.#blocked = [];
    const foreign: ForeignCidr[] = [];
    for (const n of nodes) foreign.push(...this.hold(n.name, n.cidrs));
    return foreign;
  }

  /** Sets what `node` holds to `cidrs` (as its object says now); returns what does not fit. */
  hold(node: string, cidrs: readonly string[]): ForeignCidr[] {
    this.release(node);
    const foreign: ForeignCidr[] = [];
    for (const text of cidrs) {
      const p = tryParsePrefix(text, { hostBits: 'mask' });
      if (p === undefined) {
        foreign.push({ node, cidr: text, why: 'not a CIDR' });
        continue;
      }
      const cidr = formatPrefix(p);
      const pool = this.pools.find((x) => prefixOverlaps(x.cidr, p));
      if (pool === undefined) {
        foreign.push({ node, cidr, why: 'outside the pools' });
        continue;
      }
      const other = this.#owner.get(cidr);
      if (p.length !== pool.blockSize || !prefixContains(pool.cidr, p) || (other !== undefined && other !== node)) {
        foreign.push({ node, cidr, why: other !== undefined && other !== node ? 'held by another node too' : 'not a per-node CIDR of its pool' });
        this.#blocked.push({ node, prefix: p });
        continue;
      }
      this.#owner.set(cidr, node);
      let mine = this.#byNode.get(node);
      if (mine === undefined) this.#byNode.set(node, (mine = new Set()));
      mine.add(cidr);
    }
    return foreign;
  }

  /** The node is gone: its CIDRs are free again. */
  release(node: string): void {
    for (const cidr of this.#byNode.get(node) ?? []) this.#owner.delete(cidr);
    this.#byNode.delete(node);
    this.#blocked = this.#blocked.filter((b) => b.node !== node);
  }

  /** Hands `node` a free per-node CIDR of `family` (first free in pool order), or undefined when the pools are full. */
  allocate(node: string, family: Family): string | undefined {
    for (const pool of this.pools) {
      if (pool.family !== family) continue;
      const count = subnetCount(pool.cidr, pool.blockSize);
      // Each step past a free one skips a taken or blocked CIDR: bounded by the nodes, not by a huge IPv6 pool.
      for (let i = 0n; i < count; i++) {
        const candidate = subnetAt(pool.cidr, pool.blockSize, i);
        const cidr = formatPrefix(candidate);
        if (this.#owner.has(cidr)) continue;
        const over = [...this.#blocked.map((b) => b.prefix), ...pool.reserved].find((b) => prefixOverlaps(b, candidate));
        if (over !== undefined) {
          // Iterating upwards, the first block overlapping a larger prefix is its first: jump past the prefix.
          if (over.length < pool.blockSize) i += (1n << BigInt(pool.blockSize - over.length)) - 1n;
          continue;
        }
        this.#owner.set(cidr, node);
        let mine = this.#byNode.get(node);
        if (mine === undefined) this.#byNode.set(node, (mine = new Set()));
        mine.add(cidr);
        return cidr;
      }
    }
    return undefined;
  }

  /** Gives one CIDR back (a patch that did not land). */
  free(node: string, cidr: string): void {
    if (this.#owner.get(cidr) !== node) return;
    this.#owner.delete(cidr);
    this.#byNode.get(node)?.delete(cidr);
  }

  ownerOf(cidr: string): string | undefined {
    return this.#owner.get(cidr);
  }

  allocated(): { 4: number; 6: number } {
    const out = { 4: 0, 6: 0 };
    for (const cidr of this.#owner.keys()) out[cidr.includes(':') ? 6 : 4]++;
    return out;
  }
}
