/**
 * PolicyEngine: the control plane the agent drives. It owns the repository,
 * the selector cache and one computed map state per group of endpoints that
 * share an identity and named ports. Every call that changes something names
 * the endpoints whose map state changed, the only ones to regenerate (what
 * to write is the map writer's diff of the state against what the map holds):
 *
 *  - a policy change fully recomputes the endpoints its rules select;
 *  - an identity change recomputes only that identity's entries ("slice") in
 *    the endpoints whose policies use a selector whose selection changed;
 *  - an enforcement-mode change recomputes everything.
 *
 * A group that staged policies select also has a staged view: the map state
 * of its enforced and staged policies together (what it would enforce once
 * they are promoted), computed and journalled the same way beside its
 * enforced state, which staged policies never change.
 */
import type { LabelSet } from '../labels/index.js';
import { PolicyMapOverflowError, UnknownEndpointError, UnknownIdentityError } from './errors.js';
import { traceFlow, type EvaluationContext, type Subject, type TraceResult } from './evaluate.js';
import { MapState, mapKeyString, type MapEntry, type MapKey } from './mapState.js';
import { PolicyMapBuilder } from './policyMapEntries.js';
import { PolicyRepository, type PolicyFilter } from './repository.js';
import { resolvePolicy, type ResolvedPolicy } from './resolvedPolicy.js';
import { formatPolicyName, type Policy, type PolicyName, type Rule } from './rule.js';
import { parsePolicyText } from './ruleParser.js';
import type { IdentitySelector } from './selector.js';
import { SelectorCache } from './selectorCache.js';
import type { DirectionEnforcement } from './enforcement.js';
import { type CidrIdentitySource, type Direction, type EndpointInfo, type EnforcementMode, type Identity, type IdentityView, type NamedPort, ReservedIdentity, type Verdict } from './types.js';
import { MAX_GLOBAL_IDENTITY, MIN_GLOBAL_IDENTITY } from '../identity/constants.js';

/** Cilium's default policy map size per endpoint. */
export const DEFAULT_MAX_ENTRIES_PER_ENDPOINT = 16384;

export interface PolicyEngineOptions {
  readonly identities: IdentityView;
  /** Allocates local CIDR identities for CIDR rules; without it CIDR rules select only identities that already exist. */
  readonly cidrIdentities?: CidrIdentitySource;
  readonly enforcementMode?: EnforcementMode;
  readonly maxEntriesPerEndpoint?: number;
  /** Host → endpoint ingress always allowed (Cilium's allow-localhost). Default true. */
  readonly allowLocalhost?: boolean;
}

export interface EndpointRegeneration {
  readonly endpointId: number;
  readonly identity: number;
  readonly policyRevision: number;
  /** Entries the endpoint's map holds once regenerated (or would hold, with `error`: then the previous map stays). */
  readonly entries: number;
  readonly error?: PolicyMapOverflowError;
}

export interface PolicyUpdateResult {
  /** Repository revision after the change; endpoints not listed are at this revision already. */
  readonly revision: number;
  /** Endpoints whose map state changed (or whose error state changed), sorted by id. */
  readonly regenerations: readonly EndpointRegeneration[];
}

export interface PolicyImportResult extends PolicyUpdateResult {
  readonly policies: readonly PolicyName[];
  /** Those of `policies` that replaced one of the same name (the others are new). */
  readonly replaced: readonly PolicyName[];
}

export interface PolicyDeleteResult extends PolicyUpdateResult {
  readonly deleted: readonly PolicyName[];
}

export interface EndpointPolicy {
  readonly endpointId: number;
  readonly identity: number;
  readonly policyRevision: number;
  readonly enforcement: Readonly<Record<Direction, DirectionEnforcement>>;
  readonly entries: readonly MapEntry[];
  /** The staged view, when staged policies select the endpoint: enforced and staged policies together. */
  readonly staged?: StagedView;
  readonly error?: PolicyMapOverflowError;
}

/** An endpoint's staged view: reported by the datapath where it differs, never enforced. */
export interface StagedView {
  readonly enforcement: Readonly<Record<Direction, DirectionEnforcement>>;
  readonly entries: readonly MapEntry[];
}

