/**
 * Identity selectors: the peer (and subject) selectors rules are made of,
 * reduced to one interface — "does this identity's label set match?" — with a
 * stable key, so equal selectors from different rules share one SelectorCache
 * entry.
 */
import {
  LabelSelector,
  LabelSource,
  POD_NAMESPACE_LABEL,
  ReservedLabelKey,
  parseCidrLabelKey,
  type LabelSet,
} from '../labels/index.js';
import { formatPrefix, prefixContains, type IpPrefix } from '../netip/index.js';

export interface IdentitySelector {
  /** Stable text; equal keys select the same identities. */
  readonly key: string;
  /** Selects every identity: the map state uses peer identity 0 for it. */
  readonly wildcard: boolean;
  /**
   * `key=value` of a label every selected identity carries (any source), when
   * there is one: the SelectorCache only tries identities that have it.
   */
  readonly indexLabel?: string;
  matches(labels: LabelSet): boolean;
}

export class LabelIdentitySelector implements IdentitySelector {
  readonly key: string;
  readonly wildcard: boolean;
  readonly indexLabel?: string;
  constructor(readonly selector: LabelSelector) {
    this.key = `labels(${selector.toString()})`;
    this.wildcard = selector.isEmpty();
    const eq = selector.requirements.find((r) => r.operator === 'In' && r.values.length === 1);
    if (eq !== undefined) this.indexLabel = `${eq.key}=${eq.values[0]}`;
  }
  matches(labels: LabelSet): boolean {
    return this.selector.matches(labels);
  }
}

/**
 * A namespaced policy's peer selector: `k8s:io.kubernetes.pod.namespace=<ns>`
 * added unless the selector names the namespace key itself (a tendril or
 * Cilium peer may name pods of another namespace, as in Cilium).
 */
export function restrictToNamespace(selector: LabelSelector, namespace: string): LabelSelector {
  if (selector.requirements.some((r) => r.key === POD_NAMESPACE_LABEL)) return selector;
  return forceNamespace(selector, namespace);
}

/**
 * `k8s:io.kubernetes.pod.namespace=<ns>` added whatever the selector says: a
 * namespaced policy's subjects (and a NetworkPolicy's podSelector peers) are
 * pods of its own namespace only. A selector naming another namespace then
 * selects nothing — anyone who may write policies in one namespace must not
 * reach pods of another by naming its namespace label.
 */
export function forceNamespace(selector: LabelSelector, namespace: string): LabelSelector {
  return LabelSelector.parse({
    matchExpressions: [
      ...(selector.toSpec().matchExpressions ?? []),
      { key: `${LabelSource.K8s}:${POD_NAMESPACE_LABEL}`, operator: 'In', values: [namespace] },
    ],
  });
}

/** Parsed cidr labels per label set: CIDR selectors test every CIDR identity, parsing once is enough. */
const cidrCache = new WeakMap<LabelSet, IpPrefix[]>();

/**
 * A cluster-wide policy's empty fromEndpoints/toEndpoints selector means "every
 * pod in every namespace" (as Cilium treats CCNPs), not every identity: the
 * host, remote nodes and the world are reached through entities.
 */
export function podsOnlyWhenEmpty(selector: LabelSelector): LabelSelector {
  if (!selector.isEmpty()) return selector;
  return LabelSelector.parse({ matchExpressions: [{ key: `${LabelSource.K8s}:${POD_NAMESPACE_LABEL}`, operator: 'Exists' }] });
}

function cidrPrefixesOf(labels: LabelSet): IpPrefix[] {
  let cached = cidrCache.get(labels);
  if (cached === undefined) cidrCache.set(labels, (cached = parseCidrPrefixes(labels)));
  return cached;
}

function parseCidrPrefixes(labels: LabelSet): IpPrefix[] {
  const out: IpPrefix[] = [];
  for (const l of labels) {
    if (l.source !== LabelSource.Cidr) continue;
    const p = parseCidrLabelKey(l.key);
    if (p !== undefined) out.push(p);
  }
  return out;
}

function isWorldLabelSet(labels: LabelSet): boolean {
  return (
    labels.has(ReservedLabelKey.World, LabelSource.Reserved) ||
    labels.has(ReservedLabelKey.WorldIpv4, LabelSource.Reserved) ||
    labels.has(ReservedLabelKey.WorldIpv6, LabelSource.Reserved)
  );
}

/**
 * A CIDR with exceptions. It selects the local CIDR identities whose prefix
 * lies inside `prefix` and inside no `except`; a /0 also selects its own
 * family's world identity (everything outside the cluster without a more
 * specific CIDR identity).
 */
export class CidrIdentitySelector implements IdentitySelector {
  readonly key: string;
  readonly wildcard = false;
  constructor(
    readonly prefix: IpPrefix,
    readonly except: readonly IpPrefix[] = [],
  ) {
    const ex = except.map(formatPrefix).sort();
    this.key = `cidr(${formatPrefix(prefix)}${ex.length > 0 ? ` except ${ex.join(',')}` : ''})`;
  }
  matches(labels: LabelSet): boolean {
    const prefixes = cidrPrefixesOf(labels);
    if (prefixes.length > 0) {
      return prefixes.some((p) => prefixContains(this.prefix, p) && !this.except.some((e) => prefixContains(e, p)));
    }
    if (this.prefix.length !== 0 || !isWorldLabelSet(labels)) return false;
    // A /0 admits its own family's world only. The eBPF datapath gives an IPv6
    // address outside the ipcache world-ipv6 and an IPv4 one the family-free
    // world (or world-ipv4): 0.0.0.0/0 must not open IPv6 to everyone, nor
    // ::/0 IPv4 (Cilium once let 0.0.0.0/0 admit IPv6).
    const worldFamily = labels.has(ReservedLabelKey.WorldIpv6, LabelSource.Reserved) ? 6 : 4;
    return worldFamily === this.prefix.family;
  }
}

/** Cilium's entities, the named groups of peers. */
export const ENTITIES = ['all', 'world', 'cluster', 'host', 'remote-node', 'init', 'health', 'unmanaged', 'kube-apiserver', 'ingress'] as const;
export type Entity = (typeof ENTITIES)[number];

const ENTITY_RESERVED_KEY: Partial<Record<Entity, string>> = {
  host: ReservedLabelKey.Host,
  'remote-node': ReservedLabelKey.RemoteNode,
  init: ReservedLabelKey.Init,
  health: ReservedLabelKey.Health,
  unmanaged: ReservedLabelKey.Unmanaged,
  'kube-apiserver': ReservedLabelKey.KubeApiserver,
  ingress: ReservedLabelKey.Ingress,
};

/**
 * `world` is everything outside the cluster (the world identity and every CIDR
 * identity); `cluster` is its complement (pods, host, remote nodes, health,
 * init, …); `all` is both.
 */
export class EntityIdentitySelector implements IdentitySelector {
  readonly key: string;
  readonly wildcard: boolean;
  constructor(readonly entity: Entity) {
    this.key = `entity(${entity})`;
    this.wildcard = entity === 'all';
  }
  matches(labels: LabelSet): boolean {
    const outside = isWorldLabelSet(labels) || labels.hasSource(LabelSource.Cidr);
    switch (this.entity) {
      case 'all':
        return true;
      case 'world':
        return outside;
      case 'cluster':
        return !outside;
      default:
        return labels.has(ENTITY_RESERVED_KEY[this.entity]!, LabelSource.Reserved);
    }
  }
}
