import { createHash } from 'node:crypto';

/** Host-side veth name: `lxc` + the first hex digits of sha256(container ID), 15 bytes in all. */
export function hostInterfaceName(containerId: string, ifName: string): string {
  // A second interface of one container needs its own name; eth0 keeps the plain form.
  const seed = ifName === 'eth0' ? containerId : `${containerId}/${ifName}`;
  return `lxc${createHash('sha256').update(seed).digest('hex').slice(0, 12)}`;
}

/** Host-side interfaces tendril made for pods (and may delete as orphans). */
export const POD_HOST_IFNAME = /^lxc[0-9a-f]{12}$/;

/** The host route of a pod address: the address alone, /32 or /128. */
export function hostPrefix(a: { family: 4 | 6; ip: string }): string {
  return `${a.ip}/${a.family === 4 ? 32 : 128}`;
}
