import { CodedError } from '../errors/codedError.js';

/**
 * One table of identity error codes with stable string names. The agent maps
 * INVALID_LABELS/INVALID_ID to HTTP 400, NOT_FOUND to 404 and the rest to 5xx.
 * kvstore failures are not wrapped: they arrive as KvstoreError with their own codes.
 */
export const IdentityErrorCode = {
  INVALID_LABELS: 'IDENTITY_INVALID_LABELS',
  INVALID_ID: 'IDENTITY_INVALID_ID',
  INVALID_NODE_NAME: 'IDENTITY_INVALID_NODE_NAME',
  NOT_FOUND: 'IDENTITY_NOT_FOUND',
  NOT_ALLOCATED: 'IDENTITY_NOT_ALLOCATED',
  EXHAUSTED: 'IDENTITY_EXHAUSTED',
  CONFLICT: 'IDENTITY_CONFLICT',
  CLOSED: 'IDENTITY_CLOSED',
  /** The operation belongs to another actor in this mode (GC with the Kubernetes store: the operator). */
  UNSUPPORTED: 'IDENTITY_UNSUPPORTED',
} as const;

export type IdentityErrorCode = (typeof IdentityErrorCode)[keyof typeof IdentityErrorCode];

export class IdentityError extends CodedError<IdentityErrorCode> {}

