import type { Logger } from '../logging/logger.js';
import type { Backend, KeyValue } from '../kvstore/types.js';
import { MAX_KEY_BYTES } from '../kvstore/validate.js';
import { IdentityError, IdentityErrorCode } from './errors.js';
import type { IdentityKeys } from './keys.js';
import { withLease, type LeaseProvider } from './nodeLease.js';

/**
 * The cluster-wide allocation protocol over the kvstore, without any local
 * caching (IdentityAllocator adds that). Every step is a compare-and-swap
 * transaction, so any number of nodes may run it at once:
 *
 * acquire(labels):
 *   - number n known (watched table, or read after a lost race): one txn
 *     "index says n ∧ id/n holds these labels" → re-put the index (bumping
 *     its modRevision, which fences a concurrent GC) and put this node's
 *     usage key on its lease;
 *   - labels unknown: pick a free n and one txn "no index ∧ no id/n" →
 *     create master, index and usage key together.
 *   A failed compare means another node got there first: read the index and
 *   retry, at most `maxRetries` times. The common cases cost one round trip.
 *
 * collect: an identity whose index has no usage key is deleted with a txn
 * that compares the index's modRevision from before the usage listing, so
 * an allocation racing with the GC (which re-puts the index) always wins.
 */
export interface KvstoreIdentitiesOptions {
  backend: Backend;
  keys: IdentityKeys;
  nodeName: string;
  lease: LeaseProvider;
  minId: number;
  maxId: number;
  maxRetries: number;
  logger?: Logger;
  /** Numbers known to be taken (from the watched identity table) to avoid doomed picks. */
  knownIds?: () => Iterable<number>;
  /** The number the watched table has for a label set, to try joining it in one transaction. */
  knownIdOf?: (labels: string) => number | undefined;
  random?: () => number;
}

export interface AcquireResult {
  id: number;
  /** This call created the identity (no node had it before). */
  created: boolean;
  /** Transactions that lost a race before this one succeeded. */
  conflicts: number;
}

export interface GcResult {
  /** Identities deleted by this pass. */
  deleted: number[];
  /** Identities still used by at least one node. */
  inUse: number;
}

export class KvstoreIdentities {
  readonly #o: KvstoreIdentitiesOptions;
  readonly #random: () => number;

  constructor(options: KvstoreIdentitiesOptions) {
    this.#o = options;
    this.#random = options.random ?? Math.random;
  }

  /** Throws INVALID_LABELS when the label set would make a key etcd refuses. */
  checkKeySize(labels: string): void {
    const bytes = Buffer.byteLength(this.#o.keys.usage(labels, this.#o.nodeName), 'utf8');
    if (bytes > MAX_KEY_BYTES) {
      throw new IdentityError(
        IdentityErrorCode.INVALID_LABELS,
        `identity labels are ${Buffer.byteLength(labels)} bytes in sorted form; too many or too long labels for a kvstore key (limit ${MAX_KEY_BYTES} bytes)`,
      );
    }
  }

  async acquire(labels: string, preferredId?: number): Promise<AcquireResult> {
    this.checkKeySize(labels);
    const taken = new Set<number>();
    let conflicts = 0;
    // Optimistic: one transaction when the watched table knows the number (or
    // the labels are new), reads only after a lost race.
    let hint = this.#o.knownIdOf?.(labels);
    for (let attempt = 0; attempt <= this.#o.maxRetries; attempt++) {
      if (hint !== undefined) {
        if (await this.#join(labels, hint)) return { id: hint, created: false, conflicts };
        conflicts++;
        // The join's compare failed: check index and master (and repair them) before the next try.
        hint = await this.#readIndex(labels);
        continue;
      }
      const n = this.#pick(taken, attempt === 0 ? preferredId : undefined);
      if (await this.#create(labels, n)) return { id: n, created: true, conflicts };
      // Either another node created this label set (the index says which number) or n is taken.
      taken.add(n);
      conflicts++;
      const index = await this.#o.backend.get(this.#o.keys.index(labels));
      hint = index === undefined ? undefined : Number(index.value);
    }
    throw new IdentityError(
      IdentityErrorCode.CONFLICT,
      `could not allocate an identity for ${labels} after ${this.#o.maxRetries + 1} attempts (${conflicts} lost races)`,
    );
  }

  /** Takes a usage reference on an existing identity: index and master must still say labels ↔ n. */
  async #join(labels: string, n: number): Promise<boolean> {
    const { backend, keys, nodeName, lease } = this.#o;
    return withLease(lease, async (leaseId) => {
      const res = await backend.txn({
        compare: [
          { key: keys.index(labels), target: 'value', value: String(n) },
          { key: keys.id(n), target: 'value', value: labels },
        ],
        success: [
          // Re-putting the index bumps its modRevision: the fence a concurrent GC checks.
          { type: 'put', key: keys.index(labels), value: String(n) },
          { type: 'put', key: keys.usage(labels, nodeName), value: String(n), lease: leaseId },
        ],
      });
      return res.succeeded;
    });
  }

  /** Creates master, index and usage key together, if neither the labels nor n are taken. */
  async #create(labels: string, n: number): Promise<boolean> {
    const { backend, keys, nodeName, lease } = this.#o;
    return withLease(lease, async (leaseId) => {
      const res = await backend.txn({
        compare: [
          { key: keys.index(labels), target: 'exists', value: false },
          { key: keys.id(n), target: 'exists', value: false },
        ],
        success: [
          { type: 'put', key: keys.id(n), value: labels },
          { type: 'put', key: keys.index(labels), value: String(n) },
          { type: 'put', key: keys.usage(labels, nodeName), value: String(n), lease: leaseId },
        ],
      });
      return res.succeeded;
    });
  }

  /**
   * The number the index holds, after checking its master. A missing master
   * (hand-edited store) is re-created; an index pointing at another label
   * set's master is dropped. Undefined when the labels have no usable index.
   */
  async #readIndex(labels: string): Promise<number | undefined> {
    const { backend, keys } = this.#o;
    const index = await backend.get(keys.index(labels));
    if (index === undefined) return undefined;
    const n = Number(index.value);
    const master = await backend.get(keys.id(n));
    if (master?.value === labels) return n;
    const fence = { key: index.key, target: 'modRevision' as const, value: index.modRevision };
    if (master === undefined) {
      this.#o.logger?.error({ labels, id: n }, 'identity index without its master key; re-creating the master');
      await backend.txn({ compare: [fence, { key: keys.id(n), target: 'exists', value: false }], success: [{ type: 'put', key: keys.id(n), value: labels }] });
      return n;
    }
    this.#o.logger?.error({ labels, id: n, master: master.value }, 'identity index points at another label set; removing it');
    await backend.txn({ compare: [fence], success: [{ type: 'delete', key: index.key }] });
    return undefined;
  }

