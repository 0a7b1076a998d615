import { LabelError, LabelErrorCode } from './errors.js';
import { formatLabel, parseLabel, type Label } from './label.js';
import { LabelSource } from './source.js';

/**
 * The sources a pod's own labels may have: what its orchestrator (`k8s`) or
 * its runtime (`container`) says about it. Every other source is the agent's
 * to give: `reserved` names special entities (host, world, health, init, …)
 * whose identities the datapath trusts, `cidr` names address ranges outside
 * the cluster, `unspec` is only the parser's placeholder for "no source" and
 * `any` is a selector wildcard. A pod claiming one of those would take an
 * identity that is not its own (reserved:host is identity 1).
 */
export const POD_LABEL_SOURCES: readonly LabelSource[] = Object.freeze([LabelSource.K8s, LabelSource.Container]);

const POD_SOURCES: ReadonlySet<string> = new Set(POD_LABEL_SOURCES);

export function isPodLabelSource(source: string): boolean {
  return POD_SOURCES.has(source);
}

/** Fails with LABEL_SOURCE_NOT_ALLOWED, naming the label, when it is not one a pod may carry. */
export function requirePodLabel(label: Label): void {
  if (isPodLabelSource(label.source)) return;
  const text = formatLabel(label);
  throw new LabelError(
    LabelErrorCode.SOURCE_NOT_ALLOWED,
    `label ${JSON.stringify(text)} has source "${label.source}": a pod may carry only ${POD_LABEL_SOURCES.map((s) => `${s}:`).join(' and ')} labels`,
    text,
  );
}

/**
 * The source a pod label given without one gets: `k8s` for a pod of a
 * Kubernetes namespace (its runtime passed K8S_POD_NAMESPACE), `container`
 * for every other container — the labels Cilium gives a runtime's
 * containers. Every path that turns a label text into a pod's label (CNI
 * ADD, the labels API, a trace by labels) asks this one function, so a
 * trace resolves `app=web` exactly as the endpoint carrying it does.
 */
export function podLabelDefaultSource(namespace: string | undefined): LabelSource {
  return namespace ? LabelSource.K8s : LabelSource.Container;
}

/** A pod's label from its text, `[source:]key[=value]`, with the source podLabelDefaultSource gives. */
export function parsePodLabel(text: string, namespace: string | undefined): Label {
  return parseLabel(text, podLabelDefaultSource(namespace));
}
