import { fullLength } from './block.js';
import { sortCidrs } from './cidr.js';
import { claimFreeBlock, existingBlocks } from './claim.js';
import { IpamError, IpamErrorCode, poolExhausted } from './errors.js';
import { KvAllocator, type KvAllocatorOptions, type NewAddress, placed } from './kvAllocator.js';
import { DEFAULT_BLOCK_SIZE, type Pool, type PoolConfig, parsePools } from './pools.js';
import type { AssignOptions } from './store.js';
import type { BlockRecord } from './records.js';
import type { IpFamily, IpamMode } from './types.js';

export interface BlockAllocatorOptions extends KvAllocatorOptions {
  /** IP pools; blockSize defaults to /26 (IPv4) and /122 (IPv6). */
  pools: PoolConfig[];
  /** Never take an address from another host's block (default false: borrowing allowed). */
  strictAffinity?: boolean;
  /** Claim a new block when the affine ones are full (default true). */
  autoAllocateBlocks?: boolean;
  /** At most this many blocks affine to one host; 0 = unlimited (default). */
  maxBlocksPerHost?: number;
}

/**
 * Calico-style block-affinity IPAM. Addresses come, in this order, from
 * blocks affine to this host, from a block claimed now, and — only without
 * strictAffinity — from blocks affine to other hosts (borrowing). Pod
 * addresses are reported as /32 or /128: a borrowed address does not sit in
 * this host's block, so routing is per address, not per block.
 */
export class BlockAllocator extends KvAllocator {
  readonly mode: IpamMode = 'block';
  readonly strictAffinity: boolean;
  readonly autoAllocateBlocks: boolean;
  readonly maxBlocksPerHost: number;
  /**
   * This host's confirmed blocks with their pools. Only this host writes its
   * own affinities, so the cache is refreshed from the store only at start and
   * when a cached block turns out not to be ours any more (host removal).
   */
  private own: Map<string, string> | undefined;
  /**
   * Own blocks last seen full. Only an ordering hint (they are tried last, not
   * skipped): another host releasing an address it borrowed frees space here
   * without telling us.
   */
  private readonly fullHint = new Set<string>();
  /**
   * This host's confirmed blocks as last known, for podCidrs(), which must
   * answer without a store read: set from the store at start and whenever
   * the cache above is rebuilt, kept up to date by this host's own claims
   * and releases (only this host writes its affinities).
   */
  private readonly affine = new Set<string>();

  constructor(opts: BlockAllocatorOptions) {
    if (opts.pools.length === 0) throw new IpamError(IpamErrorCode.INVALID_CONFIG, 'block IPAM needs at least one pool');
    super(opts, parsePools(opts.pools, (c) => Math.max(DEFAULT_BLOCK_SIZE[c.family], c.length)));
    this.strictAffinity = opts.strictAffinity ?? false;
    this.autoAllocateBlocks = opts.autoAllocateBlocks ?? true;
    this.maxBlocksPerHost = opts.maxBlocksPerHost ?? 0;
    if (!Number.isInteger(this.maxBlocksPerHost) || this.maxBlocksPerHost < 0) {
      throw new IpamError(IpamErrorCode.INVALID_CONFIG, `maxBlocksPerHost must be a non-negative integer, got ${opts.maxBlocksPerHost}`);
    }
  }

  protected async prepare(): Promise<void> {
    // Blocks are claimed on demand; only the cache of owned ones is (re)built.
    this.own = undefined;
    await this.ownBlocks();
  }

  /** The blocks affine to this host. */
  podCidrs(): string[] {
    return sortCidrs(this.affine);
  }

  /** Makes the known affine blocks exactly `cidrs`, telling listeners when that changed anything. */
  private setAffine(cidrs: Iterable<string>): void {
    const next = new Set(cidrs);
    if (next.size === this.affine.size && [...next].every((c) => this.affine.has(c))) return;
    this.affine.clear();
    for (const c of next) this.affine.add(c);
    this.podCidrsChanged();
  }

  protected override onReleased(cidrs: readonly string[]): void {
    for (const c of cidrs) this.fullHint.delete(c);
  }

