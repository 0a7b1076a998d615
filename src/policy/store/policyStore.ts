/**
 * PolicyStore: imported policies kept in the kvstore, so they outlive the
 * agent (embedded store) and reach every node of a cluster (etcd).
 *
 * - Import and delete change the engine first (parsing and validation are
 *   all-or-nothing as before), then write the store; a store that does not
 *   take the write rolls the engine back to the versions it had, and the
 *   caller gets a PolicyStoreError: the API never reports success for a
 *   policy that would be gone after a restart.
 * - start() lists the store and imports every policy in one engine call; the
 *   agent runs it before any endpoint is restored, so a restored endpoint's
 *   first regeneration already holds them (the pinned maps keep enforcing
 *   meanwhile and are never rewritten with an empty policy set).
 * - Every node watches the prefix and applies what other nodes import or
 *   delete. Its own writes come back as echoes: skipped, by the revision it
 *   wrote at and by content hash (a put whose document is already in force
 *   changes nothing).
 *
 * - Every transaction that changes policies also writes a marker key outside
 *   the policy prefix (`tendril/state/policies-meta/v1/revision`), so the
 *   kvstore revision of the last change is the marker's mod revision, deletes
 *   included (a deleted key leaves no mod revision behind to list).
 *   `clusterRevision` is that revision as far as this node has applied the
 *   changes: one watch covers the policies and the marker, so a node reports
 *   a revision only once it holds the policies of that revision, and every
 *   node that has caught up reports the same number.
 *
 * Every change, local or from the watch, runs in one queue, so a rollback
 * never interleaves with another change. The store depends on the engine only
 * through PolicyTarget (PolicyRevisions is one), never on the agent.
 */
import { Serializer } from '../../async/keyedSerializer.js';
import type { Logger } from '../../logging/logger.js';
import { POLICIES_PREFIX } from '../../kvstore/keys.js';
import type { Backend, KeyValue, TxnOp, WatchEvent } from '../../kvstore/types.js';
import { MAX_TXN_OPS, MAX_VALUE_BYTES } from '../../kvstore/validate.js';
import { ListWatcher } from '../../identity/index.js';
import { PolicyArgumentError, PolicyNotFoundError, PolicyStoreError, isPolicyError } from '../errors.js';
import { describeFilter, type PolicyFilter } from '../repository.js';
import { withStaged } from '../staged.js';
import { formatPolicyName, type Policy, type PolicyName } from '../rule.js';
import { parsePolicyDocuments, parsePolicyText } from '../ruleParser.js';
import { decodeStoredPolicy, encodeStoredPolicy, policyKeySuffix } from './storedPolicy.js';

/** What the store applies changes to (PolicyRevisions, or the engine itself). */
export interface PolicyTarget<I extends { readonly policies: readonly PolicyName[] }, D extends { readonly deleted: readonly PolicyName[] }> {
  upsertPolicies(policies: readonly Policy[]): I;
  /** PolicyNotFoundError when nothing matches. */
  deletePolicies(filter: PolicyFilter): D;
  policies(filter?: PolicyFilter): Policy[];
}

export interface PolicyStoreOptions<I extends { readonly policies: readonly PolicyName[] }, D extends { readonly deleted: readonly PolicyName[] }> {
  backend: Backend;
  target: PolicyTarget<I, D>;
  /** Default `tendril/state/policies/v1/`; tests pass a private prefix. */
  keyPrefix?: string;
  /**
   * The marker key every change also writes; must lie outside keyPrefix.
   * Default: POLICIES_REVISION_KEY, or `<keyPrefix without its last />-meta/revision` with a keyPrefix.
   */
  revisionKey?: string;
  logger?: Logger;
}

/** What the engine holds for a key, and the store revision that state stands for. */
interface Applied {
  readonly name: PolicyName;
  readonly hash: string;
  readonly revision: number;
}

/** The marker written with every policy change: its mod revision is the revision of the last change. */
export const POLICIES_REVISION_KEY = 'tendril/state/policies-meta/v1/revision';

