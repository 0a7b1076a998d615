/**
 * PolicyRepository: the imported policies, keyed by (kind, namespace, name),
 * with a revision that increases on every change. Upsert replaces a policy of
 * the same name (like `kubectl apply`); delete goes by name or by labels.
 * It only stores; the PolicyEngine turns changes into endpoint updates.
 */
import { LabelSet, parseSelectLabel } from '../labels/index.js';
import { PolicyArgumentError, PolicyNotFoundError } from './errors.js';
import { formatPolicyName, type Policy, type PolicyKind, type PolicyName, type Rule } from './rule.js';

/** Which policies to delete or list. Every given field must match; `labels` are selector labels (`app=x`, `k8s:team=y`). */
export interface PolicyFilter {
  kind?: PolicyKind;
  namespace?: string;
  name?: string;
  labels?: readonly string[];
  /**
   * Narrows the match to the policies this accepts (never from the API: the
   * policy store passes "the ones I stored", so a delete through it leaves
   * the policies that came from the Kubernetes API server alone).
   */
  only?: (name: PolicyName) => boolean;
}

export interface RepositoryChange {
  readonly revision: number;
  /** Policies now in the repository that were added or replaced. */
  readonly upserted: readonly Policy[];
  /** Policies that left the repository (deleted, or the old version of a replaced one). */
  readonly removed: readonly Policy[];
}

export class PolicyRepository {
  readonly #policies = new Map<string, Policy>();
  #revision = 1;

  /** Starts at 1, as Cilium's; +1 per upsert or delete call that changed something. */
  get revision(): number {
    return this.#revision;
  }

  get size(): number {
    return this.#policies.size;
  }

  upsert(policies: readonly Policy[]): RepositoryChange {
    const removed: Policy[] = [];
    for (const p of policies) {
      const key = formatPolicyName(p.name);
      const prev = this.#policies.get(key);
      if (prev !== undefined) removed.push(prev);
      this.#policies.set(key, p);
    }
    if (policies.length > 0) this.#revision++;
    return { revision: this.#revision, upserted: [...policies], removed };
  }

  /** Removes the matching policies; throws PolicyNotFoundError when none match. */
  delete(filter: PolicyFilter): RepositoryChange {
    const matched = this.list(filter);
    if (matched.length === 0) throw new PolicyNotFoundError(describeFilter(filter));
    for (const p of matched) this.#policies.delete(formatPolicyName(p.name));
    this.#revision++;
    return { revision: this.#revision, upserted: [], removed: matched };
  }

  list(filter: PolicyFilter = {}): Policy[] {
    const labelSel = filter.labels === undefined ? undefined : LabelSet.from(filter.labels.map((l) => parseSelectLabel(l)));
    const only = filter.only;
    if (filter.name === undefined && labelSel === undefined && filter.kind === undefined && filter.namespace === undefined) {
      const all = [...this.#policies.values()];
      return only === undefined ? all : all.filter((p) => only(p.name));
    }
    if (labelSel !== undefined && labelSel.isEmpty() && filter.name === undefined) {
      throw new PolicyArgumentError('an empty label filter would match every policy; give at least one label');
    }
    return [...this.#policies.values()].filter(
      (p) =>
        (filter.kind === undefined || p.name.kind === filter.kind) &&
        (filter.namespace === undefined || p.name.namespace === filter.namespace) &&
        (filter.name === undefined || p.name.name === filter.name) &&
        (labelSel === undefined || p.labels.containsAll(labelSel)) &&
        (only === undefined || only(p.name)),
    );
  }

  /** The enforced policies' rules, or with `withStaged` every policy's (the staged view's). */
  rules(withStaged = false): Rule[] {
    const out: Rule[] = [];
    for (const p of this.#policies.values()) if (withStaged || p.staged !== true) out.push(...p.rules);
    return out;
  }

  /** formatPolicyName() of every staged policy. */
  stagedNames(): Set<string> {
    const out = new Set<string>();
    for (const [key, p] of this.#policies) if (p.staged === true) out.add(key);
    return out;
  }
}

export function describeFilter(f: PolicyFilter): string {
  const parts: string[] = [];
  if (f.kind !== undefined) parts.push(`kind=${f.kind}`);
  if (f.namespace !== undefined) parts.push(`namespace=${f.namespace}`);
  if (f.name !== undefined) parts.push(`name=${f.name}`);
  if (f.labels !== undefined) parts.push(`labels=${f.labels.join(',')}`);
  return parts.length === 0 ? 'the empty filter' : parts.join(' ');
}
