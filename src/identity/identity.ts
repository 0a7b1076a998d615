import {
  cidrLabel,
  formatLabel,
  LabelSet,
  ReservedLabelKey,
  reservedLabel,
  type ReservedLabelKey as ReservedKey,
} from '../labels/index.js';
import type { IpPrefix } from '../netip/index.js';
import {
  LOCAL_IDENTITY_SCOPE,
  MAX_GLOBAL_IDENTITY,
  MAX_LOCAL_IDENTITY,
  MIN_GLOBAL_IDENTITY,
  MIN_LOCAL_IDENTITY,
  ReservedIdentity,
} from './constants.js';
import { IdentityError, IdentityErrorCode } from './errors.js';

/** Where an identity's number comes from and how far it is valid. */
export type IdentityScope = 'reserved' | 'global' | 'local';

/** A numeric security identity and the labels it stands for. Immutable. */
export interface Identity {
  readonly id: number;
  readonly labels: LabelSet;
  readonly scope: IdentityScope;
}

export function scopeOf(id: number): IdentityScope {
  if (id >= 0 && id < MIN_GLOBAL_IDENTITY) return 'reserved';
  if ((id & LOCAL_IDENTITY_SCOPE) !== 0) return 'local';
  return 'global';
}

export function makeIdentity(id: number, labels: LabelSet): Identity {
  return Object.freeze({ id, labels, scope: scopeOf(id) });
}

/** Validates an identity number from outside (API path, kvstore key). */
export function parseIdentityNumber(text: string | number): number {
  const n = typeof text === 'number' ? text : /^(0|[1-9][0-9]{0,9})$/.test(text) ? Number(text) : NaN;
  const ok =
    Number.isSafeInteger(n) &&
    ((n >= 0 && n <= MAX_GLOBAL_IDENTITY) || (n >= MIN_LOCAL_IDENTITY && n <= MAX_LOCAL_IDENTITY));
  if (!ok) {
    throw new IdentityError(
      IdentityErrorCode.INVALID_ID,
      `identity ${JSON.stringify(text)} is not a number in 0..${MAX_GLOBAL_IDENTITY} or ${MIN_LOCAL_IDENTITY}..${MAX_LOCAL_IDENTITY}`,
    );
  }
  return n;
}

const RESERVED_BY_KEY: Readonly<Record<ReservedKey, number>> = {
  [ReservedLabelKey.Unknown]: ReservedIdentity.Unknown,
  [ReservedLabelKey.Host]: ReservedIdentity.Host,
  [ReservedLabelKey.World]: ReservedIdentity.World,
  [ReservedLabelKey.Unmanaged]: ReservedIdentity.Unmanaged,
  [ReservedLabelKey.Health]: ReservedIdentity.Health,
  [ReservedLabelKey.Init]: ReservedIdentity.Init,
  [ReservedLabelKey.RemoteNode]: ReservedIdentity.RemoteNode,
  [ReservedLabelKey.KubeApiserver]: ReservedIdentity.KubeApiserver,
  [ReservedLabelKey.Ingress]: ReservedIdentity.Ingress,
  [ReservedLabelKey.WorldIpv4]: ReservedIdentity.WorldIpv4,
  [ReservedLabelKey.WorldIpv6]: ReservedIdentity.WorldIpv6,
};

/** Every reserved identity with its single `reserved:<name>` label. */
export const RESERVED_IDENTITIES: readonly Identity[] = Object.freeze(
  (Object.entries(RESERVED_BY_KEY) as Array<[ReservedKey, number]>)
    .map(([key, id]) => makeIdentity(id, LabelSet.from([reservedLabel(key)])))
    .sort((a, b) => a.id - b.id),
);

const RESERVED_BY_ID = new Map(RESERVED_IDENTITIES.map((i) => [i.id, i]));

export function reservedIdentity(id: number): Identity | undefined {
  return RESERVED_BY_ID.get(id);
}

/**
 * The reserved identity a label set resolves to, or undefined when it has no
 * reserved label. As in Cilium, `reserved:host` wins whatever else the host
 * carries (node labels are informational there); any other reserved label
 * must stand alone, because mixing it with workload labels would make a
 * reserved number mean two things.
 */
export function reservedIdentityForLabels(labels: LabelSet): Identity | undefined {
  // CIDR identities carry reserved:world beside their cidr: label; they are node-local, not reserved.
  if (labels.hasSource('cidr')) return undefined;
  const reserved = labels.toArray().filter((l) => l.source === 'reserved');
  if (reserved.length === 0) return undefined;
  const host = reserved.find((l) => l.key === ReservedLabelKey.Host);
  if (host !== undefined) return RESERVED_BY_ID.get(ReservedIdentity.Host);
  if (reserved.length > 1 || labels.size > 1) {
    throw new IdentityError(
      IdentityErrorCode.INVALID_LABELS,
      `reserved label ${formatLabel(reserved[0]!)} cannot be combined with other labels (${labels.toStrings().join(', ')})`,
    );
  }
  return RESERVED_BY_ID.get(RESERVED_BY_KEY[reserved[0]!.key as ReservedKey]);
}

export function isGlobalIdentityNumber(id: number): boolean {
  return id >= MIN_GLOBAL_IDENTITY && id <= MAX_GLOBAL_IDENTITY;
}

/** The API/CLI form: `{id, labels: ["k8s:app=web", …], scope}`. */
export function identityToJSON(i: Identity): { id: number; labels: string[]; scope: IdentityScope } {
  return { id: i.id, labels: i.labels.toStrings(), scope: i.scope };
}

/**
 * The labels of a CIDR identity: its prefix and `reserved:world` (it lies
 * outside the cluster), the same labels the policy engine selects on.
 */
export function cidrIdentityLabels(prefix: IpPrefix): LabelSet {
  return LabelSet.from([cidrLabel(prefix), reservedLabel(ReservedLabelKey.World)]);
}
