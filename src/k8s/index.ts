/**
 * Public API of src/k8s: the agent follows the Kubernetes API server (pods'
 * and namespaces' labels, this node's Node, NetworkPolicies and tendril's
 * policy CRDs, Services and EndpointSlices). The agent imports only from here.
 */
export {
  type K8sConnectionOptions,
  type K8sResourceStatus,
  type K8sStatus,
  type K8sEndpointTarget,
  type K8sPolicyTarget,
  type OwnNode,
  type RetryOptions,
  DEFAULT_RETRY,
} from './types.js';
export {
  K8sErrorCode,
  K8sError,
  K8sConfigError,
  K8sSyncTimeoutError,
  K8sNodeTimeoutError,
  K8sStoppedError,
  K8sObjectConflictError,
  isK8sError,
} from './errors.js';
export { loadKubeConfig, k8sEnabled, apiServerOf, SERVICE_ACCOUNT_DIR } from './kubeConfig.js';
export { k8sPodLabels, SERVICE_ACCOUNT_LABEL, type SkippedLabel } from './podLabels.js';
export { policyDocument, TENDRIL_POLICY_GROUP, TENDRIL_POLICY_VERSION } from './policyWatcher.js';
export { ownNodeOf } from './nodeWatcher.js';
export { K8sWatchers, type K8sWatchersOptions } from './watchers.js';
export { ServiceSync, K8S_SERVICE_ID_MIN, K8S_SERVICE_ID_MAX, isK8sServiceId, userServiceApi } from './serviceSync.js';
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
