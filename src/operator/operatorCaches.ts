/**
 * What the operator follows, leader or not (a follower that takes over has
 * warm caches): TendrilIdentities, TendrilEndpoints, TendrilNodes, Pods, and
 * the Leases of its namespace (its own election Lease and the nodes'
 * liveness Leases). None is optional: a CRD the server does not serve leaves
 * its cache unsynced, and the controllers and /healthz wait — the identity GC
 * must never read "no endpoints" from a missing TendrilEndpoint CRD.
 */
import { CoordinationV1Api, CoreV1Api, CustomObjectsApi, type KubeConfig, type KubernetesListObject, type KubernetesObject, type V1Lease, type V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import { ResourceInformer } from '../k8s/resourceInformer.js';
import { TENDRIL_IDENTITY_PATH, TENDRIL_IDENTITY_PLURAL } from '../k8s/tendrilIdentity.js';
import type { RetryOptions } from '../k8s/types.js';
import { TENDRIL_ENDPOINT_PATH, TENDRIL_ENDPOINT_PLURAL } from '../k8s/tendrilEndpoint.js';
import { TENDRIL_NODE_PATH, TENDRIL_NODE_PLURAL } from '../k8s/tendrilNode.js';
// Every tendril CRD is in one group/version (design27.md).
import { TENDRIL_POLICY_GROUP as TENDRIL_GROUP, TENDRIL_POLICY_VERSION as TENDRIL_VERSION } from '../k8s/policyWatcher.js';

export interface OperatorCachesOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  logger: Logger;
  retry?: RetryOptions;
}

export class OperatorCaches {
  readonly identities: ResourceInformer<KubernetesObject>;
  readonly endpoints: ResourceInformer<KubernetesObject>;
  readonly nodes: ResourceInformer<KubernetesObject>;
  readonly pods: ResourceInformer<V1Pod>;
  readonly leases: ResourceInformer<V1Lease>;

  constructor(o: OperatorCachesOptions) {
    const custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    const core = o.kubeConfig.makeApiClient(CoreV1Api);
    const coordination = o.kubeConfig.makeApiClient(CoordinationV1Api);
    const common = { kubeConfig: o.kubeConfig, logger: o.logger, ...(o.retry === undefined ? {} : { retry: o.retry }) };
    const tendril = (plural: string, path: string) =>
      new ResourceInformer<KubernetesObject>({
        ...common,
        resource: plural,
        path,
        list: () => custom.listClusterCustomObject({ group: TENDRIL_GROUP, version: TENDRIL_VERSION, plural }) as Promise<KubernetesListObject<KubernetesObject>>,
      });
    this.identities = tendril(TENDRIL_IDENTITY_PLURAL, TENDRIL_IDENTITY_PATH);
    this.endpoints = tendril(TENDRIL_ENDPOINT_PLURAL, TENDRIL_ENDPOINT_PATH);
    this.nodes = tendril(TENDRIL_NODE_PLURAL, TENDRIL_NODE_PATH);
    this.pods = new ResourceInformer<V1Pod>({ ...common, resource: 'pods', path: '/api/v1/pods', model: 'V1Pod', list: () => core.listPodForAllNamespaces() });
    this.leases = new ResourceInformer<V1Lease>({
      ...common,
      resource: 'leases',
      path: `/apis/coordination.k8s.io/v1/namespaces/${o.namespace}/leases`,
      model: 'V1Lease',
      list: () => coordination.listNamespacedLease({ namespace: o.namespace }),
    });
  }

  get all(): ResourceInformer<KubernetesObject>[] {
    return [this.identities, this.endpoints, this.nodes, this.pods, this.leases] as ResourceInformer<KubernetesObject>[];
  }

  start(): void {
    for (const i of this.all) i.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.all.map((i) => i.stop()));
  }

  /** Every cache has its first list. */
  get synced(): boolean {
    return this.all.every((i) => i.isSynced);
  }

  /** Synced, and every watch open now (the controllers act on nothing older than an outage). */
  get current(): boolean {
    return this.all.every((i) => i.isSynced && i.connected);
  }

  /** The resources not synced or not connected, for /healthz. */
  lagging(): string[] {
    return this.all.filter((i) => !i.isSynced || !i.connected).map((i) => `${i.resource} ${i.isSynced ? 'disconnected' : 'not synced'}`);
  }

  /** Resolves once every cache has its first list. */
  whenSynced(): Promise<void> {
    return Promise.all(this.all.map((i) => i.synced)).then(() => undefined);
  }
}
