/**
 * Public API of src/labels: label parsing and printing in Cilium's form,
 * sorted immutable label sets, the identity-relevant/informational split and
 * Kubernetes label selectors. Other subsystems import only from here.
 */
export { LabelError, LabelErrorCode } from './errors.js';
export { LabelSource, isLabelSource, parseLabelSource } from './source.js';
export { POD_LABEL_SOURCES, isPodLabelSource, parsePodLabel, podLabelDefaultSource, requirePodLabel } from './podSources.js';
export {
  KUBERNETES_DERIVED_KEYS,
  KUBERNETES_DERIVED_KEY_PREFIXES,
  NAMESPACE_LABEL_PREFIX,
  SERVICE_ACCOUNT_LABEL,
  isKubernetesDerivedKey,
  requireNotKubernetesDerived,
} from './kubernetesDerived.js';
export { ReservedLabelKey, RESERVED_LABEL_KEYS, isReservedLabelKey } from './reserved.js';
export {
  type Label,
  makeLabel,
  parseLabel,
  parseSelectLabel,
  formatLabel,
  compareLabels,
  labelMatches,
  cidrLabel,
  cidrLabelKey,
  parseCidrLabelKey,
  reservedLabel,
} from './label.js';
export { LabelSet } from './labelSet.js';
export {
  LabelFilter,
  type LabelFilterConfig,
  type SplitLabels,
  POD_NAMESPACE_LABEL,
  DEFAULT_INCLUDE_PATTERNS,
  DEFAULT_EXCLUDE_PATTERNS,
} from './filter.js';
export {
  LabelSelector,
  type LabelSelectorSpec,
  type LabelSelectorRequirement,
  type SelectorOperator,
  type Requirement,
  requirementMatches,
  selectorMatches,
  matchesLabel,
} from './selector.js';
export {
  validateLabelKey,
  validateLabelValue,
  MAX_LABEL_NAME_LENGTH,
  MAX_LABEL_PREFIX_LENGTH,
  MAX_LABEL_VALUE_LENGTH,
} from './validate.js';
