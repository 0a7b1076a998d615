import { CodedError } from './codedError.js';

/**
 * Why an agent refused to start before touching anything: the node (its
 * network namespace) already has an agent, the socket path is served by
 * another one, or the socket path names something that is not a socket.
 */
export type OwnershipErrorCode = 'NODE_OWNED' | 'SOCKET_SERVED' | 'SOCKET_PATH_TAKEN';

export class OwnershipError extends CodedError<OwnershipErrorCode> {}
