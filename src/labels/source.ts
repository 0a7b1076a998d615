import { LabelError, LabelErrorCode } from './errors.js';

/**
 * Where a label came from, as in Cilium. The source is part of the label's
 * identity: `k8s:app=web` and `container:app=web` are different labels.
 */
export const LabelSource = {
  /** Pod labels (and the pod's namespace, service account, namespace labels). */
  K8s: 'k8s',
  /** Labels of the container itself (runtime annotations / image labels). */
  Container: 'container',
  /** Labels the agent gives special entities (host, world, health, …). */
  Reserved: 'reserved',
  /** Labels derived from an IP prefix, for CIDR identities. */
  Cidr: 'cidr',
  /** A label given without a source. */
  Unspec: 'unspec',
  /** Selector-only wildcard: matches a label of any source. */
  Any: 'any',
} as const;

export type LabelSource = (typeof LabelSource)[keyof typeof LabelSource];

const SOURCES: ReadonlySet<string> = new Set(Object.values(LabelSource));

export function isLabelSource(s: string): s is LabelSource {
  return SOURCES.has(s);
}

export function parseLabelSource(s: string, input = s): LabelSource {
  if (!isLabelSource(s)) {
    throw new LabelError(
      LabelErrorCode.INVALID_SOURCE,
      `unknown label source "${s}" in "${input}" (known: ${[...SOURCES].join(', ')})`,
      input,
    );
  }
  return s;
}
