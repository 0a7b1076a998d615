/**
 * Which directions are enforced for a subject, per enforcement mode, and by
 * which rules — shared by map-state computation and the reference evaluator
 * so both read Cilium's modes the same way.
 */
import type { LabelSet } from '../labels/index.js';
import { directionOf, formatPolicyName, type Rule, type RuleOrigin } from './rule.js';
import type { Direction, EnforcementMode } from './types.js';

export interface DirectionEnforcement {
  readonly enforced: boolean;
  /** The rules that put the direction into default-deny ('always' mode enforces without any). */
  readonly by: readonly RuleOrigin[];
}

export function rulesSelecting(rules: Iterable<Rule>, subject: LabelSet): Rule[] {
  const out: Rule[] = [];
  for (const r of rules) if (r.subject.matches(subject)) out.push(r);
  return out;
}

export function directionEnforcement(mode: EnforcementMode, selecting: readonly Rule[], d: Direction): DirectionEnforcement {
  if (mode === 'never') return { enforced: false, by: [] };
  const by: RuleOrigin[] = [];
  for (const r of selecting) {
    if (directionOf(r, d).enforces) by.push({ policy: formatPolicyName(r.policy), rule: r.index, path: d });
  }
  return { enforced: mode === 'always' || by.length > 0, by };
}

