/**
 * Public API of src/ipcache: the IP/CIDR → identity map with longest-prefix
 * lookup and source precedence, its listener API for the datapath, and the
 * kvstore sync that shares it between nodes.
 */
export { IpcacheError, IpcacheErrorCode } from './errors.js';
export { IpcacheSource, sourcePriority, isIpcacheSource } from './source.js';
export {
  IPCache,
  parsePrefixInput,
  type IpcacheEntry,
  type IpcacheMetadata,
  type IpcacheUpsert,
  type IpcacheListener,
  type SourceChange,
  type UpsertOutcome,
  type DeleteOutcome,
} from './ipcache.js';
export { PrefixMap } from './prefixMap.js';
export { KvstoreIPCacheSync, kvstoreOwner, type KvstoreIPCacheSyncOptions, type SyncStats } from './kvstoreSync.js';
export { type KvIpcacheValue, encodeValue, decodeValue } from './codec.js';
export { IpcacheCidrIdentities, POLICY_CIDR_OWNER, type CidrIdentityAllocator } from './cidrIdentities.js';
export { NodeAddressEntries, nodeAddressOwner } from './nodeAddresses.js';
