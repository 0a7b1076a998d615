import { tryParseInterfaceAddress } from '../netip/index.js';

/**
 * The CNI spec's CIDR rule on top of src/netip: what Go's net.ParseCIDR (and
 * so every CNI runtime and plugin) accepts in a result's or netconf's
 * "addr/len". Bare addresses follow net.ParseIP, which is netip's
 * `ipFamilyOf` as it is.
 */

/**
 * Family of "addr/len" in CIDR notation, or 0 when it is not a valid CIDR.
 * An interface address such as "10.0.0.5/24" is one (host bits are allowed),
 * and so is a length with leading zeros ("/08"), as net.ParseCIDR reads it.
 */
export function cidrFamily(cidr: string): 0 | 4 | 6 {
  return tryParseInterfaceAddress(cidr, { leadingZeros: true })?.address.family ?? 0;
}

/**
 * 4 or 6 for a bare IP address, 0 for anything else.
 * @deprecated netip's `ipFamilyOf`; kept only while src/api/server/server.ts imports it from here.
 */
export { ipFamilyOf as ipFamily } from '../netip/index.js';
