import type { Logger } from '../logging/logger.js';
import { KvstoreErrorCode, isKvstoreError } from '../kvstore/errors.js';
import type { Backend, LeaseId } from '../kvstore/types.js';
import { IdentityError, IdentityErrorCode } from './errors.js';

/**
 * The node's kvstore session: everything a node writes about itself
 * (identity usage keys, ipcache entries) hangs off one lease, so when the
 * node dies without a word its keys vanish one TTL later (Cilium's
 * session lease). Consumers only need this interface; the agent may pass
 * its own implementation.
 */
export interface LeaseProvider {
  /** The live lease ID, granting one first if needed. */
  current(): Promise<LeaseId>;
  /**
   * Called by a writer whose put failed with KVSTORE_LEASE_NOT_FOUND: grants a
   * new lease unless that already happened, and returns the live one.
   */
  renew(expired: LeaseId): Promise<LeaseId>;
  /** Runs `cb` after a new lease replaced an expired one (keys must be written again). */
  onRenewed(cb: (lease: LeaseId) => void): () => void;
}

export interface NodeLeaseOptions {
  ttlSeconds?: number;
  /** Keepalive period; default a third of the TTL, as etcd clients do. */
  keepAliveMs?: number;
  logger?: Logger;
}

export const DEFAULT_LEASE_TTL_SECONDS = 15;

export class NodeLease implements LeaseProvider {
  readonly ttlSeconds: number;
  readonly #backend: Backend;
  readonly #keepAliveMs: number;
  readonly #logger: Logger | undefined;
  readonly #listeners = new Set<(lease: LeaseId) => void>();
  #lease: Promise<LeaseId> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #renewal: { from: LeaseId; promise: Promise<LeaseId> } | undefined;

  constructor(backend: Backend, options: NodeLeaseOptions = {}) {
    this.#backend = backend;
    this.ttlSeconds = options.ttlSeconds ?? DEFAULT_LEASE_TTL_SECONDS;
    this.#keepAliveMs = options.keepAliveMs ?? Math.max(100, (this.ttlSeconds * 1000) / 3);
    this.#logger = options.logger;
  }

  current(): Promise<LeaseId> {
    if (this.#stopped) return Promise.reject(new IdentityError(IdentityErrorCode.CLOSED, 'node lease stopped'));
    if (this.#lease === undefined) {
      const granting = this.#backend.grantLease(this.ttlSeconds).then((l) => l.id);
      // A failed grant must not stick: the next caller tries again.
      granting.catch(() => {
        if (this.#lease === granting) this.#lease = undefined;
      });
      this.#lease = granting;
      this.#schedule();
    }
    return this.#lease;
  }

  renew(expired: LeaseId): Promise<LeaseId> {
    // Writers that all saw the same lease vanish share one renewal: a second
    // grant would leave keys on a lease nobody keeps alive.
    if (this.#renewal?.from === expired) return this.#renewal.promise;
    const promise = (async () => {
      const live = this.#lease === undefined ? undefined : await this.#lease.catch(() => undefined);
      if (live !== undefined && live !== expired) return live;
      this.#lease = undefined;
      const next = await this.current();
      this.#logger?.warn({ expired, lease: next }, 'node lease expired; granted a new one');
      for (const cb of this.#listeners) cb(next);
      return next;
    })();
    this.#renewal = { from: expired, promise };
    return promise;
  }

  onRenewed(cb: (lease: LeaseId) => void): () => void {
    this.#listeners.add(cb);
    return () => this.#listeners.delete(cb);
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#stopped) return;
    this.#timer = setInterval(() => void this.#keepAlive(), this.#keepAliveMs);
    this.#timer.unref();
  }

  async #keepAlive(): Promise<void> {
    const pending = this.#lease;
    if (pending === undefined) return;
    let id: LeaseId;
    try {
      id = await pending;
    } catch {
      return; // the grant failed; current() reports that to whoever asks next
    }
    try {
      await this.#backend.keepAlive(id);
    } catch (err) {
      if (this.#stopped) return;
      if (isKvstoreError(err) && err.code === KvstoreErrorCode.LEASE_NOT_FOUND) {
        await this.renew(id).catch((e: unknown) => this.#logger?.error({ err: e }, 'cannot grant a new node lease'));
      } else {
        // Unreachable store: the next tick retries; if the TTL passes meanwhile,
        // the keepalive reports LEASE_NOT_FOUND and the keys are written again.
        this.#logger?.warn({ err, lease: id }, 'node lease keepalive failed');
      }
    }
  }

  /**
   * Stops keepalives. With `revoke` the lease ends now and its keys go at once
   * (clean shutdown); without, they go when the TTL runs out (what a crash does).
   */
  async stop(options: { revoke?: boolean } = {}): Promise<void> {
    this.#stopped = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
    const pending = this.#lease;
    this.#lease = undefined;
    if (options.revoke === true && pending !== undefined) {
      const id = await pending;
      await this.#backend.revokeLease(id);
    }
  }
}

/**
 * Runs a leased write, renewing the lease once when the store says it is gone
 * (expired while the node was partitioned, or the store restarted empty).
 */
export async function withLease<T>(lease: LeaseProvider, write: (lease: LeaseId) => Promise<T>): Promise<T> {
  const id = await lease.current();
  try {
    return await write(id);
  } catch (err) {
    if (!(isKvstoreError(err) && err.code === KvstoreErrorCode.LEASE_NOT_FOUND)) throw err;
    return write(await lease.renew(id));
  }
}
