import { z } from 'zod';
import type { Backend } from '../kvstore/types.js';
import type { PluginExec } from '../libcni/exec.js';
import type { Logger } from '../logging/logger.js';
import { BlockAllocator } from './blockAllocator.js';
import { ClusterPoolAllocator } from './clusterPool.js';
import { DelegatedAllocator } from './delegated.js';
import { IpamError, IpamErrorCode } from './errors.js';
import { HostScopeAllocator } from './hostScope.js';
import type { Allocator } from './types.js';

/**
 * The agent's `ipam` configuration, validated at the boundary. One schema per
 * mode; the names follow Cilium (podCIDRs, clusterPoolIPv4MaskSize) and
 * Calico (blockSize, strictAffinity, maxBlocksPerHost) where those exist.
 */
const PoolSchema = z.strictObject({
  name: z.string().optional(),
  cidr: z.string(),
  blockSize: z.number().int().optional(),
  reserved: z.array(z.string()).optional(),
});

export const IpamConfigSchema = z.discriminatedUnion('mode', [
  z.strictObject({ mode: z.literal('host-scope'), podCIDRs: z.array(z.string()).min(1) }),
  z.strictObject({
    mode: z.literal('cluster-pool'),
    clusterPoolCIDRs: z.array(z.string()).min(1),
    clusterPoolIPv4MaskSize: z.number().int().min(1).max(32).optional(),
    clusterPoolIPv6MaskSize: z.number().int().min(1).max(128).optional(),
  }),
  z.strictObject({
    mode: z.literal('block'),
    pools: z.array(PoolSchema).min(1),
    strictAffinity: z.boolean().optional(),
    autoAllocateBlocks: z.boolean().optional(),
    maxBlocksPerHost: z.number().int().nonnegative().optional(),
  }),
  z.strictObject({
    mode: z.literal('delegated'),
    /** The netconf given to the IPAM plugin: `{cniVersion, name, ipam: {type, …}}`. */
    netconf: z.looseObject({ cniVersion: z.string(), name: z.string(), ipam: z.looseObject({ type: z.string().min(1) }) }),
    cniPath: z.array(z.string().min(1)).min(1),
  }),
]);
export type IpamConfig = z.infer<typeof IpamConfigSchema>;

export interface AllocatorDeps {
  backend: Backend;
  host: string;
  logger?: Logger;
  exec?: PluginExec;
}

export function parseIpamConfig(raw: unknown): IpamConfig {
  const r = IpamConfigSchema.safeParse(raw);
  if (!r.success) {
    throw new IpamError(IpamErrorCode.INVALID_CONFIG, `ipam config: ${r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`);
  }
  return r.data;
}

/** Builds (does not start) the allocator the config asks for. */
export function createAllocator(raw: unknown, deps: AllocatorDeps): Allocator {
  const cfg = parseIpamConfig(raw);
  const base = { backend: deps.backend, host: deps.host, ...(deps.logger !== undefined ? { logger: deps.logger } : {}) };
  switch (cfg.mode) {
    case 'host-scope':
      return new HostScopeAllocator({ ...base, podCidrs: cfg.podCIDRs.map((cidr) => ({ cidr })) });
    case 'cluster-pool':
      return new ClusterPoolAllocator({
        ...base,
        pools: cfg.clusterPoolCIDRs.map((cidr) => ({ cidr })),
        maskSize: { 4: cfg.clusterPoolIPv4MaskSize, 6: cfg.clusterPoolIPv6MaskSize },
      });
    case 'block':
      return new BlockAllocator({
        ...base,
        pools: cfg.pools,
        ...(cfg.strictAffinity !== undefined ? { strictAffinity: cfg.strictAffinity } : {}),
        ...(cfg.autoAllocateBlocks !== undefined ? { autoAllocateBlocks: cfg.autoAllocateBlocks } : {}),
        ...(cfg.maxBlocksPerHost !== undefined ? { maxBlocksPerHost: cfg.maxBlocksPerHost } : {}),
      });
    case 'delegated':
      return new DelegatedAllocator({
        ...base,
        netconf: cfg.netconf as ConstructorParameters<typeof DelegatedAllocator>[0]['netconf'],
        cniPath: cfg.cniPath,
        ...(deps.exec !== undefined ? { exec: deps.exec } : {}),
      });
  }
}
