/**
 * Public API of src/k8s with the Kubernetes client library behind it: the
 * watchers, the crd-mode stores (TendrilIdentity, TendrilNode,
 * TendrilEndpoint, node Leases) and the kubeconfig. The agent loads it with
 * loadKubernetes() (./index.js) when Kubernetes is on; the operator, which
 * always is, imports it directly.
 */
export * from './index.js';
export { loadKubeConfig, apiServerOf } from './kubeConfig.js';
export { policyDocument, TENDRIL_POLICY_GROUP, TENDRIL_POLICY_VERSION } from './policyWatcher.js';
export { ownNodeOf } from './nodeWatcher.js';
export { K8sWatchers, type K8sWatchersOptions } from './watchers.js';
export { ServiceSync } from './serviceSync.js';
export { AgentKubernetes, type AgentKubernetesOptions, type K8sTargets, DEFAULT_POD_WAIT_MS } from './agentKubernetes.js';
export { KubernetesIdentities, type KubernetesIdentitiesOptions } from './kubernetesIdentities.js';
export { KubernetesIdentityAllocator, type KubernetesIdentityAllocatorOptions } from './kubernetesIdentityAllocator.js';
export {
  tendrilIdentityObject,
  identityOfObject,
  identityProbeOrder,
  TENDRIL_IDENTITY_PLURAL,
  TENDRIL_IDENTITY_KIND,
  type TendrilIdentityObject,
} from './tendrilIdentity.js';
export { KubernetesNodeRegistry, type KubernetesNodeRegistryOptions } from './kubernetesNodeRegistry.js';
export { NodeLeaseFollower, NodeLeaseWriter, nodeLeaseName, NODE_LEASE_LABEL } from './nodeLeases.js';
export { TENDRIL_NODE_PLURAL, nodeRecordOfObject, allocatedPodCidrsOfObject } from './tendrilNode.js';
export { KubernetesIPCacheSync, type KubernetesIPCacheSyncOptions, type KubernetesSyncStats } from './kubernetesIPCacheSync.js';
export { PodEndpointFeed, type PodEndpointFeedOptions, type PublishedEndpointSource, type PublishedEndpointChange, type EndpointPodLookup, type PodCache } from './podEndpointFeed.js';
export { tendrilEndpointObject, TENDRIL_ENDPOINT_PLURAL, TENDRIL_ENDPOINT_KIND, TENDRIL_ENDPOINT_NODE_LABEL, type TendrilEndpointObject, type PublishedEndpoint } from './tendrilEndpoint.js';
