// The fake API server's state: objects by resource type, one global
// resourceVersion counter (etcd's revision), and the ordered history of
// changes that watches replay from a resourceVersion until compact() forgets
// it. Custom resource types come and go with their CustomResourceDefinition
// objects, as on the real server.
import { randomUUID } from 'node:crypto';
import { crdSchemas, type CustomResourceSchema } from './fakeKubeCrdSchema.js';
import { defaultEndpointSlice, defaultNamespace, defaultService } from './fakeKubeDefaults.js';
import { admitLease } from './fakeKubeLease.js';
import { GENERATE_NAME_ATTEMPTS, generatedName, type NameSuffixSource, randomNameSuffix } from './fakeKubeNames.js';
import { apiVersionOf, builtinResourceTypes, type FakeResourceType, resourceTypeFromCrd } from './fakeKubeResources.js';
import { allowsUnconditionalUpdate, canonicalJson, generationPart, prepareMainWrite, prepareStatusWrite } from './fakeKubeStrategy.js';

export type KubeObject = Record<string, unknown> & { metadata?: Record<string, unknown> };

export interface KubeStatus {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure' | 'Success';
  message: string;
  reason: string;
  details?: { name?: string; group?: string; kind?: string; causes?: Array<{ message: string; field?: string; reason?: string }>; retryAfterSeconds?: number };
  code: number;
}

/**
 * Who writes. `client`: an API request, with the real server's rules (resourceVersion
 * preconditions, the status subresource split). `test`: the test itself, whole objects
 * whatever their resourceVersion (it plays kubelet and the controllers).
 */
export type Writer = 'client' | 'test';

export type PropagationPolicy = 'Background' | 'Foreground' | 'Orphan';

/** DeleteOptions the fake acts on: the cascade, and preconditions the object must still meet (else 409). */
export interface DeleteOptions {
  propagationPolicy?: PropagationPolicy;
  preconditions?: { uid?: string; resourceVersion?: string };
}

/** The finalizers through which the garbage collector carries out a Foreground or Orphan deletion. */
export const FOREGROUND_FINALIZER = 'foregroundDeletion';
export const ORPHAN_FINALIZER = 'orphan';

/** A request the real server would refuse: carries the Status it would answer. */
export class KubeStatusError extends Error {
  constructor(readonly status: KubeStatus) {
    super(status.message);
    this.name = 'KubeStatusError';
  }
}

export function kubeStatus(code: number, reason: string, message: string, details?: KubeStatus['details']): KubeStatus {
  const s: KubeStatus = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code };
  if (details !== undefined) s.details = details;
  return s;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface StoredEvent {
  rv: number;
  typeKey: string;
  type: WatchEventType;
  object: KubeObject;
  /** The object before a MODIFIED (selectors turn a change into ADDED/DELETED for a watch). */
  previous?: KubeObject;
}

export function typeKeyOf(t: FakeResourceType): string {
  return `${t.group}/${t.plural}`;
}

export function metaOf(obj: KubeObject): Record<string, unknown> {
  if (obj.metadata === undefined || obj.metadata === null || typeof obj.metadata !== 'object') obj.metadata = {};
  return obj.metadata;
}

export function namespaceOf(obj: KubeObject): string {
  const ns = metaOf(obj).namespace;
  return typeof ns === 'string' ? ns : '';
}

export function nameOf(obj: KubeObject): string {
  const n = metaOf(obj).name;
  return typeof n === 'string' ? n : '';
}

function objectKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

function nowTimestamp(): string {
  return new Date().toISOString().replace(/\.\d+Z$/, 'Z');
}

/** The resource name as errors spell it: `pods`, `tendrilnetworkpolicies.tendril.io`. */
export function qualifiedResource(t: FakeResourceType): string {
  return t.group === '' ? t.plural : `${t.plural}.${t.group}`;
}

function details(t: FakeResourceType, name: string): KubeStatus['details'] {
  const d: NonNullable<KubeStatus['details']> = { name, kind: t.plural };
  if (t.group !== '') d.group = t.group;
  return d;
}

export function notFound(t: FakeResourceType, name: string): KubeStatusError {
  return new KubeStatusError(kubeStatus(404, 'NotFound', `${qualifiedResource(t)} "${name}" not found`, details(t, name)));
}

