import { formatPrefix, type IpPrefix } from '../netip/index.js';
import type { IPCache } from './ipcache.js';
import { IpcacheSource } from './source.js';

/** Owner of the ipcache entries of policy CIDRs. */
export const POLICY_CIDR_OWNER = 'policy-cidr';

/** The identity allocator's CIDR part (the policy engine's CidrIdentitySource). */
export interface CidrIdentityAllocator<T extends { readonly id: number }> {
  acquireCidrIdentities(prefixes: readonly IpPrefix[]): T[];
  releaseCidrIdentities(prefixes: readonly IpPrefix[]): number[];
}

/**
 * The policy engine's CidrIdentitySource, in front of the identity allocator:
 * each CIDR a policy names gets its node-local identity and, so the datapath
 * can classify packets from and to that range, an ipcache entry (source
 * `generated`, weaker than pods and the kvstore) that goes with the
 * identity's last reference. The engine stays unaware of the ipcache.
 */
export class IpcacheCidrIdentities<T extends { readonly id: number }> implements CidrIdentityAllocator<T> {
  /** Prefix text → the identity its ipcache entry carries. */
  readonly #entries = new Map<string, number>();

  constructor(
    private readonly allocator: CidrIdentityAllocator<T>,
    private readonly ipcache: IPCache,
  ) {}

  acquireCidrIdentities(prefixes: readonly IpPrefix[]): T[] {
    const identities = this.allocator.acquireCidrIdentities(prefixes);
    prefixes.forEach((p, i) => {
      const identity = identities[i]!;
      const text = formatPrefix(p);
      if (this.#entries.get(text) === identity.id) return;
      this.ipcache.upsert(text, { identity: identity.id, source: IpcacheSource.Generated, owner: POLICY_CIDR_OWNER });
      this.#entries.set(text, identity.id);
    });
    return identities;
  }

  releaseCidrIdentities(prefixes: readonly IpPrefix[]): number[] {
    const gone = this.allocator.releaseCidrIdentities(prefixes);
    const ended = new Set(gone);
    for (const p of prefixes) {
      const text = formatPrefix(p);
      const id = this.#entries.get(text);
      if (id === undefined || !ended.has(id)) continue;
      this.ipcache.delete(text, { source: IpcacheSource.Generated, owner: POLICY_CIDR_OWNER });
      this.#entries.delete(text);
    }
    return gone;
  }
}
