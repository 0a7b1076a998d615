import { isKubernetesDerivedKey, LabelError, LabelErrorCode, LabelSet, LabelSource, parseLabel, parsePodLabel, requireNotKubernetesDerived } from '../labels/index.js';

/** PATCH /endpoint/{id}/labels: label texts to delete (a key without a source: from every source), then to add. */
export interface LabelPatch {
  add?: readonly string[];
  delete?: readonly string[];
}

/**
 * An endpoint's labels with a patch applied, by the endpoint's label rules:
 * no key Kubernetes derives may be deleted (deleting the namespace label
 * would take the pod out of its namespace's policies, its isolation
 * included) nor added; a label added without a source takes the endpoint's
 * kind (k8s for a pod, container otherwise). `from` names the caller in the
 * refusal. EndpointManager.updateLabels then checks the pod's label sources.
 */
export function patchedLabels(ep: { labels: readonly string[]; podNamespace?: string | undefined }, patch: LabelPatch, from: string): LabelSet {
  let labels = LabelSet.parse(ep.labels);
  for (const text of patch.delete ?? []) {
    const l = parseLabel(text, LabelSource.Any);
    if (isKubernetesDerivedKey(l.key)) throw new LabelError(LabelErrorCode.KEY_DERIVED, `${from}: label key "${l.key}" is derived from Kubernetes and cannot be deleted through the API; nothing was changed`, l.key);
    labels = labels.without(l.key, l.source);
  }
  const added = (patch.add ?? []).map((t) => parsePodLabel(t, ep.podNamespace));
  for (const l of added) requireNotKubernetesDerived(l, from);
  return labels.with(added);
}
