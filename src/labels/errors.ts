import { CodedError, type CodedErrorJson } from '../errors/codedError.js';

/**
 * One table of label error codes with stable string names. Callers (the agent
 * API, the policy loader, the CLI) branch on `code` and map it to an HTTP 400
 * or a CNI "invalid network config"; the message is for humans only.
 */
export const LabelErrorCode = {
  INVALID_SOURCE: 'LABEL_INVALID_SOURCE',
  /** A source a pod's labels may not have (reserved, cidr, …): only the agent gives those. */
  SOURCE_NOT_ALLOWED: 'LABEL_SOURCE_NOT_ALLOWED',
  /** A key only the agent derives from Kubernetes (the pod's namespace, its namespace's labels, …). */
  KEY_DERIVED: 'LABEL_KEY_DERIVED',
  INVALID_KEY: 'LABEL_INVALID_KEY',
  KEY_TOO_LONG: 'LABEL_KEY_TOO_LONG',
  INVALID_VALUE: 'LABEL_INVALID_VALUE',
  VALUE_TOO_LONG: 'LABEL_VALUE_TOO_LONG',
  DUPLICATE_KEY: 'LABEL_DUPLICATE_KEY',
  INVALID_PATTERN: 'LABEL_INVALID_PATTERN',
  INVALID_SELECTOR: 'LABEL_INVALID_SELECTOR',
} as const;

export type LabelErrorCode = (typeof LabelErrorCode)[keyof typeof LabelErrorCode];

export class LabelError extends CodedError<LabelErrorCode> {
  constructor(
    code: LabelErrorCode,
    message: string,
    /** The offending input as given (label text, key, pattern or selector key). */
    readonly input: string = '',
  ) {
    super(code, message);
  }

  protected override toJSONAt(depth: number): CodedErrorJson<LabelErrorCode> & { input?: string } {
    return this.input === '' ? super.toJSONAt(depth) : { ...super.toJSONAt(depth), input: this.input };
  }
}
