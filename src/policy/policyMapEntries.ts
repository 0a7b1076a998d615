/**
 * policyMapEntries: a ResolvedPolicy expanded into map entries, identity by
 * identity. Deny precedence is built into the entries so that the datapath's
 * lookup order (longest port prefix, then exact identity over wildcard — see
 * MapState.lookup) yields "deny if any deny rule matches":
 *
 *  - an allow covered by a deny (same or wildcard identity, same or wider
 *    ports) is left out;
 *  - a deny narrower in ports than an allow already wins on prefix length;
 *  - a wildcard-identity allow narrower than an identity-specific deny would
 *    win on prefix length, so that identity gets a deny at the allow's ports.
 *
 * Entries of peer identity X depend only on the filters selecting X and on the
 * wildcard filters, so one identity's "slice" can be recomputed on its own.
 */
import type { MapEntry } from './mapState.js';
import { ANY_PORT_KEY, portKeyCovers, portKeyRank, type PortKey } from './ports.js';
import type { L4Filter, ResolvedPolicy } from './resolvedPolicy.js';
import type { RuleOrigin } from './rule.js';
import { DIRECTIONS, ReservedIdentity, type Direction } from './types.js';

interface Raw {
  readonly key: PortKey;
  origins: RuleOrigin[];
  builtin?: MapEntry['builtin'];
}

type RawByPort = Map<string, Raw>;

function portKeyId(k: PortKey): string {
  return `${k.proto}/${k.port}/${k.prefixLen}`;
}

function addRaw(into: RawByPort, key: PortKey, origin: RuleOrigin | undefined, builtin?: MapEntry['builtin']): void {
  const id = portKeyId(key);
  let r = into.get(id);
  if (r === undefined) {
    r = { key, origins: [] };
    into.set(id, r);
  }
  if (origin !== undefined && !r.origins.some((o) => o.policy === origin.policy && o.rule === origin.rule && o.path === origin.path)) {
    r.origins.push(origin);
  }
  if (builtin !== undefined) r.builtin = builtin;
}

interface DirectionRaw {
  allow: RawByPort;
  deny: RawByPort;
}

function emptyRaw(): DirectionRaw {
  return { allow: new Map(), deny: new Map() };
}

export interface PolicyMapOptions {
  /** Cilium's allow-localhost: the host may always reach its endpoints (kubelet probes). Default true. */
  readonly allowLocalhost: boolean;
}

export class PolicyMapBuilder {
  readonly #wildcard: Record<Direction, DirectionRaw> = { ingress: emptyRaw(), egress: emptyRaw() };
  readonly #selectorFilters: L4Filter[] = [];

  constructor(
    readonly resolved: ResolvedPolicy,
    readonly options: PolicyMapOptions,
  ) {
    for (const d of DIRECTIONS) {
      if (!resolved.enforcement[d].enforced) addRaw(this.#wildcard[d].allow, ANY_PORT_KEY, undefined, 'not-enforced');
    }
    for (const f of resolved.filters) {
      if (f.selector === undefined) {
        const raw = this.#wildcard[f.direction];
        for (const k of f.portKeys) addRaw(f.verdict === 'allow' ? raw.allow : raw.deny, k, f.origin);
      } else {
        this.#selectorFilters.push(f);
      }
    }
  }

  /** Identities that get entries of their own: everything a selector of the policy selects, and the host. */
  identitiesInUse(): Set<number> {
    const ids = new Set<number>();
    for (const f of this.#selectorFilters) for (const id of f.selector!.selections) ids.add(id);
    if (this.#localhostApplies()) ids.add(ReservedIdentity.Host);
    return ids;
  }

  #localhostApplies(): boolean {
    return this.options.allowLocalhost && this.resolved.enforcement.ingress.enforced;
  }

  /** Entries with peer identity 0. */
  wildcardEntries(): MapEntry[] {
    const out: MapEntry[] = [];
    for (const direction of DIRECTIONS) {
      const { allow, deny } = this.#wildcard[direction];
      for (const a of allow.values()) {
        if (coveredBy(a.key, deny.values())) continue;
        out.push(entry(direction, 0, a, 'allow'));
      }
      for (const d of deny.values()) out.push(entry(direction, 0, d, 'deny'));
    }
    return out;
  }

  /** Entries with peer identity `id` (≠ 0), given the filters that select it (all selector filters when omitted). */
  identityEntries(id: number, filters: readonly L4Filter[] = this.#selectorFilters): MapEntry[] {
    const own: Record<Direction, DirectionRaw> = { ingress: emptyRaw(), egress: emptyRaw() };
    for (const f of filters) {
      if (!f.selector!.selections.has(id)) continue;
      const raw = own[f.direction];
      for (const k of f.portKeys) addRaw(f.verdict === 'allow' ? raw.allow : raw.deny, k, f.origin);
    }
    if (id === ReservedIdentity.Host && this.#localhostApplies()) addRaw(own.ingress.allow, ANY_PORT_KEY, undefined, 'allow-localhost');
    const out: MapEntry[] = [];
    for (const direction of DIRECTIONS) {
      const mine = own[direction];
      const wild = this.#wildcard[direction];
      if (mine.allow.size === 0 && mine.deny.size === 0) continue;
      for (const a of mine.allow.values()) {
        if (coveredBy(a.key, mine.deny.values()) || coveredBy(a.key, wild.deny.values())) continue;
        out.push(entry(direction, id, a, 'allow'));
      }
      const denies: RawByPort = new Map();
      for (const d of mine.deny.values()) addRawAll(denies, d.key, d.origins);
      // A wildcard allow on narrower ports would beat this identity's deny on prefix length.
      for (const a of wild.allow.values()) {
        for (const d of mine.deny.values()) {
          if (portKeyCovers(d.key, a.key) && portKeyRank(d.key) < portKeyRank(a.key)) addRawAll(denies, a.key, d.origins);
        }
      }
      for (const d of denies.values()) out.push(entry(direction, id, d, 'deny'));
    }
    return out;
  }

  /** The whole map state. */
  allEntries(): MapEntry[] {
    const out = this.wildcardEntries();
    // Invert selector → identities once, so each identity only visits the filters that select it.
    const byIdentity = new Map<number, L4Filter[]>();
    for (const f of this.#selectorFilters) {
      for (const id of f.selector!.selections) {
        let list = byIdentity.get(id);
        if (list === undefined) byIdentity.set(id, (list = []));
        list.push(f);
      }
    }
    if (this.#localhostApplies() && !byIdentity.has(ReservedIdentity.Host)) byIdentity.set(ReservedIdentity.Host, []);
    for (const [id, filters] of byIdentity) out.push(...this.identityEntries(id, filters));
    return out;
  }
}

function addRawAll(into: RawByPort, key: PortKey, origins: readonly RuleOrigin[]): void {
  if (origins.length === 0) addRaw(into, key, undefined);
  for (const o of origins) addRaw(into, key, o);
}

function coveredBy(k: PortKey, denies: Iterable<Raw>): boolean {
  for (const d of denies) if (portKeyCovers(d.key, k)) return true;
  return false;
}

function entry(direction: Direction, identity: number, raw: Raw, verdict: 'allow' | 'deny'): MapEntry {
  const key = { direction, identity, proto: raw.key.proto, port: raw.key.port, prefixLen: raw.key.prefixLen };
  const e: MapEntry = { key, verdict, derivedFrom: raw.origins };
  return raw.builtin === undefined ? e : { ...e, builtin: raw.builtin };
}

