/**
 * Public API of src/netip, the one IP address and prefix codec: text,
 * integers, bytes and LPM keys. Named after Go's net/netip, whose Addr and
 * Prefix it mirrors. It sits below every subsystem (src/cni and up import
 * it; it imports nothing of the project but the error base).
 */
export { NetipError, NetipErrorCode } from './errors.js';
export {
  type IpFamily,
  type IpAddress,
  familyBits,
  byteLength,
  tryParseIp,
  parseIp,
  ipFamilyOf,
  formatIp,
  ipFromBigInt,
  ipToBytes,
  ipFromBytes,
  compareIp,
  nextIp,
  prevIp,
  notUnicast,
} from './ip.js';
export {
  type IpPrefix,
  type InterfaceAddress,
  type PrefixParseOptions,
  maskBits,
  tryParsePrefix,
  parsePrefix,
  formatPrefix,
  tryParseInterfaceAddress,
  parseInterfaceAddress,
  formatInterfaceAddress,
  prefixOf,
  hostPrefix,
  prefixContainsIp,
  prefixContains,
  prefixOverlaps,
  prefixSize,
  prefixFirst,
  prefixLast,
  subnetAt,
  subnetCount,
  lpmKey,
  lpmKeyLength,
  prefixFromLpmKey,
} from './prefix.js';
