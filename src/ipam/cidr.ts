import { NetipError, compareIp, parseIp as parseAddress, parsePrefix, type IpAddress, type IpPrefix } from '../netip/index.js';
import { IpamError, IpamErrorCode } from './errors.js';

/**
 * IPAM's boundary over src/netip: the address and CIDR text IPAM takes
 * (configured pools, requested and released addresses, stored block keys)
 * read by netip under IPAM's rules, a refusal raised as IPAM_INVALID_CIDR so
 * it reaches callers as an IpamError. Everything past parsing (printing,
 * containment, sizes, subnets) is netip's own API; only canonical text
 * leaves IPAM, because CIDRs and IPs are kvstore keys and must compare equal
 * as strings.
 */

function asIpamError(err: unknown): unknown {
  return err instanceof NetipError ? new IpamError(IpamErrorCode.INVALID_CIDR, err.message, {}, { cause: err }) : err;
}

/** The address; IpamError IPAM_INVALID_CIDR when the text is not one. */
export function parseIp(text: string): IpAddress {
  try {
    return parseAddress(text);
  } catch (err) {
    throw asIpamError(err);
  }
}

/**
 * Parses "addr/len" (the length may have leading zeros, as in a CNI
 * netconf); host bits must be zero unless `allowHostBits` (then they are
 * dropped). IpamError IPAM_INVALID_CIDR otherwise.
 */
export function parseCidr(text: string, allowHostBits = false): IpPrefix {
  try {
    return parsePrefix(text, { hostBits: allowHostBits ? 'mask' : 'reject', leadingZeros: true });
  } catch (err) {
    throw asIpamError(err);
  }
}

/** Canonical CIDR texts in address order (IPv4 first), each once: how pod CIDRs are reported. */
export function sortCidrs(cidrs: Iterable<string>): string[] {
  const parsed = [...new Set(cidrs)].map((c) => ({ c, p: parsePrefix(c) }));
  parsed.sort((a, b) => compareIp(a.p, b.p) || a.p.length - b.p.length);
  return parsed.map((x) => x.c);
}
