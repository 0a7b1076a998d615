/**
 * The one interface every IPAM allocator implements, shaped for the agent's
 * CNI sequence: ADD → allocate (provisional), endpoint created → confirm,
 * DEL → releaseOwner (idempotent), periodic GC / `tendril ipam check` → gc
 * with the agent's live endpoints. Other subsystems import only this file.
 */

import type { IpFamily } from '../netip/index.js';

export type { IpFamily };

export type IpamMode = 'host-scope' | 'cluster-pool' | 'block' | 'delegated';

/** CNI context a delegated allocator passes to its plugin; ignored by the others. */
export interface CniContext {
  /** CNI_NETNS; host-local does not enter it, so a placeholder is fine there. */
  netns?: string;
  /** CNI_IFNAME, default eth0. */
  ifname?: string;
  /** CNI_ARGS, already serialised (K=V;K=V). */
  args?: string;
}

export interface AllocateRequest {
  /** Container ID or endpoint ID. Every address is indexed by its owner (Calico's handle). */
  owner: string;
  family: IpFamily;
  /** Pool name or CIDR; omitted: the allocator's pools of that family in order. */
  pool?: string;
  /**
   * This address and no other (Cilium's POST /ipam/{ip}, CNI_ARGS IP=). It must
   * lie in a block this host may allocate from; in use or reserved is IPAM_IP_IN_USE.
   */
  ip?: string;
  /**
   * Provisional allocation: released by itself unless `confirm(owner)` comes
   * within this many ms (Cilium's expiration UUID). The deadline is persisted,
   * so it also fires after an agent restart. Omitted: permanent.
   */
  expirationMs?: number;
  cni?: CniContext;
}

export interface Allocation {
  owner: string;
  family: IpFamily;
  /** Bare address, e.g. 10.0.1.7 or fd00::7. */
  ip: string;
  /** Prefix length to configure on the pod side (node CIDR; /32 or /128 in block mode). */
  prefixLength: number;
  /** The node's router address (host addressing), the pod's gateway. */
  gateway?: string;
  /** Name of the pool the address came from. */
  pool: string;
  /** The block / per-node CIDR that holds the address. */
  cidr: string;
  /** Block sequence number at allocation time: releaseIp with it cannot free a re-used address. */
  seq: number;
  /** Epoch ms after which an unconfirmed allocation is released; absent once confirmed. */
  expiresAt?: number;
  /** Block mode: taken from a block affine to another host (strictAffinity=false). */
  borrowed?: boolean;
}

export interface ReleaseIpOptions {
  /** Release only if the address still belongs to this owner. */
  owner?: string;
  /** Release only if the address still carries this sequence number (a stale release is a no-op). */
  seq?: number;
}

export interface GcOptions {
  /** Report only (Calico's `ipam check`); default false releases (`ipam release`). */
  dryRun?: boolean;
}

export interface GcReport {
  /** Owners holding addresses on this node that are not in the live set. */
  stale: Allocation[];
  /** Allocations actually released (empty on a dry run). */
  released: Allocation[];
  /** Live owners with at least one address. */
  liveWithAddresses: number;
}

export interface IpamStats {
  allocations: number;
  releases: number;
  expired: number;
  /** CAS transactions that lost a race and were retried. */
  casRetries: number;
  /** Operations that gave up after the retry bound (surfaced as IPAM_CONFLICT). */
  casGiveUps: number;
  blocksClaimed: number;
  blocksReleased: number;
  borrowed: number;
}

export interface Allocator {
  readonly mode: IpamMode;
  /** This node's name (affinity, handles and expiry are kept per host). */
  readonly host: string;
  /**
   * Claims the node's CIDRs, allocates the router address first, resolves
   * half-done claims of a previous run and re-arms persisted expirations.
   */
  start(): Promise<void>;
  /** Stops timers; state stays in the kvstore for the next start. */
  stop(): Promise<void>;
  allocate(req: AllocateRequest): Promise<Allocation>;
  /**
   * An address of each requested family for one owner, all or none (a
   * family that fails takes back what this call took). Absent: the caller
   * allocates family by family.
   */
  allocateAll?(reqs: readonly AllocateRequest[]): Promise<Allocation[]>;
  /** Makes every provisional address of `owner` permanent. False when the owner has none. */
  confirm(owner: string): Promise<boolean>;
  /** Releases every address of `owner`; an unknown owner is not an error (CNI DEL is idempotent). */
  releaseOwner(owner: string): Promise<Allocation[]>;
  /** Releases one address; false when it is not allocated or the options do not match. */
  releaseIp(ip: string, opts?: ReleaseIpOptions): Promise<boolean>;
  /** Addresses held by `owner` (empty when none). */
  get(owner: string): Promise<Allocation[]>;
  /** Every allocation this node holds, router included. */
  list(): Promise<Allocation[]>;
  /** The node's router address for the family (host addressing); undefined if the family is not configured. */
  routerAddress(family: IpFamily): Allocation | undefined;
  /** Releases provisional allocations whose deadline has passed; returns them. */
  expire(): Promise<Allocation[]>;
  /** Compares this node's allocations with the live owners; never touches a live owner's address. */
  gc(liveOwners: ReadonlySet<string>, opts?: GcOptions): Promise<GcReport>;
  stats(): IpamStats;
  /**
   * The CIDRs this node's pods are numbered from, canonical `addr/len`, for
   * the node registry (other nodes route them here): host-scope its
   * configured CIDRs, cluster-pool the per-node CIDRs it was given, block its
   * affine blocks; delegated IPAM cannot know them and says [].
   */
  podCidrs(): string[];
  /**
   * Calls `cb` after podCidrs() changed (block: a block claimed or released);
   * returns the unsubscribe. Absent: the CIDRs never change after start.
   */
  onPodCidrsChanged?(cb: () => void): () => void;
}
