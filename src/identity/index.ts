/**
 * Public API of src/identity: numeric security identities for label sets,
 * allocated cluster-wide through the kvstore, reserved identities and the
 * constants the datapath shares, and the node lease other subsystems write under.
 */
export { IdentityError, IdentityErrorCode } from './errors.js';
export {
  ReservedIdentity,
  type ReservedIdentityNumber,
  MIN_GLOBAL_IDENTITY,
  MAX_GLOBAL_IDENTITY,
  LOCAL_IDENTITY_SCOPE,
  MIN_LOCAL_IDENTITY,
  MAX_LOCAL_IDENTITY,
  IDENTITY_SCOPE_MASK,
  renderIdentityHeader,
} from './constants.js';
export {
  type Identity,
  type IdentityScope,
  makeIdentity,
  scopeOf,
  parseIdentityNumber,
  reservedIdentity,
  reservedIdentityForLabels,
  isGlobalIdentityNumber,
  identityToJSON,
  cidrIdentityLabels,
  RESERVED_IDENTITIES,
} from './identity.js';
export {
  IdentityAllocator,
  checkGlobalRange,
  type IdentityAllocatorOptions,
  type StoreIdentityAllocatorOptions,
  type AllocateOptions,
  type Allocation,
} from './allocator.js';
export { type GlobalIdentityStore, type StoreAcquireResult } from './globalIdentityStore.js';
export { type IdentityEvent, type IdentityListener } from './identityTable.js';
export { type GcResult } from './kvstoreIdentities.js';
export { IdentityKeys } from './keys.js';
export { NodeLease, withLease, type LeaseProvider, type NodeLeaseOptions, DEFAULT_LEASE_TTL_SECONDS } from './nodeLease.js';
export { ListWatcher, type ListWatchHandler, type ListWatchOptions } from './listWatch.js';
