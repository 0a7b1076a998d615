/**
 * Every Kubernetes API request tendril-operator makes, in one place:
 * OPERATOR_API_CALLS lists them (the RBAC in deploy/kubernetes/tendril-operator.yaml
 * is checked against it by test/deploy/manifests.test.ts, and the operator's
 * end-to-end test checks the requests it saw against it), and OperatorApi
 * makes the writes and the live reads the controllers confirm with.
 * (The informers' list and watch calls are in operatorCaches.ts; the leader
 * election's Lease calls in leaderElection.ts.)
 */
import { CoordinationV1Api, CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions, type KubeConfig, type KubernetesObject, type V1Lease, type V1Pod } from '@kubernetes/client-node';
import type { ApiCall } from '../k8s/agentApiCalls.js';
import { httpStatusOf } from '../k8s/resourceInformer.js';
import { TENDRIL_IDENTITY_PLURAL } from '../k8s/tendrilIdentity.js';
import { NODE_LEASE_PREFIX } from '../k8s/nodeLeases.js';
// Every tendril CRD is in one group/version (design27.md).
import { TENDRIL_POLICY_GROUP as TENDRIL_GROUP, TENDRIL_POLICY_VERSION as TENDRIL_VERSION } from '../k8s/policyWatcher.js';
import { TENDRIL_ENDPOINT_PLURAL } from '../k8s/tendrilEndpoint.js';
import { TENDRIL_NODE_PLURAL } from '../k8s/tendrilNode.js';
import { tendrilNodeIpamPatch } from './tendrilObjectViews.js';

export const OPERATOR_API_CALLS: readonly ApiCall[] = [
  // Identity GC: followed, and deleted when unused past the grace period.
  { group: 'tendril.io', resource: TENDRIL_IDENTITY_PLURAL, verbs: ['delete', 'list', 'watch'], scope: 'cluster' },
  // Endpoint GC: followed (identity use, owners), deleted when their pod or node is gone.
  { group: 'tendril.io', resource: TENDRIL_ENDPOINT_PLURAL, verbs: ['delete', 'list', 'watch'], scope: 'cluster' },
  // Cluster-pool CIDRs: followed, read again after a conflict, spec.ipam patched; a missing node is confirmed by a GET.
  { group: 'tendril.io', resource: TENDRIL_NODE_PLURAL, verbs: ['get', 'list', 'watch', 'patch'], scope: 'cluster' },
  // Endpoint GC: the owners, followed and confirmed by a GET before an endpoint goes.
  { group: '', resource: 'pods', verbs: ['get', 'list', 'watch'], scope: 'cluster' },
  // Leader election (tendril-operator) and node liveness (tendril-node-<node>) in the operator's namespace.
  { group: 'coordination.k8s.io', resource: 'leases', verbs: ['create', 'get', 'list', 'update', 'watch'], scope: 'namespace' },
];

/** An answer that means "not there any more" or "changed since you read it": the controllers look again next pass. */
export function isGoneOrChanged(err: unknown): boolean {
  const s = httpStatusOf(err);
  return s === 404 || s === 409;
}

export class OperatorApi {
  readonly custom: CustomObjectsApi;
  readonly core: CoreV1Api;
  readonly coordination: CoordinationV1Api;
  readonly namespace: string;

  constructor(kubeConfig: KubeConfig, namespace: string) {
    this.custom = kubeConfig.makeApiClient(CustomObjectsApi);
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.coordination = kubeConfig.makeApiClient(CoordinationV1Api);
    this.namespace = namespace;
  }

  #tendril(plural: string) {
    return { group: TENDRIL_GROUP, version: TENDRIL_VERSION, plural };
  }

  /** Deletes a TendrilIdentity if it is still the object (uid) in the state (resourceVersion) we judged. */
  async deleteIdentity(name: string, uid: string, resourceVersion: string): Promise<void> {
    await this.custom.deleteClusterCustomObject({ ...this.#tendril(TENDRIL_IDENTITY_PLURAL), name, body: { preconditions: { uid, resourceVersion } } });
  }

  async deleteEndpoint(namespace: string, name: string, uid: string, resourceVersion: string): Promise<void> {
    await this.custom.deleteNamespacedCustomObject({ ...this.#tendril(TENDRIL_ENDPOINT_PLURAL), namespace, name, body: { preconditions: { uid, resourceVersion } } });
  }

  /** The pod, or undefined when it does not exist. */
  async getPod(namespace: string, name: string): Promise<V1Pod | undefined> {
    try {
      return await this.core.readNamespacedPod({ namespace, name });
    } catch (err) {
      if (httpStatusOf(err) === 404) return undefined;
      throw err;
    }
  }

  async getTendrilNode(name: string): Promise<KubernetesObject | undefined> {
    try {
      return (await this.custom.getClusterCustomObject({ ...this.#tendril(TENDRIL_NODE_PLURAL), name })) as KubernetesObject;
    } catch (err) {
      if (httpStatusOf(err) === 404) return undefined;
      throw err;
    }
  }

  /** The node's liveness Lease (tendril-node-<node>), or undefined. */
  async getNodeLease(node: string): Promise<V1Lease | undefined> {
    try {
      return await this.coordination.readNamespacedLease({ namespace: this.namespace, name: `${NODE_LEASE_PREFIX}${node}` });
    } catch (err) {
      if (httpStatusOf(err) === 404) return undefined;
      throw err;
    }
  }

  /** Every TendrilNode as the server has them now (not as a cache last saw them). */
  async listTendrilNodes(): Promise<KubernetesObject[]> {
    const list = (await this.custom.listClusterCustomObject(this.#tendril(TENDRIL_NODE_PLURAL))) as { items?: KubernetesObject[] };
    return list.items ?? [];
  }

  /** Sets spec.ipam.podCIDRs by a JSON merge patch conditional on resourceVersion (409 when the node moved on). */
  async patchNodeIpam(name: string, resourceVersion: string, podCIDRs: readonly string[]): Promise<KubernetesObject> {
    return (await this.custom.patchClusterCustomObject(
      { ...this.#tendril(TENDRIL_NODE_PLURAL), name, body: tendrilNodeIpamPatch(resourceVersion, podCIDRs) },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    )) as KubernetesObject;
  }
}

/** A Lease's MicroTime as epoch ms (the client hands it back as a Date or a string); NaN when absent. */
export function leaseTimeMs(v: unknown): number {
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'string') return Date.parse(v);
  return Number.NaN;
}

/** A node Lease is live while now < renewTime + leaseDurationSeconds (design27.md; this process's clock). */
export function nodeLeaseLive(lease: V1Lease | undefined, now = Date.now()): boolean {
  const spec = lease?.spec;
  if (spec === undefined) return false;
  const renewed = leaseTimeMs(spec.renewTime ?? spec.acquireTime);
  return !Number.isNaN(renewed) && now < renewed + (spec.leaseDurationSeconds ?? 0) * 1000;
}
