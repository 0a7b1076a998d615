/**
 * Public API of src/k8s that costs nothing to load: whether the agent follows
 * the Kubernetes API server, what its configuration means for it, the errors
 * and types. Everything that talks to the API server (pods' and namespaces'
 * labels, this node's Node, NetworkPolicies and tendril's policy CRDs,
 * Services and EndpointSlices, the crd-mode stores) is in ./kubernetes.js,
 * which loads the Kubernetes client library (about a second of CPU at start):
 * the agent imports it with loadKubernetes() only when Kubernetes is on.
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
export { k8sEnabled, SERVICE_ACCOUNT_DIR } from './inCluster.js';
export { type K8sAgentConfig, type NodeFacts, k8sConnection, requireKubernetesForIpam, configWithNode, registryAddresses } from './agentSettings.js';
export { k8sPodLabels, SERVICE_ACCOUNT_LABEL, type SkippedLabel } from './podLabels.js';
export { K8S_SERVICE_ID_MIN, K8S_SERVICE_ID_MAX, isK8sServiceId, userServiceApi } from './serviceSync.js';

export type KubernetesModule = typeof import('./kubernetes.js');

/** The parts that talk to the API server, loaded on first use (the module system keeps the one copy). */
export function loadKubernetes(): Promise<KubernetesModule> {
  return import('./kubernetes.js');
}