/** A trace endpoint: labels (`k8s:app=web` strings parsed by the caller), an identity, or a local endpoint. */
export type TracePeer = { readonly labels: LabelSet; readonly namedPorts?: readonly NamedPort[] } | { readonly identity: number } | { readonly endpoint: number };

export interface MapLookup {
  readonly verdict: Verdict;
  /** The entry the datapath would pick; undefined = no entry matches (dropped). */
  readonly entry: MapEntry | undefined;
}

/** One computed map state: the enforced policy's, or a staged view. */
interface View {
  resolved: ResolvedPolicy;
  builder: PolicyMapBuilder;
  readonly state: MapState;
  /** Map keys per peer identity, so one identity's entries can be replaced alone. */
  byIdentity: Map<number, string[]>;
}

interface Group extends View {
  readonly key: string;
  readonly identity: number;
  labels: LabelSet;
  readonly namedPorts: readonly NamedPort[];
  readonly endpoints: Set<number>;
  /** The staged view, while staged policies select the group's identity. */
  staged: View | undefined;
  /** The staged view appeared or went since the last flush. */
  stagedToggled: boolean;
  /**
   * The last revision whose map fitted (what the endpoints hold). A group that
   * fits is always at the repository's revision: changes it was not touched by
   * do not concern it.
   */
  revision: number;
  overflow: boolean;
  /** Endpoints that joined while the group overflowed: regenerated on recovery even if the state did not change. */
  readonly needFull: Set<number>;
}

type Touch = 'full' | Set<number>;

function groupKey(identity: number, namedPorts: readonly NamedPort[]): string {
  const ports = namedPorts.map((p) => `${p.name}:${p.protocol}:${p.port}`).sort();
  return `${identity}|${ports.join(',')}`;
}

/**
 * Identities a selector may name. 0 is the map state's wildcard ("any peer"):
 * the identity subsystem's reserved:unknown shares the number and must never
 * be selected, or its entries would read as allowing every peer.
 */
function selectable(identities: Iterable<Identity>): Identity[] {
  return [...identities].filter((i) => i.id !== ReservedIdentity.Any);
}

/**
 * The engine as everyone but PolicyRevisions (src/endpoint) sees it: what it
 * answers. Every change goes through PolicyRevisions, which moves the
 * revision the agent shows and tells the endpoints to regenerate.
 */
export type PolicyEngineReader = Pick<
  PolicyEngine,
  'revision' | 'enforcementMode' | 'policies' | 'selectors' | 'selectsNoEndpoint' | 'endpointPolicy' | 'endpointEnforcement' | 'endpointIds' | 'lookup' | 'trace' | 'evaluationContext'
>;

export class PolicyEngine {
  readonly repository = new PolicyRepository();
  readonly selectorCache: SelectorCache;
  readonly #cidr: CidrIdentitySource | undefined;
  readonly #identityView: IdentityView;
  readonly #maxEntries: number;
  readonly #allowLocalhost: boolean;
  #mode: EnforcementMode;
  #rules: Rule[] = [];
  #rulesByIdentity: Map<number, Rule[]> | undefined;
  /** Every policy's rules (the staged views'), while any policy is staged; undefined otherwise. */
  #stagedRules: Rule[] | undefined;
  #stagedPolicies = new Set<string>();
  /** identity → the rules selecting it for its staged view, only for identities a staged rule selects. */
  #stagedRulesByIdentity: Map<number, Rule[]> | undefined;
  readonly #groups = new Map<string, Group>();
  /** Groups created since the last flush: their first map's changes are not taken yet. */
  readonly #newGroups = new Set<Group>();
  readonly #groupsByIdentity = new Map<number, Set<Group>>();
  readonly #endpoints = new Map<number, { info: EndpointInfo; group: Group }>();
  #egressNamedPorts: NamedPort[] = [];
  #egressNamedPortsKey = '';

  constructor(options: PolicyEngineOptions) {
    this.selectorCache = new SelectorCache(selectable(options.identities.list()));
    this.#cidr = options.cidrIdentities;
    this.#identityView = options.identities;
    this.#mode = options.enforcementMode ?? 'default';
    this.#maxEntries = options.maxEntriesPerEndpoint ?? DEFAULT_MAX_ENTRIES_PER_ENDPOINT;
    this.#allowLocalhost = options.allowLocalhost ?? true;
  }

