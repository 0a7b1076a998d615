import { ipBatch } from './command.js';
import { getLink } from './links.js';
import { setSysctl } from './sysctl.js';

/** The host device holding the node's router addresses (Cilium's cilium_host). */
export const HOST_DEVICE = 'tendril_host';

/**
 * Creates (or keeps) the host device with the router addresses and turns on
 * forwarding. A dummy device suffices: the addresses only need to be local so
 * the node answers ARP/ND for the gateway and routes pod traffic.
 */
export async function ensureHostDevice(routerAddresses: ReadonlyArray<{ family: 4 | 6; ip: string }>): Promise<void> {
  const cmds: string[][] = [];
  if (!(await getLink(HOST_DEVICE))) cmds.push(['link', 'add', HOST_DEVICE, 'type', 'dummy']);
  cmds.push(['link', 'set', HOST_DEVICE, 'up']);
  for (const a of routerAddresses) {
    cmds.push(['addr', 'replace', `${a.ip}/${a.family === 4 ? 32 : 128}`, 'dev', HOST_DEVICE, ...(a.family === 6 ? ['nodad'] : [])]);
  }
  await ipBatch(cmds);
  if (routerAddresses.some((a) => a.family === 4)) await setSysctl('net/ipv4/ip_forward', '1');
  if (routerAddresses.some((a) => a.family === 6)) await setSysctl('net/ipv6/conf/all/forwarding', '1');
}
