import { ConsecutiveBreaker, circuitBreaker, handleWhen, noop } from 'cockatiel';
import { Backoff, exponentialBackoff } from '../../async/backoff.js';
import { CompareResult, CompareTarget, Etcd3, isRecoverableError, type ICompare, type IKeyValue, type IRequestOp } from 'etcd3';
import { setTimeout as sleep } from 'node:timers/promises';
import { ClosedError, LeaseNotFoundError, UnavailableError } from '../errors.js';
import {
  NO_LEASE,
  type Backend,
  type Compare,
  type DeleteResult,
  type KeyValue,
  type Lease,
  type LeaseId,
  type ListResult,
  type PutOptions,
  type PutResult,
  type Status,
  type TxnOp,
  type TxnRequest,
  type TxnResult,
  type Watch,
  type WatchListener,
  type WatchOptions,
} from '../types.js';
import {
  prefixRangeEnd,
  validateDeletePrefix,
  validateKey,
  validateLeaseId,
  validateLeaseTtl,
  validatePrefix,
  validateRevision,
  validateTxn,
  validateValue,
} from '../validate.js';
import { mapEtcdError, neverSent, type ErrorContext } from './etcdErrors.js';
import type { EtcdOptions } from './etcdOptions.js';
import { EtcdWatch } from './etcdWatch.js';

const CMP_RESULT = { '==': CompareResult.Equal, '!=': CompareResult.NotEqual, '<': CompareResult.Less, '>': CompareResult.Greater } as const;

function toKeyValue(kv: IKeyValue): KeyValue {
  return {
    key: kv.key.toString('utf8'),
    value: kv.value.toString('utf8'),
    createRevision: Number(kv.create_revision),
    modRevision: Number(kv.mod_revision),
    version: Number(kv.version),
    lease: kv.lease,
  };
}

/** [key, range_end) covering every key under prefix, as etcd wants it. */
function prefixRange(prefix: string): { key: Buffer; range_end: Buffer } {
  if (prefix === '') return { key: Buffer.from([0]), range_end: Buffer.from([0]) };
  const end = prefixRangeEnd(prefix);
  return { key: Buffer.from(prefix, 'utf8'), range_end: end === undefined ? Buffer.from([0]) : Buffer.from(end, 'utf8') };
}

function toCompare(c: Compare): ICompare {
  const key = Buffer.from(c.key, 'utf8');
  switch (c.target) {
    case 'exists':
      // etcd has no "exists" target: a key exists iff its create revision is non-zero.
      return { key, target: CompareTarget.Create, result: c.value ? CompareResult.Greater : CompareResult.Equal, create_revision: '0' };
    case 'value':
      return { key, target: CompareTarget.Value, result: CMP_RESULT[c.op ?? '=='], value: Buffer.from(c.value, 'utf8') };
    case 'modRevision':
      return { key, target: CompareTarget.Mod, result: CMP_RESULT[c.op ?? '=='], mod_revision: String(c.value) };
    case 'createRevision':
      return { key, target: CompareTarget.Create, result: CMP_RESULT[c.op ?? '=='], create_revision: String(c.value) };
    case 'version':
      return { key, target: CompareTarget.Version, result: CMP_RESULT[c.op ?? '=='], version: String(c.value) };
  }
}

function toRequestOp(op: TxnOp): IRequestOp {
  switch (op.type) {
    case 'put':
      return { request_put: { key: Buffer.from(op.key, 'utf8'), value: Buffer.from(op.value, 'utf8'), lease: op.lease ?? NO_LEASE } };
    case 'delete':
      return { request_delete_range: { key: Buffer.from(op.key, 'utf8') } };
    case 'deletePrefix':
      return { request_delete_range: prefixRange(op.prefix) };
  }
}

/**
 * The etcd backend: etcd3's raw KV/Lease/Maintenance clients, so every call
 * maps one-to-one onto an etcd RPC, and etcd3's watch manager for streams.
 *
 * Retries are done here, not by etcd3 (its global policy is a no-op): reads
 * and lease keep-alives retry on any transient error with exponential backoff
 * until `retryTimeoutMs`; writes retry only when the request provably never
 * left this process, because re-sending a CAS whose reply was lost could apply
 * it twice. An ambiguous write failure surfaces as KVSTORE_UNAVAILABLE and the
 * caller re-reads before deciding again.
 */
