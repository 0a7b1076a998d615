import type { Netlink } from '../kernel/netlink/index.js';
import { NetlinkBatch } from '../kernel/netlink/index.js';
import { isKernelError } from '../kernel/errors.js';
import { kernel } from './kernel.js';
import { hostPrefix } from './links.js';
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
export async function ensureHostDevice(nl: Netlink, routerAddresses: ReadonlyArray<{ family: 4 | 6; ip: string }>): Promise<void> {
  await kernel(async () => {
    if (!(await nl.findLink(HOST_DEVICE))) {
      try {
        await nl.createVeth({ name: HOST_DEVICE, peer: { name: HOST_PEER_DEVICE } });
      } catch (err) {
        // Another start-up made it in between: what matters is that it exists.
        if (!isKernelError(err, 'EEXIST')) throw err;
      }
    }
    const [dev, peer] = await Promise.all([nl.getLink(HOST_DEVICE), nl.getLink(HOST_PEER_DEVICE)]);
    const batch = new NetlinkBatch().setLink(peer.index, { up: true }).setLink(dev.index, { up: true });
    for (const a of routerAddresses) batch.replaceAddress({ index: dev.index, address: hostPrefix(a), nodad: a.family === 6 });
    await nl.apply(batch);
  });
  if (routerAddresses.some((a) => a.family === 4)) await setSysctl('net/ipv4/ip_forward', '1');
  if (routerAddresses.some((a) => a.family === 6)) await setSysctl('net/ipv6/conf/all/forwarding', '1');
}
