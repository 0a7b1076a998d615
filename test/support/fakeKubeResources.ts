// The resource types the fake Kubernetes API server knows: the built-in ones a
// tendril deployment touches (what the agent watches, and what the manifests in
// deploy/ create), plus whatever a CustomResourceDefinition registers at run
// time. Discovery documents are built from this table, so kubectl's REST
// mapping sees exactly what the fake can store.

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { BUILTIN_STATUS_SUBRESOURCE } from './fakeKubeStrategy.js';

/** One resource type as discovery describes it. */
export interface FakeResourceType {
  /** '' for the core group (served under /api/v1). */
  group: string;
  /** Served versions; the first is the preferred one. */
  versions: string[];
  plural: string;
  singular: string;
  kind: string;
  namespaced: boolean;
  shortNames?: string[];
  categories?: string[];
  /** Registered by a CRD (its objects keep apiVersion/kind inside lists, as unstructured objects do). */
  custom: boolean;
  /** Field selectors the real server accepts beyond metadata.name and metadata.namespace. */
  extraFieldSelectors?: string[];
  /** Served with a /status subresource (a CRD's `subresources: {status: {}}`). */
  statusSubresource?: boolean;
}

export const VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'];

function builtin(
  group: string,
  version: string,
  plural: string,
  kind: string,
  namespaced: boolean,
  shortNames?: string[],
  extraFieldSelectors?: string[],
): FakeResourceType {
  const t: FakeResourceType = { group, versions: [version], plural, singular: kind.toLowerCase(), kind, namespaced, custom: false };
  if (shortNames !== undefined) t.shortNames = shortNames;
  if (extraFieldSelectors !== undefined) t.extraFieldSelectors = extraFieldSelectors;
  if (BUILTIN_STATUS_SUBRESOURCE.has(`${group}/${plural}`)) t.statusSubresource = true;
  return t;
}

/** The field selectors kube-apiserver accepts on pods (pkg/registry/core/pod). */
const POD_FIELDS = [
  'spec.nodeName',
  'spec.restartPolicy',
  'spec.schedulerName',
  'spec.serviceAccountName',
  'spec.hostNetwork',
  'status.phase',
  'status.podIP',
  'status.nominatedNodeName',
];

export function builtinResourceTypes(): FakeResourceType[] {
  return [
    builtin('', 'v1', 'namespaces', 'Namespace', false, ['ns'], ['status.phase']),
    builtin('', 'v1', 'pods', 'Pod', true, ['po'], POD_FIELDS),
    builtin('', 'v1', 'nodes', 'Node', false, ['no'], ['spec.unschedulable']),
    builtin('', 'v1', 'services', 'Service', true, ['svc']),
    builtin('', 'v1', 'endpoints', 'Endpoints', true, ['ep']),
    builtin('', 'v1', 'configmaps', 'ConfigMap', true, ['cm']),
    builtin('', 'v1', 'secrets', 'Secret', true, undefined, ['type']),
    builtin('', 'v1', 'serviceaccounts', 'ServiceAccount', true, ['sa']),
    builtin('', 'v1', 'events', 'Event', true, ['ev']),
    builtin('apps', 'v1', 'daemonsets', 'DaemonSet', true, ['ds']),
    builtin('apps', 'v1', 'deployments', 'Deployment', true, ['deploy']),
    builtin('apps', 'v1', 'replicasets', 'ReplicaSet', true, ['rs']),
    builtin('apps', 'v1', 'statefulsets', 'StatefulSet', true, ['sts']),
    builtin('rbac.authorization.k8s.io', 'v1', 'clusterroles', 'ClusterRole', false),
    builtin('rbac.authorization.k8s.io', 'v1', 'clusterrolebindings', 'ClusterRoleBinding', false),
    builtin('rbac.authorization.k8s.io', 'v1', 'roles', 'Role', true),
    builtin('rbac.authorization.k8s.io', 'v1', 'rolebindings', 'RoleBinding', true),
    builtin('discovery.k8s.io', 'v1', 'endpointslices', 'EndpointSlice', true),
    builtin('networking.k8s.io', 'v1', 'networkpolicies', 'NetworkPolicy', true, ['netpol']),
    builtin('networking.k8s.io', 'v1', 'ingresses', 'Ingress', true, ['ing']),
    builtin('coordination.k8s.io', 'v1', 'leases', 'Lease', true),
    builtin('apiextensions.k8s.io', 'v1', 'customresourcedefinitions', 'CustomResourceDefinition', false, ['crd', 'crds']),
  ];
}

/** Where the tendril CRDs live in the repo (resolved from dist/test/support/). */
export const TENDRIL_CRD_DIR = fileURLToPath(new URL('../../../deploy/kubernetes/crds/', import.meta.url));

