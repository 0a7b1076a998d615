import type { Logger } from '../logging/logger.js';
import { formatPolicyName } from '../policy/index.js';
import type {
  EndpointInfo,
  EndpointRegeneration,
  Identity,
  MapEntry,
  Policy,
  PolicyEngine,
  PolicyEngineReader,
  PolicyFilter,
  PolicyImportResult,
  PolicyMapOverflowError,
  PolicyName,
  PolicyUpdateResult,
} from '../policy/index.js';

/** What one change to the policy world did. */
export interface PolicyChange {
  /** The agent's policy revision after the change. */
  readonly revision: number;
  /** Endpoints whose map state changed, sorted: each needs a regeneration. */
  readonly endpoints: readonly number[];
  /**
   * Those of `endpoints` whose new map state does not fit their policy map:
   * their regeneration fails, they go not-ready and keep the policy they
   * had. Known when the change is made, so whoever made it can be told.
   */
  readonly notReady: readonly EndpointNotReady[];
}

/** An endpoint a policy change leaves not-ready, and why. */
export interface EndpointNotReady {
  readonly endpoint: number;
  readonly reason: string;
}

/** An endpoint's policy at one revision: what one regeneration puts in force. */
export interface EndpointPolicySnapshot {
  readonly revision: number;
  readonly identity: number;
  readonly entries: readonly MapEntry[];
  /** The staged view's map state, when staged policies select the endpoint (reported by the datapath, never enforced). */
  readonly stagedEntries?: readonly MapEntry[];
  /** Set when the map state does not fit the endpoint's map: nothing can be realized. */
  readonly error?: PolicyMapOverflowError;
}

/** Policies one change names one line each up to this many; more are one line. */
const MAX_POLICY_LINES = 20;

export type PolicyChangeListener = (change: PolicyChange) => void;

/**
 * The policy engine with the revision endpoints realize (Cilium's
 * policyRevision). The engine's own revision counts repository changes
 * only, yet an identity appearing or going changes map states too; so this
 * wrapper keeps the one revision the agent shows: it moves whenever a policy
 * is imported or deleted, or any already-bound endpoint's map state changes.
 * An endpoint joining the engine does not move it: only that endpoint's own
 * map is new, and its first regeneration realizes the current revision.
 * Every mutation goes through here (others get the engine read-only), and
 * listeners (the endpoint manager) learn which endpoints to regenerate.
 */
export class PolicyRevisions {
  #revision: number;
  readonly #listeners = new Set<PolicyChangeListener>();
  readonly #revisionListeners = new Set<(revision: number) => void>();

  readonly #engine: PolicyEngine;

  /** `log`: where each policy added, updated or deleted is said, whatever brought it (the API, the kvstore, Kubernetes). */
  constructor(
    engine: PolicyEngine,
    private readonly log?: Logger,
  ) {
    this.#engine = engine;
    this.#revision = engine.revision;
  }

  /** The engine's answers (endpoint policies, selectors, traces); its changes go through this class only. */
  get engine(): PolicyEngineReader {
    return this.#engine;
  }

