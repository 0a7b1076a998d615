import {
  familyBits,
  formatIp,
  formatPrefix,
  maskBits as netipMaskBits,
  prefixContains as netipPrefixContains,
  tryParseIp,
  tryParsePrefix,
  type IpAddress,
  type IpFamily,
  type IpPrefix,
} from '../netip/index.js';

/**
 * The IP prefix API src/labels exported before src/netip existed, as thin
 * wrappers over it (no logic of their own). Kept while callers move to
 * src/netip; new code imports src/netip directly.
 */
export type { IpFamily, IpPrefix };

/** @deprecated use familyBits from src/netip */
export function familyWidth(family: IpFamily): number {
  return familyBits(family);
}

/** @deprecated use tryParseIp from src/netip */
export function parseIpAddress(ip: string): IpAddress | undefined {
  return tryParseIp(ip);
}

/**
 * `a.b.c.d/n`, `x::y/n` or a bare address (a host prefix); host bits are
 * cleared, or with `strict` refused. Undefined for anything else.
 * @deprecated use tryParsePrefix from src/netip with the options the input needs
 */
export function parseIpPrefix(text: string, options: { strict?: boolean } = {}): IpPrefix | undefined {
  return tryParsePrefix(text, { bareAddress: true, hostBits: options.strict === true ? 'reject' : 'mask' });
}

/** @deprecated use maskBits from src/netip (which takes the family) */
export function maskBits(bits: bigint, length: number, width: number): bigint {
  return netipMaskBits(width === 32 ? 4 : 6, bits, length);
}

/** @deprecated use formatIp from src/netip */
export function formatIpAddress(family: IpFamily, bits: bigint): string {
  return formatIp({ family, bits });
}

/** @deprecated use formatPrefix from src/netip */
export function formatIpPrefix(p: IpPrefix): string {
  return formatPrefix(p);
}

/** @deprecated use prefixContains from src/netip */
export function prefixContains(outer: IpPrefix, inner: IpPrefix): boolean {
  return netipPrefixContains(outer, inner);
}
