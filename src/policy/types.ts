/**
 * The types other subsystems may import from the policy engine: identities as
 * the engine sees them, directions, protocols, verdicts, enforcement modes.
 * The identity allocator (src/identity) and the agent plug in through
 * IdentityView and CidrIdentitySource; tests use LocalIdentityTable.
 */
import type { LabelSet } from '../labels/index.js';
import type { IpPrefix } from '../netip/index.js';
import { MIN_GLOBAL_IDENTITY, MIN_LOCAL_IDENTITY, ReservedIdentity as IdentityNumbers } from '../identity/constants.js';

/**
 * The identity subsystem's reserved numbers (one definition, shared with the
 * datapath), plus 0 as the map-state wildcard: "any peer", never allocated.
 */
export const ReservedIdentity = { ...IdentityNumbers, Any: 0 } as const;

/** First identity allocated cluster-wide from labels. */
export const MIN_ALLOCATED_IDENTITY = MIN_GLOBAL_IDENTITY;
/** Local (node-only) CIDR identities live in their own range, Cilium's local scope ((1 << 24) + 1 on). */
export const MIN_LOCAL_CIDR_IDENTITY = MIN_LOCAL_IDENTITY;

export interface Identity {
  readonly id: number;
  readonly labels: LabelSet;
}

/**
 * A read view of the identities known on this node (reserved, allocated,
 * local CIDR). The engine reads it when it starts and when a selector is
 * first used; afterwards the agent reports changes through
 * PolicyEngine.identitiesChanged so every update yields a diff.
 */
export interface IdentityView {
  get(id: number): Identity | undefined;
  list(): Iterable<Identity>;
}

/**
 * Local CIDR identities for the prefixes named by CIDR rules (and their
 * `except` prefixes), so the ipcache can map those ranges to an identity the
 * map state can name. Reference counted: every acquire is matched by a release.
 */
export interface CidrIdentitySource {
  /** Returns the identity of each prefix, allocating the ones that are new. */
  acquireCidrIdentities(prefixes: readonly IpPrefix[]): Identity[];
  /** Drops one reference per prefix; returns the ids whose last reference went. */
  releaseCidrIdentities(prefixes: readonly IpPrefix[]): number[];
}

export type Direction = 'ingress' | 'egress';
export const DIRECTIONS: readonly Direction[] = ['ingress', 'egress'];

/** IANA protocol numbers; 0 is "any protocol" in map keys. */
export const Proto = { Any: 0, ICMP: 1, TCP: 6, UDP: 17, SCTP: 132 } as const;
export type ProtocolName = 'TCP' | 'UDP' | 'SCTP' | 'ANY';
/** The protocols a port-qualified "ANY" rule expands to (ports only exist for these). */
export const PORT_PROTOCOLS: readonly number[] = [Proto.TCP, Proto.UDP, Proto.SCTP];

export function protocolNumber(name: ProtocolName): number {
  switch (name) {
    case 'TCP':
      return Proto.TCP;
    case 'UDP':
      return Proto.UDP;
    case 'SCTP':
      return Proto.SCTP;
    case 'ANY':
      return Proto.Any;
  }
}

export function protocolName(proto: number): string {
  switch (proto) {
    case Proto.Any:
      return 'ANY';
    case Proto.TCP:
      return 'TCP';
    case Proto.UDP:
      return 'UDP';
    case Proto.SCTP:
      return 'SCTP';
    case Proto.ICMP:
      return 'ICMP';
    default:
      return String(proto);
  }
}

export type Verdict = 'allow' | 'deny';

/**
 * Cilium's `--enable-policy`:
 * - default: a direction is enforced on an endpoint only when a rule with that
 *   direction selects it; otherwise that direction allows everything (deny rules
 *   still apply);
 * - always: every endpoint is enforced in both directions, with or without rules;
 * - never: nothing is enforced, not even deny rules.
 */
export type EnforcementMode = 'default' | 'always' | 'never';
/** A container port the endpoint declares by name (Kubernetes containerPorts). */
export interface NamedPort {
  readonly name: string;
  readonly port: number;
  readonly protocol: Exclude<ProtocolName, 'ANY'>;
}

/** What the engine needs to know about a local endpoint. */
export interface EndpointInfo {
  readonly id: number;
  /** Its security identity; the engine must know it through the IdentityView. */
  readonly identity: number;
  readonly namedPorts?: readonly NamedPort[];
}
