import { createHash } from 'node:crypto';
import { formatIp, formatPrefix, hostPrefix as netipHostPrefix, parseIp } from '../../netip/index.js';

/** Host-side veth name: `lxc` + the first hex digits of sha256(container ID), 15 bytes in all. */
export function hostInterfaceName(containerId: string, ifName: string): string {
  // A second interface of one container needs its own name; eth0 keeps the plain form.
  const seed = ifName === 'eth0' ? containerId : `${containerId}/${ifName}`;
  return `lxc${createHash('sha256').update(seed).digest('hex').slice(0, 12)}`;
}

/** Host-side interfaces tendril made for pods (and may delete as orphans). */
export const POD_HOST_IFNAME = /^lxc[0-9a-f]{12}$/;

/**
 * The host route of a pod address: the address alone, /32 or /128, in
 * canonical text, so it compares equal to what netlink reads back.
 */
export function hostPrefix(a: { ip: string }): string {
  return formatPrefix(netipHostPrefix(parseIp(a.ip)));
}

/** An address in canonical text, as netlink reads it back. */
export function canonicalIp(ip: string): string {
  return formatIp(parseIp(ip));
}
