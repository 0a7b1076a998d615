import type { Logger } from '../logging/logger.js';
import { LabelSet, LabelSource } from '../labels/index.js';
import { formatPrefix, type IpPrefix } from '../netip/index.js';
import type { Backend } from '../kvstore/types.js';
import { MAX_GLOBAL_IDENTITY, MIN_GLOBAL_IDENTITY } from './constants.js';
import { IdentityError, IdentityErrorCode } from './errors.js';
import {
  cidrIdentityLabels,
  isGlobalIdentityNumber,
  makeIdentity,
  parseIdentityNumber,
  RESERVED_IDENTITIES,
  reservedIdentity,
  reservedIdentityForLabels,
  scopeOf,
  type Identity,
} from './identity.js';
import type { IdentityEvent, IdentityListener } from './identityTable.js';
import { KeyedSerializer } from '../async/keyedSerializer.js';
import type { GlobalIdentityStore } from './globalIdentityStore.js';
import { KvstoreGlobalIdentities } from './kvstoreGlobalIdentities.js';
import type { GcResult } from './kvstoreIdentities.js';
import { LocalIdentityAllocator } from './localAllocator.js';
import type { LeaseProvider } from './nodeLease.js';

export interface IdentityAllocatorOptions {
  backend: Backend;
  /** This node's name; it names the node's usage keys. */
  nodeName: string;
  /** The node's kvstore session; usage keys live on its lease. */
  lease: LeaseProvider;
  /** Key prefix; default `tendril/state/identities/v1/`. */
  keyPrefix?: string;
  /** Lost CAS races tolerated per allocation before IDENTITY_CONFLICT (default 32). */
  maxRetries?: number;
  /** Period of the cluster-wide GC pass; 0 disables the timer (default 60 s). */
  gcIntervalMs?: number;
  minId?: number;
  maxId?: number;
  logger?: Logger;
}

/** An allocator over another store of cluster-wide identities (src/k8s's KubernetesIdentities). */
export interface StoreIdentityAllocatorOptions {
  store: GlobalIdentityStore;
  nodeName: string;
  /** Period of the cluster-wide GC pass when the store has one; 0 disables the timer (default 60 s). */
  gcIntervalMs?: number;
  logger?: Logger;
}

export interface AllocateOptions {
  /** Ask for this number (restore after a restart); used when the labels have no identity yet and it is free. */
  preferredId?: number;
}

export interface Allocation {
  identity: Identity;
  /** First reference on this node (the caller should program it into the datapath). */
  isNew: boolean;
}

interface Held {
  identity: Identity;
  refs: number;
}

/** Throws INVALID_ID unless minId..maxId lies within the cluster-wide range. */
export function checkGlobalRange(minId: number, maxId: number): void {
  if (!(isGlobalIdentityNumber(minId) && isGlobalIdentityNumber(maxId) && minId <= maxId)) {
    throw new IdentityError(IdentityErrorCode.INVALID_ID, `identity range ${minId}..${maxId} must lie within ${MIN_GLOBAL_IDENTITY}..${MAX_GLOBAL_IDENTITY}`);
  }
}

const NODE_NAME = /^[a-z0-9]([-a-z0-9_.]{0,251}[a-z0-9])?$/i;

/**
 * Security identities for label sets (Cilium's CachingIdentityAllocator).
 *
 * - reserved labels resolve to the fixed reserved numbers;
 * - label sets with a `cidr:` label get a node-local number;
 * - everything else gets a cluster-wide number from its GlobalIdentityStore:
 *   the kvstore (KvstoreGlobalIdentities, built from IdentityAllocatorOptions)
 *   or the Kubernetes API (src/k8s): the same labels → the same number on
 *   every node.
 *
 * Each node keeps a local reference count per identity, so repeated
 * allocations and releases of a held identity cost no round trip; the store
 * hears of the first reference (acquire) and the last (release). In kvstore
 * mode the node keeps one usage key per identity it uses, dropped with the
 * last local reference, and the identity is deleted once no node uses it
 * (immediately when this node was the last, otherwise by the periodic GC,
 * which also catches identities held only by dead nodes whose leases expired).
 *
 * Callers pass identity-relevant labels only (LabelFilter.split).
 */
