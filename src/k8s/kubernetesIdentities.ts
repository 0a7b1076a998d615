/**
 * Cluster-wide identities as TendrilIdentity objects in the Kubernetes API
 * (the `crd` identity allocation mode): a GlobalIdentityStore for
 * src/identity's IdentityAllocator.
 *
 * Race resolution: a deterministic first choice. A label set tries numbers in
 * one fixed order every node computes alike (tendrilIdentity.ts: a hash of the
 * sorted labels, then upwards, wrapping). At each number the node CREATEs the
 * object; 409 AlreadyExists means the number is taken, and a GET says by whom:
 * these labels → use it, other labels → next number. Objects are written once
 * (labels never change), so whatever number k holds the label set, every
 * number before k in its order holds other labels for everyone, and every
 * racer stops at k: one identity, whoever wins the create. The mirror (an
 * informer on the objects) only shortcuts steps with facts that stay true:
 * "n holds these labels" (join without a request) and "n holds other labels"
 * (skip). Cilium instead creates with a random free number and relies on a
 * second lookup; that can leave two objects for one label set.
 *
 * This holds while objects are not deleted. Deleting an identity (the
 * operator's GC) frees a number that may lie before a live identity's number
 * in that label set's order; a node that has not yet mirrored the live one
 * could then create a second object for the labels. Should two exist, every
 * node uses the one earliest in the label set's order (idOf), the same one
 * a fresh allocation stops at, so the later one is unused and the GC's to
 * collect. Agents delete nothing: release() only drops the node's local
 * reference (IdentityAllocator counts those).
 *
 * A free preferred number (restore after a restart) is not taken: honouring
 * it could split a label set across two numbers. The number stays the same
 * as long as the object lives, and a re-created one most likely gets the
 * same number again (the same first choice).
 */
