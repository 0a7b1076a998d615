import type { IdentityAllocator } from '../identity/index.js';
import { type IPCache, IpcacheSource } from '../ipcache/index.js';
import { type LabelFilter, LabelSet, ReservedLabelKey, reservedLabel } from '../labels/index.js';
import type { Endpoint } from './endpoint.js';

/** The owner an endpoint's ipcache entries are written under (deletes must match it). */
export function endpointOwner(id: number): string {
  return `endpoint:${id}`;
}

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
  ) {}

  /**
   * The identity-relevant labels; none at all gives `reserved:init`, Cilium's
   * identity for an endpoint whose labels are not known (yet).
   */
  identityLabels(labels: LabelSet): LabelSet {
    const relevant = this.filter.split(labels).identity;
    return relevant.isEmpty() ? LabelSet.from([reservedLabel(ReservedLabelKey.Init)]) : relevant;
  }

  /**
   * Resolves the endpoint's identity (taking a new reference) and publishes
   * its addresses under it; returns the endpoint with identity and identity
   * labels set. On failure nothing is held.
   */
  async bind(ep: Endpoint, preferredId?: number): Promise<Endpoint> {
    const relevant = this.identityLabels(LabelSet.parse(ep.labels));
    const { identity } = await this.identities.allocate(relevant, preferredId !== undefined ? { preferredId } : {});
    const bound: Endpoint = { ...ep, identity: identity.id, identityLabels: relevant.toStrings() };
    try {
      this.publish(bound);
    } catch (err) {
      await this.identities.release(identity);
      throw err;
    }
    return bound;
  }

  /**
   * Writes the endpoint's addresses into the ipcache under its identity
   * (replacing its earlier entries); the ipcache reads a bare address as its
   * /32 or /128.
   */
  publish(ep: Endpoint): void {
    if (ep.identity === undefined) return;
    for (const a of ep.addresses) {
      this.ipcache.upsert(a.ip, { identity: ep.identity, source: IpcacheSource.Local, owner: endpointOwner(ep.id) });
    }
  }

  /** Withdraws the endpoint's addresses from the ipcache (entries another owner took over stay). */
  withdraw(ep: Endpoint): void {
    for (const a of ep.addresses) {
      this.ipcache.delete(a.ip, { source: IpcacheSource.Local, owner: endpointOwner(ep.id) });
    }
  }

  /** Drops one reference on an identity. */
  async release(identity: number): Promise<void> {
    await this.identities.release(identity);
  }
}
