import type { Database } from 'better-sqlite3';
import type { Logger } from '../../logging/logger.js';
import { ClosedError, CompactedError, InvalidArgumentError, LeaseNotFoundError } from '../errors.js';
import {
  NO_LEASE,
  type Backend,
  type Compare,
  type CompareOp,
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
  type WatchEvent,
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
import { migrate, type MetaName } from './schema.js';
import { diagnoseOpenFailure } from './openFailure.js';
import { openLocked, type JournalMode, type LockedDatabase, type Synchronous } from './storeLock.js';
import { EmbeddedWatch, WatchHub } from './watchHub.js';

export interface EmbeddedOptions {
  /** Database file; the directory is created 0700. */
  path: string;
  /** 'full' (default) fsyncs every commit: durable across power loss, not only kill -9. */
  synchronous: Synchronous;
  journal: JournalMode;
  /** How often lease deadlines are checked; bounds how late a key outlives its lease. */
  leaseCheckIntervalMs: number;
  /** History kept for watch resume; older revisions are compacted automatically. */
  historyRevisions: number;
  logger: Logger;
}

interface KvRow {
  key: string;
  value: string;
  create_rev: number;
  mod_rev: number;
  version: number;
  lease: string;
}

interface LogRow {
  rev: number;
  type: 'put' | 'delete';
  key: string;
  value: string;
  create_rev: number;
  version: number;
  lease: string;
}

interface LeaseRow {
  id: string;
  ttl: number;
  deadline_ms: number;
}

interface PendingWrite {
  run: (batch: WriteBatch) => unknown;
  resolve: (outcome: { result: unknown; revision: number }) => void;
  reject: (err: unknown) => void;
}

function toKeyValue(r: KvRow): KeyValue {
  return { key: r.key, value: r.value, createRevision: r.create_rev, modRevision: r.mod_rev, version: r.version, lease: r.lease };
}

function toEvent(r: LogRow): WatchEvent {
  return {
    type: r.type,
    key: r.key,
    value: r.value,
    modRevision: r.rev,
    createRevision: r.create_rev,
    version: r.version,
    lease: r.lease,
  };
}

function compareOrder(op: CompareOp | undefined, cmp: number): boolean {
  switch (op ?? '==') {
    case '==':
      return cmp === 0;
    case '!=':
      return cmp !== 0;
    case '<':
      return cmp < 0;
    case '>':
      return cmp > 0;
  }
}

/**
 * One write request in progress: allocates the next revision on the first
 * change and records the change in both `kv` and `log`. Everything runs inside
 * one SQLite transaction, so a request is applied entirely or not at all.
 */
class WriteBatch {
  readonly events: WatchEvent[] = [];
  private rev = 0;

  constructor(
    private readonly store: EmbeddedBackend,
    private readonly base: number,
  ) {}

  get revision(): number {
    return this.rev === 0 ? this.base : this.rev;
  }

  private nextRev(): number {
    if (this.rev === 0) this.rev = this.base + 1;
    return this.rev;
  }

  put(key: string, value: string, lease: LeaseId): KeyValue {
    if (lease !== NO_LEASE && !this.store.leaseAlive(lease)) throw new LeaseNotFoundError(lease);
    const prev = this.store.rowFor(key);
    const rev = this.nextRev();
    const row: KvRow = {
      key,
      value,
      create_rev: prev?.create_rev ?? rev,
      mod_rev: rev,
      version: (prev?.version ?? 0) + 1,
      lease,
    };
    this.store.stmts.upsert.run(row);
    this.record({ rev, type: 'put', key, value, create_rev: row.create_rev, version: row.version, lease });
    return toKeyValue(row);
  }

  delete(key: string): boolean {
    if (this.store.stmts.deleteKey.run(key).changes === 0) return false;
    // As in etcd, a delete event carries only the key and the revision of the delete.
    this.record({ rev: this.nextRev(), type: 'delete', key, value: '', create_rev: 0, version: 0, lease: NO_LEASE });
    return true;
  }

  deletePrefix(prefix: string): number {
    const keys = this.store.keysInRange(prefix);
    for (const key of keys) this.delete(key);
    return keys.length;
  }

  private record(r: LogRow): void {
    this.store.stmts.insertLog.run(r);
    this.events.push(toEvent(r));
  }
}

export class EmbeddedBackend implements Backend {
  readonly kind = 'embedded' as const;
  /** @internal prepared statements, shared with WriteBatch. */
  readonly stmts;
  private readonly db: Database;
  private readonly hub = new WatchHub();
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  private pending: PendingWrite[] = [];
  private flushScheduled = false;

  static open(options: EmbeddedOptions): EmbeddedBackend {
    let locked: LockedDatabase;
    try {
      locked = openLocked({ path: options.path, synchronous: options.synchronous, journal: options.journal });
    } catch (err) {
      throw diagnoseOpenFailure(options.path, err) ?? err;
    }
    try {
      return new EmbeddedBackend(options, locked);
    } catch (err) {
      locked.db.close();
      locked.release();
      // A damaged file can open and fail only at its first read (the schema).
      throw diagnoseOpenFailure(options.path, err) ?? err;
    }
  }

  private constructor(
    private readonly options: EmbeddedOptions,
    private readonly locked: LockedDatabase,
  ) {
    this.db = locked.db;
    migrate(this.db);
    const db = this.db;
    this.stmts = {
      getMeta: db.prepare<[MetaName], { value: number }>('SELECT value FROM meta WHERE name = ?'),
      setMeta: db.prepare<[number, MetaName]>('UPDATE meta SET value = ? WHERE name = ?'),
      get: db.prepare<[string], KvRow>('SELECT * FROM kv WHERE key = ?'),
      rangeBounded: db.prepare<[string, string], KvRow>('SELECT * FROM kv WHERE key >= ? AND key < ? ORDER BY key'),
      rangeOpen: db.prepare<[string], KvRow>('SELECT * FROM kv WHERE key >= ? ORDER BY key'),
      keysBounded: db.prepare<[string, string], { key: string }>('SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key'),
      keysOpen: db.prepare<[string], { key: string }>('SELECT key FROM kv WHERE key >= ? ORDER BY key'),
      upsert: db.prepare<[KvRow]>(
        `INSERT INTO kv (key, value, create_rev, mod_rev, version, lease)
         VALUES (@key, @value, @create_rev, @mod_rev, @version, @lease)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value, mod_rev = excluded.mod_rev,
           version = excluded.version, lease = excluded.lease`,
      ),
      deleteKey: db.prepare<[string]>('DELETE FROM kv WHERE key = ?'),
      insertLog: db.prepare<[LogRow]>(
        `INSERT INTO log (rev, type, key, value, create_rev, version, lease)
         VALUES (@rev, @type, @key, @value, @create_rev, @version, @lease)`,
      ),
      historyBounded: db.prepare<[number, string, string], LogRow>(
        'SELECT * FROM log WHERE rev >= ? AND key >= ? AND key < ? ORDER BY seq',
      ),
      historyOpen: db.prepare<[number, string], LogRow>('SELECT * FROM log WHERE rev >= ? AND key >= ? ORDER BY seq'),
      compactLog: db.prepare<[number]>('DELETE FROM log WHERE rev < ?'),
      getLease: db.prepare<[string], LeaseRow>('SELECT * FROM leases WHERE id = ?'),
      insertLease: db.prepare<[LeaseRow]>('INSERT INTO leases (id, ttl, deadline_ms) VALUES (@id, @ttl, @deadline_ms)'),
      touchLease: db.prepare<[number, string]>('UPDATE leases SET deadline_ms = ? WHERE id = ?'),
      deleteLease: db.prepare<[string]>('DELETE FROM leases WHERE id = ?'),
      expiredLeases: db.prepare<[number], { id: string }>('SELECT id FROM leases WHERE deadline_ms <= ? ORDER BY deadline_ms'),
      keysOfLease: db.prepare<[string], { key: string }>('SELECT key FROM kv WHERE lease = ? ORDER BY key'),
    };
    // Leases whose deadline passed while no agent ran end now, before anyone reads.
    this.expireLeases();
    this.timer = setInterval(() => this.maintain(), options.leaseCheckIntervalMs);
    // The store must not keep a CLI or test process alive; the agent has its own handles.
    this.timer.unref();
  }

  // ---- helpers used by WriteBatch -------------------------------------------------

  /** @internal */
  rowFor(key: string): KvRow | undefined {
    return this.stmts.get.get(key);
  }

  /** @internal */
  keysInRange(prefix: string): string[] {
    const end = prefixRangeEnd(prefix);
    const rows = end === undefined ? this.stmts.keysOpen.all(prefix) : this.stmts.keysBounded.all(prefix, end);
    return rows.map((r) => r.key);
  }

  /** @internal */
  leaseAlive(id: string): boolean {
    const lease = this.stmts.getLease.get(id);
    return lease !== undefined && lease.deadline_ms > Date.now();
  }

  private meta(name: MetaName): number {
    const row = this.stmts.getMeta.get(name);
    if (row === undefined) throw new Error(`embedded store is missing meta row ${name}`);
    return row.value;
  }

  private ensureOpen(): void {
    if (this.closed) throw new ClosedError();
  }

  /**
   * Queues one write request; resolves once it is committed (and fsynced).
   *
   * Group commit: every request queued during one turn of the event loop is
   * applied in FIFO order inside ONE SQLite transaction, each request in its
   * own savepoint with its own revision, so one fsync acknowledges them all.
   * A request that fails (a lease gone, say) rolls back only its savepoint;
   * the others commit. This is what lets concurrent CNI ADDs share the cost
   * of durability, the way etcd batches proposals into one WAL sync.
   */
  private write<T>(fn: (batch: WriteBatch) => T): Promise<{ result: T; revision: number }> {
    this.ensureOpen();
    return new Promise((resolve, reject) => {
      this.pending.push({ run: fn, resolve: resolve as PendingWrite['resolve'], reject });
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flushWrites());
      }
    });
  }

  private flushWrites(): void {
    this.flushScheduled = false;
    const queue = this.pending;
    this.pending = [];
    if (queue.length === 0) return;
    const outcomes: ({ ok: true; result: unknown; batch: WriteBatch } | { ok: false; err: unknown })[] = [];
    try {
      this.db
        .transaction(() => {
          for (const w of queue) {
            try {
              outcomes.push({ ok: true, ...this.applyRequest(w.run) });
            } catch (err) {
              // Not swallowed: handed to this request's caller below, after the commit.
              outcomes.push({ ok: false, err });
            }
          }
        })
        .exclusive();
    } catch (err) {
      // The commit itself failed (I/O error, disk full): no request in the group is durable.
      for (const w of queue) w.reject(err);
      return;
    }
    queue.forEach((w, i) => {
      const out = outcomes[i];
      if (out === undefined) throw new Error('embedded store: group commit lost track of a request');
      if (!out.ok) {
        w.reject(out.err);
        return;
      }
      this.hub.publish(out.batch.events);
      w.resolve({ result: out.result, revision: out.batch.revision });
    });
  }

  /** Applies one request in a savepoint (a nested better-sqlite3 transaction). */
  private applyRequest<T>(fn: (batch: WriteBatch) => T): { result: T; batch: WriteBatch } {
    return this.db.transaction(() => {
      const b = new WriteBatch(this, this.meta('revision'));
      const r = fn(b);
      if (b.events.length > 0) this.stmts.setMeta.run(b.revision, 'revision');
      return { result: r, batch: b };
    })();
  }

  /**
   * Commits one internal write at once, outside the queue: lease expiry on
   * open and from the timer, which have no caller waiting on a promise.
   */
  private writeNow(fn: (batch: WriteBatch) => void): void {
    const { batch } = this.db.transaction(() => this.applyRequest(fn)).exclusive();
    this.hub.publish(batch.events);
  }

  private applyOps(batch: WriteBatch, ops: TxnOp[]): void {
    for (const op of ops) {
      if (op.type === 'put') batch.put(op.key, op.value, op.lease ?? NO_LEASE);
      else if (op.type === 'delete') batch.delete(op.key);
      else batch.deletePrefix(op.prefix);
    }
  }

  private holds(c: Compare): boolean {
    const row = this.rowFor(c.key);
    switch (c.target) {
      case 'exists':
        return (row !== undefined) === c.value;
      case 'value':
        // etcd: a value compare against a missing key is false whatever the operator.
        if (row === undefined) return false;
        return compareOrder(c.op, Buffer.compare(Buffer.from(row.value, 'utf8'), Buffer.from(c.value, 'utf8')));
      case 'modRevision':
        return compareOrder(c.op, Math.sign((row?.mod_rev ?? 0) - c.value));
      case 'createRevision':
        return compareOrder(c.op, Math.sign((row?.create_rev ?? 0) - c.value));
      case 'version':
        return compareOrder(c.op, Math.sign((row?.version ?? 0) - c.value));
    }
  }

  // ---- Backend --------------------------------------------------------------------

  async get(key: string): Promise<KeyValue | undefined> {
    validateKey(key);
    this.ensureOpen();
    const row = this.rowFor(key);
    return row === undefined ? undefined : toKeyValue(row);
  }

  async list(prefix: string): Promise<ListResult> {
    validatePrefix(prefix);
    this.ensureOpen();
    const end = prefixRangeEnd(prefix);
    return this.db.transaction(() => {
      const rows = end === undefined ? this.stmts.rangeOpen.all(prefix) : this.stmts.rangeBounded.all(prefix, end);
      return { revision: this.meta('revision'), kvs: rows.map(toKeyValue) };
    })();
  }

  async put(key: string, value: string, options: PutOptions = {}): Promise<PutResult> {
    validateKey(key);
    validateValue(value);
    const lease = options.lease ?? NO_LEASE;
    validateLeaseId(lease);
    const { result, revision } = await this.write((b) => b.put(key, value, lease));
    return { revision, kv: result };
  }

  async delete(key: string): Promise<DeleteResult> {
    validateKey(key);
    const { result, revision } = await this.write((b) => b.delete(key));
    return { revision, deleted: result ? 1 : 0 };
  }

  async deletePrefix(prefix: string): Promise<DeleteResult> {
    validateDeletePrefix(prefix);
    const { result, revision } = await this.write((b) => b.deletePrefix(prefix));
    return { revision, deleted: result };
  }

  async txn(request: TxnRequest): Promise<TxnResult> {
    validateTxn(request);
    const { result, revision } = await this.write((b) => {
      const succeeded = request.compare.every((c) => this.holds(c));
      this.applyOps(b, succeeded ? request.success : (request.failure ?? []));
      return succeeded;
    });
    return { succeeded: result, revision };
  }

  async grantLease(ttlSeconds: number): Promise<Lease> {
    validateLeaseTtl(ttlSeconds);
    const { result: id } = await this.write(() => {
      const n = this.meta('next_lease');
      this.stmts.setMeta.run(n + 1, 'next_lease');
      const leaseId = String(n);
      this.stmts.insertLease.run({ id: leaseId, ttl: ttlSeconds, deadline_ms: Date.now() + ttlSeconds * 1000 });
      return leaseId;
    });
    return { id, ttl: ttlSeconds };
  }

  async keepAlive(id: LeaseId): Promise<number> {
    validateLeaseId(id);
    const { result } = await this.write(() => {
      // An overdue lease is reported gone, never revived (etcd does the same);
      // the timer deletes its keys within one check interval.
      if (!this.leaseAlive(id)) throw new LeaseNotFoundError(id);
      const lease = this.stmts.getLease.get(id) as LeaseRow;
      this.stmts.touchLease.run(Date.now() + lease.ttl * 1000, id);
      return lease.ttl;
    });
    return result;
  }

  async revokeLease(id: LeaseId): Promise<void> {
    validateLeaseId(id);
    await this.write((b) => this.revoke(b, id));
  }

  private revoke(b: WriteBatch, id: LeaseId): void {
    if (this.stmts.deleteLease.run(id).changes === 0) throw new LeaseNotFoundError(id);
    for (const { key } of this.stmts.keysOfLease.all(id)) b.delete(key);
  }

  /** Ends every lease past its deadline, each in its own revision as etcd does. */
  private expireLeases(): void {
    for (const { id } of this.stmts.expiredLeases.all(Date.now())) {
      this.writeNow((b) => this.revoke(b, id));
      this.options.logger.debug({ lease: id }, 'kvstore lease expired');
    }
  }

  private maintain(): void {
    if (this.closed) return;
    try {
      this.expireLeases();
      const rev = this.meta('revision');
      const keep = this.options.historyRevisions;
      // Compact in steps of 10% so the DELETE runs rarely, not after every write.
      if (rev - this.meta('compact_revision') > keep + Math.ceil(keep / 10)) this.compactTo(rev - keep);
    } catch (err) {
      // A timer has no caller to throw to; the error is logged and the next tick retries.
      this.options.logger.error({ err }, 'kvstore embedded maintenance failed');
    }
  }

  watch(prefix: string, options: WatchOptions, listener: WatchListener): Watch {
    validatePrefix(prefix);
    if (options.fromRevision !== undefined) validateRevision(options.fromRevision, 'watch fromRevision');
    this.ensureOpen();
    const current = this.meta('revision');
    const from = options.fromRevision !== undefined && options.fromRevision > 0 ? options.fromRevision : current + 1;
    const w = new EmbeddedWatch(this.hub, prefix, from, listener);
    const compacted = this.meta('compact_revision');
    if (from < compacted) {
      w.fail(new CompactedError(from, compacted));
      return w;
    }
    if (from <= current) {
      const end = prefixRangeEnd(prefix);
      const rows = end === undefined ? this.stmts.historyOpen.all(from, prefix) : this.stmts.historyBounded.all(from, prefix, end);
      w.enqueue(rows.map(toEvent));
    }
    // Same synchronous tick as the history read: no commit can fall in between.
    this.hub.add(w);
    return w;
  }

  async compact(revision: number): Promise<void> {
    validateRevision(revision, 'compact revision');
    this.ensureOpen();
    const current = this.meta('revision');
    if (revision > current) throw new InvalidArgumentError(`compact revision ${revision} is in the future (current ${current})`);
    const compacted = this.meta('compact_revision');
    if (revision <= compacted) throw new CompactedError(revision, compacted);
    this.compactTo(revision);
  }

  private compactTo(revision: number): void {
    this.db.transaction(() => {
      this.stmts.compactLog.run(revision);
      this.stmts.setMeta.run(revision, 'compact_revision');
    }).exclusive();
  }

  async status(): Promise<Status> {
    if (this.closed) return { backend: 'embedded', connected: false, revision: 0, detail: this.options.path };
    return { backend: 'embedded', connected: true, revision: this.meta('revision'), detail: this.options.path };
  }

  /** Runs SQLite's integrity check; 'ok' when the file is sound. */
  integrityCheck(): string {
    this.ensureOpen();
    const rows = this.db.pragma('integrity_check') as { integrity_check: string }[];
    return rows.map((r) => r.integrity_check).join('\n');
  }

  async close(): Promise<void> {
    if (this.closed) return;
    // Requests already accepted are committed, not dropped.
    this.flushWrites();
    this.closed = true;
    clearInterval(this.timer);
    this.hub.closeAll();
    this.db.close();
    this.locked.release();
  }
}
