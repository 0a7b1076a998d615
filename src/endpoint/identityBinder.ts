import type { IdentityAllocator } from '../identity/index.js';
import { type IPCache, IpcacheSource } from '../ipcache/index.js';
import { type LabelFilter, LabelSet, ReservedLabelKey, reservedLabel } from '../labels/index.js';
import { isPolicyError, PolicyErrorCode, type PolicyEngine } from '../policy/index.js';
import type { Endpoint } from './endpoint.js';

/** The owner an endpoint's ipcache entries are written under (deletes must match it). */
export function endpointOwner(id: number): string {
  return `endpoint:${id}`;
}

const hostPrefix = (ip: string, family: 4 | 6) => `${ip}/${family === 4 ? 32 : 128}`;

/**
 * Gives endpoints their security identity and their ipcache entries (the
 * middle of Cilium's endpoint creation: labels → identity → ipcache). The
 * identity comes from the identity-relevant labels only, so informational
 * labels (pod-template-hash, …) never split pods into separate identities.
 */
export class EndpointIdentityBinder {
  constructor(
    private readonly identities: IdentityAllocator,
    private readonly ipcache: IPCache,
    private readonly filter: LabelFilter,
    /** Computes the endpoint's policy map state from its identity. */
    private readonly policy: PolicyEngine,
  ) {}

  /**
   * The identity-relevant labels; none at all gives `reserved:init`, Cilium's
   * identity for an endpoint whose labels are not known (yet).
   */
  identityLabels(labels: LabelSet): LabelSet {
    const relevant = this.filter.split(labels).identity;
    return relevant.isEmpty() ? LabelSet.from([reservedLabel(ReservedLabelKey.Init)]) : relevant;
  }

  /** Resolves the endpoint's identity and publishes its addresses; returns the updated endpoint. */
  async bind(ep: Endpoint, preferredId?: number): Promise<Endpoint> {
    const relevant = this.identityLabels(LabelSet.parse(ep.labels));
    const { identity } = await this.identities.allocate(relevant, preferredId !== undefined ? { preferredId } : {});
    try {
      for (const a of ep.addresses) {
        this.ipcache.upsert(hostPrefix(a.ip, a.family), { identity: identity.id, source: IpcacheSource.Local, owner: endpointOwner(ep.id) });
      }
      this.policy.upsertEndpoint({ id: ep.id, identity: identity.id });
    } catch (err) {
      await this.identities.release(identity);
      throw err;
    }
    return { ...ep, identity: identity.id, identityLabels: relevant.toStrings() };
  }

  /** Withdraws the addresses and drops the endpoint's reference on its identity. */
  async unbind(ep: Endpoint): Promise<void> {
    try {
      this.policy.removeEndpoint(ep.id);
    } catch (err) {
      // Never bound (an ADD that failed before its identity) — nothing to remove.
      if (!(isPolicyError(err) && err.code === PolicyErrorCode.UNKNOWN_ENDPOINT)) throw err;
    }
    for (const a of ep.addresses) {
      this.ipcache.delete(hostPrefix(a.ip, a.family), { source: IpcacheSource.Local, owner: endpointOwner(ep.id) });
    }
    if (ep.identity !== undefined) await this.identities.release(ep.identity);
  }

  /**
   * New labels: the new identity is taken before the old one is released, so
   * an endpoint is never without one, and the ipcache switches in one upsert.
   */
  async relabel(ep: Endpoint, labels: LabelSet): Promise<Endpoint> {
    const updated: Endpoint = { ...ep, labels: labels.toStrings(), labelsRevision: (ep.labelsRevision ?? 0) + 1 };
    const bound = await this.bind(updated);
    if (ep.identity !== undefined) await this.identities.release(ep.identity);
    return bound;
  }
}
