import { LabelError, LabelErrorCode } from './errors.js';
import { formatPrefix, tryParsePrefix, type IpPrefix } from '../netip/index.js';
import { isReservedLabelKey, RESERVED_LABEL_KEYS } from './reserved.js';
import { LabelSource, parseLabelSource } from './source.js';
import { validateLabelKey, validateLabelValue } from './validate.js';

/** One label. Always built through makeLabel/parseLabel so it is valid and frozen. */
export interface Label {
  readonly source: LabelSource;
  readonly key: string;
  /** '' for labels without a value (reserved and cidr labels, `any:key`). */
  readonly value: string;
}

/**
 * The text of a cidr label's key. Label keys cannot hold ':', so IPv6 colons
 * become '-' as in Cilium (`cidr:2001-db8--/32`), with a '0' added where the
 * text would start or end with one.
 */
export function cidrLabelKey(prefix: IpPrefix): string {
  const text = formatPrefix(prefix);
  if (prefix.family === 4) return text;
  const slash = text.indexOf('/');
  let addr = text.slice(0, slash).replaceAll(':', '-');
  if (addr.startsWith('-')) addr = `0${addr}`;
  if (addr.endsWith('-')) addr = `${addr}0`;
  return `${addr}${text.slice(slash)}`;
}

/** Reads a cidr label key (either '-' or ':' form); undefined when it is not a prefix. */
export function parseCidrLabelKey(key: string): IpPrefix | undefined {
  const text = key.includes('.') || !key.includes('-') ? key : key.replaceAll('-', ':');
  return tryParsePrefix(text, { bareAddress: true });
}

function canonicalKey(source: LabelSource, key: string, value: string, input: string): string {
  switch (source) {
    case LabelSource.Reserved:
      if (!isReservedLabelKey(key)) {
        throw new LabelError(
          LabelErrorCode.INVALID_KEY,
          `unknown reserved label "${key}" in ${JSON.stringify(input)} (known: ${RESERVED_LABEL_KEYS.join(', ')})`,
          input,
        );
      }
      if (value !== '') {
        throw new LabelError(LabelErrorCode.INVALID_VALUE, `reserved label ${JSON.stringify(input)} must not have a value`, input);
      }
      return key;
    case LabelSource.Cidr: {
      const prefix = parseCidrLabelKey(key);
      if (prefix === undefined) {
        throw new LabelError(
          LabelErrorCode.INVALID_KEY,
          `cidr label key "${key}" in ${JSON.stringify(input)} is not an IP prefix without host bits (e.g. 10.0.0.0/8)`,
          input,
        );
      }
      if (value !== '') {
        throw new LabelError(LabelErrorCode.INVALID_VALUE, `cidr label ${JSON.stringify(input)} must not have a value`, input);
      }
      return cidrLabelKey(prefix);
    }
    default:
      validateLabelKey(key, input);
      validateLabelValue(value, input);
      return key;
  }
}

/** Builds a validated, frozen label; cidr keys are normalised to canonical text. */
export function makeLabel(source: string, key: string, value = ''): Label {
  const input = formatParts(source, key, value);
  const src = parseLabelSource(source, input);
  return Object.freeze({ source: src, key: canonicalKey(src, key, value, input), value });
}

function formatParts(source: string, key: string, value: string): string {
  return value === '' ? `${source}:${key}` : `${source}:${key}=${value}`;
}

/** Cilium's text form: `source:key=value`, or `source:key` when the value is empty. */
export function formatLabel(label: Label): string {
  return formatParts(label.source, label.key, label.value);
}

/**
 * Parses `[source:]key[=value]`. The source is the text before the first ':'
 * that comes before any '='; without one the label gets `defaultSource`
 * (`unspec` for labels, `any` for selectors — see parseSelectLabel).
 * Accepts IPv6 cidr keys with colons (`cidr:2001:db8::/32`).
 */
export function parseLabel(text: string, defaultSource: LabelSource = LabelSource.Unspec): Label {
  if (typeof text !== 'string' || text.length === 0) {
    throw new LabelError(LabelErrorCode.INVALID_KEY, 'label must be a non-empty string', String(text));
  }
  const eq = text.indexOf('=');
  const colon = text.indexOf(':');
  let source: string = defaultSource;
  let rest = text;
  if (colon >= 0 && (eq < 0 || colon < eq)) {
    source = text.slice(0, colon);
    rest = text.slice(colon + 1);
  }
  const eq2 = rest.indexOf('=');
  const key = eq2 < 0 ? rest : rest.slice(0, eq2);
  const value = eq2 < 0 ? '' : rest.slice(eq2 + 1);
  const src = parseLabelSource(source, text);
  try {
    return Object.freeze({ source: src, key: canonicalKey(src, key, value, text), value });
  } catch (err) {
    if (err instanceof LabelError) throw err;
    throw new LabelError(LabelErrorCode.INVALID_KEY, `cannot parse label ${JSON.stringify(text)}: ${String(err)}`, text);
  }
}

/** Parses a label used to select: a missing source means `any`. */
export function parseSelectLabel(text: string): Label {
  return parseLabel(text, LabelSource.Any);
}

/** Total order by (source, key, value) in code-unit order: the stable sort of every label list. */
export function compareLabels(a: Label, b: Label): number {
  if (a.source !== b.source) return a.source < b.source ? -1 : 1;
  if (a.key !== b.key) return a.key < b.key ? -1 : 1;
  if (a.value !== b.value) return a.value < b.value ? -1 : 1;
  return 0;
}

/**
 * Does selector label `sel` match `target`? Key and value must be equal; the
 * source must be equal unless the selector's source is `any`.
 */
export function labelMatches(sel: Label, target: Label): boolean {
  return sel.key === target.key && sel.value === target.value && (sel.source === LabelSource.Any || sel.source === target.source);
}

/** The labels Cilium gives a CIDR identity: `cidr:<prefix>` (canonical). */
export function cidrLabel(prefix: IpPrefix): Label {
  return Object.freeze({ source: LabelSource.Cidr, key: cidrLabelKey(prefix), value: '' });
}

export function reservedLabel(key: string): Label {
  return makeLabel(LabelSource.Reserved, key);
}
