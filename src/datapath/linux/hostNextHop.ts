/**
 * The one next hop the node's routes into the eBPF datapath go through:
 * routes to ClusterIPs and, in tunnel mode, to other nodes' pod CIDRs point
 * at it, onlink on tendril_host. Its neighbour entry is permanent (with
 * tendril_net's MAC): a plain link route would make the kernel ARP for every
 * destination on tendril_host, nobody answers, and the packet never reaches
 * the program on tendril_host's egress (tc egress runs after neighbour
 * resolution).
 */
import type { Netlink } from '../kernel/netlink/index.js';
import { HOST_DEVICE, HOST_PEER_DEVICE } from './hostDevice.js';
import { kernel } from './kernel.js';

/** Link-local, never a real host. */
export const HOST_NEXTHOP = '169.254.42.2';

/**
 * Puts the next hop's permanent neighbour entry on `dev` (the MAC of its
 * peer `peer`); answers `dev`'s ifindex. Idempotent; DatapathError
 * `not-found` when either device is missing.
 */
export async function ensureHostNextHop(nl: Netlink, dev: string = HOST_DEVICE, peer: string = HOST_PEER_DEVICE): Promise<number> {
  return kernel(async () => {
    const peerLink = await nl.getLink(peer);
    const index = (await nl.getLink(dev)).index;
    await nl.replaceNeighbour({ link: index, ip: HOST_NEXTHOP, mac: peerLink.mac, state: 'permanent' });
    return index;
  });
}
