import { CodedError } from '../errors/codedError.js';

/**
 * The spec's well-known error codes (CNI spec, "Error"). Codes 0-99 are
 * reserved for the spec; 100+ are plugin-specific.
 */
export const CniErrorCode = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironmentVariables: 4,
  IOFailure: 5,
  DecodingFailure: 6,
  InvalidNetworkConfig: 7,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  LimitedConnectivity: 51,
  /** libcni's code for failures inside the runtime itself. */
  Internal: 999,
} as const;
export type CniErrorCodeValue = (typeof CniErrorCode)[keyof typeof CniErrorCode];

/** The error JSON a plugin prints on stdout (with exit code 1). */
export interface CniErrorJson {
  cniVersion?: string;
  code: number;
  msg: string;
  details?: string;
}

/**
 * A CNI error. Its JSON is the spec's error object (what a plugin prints),
 * not CodedError's generic form: that is what a CNI error is on the wire.
 */
export class CniError extends CodedError<number> {
  constructor(
    code: number,
    readonly msg: string,
    readonly details: string = '',
    options?: { cause?: unknown },
  ) {
    super(code, details ? `${msg}; ${details}` : msg, options);
  }

  override toJSON(cniVersion?: string): CniErrorJson {
    const out: CniErrorJson = { code: this.code, msg: this.msg };
    if (cniVersion !== undefined) out.cniVersion = cniVersion;
    if (this.details) out.details = this.details;
    return out;
  }

  /** Reads a plugin's error JSON; returns undefined when the bytes are not one. */
  static fromJson(value: unknown): CniError | undefined {
    if (value === null || typeof value !== 'object') return undefined;
    const v = value as Record<string, unknown>;
    if (typeof v.code !== 'number' || !Number.isInteger(v.code) || v.code < 0) return undefined;
    const msg = typeof v.msg === 'string' ? v.msg : '';
    const details = typeof v.details === 'string' ? v.details : '';
    return new CniError(v.code, msg, details);
  }
}

/** Any thrown value as a CniError; unknown failures become code 999 (internal). */
export function asCniError(err: unknown): CniError {
  if (err instanceof CniError) return err;
  if (err instanceof Error) return new CniError(CniErrorCode.Internal, err.message);
  return new CniError(CniErrorCode.Internal, String(err));
}
