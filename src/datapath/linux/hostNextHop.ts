/**
 * The next hop the node's routes into the eBPF datapath go through, one per
 * family: routes to service frontends and, in tunnel mode, to other nodes'
 * pod CIDRs point at it, on tendril_host. Its neighbour entry is permanent
 * (with tendril_net's MAC): a plain link route would make the kernel ARP
 * (or solicit a neighbour, in IPv6) for every destination on tendril_host,
 * nobody answers, and the packet never reaches the program on
 * tendril_host's egress (tc egress runs after neighbour resolution).
 */
import type { Netlink } from '../kernel/netlink/index.js';
import type { IpFamily } from '../../netip/index.js';
import { HOST_DEVICE, HOST_PEER_DEVICE } from './hostDevice.js';
import { kernel } from './kernel.js';

/** Link-local, never a real host. */
export const HOST_NEXTHOP = '169.254.42.2';
/**
 * The IPv6 one: link-local too (an IPv6 route cannot go via an IPv4
 * gateway without nexthop objects), 169.254.42.2 in its interface ID so
 * it reads as the IPv4 one's twin; no EUI-64 address a MAC gives
 * tendril_host can be it (those have ff:fe in the middle).
 */
export const HOST_NEXTHOP6 = 'fe80::a9fe:2a02';

/** The next hop of `family`. */
export function hostNextHop(family: IpFamily): string {
  return family === 4 ? HOST_NEXTHOP : HOST_NEXTHOP6;
}

/**
 * Puts the next hop's permanent neighbour entry of `family` on `dev` (the
 * MAC of its peer `peer`); answers `dev`'s ifindex. Idempotent;
 * DatapathError `not-found` when either device is missing.
 */
export async function ensureHostNextHop(nl: Netlink, dev: string = HOST_DEVICE, peer: string = HOST_PEER_DEVICE, family: IpFamily = 4): Promise<number> {
  return kernel(async () => {
    const peerLink = await nl.getLink(peer);
    const index = (await nl.getLink(dev)).index;
    await nl.replaceNeighbour({ link: index, ip: hostNextHop(family), mac: peerLink.mac, state: 'permanent' });
    return index;
  });
}
