import { ipFamilyOf, tryParseInterfaceAddress } from '../netip/index.js';

/**
 * The CNI spec's address rules on top of src/netip: what Go's net.ParseIP and
 * net.ParseCIDR (and so every CNI runtime and plugin) accept.
 */

/** 4 or 6 for a bare IP address, 0 for anything else (zone IDs such as "fe80::1%eth0" included). */
export function ipFamily(ip: string): 0 | 4 | 6 {
  return ipFamilyOf(ip);
}

/**
 * Family of "addr/len" in CIDR notation, or 0 when it is not a valid CIDR.
 * An interface address such as "10.0.0.5/24" is one (host bits are allowed),
 * and so is a length with leading zeros ("/08"), as net.ParseCIDR reads it.
 */
export function cidrFamily(cidr: string): 0 | 4 | 6 {
  return tryParseInterfaceAddress(cidr, { leadingZeros: true })?.address.family ?? 0;
}
