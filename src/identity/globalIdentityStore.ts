import type { LabelSet } from '../labels/index.js';
import type { Identity } from './identity.js';
import type { IdentityListener } from './identityTable.js';
import type { GcResult } from './kvstoreIdentities.js';

export interface StoreAcquireResult {
  id: number;
  /** Writes lost to other nodes before this one succeeded (for metrics and the bench). */
  conflicts: number;
}

/**
 * Where cluster-wide identities live: the kvstore (KvstoreGlobalIdentities)
 * or the Kubernetes API (src/k8s's KubernetesIdentities). IdentityAllocator
 * adds what is the same in both: reserved and node-local numbers, this node's
 * reference counts, a lookup that never leaves the process.
 *
 * The contract every implementation keeps (src/identity/testing/allocatorSuite.ts
 * runs it against each): equal labels get the same number on every node, also
 * when nodes race; different labels get different numbers; the mirror sees
 * every identity the cluster has, including those other nodes created.
 */
export interface GlobalIdentityStore {
  /** Mirrors the cluster's identities; resolves once the first full listing is in. */
  start(): Promise<void>;
  stop(): Promise<void>;
  /**
   * Finds or creates the identity of `labels` and records this node's use of
   * it where the store keeps such records. `preferredId` is a hint (restore);
   * a store may ignore it when honouring it could split one label set in two.
   */
  acquire(labels: LabelSet, preferredId?: number): Promise<StoreAcquireResult>;
  /** This node's last reference on the identity went. */
  release(labels: LabelSet, id: number): Promise<void>;
  /** The mirror: no round trip. */
  get(id: number): Identity | undefined;
  idOf(labels: LabelSet): number | undefined;
  list(): Identity[];
  subscribe(listener: IdentityListener): () => void;
  /** Tells the allocator this node's usage records may be gone (kvstore: a new node lease) and must be written again. */
  onUsageLost?(listener: (reason: string) => void): () => void;
  /** One cluster-wide GC pass, for stores whose agents collect unused identities themselves (kvstore). */
  collect?(): Promise<GcResult>;
}
