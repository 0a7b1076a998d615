// The garbage collector of kube-controller-manager, run beside the fake API
// server: it follows the store's changes, and an object whose ownerReferences
// name no live owner (the owner is gone, or its uid is not the one named) is
// deleted shortly after, asynchronously, as the real controller does it:
// - Background: the owner goes at once, its dependents after it;
// - Foreground: the owner stays (deletionTimestamp, finalizer
//   foregroundDeletion) while the GC deletes every dependent, and goes once
//   none whose reference has blockOwnerDeletion is left;
// - Orphan: the owner stays (finalizer orphan) while the GC removes the
//   references to it from its dependents, then goes.
// A dependent with another live owner is not deleted; the references to
// owners that are gone (or deleting in the foreground) are removed from it.
// An owner reference whose kind the server does not serve, or a cluster-scoped
// dependent naming a namespaced owner, cannot be resolved: the real GC leaves
// such a dependent alone, and so does this one.
import {
  FOREGROUND_FINALIZER,
  type FakeKubeStore,
  finalizersOf,
  isBeingDeleted,
  type KubeObject,
  KubeStatusError,
  metaOf,
  nameOf,
  namespaceOf,
  ORPHAN_FINALIZER,
  type PropagationPolicy,
  type StoredEvent,
  typeKeyOf,
} from './fakeKubeStore.js';
import type { FakeResourceType } from './fakeKubeResources.js';

interface OwnerRef {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  blockOwnerDeletion?: boolean;
}

/** Where an object lives: typeKey, namespace ('' when cluster-scoped), name. */
type Key = string;

function keyOf(typeKey: string, namespace: string, name: string): Key {
  return `${typeKey}\n${namespace}\n${name}`;
}

function refsOf(obj: KubeObject): OwnerRef[] {
  const refs = metaOf(obj).ownerReferences;
  return Array.isArray(refs) ? (refs as OwnerRef[]) : [];
}

/** A write the store refused while collecting (kept for the test to look at; the real GC would log and retry). */
export interface GcFailure {
  object: string;
  message: string;
}

export class FakeKubeGc {
  /** owner uid → the objects that name it. */
  private readonly dependents = new Map<string, Set<Key>>();
  /** object → the owner uids it names. */
  private readonly owners = new Map<Key, string[]>();
  private queue = new Set<Key>();
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  readonly failures: GcFailure[] = [];

  constructor(private readonly store: FakeKubeStore) {}

  start(): void {
    this.unsubscribe ??= this.store.subscribe((e) => this.observe(e));
  }