export function finalizersOf(obj: KubeObject): string[] {
  const f = metaOf(obj).finalizers;
  return Array.isArray(f) ? f.map(String) : [];
}

export function isBeingDeleted(obj: KubeObject): boolean {
  return typeof metaOf(obj).deletionTimestamp === 'string';
}

function conflict(t: FakeResourceType, name: string, why: string): KubeStatusError {
  return new KubeStatusError(kubeStatus(409, 'Conflict', `Operation cannot be fulfilled on ${qualifiedResource(t)} "${name}": ${why}`, details(t, name)));
}

function invalid(t: FakeResourceType, name: string, field: string, message: string): KubeStatusError {
  return new KubeStatusError(
    kubeStatus(422, 'Invalid', `${qualifiedResource(t)} "${name}" is invalid: ${field}: ${message}`, {
      ...details(t, name),
      causes: [{ reason: 'FieldValueInvalid', message, field }],
    }),
  );
}

function withoutVolatile(obj: KubeObject): string {
  const copy = structuredClone(obj);
  const m = metaOf(copy);
  delete m.resourceVersion;
  delete m.managedFields;
  return canonicalJson(copy);
}

export class FakeKubeStore {
  private rv = 0;
  private readonly typeList: FakeResourceType[] = builtinResourceTypes();
  private readonly objects = new Map<string, Map<string, KubeObject>>();
  private history: StoredEvent[] = [];
  private compactedRv = 0;
  private readonly subscribers = new Set<(e: StoredEvent) => void>();
  private readonly schemas = new Map<string, Map<string, CustomResourceSchema>>();

  constructor(private readonly nameSuffix: NameSuffixSource = randomNameSuffix) {}

  get resourceVersion(): number {
    return this.rv;
  }

  /** Watches from a resourceVersion below this one get 410 Gone. */
  get compactedAt(): number {
    return this.compactedRv;
  }

  get types(): readonly FakeResourceType[] {
    return this.typeList;
  }

  /** The type served at group/version/plural, if discovery lists it. */
  findType(group: string, version: string, plural: string): FakeResourceType | undefined {
    return this.typeList.find((t) => t.group === group && t.plural === plural && t.versions.includes(version));
  }

  /** The type of a stored event's typeKey, while it is served. */
  typeByKey(key: string): FakeResourceType | undefined {
    return this.typeList.find((t) => typeKeyOf(t) === key);
  }

  /** The type by its plural name (the programmatic API's FakeResource). */
  typeByPlural(plural: string): FakeResourceType {
    const found = this.typeList.filter((t) => t.plural === plural);
    if (found.length === 0) throw new Error(`fake kube API: unknown resource ${plural} (register its CRD first)`);
    if (found.length > 1) throw new Error(`fake kube API: resource ${plural} is served by several groups`);
    return found[0]!;
  }

  subscribe(fn: (e: StoredEvent) => void): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  compact(): void {
    this.compactedRv = this.rv;
    this.history = [];
  }

