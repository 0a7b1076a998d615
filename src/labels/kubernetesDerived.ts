import { LabelError, LabelErrorCode } from './errors.js';
import { POD_NAMESPACE_LABEL } from './filter.js';
import { formatLabel, type Label } from './label.js';

/** Namespace labels are part of a pod's identity under this prefix (namespaceSelector matches them). */
export const NAMESPACE_LABEL_PREFIX = 'io.tendril.k8s.namespace.labels.';
/** A pod's service account in its identity (Cilium's io.cilium.k8s.policy.serviceaccount). */
export const SERVICE_ACCOUNT_LABEL = 'io.tendril.k8s.policy.serviceaccount';

/**
 * The keys of what Kubernetes says about a pod rather than what the pod says
 * about itself: the pod's namespace, its namespace's labels, its service
 * account, its cluster. Policies trust them (a namespaceSelector matches the
 * namespace's labels), so only the agent sets them: the namespace from the
 * runtime's K8S_POD_NAMESPACE, the rest from the API server. Tendril's
 * spelling and Cilium's (`io.cilium.k8s.*`, which imported Cilium policies
 * select on) are both covered, every key under either prefix included, so a
 * key Cilium or tendril derives later is covered before it exists.
 */
export const KUBERNETES_DERIVED_KEYS: readonly string[] = Object.freeze([POD_NAMESPACE_LABEL]);
export const KUBERNETES_DERIVED_KEY_PREFIXES: readonly string[] = Object.freeze(['io.tendril.k8s.', 'io.cilium.k8s.']);

/**
 * Whether `key` is one only the agent may set. Case-insensitive: a key
 * without a '/' may hold capitals (`IO.KUBERNETES.POD.NAMESPACE` is a valid
 * key), and no pod needs such a spelling of a derived key.
 */
export function isKubernetesDerivedKey(key: string): boolean {
  const k = key.toLowerCase();
  return KUBERNETES_DERIVED_KEYS.includes(k) || KUBERNETES_DERIVED_KEY_PREFIXES.some((p) => k.startsWith(p));
}

/**
 * Fails with LABEL_KEY_DERIVED, naming the key and `from`, when a label a
 * pod's runtime or an API caller gives has a key only the agent derives
 * (whatever its source: `k8s:`, `container:`, none, …).
 */
export function requireNotKubernetesDerived(label: Label, from: string): void {
  if (!isKubernetesDerivedKey(label.key)) return;
  const text = formatLabel(label);
  throw new LabelError(
    LabelErrorCode.KEY_DERIVED,
    `${from}: label key "${label.key}" (in ${JSON.stringify(text)}) is derived from Kubernetes: the pod's namespace comes only from the runtime's K8S_POD_NAMESPACE, its namespace's labels, service account and cluster only from the API server`,
    text,
  );
}
