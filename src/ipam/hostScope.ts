import { newBlock } from './block.js';
import { sortCidrs } from './cidr.js';
import { formatPrefix } from '../netip/index.js';
import { IpamError, IpamErrorCode, poolExhausted } from './errors.js';
import { KvAllocator, type KvAllocatorOptions, type NewAddress, placed } from './kvAllocator.js';
import { type Pool, parsePools } from './pools.js';
import type { BlockRecord } from './records.js';
import type { IpFamily, IpamMode } from './types.js';

export interface HostScopeOptions extends KvAllocatorOptions {
  /** The node's pod CIDRs (Cilium's `kubernetes` mode: from the Node or the agent config), any mix of families. */
  podCidrs: { name?: string; cidr: string; reserved?: string[] }[];
}

/**
 * Host-scope IPAM: the node allocates from pod CIDRs it was given. Each pod
 * CIDR is one block affine to this node, so a second node configured with the
 * same CIDR by mistake fails at start instead of handing out duplicates.
 */
export class HostScopeAllocator extends KvAllocator {
  readonly mode: IpamMode = 'host-scope';

  constructor(opts: HostScopeOptions) {
    if (opts.podCidrs.length === 0) throw new IpamError(IpamErrorCode.INVALID_CONFIG, 'host-scope IPAM needs at least one pod CIDR');
    super(opts, parsePools(opts.podCidrs.map((p) => ({ ...p, blockSize: undefined })), (c) => c.length));
  }

  /** The configured pod CIDRs: fixed for the allocator's life. */
  podCidrs(): string[] {
    return sortCidrs(this.pools.map((p) => formatPrefix(p.cidr)));
  }

  protected async prepare(): Promise<void> {
    for (const pool of this.pools) {
      const cidr = formatPrefix(pool.cidr);
      const outcome = await this.affinities.claim(cidr, pool.name, () =>
        newBlock(pool.cidr, { pool: pool.name, affinity: this.host, reserveSubnetEnds: true, reserved: pool.reserved }),
      );
      if (outcome === 'taken') {
        const other = await this.store.readBlock(cidr);
        throw new IpamError(IpamErrorCode.CONFLICT, `pod CIDR ${cidr} is already owned by host ${other?.rec.affinity ?? '(unknown)'}`, { pool: pool.name });
      }
    }
  }

  protected addressPrefixLength(_b: BlockRecord, pool: Pool): number {
    return pool.cidr.length;
  }

  protected override firstBlock(_family: IpFamily, pools: Pool[]): { cidr: string; pool: Pool } | undefined {
    const pool = pools[0];
    return pool === undefined ? undefined : { cidr: formatPrefix(pool.cidr), pool };
  }

  protected async place(owner: string, family: IpFamily, pools: Pool[], expiresAt: number | undefined): Promise<NewAddress> {
    for (const pool of pools) {
      const out = await this.store.assign(formatPrefix(pool.cidr), owner, {
        family,
        expiresAt,
        prefixLength: (b) => this.addressPrefixLength(b, pool),
        mayUse: (b) => b.affinity === this.host,
      });
      if (out === 'full' || out === 'taken') continue; // 'taken' only answers a request for a given address
      if (out === 'unusable') throw new IpamError(IpamErrorCode.CONFLICT, `pod CIDR ${formatPrefix(pool.cidr)} is no longer affine to ${this.host}`, { pool: pool.name });
      return placed(out, false);
    }
    throw poolExhausted(pools.map((p) => p.name).join(', '), `every address of pod CIDR ${pools.map((p) => formatPrefix(p.cidr)).join(', ')} on ${this.host} is in use`);
  }
}
