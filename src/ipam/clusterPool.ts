import { removeHost, type RemoveHostReport } from './affinity.js';
import { sortCidrs } from './cidr.js';
import { claimFreeBlock } from './claim.js';
import { IpamError, IpamErrorCode, poolExhausted } from './errors.js';
import { KvAllocator, type KvAllocatorOptions, type NewAddress, placed } from './kvAllocator.js';
import { type Pool, parsePools } from './pools.js';
import type { BlockRecord } from './records.js';
import type { IpFamily, IpamMode } from './types.js';

export interface ClusterPoolOptions extends KvAllocatorOptions {
  /** Cluster CIDRs (Cilium's clusterPoolIPv4PodCIDRList / IPv6). */
  pools: { name?: string; cidr: string; reserved?: string[] }[];
  /** Per-node CIDR prefix length by family (Cilium's clusterPoolIPv4MaskSize); default /24 and /112. */
  maskSize?: { 4?: number; 6?: number };
}

export const DEFAULT_MASK_SIZE = { 4: 24, 6: 112 } as const;

/**
 * Cluster-pool IPAM: each node claims one per-node CIDR per family out of the
 * cluster CIDRs, by CAS in the kvstore — the job Cilium's operator does,
 * without an operator. The claim is an affinity, so the node finds its CIDR
 * again after a restart; `removeNode` returns it to the pool.
 */
export class ClusterPoolAllocator extends KvAllocator {
  readonly mode: IpamMode = 'cluster-pool';
  private readonly nodeCidrMap = new Map<IpFamily, { pool: Pool; cidr: string }[]>();

  constructor(opts: ClusterPoolOptions) {
    if (opts.pools.length === 0) throw new IpamError(IpamErrorCode.INVALID_CONFIG, 'cluster-pool IPAM needs at least one cluster CIDR');
    super(
      opts,
      parsePools(opts.pools, (c) => opts.maskSize?.[c.family] ?? DEFAULT_MASK_SIZE[c.family]),
    );
  }

  /** The per-node CIDRs this node holds. */
  nodeCidrs(): string[] {
    return [...this.nodeCidrMap.values()].flat().map((n) => n.cidr);
  }

  /** The per-node CIDRs this node was given (empty before start). */
  podCidrs(): string[] {
    return sortCidrs(this.nodeCidrs());
  }

  protected async prepare(): Promise<void> {
    const before = this.podCidrs().join(',');
    try {
      await this.claimNodeCidrs();
    } finally {
      if (this.podCidrs().join(',') !== before) this.podCidrsChanged();
    }
  }

  private async claimNodeCidrs(): Promise<void> {
    const own = (await this.affinities.list()).filter((a) => a.rec.state === 'confirmed');
    for (const family of [4, 6] as const) {
      const pools = this.pools.filter((p) => p.family === family);
      if (pools.length === 0) continue;
      const kept = own.flatMap((a) => {
        const pool = pools.find((p) => p.name === a.rec.pool);
        return pool === undefined ? [] : [{ pool, cidr: a.cidr }];
      });
      if (kept.length > 0) {
        this.nodeCidrMap.set(family, kept);
        continue;
      }
      let claimed: { pool: Pool; cidr: string } | undefined;
      for (const pool of pools) {
        const cidr = await claimFreeBlock(this.store, this.affinities, pool, { reserveSubnetEnds: true, spread: false });
        if (cidr !== undefined) {
          claimed = { pool, cidr };
          break;
        }
      }
      if (claimed === undefined) throw poolExhausted(pools.map((p) => p.name).join(', '), `no free /${pools[0]?.blockSize} per-node CIDR left for ${this.host}`);
      this.nodeCidrMap.set(family, [claimed]);
    }
  }

  protected addressPrefixLength(_b: BlockRecord, pool: Pool): number {
    return pool.blockSize;
  }

  protected override firstBlock(family: IpFamily, pools: Pool[]): { cidr: string; pool: Pool } | undefined {
    const first = (this.nodeCidrMap.get(family) ?? []).find((n) => pools.includes(n.pool));
    return first === undefined ? undefined : { cidr: first.cidr, pool: first.pool };
  }

  protected async place(owner: string, family: IpFamily, pools: Pool[], expiresAt: number | undefined): Promise<NewAddress> {
    const mine = (this.nodeCidrMap.get(family) ?? []).filter((n) => pools.includes(n.pool));
    for (const n of mine) {
      const out = await this.store.assign(n.cidr, owner, {
        family,
        expiresAt,
        prefixLength: (b) => this.addressPrefixLength(b, n.pool),
        mayUse: (b) => b.affinity === this.host,
      });
      if (out === 'full' || out === 'taken') continue; // 'taken' only answers a request for a given address
      if (out === 'unusable') throw new IpamError(IpamErrorCode.CONFLICT, `per-node CIDR ${n.cidr} is no longer owned by ${this.host}`, { pool: n.pool.name });
      return placed(out, false);
    }
    const names = pools.map((p) => p.name).join(', ');
    throw poolExhausted(names, `per-node CIDR ${mine.map((n) => n.cidr).join(', ') || '(none)'} of ${this.host} is full`);
  }

  /** The node is gone for good: release its addresses and give its CIDRs back to the pool. */
  async removeNode(): Promise<RemoveHostReport> {
    await this.stop();
    this.nodeCidrMap.clear();
    this.podCidrsChanged();
    return removeHost(this.store.backend, this.host, { releaseAllocations: true, stats: this.store.stats });
  }

}

