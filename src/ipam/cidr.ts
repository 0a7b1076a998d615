import {
  NetipError,
  formatIp as formatAddress,
  parseIp as parseAddress,
  parsePrefix,
  prefixContainsIp,
  type IpFamily,
  type IpPrefix,
} from '../netip/index.js';
import { IpamError, IpamErrorCode } from './errors.js';

/**
 * IPAM's vocabulary over src/netip: addresses as integers so allocation is
 * arithmetic, CIDRs as netip prefixes, and the codec's parse errors raised as
 * IPAM_INVALID_CIDR. Only canonical text leaves IPAM, because CIDRs and IPs
 * are kvstore keys and must compare equal as strings.
 */
export type Cidr = IpPrefix;

export {
  familyBits,
  formatPrefix as formatCidr,
  prefixSize as cidrSize,
  prefixOverlaps as cidrOverlaps,
  subnetAt,
  subnetCount,
} from '../netip/index.js';

function asIpamError(err: unknown): unknown {
  return err instanceof NetipError ? new IpamError(IpamErrorCode.INVALID_CIDR, err.message, {}, { cause: err }) : err;
}

export function parseIp(text: string): { family: IpFamily; value: bigint } {
  try {
    const a = parseAddress(text);
    return { family: a.family, value: a.bits };
  } catch (err) {
    throw asIpamError(err);
  }
}

export function formatIp(family: IpFamily, value: bigint): string {
  return formatAddress({ family, bits: value });
}

/**
 * Parses "addr/len" (the length may have leading zeros, as in a CNI
 * netconf); host bits must be zero unless `allowHostBits` (then they are dropped).
 */
export function parseCidr(text: string, allowHostBits = false): Cidr {
  try {
    return parsePrefix(text, { hostBits: allowHostBits ? 'mask' : 'reject', leadingZeros: true });
  } catch (err) {
    throw asIpamError(err);
  }
}

export function cidrContains(c: Cidr, family: IpFamily, value: bigint): boolean {
  return prefixContainsIp(c, { family, bits: value });
}
