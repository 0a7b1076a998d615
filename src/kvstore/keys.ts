/**
 * The kvstore key layout, identical in both
 * backends. Every key lives under `tendril/`; each kind of state carries a
 * layout version (`v1`) so a future format can live beside the old one during
 * an upgrade, as Cilium's `cilium/state/identities/v1/` does.
 */

export const ROOT = 'tendril/';

const STATE = `${ROOT}state/`;
const IPAM = `${ROOT}ipam/v1/`;

export const IDENTITIES_PREFIX = `${STATE}identities/v1/`;
/** `…/id/<n>` → the identity's labels (the allocation master key). */
export const IDENTITY_ID_PREFIX = `${IDENTITIES_PREFIX}id/`;
/** `…/value/<sorted labels>/<node>` → identity number, one slave key per node using it. */
export const IDENTITY_VALUE_PREFIX = `${IDENTITIES_PREFIX}value/`;
/** `tendril/state/ip/v1/<ip>` → identity and tunnel endpoint, leased by the writing node. */
export const IPCACHE_PREFIX = `${STATE}ip/v1/`;
/** `tendril/state/nodes/v1/<name>` → node record, leased by that node. */
export const NODES_PREFIX = `${STATE}nodes/v1/`;
/** `tendril/state/policies/v1/<kind>/<namespace>/<name>` → an imported policy's document and its hash (not leased: policies outlive every agent). */
export const POLICIES_PREFIX = `${STATE}policies/v1/`;
export const IPAM_BLOCKS_PREFIX = `${IPAM}blocks/`;
export const IPAM_AFFINITY_PREFIX = `${IPAM}affinity/`;
export const IPAM_HANDLES_PREFIX = `${IPAM}handles/`;

export function identityIdKey(id: number): string {
  return `${IDENTITY_ID_PREFIX}${id}`;
}

/** `sortedLabels` must already be in canonical (sorted, joined) form; see src/labels. */
export function identityValueKey(sortedLabels: string, node?: string): string {
  return node === undefined ? `${IDENTITY_VALUE_PREFIX}${sortedLabels}` : `${IDENTITY_VALUE_PREFIX}${sortedLabels}/${node}`;
}

export function ipcacheKey(ip: string): string {
  return `${IPCACHE_PREFIX}${ip}`;
}

export function nodeKey(name: string): string {
  return `${NODES_PREFIX}${name}`;
}

/** CIDRs contain '/', which stays as-is: keys are flat strings, not paths. */
export function ipamBlockKey(cidr: string): string {
  return `${IPAM_BLOCKS_PREFIX}${cidr}`;
}

export function ipamAffinityKey(host: string, cidr: string): string {
  return `${IPAM_AFFINITY_PREFIX}${host}/${cidr}`;
}

export function ipamHandleKey(handleId: string): string {
  return `${IPAM_HANDLES_PREFIX}${handleId}`;
}