  /**
   * One info line per policy changed; a change of many (a restore, a large
   * import) is one line with the count and the first names, not thousands.
   */
  #logPolicies(msg: string, names: readonly PolicyName[]): void {
    if (!this.log || names.length === 0) return;
    if (names.length <= MAX_POLICY_LINES) for (const n of names) this.log.info({ policy: formatPolicyName(n), revision: this.#revision }, msg);
    else this.log.info({ policies: names.length, first: names.slice(0, MAX_POLICY_LINES).map(formatPolicyName), revision: this.#revision }, `${names.length} ${msg.replace(/^policy /, 'policies ')}`);
  }

  get revision(): number {
    return this.#revision;
  }

  subscribe(listener: PolicyChangeListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Every move of the revision, as it happens (the agent persists it, so it never goes backwards across restarts). */
  onRevision(listener: (revision: number) => void): () => void {
    this.#revisionListeners.add(listener);
    return () => this.#revisionListeners.delete(listener);
  }

  /**
   * Moves the revision to at least `floor` (the highest one an earlier run
   * reached, plus one): the engine counts from zero at every start, and an
   * endpoint's realized revision must never look older than before.
   */
  raiseRevision(floor: number): void {
    if (floor <= this.#revision) return;
    this.#revision = floor;
    for (const l of this.#revisionListeners) l(this.#revision);
  }

  /** Parses and imports policy documents, all or nothing. */
  importText(text: string): PolicyChange & { policies: readonly PolicyName[] } {
    const before = this.#engine.revision;
    const r = this.#engine.importText(text);
    return this.#imported(r, before);
  }

  #imported(r: PolicyImportResult, before: number): PolicyChange & { policies: readonly PolicyName[] } {
    const change = { ...this.#apply(r, this.#engine.revision !== before), policies: r.policies };
    const replaced = new Set(r.replaced.map(formatPolicyName));
    this.#logPolicies('policy added', r.policies.filter((n) => !replaced.has(formatPolicyName(n))));
    this.#logPolicies('policy updated', r.replaced);
    return change;
  }

  /** Adds or replaces already-parsed policies (the policy store's import and restore). */
  upsertPolicies(policies: readonly Policy[]): PolicyChange & { policies: readonly PolicyName[] } {
    const before = this.#engine.revision;
    const r = this.#engine.upsertPolicies(policies);
    return this.#imported(r, before);
  }

  /** Deletes the matching policies (PolicyNotFoundError when none match). */
  deletePolicies(filter: PolicyFilter): PolicyChange & { deleted: readonly PolicyName[] } {
    const before = this.#engine.revision;
    const r = this.#engine.deletePolicies(filter);
    const change = { ...this.#apply(r, this.#engine.revision !== before), deleted: r.deleted };
    this.#logPolicies('policy deleted', r.deleted);
    return change;
  }

  policies(filter?: PolicyFilter): Policy[] {
    return this.#engine.policies(filter);
  }

  identitiesChanged(added: readonly Identity[], removed: readonly number[]): PolicyChange {
    return this.#apply(this.#engine.identitiesChanged(added, removed), false);
  }

  /** Adds an endpoint or changes its identity; the change lists it with the others affected. */
  upsertEndpoint(info: EndpointInfo): PolicyChange {
    return this.#apply(this.#engine.upsertEndpoint(info), false, info.id);
  }

  removeEndpoint(id: number): PolicyChange {
    return this.#apply(this.#engine.removeEndpoint(id), false, id);
  }

  /** The endpoint's map state now, at the current revision (the engine throws UnknownEndpointError for an unknown endpoint). */
  snapshot(endpointId: number): EndpointPolicySnapshot {
    const p = this.#engine.endpointPolicy(endpointId);
    return { revision: this.#revision, identity: p.identity, entries: p.entries, ...(p.staged ? { stagedEntries: p.staged.entries } : {}), ...(p.error ? { error: p.error } : {}) };
  }

  #apply(result: PolicyUpdateResult, repositoryChanged: boolean, self?: number): PolicyChange {
    const regenerated = result.regenerations.map((r: EndpointRegeneration) => r.endpointId);
    if (repositoryChanged || regenerated.some((id) => id !== self)) {
      this.#revision++;
      for (const l of this.#revisionListeners) l(this.#revision);
    }
    const notReady = result.regenerations.flatMap((r) =>
      r.error ? [{ endpoint: r.endpointId, reason: `its policy needs ${r.error.entries} policy map entries, the limit is ${r.error.limit} (--bpf-policy-endpoint-max); the previous policy stays in force` }] : [],
    );
    const change: PolicyChange = { revision: this.#revision, endpoints: regenerated, notReady };
    if (regenerated.length > 0) for (const l of this.#listeners) l(change);
    return change;
  }
}
