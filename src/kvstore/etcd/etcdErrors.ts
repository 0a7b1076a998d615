import { isBrokenCircuitError } from 'cockatiel';
import {
  ClientClosedError,
  EtcdAuthenticationFailedError,
  EtcdInvalidAuthTokenError,
  EtcdLeaseInvalidError,
  EtcdPermissionDeniedError,
  GRPCDeadlineExceededError,
  GRPCUnauthenticatedError,
  isRecoverableError,
} from 'etcd3';
import {
  AuthFailedError,
  ClosedError,
  CompactedError,
  InvalidArgumentError,
  KvstoreError,
  LeaseNotFoundError,
  UnavailableError,
} from '../errors.js';

export interface ErrorContext {
  endpoints: string[];
  leaseId?: string;
  revision?: number;
}

/**
 * Translates etcd3/gRPC errors into the kvstore's typed errors. etcd reports
 * several conditions only as message text ("etcdserver: …", "mvcc: …"); those
 * strings are part of etcd's API and stable across 3.x.
 */
export function mapEtcdError(err: unknown, ctx: ErrorContext): Error {
  if (err instanceof KvstoreError) return err;
  if (!(err instanceof Error)) return new Error(`etcd: non-error thrown: ${String(err)}`);
  const msg = err.message;
  if (err instanceof EtcdLeaseInvalidError || msg.includes('requested lease not found')) {
    return new LeaseNotFoundError(ctx.leaseId ?? 'unknown');
  }
  if (msg.includes('required revision has been compacted')) return new CompactedError(ctx.revision ?? 0, 0);
  if (msg.includes('required revision is a future revision')) {
    return new InvalidArgumentError(`revision ${ctx.revision ?? '?'} is in the future`);
  }
  if (
    err instanceof EtcdAuthenticationFailedError ||
    err instanceof EtcdInvalidAuthTokenError ||
    err instanceof EtcdPermissionDeniedError ||
    err instanceof GRPCUnauthenticatedError
  ) {
    return new AuthFailedError(`etcd at ${ctx.endpoints.join(',')} refused the credentials: ${msg}`, err);
  }
  if (err instanceof ClientClosedError) return new ClosedError();
  if (isRecoverableError(err) || isBrokenCircuitError(err) || err instanceof GRPCDeadlineExceededError) {
    return new UnavailableError(`etcd at ${ctx.endpoints.join(',')} is unavailable: ${msg}`, err);
  }
  return err;
}

/**
 * True when the request provably never reached etcd, so even a non-idempotent
 * write (a CAS transaction) may be sent again. Anything else is ambiguous: the
 * write may have committed before the connection broke.
 */
export function neverSent(err: unknown): boolean {
  if (isBrokenCircuitError(err)) return true;
  if (!(err instanceof Error)) return false;
  const cause = err instanceof UnavailableError ? err.cause : err;
  if (isBrokenCircuitError(cause)) return true;
  const msg = cause instanceof Error ? cause.message : '';
  return /ECONNREFUSED|No connection established|failed to connect|connection refused/i.test(msg);
}