import { CustomObjectsApi, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import type { LabelSet } from '../labels/index.js';
import type { Logger } from '../logging/logger.js';
import {
  checkGlobalRange,
  IdentityError,
  IdentityErrorCode,
  MAX_GLOBAL_IDENTITY,
  MIN_GLOBAL_IDENTITY,
  type GlobalIdentityStore,
  type Identity,
  type IdentityEvent,
  type IdentityListener,
  type StoreAcquireResult,
} from '../identity/index.js';
import { K8sSyncTimeoutError } from './errors.js';
import { httpStatusOf, ResourceInformer } from './resourceInformer.js';
import { requireServedResource } from './servedResource.js';
import {
  identityNumberOfName,
  identityOfObject,
  identityProbeOrder,
  identityProbePosition,
  TENDRIL_IDENTITY_GROUP,
  TENDRIL_IDENTITY_PATH,
  TENDRIL_IDENTITY_PLURAL,
  TENDRIL_IDENTITY_VERSION,
  tendrilIdentityObject,
} from './tendrilIdentity.js';
import type { RetryOptions } from './types.js';

export interface KubernetesIdentitiesOptions {
  kubeConfig: KubeConfig;
  logger: Logger;
  minId?: number;
  maxId?: number;
  /** start() fails with K8sSyncTimeoutError when the first list takes longer (default 30 s). */
  syncTimeoutMs?: number;
  /** A create answered 409 whose object is gone by the GET is tried again this often per number (default 8). */
  maxRetries?: number;
  retry?: RetryOptions;
}

type Claim = 'created' | 'joined' | 'taken';

export class KubernetesIdentities implements GlobalIdentityStore {
  readonly informer: ResourceInformer<KubernetesObject>;
  readonly #custom: CustomObjectsApi;
  readonly #kubeConfig: KubeConfig;
  readonly #log: Logger;
  readonly #minId: number;
  readonly #maxId: number;
  readonly #syncTimeoutMs: number;
  readonly #maxRetries: number;
  readonly #byId = new Map<number, Identity>();
  /**
   * Label set → its numbers. More than one only when objects were written by
   * hand or a deletion let a label set's earlier number come free (see above):
   * then every node uses the one earliest in the label set's order, the number
   * a fresh allocation would also stop at.
   */
  readonly #byLabels = new Map<string, Set<number>>();
  /** Numbers held by objects whose labels cannot be read: taken, never handed out. */
  readonly #unreadable = new Set<number>();
  readonly #listeners = new Set<IdentityListener>();
  /** API writes (creates) this store made, and how many lost to another writer (409). */
  creates = 0;
  conflicts = 0;

  constructor(o: KubernetesIdentitiesOptions) {
    this.#minId = o.minId ?? MIN_GLOBAL_IDENTITY;
    this.#maxId = o.maxId ?? MAX_GLOBAL_IDENTITY;
    checkGlobalRange(this.#minId, this.#maxId);
    this.#log = o.logger;
    this.#syncTimeoutMs = o.syncTimeoutMs ?? 30_000;
    this.#maxRetries = o.maxRetries ?? 8;
    this.#kubeConfig = o.kubeConfig;
    this.#custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.informer = new ResourceInformer<KubernetesObject>({
      resource: TENDRIL_IDENTITY_PLURAL,
      kubeConfig: o.kubeConfig,
      path: TENDRIL_IDENTITY_PATH,
      list: () => this.#custom.listClusterCustomObject(this.#collection()) as Promise<KubernetesListObject<KubernetesObject>>,
      logger: o.logger,
      ...(o.retry === undefined ? {} : { retry: o.retry }),
    });
    this.informer.on('add', (obj) => this.#upsert(obj));
    this.informer.on('update', (obj) => this.#upsert(obj));
    this.informer.on('delete', (obj) => this.#delete(obj));
  }

  #collection() {
    return { group: TENDRIL_IDENTITY_GROUP, version: TENDRIL_IDENTITY_VERSION, plural: TENDRIL_IDENTITY_PLURAL };
  }

  async start(): Promise<void> {
    await requireServedResource(this.#kubeConfig, this.#collection());
    this.informer.start();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new K8sSyncTimeoutError(this.#syncTimeoutMs, [TENDRIL_IDENTITY_PLURAL])), this.#syncTimeoutMs);
    });
    try {
      await Promise.race([this.informer.synced, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }

  async acquire(labels: LabelSet, _preferredId?: number): Promise<StoreAcquireResult> {
    // Per call: acquires of other label sets may run beside this one.
    const lost = { conflicts: 0 };
    const result = (id: number): StoreAcquireResult => ({ id, conflicts: lost.conflicts });
    const known = this.idOf(labels);
    if (known !== undefined) return result(known);
    const text = labels.toString();
    for (const n of identityProbeOrder(text, this.#minId, this.#maxId)) {
      const mirrored = this.#byId.get(n);
      if (mirrored !== undefined) {
        if (mirrored.labels.equals(labels)) return result(n);
        continue;
      }
      if (this.#unreadable.has(n)) continue;
      const claim = await this.#claim(n, labels, lost);
      if (claim !== 'taken') {
        this.#log.debug({ id: n, labels: text, claim }, 'identity object claimed');
        return result(n);
      }
    }
    throw new IdentityError(IdentityErrorCode.EXHAUSTED, `no free identity number in ${this.#minId}..${this.#maxId} for ${text}`);
  }

  /** Creates object n for labels, or reads who holds it. */
  async #claim(n: number, labels: LabelSet, lost: { conflicts: number }): Promise<Claim> {
    for (let attempt = 0; attempt <= this.#maxRetries; attempt++) {
      try {
        this.creates++;
        await this.#custom.createClusterCustomObject({ ...this.#collection(), body: tendrilIdentityObject(n, labels) });
        return 'created';
      } catch (err) {
        if (httpStatusOf(err) !== 409) throw err;
        this.conflicts++;
        lost.conflicts++;
      }
      let existing: KubernetesObject;
      try {
        existing = (await this.#custom.getClusterCustomObject({ ...this.#collection(), name: String(n) })) as KubernetesObject;
      } catch (err) {
        // Deleted between our create and our read: the number is free again.
        if (httpStatusOf(err) === 404) continue;
        throw err;
      }
      const held = identityOfObject(existing);
      return typeof held !== 'string' && held.labels.equals(labels) ? 'joined' : 'taken';
    }
    throw new IdentityError(IdentityErrorCode.CONFLICT, `identity ${n} was created and deleted under us ${this.#maxRetries + 1} times`);
  }

  /** Nothing to write: identities no endpoint uses are the operator's to delete. */
  async release(): Promise<void> {}

  get(id: number): Identity | undefined {
    return this.#byId.get(id);
  }

  idOf(labels: LabelSet): number | undefined {
    const text = labels.toString();
    const ids = this.#byLabels.get(text);
    if (ids === undefined || ids.size === 0) return undefined;
    if (ids.size === 1) return ids.values().next().value;
    const position = (n: number) => identityProbePosition(text, n, this.#minId, this.#maxId);
    return [...ids].reduce((best, n) => (position(n) < position(best) ? n : best));
  }

  list(): Identity[] {
    return [...this.#byId.values()];
  }

  subscribe(listener: IdentityListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #upsert(obj: KubernetesObject): void {
    const decoded = identityOfObject(obj);
    if (typeof decoded === 'string') {
      const n = identityNumberOfName(obj.metadata?.name);
      // Its number stays taken: handing it out again would make a second object of that name impossible anyway.
      if (n !== undefined) {
        this.#forget(n);
        this.#unreadable.add(n);
      }
      this.informer.noteError(`TendrilIdentity ${String(obj.metadata?.name)}: ${decoded}`);
      this.#log.error({ name: obj.metadata?.name, reason: decoded }, 'TendrilIdentity unreadable; its number is skipped');
      return;
    }
    this.#unreadable.delete(decoded.id);
    const old = this.#byId.get(decoded.id);
    if (old !== undefined && old.labels.equals(decoded.labels)) return;
    const events: IdentityEvent[] = [];
    if (old !== undefined) {
      // Labels are written once; an edit by hand is followed, loudly.
      this.#log.error({ id: decoded.id, old: old.labels.toString(), new: decoded.labels.toString() }, 'TendrilIdentity labels changed');
      this.#forget(decoded.id);
      events.push({ type: 'delete', identity: old });
    }
    this.#byId.set(decoded.id, decoded);
    const key = decoded.labels.toString();
    let ids = this.#byLabels.get(key);
    if (ids === undefined) this.#byLabels.set(key, (ids = new Set()));
    ids.add(decoded.id);
    events.push({ type: 'upsert', identity: decoded });
    this.#emit(events);
  }

  #delete(obj: KubernetesObject): void {
    const n = identityNumberOfName(obj.metadata?.name);
    if (n === undefined) return;
    this.#unreadable.delete(n);
    const old = this.#forget(n);
    if (old !== undefined) this.#emit([{ type: 'delete', identity: old }]);
  }

  #forget(n: number): Identity | undefined {
    const old = this.#byId.get(n);
    if (old === undefined) return undefined;
    this.#byId.delete(n);
    const key = old.labels.toString();
    const ids = this.#byLabels.get(key);
    ids?.delete(n);
    if (ids?.size === 0) this.#byLabels.delete(key);
    return old;
  }

  #emit(events: IdentityEvent[]): void {
    for (const l of this.#listeners) {
      try {
        l(events);
      } catch (err) {
        // A listener's bug must not stop the mirror or the other listeners.
        this.#log.error({ err }, 'identity listener threw');
      }
    }
  }
}
