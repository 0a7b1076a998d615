import { type IpPrefix, familyBits, formatPrefix, prefixContainsIp, prefixOf, prefixOverlaps, tryParseIp } from '../netip/index.js';
import { parseCidr } from './cidr.js';
import { IpamError, IpamErrorCode } from './errors.js';
import type { IpFamily } from './types.js';

export interface PoolConfig {
  /** Defaults to the CIDR. Errors name the pool by this. */
  name?: string;
  cidr: string;
  /** Prefix length of a block (block mode) or of a per-node CIDR (cluster-pool). */
  blockSize?: number;
  /** CIDRs inside the pool never handed out (Calico's IPReservation). */
  reserved?: string[];
}

export interface Pool {
  name: string;
  cidr: IpPrefix;
  family: IpFamily;
  blockSize: number;
  reserved: IpPrefix[];
}

export const DEFAULT_BLOCK_SIZE: Record<IpFamily, number> = { 4: 26, 6: 122 };

const NAME = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}$/;

export function parsePools(configs: readonly PoolConfig[], defaultBlockSize: (c: IpPrefix) => number): Pool[] {
  const pools: Pool[] = [];
  for (const pc of configs) {
    const cidr = parseCidr(pc.cidr);
    const name = pc.name ?? formatPrefix(cidr);
    if (!NAME.test(name)) throw new IpamError(IpamErrorCode.INVALID_CONFIG, `pool name "${name}" is not valid`);
    const blockSize = pc.blockSize ?? defaultBlockSize(cidr);
    if (!Number.isInteger(blockSize) || blockSize < cidr.length || blockSize > familyBits(cidr.family)) {
      throw new IpamError(IpamErrorCode.INVALID_CONFIG, `pool ${name}: block size /${blockSize} does not fit in ${formatPrefix(cidr)}`, { pool: name });
    }
    const reserved = (pc.reserved ?? []).map((r) => parseCidr(r));
    for (const r of reserved) {
      if (!prefixOverlaps(r, cidr)) throw new IpamError(IpamErrorCode.INVALID_CONFIG, `pool ${name}: reserved ${formatPrefix(r)} is outside ${formatPrefix(cidr)}`, { pool: name });
    }
    for (const other of pools) {
      if (other.name === name) throw new IpamError(IpamErrorCode.INVALID_CONFIG, `pool name ${name} is used twice`, { pool: name });
      if (prefixOverlaps(other.cidr, cidr)) {
        throw new IpamError(IpamErrorCode.INVALID_CONFIG, `pools ${other.name} and ${name} overlap`, { pool: name });
      }
    }
    pools.push({ name, cidr, family: cidr.family, blockSize, reserved });
  }
  return pools;
}

/** The pools a request may use: the named one (by name or CIDR), or all of the family. */
export function selectPools(pools: readonly Pool[], family: IpFamily, wanted: string | undefined): Pool[] {
  if (wanted !== undefined) {
    const p = pools.find((x) => x.name === wanted || formatPrefix(x.cidr) === wanted);
    if (p === undefined) throw new IpamError(IpamErrorCode.UNKNOWN_POOL, `no IP pool named ${wanted}`, { pool: wanted });
    if (p.family !== family) throw new IpamError(IpamErrorCode.INVALID_ARGUMENT, `pool ${p.name} is IPv${p.family}, not IPv${family}`, { pool: p.name });
    return [p];
  }
  const of = pools.filter((p) => p.family === family);
  if (of.length === 0) throw new IpamError(IpamErrorCode.FAMILY_UNAVAILABLE, `no IPv${family} pool is configured`);
  return of;
}

/** The block (aligned to the pool's block size) that holds `ip`, if any pool does. */
export function blockOf(pools: readonly Pool[], ip: string): { pool: Pool; cidr: string } | undefined {
  const addr = tryParseIp(ip);
  if (addr === undefined) return undefined;
  for (const pool of pools) {
    if (prefixContainsIp(pool.cidr, addr)) return { pool, cidr: formatPrefix(prefixOf(addr, pool.blockSize)) };
  }
  return undefined;
}