  get revision(): number {
    return this.repository.revision;
  }

  get enforcementMode(): EnforcementMode {
    return this.#mode;
  }

  // ---- policies -------------------------------------------------------------

  /** Parses YAML/JSON text and applies it atomically (PolicyParseError / PolicyValidationError leave everything as it was). */
  importText(text: string): PolicyImportResult {
    return this.upsertPolicies(parsePolicyText(text));
  }

  /** Adds or replaces policies (by kind/namespace/name). */
  upsertPolicies(policies: readonly Policy[]): PolicyImportResult {
    const touched = new Map<Group, Touch>();
    if (this.#cidr !== undefined) {
      const prefixes = policies.flatMap((p) => p.cidrPrefixes);
      if (prefixes.length > 0) this.#applyIdentityChanges(this.#cidr.acquireCidrIdentities(prefixes), [], touched);
    }
    for (const p of policies) this.#acquireSelectors(p);
    const change = this.repository.upsert(policies);
    this.#setRules();
    this.#touchSubjects([...change.upserted, ...change.removed], touched);
    this.#forget(change.removed, touched);
    return { ...this.#flush(touched), policies: policies.map((p) => p.name), replaced: change.removed.map((p) => p.name) };
  }

  /** Deletes by name and/or labels; PolicyNotFoundError when nothing matches. */
  deletePolicies(filter: PolicyFilter): PolicyDeleteResult {
    const touched = new Map<Group, Touch>();
    const change = this.repository.delete(filter);
    this.#setRules();
    this.#touchSubjects(change.removed, touched);
    this.#forget(change.removed, touched);
    return { ...this.#flush(touched), deleted: change.removed.map((p) => p.name) };
  }

  /**
   * The rules of these policies whose subject selects no endpoint: no pod
   * identity of the cluster (256..65535) and no local endpoint's identity.
   * Such a policy is in the repository but enforces nothing — typically a
   * NetworkPolicy (k8s: labels in its namespace) meant for containers
   * labelled `container:` — so an import says so, selector by selector.
   */
  selectsNoEndpoint(names: readonly PolicyName[]): Array<{ policy: PolicyName; selector: string }> {
    const local = new Set([...this.#endpoints.values()].map((e) => e.info.identity));
    const isEndpoint = (id: number) => local.has(id) || (id >= MIN_GLOBAL_IDENTITY && id <= MAX_GLOBAL_IDENTITY);
    const wanted = new Set(names.map(formatPolicyName));
    const out: Array<{ policy: PolicyName; selector: string }> = [];
    for (const p of this.repository.list()) {
      if (!wanted.has(formatPolicyName(p.name))) continue;
      for (const r of p.rules) {
        const selections = this.selectorCache.get(r.subject.key)?.selections ?? new Set<number>();
        if (![...selections].some(isEndpoint)) out.push({ policy: p.name, selector: r.subject.key });
      }
    }
    return out;
  }

  policies(filter?: PolicyFilter): Policy[] {
    return this.repository.list(filter);
  }

  /** `GET /policy/selectors`. */
  selectors(): ReturnType<SelectorCache['list']> {
    return this.selectorCache.list();
  }

  setEnforcementMode(mode: EnforcementMode): PolicyUpdateResult {
    this.#mode = mode;
    const touched = new Map<Group, Touch>();
    for (const g of this.#groups.values()) touched.set(g, 'full');
    return this.#flush(touched);
  }

  // ---- identities -----------------------------------------------------------

  /** The identity allocator saw identities appear (or change labels) and go. */
  identitiesChanged(added: readonly Identity[], removed: readonly number[] = []): PolicyUpdateResult {
    const touched = new Map<Group, Touch>();
    this.#applyIdentityChanges(selectable(added), removed.filter((id) => id !== ReservedIdentity.Any), touched);
    return this.#flush(touched);
  }

  // ---- endpoints ------------------------------------------------------------

  /** Adds an endpoint or updates its identity/named ports; its regeneration is in the result with the others affected. */
  upsertEndpoint(info: EndpointInfo): PolicyUpdateResult {
    const touched = new Map<Group, Touch>();
    let identity = this.selectorCache.identity(info.identity);
    if (identity === undefined) {
      // Not reported through identitiesChanged yet: take it from the view (its selector memberships change too).
      identity = this.#identityView.get(info.identity);
      if (identity === undefined) throw new UnknownIdentityError(info.identity);
      this.#applyIdentityChanges([identity], [], touched);
    }
    const namedPorts = info.namedPorts ?? [];
    const key = groupKey(info.identity, namedPorts);
    const prev = this.#endpoints.get(info.id);
    const group = this.#groups.get(key) ?? this.#newGroup(key, identity, namedPorts);
    const moved = prev === undefined || prev.group !== group;
    if (prev !== undefined && moved) this.#leaveGroup(info.id, prev.group);
    this.#endpoints.set(info.id, { info, group });
    if (namedPorts.length > 0 || (prev?.info.namedPorts?.length ?? 0) > 0) this.#updateEgressNamedPorts(touched);
    // The group's own journal says whether its existing members need a
    // regeneration; the newcomer joins after the flush and always needs one.
    const result = this.#flush(touched);
    if (!moved) return result;
    group.endpoints.add(info.id);
    return { revision: result.revision, regenerations: mergeRegenerations(result.regenerations, [this.#joinRegeneration(info.id, group)]) };
  }

  removeEndpoint(id: number): PolicyUpdateResult {
    const ep = this.#endpoints.get(id);
    if (ep === undefined) throw new UnknownEndpointError(id);
    this.#endpoints.delete(id);
    this.#leaveGroup(id, ep.group);
    const touched = new Map<Group, Touch>();
    if ((ep.info.namedPorts?.length ?? 0) > 0) this.#updateEgressNamedPorts(touched);
    return this.#flush(touched);
  }

  endpointPolicy(id: number): EndpointPolicy {
    const ep = this.#endpoints.get(id);
    if (ep === undefined) throw new UnknownEndpointError(id);
    const g = ep.group;
    return {
      endpointId: id,
      identity: g.identity,
      policyRevision: g.overflow ? g.revision : this.revision,
      enforcement: g.resolved.enforcement,
      entries: g.state.toJSON(),
      ...(g.staged !== undefined ? { staged: { enforcement: g.staged.resolved.enforcement, entries: g.staged.state.toJSON() } } : {}),
      ...(g.overflow ? { error: new PolicyMapOverflowError(id, entriesOf(g), this.#maxEntries) } : {}),
    };
  }

  /**
   * Which directions the endpoint's policy enforces, and the rules that made
   * them default-deny (undefined for an unknown endpoint); with `staged`, its
   * staged view's (the enforced policy's when it has none).
   */
  endpointEnforcement(id: number, staged = false): Readonly<Record<Direction, DirectionEnforcement>> | undefined {
    const g = this.#endpoints.get(id)?.group;
    return (staged ? g?.staged?.resolved.enforcement : undefined) ?? g?.resolved.enforcement;
  }

  endpointIds(): number[] {
    return [...this.#endpoints.keys()].sort((a, b) => a - b);
  }

  /** The verdict the datapath reaches with this endpoint's computed map (no entry = drop). */
  lookup(endpointId: number, direction: Direction, peerIdentity: number, proto: number, port: number): MapLookup {
    const ep = this.#endpoints.get(endpointId);
    if (ep === undefined) throw new UnknownEndpointError(endpointId);
    const entry = ep.group.state.lookup(direction, peerIdentity, proto, port);
    return { verdict: entry?.verdict ?? 'deny', entry };
  }

  /** Explains a flow from the rules: source egress then destination ingress, with the deciding rules. */
  trace(src: TracePeer, dst: TracePeer, proto: number, port: number): TraceResult {
    return traceFlow(this.evaluationContext(), this.#subject(src), this.#subject(dst), proto, port);
  }

  /** What the reference evaluator needs: the current rules, mode and named ports. */
  evaluationContext(): EvaluationContext {
    return { rules: this.#rules, mode: this.#mode, allowLocalhost: this.#allowLocalhost, egressNamedPorts: this.#egressNamedPorts };
  }

  // ---- internals ------------------------------------------------------------

  #subject(p: TracePeer): Subject {
    if ('labels' in p) return p;
    if ('identity' in p) {
      const id = this.selectorCache.identity(p.identity);
      if (id === undefined) throw new UnknownIdentityError(p.identity);
      return { labels: id.labels };
    }
    const ep = this.#endpoints.get(p.endpoint);
    if (ep === undefined) throw new UnknownEndpointError(p.endpoint);
    return { labels: ep.group.labels, namedPorts: ep.group.namedPorts };
  }

  #selectorsOf(p: Policy): IdentitySelector[] {
    const out: IdentitySelector[] = [];
    for (const r of p.rules) {
      out.push(r.subject);
      for (const dr of [r.ingress, r.egress]) {
        for (const pr of [...dr.allow, ...dr.deny]) if (pr.peers !== 'all') out.push(...pr.peers);
      }
    }
    return out;
  }

  #acquireSelectors(p: Policy): void {
    for (const s of this.#selectorsOf(p)) this.selectorCache.acquire(s);
  }

  /** Releases what removed policies held: selectors, then CIDR identities. */
  #forget(removed: readonly Policy[], touched: Map<Group, Touch>): void {
    for (const p of removed) for (const s of this.#selectorsOf(p)) this.selectorCache.release(s);
    if (this.#cidr === undefined) return;
    const prefixes = removed.flatMap((p) => p.cidrPrefixes);
    if (prefixes.length > 0) this.#applyIdentityChanges([], this.#cidr.releaseCidrIdentities(prefixes), touched);
  }

  /** Every group whose identity a subject selector of these policies selects needs a full recomputation. */
  #touchSubjects(policies: readonly Policy[], touched: Map<Group, Touch>): void {
    for (const p of policies) {
      for (const r of p.rules) {
        const sel = this.selectorCache.get(r.subject.key);
        if (sel === undefined) continue;
        for (const id of sel.selections) for (const g of this.#groupsByIdentity.get(id) ?? []) touched.set(g, 'full');
      }
    }
  }

  #setRules(): void {
    this.#rules = this.repository.rules();
    this.#stagedPolicies = this.repository.stagedNames();
    this.#stagedRules = this.#stagedPolicies.size > 0 ? this.repository.rules(true) : undefined;
    this.#rulesByIdentity = undefined;
    this.#stagedRulesByIdentity = undefined;
  }

  #applyIdentityChanges(added: readonly Identity[], removed: readonly number[], touched: Map<Group, Touch>): void {
    // An endpoint's own identity with new labels may be selected by other rules: recompute those endpoints whole.
    for (const id of added) {
      const prev = this.selectorCache.identity(id.id);
      if (prev === undefined || prev.labels.equals(id.labels)) continue;
      for (const g of this.#groupsByIdentity.get(id.id) ?? []) {
        g.labels = id.labels;
        touched.set(g, 'full');
      }
    }
    const changes = this.selectorCache.updateIdentities(added, removed);
    if (changes.length === 0) return;
    this.#rulesByIdentity = undefined;
    this.#stagedRulesByIdentity = undefined;
    const byKey = new Map(changes.map((c) => [c.key, c]));
    for (const g of this.#groups.values()) {
      const keys = g.staged === undefined ? g.resolved.selectorKeys : new Set([...g.resolved.selectorKeys, ...g.staged.resolved.selectorKeys]);
      for (const key of keys) {
        const c = byKey.get(key);
        if (c === undefined) continue;
        let t = touched.get(g);
        if (t === 'full') break;
        if (t === undefined) touched.set(g, (t = new Set()));
        for (const id of c.added) t.add(id);
        for (const id of c.removed) t.add(id);
      }
    }
  }

  /** Rules whose subject selector selects the identity, from an index rebuilt after rule or identity changes. */
  #selecting(identity: number): Rule[] {
    if (this.#rulesByIdentity === undefined) {
      const index = new Map<number, Rule[]>();
      for (const r of this.#rules) {
        for (const id of this.selectorCache.get(r.subject.key)?.selections ?? []) {
          let list = index.get(id);
          if (list === undefined) index.set(id, (list = []));
          list.push(r);
        }
      }
      this.#rulesByIdentity = index;
    }
    return this.#rulesByIdentity.get(identity) ?? [];
  }

  /** The staged view's rules for the identity (enforced and staged), or undefined when no staged rule selects it. */
  #selectingStaged(identity: number): Rule[] | undefined {
    if (this.#stagedRules === undefined) return undefined;
    if (this.#stagedRulesByIdentity === undefined) {
      const index = new Map<number, Rule[]>();
      const staged = new Set<number>();
      for (const r of this.#stagedRules) {
        const isStaged = this.#stagedPolicies.has(formatPolicyName(r.policy));
        for (const id of this.selectorCache.get(r.subject.key)?.selections ?? []) {
          let list = index.get(id);
          if (list === undefined) index.set(id, (list = []));
          list.push(r);
          if (isStaged) staged.add(id);
        }
      }
      for (const id of index.keys()) if (!staged.has(id)) index.delete(id);
      this.#stagedRulesByIdentity = index;
    }
    return this.#stagedRulesByIdentity.get(identity);
  }

  #resolveRules(rules: readonly Rule[], namedPorts: readonly NamedPort[]): { resolved: ResolvedPolicy; builder: PolicyMapBuilder } {
    const resolved = resolvePolicy({ mode: this.#mode, selectorCache: this.selectorCache, egressNamedPorts: this.#egressNamedPorts }, rules, namedPorts);
    return { resolved, builder: new PolicyMapBuilder(resolved, { allowLocalhost: this.#allowLocalhost }) };
  }

  #resolve(identity: number, namedPorts: readonly NamedPort[]): { resolved: ResolvedPolicy; builder: PolicyMapBuilder; staged: { resolved: ResolvedPolicy; builder: PolicyMapBuilder } | undefined } {
    const stagedRules = this.#selectingStaged(identity);
    return {
      ...this.#resolveRules(this.#selecting(identity), namedPorts),
      staged: stagedRules === undefined ? undefined : this.#resolveRules(stagedRules, namedPorts),
    };
  }

  /** Puts the group's staged view in line with its resolution (undefined: no staged policy selects it). */
  #setStaged(g: Group, next: { resolved: ResolvedPolicy; builder: PolicyMapBuilder } | undefined): void {
    if (next === undefined) {
      if (g.staged !== undefined) g.stagedToggled = true;
      g.staged = undefined;
      return;
    }
    if (g.staged === undefined) {
      g.staged = { resolved: next.resolved, builder: next.builder, state: new MapState(), byIdentity: new Map() };
      g.stagedToggled = true;
    } else {
      g.staged.resolved = next.resolved;
      g.staged.builder = next.builder;
    }
    this.#fill(g.staged, next.builder.allEntries());
  }

  #newGroup(key: string, identity: Identity, namedPorts: readonly NamedPort[]): Group {
    const { resolved, builder, staged } = this.#resolve(identity.id, namedPorts);
    const group: Group = {
      key,
      identity: identity.id,
      labels: identity.labels,
      namedPorts,
      endpoints: new Set(),
      resolved,
      builder,
      state: new MapState(),
      byIdentity: new Map(),
      staged: undefined,
      stagedToggled: false,
      revision: this.revision,
      overflow: false,
      needFull: new Set(),
    };
    this.#fill(group, builder.allEntries());
    this.#setStaged(group, staged);
    this.#groups.set(key, group);
    this.#newGroups.add(group);
    let set = this.#groupsByIdentity.get(identity.id);
    if (set === undefined) this.#groupsByIdentity.set(identity.id, (set = new Set()));
    set.add(group);
    return group;
  }

  #leaveGroup(endpointId: number, group: Group): void {
    group.endpoints.delete(endpointId);
    group.needFull.delete(endpointId);
    if (group.endpoints.size > 0) return;
    this.#groups.delete(group.key);
    this.#groupsByIdentity.get(group.identity)?.delete(group);
  }

  #joinRegeneration(endpointId: number, group: Group): EndpointRegeneration {
    if (group.overflow) group.needFull.add(endpointId);
    return this.#regeneration(endpointId, group);
  }

  #fill(group: View, entries: readonly MapEntry[]): void {
    group.state.replaceAll(entries);
    group.byIdentity = new Map();
    for (const e of entries) {
      let keys = group.byIdentity.get(e.key.identity);
      if (keys === undefined) group.byIdentity.set(e.key.identity, (keys = []));
      keys.push(mapKeyString(e.key));
    }
  }

  #replaceSlice(group: View, identity: number): void {
    const next = group.builder.identityEntries(identity);
    const nextKeys = new Set(next.map((e) => mapKeyString(e.key)));
    for (const k of group.byIdentity.get(identity) ?? []) {
      if (!nextKeys.has(k)) group.state.delete(parseKeyString(k));
    }
    for (const e of next) group.state.set(e);
    if (next.length === 0) group.byIdentity.delete(identity);
    else group.byIdentity.set(identity, [...nextKeys]);
  }

  #updateEgressNamedPorts(touched: Map<Group, Touch>): void {
    const seen = new Map<string, NamedPort>();
    for (const { info } of this.#endpoints.values()) {
      for (const p of info.namedPorts ?? []) seen.set(`${p.name}:${p.protocol}:${p.port}`, p);
    }
    const key = [...seen.keys()].sort().join(',');
    if (key === this.#egressNamedPortsKey) return;
    this.#egressNamedPortsKey = key;
    this.#egressNamedPorts = [...seen.values()];
    for (const g of this.#groups.values()) if (g.resolved.usesEgressNamedPorts || g.staged?.resolved.usesEgressNamedPorts === true) touched.set(g, 'full');
  }

  #flush(touched: Map<Group, Touch>): PolicyUpdateResult {
    const out: EndpointRegeneration[] = [];
    for (const [g, t] of touched) {
      if (!this.#groups.has(g.key)) continue;
      if (t === 'full') {
        const { resolved, builder, staged } = this.#resolve(g.identity, g.namedPorts);
        g.resolved = resolved;
        g.builder = builder;
        this.#fill(g, builder.allEntries());
        this.#setStaged(g, staged);
      } else {
        for (const id of t) {
          this.#replaceSlice(g, id);
          if (g.staged !== undefined) this.#replaceSlice(g.staged, id);
        }
      }
    }
    // Groups created by this call (upsertEndpoint) have an untaken journal too.
    const pending = new Set([...touched.keys(), ...this.#newGroups]);
    this.#newGroups.clear();
    for (const g of pending) {
      if (!this.#groups.has(g.key)) continue;
      const wasOverflow = g.overflow;
      // The staged view's entries sit in the same map: the limit is on both together.
      g.overflow = entriesOf(g) > this.#maxEntries;
      if (g.overflow) {
        // Keep the journal: once the state fits again, it says whether it differs from the last map the endpoints hold.
        if (!wasOverflow || touched.has(g)) for (const ep of g.endpoints) out.push(this.#regeneration(ep, g));
        continue;
      }
      g.revision = this.revision;
      const enforcedChanged = g.state.takeChanged();
      const stagedChanged = g.staged?.state.takeChanged() === true || g.stagedToggled;
      g.stagedToggled = false;
      const changed = enforcedChanged || stagedChanged;
      for (const ep of g.endpoints) {
        if (changed || wasOverflow || g.needFull.has(ep)) out.push(this.#regeneration(ep, g));
      }
      g.needFull.clear();
    }
    out.sort((a, b) => a.endpointId - b.endpointId);
    return { revision: this.revision, regenerations: out };
  }

  #regeneration(endpointId: number, g: Group): EndpointRegeneration {
    const base = { endpointId, identity: g.identity, policyRevision: g.overflow ? g.revision : this.revision, entries: entriesOf(g) };
    return g.overflow ? { ...base, error: new PolicyMapOverflowError(endpointId, entriesOf(g), this.#maxEntries) } : base;
  }
}

/** Entries the group's endpoints hold in the map: the enforced state's and the staged view's. */
function entriesOf(g: Group): number {
  return g.state.size + (g.staged?.state.size ?? 0);
}

function parseKeyString(k: string): MapKey {
  const [idPart, proto, port, prefixLen] = k.slice(1).split('/');
  return {
    direction: k[0] === 'i' ? 'ingress' : 'egress',
    identity: Number(idPart),
    proto: Number(proto),
    port: Number(port),
    prefixLen: Number(prefixLen),
  };
}

function mergeRegenerations(a: readonly EndpointRegeneration[], b: readonly EndpointRegeneration[]): EndpointRegeneration[] {
  const byId = new Map<number, EndpointRegeneration>();
  for (const r of [...a, ...b]) byId.set(r.endpointId, r);
  return [...byId.values()].sort((x, y) => x.endpointId - y.endpointId);
}

