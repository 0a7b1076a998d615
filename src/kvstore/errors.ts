import { CodedError } from '../errors/codedError.js';

/**
 * One table of kvstore error codes with stable string names (undici/fastify
 * style). Callers branch on `code`, never on message text; the CLI and agent
 * print `code: message`.
 */
export const KvstoreErrorCode = {
  INVALID_KEY: 'KVSTORE_INVALID_KEY',
  VALUE_TOO_LARGE: 'KVSTORE_VALUE_TOO_LARGE',
  INVALID_ARGUMENT: 'KVSTORE_INVALID_ARGUMENT',
  INVALID_OPTION: 'KVSTORE_INVALID_OPTION',
  UNKNOWN_BACKEND: 'KVSTORE_UNKNOWN_BACKEND',
  UNAVAILABLE: 'KVSTORE_UNAVAILABLE',
  AUTH_FAILED: 'KVSTORE_AUTH_FAILED',
  LOCKED: 'KVSTORE_LOCKED',
  /** The embedded store's file is no SQLite database, is damaged, or is a directory. */
  CORRUPT: 'KVSTORE_CORRUPT',
  COMPACTED: 'KVSTORE_COMPACTED',
  LEASE_NOT_FOUND: 'KVSTORE_LEASE_NOT_FOUND',
  CLOSED: 'KVSTORE_CLOSED',
} as const;

export type KvstoreErrorCode = (typeof KvstoreErrorCode)[keyof typeof KvstoreErrorCode];

export class KvstoreError extends CodedError<KvstoreErrorCode> {}

export class InvalidKeyError extends KvstoreError {
  constructor(message: string) {
    super(KvstoreErrorCode.INVALID_KEY, message);
  }
}

export class ValueTooLargeError extends KvstoreError {
  constructor(
    readonly size: number,
    readonly limit: number,
  ) {
    super(KvstoreErrorCode.VALUE_TOO_LARGE, `value is ${size} bytes, the limit is ${limit}`);
  }
}

export class InvalidArgumentError extends KvstoreError {
  constructor(message: string) {
    super(KvstoreErrorCode.INVALID_ARGUMENT, message);
  }
}

export class InvalidOptionError extends KvstoreError {
  constructor(message: string) {
    super(KvstoreErrorCode.INVALID_OPTION, message);
  }
}

export class UnknownBackendError extends KvstoreError {
  constructor(readonly kind: string) {
    super(KvstoreErrorCode.UNKNOWN_BACKEND, `unknown kvstore backend "${kind}" (expected "embedded" or "etcd")`);
  }
}

export class UnavailableError extends KvstoreError {
  constructor(message: string, cause?: unknown) {
    super(KvstoreErrorCode.UNAVAILABLE, message, { cause });
  }
}

export class AuthFailedError extends KvstoreError {
  constructor(message: string, cause?: unknown) {
    super(KvstoreErrorCode.AUTH_FAILED, message, { cause });
  }
}

export class LockedError extends KvstoreError {
  constructor(
    readonly path: string,
    readonly holderPid: number | undefined,
  ) {
    super(
      KvstoreErrorCode.LOCKED,
      `embedded store ${path} is in use by another process` +
        (holderPid === undefined ? '' : ` (pid ${holderPid})`) +
        '; one process at a time may open it',
    );
  }
}

/** An embedded store that cannot be opened as a database; the message says what to do, in one line. */
export class CorruptStoreError extends KvstoreError {
  constructor(
    readonly path: string,
    message: string,
    cause?: unknown,
  ) {
    super(KvstoreErrorCode.CORRUPT, message, { cause });
  }
}

export class CompactedError extends KvstoreError {
  constructor(
    readonly requestedRevision: number,
    /** Oldest revision still available, when the backend reports it (0 = unknown). */
    readonly compactRevision: number,
  ) {
    super(
      KvstoreErrorCode.COMPACTED,
      `revision ${requestedRevision} has been compacted` +
        (compactRevision > 0 ? ` (history starts after ${compactRevision})` : '') +
        '; list again and watch from the listing revision',
    );
  }
}

export class LeaseNotFoundError extends KvstoreError {
  constructor(readonly leaseId: string) {
    super(KvstoreErrorCode.LEASE_NOT_FOUND, `lease ${leaseId} not found (expired or revoked)`);
  }
}

export class ClosedError extends KvstoreError {
  constructor() {
    super(KvstoreErrorCode.CLOSED, 'kvstore backend is closed');
  }
}

export function isKvstoreError(err: unknown): err is KvstoreError {
  return err instanceof KvstoreError;
}
