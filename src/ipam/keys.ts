import { IPAM_AFFINITY_PREFIX, IPAM_BLOCKS_PREFIX, IPAM_HANDLES_PREFIX, ROOT, ipamAffinityKey, ipamBlockKey, ipamHandleKey } from '../kvstore/keys.js';

/**
 * IPAM's kvstore keys. Blocks, affinities and handles come from kvstore/keys.ts; the
 * two IPAM adds are here so the kvstore module need not know about them:
 * - `expiry/<host>/<owner>`: deadline of a provisional allocation, indexed by
 *   host so an agent finds its own after a restart with one prefix listing;
 * - `delegated/<host>/<owner>`: what a delegated IPAM plugin handed out, so
 *   release, list and GC survive a restart without asking the plugin, and
 *   `delegated-expiry/<host>/<owner>` for its provisional deadlines.
 */
export { IPAM_AFFINITY_PREFIX, IPAM_BLOCKS_PREFIX, IPAM_HANDLES_PREFIX };

export const IPAM_EXPIRY_PREFIX = `${ROOT}ipam/v1/expiry/`;
export const IPAM_DELEGATED_PREFIX = `${ROOT}ipam/v1/delegated/`;
/**
 * `host-handles/<host>/<owner>`: a copy of the handle, written in the same
 * transaction, so a host lists its own allocations (list, GC, host removal)
 * without reading every handle of the cluster.
 */
export const IPAM_HOST_HANDLES_PREFIX = `${ROOT}ipam/v1/host-handles/`;

export function hostHandleKey(host: string, owner: string): string {
  return `${IPAM_HOST_HANDLES_PREFIX}${host}/${owner}`;
}

export function hostHandlesPrefix(host: string): string {
  return `${IPAM_HOST_HANDLES_PREFIX}${host}/`;
}

/** Deadlines of delegated provisional allocations, apart so the two sweeps never see each other's owners. */
export const IPAM_DELEGATED_EXPIRY_PREFIX = `${ROOT}ipam/v1/delegated-expiry/`;

export const blockKey = ipamBlockKey;
export const affinityKey = ipamAffinityKey;
export const handleKey = ipamHandleKey;

export function hostAffinityPrefix(host: string): string {
  return `${IPAM_AFFINITY_PREFIX}${host}/`;
}

export function expiryKey(host: string, owner: string): string {
  return `${IPAM_EXPIRY_PREFIX}${host}/${owner}`;
}

export function hostExpiryPrefix(host: string): string {
  return `${IPAM_EXPIRY_PREFIX}${host}/`;
}

export function delegatedKey(host: string, owner: string): string {
  return `${IPAM_DELEGATED_PREFIX}${host}/${owner}`;
}

export function hostDelegatedPrefix(host: string): string {
  return `${IPAM_DELEGATED_PREFIX}${host}/`;
}

export function delegatedExpiryKey(host: string, owner: string): string {
  return `${IPAM_DELEGATED_EXPIRY_PREFIX}${host}/${owner}`;
}

export function hostDelegatedExpiryPrefix(host: string): string {
  return `${IPAM_DELEGATED_EXPIRY_PREFIX}${host}/`;
}
