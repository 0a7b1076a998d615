/**
 * The reference evaluator: a verdict computed straight from the rules, with
 * the rules that decided it. `policy trace` uses it to explain, and the
 * property test checks every computed map state against it.
 *
 * For a subject endpoint, a direction, a peer and (protocol, port):
 *   1. enforcement 'never' → allow;
 *   2. a deny rule that selects the subject and matches the peer and port → deny;
 *   3. the direction is not enforced → allow;
 *   4. an allow rule that matches (or the host, with allow-localhost, on ingress) → allow;
 *   5. otherwise → deny (default deny).
 */
import { LabelSource, ReservedLabelKey, type LabelSet } from '../labels/index.js';
import { directionEnforcement, rulesSelecting } from './enforcement.js';
import { portRulesMatch } from './portRules.js';
import { directionOf, type PeerRule, type Rule, type RuleOrigin } from './rule.js';
import type { Direction, EnforcementMode, NamedPort, Verdict } from './types.js';

export type DecisionReason =
  | 'enforcement-disabled'
  | 'deny-rule'
  | 'not-enforced'
  | 'allow-rule'
  | 'allow-localhost'
  | 'default-deny'
  | 'not-an-endpoint';

export interface DirectionDecision {
  readonly direction: Direction;
  readonly verdict: Verdict;
  readonly reason: DecisionReason;
  /** The peer rules that decided: the matching deny rules, the matching allow rules, or none. */
  readonly decidingRules: readonly RuleOrigin[];
  /** The rules that enforce this direction on the subject (why a default deny applies). */
  readonly enforcedBy: readonly RuleOrigin[];
}

export interface EvaluationContext {
  readonly rules: Iterable<Rule>;
  readonly mode: EnforcementMode;
  readonly allowLocalhost: boolean;
  /** Named ports of every local endpoint (egress named ports resolve against peers). */
  readonly egressNamedPorts: readonly NamedPort[];
}

export interface Subject {
  readonly labels: LabelSet;
  readonly namedPorts?: readonly NamedPort[];
}

function peerMatches(pr: PeerRule, peer: LabelSet): boolean {
  return pr.peers === 'all' || pr.peers.some((s) => s.matches(peer));
}

export function isHostLabels(labels: LabelSet): boolean {
  return labels.has(ReservedLabelKey.Host, LabelSource.Reserved);
}

/** Outside the cluster: world or a CIDR identity. Such a peer has no policy of its own. */
export function isWorldLabels(labels: LabelSet): boolean {
  return (
    labels.has(ReservedLabelKey.World, LabelSource.Reserved) ||
    labels.has(ReservedLabelKey.WorldIpv4, LabelSource.Reserved) ||
    labels.has(ReservedLabelKey.WorldIpv6, LabelSource.Reserved) ||
    labels.hasSource(LabelSource.Cidr)
  );
}

export function evaluateDirection(
  ctx: EvaluationContext,
  subject: Subject,
  direction: Direction,
  peer: LabelSet,
  proto: number,
  port: number,
): DirectionDecision {
  const selecting = rulesSelecting(ctx.rules, subject.labels);
  const enforcement = directionEnforcement(ctx.mode, selecting, direction);
  const decide = (verdict: Verdict, reason: DecisionReason, decidingRules: RuleOrigin[] = []): DirectionDecision => ({
    direction,
    verdict,
    reason,
    decidingRules,
    enforcedBy: enforcement.by,
  });
  if (ctx.mode === 'never') return decide('allow', 'enforcement-disabled');
  const named = direction === 'ingress' ? (subject.namedPorts ?? []) : ctx.egressNamedPorts;
  const matching = (kind: 'allow' | 'deny'): RuleOrigin[] => {
    const out: RuleOrigin[] = [];
    for (const r of selecting) {
      for (const pr of directionOf(r, direction)[kind]) {
        if (peerMatches(pr, peer) && portRulesMatch(pr.ports, named, proto, port)) out.push(pr.origin);
      }
    }
    return out;
  };
  const denies = matching('deny');
  if (denies.length > 0) return decide('deny', 'deny-rule', denies);
  if (!enforcement.enforced) return decide('allow', 'not-enforced');
  const allows = matching('allow');
  if (allows.length > 0) return decide('allow', 'allow-rule', allows);
  if (direction === 'ingress' && ctx.allowLocalhost && isHostLabels(peer)) return decide('allow', 'allow-localhost');
  return decide('deny', 'default-deny');
}

export interface TraceResult {
  readonly verdict: Verdict;
  /** The source's egress policy (allowed without a decision when the source is outside the cluster). */
  readonly egress: DirectionDecision;
  /** The destination's ingress policy. */
  readonly ingress: DirectionDecision;
}

/** Source egress, then destination ingress: both must allow. */
export function traceFlow(ctx: EvaluationContext, src: Subject, dst: Subject, proto: number, port: number): TraceResult {
  const egress: DirectionDecision = isWorldLabels(src.labels)
    ? { direction: 'egress', verdict: 'allow', reason: 'not-an-endpoint', decidingRules: [], enforcedBy: [] }
    : evaluateDirection(ctx, src, 'egress', dst.labels, proto, port);
  const ingress: DirectionDecision = isWorldLabels(dst.labels)
    ? { direction: 'ingress', verdict: 'allow', reason: 'not-an-endpoint', decidingRules: [], enforcedBy: [] }
    : evaluateDirection(ctx, dst, 'ingress', src.labels, proto, port);
  return { verdict: egress.verdict === 'allow' && ingress.verdict === 'allow' ? 'allow' : 'deny', egress, ingress };
}

/** Human-readable lines for `tendril policy trace`. */
export function formatTrace(t: TraceResult): string[] {
  const lines: string[] = [];
  for (const d of [t.egress, t.ingress]) {
    const who = d.direction === 'egress' ? 'source egress' : 'destination ingress';
    lines.push(`${who}: ${d.verdict.toUpperCase()} (${d.reason})`);
    for (const r of d.decidingRules) lines.push(`  decided by ${r.policy} rule ${r.rule} ${r.path}`);
    if (d.reason === 'default-deny') for (const r of d.enforcedBy) lines.push(`  enforced by ${r.policy} rule ${r.rule}`);
  }
  lines.push(`Final verdict: ${t.verdict.toUpperCase()}`);
  return lines;
}