  private async ownBlocks(): Promise<Map<string, string>> {
    if (this.own === undefined) {
      const list = (await this.affinities.list()).filter((a) => a.rec.state === 'confirmed');
      this.own = new Map(list.map((a) => [a.cidr, a.rec.pool]));
      this.setAffine(this.own.keys());
    }
    return this.own;
  }

  /** CIDRs of the blocks affine to this host. */
  async affineBlocks(): Promise<string[]> {
    const cidrs = (await this.affinities.list()).filter((a) => a.rec.state === 'confirmed').map((a) => a.cidr);
    this.setAffine(cidrs);
    return cidrs;
  }

  /** Gives back this host's empty blocks (Calico releases them when strict affinity frees space). */
  async releaseEmptyBlocks(): Promise<string[]> {
    this.own = undefined;
    const released = await this.affinities.releaseEmptyBlocks();
    this.setAffine([...this.affine].filter((c) => !released.includes(c)));
    return released;
  }

  // Borrowed addresses do not sit in this host's block: routing is per address.
  protected addressPrefixLength(b: BlockRecord): number {
    return fullLength(b.cidr);
  }

  protected async place(owner: string, family: IpFamily, pools: Pool[], expiresAt: number | undefined): Promise<NewAddress> {
    const names = new Set(pools.map((p) => p.name));
    const own: AssignOptions = { family, expiresAt, prefixLength: (b) => this.addressPrefixLength(b), mayUse: (b) => b.affinity === this.host };
    const cache = await this.ownBlocks();
    // 1. Blocks this host already owns.
    const order = [...cache].sort(([x], [y]) => Number(this.fullHint.has(x)) - Number(this.fullHint.has(y)));
    for (const [cidr, pool] of order) {
      if (!names.has(pool)) continue;
      const out = await this.store.assign(cidr, owner, own);
      if (typeof out === 'object') return placed(out, false);
      if (out === 'full') this.fullHint.add(cidr);
      if (out === 'unusable') this.own = undefined;
    }
    // A retried ADD whose address sits in a borrowed block must not claim a block first.
    const existing = await this.store.readHandle(owner);
    const held = existing?.rec.addrs.find((x) => x.family === family);
    if (existing !== undefined && held !== undefined) return { addr: held, borrowed: false, expiresAt: existing.rec.expiresAt, fresh: false };
    // 2. A new block, within maxBlocksPerHost.
    let owned = (await this.ownBlocks()).size;
    if (this.autoAllocateBlocks) {
      for (const pool of pools) {
        while (this.maxBlocksPerHost === 0 || owned < this.maxBlocksPerHost) {
          const cidr = await claimFreeBlock(this.store, this.affinities, pool, { reserveSubnetEnds: false, spread: true });
          if (cidr === undefined) break;
          owned += 1;
          this.own?.set(cidr, pool.name);
          this.setAffine([...this.affine, cidr]);
          const out = await this.store.assign(cidr, owner, own);
          if (typeof out === 'object') return placed(out, false);
          // Filled by borrowers between claim and assign (or fully reserved): claim another.
        }
      }
    }
    const label = pools.map((p) => p.name).join(', ');
    if (this.strictAffinity) {
      throw new IpamError(
        IpamErrorCode.NO_FREE_BLOCK,
        `no free block for host ${this.host} in pool ${label} (strictAffinity: borrowing disabled; ${owned} affine blocks full${
          this.maxBlocksPerHost > 0 ? `, maxBlocksPerHost ${this.maxBlocksPerHost}` : ''
        })`,
        { pool: label },
      );
    }
    // 3. Borrow from any other block of the pool, affine elsewhere or orphaned.
    // Own blocks are tried again first: a concurrent allocate of this host may
    // have claimed one after step 1 listed them.
    for (const pool of pools) {
      const all = [...(await existingBlocks(this.store, pool))].sort(([, x], [, y]) => Number(y === this.host) - Number(x === this.host));
      for (const [cidr] of all) {
        const out = await this.store.assign(cidr, owner, { family, expiresAt, prefixLength: (b) => this.addressPrefixLength(b) });
        if (typeof out === 'object') return placed(out, out.block?.affinity !== this.host);
      }
    }
    throw poolExhausted(label, `no free address in any block (host ${this.host} owns ${owned})`);
  }
}