  /** Chooses a number: the preferred one if usable, else a random free one (random start, linear probe). */
  #pick(taken: Set<number>, preferred?: number): number {
    const { minId, maxId } = this.#o;
    const known = new Set(this.#o.knownIds?.() ?? []);
    const free = (n: number): boolean => !taken.has(n) && !known.has(n);
    if (preferred !== undefined && preferred >= minId && preferred <= maxId && !taken.has(preferred)) return preferred;
    const span = maxId - minId + 1;
    const start = Math.floor(this.#random() * span);
    // The watched table is only a hint (it may lag a release); the numbers this
    // call saw taken are facts. Exhausted only when the facts say so.
    for (const ok of [free, (n: number) => !taken.has(n)]) {
      for (let i = 0; i < span; i++) {
        const n = minId + ((start + i) % span);
        if (ok(n)) return n;
      }
    }
    throw new IdentityError(IdentityErrorCode.EXHAUSTED, `every identity in ${minId}..${maxId} is taken`);
  }

  /** Removes this node's usage key for the label set. */
  async dropUsage(labels: string): Promise<void> {
    await this.#o.backend.delete(this.#o.keys.usage(labels, this.#o.nodeName));
  }

  /** Deletes one identity if no node uses it any more; returns its number when deleted. */
  async collectOne(labels: string): Promise<number | undefined> {
    const { backend, keys } = this.#o;
    const index = await backend.get(keys.index(labels));
    if (index === undefined) return undefined;
    const users = await backend.list(keys.usagePrefix(labels));
    if (users.kvs.length > 0) return undefined;
    return (await this.#deleteFenced(index, labels)) ? Number(index.value) : undefined;
  }

  async #deleteFenced(index: KeyValue, labels: string): Promise<boolean> {
    const { backend, keys } = this.#o;
    const n = Number(index.value);
    const res = await backend.txn({
      compare: [
        { key: index.key, target: 'modRevision', value: index.modRevision },
        { key: keys.id(n), target: 'value', value: labels },
      ],
      success: [
        { type: 'delete', key: index.key },
        { type: 'delete', key: keys.id(n) },
      ],
    });
    return res.succeeded;
  }

  /**
   * One GC pass over every identity. Safe to run on every node at once: each
   * deletion is fenced as in collectOne. Usage keys of dead nodes are already
   * gone with their leases, so their identities are collected here.
   */
  async collectAll(): Promise<GcResult> {
    const { backend, keys } = this.#o;
    const snapshot = await backend.list(keys.prefix);
    const masters = new Map<number, KeyValue>();
    const indexes = new Map<string, KeyValue>();
    const used = new Set<string>();
    for (const kv of snapshot.kvs) {
      const id = keys.parseIdKey(kv.key);
      if (id !== undefined) {
        masters.set(id, kv);
        continue;
      }
      const v = keys.parseValueKey(kv.key);
      if (v === undefined) continue;
      if (v.node === undefined) indexes.set(v.labels, kv);
      else used.add(v.labels);
    }
    const deleted: number[] = [];
    let inUse = 0;
    for (const [labels, index] of indexes) {
      if (used.has(labels)) {
        inUse++;
        continue;
      }
      if (await this.#deleteFenced(index, labels)) deleted.push(Number(index.value));
    }
    // Masters without an index cannot come from acquire (they are written together);
    // remove such leftovers of a hand-edited or half-restored store, fenced likewise.
    for (const [id, master] of masters) {
      if (indexes.get(master.value)?.value === String(id)) continue;
      const res = await backend.txn({
        compare: [
          { key: master.key, target: 'modRevision', value: master.modRevision },
          { key: keys.index(master.value), target: 'exists', value: false },
        ],
        success: [{ type: 'delete', key: master.key }],
      });
      if (res.succeeded) deleted.push(id);
    }
    return { deleted: deleted.sort((a, b) => a - b), inUse };
  }
}
