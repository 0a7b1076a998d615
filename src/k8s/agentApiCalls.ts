/**
 * Every Kubernetes API request tendril-agent makes, in one place. The RBAC of
 * deploy/kubernetes/tendril.yaml (a ClusterRole, and a Role in the agent's
 * namespace for the Leases) is checked against this list by
 * test/deploy/manifests.test.ts, and test/k8s/agentApiCalls.test.ts runs the
 * agent's Kubernetes parts against the fake API server and checks every
 * request it saw is listed here. A new request in src/k8s needs a line here,
 * or those tests fail (and so would the agent, on a real cluster: 403).
 */
import { TENDRIL_POLICY_GROUP } from './policyWatcher.js';
import { TENDRIL_ENDPOINT_PLURAL } from './tendrilEndpoint.js';
import { TENDRIL_IDENTITY_PLURAL } from './tendrilIdentity.js';
import { TENDRIL_NODE_PLURAL } from './tendrilNode.js';

/** Requests on one resource (the verbs of RBAC and of the fake API server's request counts). */
export interface ApiCall {
  /** API group ('' for the core group). */
  group: string;
  resource: string;
  verbs: readonly string[];
  /** cluster: all namespaces or cluster-scoped (a ClusterRole); namespace: only the component's namespace (a Role). */
  scope: 'cluster' | 'namespace';
}

export interface AgentApiCall extends ApiCall {
  /**
   * The identity allocation modes that make the requests: the watchers run in
   * both; the TendrilIdentity/TendrilNode/TendrilEndpoint stores and the node
   * Leases only in crd mode (kvstore mode keeps that state in etcd).
   */
  modes: ReadonlyArray<'kvstore' | 'crd'>;
}

const BOTH = ['kvstore', 'crd'] as const;
const CRD = ['crd'] as const;
/** The informers' verbs (get: the watchers' RBAC has always allowed reading one object; `nodes` needs it below). */
const READ = ['get', 'list', 'watch'] as const;

export const AGENT_API_CALLS: readonly AgentApiCall[] = [
  // The watchers (src/k8s/watchers.ts): pods and namespaces (endpoint labels), Nodes (this node's
  // addresses and spec.podCIDRs for `ipam: kubernetes`; in crd mode a GET of this node's Node for the
  // TendrilNode's owner reference), Services and EndpointSlices, NetworkPolicies and tendril's policies.
  { group: '', resource: 'pods', verbs: READ, scope: 'cluster', modes: BOTH },
  { group: '', resource: 'namespaces', verbs: READ, scope: 'cluster', modes: BOTH },
  { group: '', resource: 'nodes', verbs: READ, scope: 'cluster', modes: BOTH },
  { group: '', resource: 'services', verbs: READ, scope: 'cluster', modes: BOTH },
  { group: 'discovery.k8s.io', resource: 'endpointslices', verbs: READ, scope: 'cluster', modes: BOTH },
  { group: 'networking.k8s.io', resource: 'networkpolicies', verbs: READ, scope: 'cluster', modes: BOTH },
  { group: TENDRIL_POLICY_GROUP, resource: 'tendrilnetworkpolicies', verbs: READ, scope: 'cluster', modes: BOTH },
  { group: TENDRIL_POLICY_GROUP, resource: 'tendrilclusterwidenetworkpolicies', verbs: READ, scope: 'cluster', modes: BOTH },
  // Identities (kubernetesIdentities.ts): followed; a new label set's object created; after a lost
  // create (409) the winner's object read. Deleting is the operator's (identity GC).
  { group: TENDRIL_POLICY_GROUP, resource: TENDRIL_IDENTITY_PLURAL, verbs: ['create', 'get', 'list', 'watch'], scope: 'cluster', modes: CRD },
  // The node registry (kubernetesNodeRegistry.ts): every node followed; this node's object created,
  // then merge-patched (spec.ipam stays the operator's). Never read alone, never deleted (its Node's GC does).
  { group: TENDRIL_POLICY_GROUP, resource: TENDRIL_NODE_PLURAL, verbs: ['create', 'list', 'patch', 'watch'], scope: 'cluster', modes: CRD },
  // The ipcache sync (kubernetesIPCacheSync.ts): every namespace's followed (paged lists); this
  // node's pods' objects created, replaced with a resourceVersion, deleted with preconditions; read
  // again after a conflict.
  { group: TENDRIL_POLICY_GROUP, resource: TENDRIL_ENDPOINT_PLURAL, verbs: ['create', 'delete', 'get', 'list', 'update', 'watch'], scope: 'cluster', modes: CRD },
  // Node liveness (nodeLeases.ts): this node's Lease `tendril-node-<node>` created and renewed
  // (read again after a conflict), every node's followed, in the agent's namespace (--k8s-namespace).
  { group: 'coordination.k8s.io', resource: 'leases', verbs: ['create', 'get', 'list', 'update', 'watch'], scope: 'namespace', modes: CRD },
];

/** `verb group/resource` for every request a mode makes at a scope (the form RBAC rules are compared in). */
export function agentGrants(mode: 'kvstore' | 'crd', scope: ApiCall['scope']): string[] {
  return AGENT_API_CALLS.filter((c) => c.modes.includes(mode) && c.scope === scope).flatMap((c) => c.verbs.map((v) => `${v} ${c.group}/${c.resource}`));
}