/** The longest common start of two keys: the one prefix whose watch sees both. */
function commonPrefix(a: string, b: string): string {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return a.slice(0, i);
}

/** Bytes of values per transaction: well below etcd's 1.5 MiB request limit with the keys and framing. */
const TXN_VALUE_BYTES = 1024 * 1024;

export class PolicyStore<I extends { readonly policies: readonly PolicyName[] }, D extends { readonly deleted: readonly PolicyName[] }> {
  readonly #backend: Backend;
  readonly #target: PolicyTarget<I, D>;
  readonly #prefix: string;
  readonly #revisionKey: string;
  readonly #log: Logger | undefined;
  readonly #watcher: ListWatcher;
  readonly #applied = new Map<string, Applied>();
  /** Revision of the last delete of a key that is applied no more: older events for it are stale. */
  readonly #deletedAt = new Map<string, number>();
  readonly #serial = new Serializer();
  readonly #changeListeners = new Set<() => void>();
  #stopped = false;
  #clusterRevision = 0;

  constructor(options: PolicyStoreOptions<I, D>) {
    this.#backend = options.backend;
    this.#target = options.target;
    this.#prefix = options.keyPrefix ?? POLICIES_PREFIX;
    this.#revisionKey = options.revisionKey ?? (options.keyPrefix === undefined ? POLICIES_REVISION_KEY : `${options.keyPrefix.replace(/\/$/, '')}-meta/revision`);
    if (this.#revisionKey.startsWith(this.#prefix)) throw new Error(`policy store: the revision key ${this.#revisionKey} must lie outside the policy prefix ${this.#prefix}`);
    this.#log = options.logger;
    this.#watcher = new ListWatcher(
      this.#backend,
      // One watch for the policies and the marker: their events come in revision order, a transaction's together.
      commonPrefix(this.#prefix, this.#revisionKey),
      {
        onReset: (kvs) => void this.#enqueue(() => this.#reset(kvs)),
        onEvents: (events) => void this.#enqueue(() => this.#apply(events)),
      },
      this.#log === undefined ? {} : { logger: this.#log },
    );
  }

  key(name: PolicyName): string {
    return `${this.#prefix}${policyKeySuffix(name)}`;
  }

  /** The policies in force because the store holds them: key, name and content hash. */
  storedPolicies(): Array<{ key: string; name: PolicyName; hash: string }> {
    return [...this.#applied].map(([key, a]) => ({ key, name: a.name, hash: a.hash }));
  }

  /** Called after every change the store's queue ran (imports, deletes, the watch's), inside the queue. */
  onChange(listener: () => void): () => void {
    this.#changeListeners.add(listener);
    return () => this.#changeListeners.delete(listener);
  }

  /** Runs `fn` in the store's queue: no import, delete or watch event interleaves with it. */
  exclusive<T>(fn: () => T | Promise<T>): Promise<T> {
    return this.#enqueue(fn);
  }

  /** The kvstore revision of the last policy change (any node's) this node has applied; 0 before any. */
  get clusterRevision(): number {
    return this.#clusterRevision;
  }

  /** Imports every stored policy, then follows the prefix; resolves once the stored policies are in the engine. */
  async start(): Promise<void> {
    await this.#watcher.start();
    await this.#enqueue(() => undefined);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#watcher.stop();
    await this.#enqueue(() => undefined);
  }

  /** Parses and imports policy text, all or nothing, and stores it; PolicyStoreError (engine rolled back) when the store fails. */
  async importText(text: string): Promise<I> {
    // Parse errors reach the caller before anything is queued or changed.
    return this.importPolicies(parsePolicyText(text));
  }

  async importPolicies(policies: readonly Policy[]): Promise<I> {
    const writes = this.#writesOf(policies);
    return this.#enqueue(() => this.#import(policies, writes));
  }

  /**
   * Promotes staged policies the store holds: each `filters` entry must
   * match at least one (else PolicyNotFoundError, and nothing changes); the
   * matches are stored again without their staged annotation, in one engine
   * change (one revision). A policy from the Kubernetes API server is
   * promoted by removing the annotation from its object.
   */
  promotePolicies(filters: readonly PolicyFilter[]): Promise<I> {
    return this.#enqueue(async () => {
      const found = new Map<string, Policy>();
      for (const f of filters) {
        const matched = this.#target.policies({ ...f, only: (n) => this.#applied.has(this.key(n)) }).filter((p) => p.staged === true);
        if (matched.length === 0) throw new PolicyNotFoundError(`${describeFilter(f)} among the staged policies imported through the agent`);
        for (const p of matched) found.set(this.key(p.name), p);
      }
      const promoted = [...found.values()].map((p) => withStaged(p, false));
      return this.#import(promoted, this.#writesOf(promoted));
    });
  }

