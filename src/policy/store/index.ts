/** Imported policies kept in the kvstore: restored at agent start, shared by every node of a cluster. */
export { PolicyStore, type PolicyStoreOptions, type PolicyTarget } from './policyStore.js';
export { encodeStoredPolicy, decodeStoredPolicy, policyKeySuffix, type StoredPolicy } from './storedPolicy.js';
