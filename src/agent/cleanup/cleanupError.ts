import { CodedError } from '../../errors/codedError.js';

/**
 * Why `tendril-agent cleanup` did nothing: an agent still runs on the node,
 * nobody confirmed, or a directory it was given is not one it may remove.
 */
export type CleanupErrorCode = 'AGENT_RUNNING' | 'NOT_CONFIRMED' | 'UNSAFE_PATH';

export class CleanupError extends CodedError<CleanupErrorCode> {}