  #writesOf(policies: readonly Policy[]): Array<{ key: string; name: PolicyName; value: string; hash: string }> {
    return policies.map((p) => {
      const { value, hash } = encodeStoredPolicy(p.document);
      const bytes = Buffer.byteLength(value, 'utf8');
      if (bytes > MAX_VALUE_BYTES) {
        throw new PolicyArgumentError(`${formatPolicyName(p.name)} is ${bytes} bytes as stored; the kvstore holds at most ${MAX_VALUE_BYTES} per policy`);
      }
      return { key: this.key(p.name), name: p.name, value, hash };
    });
  }

  /** Imports and stores, inside the queue; PolicyStoreError (engine rolled back) when the store fails. */
  async #import(policies: readonly Policy[], writes: ReadonlyArray<{ key: string; name: PolicyName; value: string; hash: string }>): Promise<I> {
    const current = this.#byKey();
    const previous = writes.map((w) => ({ key: w.key, name: w.name, policy: current.get(w.key) }));
    const result = this.#target.upsertPolicies(policies);
    let revision: number;
    try {
      revision = await this.#write(
        writes.map((w) => ({ type: 'put', key: w.key, value: w.value })),
        previous.map((p) => this.#undoOp(p.key, p.policy)),
      );
    } catch (err) {
      this.#rollBackImport(previous);
      throw this.#storeError(`storing ${policies.map((p) => formatPolicyName(p.name)).join(', ')} failed; nothing was imported`, err);
    }
    for (const w of writes) this.#setApplied(w.key, { name: w.name, hash: w.hash, revision });
    return result;
  }

  /**
   * Deletes the matching policies from the engine and the store
   * (PolicyNotFoundError when none match). Only policies the store holds
   * match: the engine's others came from the Kubernetes API server, and
   * go when their objects go.
   */
  deletePolicies(filter: PolicyFilter): Promise<D> {
    return this.#enqueue(async () => {
      const stored: PolicyFilter = { ...filter, only: (n) => this.#applied.has(this.key(n)) };
      const matched = this.#target.policies(stored);
      const result = this.#target.deletePolicies(stored);
      const gone = new Set(result.deleted.map((n) => this.key(n)));
      const removed = matched.filter((p) => gone.has(this.key(p.name)));
      let revision: number;
      try {
        revision = await this.#write(
          removed.map((p) => ({ type: 'delete', key: this.key(p.name) })),
          removed.map((p) => this.#undoOp(this.key(p.name), p)),
        );
      } catch (err) {
        if (removed.length > 0) this.#target.upsertPolicies(removed);
        throw this.#storeError(`deleting ${result.deleted.map(formatPolicyName).join(', ')} from the store failed; nothing was deleted`, err);
      }
      for (const key of gone) this.#setDeleted(key, revision);
      return result;
    });
  }

  // ---- internals ------------------------------------------------------------

  #enqueue<T>(fn: () => T | Promise<T>): Promise<T> {
    // The listeners run inside the turn: the next change starts after they have seen this one.
    return this.#serial.run(async () => {
      try {
        return await fn();
      } finally {
        for (const l of this.#changeListeners) l();
      }
    });
  }

  #byKey(): Map<string, Policy> {
    return new Map(this.#target.policies().map((p) => [this.key(p.name), p]));
  }

  #storeError(message: string, cause: unknown): Error {
    if (isPolicyError(cause)) return cause;
    return new PolicyStoreError(`${message}: ${(cause as Error).message ?? String(cause)}`, { cause });
  }

  /** The op that puts a key back as it was before a change: the previous version, or nothing. */
  #undoOp(key: string, previous: Policy | undefined): TxnOp {
    return previous === undefined ? { type: 'delete', key } : { type: 'put', key, value: encodeStoredPolicy(previous.document).value };
  }

  /**
   * Writes the ops in as few transactions as etcd's limits allow (ops and
   * bytes per request). One transaction is atomic; when a later one fails,
   * the earlier ones are undone (best effort, logged) before the error is
   * passed on. Returns the revision of the last transaction.
   */
  async #write(ops: readonly TxnOp[], undo: readonly TxnOp[]): Promise<number> {
    const chunks: Array<{ ops: TxnOp[]; undo: TxnOp[] }> = [];
    let bytes = 0;
    ops.forEach((op, i) => {
      const size = op.type === 'put' ? Buffer.byteLength(op.value, 'utf8') : 0;
      let last = chunks[chunks.length - 1];
      // One op of each transaction is the revision marker.
      if (last === undefined || last.ops.length >= MAX_TXN_OPS - 1 || (last.ops.length > 0 && bytes + size > TXN_VALUE_BYTES)) {
        chunks.push((last = { ops: [], undo: [] }));
        bytes = 0;
      }
      last.ops.push(op);
      last.undo.push(undo[i]!);
      bytes += size;
    });
    let revision = 0;
    for (let i = 0; i < chunks.length; i++) {
      try {
        revision = (await this.#backend.txn({ compare: [], success: [...chunks[i]!.ops, this.#markerOp()] })).revision;
      } catch (err) {
        for (const done of chunks.slice(0, i).reverse()) {
          await this.#backend.txn({ compare: [], success: [...done.undo, this.#markerOp()] }).catch((e: unknown) => this.#log?.error({ err: e }, 'undoing a partly stored policy change failed; the store may hold part of it'));
        }
        throw err;
      }
    }
    if (revision > this.#clusterRevision) this.#clusterRevision = revision;
    return revision;
  }

  /** The marker's put: its value only says when; what matters is the revision the transaction gives it. */
  #markerOp(): TxnOp {
    return { type: 'put', key: this.#revisionKey, value: JSON.stringify({ changedAt: new Date().toISOString() }) };
  }

  /** Raises clusterRevision to the newest mod revision of the policy keys and the marker among `kvs`. */
  #sawRevisions(kvs: ReadonlyArray<{ key: string; modRevision: number }>): void {
    for (const kv of kvs) {
      if (kv.key !== this.#revisionKey && !kv.key.startsWith(this.#prefix)) continue;
      if (kv.modRevision > this.#clusterRevision) this.#clusterRevision = kv.modRevision;
    }
  }

  #rollBackImport(previous: ReadonlyArray<{ key: string; name: PolicyName; policy: Policy | undefined }>): void {
    const restore = previous.flatMap((p) => (p.policy === undefined ? [] : [p.policy]));
    if (restore.length > 0) this.#target.upsertPolicies(restore);
    for (const p of previous) {
      if (p.policy === undefined) this.#target.deletePolicies({ kind: p.name.kind, namespace: p.name.namespace, name: p.name.name });
    }
  }

  #setApplied(key: string, applied: Applied): void {
    this.#applied.set(key, applied);
    this.#deletedAt.delete(key);
  }

  #setDeleted(key: string, revision: number): void {
    this.#applied.delete(key);
    this.#deletedAt.set(key, revision);
  }

  /** Whether an event is older than (or the echo of) what this node already holds for the key. */
  #stale(key: string, revision: number): boolean {
    const known = this.#applied.get(key)?.revision ?? this.#deletedAt.get(key) ?? 0;
    return revision <= known;
  }

  /** Full state from a listing: at start, and after a watch failure. */
  #reset(all: readonly KeyValue[]): void {
    if (this.#stopped) return;
    // The watched prefix may hold other keys than the policies (the marker, a neighbour of the prefix).
    const kvs = all.filter((kv) => kv.key.startsWith(this.#prefix));
    const present = new Set(kvs.map((kv) => kv.key));
    const deletes = [...this.#applied.keys()].filter((k) => !present.has(k)).map((key) => ({ key, revision: 0 }));
    // In the order they were first stored: node-local CIDR identities are then numbered as when they were imported, in the usual case.
    const ordered = [...kvs].sort((x, y) => x.createRevision - y.createRevision);
    this.#converge(
      ordered.map((kv) => ({ key: kv.key, value: kv.value, revision: kv.modRevision })),
      deletes,
      'store',
    );
    this.#sawRevisions(all);
  }

  #apply(events: readonly WatchEvent[]): void {
    if (this.#stopped) return;
    // The last event per key decides; older ones (and echoes of this node's writes) change nothing.
    const last = new Map<string, WatchEvent>();
    for (const ev of events) if (ev.key.startsWith(this.#prefix)) last.set(ev.key, ev);
    const puts: Array<{ key: string; value: string; revision: number }> = [];
    const deletes: Array<{ key: string; revision: number }> = [];
    for (const ev of last.values()) {
      if (this.#stale(ev.key, ev.modRevision)) continue;
      if (ev.type === 'put') puts.push({ key: ev.key, value: ev.value, revision: ev.modRevision });
      else deletes.push({ key: ev.key, revision: ev.modRevision });
    }
    this.#converge(puts, deletes, 'watch');
    this.#sawRevisions(events);
  }

  /** Brings the engine to the given stored versions: one upsert for every changed document, one delete per key gone. */
  #converge(puts: ReadonlyArray<{ key: string; value: string; revision: number }>, deletes: ReadonlyArray<{ key: string; revision: number }>, from: 'store' | 'watch'): void {
    const upserts: Policy[] = [];
    const appliedAfter: Array<[string, Applied]> = [];
    for (const { key, value, revision } of puts) {
      const stored = decodeStoredPolicy(value);
      if (typeof stored === 'string') {
        this.#log?.error({ key, reason: stored }, 'unusable stored policy; ignored');
        continue;
      }
      const held = this.#applied.get(key);
      if (held?.hash === stored.hash) {
        // Same document already in force (this node's own write, or an identical import elsewhere).
        this.#applied.set(key, { ...held, revision: Math.max(held.revision, revision) });
        continue;
      }
      let policy: Policy;
      try {
        [policy] = parsePolicyDocuments([stored.document]) as [Policy];
      } catch (err) {
        this.#log?.error({ key, err }, 'stored policy does not parse; ignored');
        continue;
      }
      if (this.key(policy.name) !== key) {
        this.#log?.error({ key, policy: formatPolicyName(policy.name) }, 'stored policy names another key; ignored');
        continue;
      }
      upserts.push(policy);
      appliedAfter.push([key, { name: policy.name, hash: stored.hash, revision }]);
    }
    if (upserts.length > 0) {
      try {
        this.#target.upsertPolicies(upserts);
        for (const [key, a] of appliedAfter) this.#setApplied(key, a);
        this.#log?.info({ from, policies: upserts.map((p) => formatPolicyName(p.name)) }, 'policies from the store imported');
      } catch (err) {
        this.#log?.error({ err, policies: upserts.map((p) => formatPolicyName(p.name)) }, 'policies from the store could not be imported');
      }
    }
    for (const { key, revision } of deletes) {
      const held = this.#applied.get(key);
      if (held === undefined) continue;
      try {
        this.#target.deletePolicies({ kind: held.name.kind, namespace: held.name.namespace, name: held.name.name });
        this.#log?.info({ from, policy: formatPolicyName(held.name) }, 'policy deleted from the store removed');
      } catch (err) {
        this.#log?.error({ err, policy: formatPolicyName(held.name) }, 'removing a policy deleted from the store failed');
      }
      this.#setDeleted(key, revision);
    }
  }
}