/**
 * The tendril CRDs as shipped in deploy/kubernetes/crds/, so tests that
 * preregister them get the same pruning and validation a cluster applies.
 */
export function tendrilCrdObjects(): object[] {
  return readdirSync(TENDRIL_CRD_DIR)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => parseAllDocuments(readFileSync(join(TENDRIL_CRD_DIR, f), 'utf8')).map((d) => d.toJS() as object | null))
    .filter((d): d is object => d !== null);
}

/** A CRD's resource type, or a reason why the CRD is invalid (as the real server's 422 would say). */
export function resourceTypeFromCrd(crd: Record<string, unknown>): FakeResourceType | string {
  const meta = (crd.metadata ?? {}) as Record<string, unknown>;
  const spec = (crd.spec ?? {}) as Record<string, unknown>;
  const names = (spec.names ?? {}) as Record<string, unknown>;
  const group = spec.group;
  const plural = names.plural;
  const kind = names.kind;
  if (typeof group !== 'string' || group === '') return 'spec.group: Required value';
  if (typeof plural !== 'string' || plural === '') return 'spec.names.plural: Required value';
  if (typeof kind !== 'string' || kind === '') return 'spec.names.kind: Required value';
  if (meta.name !== `${plural}.${group}`) return `metadata.name: Invalid value: "${String(meta.name)}": must be spec.names.plural+"."+spec.group`;
  if (spec.scope !== 'Namespaced' && spec.scope !== 'Cluster') return `spec.scope: Unsupported value: "${String(spec.scope)}": supported values: "Cluster", "Namespaced"`;
  const versions = Array.isArray(spec.versions) ? (spec.versions as Array<Record<string, unknown>>) : [];
  if (versions.length === 0) return 'spec.versions: Invalid value: must have exactly one version marked as storage version';
  if (versions.filter((v) => v.storage === true).length !== 1) return 'spec.versions: Invalid value: must have exactly one version marked as storage version';
  const served = versions.filter((v) => v.served === true).map((v) => String(v.name));
  const t: FakeResourceType = {
    group,
    versions: served,
    plural,
    singular: typeof names.singular === 'string' ? names.singular : kind.toLowerCase(),
    kind,
    namespaced: spec.scope === 'Namespaced',
    custom: true,
  };
  // The fake serves one schema per type (the first served version's), and so one subresource set.
  const first = versions.find((v) => v.served === true) ?? {};
  const subresources = (first.subresources ?? {}) as Record<string, unknown>;
  if (subresources.status !== undefined && subresources.status !== null) t.statusSubresource = true;
  if (Array.isArray(names.shortNames)) t.shortNames = names.shortNames.map(String);
  if (Array.isArray(names.categories)) t.categories = names.categories.map(String);
  return t;
}

/** apiVersion as written in objects: 'v1' for core, 'group/version' otherwise. */
export function apiVersionOf(group: string, version: string): string {
  return group === '' ? version : `${group}/${version}`;
}

/** GET /api/v1 or /apis/{group}/{version}: the resources served at that group version. */
export function apiResourceList(types: readonly FakeResourceType[], group: string, version: string): object {
  const resources = types
    .filter((t) => t.group === group && t.versions.includes(version))
    .map((t): Array<Record<string, unknown>> => {
      const r: Record<string, unknown> = {
        name: t.plural,
        singularName: t.singular,
        namespaced: t.namespaced,
        kind: t.kind,
        verbs: VERBS,
      };
      if (t.shortNames !== undefined && t.shortNames.length > 0) r.shortNames = t.shortNames;
      if (t.categories !== undefined && t.categories.length > 0) r.categories = t.categories;
      if (t.statusSubresource !== true) return [r];
      return [r, { name: `${t.plural}/status`, singularName: '', namespaced: t.namespaced, kind: t.kind, verbs: ['get', 'patch', 'update'] }];
    })
    .flat();
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: apiVersionOf(group, version), resources };
}

/** One entry of GET /apis (an APIGroup). */
export function apiGroup(types: readonly FakeResourceType[], group: string): object | undefined {
  const versions: string[] = [];
  for (const t of types) if (t.group === group) for (const v of t.versions) if (!versions.includes(v)) versions.push(v);
  if (versions.length === 0) return undefined;
  const gv = versions.map((v) => ({ groupVersion: `${group}/${v}`, version: v }));
  return { name: group, versions: gv, preferredVersion: gv[0] };
}

/** GET /apis: every non-core group, in first-registered order (as the real server keeps a stable order). */
export function apiGroupList(types: readonly FakeResourceType[]): object {
  const groups: string[] = [];
  for (const t of types) if (t.group !== '' && !groups.includes(t.group)) groups.push(t.group);
  return { kind: 'APIGroupList', apiVersion: 'v1', groups: groups.map((g) => apiGroup(types, g)).filter((g) => g !== undefined) };
}
