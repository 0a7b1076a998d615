import { CodedError, type CodedErrorJson } from '../errors/codedError.js';

/**
 * One table of policy error codes with stable string names. The agent maps
 * them to HTTP statuses (INVALID/PARSE → 400, NOT_FOUND → 404, MAP_OVERFLOW is
 * reported on the endpoint); callers branch on `code`, never on message text.
 */
export const PolicyErrorCode = {
  /** A document could not be read as YAML/JSON at all. */
  PARSE: 'POLICY_PARSE',
  /** A document was read but a field is invalid; `issues` point at the fields. */
  INVALID: 'POLICY_INVALID',
  NOT_FOUND: 'POLICY_NOT_FOUND',
  UNKNOWN_ENDPOINT: 'POLICY_UNKNOWN_ENDPOINT',
  UNKNOWN_IDENTITY: 'POLICY_UNKNOWN_IDENTITY',
  /** An endpoint's map state needs more entries than the per-endpoint limit. */
  MAP_OVERFLOW: 'POLICY_MAP_OVERFLOW',
  INVALID_ARGUMENT: 'POLICY_INVALID_ARGUMENT',
  /** The policy store (kvstore) refused or could not take a change; the change was rolled back. */
  STORE_FAILED: 'POLICY_STORE_FAILED',
  /** A broken invariant inside the engine: a bug, never the caller's input. */
  INTERNAL: 'POLICY_INTERNAL',
} as const;

export type PolicyErrorCode = (typeof PolicyErrorCode)[keyof typeof PolicyErrorCode];

export class PolicyError extends CodedError<PolicyErrorCode> {}

/** One problem in one document, located by a field path such as `spec.ingress[0].from[1].ipBlock.cidr`. */
export interface PolicyIssue {
  /** 0-based index of the document in the imported file (multi-document YAML). */
  document: number;
  /** Field path inside the document; '' for the document as a whole. */
  path: string;
  message: string;
}

export function formatIssue(issue: PolicyIssue): string {
  const where = issue.path === '' ? `document ${issue.document}` : `document ${issue.document}: ${issue.path}`;
  return `${where}: ${issue.message}`;
}

/** Invalid input: the whole import is rejected, nothing is applied. */
export class PolicyValidationError extends PolicyError {
  constructor(readonly issues: readonly PolicyIssue[]) {
    super(
      PolicyErrorCode.INVALID,
      issues.length === 1 ? formatIssue(issues[0]!) : `${issues.length} problems:\n${issues.map(formatIssue).join('\n')}`,
    );
  }

  protected override toJSONAt(depth: number): CodedErrorJson<PolicyErrorCode> & { issues: readonly PolicyIssue[] } {
    return { ...super.toJSONAt(depth), issues: this.issues };
  }
}

export class PolicyParseError extends PolicyError {
  constructor(
    readonly document: number,
    message: string,
    /** 1-based line of the problem when the YAML parser reports one. */
    readonly line?: number,
  ) {
    super(PolicyErrorCode.PARSE, `document ${document}${line === undefined ? '' : ` (line ${line})`}: ${message}`);
  }
}

export class PolicyNotFoundError extends PolicyError {
  constructor(what: string) {
    super(PolicyErrorCode.NOT_FOUND, `no policy matches ${what}`);
  }
}

export class UnknownEndpointError extends PolicyError {
  constructor(readonly endpointId: number) {
    super(PolicyErrorCode.UNKNOWN_ENDPOINT, `endpoint ${endpointId} is not known to the policy engine`);
  }
}

export class UnknownIdentityError extends PolicyError {
  constructor(readonly identity: number) {
    super(PolicyErrorCode.UNKNOWN_IDENTITY, `identity ${identity} is not known`);
  }
}

/**
 * The endpoint's policy needs more map entries than the datapath holds. The
 * endpoint keeps its previous map; nothing is truncated.
 */
export class PolicyMapOverflowError extends PolicyError {
  constructor(
    readonly endpointId: number,
    readonly entries: number,
    readonly limit: number,
  ) {
    super(
      PolicyErrorCode.MAP_OVERFLOW,
      `endpoint ${endpointId}: policy needs ${entries} map entries, the limit is ${limit}; the previous policy stays in force`,
    );
  }
}

export class PolicyArgumentError extends PolicyError {
  constructor(message: string) {
    super(PolicyErrorCode.INVALID_ARGUMENT, message);
  }
}

/** A policy change the kvstore did not take: the engine was rolled back, nothing changed. */
export class PolicyStoreError extends PolicyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(PolicyErrorCode.STORE_FAILED, message, options);
  }
}

export function isPolicyError(err: unknown): err is PolicyError {
  return err instanceof PolicyError;
}
