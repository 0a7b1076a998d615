import { LabelError, LabelErrorCode } from './errors.js';
import { formatLabel, type Label } from './label.js';
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
