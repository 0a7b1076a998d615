import type { AddressLease, EndpointAddress } from '../endpoint/index.js';
import type { Allocation, Allocator } from './types.js';

/** IPAM owner of an attachment: the container ID, plus the interface when it is not eth0. */
export function ipamOwner(containerId: string, ifName: string): string {
  return ifName === 'eth0' ? containerId : `${containerId}:${ifName}`;
}

/** The attachment an IPAM owner names (ipamOwner read back; container IDs hold no ':'). */
export function attachmentOfOwner(owner: string): { containerId: string; ifName: string } {
  const at = owner.indexOf(':');
  return at < 0 ? { containerId: owner, ifName: 'eth0' } : { containerId: owner.slice(0, at), ifName: owner.slice(at + 1) };
}

/**
 * The addresses of one IPAM owner across allocators, as an endpoint's lease on
 * them. With `expected` (the endpoint's addresses), confirm answers false
 * unless IPAM still holds each of them for the owner under the same sequence
 * number: a provisional allocation that expired may have been released and
 * handed out again, even to a new allocation of the same owner.
 */
export function ownerLease(allocators: readonly Allocator[], owner: string, expected?: readonly Pick<EndpointAddress, 'ip' | 'seq'>[]): AddressLease {
  return {
    confirm: async () => {
      let held = false;
      for (const a of allocators) if (await a.confirm(owner)) held = true;
      if (!held || expected === undefined) return held;
      const now: Allocation[] = [];
      for (const a of allocators) now.push(...(await a.get(owner)));
      return expected.every((e) => now.some((h) => h.ip === e.ip && h.seq === e.seq));
    },
    release: async () => {
      for (const a of allocators) await a.releaseOwner(owner);
    },
  };
}
