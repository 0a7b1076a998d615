/**
 * A pod's endpoint labels from its Pod and Namespace objects, in the form the
 * policy parser selects on (podSelector keys as `k8s:<key>`, namespaceSelector
 * keys under NAMESPACE_LABEL_PREFIX, the namespace as POD_NAMESPACE_LABEL).
 */
import type { V1Namespace, V1Pod } from '@kubernetes/client-node';
import {
  isKubernetesDerivedKey,
  LabelError,
  LabelSet,
  LabelSource,
  makeLabel,
  NAMESPACE_LABEL_PREFIX,
  POD_NAMESPACE_LABEL,
  SERVICE_ACCOUNT_LABEL,
  type Label,
} from '../labels/index.js';

export { SERVICE_ACCOUNT_LABEL };

/** A label the pod's own metadata cannot set, and why. */
export interface SkippedLabel {
  key: string;
  reason: string;
}

/**
 * k8s:io.kubernetes.pod.namespace=<ns>, every pod label as k8s:<k>=<v>, every
 * namespace label as k8s:io.tendril.k8s.namespace.labels.<k>=<v>,
 * k8s:io.tendril.k8s.policy.serviceaccount=<sa>. A label that is no valid
 * tendril label (a namespace key too long once prefixed) or that would
 * overwrite one of the watcher's own keys is left out and reported to `onSkipped`.
 */
export function k8sPodLabels(pod: V1Pod, namespace: V1Namespace | undefined, onSkipped?: (s: SkippedLabel) => void): LabelSet {
  const ns = pod.metadata?.namespace ?? 'default';
  const labels: Label[] = [makeLabel(LabelSource.K8s, POD_NAMESPACE_LABEL, ns)];
  const add = (key: string, value: string, reportKey: string) => {
    try {
      labels.push(makeLabel(LabelSource.K8s, key, value));
    } catch (err) {
      if (!(err instanceof LabelError)) throw err;
      onSkipped?.({ key: reportKey, reason: err.message });
    }
  };
  for (const [k, v] of Object.entries(pod.metadata?.labels ?? {})) {
    // Keys only the watcher writes (src/labels' list): a pod labelled `io.kubernetes.pod.namespace:
    // kube-system` would otherwise claim another namespace's identity and pass its policies.
    if (isKubernetesDerivedKey(k)) onSkipped?.({ key: k, reason: 'the key is reserved for labels the agent derives' });
    else add(k, v, k);
  }
  for (const [k, v] of Object.entries(namespace?.metadata?.labels ?? {})) add(`${NAMESPACE_LABEL_PREFIX}${k}`, v, `namespace label ${k}`);
  const sa = pod.spec?.serviceAccountName;
  if (sa) add(SERVICE_ACCOUNT_LABEL, sa, 'spec.serviceAccountName');
  return LabelSet.from(labels);
}
