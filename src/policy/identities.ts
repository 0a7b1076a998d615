/**
 * LocalIdentityTable: an in-memory IdentityView and CidrIdentitySource with
 * Cilium's reserved identities, label-derived identities from 256 and local
 * CIDR identities from (1<<24)+1, the same ranges as src/identity. Tests and the benchmark allocate identities
 * directly through it; the agent plugs in src/identity instead.
 */
import { cidrIdentityLabels, RESERVED_IDENTITIES } from '../identity/index.js';
import { LabelSet, LabelSource, makeLabel, POD_NAMESPACE_LABEL } from '../labels/index.js';
import { formatPrefix, type IpPrefix } from '../netip/index.js';
import { PolicyArgumentError } from './errors.js';
import { NAMESPACE_LABEL_PREFIX } from './ruleParser.js';
import { MIN_ALLOCATED_IDENTITY, MIN_LOCAL_CIDR_IDENTITY, ReservedIdentity, type CidrIdentitySource, type Identity, type IdentityView } from './types.js';

export class LocalIdentityTable implements IdentityView, CidrIdentitySource {
  readonly #byId = new Map<number, Identity>();
  readonly #byLabels = new Map<string, { identity: Identity; refs: number }>();
  #nextId = MIN_ALLOCATED_IDENTITY;
  #nextCidrId = MIN_LOCAL_CIDR_IDENTITY;

  constructor() {
    // The identity subsystem's reserved identities, so tests see what the agent does,
    // less 0: here it is the map state's wildcard, never a peer (the engine skips it too).
    for (const id of RESERVED_IDENTITIES) if (id.id !== ReservedIdentity.Any) this.#byId.set(id.id, id);
  }

  get(id: number): Identity | undefined {
    return this.#byId.get(id);
  }

  list(): IterableIterator<Identity> {
    return this.#byId.values();
  }

  /** The identity of a label set, allocated on first use (reference counted). */
  allocate(labels: LabelSet | readonly string[]): Identity {
    const set = labels instanceof LabelSet ? labels : LabelSet.parse(labels);
    return this.#allocate(set, () => this.#nextId++);
  }

  /** A pod's identity from Kubernetes-style labels and namespace (convenience for tests). */
  allocatePod(namespace: string, podLabels: Readonly<Record<string, string>>, namespaceLabels: Readonly<Record<string, string>> = {}): Identity {
    const labels = [
      makeLabel(LabelSource.K8s, POD_NAMESPACE_LABEL, namespace),
      ...Object.entries(podLabels).map(([k, v]) => makeLabel(LabelSource.K8s, k, v)),
      ...Object.entries(namespaceLabels).map(([k, v]) => makeLabel(LabelSource.K8s, `${NAMESPACE_LABEL_PREFIX}${k}`, v)),
    ];
    return this.allocate(LabelSet.from(labels));
  }

  release(id: number): boolean {
    const identity = this.#byId.get(id);
    if (identity === undefined || id < MIN_ALLOCATED_IDENTITY) return false;
    const slot = this.#byLabels.get(identity.labels.toString());
    if (slot === undefined) return false;
    if (--slot.refs > 0) return false;
    this.#byLabels.delete(identity.labels.toString());
    this.#byId.delete(id);
    return true;
  }

  acquireCidrIdentities(prefixes: readonly IpPrefix[]): Identity[] {
    return prefixes.map((p) => this.#allocate(cidrIdentityLabels(p), () => this.#nextCidrId++));
  }

  releaseCidrIdentities(prefixes: readonly IpPrefix[]): number[] {
    const gone: number[] = [];
    for (const p of prefixes) {
      const slot = this.#byLabels.get(cidrIdentityLabels(p).toString());
      if (slot === undefined) throw new PolicyArgumentError(`no CIDR identity for ${formatPrefix(p)}`);
      if (this.release(slot.identity.id)) gone.push(slot.identity.id);
    }
    return gone;
  }

  #allocate(labels: LabelSet, nextId: () => number): Identity {
    const text = labels.toString();
    const slot = this.#byLabels.get(text);
    if (slot !== undefined) {
      slot.refs++;
      return slot.identity;
    }
    const identity: Identity = { id: nextId(), labels };
    this.#byLabels.set(text, { identity, refs: 1 });
    this.#byId.set(identity.id, identity);
    return identity;
  }
}
