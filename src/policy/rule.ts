/**
 * The internal rule model both policy kinds translate into. A Rule selects
 * subject endpoints and, per direction, says whether it turns on default-deny
 * and which (peer, port) pairs it allows or denies. Everything downstream
 * (SelectorCache, map-state computation, trace) works on this model only.
 */
import type { LabelSet } from '../labels/index.js';
import type { IpPrefix } from '../netip/index.js';
import type { IdentitySelector } from './selector.js';
import type { Direction, ProtocolName } from './types.js';

export const PolicyKind = {
  NetworkPolicy: 'NetworkPolicy',
  TendrilNetworkPolicy: 'TendrilNetworkPolicy',
  TendrilClusterwideNetworkPolicy: 'TendrilClusterwideNetworkPolicy',
} as const;
export type PolicyKind = (typeof PolicyKind)[keyof typeof PolicyKind];

export interface PolicyName {
  readonly kind: PolicyKind;
  /** '' for cluster-wide policies. */
  readonly namespace: string;
  readonly name: string;
}

export function formatPolicyName(n: PolicyName): string {
  return n.namespace === '' ? `${n.kind}/${n.name}` : `${n.kind}/${n.namespace}/${n.name}`;
}

/** Where an entry or a verdict comes from: policy, rule (spec index) and the field path of the peer rule. */
export interface RuleOrigin {
  /** formatPolicyName() of the policy. */
  readonly policy: string;
  /** Index of the rule in the policy (`specs[i]`; 0 for `spec` and NetworkPolicy). */
  readonly rule: number;
  /** Field path of the peer rule inside the document, e.g. `spec.ingressDeny[1]`. */
  readonly path: string;
}

/** One entry of a rule's port list after validation. */
export interface PortRule {
  readonly protocol: ProtocolName;
  /** First port; 0 with endPort 0 = every port. Ignored when `name` is set. */
  readonly port: number;
  /** Last port, inclusive (= port for a single port). */
  readonly endPort: number;
  /** A named port, resolved against the endpoint's declared ports. */
  readonly name?: string;
}

export interface PeerRule {
  readonly origin: RuleOrigin;
  /** 'all' = any peer (the rule names no peers). An empty array selects nothing. */
  readonly peers: readonly IdentitySelector[] | 'all';
  /** 'all' = any protocol and port. An empty array matches nothing. */
  readonly ports: readonly PortRule[] | 'all';
}

export interface DirectionRules {
  /** Selecting an endpoint with this rule puts the direction into default-deny. */
  readonly enforces: boolean;
  readonly allow: readonly PeerRule[];
  readonly deny: readonly PeerRule[];
}

export interface Rule {
  readonly policy: PolicyName;
  readonly index: number;
  /** Which local endpoints (by their identity's labels) the rule applies to. */
  readonly subject: IdentitySelector;
  readonly ingress: DirectionRules;
  readonly egress: DirectionRules;
}

export function directionOf(rule: Rule, d: Direction): DirectionRules {
  return d === 'ingress' ? rule.ingress : rule.egress;
}

/** A validated policy document: what the repository stores. */
export interface Policy {
  readonly name: PolicyName;
  /** metadata.labels (k8s source) plus derived `io.tendril.policy.*` labels; delete-by-labels matches these. */
  readonly labels: LabelSet;
  readonly rules: readonly Rule[];
  /** Every prefix a CIDR selector names (including excepts): each needs a local CIDR identity. */
  readonly cidrPrefixes: readonly IpPrefix[];
  /** The document as given (after YAML/JSON parsing), returned by GET /policy. */
  readonly document: unknown;
  /**
   * Staged (the document's `tendril.io/staged: "true"` annotation): computed
   * and reported beside the enforced policies, never enforced. Absent = enforced.
   */
  readonly staged?: true;
}
