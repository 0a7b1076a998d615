import { CodedError } from '../errors/codedError.js';

/** Node subsystem error codes with stable names. */
export const NodeErrorCode = {
  /** The node's configuration cannot work (an MTU above what the underlay carries). */
  CONFIG: 'NODE_CONFIG',
  /** A node record this node was asked to publish is not valid. */
  INVALID_RECORD: 'NODE_INVALID_RECORD',
  /** The registry was used before start() or after stop(). */
  NOT_RUNNING: 'NODE_REGISTRY_NOT_RUNNING',
} as const;

export type NodeErrorCode = (typeof NodeErrorCode)[keyof typeof NodeErrorCode];

export class NodeError extends CodedError<NodeErrorCode> {}

/** A start-up configuration error of the node (the agent refuses to start). */
export class NodeConfigError extends NodeError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(NodeErrorCode.CONFIG, message, options);
  }
}

/** This node's own record is not one other nodes could decode. */
export class NodeRecordError extends NodeError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(NodeErrorCode.INVALID_RECORD, message, options);
  }
}