export class EtcdBackend implements Backend {
  readonly kind = 'etcd' as const;
  private readonly client: Etcd3;
  private readonly watches = new Set<EtcdWatch>();
  private closed = false;

  constructor(private readonly options: EtcdOptions) {
    const callTimeout = options.callTimeoutMs;
    this.client = new Etcd3({
      hosts: options.endpoints,
      ...(options.tls === undefined
        ? {}
        : { credentials: { rootCertificate: options.tls.ca, privateKey: options.tls.key, certChain: options.tls.cert } }),
      ...(options.auth === undefined ? {} : { auth: { ...options.auth, callOptions: () => ({ deadline: Date.now() + callTimeout }) } }),
      // Streams (watch, keep-alive) live for long; only unary calls get a deadline.
      defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + callTimeout }),
      grpcOptions: {
        // gRPC's default reconnect backoff grows to 120 s; an agent must notice a
        // restarted etcd within seconds.
        'grpc.initial_reconnect_backoff_ms': 100,
        'grpc.max_reconnect_backoff_ms': 2000,
        'grpc.keepalive_time_ms': 10_000,
        'grpc.keepalive_timeout_ms': 5_000,
      },
      faultHandling: {
        // One failing member is skipped for a second, then tried again.
        host: () => circuitBreaker(handleWhen(isRecoverableError), { halfOpenAfter: 1000, breaker: new ConsecutiveBreaker(3) }),
        global: noop,
        // etcd3 calls next() on this before every reconnect; starting from the
        // first step of a 50 ms..2 s exponential backoff keeps re-watching fast.
        watchBackoff: exponentialBackoff({ initialMs: 50, maxMs: 2000, jitter: 'decorrelated' }).next(),
      },
    });
  }

  private ctx(extra: Partial<ErrorContext> = {}): ErrorContext {
    return { endpoints: this.options.endpoints, ...extra };
  }

  /** Runs one RPC with the retry rules above, mapping errors to kvstore errors. */
  private async call<T>(what: string, idempotent: boolean, fn: () => Promise<T>, extra: Partial<ErrorContext> = {}): Promise<T> {
    if (this.closed) throw new ClosedError();
    const deadline = Date.now() + this.options.retryTimeoutMs;
    const backoff = new Backoff({ initialMs: 50, maxMs: 1000 });
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        const mapped = mapEtcdError(err, this.ctx(extra));
        const retry = mapped instanceof UnavailableError && (idempotent || neverSent(mapped)) && !this.closed;
        const delay = backoff.next();
        if (!retry || Date.now() + delay > deadline) throw mapped;
        this.options.logger.debug({ what, attempt, err: mapped.message }, 'kvstore etcd call failed; retrying');
        await sleep(delay);
      }
    }
  }

  async get(key: string): Promise<KeyValue | undefined> {
    validateKey(key);
    const res = await this.call('get', true, () => this.client.kv.range({ key: Buffer.from(key, 'utf8') }));
    const kv = res.kvs[0];
    return kv === undefined ? undefined : toKeyValue(kv);
  }

  async list(prefix: string): Promise<ListResult> {
    validatePrefix(prefix);
    const res = await this.call('list', true, () => this.client.kv.range(prefixRange(prefix)));
    return { revision: Number(res.header.revision), kvs: res.kvs.map(toKeyValue) };
  }

  async put(key: string, value: string, options: PutOptions = {}): Promise<PutResult> {
    validateKey(key);
    validateValue(value);
    const lease = options.lease ?? NO_LEASE;
    validateLeaseId(lease);
    const res = await this.call(
      'put',
      false,
      // prev_kv gives the create revision and version of the key we just wrote.
      () => this.client.kv.put({ key: Buffer.from(key, 'utf8'), value: Buffer.from(value, 'utf8'), lease, prev_kv: true }),
      { leaseId: lease },
    );
    const revision = Number(res.header.revision);
    const prev = res.prev_kv;
    return {
      revision,
      kv: {
        key,
        value,
        createRevision: prev ? Number(prev.create_revision) : revision,
        modRevision: revision,
        version: prev ? Number(prev.version) + 1 : 1,
        lease,
      },
    };
  }

  async delete(key: string): Promise<DeleteResult> {
    validateKey(key);
    const res = await this.call('delete', false, () => this.client.kv.deleteRange({ key: Buffer.from(key, 'utf8') }));
    return { revision: Number(res.header.revision), deleted: Number(res.deleted) };
  }

  async deletePrefix(prefix: string): Promise<DeleteResult> {
    validateDeletePrefix(prefix);
    const res = await this.call('deletePrefix', false, () => this.client.kv.deleteRange(prefixRange(prefix)));
    return { revision: Number(res.header.revision), deleted: Number(res.deleted) };
  }

  async txn(request: TxnRequest): Promise<TxnResult> {
    validateTxn(request);
    const leaseId = [...request.success, ...(request.failure ?? [])].find((op) => op.type === 'put' && op.lease !== undefined && op.lease !== NO_LEASE);
    const res = await this.call(
      'txn',
      false,
      () =>
        this.client.kv.txn({
          compare: request.compare.map(toCompare),
          success: request.success.map(toRequestOp),
          failure: (request.failure ?? []).map(toRequestOp),
        }),
      leaseId?.type === 'put' ? { leaseId: leaseId.lease } : {},
    );
    return { succeeded: res.succeeded, revision: Number(res.header.revision) };
  }

  async grantLease(ttlSeconds: number): Promise<Lease> {
    validateLeaseTtl(ttlSeconds);
    const res = await this.call('grantLease', false, () => this.client.leaseClient.leaseGrant({ TTL: ttlSeconds, ID: 0 }));
    return { id: res.ID, ttl: Number(res.TTL) };
  }

  async keepAlive(id: LeaseId): Promise<number> {
    validateLeaseId(id);
    // A keep-alive is idempotent: sending it twice only refreshes the deadline twice.
    return this.call('keepAlive', true, () => this.keepAliveOnce(id), { leaseId: id });
  }

  private async keepAliveOnce(id: LeaseId): Promise<number> {
    const stream = await this.client.leaseClient.leaseKeepAlive();
    try {
      const res = await new Promise<{ TTL: string }>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new UnavailableError(`etcd at ${this.options.endpoints.join(',')} did not answer a lease keep-alive`)),
          this.options.callTimeoutMs,
        );
        stream.on('data', (r: { TTL: string }) => {
          clearTimeout(timer);
          resolve(r);
        });
        stream.on('error', (err: Error) => {
          clearTimeout(timer);
          reject(err);
        });
        stream.write({ ID: id });
      });
      // etcd answers a keep-alive for an unknown or expired lease with TTL 0.
      const ttl = Number(res.TTL);
      if (ttl <= 0) throw new LeaseNotFoundError(id);
      return ttl;
    } finally {
      stream.end();
    }
  }

  async revokeLease(id: LeaseId): Promise<void> {
    validateLeaseId(id);
    await this.call('revokeLease', false, () => this.client.leaseClient.leaseRevoke({ ID: id }), { leaseId: id });
  }

  watch(prefix: string, options: WatchOptions, listener: WatchListener): Watch {
    validatePrefix(prefix);
    if (options.fromRevision !== undefined) validateRevision(options.fromRevision, 'watch fromRevision');
    if (this.closed) throw new ClosedError();
    const from = options.fromRevision !== undefined && options.fromRevision > 0 ? options.fromRevision : undefined;
    const w: EtcdWatch = new EtcdWatch(this.client, prefix, prefixRangeEnd(prefix), from, listener, this.options.endpoints, this.options.logger, () =>
      this.watches.delete(w),
    );
    this.watches.add(w);
    return w;
  }

  async compact(revision: number): Promise<void> {
    validateRevision(revision, 'compact revision');
    await this.call('compact', true, () => this.client.kv.compact({ revision: String(revision), physical: false }), { revision });
  }

  async status(): Promise<Status> {
    const detail = this.options.endpoints.join(',');
    if (this.closed) return { backend: 'etcd', connected: false, revision: 0, detail };
    try {
      const res = await this.client.maintenance.status({ deadline: Date.now() + Math.min(this.options.callTimeoutMs, 2000) });
      return { backend: 'etcd', connected: true, revision: Number(res.header.revision), detail: `${detail} (etcd ${res.version})` };
    } catch (err) {
      // Being unreachable is exactly what status reports; only the reason goes in detail.
      const mapped = mapEtcdError(err, this.ctx());
      if (!(mapped instanceof UnavailableError)) throw mapped;
      return { backend: 'etcd', connected: false, revision: 0, detail: `${detail}: ${mapped.message}` };
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await Promise.all([...this.watches].map((w) => w.close()));
    this.closed = true;
    this.client.close();
  }
}
