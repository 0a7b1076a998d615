/**
 * The frontends the datapath holds for a service. A service is one frontend
 * under its own ID, except a NodePort on `::` (every node IPv6 address): it is
 * one frontend per IPv6 address of the node, each under an ID of its own, as
 * Cilium gives each node address of a NodePort a frontend. An IPv6 reply
 * takes its source from the reverse NAT entry of the frontend the client
 * reached (a conntrack entry's `nat_addr` holds 4 bytes), so a wildcard
 * frontend, whose entry would say `::`, cannot answer; 0.0.0.0 stays one
 * wildcard frontend (IPv4's conntrack entry remembers the address).
 */
import type { LbServiceEntry } from '../datapath/types.js';
import { MAX_SERVICE_ID } from '../datapath/limits.js';
import { compareIp, formatIp, type IpAddress, notUnicast, tryParseIp } from '../netip/index.js';
import { ServiceError, ServiceErrorCode } from './errors.js';
import { frontendKey, type NormalizedService } from './validate.js';

/** One frontend as the datapath holds it: its address and its ID (the reverse NAT index). */
export interface DatapathFrontend {
  ip: string;
  id: number;
}

/**
 * The highest ID an extra frontend of a `::` NodePort takes; they are taken
 * from there down. The upper half is Kubernetes' (src/k8s serviceSync.ts),
 * and users number their services from 1 up, so the two rarely meet; when
 * they do, the user's write of a taken ID is refused (CONFLICT).
 */
export const EXTRA_FRONTEND_ID_MAX = Math.floor(MAX_SERVICE_ID / 2);

/** Whether the service is a NodePort on every node IPv6 address. */
export function onEveryIpv6NodeAddress(spec: NormalizedService): boolean {
  return spec.flags.type === 'NodePort' && spec.frontend.ip === '::';
}

/**
 * The node addresses a `::` NodePort is served on: the node's IPv6
 * addresses a named IPv6 NodePort may take (the validator's set), in
 * canonical text, sorted; addresses no frontend may have (link-local,
 * loopback) are left out.
 */
export function ipv6NodePortAddresses(nodeAddresses: Iterable<string>): string[] {
  const out = new Map<string, IpAddress>();
  for (const text of nodeAddresses) {
    const ip = tryParseIp(text);
    if (ip?.family === 6 && notUnicast(ip) === undefined) out.set(formatIp(ip), ip);
  }
  return [...out].sort((a, b) => compareIp(a[1], b[1])).map(([text]) => text);
}

/**
 * The service's datapath frontends. For a `::` NodePort: one per address of
 * `addresses`; an address keeps the ID it had (`kept`: its open connections
 * name it), the service's own ID goes to the first address without one
 * (when no kept address has it), `allocate` gives the others one (given
 * the IDs already chosen). Refused (CONFLICT) when no ID is free.
 */
export function datapathFrontends(
  spec: NormalizedService,
  addresses: readonly string[],
  kept: ReadonlyMap<string, number>,
  allocate: (chosen: ReadonlySet<number>) => number | undefined,
): DatapathFrontend[] {
  if (!onEveryIpv6NodeAddress(spec)) return [{ ip: spec.frontend.ip, id: spec.id }];
  const ids = addresses.map((ip) => kept.get(ip));
  const chosen = new Set(ids.filter((id): id is number => id !== undefined));
  if (!chosen.has(spec.id)) {
    const i = ids.indexOf(undefined);
    if (i >= 0) {
      ids[i] = spec.id;
      chosen.add(spec.id);
    }
  }
  return addresses.map((ip, i) => {
    let id = ids[i];
    if (id === undefined) {
      id = allocate(chosen);
      if (id === undefined) throw new ServiceError(ServiceErrorCode.CONFLICT, `frontend-address.ip: no free service ID for the NodePort's frontend on ${ip} (:: is one frontend per node IPv6 address, each under an ID of its own)`);
      chosen.add(id);
    }
    return { ip, id };
  });
}

/** The frontend keys the service holds: its own, and for a `::` NodePort each node address's. */
export function frontendKeysOf(spec: NormalizedService, frontends: readonly DatapathFrontend[]): string[] {
  const own = frontendKey(spec.frontend);
  if (!onEveryIpv6NodeAddress(spec)) return [own];
  return [own, ...frontends.map((f) => frontendKey({ ...spec.frontend, ip: f.ip }))];
}

/** The rendered entry of one of the service's datapath frontends. */
export function entryOf(entry: LbServiceEntry, f: DatapathFrontend): LbServiceEntry {
  return { ...entry, id: f.id, address: f.ip };
}

/** Whether two lists of datapath frontends are the same. */
export function sameFrontends(a: readonly DatapathFrontend[], b: readonly DatapathFrontend[]): boolean {
  return a.length === b.length && a.every((f, i) => f.ip === b[i]!.ip && f.id === b[i]!.id);
}
