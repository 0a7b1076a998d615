import { createHash } from 'node:crypto';
import { newBlock } from './block.js';
import { type IpPrefix, formatPrefix, prefixContains, subnetAt, subnetCount } from '../netip/index.js';
import { parseCidr } from './cidr.js';
import type { AffinityManager } from './affinity.js';
import { IPAM_BLOCKS_PREFIX } from './keys.js';
import type { Pool } from './pools.js';
import { BlockRecordSchema, decode } from './records.js';
import type { IpamStore } from './store.js';

/** Blocks of `pool` that exist in the kvstore, by CIDR, with their affinity. */
export async function existingBlocks(store: IpamStore, pool: Pool): Promise<Map<string, string | null>> {
  const res = await store.backend.list(IPAM_BLOCKS_PREFIX);
  const out = new Map<string, string | null>();
  for (const kv of res.kvs) {
    const b = decode(BlockRecordSchema, kv.key, kv.value);
    if (b.pool === pool.name) out.set(b.cidr, b.affinity);
  }
  return out;
}

function insideReserved(pool: Pool, c: IpPrefix): boolean {
  return pool.reserved.some((r) => prefixContains(r, c));
}

/**
 * Claims an unowned block of `pool` for this host: an orphan first, else the
 * first CIDR with no block key, searching from an offset derived from the
 * host name so that hosts starting together do not all race for block 0.
 * Returns the claimed CIDR, or undefined when the pool has no block left.
 */
export async function claimFreeBlock(
  store: IpamStore,
  affinities: AffinityManager,
  pool: Pool,
  opts: { reserveSubnetEnds: boolean; spread: boolean; attempts?: number },
): Promise<string | undefined> {
  const count = subnetCount(pool.cidr, pool.blockSize);
  const offset = opts.spread ? BigInt(`0x${createHash('sha256').update(store.host).digest('hex').slice(0, 12)}`) % count : 0n;
  for (let attempt = 0; attempt < (opts.attempts ?? 64); attempt++) {
    const existing = await existingBlocks(store, pool);
    let candidate: IpPrefix | undefined;
    for (const [cidr, affinity] of existing) {
      if (affinity === null) {
        candidate = parseCidr(cidr);
        break;
      }
    }
    if (candidate === undefined) {
      // Bounded by the pool's block count; for a huge IPv6 pool the first miss ends it.
      for (let i = 0n; i < count; i++) {
        const c = subnetAt(pool.cidr, pool.blockSize, (offset + i) % count);
        if (!existing.has(formatPrefix(c)) && !insideReserved(pool, c)) {
          candidate = c;
          break;
        }
      }
    }
    if (candidate === undefined) return undefined;
    const cidr = formatPrefix(candidate);
    const c = candidate;
    const outcome = await affinities.claim(cidr, pool.name, () =>
      newBlock(c, { pool: pool.name, affinity: store.host, reserveSubnetEnds: opts.reserveSubnetEnds, reserved: pool.reserved }),
    );
    if (outcome === 'claimed') return cidr;
    // Another host won this one; look again.
    store.stats.casRetries += 1;
  }
  return undefined;
}
