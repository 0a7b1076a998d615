import { ipBatch } from './command.js';
import { getLink } from './links.js';
import { setSysctl } from './sysctl.js';

/** The host device holding the node's router addresses (Cilium's cilium_host)... */
export const HOST_DEVICE = 'tendril_host';
/** ...and its veth peer (Cilium's cilium_net), where the datapath will attach. */
export const HOST_PEER_DEVICE = 'tendril_net';

/**
 * Creates (or keeps) the host device pair with the router addresses and turns
 * on forwarding. A veth pair rather than a dummy device, as Cilium does: it
 * gives the eBPF datapath an attach point, and works on kernels built without
 * the dummy driver.
 */
export async function ensureHostDevice(routerAddresses: ReadonlyArray<{ family: 4 | 6; ip: string }>): Promise<void> {
  const cmds: string[][] = [];
  if (!(await getLink(HOST_DEVICE))) cmds.push(['link', 'add', HOST_DEVICE, 'type', 'veth', 'peer', 'name', HOST_PEER_DEVICE]);
  cmds.push(['link', 'set', HOST_PEER_DEVICE, 'up'], ['link', 'set', HOST_DEVICE, 'up']);
  for (const a of routerAddresses) {
    cmds.push(['addr', 'replace', `${a.ip}/${a.family === 4 ? 32 : 128}`, 'dev', HOST_DEVICE, ...(a.family === 6 ? ['nodad'] : [])]);
  }
  await ipBatch(cmds);
  if (routerAddresses.some((a) => a.family === 4)) await setSysctl('net/ipv4/ip_forward', '1');
  if (routerAddresses.some((a) => a.family === 6)) await setSysctl('net/ipv6/conf/all/forwarding', '1');
}
