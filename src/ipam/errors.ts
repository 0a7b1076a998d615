import { CodedError, type CodedErrorJson } from '../errors/codedError.js';

/**
 * One table of IPAM error codes with stable string names (undici/fastify
 * style). The agent maps each code to an HTTP status and a CNI error code;
 * callers branch on `code`, never on message text.
 */
export const IpamErrorCode = {
  /** Every address of the named pool is in use. */
  POOL_EXHAUSTED: 'IPAM_POOL_EXHAUSTED',
  /** Strict affinity (or maxBlocksPerHost) leaves this host no block to allocate from. */
  NO_FREE_BLOCK: 'IPAM_NO_FREE_BLOCK',
  INVALID_CIDR: 'IPAM_INVALID_CIDR',
  INVALID_CONFIG: 'IPAM_INVALID_CONFIG',
  INVALID_ARGUMENT: 'IPAM_INVALID_ARGUMENT',
  /** A CAS loop lost every one of its bounded retries, or state another host owns is in the way. */
  CONFLICT: 'IPAM_CONFLICT',
  UNKNOWN_POOL: 'IPAM_UNKNOWN_POOL',
  /** The allocator has no pool/CIDR of the requested family. */
  FAMILY_UNAVAILABLE: 'IPAM_FAMILY_UNAVAILABLE',
  /** The delegated IPAM plugin failed; the CNI error is the cause. */
  DELEGATE_FAILED: 'IPAM_DELEGATE_FAILED',
  NOT_STARTED: 'IPAM_NOT_STARTED',
  /** A specific address was asked for and it is allocated or reserved. */
  IP_IN_USE: 'IPAM_IP_IN_USE',
} as const;

export type IpamErrorCode = (typeof IpamErrorCode)[keyof typeof IpamErrorCode];

export class IpamError extends CodedError<IpamErrorCode> {
  constructor(
    code: IpamErrorCode,
    message: string,
    readonly details: { pool?: string; [k: string]: unknown } = {},
    options?: { cause?: unknown },
  ) {
    super(code, message, options);
  }

  protected override toJSONAt(depth: number): CodedErrorJson<IpamErrorCode> & { details?: IpamError['details'] } {
    return Object.keys(this.details).length === 0 ? super.toJSONAt(depth) : { ...super.toJSONAt(depth), details: this.details };
  }
}

export function isIpamError(err: unknown): err is IpamError {
  return err instanceof IpamError;
}

export function poolExhausted(pool: string, detail = ''): IpamError {
  return new IpamError(IpamErrorCode.POOL_EXHAUSTED, `IP pool ${pool} is exhausted${detail ? `: ${detail}` : ''}`, { pool });
}
