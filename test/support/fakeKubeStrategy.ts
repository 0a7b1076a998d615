// What kube-apiserver's registry strategies decide per resource type on a
// client's write, beyond the schema: whether a PUT may leave out
// metadata.resourceVersion (an unconditional update: allowed for most
// built-ins, refused for custom resources, CRDs and Leases), how the status
// subresource splits an object (the main resource ignores .status, /status
// changes only .status), and which changes move metadata.generation.
import type { FakeResourceType } from './fakeKubeResources.js';

type Obj = Record<string, unknown> & { metadata?: Record<string, unknown> };

/** Types whose strategy's AllowUnconditionalUpdate is false (besides every custom resource). */
const CONDITIONAL_UPDATE_ONLY = new Set(['coordination.k8s.io/leases', 'apiextensions.k8s.io/customresourcedefinitions']);

export function allowsUnconditionalUpdate(t: FakeResourceType): boolean {
  return !t.custom && !CONDITIONAL_UPDATE_ONLY.has(`${t.group}/${t.plural}`);
}

/** Built-in types served with a /status subresource (of those the fake knows). */
export const BUILTIN_STATUS_SUBRESOURCE = new Set([
  '/namespaces',
  '/pods',
  '/nodes',
  '/services',
  'apps/daemonsets',
  'apps/deployments',
  'apps/replicasets',
  'apps/statefulsets',
  'networking.k8s.io/ingresses',
  'apiextensions.k8s.io/customresourcedefinitions',
]);

/**
 * JSON with object keys sorted: the real server compares decoded objects, so
 * the key order a client serializes in (client-node sorts, kubectl does not)
 * must not make a write look like a change.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return v;
    return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  });
}

function setStatus(obj: Obj, status: unknown): void {
  if (status === undefined) delete obj.status;
  else obj.status = structuredClone(status);
}

/**
 * A client's write to the main resource of a type with a status subresource:
 * the status stays what it was (a create of a custom resource starts without
 * one), as the real strategies' PrepareForCreate/PrepareForUpdate do.
 */
export function prepareMainWrite(t: FakeResourceType, obj: Obj, old: Obj | undefined): void {
  if (t.statusSubresource !== true) return;
  if (old !== undefined) setStatus(obj, old.status);
  else if (t.custom) delete obj.status;
}

/**
 * A client's write to /status: the stored object with the new status only
 * (spec, labels, annotations and the rest of metadata stay), carrying the
 * request's resourceVersion for the precondition check.
 */
export function prepareStatusWrite(obj: Obj, old: Obj): Obj {
  const out = structuredClone(old);
  setStatus(out, obj.status);
  const rv = obj.metadata?.resourceVersion;
  const meta = out.metadata ?? {};
  if (rv === undefined) delete meta.resourceVersion;
  else meta.resourceVersion = rv;
  out.metadata = meta;
  return out;
}

/**
 * The part of an object whose change increments metadata.generation. For a
 * custom resource without a status subresource that is everything but
 * metadata (a status change moves it too); otherwise everything but metadata
 * and status.
 */
export function generationPart(t: FakeResourceType, obj: Obj): string {
  const rest: Record<string, unknown> = { ...obj };
  delete rest.metadata;
  delete rest.apiVersion;
  delete rest.kind;
  if (!(t.custom && t.statusSubresource !== true)) delete rest.status;
  return canonicalJson(rest);
}
