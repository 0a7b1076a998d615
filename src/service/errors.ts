import { CodedError } from '../errors/codedError.js';

/** Service error codes with stable names; the agent maps each to an HTTP status (src/api/errors.ts). */
export const ServiceErrorCode = {
  NOT_FOUND: 'SERVICE_NOT_FOUND',
  /** The body is not a service tendril can serve (bad address, port, type, state, ID). */
  INVALID: 'SERVICE_INVALID',
  /** The frontend already belongs to another service ID. */
  CONFLICT: 'SERVICE_CONFLICT',
  /** The datapath does not load-balance (the routing datapath). */
  UNSUPPORTED: 'SERVICE_UNSUPPORTED',
  /** The maps could not take the service (full, or a kernel error); nothing changed. */
  DATAPATH_FAILED: 'SERVICE_DATAPATH_FAILED',
} as const;

export type ServiceErrorCode = (typeof ServiceErrorCode)[keyof typeof ServiceErrorCode];

export class ServiceError extends CodedError<ServiceErrorCode> {}

export function isServiceError(err: unknown, code?: ServiceErrorCode): err is ServiceError {
  return err instanceof ServiceError && (code === undefined || err.code === code);
}
