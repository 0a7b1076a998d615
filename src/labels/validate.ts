import { LabelError, LabelErrorCode } from './errors.js';

/**
 * Kubernetes label syntax (apimachinery IsQualifiedName / IsValidLabelValue),
 * which Cilium applies to k8s-style labels: a key is an optional DNS-1123
 * subdomain prefix (≤253) and '/', then a name of ≤63 alphanumerics with
 * '-', '_', '.' inside; a value is empty or follows the name rule.
 */
export const MAX_LABEL_NAME_LENGTH = 63;
export const MAX_LABEL_PREFIX_LENGTH = 253;
export const MAX_LABEL_VALUE_LENGTH = 63;

const NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function show(s: string): string {
  return JSON.stringify(s.length > 80 ? `${s.slice(0, 77)}...` : s);
}

export function validateLabelKey(key: string, input = key): void {
  if (key.length === 0) throw new LabelError(LabelErrorCode.INVALID_KEY, `label key must not be empty in ${show(input)}`, input);
  const slash = key.indexOf('/');
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (prefix !== undefined) {
    if (prefix.length > MAX_LABEL_PREFIX_LENGTH) {
      throw new LabelError(
        LabelErrorCode.KEY_TOO_LONG,
        `label key prefix is ${prefix.length} characters, the limit is ${MAX_LABEL_PREFIX_LENGTH}, in ${show(input)}`,
        input,
      );
    }
    if (!DNS1123_SUBDOMAIN.test(prefix)) {
      throw new LabelError(
        LabelErrorCode.INVALID_KEY,
        `label key prefix ${show(prefix)} must be a lower-case DNS subdomain (a-z, 0-9, '-', '.') in ${show(input)}`,
        input,
      );
    }
  }
  if (name.length > MAX_LABEL_NAME_LENGTH) {
    throw new LabelError(
      LabelErrorCode.KEY_TOO_LONG,
      `label key name is ${name.length} characters, the limit is ${MAX_LABEL_NAME_LENGTH}, in ${show(input)}`,
      input,
    );
  }
  if (!NAME.test(name)) {
    throw new LabelError(
      LabelErrorCode.INVALID_KEY,
      `label key name ${show(name)} must be alphanumerics with '-', '_' or '.' inside, optionally after a "prefix/", in ${show(input)}`,
      input,
    );
  }
}

export function validateLabelValue(value: string, input = value): void {
  if (value.length === 0) return;
  if (value.length > MAX_LABEL_VALUE_LENGTH) {
    throw new LabelError(
      LabelErrorCode.VALUE_TOO_LONG,
      `label value is ${value.length} characters, the limit is ${MAX_LABEL_VALUE_LENGTH}, in ${show(input)}`,
      input,
    );
  }
  if (!NAME.test(value)) {
    throw new LabelError(
      LabelErrorCode.INVALID_VALUE,
      `label value ${show(value)} must be empty or alphanumerics with '-', '_' or '.' inside, in ${show(input)}`,
      input,
    );
  }
}