  stop(): void {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private observe(e: StoredEvent): void {
    const meta = metaOf(e.object);
    const key = keyOf(e.typeKey, namespaceOf(e.object), nameOf(e.object));
    const uid = typeof meta.uid === 'string' ? meta.uid : '';
    for (const owner of this.owners.get(key) ?? []) {
      const set = this.dependents.get(owner);
      set?.delete(key);
      if (set?.size === 0) this.dependents.delete(owner);
    }
    this.owners.delete(key);
    if (e.type === 'DELETED') {
      // Its dependents may have lost their last owner; an owner deleting in the foreground may be free to go.
      for (const d of this.dependents.get(uid) ?? []) this.enqueue(d);
      for (const r of refsOf(e.object)) {
        const ownerType = this.ownerType(r);
        if (ownerType !== undefined) this.enqueue(keyOf(typeKeyOf(ownerType), ownerType.namespaced ? namespaceOf(e.object) : '', r.name));
      }
      return;
    }
    const refs = refsOf(e.object);
    if (refs.length > 0) {
      this.owners.set(key, refs.map((r) => r.uid));
      for (const r of refs) {
        let set = this.dependents.get(r.uid);
        if (set === undefined) {
          set = new Set();
          this.dependents.set(r.uid, set);
        }
        set.add(key);
      }
      this.enqueue(key);
    }
    if (isBeingDeleted(e.object)) {
      this.enqueue(key);
      for (const d of this.dependents.get(uid) ?? []) this.enqueue(d);
    }
  }

  private enqueue(key: Key): void {
    this.queue.add(key);
    // Asynchronous, as the controller is: the write that made the garbage has been answered first.
    this.timer ??= setTimeout(() => this.drain(), 0);
  }

  private drain(): void {
    this.timer = undefined;
    const batch = this.queue;
    this.queue = new Set();
    for (const key of batch) {
      try {
        this.process(key);
      } catch (err) {
        if (!(err instanceof KubeStatusError)) throw err;
        this.failures.push({ object: key.replace(/\n/g, '/'), message: err.message });
      }
    }
  }

  private lookup(key: Key): { type: FakeResourceType; obj: KubeObject } | undefined {
    const [typeKey, namespace, name] = key.split('\n') as [string, string, string];
    const type = this.store.typeByKey(typeKey);
    if (type === undefined) return undefined;
    const obj = this.store.get(type, namespace, name);
    return obj === undefined ? undefined : { type, obj };
  }

  private process(key: Key): void {
    const found = this.lookup(key);
    if (found === undefined) return;
    const { type, obj } = found;
    if (isBeingDeleted(obj)) {
      const finalizers = finalizersOf(obj);
      if (finalizers.includes(ORPHAN_FINALIZER)) this.orphanDependents(type, obj);
      else if (finalizers.includes(FOREGROUND_FINALIZER)) this.finishForeground(type, obj);
      return;
    }
    this.collect(type, obj);
  }

  /** attemptToDelete: an object with references and no live owner goes; references to dead owners are dropped. */
  private collect(type: FakeResourceType, obj: KubeObject): void {
    const refs = refsOf(obj);
    if (refs.length === 0) return;
    const solid: OwnerRef[] = [];
    const gone: OwnerRef[] = [];
    const waiting: OwnerRef[] = [];
    for (const r of refs) {
      const owner = this.resolve(type, obj, r);
      // The real GC cannot place such a reference and retries the object later, leaving it as it is.
      if (owner === 'unresolvable') return;
      if (owner === undefined) gone.push(r);
      else if (isBeingDeleted(owner) && finalizersOf(owner).includes(FOREGROUND_FINALIZER)) waiting.push(r);
      else solid.push(r);
    }
    if (solid.length > 0) {
      if (gone.length === 0 && waiting.length === 0) return;
      const drop = new Set([...gone, ...waiting].map((r) => r.uid));
      this.writeRefs(type, obj, refs.filter((r) => !drop.has(r.uid)));
      return;
    }
    const uid = String(metaOf(obj).uid);
    let policy: PropagationPolicy = 'Background';
    // An owner deleting in the foreground waits for the whole chain beneath it.
    if (waiting.length > 0 && (this.dependents.get(uid)?.size ?? 0) > 0) policy = 'Foreground';
    else if (finalizersOf(obj).includes(ORPHAN_FINALIZER)) policy = 'Orphan';
    else if (finalizersOf(obj).includes(FOREGROUND_FINALIZER)) policy = 'Foreground';
    this.store.delete(type, namespaceOf(obj), nameOf(obj), { propagationPolicy: policy });
  }

  /** The served type an owner reference names by apiVersion and kind. */
  private ownerType(r: OwnerRef): FakeResourceType | undefined {
    const group = r.apiVersion.includes('/') ? r.apiVersion.split('/')[0]! : '';
    return this.store.types.find((t) => t.group === group && t.kind === r.kind);
  }

  /** The live owner a reference names, undefined when there is none, or 'unresolvable'. */
  private resolve(depType: FakeResourceType, dep: KubeObject, r: OwnerRef): KubeObject | undefined | 'unresolvable' {
    const ownerType = this.ownerType(r);
    if (ownerType === undefined) return 'unresolvable';
    if (ownerType.namespaced && !depType.namespaced) return 'unresolvable';
    const owner = this.store.get(ownerType, ownerType.namespaced ? namespaceOf(dep) : undefined, r.name);
    if (owner === undefined || metaOf(owner).uid !== r.uid) return undefined;
    return owner;
  }

  private dependentsOf(owner: KubeObject): Array<{ type: FakeResourceType; obj: KubeObject }> {
    const uid = String(metaOf(owner).uid);
    return [...(this.dependents.get(uid) ?? [])].flatMap((k) => {
      const found = this.lookup(k);
      return found !== undefined && refsOf(found.obj).some((r) => r.uid === uid) ? [found] : [];
    });
  }

  /** Foreground: every dependent is being collected (they see a waiting owner); the owner goes when no blocking one is left. */
  private finishForeground(type: FakeResourceType, owner: KubeObject): void {
    const uid = String(metaOf(owner).uid);
    const deps = this.dependentsOf(owner);
    for (const d of deps) if (!isBeingDeleted(d.obj)) this.collect(d.type, d.obj);
    const blocking = this.dependentsOf(owner).filter((d) => refsOf(d.obj).some((r) => r.uid === uid && r.blockOwnerDeletion === true));
    if (blocking.length === 0) this.removeFinalizer(type, owner, FOREGROUND_FINALIZER);
  }

  /** Orphan: the references to the owner are taken off its dependents, then the owner goes. */
  private orphanDependents(type: FakeResourceType, owner: KubeObject): void {
    const uid = String(metaOf(owner).uid);
    for (const d of this.dependentsOf(owner)) this.writeRefs(d.type, d.obj, refsOf(d.obj).filter((r) => r.uid !== uid));
    this.removeFinalizer(type, owner, ORPHAN_FINALIZER);
  }

  private writeRefs(type: FakeResourceType, obj: KubeObject, refs: OwnerRef[]): void {
    const next = structuredClone(obj);
    const meta = metaOf(next);
    if (refs.length === 0) delete meta.ownerReferences;
    else meta.ownerReferences = refs;
    // The real GC patches without a resourceVersion precondition; the store is single-threaded, so the object is current.
    this.store.update(type, next, { writer: 'client' });
  }

  private removeFinalizer(type: FakeResourceType, obj: KubeObject, finalizer: string): void {
    const next = structuredClone(obj);
    const rest = finalizersOf(next).filter((f) => f !== finalizer);
    if (rest.length === 0) delete metaOf(next).finalizers;
    else metaOf(next).finalizers = rest;
    this.store.update(type, next, { writer: 'client' });
  }
}
