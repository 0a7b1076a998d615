import { CodedError } from '../errors/codedError.js';

/**
 * Codes of the codec's own errors. Subsystems that parse user input usually
 * use the `try…` functions and raise their own coded error (IPAM_INVALID_CIDR,
 * IPCACHE_INVALID_PREFIX, …); the throwing functions carry these.
 */
export const NetipErrorCode = {
  /** Not an IPv4 or IPv6 address (zone IDs such as "%eth0" included). */
  INVALID_ADDRESS: 'NETIP_INVALID_ADDRESS',
  /** Not `address/length`, or the length does not fit the family. */
  INVALID_PREFIX: 'NETIP_INVALID_PREFIX',
  /** A prefix with bits set beyond its length, where the caller refuses that. */
  HOST_BITS: 'NETIP_HOST_BITS',
  /** A number or byte string that is no address of the family. */
  OUT_OF_RANGE: 'NETIP_OUT_OF_RANGE',
} as const;

export type NetipErrorCode = (typeof NetipErrorCode)[keyof typeof NetipErrorCode];

export class NetipError extends CodedError<NetipErrorCode> {
  constructor(
    code: NetipErrorCode,
    message: string,
    /** The text or value that was refused, as given. */
    readonly input: string,
  ) {
    super(code, message);
  }
}
