// IPAM: what other subsystems import.
export * from './types.js';
export * from './errors.js';
export { BlockAllocator, type BlockAllocatorOptions } from './blockAllocator.js';
export { ClusterPoolAllocator, type ClusterPoolOptions } from './clusterPool.js';
export { HostScopeAllocator, type HostScopeOptions } from './hostScope.js';
export { DelegatedAllocator, type DelegatedOptions } from './delegated.js';
export { removeHost, type RemoveHostOptions, type RemoveHostReport } from './affinity.js';
export { type PoolConfig, DEFAULT_BLOCK_SIZE } from './pools.js';
export { createAllocator, parseIpamConfig, IpamConfigSchema, type IpamConfig, type AllocatorDeps } from './config.js';
export { IpamProvider, type IpamProviderConfig } from './ipamProvider.js';
export { SerialAllocator } from './serialAllocator.js';
export { attachmentOfOwner, ipamOwner, ownerLease } from './owner.js';