export class IdentityAllocator {
  readonly nodeName: string;
  readonly #store: GlobalIdentityStore;
  readonly #local = new LocalIdentityAllocator();
  readonly #held = new Map<string, Held>();
  /** Held identity number → its label set key, so release by number is O(1). */
  readonly #keyById = new Map<number, string>();
  readonly #serial = new KeyedSerializer();
  readonly #logger: Logger | undefined;
  readonly #gcIntervalMs: number;
  #gcTimer: NodeJS.Timeout | undefined;
  #unsubscribeUsageLost: (() => void) | undefined;
  #started = false;
  #closed = false;
  /** Store writes lost to other nodes, for metrics and the bench. */
  conflicts = 0;

  constructor(options: IdentityAllocatorOptions | StoreIdentityAllocatorOptions) {
    if (!NODE_NAME.test(options.nodeName)) {
      throw new IdentityError(
        IdentityErrorCode.INVALID_NODE_NAME,
        `node name ${JSON.stringify(options.nodeName)} must be 1-253 letters, digits, '-', '_' or '.', starting and ending alphanumeric`,
      );
    }
    this.nodeName = options.nodeName;
    this.#logger = options.logger;
    this.#gcIntervalMs = options.gcIntervalMs ?? 60_000;
    if ('store' in options) {
      this.#store = options.store;
    } else {
      const minId = options.minId ?? MIN_GLOBAL_IDENTITY;
      const maxId = options.maxId ?? MAX_GLOBAL_IDENTITY;
      checkGlobalRange(minId, maxId);
      this.#store = new KvstoreGlobalIdentities({
        backend: options.backend,
        nodeName: options.nodeName,
        lease: options.lease,
        minId,
        maxId,
        maxRetries: options.maxRetries ?? 32,
        ...(options.keyPrefix === undefined ? {} : { keyPrefix: options.keyPrefix }),
        ...(options.logger === undefined ? {} : { logger: options.logger }),
      });
    }
    this.#store.subscribe((events) => this.#onTableEvents(events));
  }

  /** Mirrors the cluster's identities, re-registers usage when the store lost it, starts GC. */
  async start(): Promise<void> {
    if (this.#started) return;
    this.#started = true;
    await this.#store.start();
    this.#unsubscribeUsageLost = this.#store.onUsageLost?.((reason) => this.#reassertAll(reason));
    if (this.#gcIntervalMs > 0 && this.#store.collect !== undefined) {
      this.#gcTimer = setInterval(() => {
        this.gc().catch((err: unknown) => this.#logger?.warn({ err }, 'identity GC pass failed'));
      }, this.#gcIntervalMs);
      this.#gcTimer.unref();
    }
  }

  #checkOpen(): void {
    if (this.#closed) throw new IdentityError(IdentityErrorCode.CLOSED, 'identity allocator is closed');
  }

  #checkLabels(labels: LabelSet): void {
    if (!(labels instanceof LabelSet)) {
      throw new IdentityError(IdentityErrorCode.INVALID_LABELS, 'labels must be a LabelSet (parse them with src/labels first)');
    }
    if (labels.isEmpty()) throw new IdentityError(IdentityErrorCode.INVALID_LABELS, 'an identity needs at least one label');
    const any = labels.toArray().find((l) => l.source === LabelSource.Any);
    if (any !== undefined) {
      throw new IdentityError(IdentityErrorCode.INVALID_LABELS, `"any:${any.key}" is a selector, not a label an identity can carry`);
    }
  }

  /** Resolves labels to an identity and takes one reference on it. */
  async allocate(labels: LabelSet, options: AllocateOptions = {}): Promise<Allocation> {
    this.#checkOpen();
    this.#checkLabels(labels);
    if (labels.hasSource(LabelSource.Cidr)) return this.#local.allocate(labels, options.preferredId);
    const reserved = reservedIdentityForLabels(labels);
    if (reserved !== undefined) return { identity: reserved, isNew: false };
    const key = labels.toString();
    const held = this.#held.get(key);
    if (held !== undefined && held.refs > 0) {
      held.refs++;
      return { identity: held.identity, isNew: false };
    }
    return this.#serial.run(key, async () => {
      this.#checkOpen();
      const again = this.#held.get(key);
      if (again !== undefined) {
        again.refs++;
        return { identity: again.identity, isNew: false };
      }
      const res = await this.#store.acquire(labels, options.preferredId);
      this.conflicts += res.conflicts;
      const identity = makeIdentity(res.id, labels);
      this.#held.set(key, { identity, refs: 1 });
      this.#keyById.set(identity.id, key);
      return { identity, isNew: true };
    });
  }

  /**
   * Drops one reference. Returns true when it was this node's last: the
   * node's usage key is then gone and, if no other node uses the identity,
   * so is the identity. Reserved identities are not counted (always false).
   */
  async release(identity: Identity | number): Promise<boolean> {
    this.#checkOpen();
    const id = typeof identity === 'number' ? parseIdentityNumber(identity) : identity.id;
    const scope = scopeOf(id);
    if (scope === 'reserved') return false;
    if (scope === 'local') return this.#local.release(id);
    const key = this.#keyById.get(id);
    const held = key === undefined ? undefined : this.#held.get(key);
    if (key === undefined || held === undefined || held.refs === 0) {
      throw new IdentityError(IdentityErrorCode.NOT_ALLOCATED, `identity ${id} holds no reference on node ${this.nodeName}`);
    }
    held.refs--;
    if (held.refs > 0) return false;
    await this.#serial.run(key, async () => {
      // An allocate queued behind us may already have taken a new reference.
      if (held.refs > 0 || this.#held.get(key) !== held) return;
      this.#held.delete(key);
      if (this.#keyById.get(held.identity.id) === key) this.#keyById.delete(held.identity.id);
      await this.#store.release(held.identity.labels, held.identity.id);
    });
    return true;
  }

  /**
   * Re-takes the identities of restored endpoints, asking for their old
   * numbers. A number comes back unchanged unless another node re-used it
   * for other labels while this node was away (then a new one is allocated).
   */
  async restore(entries: ReadonlyArray<{ id: number; labels: LabelSet }>): Promise<Identity[]> {
    return Promise.all(entries.map(async (e) => (await this.allocate(e.labels, { preferredId: e.id })).identity));
  }

  /**
   * Node-local CIDR identities for policy prefixes, synchronously (the policy
   * engine's CidrIdentitySource): one reference per prefix per call.
   */
  acquireCidrIdentities(prefixes: readonly IpPrefix[]): Identity[] {
    this.#checkOpen();
    return prefixes.map((p) => this.#local.allocate(cidrIdentityLabels(p)).identity);
  }

  /** Drops one reference per prefix; returns the numbers whose last reference went. */
  releaseCidrIdentities(prefixes: readonly IpPrefix[]): number[] {
    const gone: number[] = [];
    for (const p of prefixes) {
      const identity = this.#local.lookupByLabels(cidrIdentityLabels(p));
      if (identity === undefined) {
        throw new IdentityError(IdentityErrorCode.NOT_ALLOCATED, `no CIDR identity is held for ${formatPrefix(p)}`);
      }
      if (this.#local.release(identity.id)) gone.push(identity.id);
    }
    return gone;
  }

  /** Same as lookupById (the policy engine's IdentityView). */
  get(id: number): Identity | undefined {
    return this.lookupById(id);
  }

  lookupById(id: number): Identity | undefined {
    const reserved = reservedIdentity(id);
    if (reserved !== undefined) return reserved;
    if (scopeOf(id) === 'local') return this.#local.lookupById(id);
    const fromTable = this.#store.get(id);
    if (fromTable !== undefined) return fromTable;
    const key = this.#keyById.get(id);
    return key === undefined ? undefined : this.#held.get(key)?.identity;
  }

  lookupByLabels(labels: LabelSet): Identity | undefined {
    const reserved = reservedIdentityForLabels(labels);
    if (reserved !== undefined) return reserved;
    if (labels.hasSource(LabelSource.Cidr)) return this.#local.lookupByLabels(labels);
    const held = this.#held.get(labels.toString());
    if (held !== undefined) return held.identity;
    const id = this.#store.idOf(labels);
    return id === undefined ? undefined : this.#store.get(id);
  }

  /** Reserved, cluster-wide (as mirrored) and node-local identities, by number. */
  list(): Identity[] {
    const byId = new Map<number, Identity>();
    for (const i of RESERVED_IDENTITIES) byId.set(i.id, i);
    for (const i of this.#store.list()) byId.set(i.id, i);
    for (const h of this.#held.values()) byId.set(h.identity.id, h.identity);
    for (const i of this.#local.list()) byId.set(i.id, i);
    return [...byId.values()].sort((a, b) => a.id - b.id);
  }

  /** This node's references on an identity (0 when it holds none). */
  references(id: number): number {
    if (scopeOf(id) === 'local') return this.#local.references(id);
    const key = this.#keyById.get(id);
    return key === undefined ? 0 : (this.#held.get(key)?.refs ?? 0);
  }

  /** Cluster-wide identity add/delete events (from the mirrored table). */
  subscribe(listener: IdentityListener): () => void {
    return this.#store.subscribe(listener);
  }

  /**
   * One cluster-wide GC pass (also run on a timer), in kvstore mode. With the
   * Kubernetes store the operator collects identities, not the agents.
   */
  gc(): Promise<GcResult> {
    this.#checkOpen();
    if (this.#store.collect === undefined) {
      return Promise.reject(new IdentityError(IdentityErrorCode.UNSUPPORTED, 'this identity store is garbage-collected by the operator, not by agents'));
    }
    return this.#store.collect();
  }

  #onTableEvents(events: readonly IdentityEvent[]): void {
    for (const ev of events) {
      if (ev.type !== 'delete') continue;
      const key = ev.identity.labels.toString();
      const held = this.#held.get(key);
      // Deleted while we hold it: our usage key vanished (lease expired during a partition)
      // and a GC ran. Take it back, asking for the same number.
      if (held !== undefined && held.refs > 0 && held.identity.id === ev.identity.id) void this.#reassert(key, 'identity deleted while in use');
    }
  }

  #reassertAll(reason: string): void {
    for (const key of this.#held.keys()) void this.#reassert(key, reason);
  }

  async #reassert(key: string, reason: string): Promise<void> {
    await this.#serial
      .run(key, async () => {
        const held = this.#held.get(key);
        if (held === undefined || held.refs === 0 || this.#closed) return;
        const res = await this.#store.acquire(held.identity.labels, held.identity.id);
        if (res.id !== held.identity.id) {
          this.#logger?.error({ labels: key, old: held.identity.id, new: res.id, reason }, 'identity number changed while in use');
          this.#keyById.delete(held.identity.id);
          held.identity = makeIdentity(res.id, held.identity.labels);
          this.#keyById.set(res.id, key);
        }
      })
      .catch((err: unknown) => this.#logger?.error({ err, labels: key, reason }, 'could not re-register identity usage'));
  }

  /**
   * Stops watching and GC. Usage keys stay until the node lease ends (revoke
   * it for a clean shutdown), so a restarting agent keeps its numbers.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#gcTimer !== undefined) clearInterval(this.#gcTimer);
    this.#unsubscribeUsageLost?.();
    await this.#serial.idle();
    await this.#store.stop();
  }
}
