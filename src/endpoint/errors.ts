import { CodedError } from '../errors/codedError.js';

/**
 * One table of endpoint error codes with stable string names; the agent maps
 * each to an HTTP status and a CNI code (src/api/errors.ts).
 */
export const EndpointErrorCode = {
  NOT_FOUND: 'ENDPOINT_NOT_FOUND',
  /** The attachment, ID or an address already belongs to another endpoint. */
  CONFLICT: 'ENDPOINT_CONFLICT',
  INVALID_ARGUMENT: 'ENDPOINT_INVALID_ARGUMENT',
  /** A pod namespace path that names the node's own namespace, or no namespace at all. */
  NETNS_REFUSED: 'ENDPOINT_NETNS_REFUSED',
  /** The endpoint is being deleted: no new regeneration or label change. */
  DISCONNECTING: 'ENDPOINT_DISCONNECTING',
  /** A regeneration could not put the endpoint's state in force (its policy does not fit its map). */
  REGENERATION_FAILED: 'ENDPOINT_REGENERATION_FAILED',
  /** IPAM no longer holds the endpoint's addresses for it (a provisional allocation expired before it was confirmed). */
  ADDRESSES_LOST: 'ENDPOINT_ADDRESSES_LOST',
} as const;

export type EndpointErrorCode = (typeof EndpointErrorCode)[keyof typeof EndpointErrorCode];

export class EndpointError extends CodedError<EndpointErrorCode> {}

export function isEndpointError(err: unknown, code?: EndpointErrorCode): err is EndpointError {
  return err instanceof EndpointError && (code === undefined || err.code === code);
}