  /** The changes of one type after resourceVersion `after`, oldest first (caller checks compactedAt). */
  eventsAfter(t: FakeResourceType, after: number): StoredEvent[] {
    const key = typeKeyOf(t);
    let lo = 0;
    let hi = this.history.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.history[mid]!.rv <= after) lo = mid + 1;
      else hi = mid;
    }
    return this.history.slice(lo).filter((e) => e.typeKey === key);
  }

  /** Objects of a type (in one namespace when given), ordered by namespace then name as etcd keys are. */
  list(t: FakeResourceType, namespace?: string): KubeObject[] {
    const m = this.objects.get(typeKeyOf(t));
    if (m === undefined) return [];
    const keys = [...m.keys()].sort();
    const out: KubeObject[] = [];
    for (const k of keys) {
      const o = m.get(k)!;
      if (namespace === undefined || namespaceOf(o) === namespace) out.push(o);
    }
    return out;
  }

  get(t: FakeResourceType, namespace: string | undefined, name: string): KubeObject | undefined {
    return this.objects.get(typeKeyOf(t))?.get(objectKey(t.namespaced ? (namespace ?? '') : '', name));
  }

  /**
   * Stores a new object (the caller's copy is not kept); 409 AlreadyExists if it exists.
   * Without a name, metadata.generateName is expanded, drawn again while taken (fakeKubeNames.ts).
   */
  create(t: FakeResourceType, input: KubeObject, o: { writer: Writer } = { writer: 'test' }): KubeObject {
    // Read without metaOf, which would give the caller's object a metadata it did not have.
    const { name: given, generateName: prefix } = (input.metadata ?? {}) as { name?: unknown; generateName?: unknown };
    if ((typeof given === 'string' && given !== '') || typeof prefix !== 'string' || prefix === '') return this.createNamed(t, input, o.writer);
    let last: KubeStatusError | undefined;
    for (let attempt = 0; attempt < GENERATE_NAME_ATTEMPTS; attempt++) {
      const named = structuredClone(input);
      metaOf(named).name = generatedName(prefix, this.nameSuffix());
      try {
        return this.createNamed(t, named, o.writer);
      } catch (err) {
        if (!(err instanceof KubeStatusError) || err.status.reason !== 'AlreadyExists') throw err;
        last = err;
      }
    }
    const name = String(last?.status.details?.name ?? '');
    throw new KubeStatusError(
      kubeStatus(409, 'AlreadyExists', `${qualifiedResource(t)} "${name}" already exists, the server was not able to generate a unique name for the object`, {
        ...details(t, name),
        retryAfterSeconds: 1,
      }),
    );
  }

  private createNamed(t: FakeResourceType, input: KubeObject, writer: Writer): KubeObject {
    const obj = this.normalize(t, structuredClone(input));
    const meta = metaOf(obj);
    const name = nameOf(obj);
    if (name === '') {
      throw new KubeStatusError(
        kubeStatus(422, 'Invalid', `${t.kind} "" is invalid: metadata.name: Required value: name or generateName is required`, details(t, '')),
      );
    }
    if (t.namespaced && namespaceOf(obj) === '') meta.namespace = 'default';
    const key = objectKey(namespaceOf(obj), name);
    let m = this.objects.get(typeKeyOf(t));
    if (m === undefined) {
      m = new Map();
      this.objects.set(typeKeyOf(t), m);
    }
    if (m.has(key)) {
      throw new KubeStatusError(kubeStatus(409, 'AlreadyExists', `${qualifiedResource(t)} "${name}" already exists`, details(t, name)));
    }
    if (writer === 'client') prepareMainWrite(t, obj, undefined);
    this.validateCrd(t, obj);
    this.admitMetadata(t, obj);
    this.admitCustom(t, obj);
    this.admitBuiltin(t, obj);
    this.applyDefaults(t, obj, undefined);
    meta.uid = randomUUID();
    meta.creationTimestamp = nowTimestamp();
    meta.generation = 1;
    delete meta.deletionTimestamp;
    delete meta.deletionGracePeriodSeconds;
    meta.resourceVersion = String(++this.rv);
    this.afterCrdWrite(t, obj);
    m.set(key, obj);
    this.record({ rv: this.rv, typeKey: typeKeyOf(t), type: 'ADDED', object: obj });
    return obj;
  }

  /**
   * Replaces an object. A client's write carrying a stale metadata.resourceVersion is a
   * 409 Conflict; one without it is unconditional where the type allows it, else a 422
   * (custom resources, CRDs, Leases); its write to the main resource keeps the stored
   * status and one to `status` changes only that (fakeKubeStrategy.ts). A write that
   * changes nothing keeps the resourceVersion and makes no event; one that leaves an
   * object being deleted without finalizers deletes it — as on the real server.
   */
  update(t: FakeResourceType, input: KubeObject, o: { writer: Writer; subresource?: 'status' }): KubeObject {
    let obj = this.normalize(t, structuredClone(input));
    const name = nameOf(obj);
    if (t.namespaced && namespaceOf(obj) === '') metaOf(obj).namespace = 'default';
    const old = this.get(t, namespaceOf(obj), name);
    if (old === undefined) throw notFound(t, name);
    if (o.writer === 'client') {
      const rv = metaOf(obj).resourceVersion;
      if (rv === undefined || rv === '') {
        if (!allowsUnconditionalUpdate(t)) throw invalid(t, name, 'metadata.resourceVersion', 'Invalid value: 0x0: must be specified for an update');
      } else if (rv !== metaOf(old).resourceVersion) {
        throw conflict(t, name, 'the object has been modified; please apply your changes to the latest version and try again');
      }
      if (o.subresource === 'status') obj = this.normalize(t, prepareStatusWrite(obj, old));
      else prepareMainWrite(t, obj, old);
    }
    const meta = metaOf(obj);
    const oldMeta = metaOf(old);
    this.validateCrd(t, obj);
    this.admitMetadata(t, obj, old);
    this.admitCustom(t, obj);
    this.admitBuiltin(t, obj);
    this.applyDefaults(t, obj, old);
    meta.uid = oldMeta.uid;
    meta.creationTimestamp = oldMeta.creationTimestamp;
    // Only a delete sets these; an update keeps what the store has.
    for (const f of ['deletionTimestamp', 'deletionGracePeriodSeconds']) {
      if (oldMeta[f] === undefined) delete meta[f];
      else meta[f] = oldMeta[f];
    }
    meta.generation = (oldMeta.generation as number | undefined) ?? 1;
    if (generationPart(t, obj) !== generationPart(t, old)) meta.generation = (meta.generation as number) + 1;
    meta.resourceVersion = oldMeta.resourceVersion;
    if (isBeingDeleted(obj) && finalizersOf(obj).length === 0) return this.remove(t, obj);
    if (withoutVolatile(obj) === withoutVolatile(old)) return old;
    meta.resourceVersion = String(++this.rv);
    this.afterCrdWrite(t, obj);
    this.objects.get(typeKeyOf(t))!.set(objectKey(namespaceOf(obj), name), obj);
    this.record({ rv: this.rv, typeKey: typeKeyOf(t), type: 'MODIFIED', object: obj, previous: old });
    return obj;
  }

  /**
   * Deletes an object. Foreground and Orphan add the garbage collector's finalizer
   * (Background takes both away); an object left with finalizers gets its
   * deletionTimestamp and stays until they are removed (a MODIFIED event), any
   * other goes at once (no grace period). Preconditions that no longer hold are a
   * 409 Conflict. Returns the object as stored or as the DELETED event carries it.
   */
  delete(t: FakeResourceType, namespace: string | undefined, name: string, o: DeleteOptions = {}): KubeObject {
    const old = this.get(t, namespace, name);
    if (old === undefined) throw notFound(t, name);
    const { uid, resourceVersion } = o.preconditions ?? {};
    const meta0 = metaOf(old);
    if (uid !== undefined && uid !== meta0.uid) {
      throw conflict(t, name, `Precondition failed: UID in precondition: ${uid}, UID in object meta: ${String(meta0.uid)}`);
    }
    if (resourceVersion !== undefined && resourceVersion !== meta0.resourceVersion) {
      throw conflict(t, name, `Precondition failed: ResourceVersion in precondition: ${resourceVersion}, ResourceVersion in object meta: ${String(meta0.resourceVersion)}`);
    }
    const policy = o.propagationPolicy ?? 'Background';
    const wanted = policy === 'Foreground' ? FOREGROUND_FINALIZER : policy === 'Orphan' ? ORPHAN_FINALIZER : undefined;
    const finalizers = finalizersOf(old).filter((f) => f !== FOREGROUND_FINALIZER && f !== ORPHAN_FINALIZER);
    if (wanted !== undefined) finalizers.push(wanted);
    if (finalizers.length === 0) return this.remove(t, old);
    const obj = structuredClone(old);
    const meta = metaOf(obj);
    meta.finalizers = finalizers;
    meta.deletionTimestamp ??= nowTimestamp();
    meta.deletionGracePeriodSeconds ??= 0;
    if (withoutVolatile(obj) === withoutVolatile(old)) return old;
    meta.resourceVersion = String(++this.rv);
    this.objects.get(typeKeyOf(t))!.set(objectKey(namespaceOf(obj), name), obj);
    this.record({ rv: this.rv, typeKey: typeKeyOf(t), type: 'MODIFIED', object: obj, previous: old });
    return obj;
  }

  /** Takes an object out of the store: the DELETED event, with the version of the deletion. */
  private remove(t: FakeResourceType, obj: KubeObject): KubeObject {
    const key = objectKey(namespaceOf(obj), nameOf(obj));
    this.objects.get(typeKeyOf(t))?.delete(key);
    const gone = structuredClone(obj);
    metaOf(gone).resourceVersion = String(++this.rv);
    this.record({ rv: this.rv, typeKey: typeKeyOf(t), type: 'DELETED', object: gone });
    if (t.plural === 'customresourcedefinitions' && t.group === 'apiextensions.k8s.io') this.unregisterCrd(gone);
    return gone;
  }

  private record(e: StoredEvent): void {
    this.history.push(e);
    for (const s of [...this.subscribers]) s(e);
  }

  /** apiVersion/kind as stored; the namespace dropped on cluster-scoped objects. */
  private normalize(t: FakeResourceType, obj: KubeObject): KubeObject {
    obj.apiVersion = apiVersionOf(t.group, t.versions[0]!);
    obj.kind = t.kind;
    const meta = metaOf(obj);
    if (!t.namespaced) delete meta.namespace;
    return obj;
  }

  /** The defaults and allocations of the real server's built-in registries (fakeKubeDefaults.ts). */
  private applyDefaults(t: FakeResourceType, obj: KubeObject, old: KubeObject | undefined): void {
    if (t.custom) return;
    const key = typeKeyOf(t);
    if (key === '/namespaces') defaultNamespace(obj);
    else if (key === 'discovery.k8s.io/endpointslices') defaultEndpointSlice(obj);
    else if (key === '/services') {
      const clusterIps = new Set<string>();
      const nodePorts = new Set<number>();
      for (const other of this.list(t)) {
        if (namespaceOf(other) === namespaceOf(obj) && nameOf(other) === nameOf(obj)) continue;
        const spec = (other.spec ?? {}) as { clusterIPs?: string[]; clusterIP?: string; ports?: Array<{ nodePort?: number }> };
        for (const ip of spec.clusterIPs ?? (spec.clusterIP !== undefined ? [spec.clusterIP] : [])) if (ip !== 'None') clusterIps.add(ip);
        for (const p of spec.ports ?? []) if (p.nodePort !== undefined) nodePorts.add(p.nodePort);
      }
      const error = defaultService(obj, old, { clusterIps, nodePorts });
      if (error !== undefined) {
        throw new KubeStatusError(kubeStatus(422, 'Invalid', `Service "${nameOf(obj)}" is invalid: ${error}`, { ...details(t, nameOf(obj)), kind: 'Service', causes: [{ message: error }] }));
      }
    }
  }

  /** ObjectMeta rules every type shares: well-formed ownerReferences, no new finalizer on an object being deleted. */
  private admitMetadata(t: FakeResourceType, obj: KubeObject, old?: KubeObject): void {
    const meta = metaOf(obj);
    const refs = meta.ownerReferences;
    if (refs !== undefined && refs !== null) {
      if (!Array.isArray(refs)) throw invalid(t, nameOf(obj), 'metadata.ownerReferences', 'Invalid value: must be a list');
      let controllers = 0;
      for (const r of refs as Array<Record<string, unknown>>) {
        for (const [f, what] of [['apiVersion', 'version'], ['kind', 'kind'], ['name', 'name'], ['uid', 'uid']] as const) {
          if (typeof r?.[f] !== 'string' || r[f] === '') throw invalid(t, nameOf(obj), `metadata.ownerReferences.${f}`, `Invalid value: "": ${what} must not be empty`);
        }
        if (r.controller === true) controllers++;
      }
      if (controllers > 1) throw invalid(t, nameOf(obj), 'metadata.ownerReferences', 'Invalid value: Only one reference can have Controller set to true');
    }
    if (old !== undefined && isBeingDeleted(old)) {
      const before = new Set(finalizersOf(old));
      const added = finalizersOf(obj).filter((f) => !before.has(f));
      if (added.length > 0) {
        throw new KubeStatusError(
          kubeStatus(422, 'Invalid', `${qualifiedResource(t)} "${nameOf(obj)}" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers ${JSON.stringify(added)}`, details(t, nameOf(obj))),
        );
      }
    }
  }

  /** Built-in types with admission of their own beyond defaults (Leases' MicroTime and validation). */
  private admitBuiltin(t: FakeResourceType, obj: KubeObject): void {
    if (typeKeyOf(t) !== 'coordination.k8s.io/leases') return;
    const verdict = admitLease(obj);
    if (verdict === undefined) return;
    if ('decode' in verdict) {
      throw new KubeStatusError(kubeStatus(400, 'BadRequest', `Lease in version "v1" cannot be handled as a Lease: ${verdict.decode}`));
    }
    const what = verdict.invalid.length === 1 ? verdict.invalid[0]! : `[${verdict.invalid.join(', ')}]`;
    throw new KubeStatusError(
      kubeStatus(422, 'Invalid', `Lease.coordination.k8s.io "${nameOf(obj)}" is invalid: ${what}`, {
        ...details(t, nameOf(obj)),
        kind: 'Lease',
        causes: verdict.invalid.map((message) => ({ message })),
      }),
    );
  }

  /** A custom resource is pruned, defaulted and validated against its CRD's schema, as kube-apiserver does. */
  private admitCustom(t: FakeResourceType, obj: KubeObject): void {
    if (!t.custom) return;
    const schema = this.schemas.get(typeKeyOf(t))?.get(t.versions[0]!);
    if (schema === undefined) return;
    schema.normalize(obj);
    const errors = schema.validate(obj);
    if (errors.length === 0) return;
    const what = errors.length === 1 ? errors[0]! : `[${errors.join(', ')}]`;
    throw new KubeStatusError(
      kubeStatus(422, 'Invalid', `${t.kind}.${t.group} "${nameOf(obj)}" is invalid: ${what}`, {
        ...details(t, nameOf(obj)),
        kind: t.kind,
        causes: errors.map((message) => ({ message })),
      }),
    );
  }

  private isCrdType(t: FakeResourceType): boolean {
    return t.plural === 'customresourcedefinitions' && t.group === 'apiextensions.k8s.io';
  }

  private validateCrd(t: FakeResourceType, obj: KubeObject): void {
    if (!this.isCrdType(t)) return;
    const r = resourceTypeFromCrd(obj);
    if (typeof r === 'string') {
      throw new KubeStatusError(
        kubeStatus(422, 'Invalid', `CustomResourceDefinition.apiextensions.k8s.io "${nameOf(obj)}" is invalid: ${r}`, details(t, nameOf(obj))),
      );
    }
    const clash = this.typeList.find((x) => x.group === r.group && x.plural === r.plural && !x.custom);
    if (clash !== undefined) {
      throw new KubeStatusError(kubeStatus(422, 'Invalid', `CustomResourceDefinition "${nameOf(obj)}" is invalid: the group ${r.group} is served by built-in types`));
    }
  }

  /** Registers (or re-registers) the CRD's type in discovery and fills the status the real server reports. */
  private afterCrdWrite(t: FakeResourceType, obj: KubeObject): void {
    if (!this.isCrdType(t)) return;
    const r = resourceTypeFromCrd(obj) as FakeResourceType;
    const i = this.typeList.findIndex((x) => x.group === r.group && x.plural === r.plural);
    if (i >= 0) this.typeList[i] = r;
    else this.typeList.push(r);
    this.schemas.set(typeKeyOf(r), crdSchemas(obj));
    const spec = obj.spec as { names: unknown; versions: Array<{ name: string; storage?: boolean }> };
    const now = nowTimestamp();
    obj.status = {
      acceptedNames: spec.names,
      storedVersions: spec.versions.filter((v) => v.storage === true).map((v) => v.name),
      conditions: [
        { type: 'NamesAccepted', status: 'True', reason: 'NoConflicts', message: 'no conflicts found', lastTransitionTime: now },
        { type: 'Established', status: 'True', reason: 'InitialNamesAccepted', message: 'the initial names have been accepted', lastTransitionTime: now },
      ],
    };
  }

  /** A deleted CRD takes its objects with it (the real server deletes them, then the type). */
  private unregisterCrd(crd: KubeObject): void {
    const r = resourceTypeFromCrd(crd);
    if (typeof r === 'string') return;
    const t = this.typeList.find((x) => x.group === r.group && x.plural === r.plural && x.custom);
    if (t === undefined) return;
    for (const o of this.list(t)) this.remove(t, o);
    this.typeList.splice(this.typeList.indexOf(t), 1);
    this.schemas.delete(typeKeyOf(t));
    this.objects.delete(typeKeyOf(t));
  }
}
