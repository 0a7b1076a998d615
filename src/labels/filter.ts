import { LabelError, LabelErrorCode } from './errors.js';
import type { Label } from './label.js';
import { LabelSet } from './labelSet.js';
import { isLabelSource, LabelSource } from './source.js';

/**
 * Splits labels into identity-relevant ones (they decide the security
 * identity) and informational ones (kept on the endpoint, shown, never part
 * of the identity), as Cilium's labelsfilter does. Labels such as
 * pod-template-hash differ per ReplicaSet or per pod and would otherwise give
 * every pod its own identity.
 *
 * A pattern is `[source:]regex`; the regex is matched against the label key
 * from its first character (anchored at the start, not the end, so
 * `app\.kubernetes\.io` covers `app.kubernetes.io/name`). Decision order:
 *   1. reserved and cidr labels, and the pod namespace label, are always relevant;
 *   2. the user's patterns: the longest match wins, an exclude wins a tie;
 *   3. the default includes (carve-outs from the default excludes);
 *   4. the default excludes;
 *   5. otherwise relevant — unless the user gave include patterns, in which
 *      case only what they (or the default includes) name is relevant.
 */

/** Always identity-relevant, whatever the patterns say (the issue and Cilium agree). */
export const POD_NAMESPACE_LABEL = 'io.kubernetes.pod.namespace';

export const DEFAULT_INCLUDE_PATTERNS: readonly string[] = Object.freeze([
  'io\\.cilium\\.k8s\\.namespace\\.labels',
  'io\\.cilium\\.k8s\\.policy',
  'io\\.tendril\\.k8s\\.namespace\\.labels',
  'io\\.tendril\\.k8s\\.policy',
  'app\\.kubernetes\\.io',
]);

export const DEFAULT_EXCLUDE_PATTERNS: readonly string[] = Object.freeze([
  'io\\.kubernetes',
  // kubernetes.io/…, statefulset.kubernetes.io/pod-name, beta.kubernetes.io/…,
  // apps.kubernetes.io/pod-index, batch.kubernetes.io/controller-uid, topology.…
  '([-a-z0-9]+\\.)*kubernetes\\.io',
  '([-a-z0-9]+\\.)*k8s\\.io',
  'pod-template-generation',
  'pod-template-hash',
  'controller-revision-hash',
  'controller-uid',
  'annotation\\.',
  'etcd_node',
]);

export interface LabelFilterConfig {
  /** Identity-relevant patterns (`[source:]regex`). */
  include?: readonly string[];
  /** Informational patterns (`[source:]regex`). */
  exclude?: readonly string[];
  /** Apply Cilium's default includes/excludes (default true). */
  defaults?: boolean;
}

interface CompiledPattern {
  readonly text: string;
  readonly source: LabelSource;
  readonly regex: RegExp;
  readonly include: boolean;
}

function compile(text: string, include: boolean): CompiledPattern {
  let source: LabelSource = LabelSource.Any;
  let body = text;
  const colon = text.indexOf(':');
  if (colon > 0 && isLabelSource(text.slice(0, colon))) {
    source = text.slice(0, colon) as LabelSource;
    body = text.slice(colon + 1);
  }
  if (body.length === 0) {
    throw new LabelError(LabelErrorCode.INVALID_PATTERN, `label pattern ${JSON.stringify(text)} has an empty regex`, text);
  }
  try {
    return { text, source, regex: new RegExp(`^(?:${body})`, 'u'), include };
  } catch (err) {
    throw new LabelError(
      LabelErrorCode.INVALID_PATTERN,
      `label pattern ${JSON.stringify(text)} is not a valid regular expression: ${(err as Error).message}`,
      text,
    );
  }
}

/** Length of the pattern's match on the label, or -1. */
function matchLength(p: CompiledPattern, l: Label): number {
  if (p.source !== LabelSource.Any && p.source !== l.source) return -1;
  const m = p.regex.exec(l.key);
  return m === null ? -1 : m[0].length;
}

export interface SplitLabels {
  identity: LabelSet;
  informational: LabelSet;
}

export class LabelFilter {
  static readonly DEFAULT = new LabelFilter();

  readonly #user: readonly CompiledPattern[];
  readonly #defaultIncludes: readonly CompiledPattern[];
  readonly #defaultExcludes: readonly CompiledPattern[];
  readonly #userHasIncludes: boolean;

  constructor(config: LabelFilterConfig = {}) {
    this.#user = [
      ...(config.include ?? []).map((t) => compile(t, true)),
      ...(config.exclude ?? []).map((t) => compile(t, false)),
    ];
    const defaults = config.defaults ?? true;
    this.#defaultIncludes = defaults ? DEFAULT_INCLUDE_PATTERNS.map((t) => compile(t, true)) : [];
    this.#defaultExcludes = defaults ? DEFAULT_EXCLUDE_PATTERNS.map((t) => compile(t, false)) : [];
    this.#userHasIncludes = (config.include ?? []).length > 0;
  }

  /**
   * Cilium's `--labels` form: `[source:][!]regex`, `!` marking an exclude
   * (`k8s:!pod-template-hash`, `!io\.kubernetes`, `k8s:app`).
   */
  static fromPatterns(patterns: readonly string[], defaults = true): LabelFilter {
    const include: string[] = [];
    const exclude: string[] = [];
    for (const p of patterns) {
      const colon = p.indexOf(':');
      const hasSource = colon > 0 && isLabelSource(p.slice(0, colon));
      const prefix = hasSource ? p.slice(0, colon + 1) : '';
      const body = hasSource ? p.slice(colon + 1) : p;
      if (body.startsWith('!')) exclude.push(`${prefix}${body.slice(1)}`);
      else include.push(p);
    }
    return new LabelFilter({ include, exclude, defaults });
  }

  isIdentityRelevant(l: Label): boolean {
    if (l.source === LabelSource.Reserved || l.source === LabelSource.Cidr) return true;
    if (l.key === POD_NAMESPACE_LABEL) return true;
    let best: CompiledPattern | undefined;
    let bestLen = -1;
    for (const p of this.#user) {
      const n = matchLength(p, l);
      if (n > bestLen || (n === bestLen && n >= 0 && !p.include)) {
        best = p;
        bestLen = n;
      }
    }
    if (best !== undefined) return best.include;
    if (this.#defaultIncludes.some((p) => matchLength(p, l) >= 0)) return true;
    if (this.#defaultExcludes.some((p) => matchLength(p, l) >= 0)) return false;
    return !this.#userHasIncludes;
  }

  split(labels: LabelSet): SplitLabels {
    const identity = labels.filter((l) => this.isIdentityRelevant(l));
    const informational = labels.filter((l) => !this.isIdentityRelevant(l));
    return { identity, informational };
  }

  /** Only the identity-relevant labels. */
  identityLabels(labels: LabelSet): LabelSet {
    return labels.filter((l) => this.isIdentityRelevant(l));
  }
}
