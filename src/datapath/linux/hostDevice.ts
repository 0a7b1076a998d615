import type { Netlink } from '../kernel/netlink/index.js';
import { NetlinkBatch } from '../kernel/netlink/index.js';
import { isKernelError } from '../kernel/errors.js';
import { kernel } from './kernel.js';
import { hostPrefix } from './links.js';
import { getSysctl, setSysctl } from './sysctl.js';

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
    // What a previous start left in force is not written again (an agent restart touches nothing that is right).
    const held = new Set((await nl.listAddresses({ link: dev.index })).map((a) => `${a.ip}/${a.prefixLength}`));
    const batch = new NetlinkBatch();
    if (!peer.up) batch.setLink(peer.index, { up: true });
    if (!dev.up) batch.setLink(dev.index, { up: true });
    for (const a of routerAddresses) if (!held.has(hostPrefix(a))) batch.replaceAddress({ index: dev.index, address: hostPrefix(a), nodad: a.family === 6 });
    if (batch.items.length > 0) await nl.apply(batch);
  });
  // Read first: a write takes the RTNL lock, and writing IPv6's all/forwarding runs through every device.
  const forwarding = async (name: string) => {
    if ((await getSysctl(name)) !== '1') await setSysctl(name, '1');
  };
  if (routerAddresses.some((a) => a.family === 4)) await forwarding('net/ipv4/ip_forward');
  if (routerAddresses.some((a) => a.family === 6)) await forwarding('net/ipv6/conf/all/forwarding');
}
