import { LabelError, LabelErrorCode } from './errors.js';
import { parseSelectLabel, type Label } from './label.js';
import type { LabelSet } from './labelSet.js';
import { LabelSource } from './source.js';
import { validateLabelValue } from './validate.js';

/**
 * Kubernetes label selectors (metav1.LabelSelector) over tendril labels. A
 * selector key may carry a source (`k8s:app`, `reserved:host`); without one
 * it is `any:` and matches a label of that key from every source, as in
 * Cilium's EndpointSelector. Requirements are ANDed; an empty selector
 * selects everything (Kubernetes semantics).
 */
export type SelectorOperator = 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';

export interface LabelSelectorRequirement {
  key: string;
  operator: SelectorOperator;
  values?: readonly string[];
}

/** The wire form, as in a NetworkPolicy's podSelector. */
export interface LabelSelectorSpec {
  matchLabels?: Readonly<Record<string, string>>;
  matchExpressions?: readonly LabelSelectorRequirement[];
}

/** A requirement after parsing: the key split into source and key. */
export interface Requirement {
  readonly source: LabelSource;
  readonly key: string;
  readonly operator: SelectorOperator;
  /** Sorted, de-duplicated. */
  readonly values: readonly string[];
}

const OPERATORS: ReadonlySet<string> = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist']);

function selectorError(message: string, input: string): LabelError {
  return new LabelError(LabelErrorCode.INVALID_SELECTOR, message, input);
}

function parseKey(key: string): Label {
  if (typeof key !== 'string') throw selectorError('selector key must be a string', String(key));
  // A key with '=' would be read as key=value; refuse it here with a selector error.
  if (key.includes('=')) throw selectorError(`selector key ${JSON.stringify(key)} must not contain '='`, key);
  return parseSelectLabel(key);
}

function candidates(labels: LabelSet, r: Requirement): Label[] {
  return labels.getAll(r.key).filter((l) => r.source === LabelSource.Any || l.source === r.source);
}

export function requirementMatches(r: Requirement, labels: LabelSet): boolean {
  const found = candidates(labels, r);
  switch (r.operator) {
    case 'Exists':
      return found.length > 0;
    case 'DoesNotExist':
      return found.length === 0;
    case 'In':
      return found.some((l) => r.values.includes(l.value));
    case 'NotIn':
      // Kubernetes: NotIn also holds when the key is absent.
      return found.every((l) => !r.values.includes(l.value));
  }
}

function formatRequirement(r: Requirement): string {
  const key = `${r.source}:${r.key}`;
  switch (r.operator) {
    case 'Exists':
      return key;
    case 'DoesNotExist':
      return `!${key}`;
    case 'In':
      return r.values.length === 1 ? `${key}=${r.values[0]}` : `${key} in (${r.values.join(',')})`;
    case 'NotIn':
      return `${key} notin (${r.values.join(',')})`;
  }
}

export class LabelSelector {
  /** Selects every label set. */
  static readonly ALL = new LabelSelector([]);

  readonly requirements: readonly Requirement[];
  #text: string | undefined;

  private constructor(requirements: Requirement[]) {
    this.requirements = Object.freeze(
      requirements.sort((a, b) => {
        const ka = formatRequirement(a);
        const kb = formatRequirement(b);
        return ka < kb ? -1 : ka > kb ? 1 : 0;
      }),
    );
  }

  /** Validates and parses a selector; throws LabelError(LABEL_INVALID_SELECTOR or a label code). */
  static parse(spec: LabelSelectorSpec): LabelSelector {
    if (spec === null || typeof spec !== 'object') throw selectorError('selector must be an object', String(spec));
    const reqs: Requirement[] = [];
    for (const [key, value] of Object.entries(spec.matchLabels ?? {})) {
      if (typeof value !== 'string') throw selectorError(`matchLabels value of ${JSON.stringify(key)} must be a string`, key);
      const l = parseKey(key);
      if (l.source !== LabelSource.Reserved && l.source !== LabelSource.Cidr) validateLabelValue(value, `${key}=${value}`);
      else if (value !== '') throw selectorError(`${JSON.stringify(key)} takes no value in matchLabels`, key);
      reqs.push({ source: l.source, key: l.key, operator: 'In', values: [value] });
    }
    for (const expr of spec.matchExpressions ?? []) {
      if (expr === null || typeof expr !== 'object') throw selectorError('matchExpressions entries must be objects', String(expr));
      const l = parseKey(expr.key);
      if (!OPERATORS.has(expr.operator)) {
        throw selectorError(
          `unknown selector operator ${JSON.stringify(expr.operator)} for ${JSON.stringify(expr.key)} (In, NotIn, Exists, DoesNotExist)`,
          expr.key,
        );
      }
      const values = expr.values ?? [];
      if (!Array.isArray(values) || values.some((v) => typeof v !== 'string')) {
        throw selectorError(`values of ${JSON.stringify(expr.key)} must be an array of strings`, expr.key);
      }
      if ((expr.operator === 'In' || expr.operator === 'NotIn') && values.length === 0) {
        throw selectorError(`operator ${expr.operator} on ${JSON.stringify(expr.key)} needs at least one value`, expr.key);
      }
      if ((expr.operator === 'Exists' || expr.operator === 'DoesNotExist') && values.length > 0) {
        throw selectorError(`operator ${expr.operator} on ${JSON.stringify(expr.key)} takes no values`, expr.key);
      }
      for (const v of values) validateLabelValue(v, `${expr.key}=${v}`);
      reqs.push({ source: l.source, key: l.key, operator: expr.operator, values: [...new Set(values)].sort() });
    }
    return new LabelSelector(reqs);
  }

  /** A selector of exact labels (all must be present), e.g. `[reserved:host]`. */
  static ofLabels(labels: Iterable<Label>): LabelSelector {
    return new LabelSelector([...labels].map((l) => ({ source: l.source, key: l.key, operator: 'In', values: [l.value] })));
  }

  /** Selects everything. */
  isEmpty(): boolean {
    return this.requirements.length === 0;
  }

  matches(labels: LabelSet): boolean {
    return this.requirements.every((r) => requirementMatches(r, labels));
  }

  /** A stable text form (sorted requirements), usable as a cache key for selector caches. */
  toString(): string {
    this.#text ??= this.requirements.map(formatRequirement).join(',');
    return this.#text;
  }

  /** The wire form, with every key written with its source. */
  toSpec(): LabelSelectorSpec {
    return {
      matchExpressions: this.requirements.map((r) => ({
        key: `${r.source}:${r.key}`,
        operator: r.operator,
        ...(r.values.length > 0 ? { values: [...r.values] } : {}),
      })),
    };
  }
}

/** One-shot helper: does `spec` select `labels`? */
export function selectorMatches(spec: LabelSelectorSpec, labels: LabelSet): boolean {
  return LabelSelector.parse(spec).matches(labels);
}

/** Does the single selector label match some label of the set (`any:` matches every source)? */
export function matchesLabel(labels: LabelSet, selector: Label | string): boolean {
  const sel = typeof selector === 'string' ? parseSelectLabel(selector) : selector;
  return labels.matches(sel);
}

