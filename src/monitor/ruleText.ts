import { ReservedCookie } from '../datapath/bpf/constants.js';
import type { RuleCookieIndex } from '../datapath/bpf/ruleCookie.js';
import type { RuleOrigin } from '../policy/index.js';
import type { MonitorRule } from './types.js';

/** How a rule origin reads: the policy, then the field path of the peer rule. */
export function originText(o: RuleOrigin): string {
  return `${o.policy} ${o.path}`;
}

const RESERVED_TEXT: Record<number, string> = {
  [ReservedCookie.NONE]: 'no rule allows (default deny)',
  [ReservedCookie.NOT_ENFORCED]: 'not enforced',
  [ReservedCookie.ALLOW_LOCALHOST]: 'allow-localhost',
};

/** An entry no rule made, as `bpf policy get` and the monitor name it (its cookie's text). */
export function builtinRuleText(builtin: 'not-enforced' | 'allow-localhost'): string {
  return RESERVED_TEXT[builtin === 'not-enforced' ? ReservedCookie.NOT_ENFORCED : ReservedCookie.ALLOW_LOCALHOST]!;
}

/**
 * The rule behind a policy map cookie, resolved against the current
 * policies. A cookie no current rule hashes to belongs to a rule deleted or
 * changed since the entry was written (or a map the agent has not caught up
 * with): said as such, with the number.
 */
export function describeCookie(cookie: number, index: RuleCookieIndex): MonitorRule {
  const reserved = RESERVED_TEXT[cookie];
  if (reserved !== undefined) return { cookie, text: reserved, origins: [] };
  const origins = [...index.resolve(cookie)];
  if (origins.length === 0) return { cookie, text: `unknown rule (cookie 0x${cookie.toString(16).padStart(8, '0')}: not in the current policies)`, origins };
  return { cookie, text: origins.map(originText).join(' or '), origins };
}

/**
 * A flow no entry matched is dropped by default deny; no rule allowed it,
 * but rules put the direction into default deny, and those are what a person
 * changes. Named here with the direction's enforcing rules (none in `always`
 * mode, where the mode itself enforces).
 */
export function describeDefaultDeny(enforcedBy: readonly RuleOrigin[]): MonitorRule {
  const text = enforcedBy.length === 0 ? 'no rule allows (default deny: policy enforcement mode always)' : `no rule allows (default deny set by ${enforcedBy.map(originText).join(', ')})`;
  return { cookie: ReservedCookie.NONE, text, origins: [...enforcedBy] };
}
