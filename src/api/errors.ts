import { CniErrorCode } from '../cni/errors.js';
import { CodedError, type CodedErrorJson } from '../errors/codedError.js';
import { type ServiceError, ServiceErrorCode } from '../service/errors.js';
import type { ErrorResponse } from './types.js';

/**
 * One table of agent error codes: each has a stable name, the HTTP status the
 * API answers with, and the CNI code tendril-cni prints for it. tendril's own
 * CNI codes start at 100, the range the spec leaves to plugins.
 */
export const AGENT_ERRORS = {
  INVALID_REQUEST: { http: 400, cni: CniErrorCode.InvalidNetworkConfig },
  INVALID_ENVIRONMENT: { http: 400, cni: CniErrorCode.InvalidEnvironmentVariables },
  DECODING_FAILED: { http: 400, cni: CniErrorCode.DecodingFailure },
  INCOMPATIBLE_VERSION: { http: 400, cni: CniErrorCode.IncompatibleVersion },
  NOT_FOUND: { http: 404, cni: CniErrorCode.UnknownContainer },
  CONFLICT: { http: 409, cni: CniErrorCode.TryAgainLater },
  NOT_READY: { http: 503, cni: CniErrorCode.PluginNotAvailable },
  TRY_AGAIN: { http: 503, cni: CniErrorCode.TryAgainLater },
  IPAM_EXHAUSTED: { http: 503, cni: 100 },
  IPAM_FAILED: { http: 500, cni: 101 },
  DATAPATH_FAILED: { http: 500, cni: 102 },
  INTERNAL: { http: 500, cni: CniErrorCode.Internal },
  // The TCP listeners (flows, relay) without the bearer token they want; the socket API never answers it.
  UNAUTHORIZED: { http: 401, cni: CniErrorCode.Internal },
  // The service subsystem's codes (ServiceErrorCode) keep their names on the wire; CNI never meets them.
  [ServiceErrorCode.INVALID]: { http: 400, cni: CniErrorCode.InvalidNetworkConfig },
  [ServiceErrorCode.NOT_FOUND]: { http: 404, cni: CniErrorCode.Internal },
  [ServiceErrorCode.CONFLICT]: { http: 409, cni: CniErrorCode.Internal },
  [ServiceErrorCode.UNSUPPORTED]: { http: 409, cni: CniErrorCode.Internal },
  [ServiceErrorCode.DATAPATH_FAILED]: { http: 503, cni: CniErrorCode.TryAgainLater },
} as const;
export type AgentErrorCode = keyof typeof AGENT_ERRORS;

/** The JSON body of every non-2xx answer (api/openapi.yaml's ErrorResponse, whose code enum lists AGENT_ERRORS). */
export type { ErrorResponse };

export class AgentError extends CodedError<AgentErrorCode> {
  constructor(
    code: AgentErrorCode,
    message: string,
    readonly details: string = '',
    /** Overrides the table's CNI code, e.g. to pass a delegated plugin's own code through. */
    readonly cniCodeOverride?: number,
    options?: { cause?: unknown },
  ) {
    super(code, message, options);
  }

  get httpStatus(): number {
    return AGENT_ERRORS[this.code].http;
  }

  get cniCode(): number {
    return this.cniCodeOverride ?? AGENT_ERRORS[this.code].cni;
  }

  toResponse(): ErrorResponse {
    return { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}), cniCode: this.cniCode };
  }

  protected override toJSONAt(depth: number): CodedErrorJson<AgentErrorCode> & { details?: string } {
    return this.details ? { ...super.toJSONAt(depth), details: this.details } : super.toJSONAt(depth);
  }
}

/** Which agent error a CNI error code stands for, when the agent relays one. */
export function agentCodeForCni(code: number): AgentErrorCode {
  switch (code) {
    case CniErrorCode.IncompatibleVersion:
      return 'INCOMPATIBLE_VERSION';
    case CniErrorCode.InvalidEnvironmentVariables:
      return 'INVALID_ENVIRONMENT';
    case CniErrorCode.DecodingFailure:
      return 'DECODING_FAILED';
    case CniErrorCode.InvalidNetworkConfig:
    case CniErrorCode.UnsupportedField:
      return 'INVALID_REQUEST';
    case CniErrorCode.UnknownContainer:
      return 'NOT_FOUND';
    case CniErrorCode.TryAgainLater:
      return 'TRY_AGAIN';
    case CniErrorCode.PluginNotAvailable:
    case CniErrorCode.LimitedConnectivity:
      return 'NOT_READY';
    default:
      return 'INTERNAL';
  }
}

/** A service error as the API answers it: its code is kept (400/404/409/409/503, AGENT_ERRORS). */
export function agentErrorFromService(err: ServiceError): AgentError {
  return new AgentError(err.code, err.message, '', undefined, { cause: err });
}
