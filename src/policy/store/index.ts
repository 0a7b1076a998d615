/** Imported policies kept in the kvstore: restored at agent start, shared by every node of a cluster. */
export { POLICIES_REVISION_KEY, PolicyStore, type PolicyStoreOptions, type PolicyTarget } from './policyStore.js';
export { encodeStoredPolicy, decodeStoredPolicy, policyKeySuffix, type StoredPolicy } from './storedPolicy.js';
