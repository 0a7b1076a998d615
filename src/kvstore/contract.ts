import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { KvstoreErrorCode, isKvstoreError } from './errors.js';
import { casIncrement } from './testing/casIncrement.js';
import type { Backend, Watch, WatchEvent, WatchOptions } from './types.js';
import { MAX_VALUE_BYTES } from './validate.js';

/**
 * The one behaviour suite every kvstore backend must pass (hono's runTest
 * pattern): embedded.test.ts and etcd.test.ts call it with a factory. Each
 * test works under its own random prefix, so the suite also runs against a
 * shared etcd that holds other keys.
 */
export interface ContractSubject {
  backend: Backend;
  /** Releases what the factory set up (temp dirs); the suite closes the backend itself. */
  cleanup?: () => Promise<void>;
}

export type NewBackend = () => Promise<ContractSubject>;

export interface WatchRecorder {
  readonly events: WatchEvent[];
  readonly errors: Error[];
  readonly watch: Watch;
  /** Resolves once at least n events arrived; rejects after timeoutMs. */
  waitForEvents(n: number, timeoutMs?: number): Promise<WatchEvent[]>;
  waitForError(timeoutMs?: number): Promise<Error>;
}

export function recordWatch(backend: Backend, prefix: string, options: WatchOptions = {}): WatchRecorder {
  const events: WatchEvent[] = [];
  const errors: Error[] = [];
  const watch = backend.watch(prefix, options, {
    onEvents: (batch) => events.push(...batch),
    onError: (err) => errors.push(err),
  });
  async function until<T>(what: string, timeoutMs: number, done: () => T | undefined): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = done();
      if (v !== undefined) return v;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; have ${events.length} events`);
      await sleep(10);
    }
  }
  return {
    events,
    errors,
    watch,
    waitForEvents: (n, timeoutMs = 5000) => until(`${n} events`, timeoutMs, () => (events.length >= n ? events.slice() : undefined)),
    waitForError: (timeoutMs = 5000) => until('a watch error', timeoutMs, () => errors[0]),
  };
}

export async function rejectsWithCode(p: Promise<unknown> | (() => unknown), code: string): Promise<void> {
  await assert.rejects(
    async () => (typeof p === 'function' ? p() : p),
    (err: unknown) => {
      assert.ok(isKvstoreError(err), `expected a KvstoreError, got ${String(err)}`);
      assert.equal(err.code, code, err.message);
      return true;
    },
  );
}

export function runBackendContract(name: string, newBackend: NewBackend): void {
  // A suite timeout turns a lost event into a failure instead of a hung run.
  describe(`kvstore contract: ${name}`, { timeout: 60_000 }, () => {
    let subject: ContractSubject;
    let kv: Backend;
    const p = (): string => `contract/${randomUUID()}/`;

    before(async () => {
      subject = await newBackend();
      kv = subject.backend;
    });
    after(async () => {
      await kv.close();
      await subject.cleanup?.();
    });

    it('put and get report create/mod revisions and version', async () => {
      const k = `${p()}a`;
      const first = await kv.put(k, 'one');
      assert.equal(first.kv.createRevision, first.revision);
      assert.equal(first.kv.modRevision, first.revision);
      assert.equal(first.kv.version, 1);
      const second = await kv.put(k, 'two');
      assert.ok(second.revision > first.revision);
      assert.deepEqual(second.kv, { key: k, value: 'two', createRevision: first.revision, modRevision: second.revision, version: 2, lease: '0' });
      assert.deepEqual(await kv.get(k), second.kv);
      assert.equal(await kv.get(`${k}-missing`), undefined);
    });

    it('list returns exactly the keys under a prefix, sorted, with the store revision', async () => {
      const base = p();
      await kv.put(`${base}b`, '2');
      await kv.put(`${base}a`, '1');
      await kv.put(`${base}a/x`, '3');
      await kv.put(`${base.slice(0, -1)}0`, 'outside'); // shares all but the trailing '/'
      const last = await kv.put(`${base}c`, 'ü∂😀');
      const res = await kv.list(base);
      assert.deepEqual(res.kvs.map((e) => [e.key, e.value]), [
        [`${base}a`, '1'],
        [`${base}a/x`, '3'],
        [`${base}b`, '2'],
        [`${base}c`, 'ü∂😀'],
      ]);
      assert.ok(res.revision >= last.revision);
      const all = await kv.list('');
      assert.ok(all.kvs.some((e) => e.key === `${base}a`), 'empty prefix lists everything');
    });

    it('delete removes one key; deleting a missing key changes nothing', async () => {
      const k = `${p()}d`;
      const put = await kv.put(k, 'v');
      const del = await kv.delete(k);
      assert.equal(del.deleted, 1);
      assert.ok(del.revision > put.revision);
      assert.equal(await kv.get(k), undefined);
      const again = await kv.delete(k);
      assert.equal(again.deleted, 0);
      const reborn = await kv.put(k, 'v2');
      assert.equal(reborn.kv.version, 1, 'a deleted key starts over');
      assert.equal(reborn.kv.createRevision, reborn.revision);
    });

    it('deletePrefix removes every key under the prefix in one revision', async () => {
      const base = p();
      for (const s of ['a', 'b', 'c']) await kv.put(`${base}${s}`, s);
      await kv.put(`${base.slice(0, -1)}~keep`, 'x');
      const rec = recordWatch(kv, base);
      await rec.watch.ready;
      const res = await kv.deletePrefix(base);
      assert.equal(res.deleted, 3);
      const events = await rec.waitForEvents(3);
      assert.deepEqual(events.map((e) => [e.type, e.key, e.modRevision]), ['a', 'b', 'c'].map((s) => ['delete', `${base}${s}`, res.revision]));
      assert.equal((await kv.list(base)).kvs.length, 0);
      assert.ok(await kv.get(`${base.slice(0, -1)}~keep`));
      await rec.watch.close();
    });

    it('txn compares value, revisions, version and existence, and applies one branch atomically', async () => {
      const base = p();
      const k = `${base}k`;
      const created = await kv.txn({ compare: [{ key: k, target: 'exists', value: false }], success: [{ type: 'put', key: k, value: 'v1' }] });
      assert.equal(created.succeeded, true);
      const again = await kv.txn({ compare: [{ key: k, target: 'exists', value: false }], success: [{ type: 'put', key: k, value: 'nope' }] });
      assert.equal(again.succeeded, false);
      assert.equal((await kv.get(k))?.value, 'v1');

      const cur = await kv.get(k);
      assert.ok(cur);
      const multi = await kv.txn({
        compare: [
          { key: k, target: 'value', value: 'v1' },
          { key: k, target: 'modRevision', value: cur.modRevision },
          { key: k, target: 'createRevision', value: cur.createRevision },
          { key: k, target: 'version', op: '<', value: 5 },
          { key: `${base}missing`, target: 'version', value: 0 },
        ],
        success: [
          { type: 'put', key: k, value: 'v2' },
          { type: 'put', key: `${base}other`, value: 'o' },
        ],
        failure: [{ type: 'put', key: `${base}failed`, value: 'f' }],
      });
      assert.equal(multi.succeeded, true);
      const after1 = await kv.list(base);
      assert.deepEqual(after1.kvs.map((e) => [e.key, e.value, e.modRevision]), [
        [k, 'v2', multi.revision],
        [`${base}other`, 'o', multi.revision],
      ]);

      const stale = await kv.txn({
        compare: [{ key: k, target: 'modRevision', value: cur.modRevision }],
        success: [{ type: 'delete', key: k }],
        failure: [{ type: 'put', key: `${base}failed`, value: 'f' }, { type: 'delete', key: `${base}other` }],
      });
      assert.equal(stale.succeeded, false);
      assert.equal((await kv.get(k))?.value, 'v2');
      assert.equal((await kv.get(`${base}failed`))?.value, 'f');
      assert.equal(await kv.get(`${base}other`), undefined);

      // etcd: any value compare on a missing key is false, even "!=".
      const missing = await kv.txn({ compare: [{ key: `${base}none`, target: 'value', op: '!=', value: 'x' }], success: [] });
      assert.equal(missing.succeeded, false);
    });

    it('CAS increments from concurrent tasks lose no update', async () => {
      const k = `${p()}counter`;
      const tasks = 8;
      const each = 20;
      await Promise.all(
        Array.from({ length: tasks }, async () => {
          for (let i = 0; i < each; i++) await casIncrement(kv, k);
        }),
      );
      const final = await kv.get(k);
      assert.equal(final?.value, String(tasks * each));
      assert.equal(final?.version, tasks * each);
    });

    it('leases: keep-alive, revoke deletes keys, unknown leases are refused', async () => {
      const base = p();
      const lease = await kv.grantLease(30);
      assert.ok(lease.ttl >= 30);
      const put = await kv.put(`${base}a`, 'x', { lease: lease.id });
      assert.equal(put.kv.lease, lease.id);
      assert.equal((await kv.get(`${base}a`))?.lease, lease.id);
      await kv.txn({ compare: [], success: [{ type: 'put', key: `${base}b`, value: 'y', lease: lease.id }] });
      assert.ok((await kv.keepAlive(lease.id)) >= 30);
      const rec = recordWatch(kv, base);
      await rec.watch.ready;
      await kv.revokeLease(lease.id);
      const events = await rec.waitForEvents(2);
      assert.deepEqual(events.map((e) => [e.type, e.key]).sort(), [['delete', `${base}a`], ['delete', `${base}b`]]);
      assert.equal((await kv.list(base)).kvs.length, 0);
      await rejectsWithCode(kv.keepAlive(lease.id), KvstoreErrorCode.LEASE_NOT_FOUND);
      await rejectsWithCode(kv.revokeLease(lease.id), KvstoreErrorCode.LEASE_NOT_FOUND);
      await rejectsWithCode(kv.put(`${base}c`, 'z', { lease: lease.id }), KvstoreErrorCode.LEASE_NOT_FOUND);
      await rec.watch.close();
    });

    it('an expiring lease takes its keys and watches see the deletions', async () => {
      const base = p();
      const lease = await kv.grantLease(1);
      await kv.put(`${base}ip`, '10.0.0.1', { lease: lease.id });
      await kv.put(`${base}keep`, 'no lease');
      const rec = recordWatch(kv, base);
      await rec.watch.ready;
      // etcd rounds tiny TTLs up to its minimum (~2 s) and checks expiry twice a second.
      const events = await rec.waitForEvents(1, 10_000);
      assert.deepEqual(events.map((e) => [e.type, e.key]), [['delete', `${base}ip`]]);
      assert.equal(await kv.get(`${base}ip`), undefined);
      assert.equal((await kv.get(`${base}keep`))?.value, 'no lease');
      await rejectsWithCode(kv.keepAlive(lease.id), KvstoreErrorCode.LEASE_NOT_FOUND);
      await rec.watch.close();
    });

    it('watch delivers ordered put/delete events, and replays from a past revision', async () => {
      const base = p();
      const rec = recordWatch(kv, base);
      await rec.watch.ready;
      const r1 = await kv.put(`${base}a`, '1');
      await kv.put(`${base}b`, '2');
      await kv.put('contract-outside', 'not watched');
      await kv.delete(`${base}a`);
      await kv.put(`${base}b`, '3');
      const live = await rec.waitForEvents(4);
      assert.deepEqual(live.map((e) => [e.type, e.key, e.value]), [
        ['put', `${base}a`, '1'],
        ['put', `${base}b`, '2'],
        ['delete', `${base}a`, ''],
        ['put', `${base}b`, '3'],
      ]);
      for (let i = 1; i < live.length; i++) assert.ok((live[i] as WatchEvent).modRevision > (live[i - 1] as WatchEvent).modRevision);
      assert.equal(live[3]?.version, 2);
      await rec.watch.close();

      const replay = recordWatch(kv, base, { fromRevision: r1.revision });
      const again = await replay.waitForEvents(4);
      await sleep(100);
      assert.deepEqual(replay.events, again, 'no extra events');
      assert.deepEqual(again, live);
      await replay.watch.close();
    });

    it('a closed watch resumes from nextRevision with every missed event exactly once', async () => {
      const base = p();
      const first = recordWatch(kv, base);
      await first.watch.ready;
      for (let i = 0; i < 3; i++) await kv.put(`${base}k${i}`, `v${i}`);
      await first.waitForEvents(3);
      const resumeFrom = first.watch.nextRevision;
      await first.watch.close();
      // Changes while nobody watches.
      for (let i = 3; i < 6; i++) await kv.put(`${base}k${i}`, `v${i}`);
      await kv.delete(`${base}k0`);
      const second = recordWatch(kv, base, { fromRevision: resumeFrom });
      await second.watch.ready;
      await kv.put(`${base}k6`, 'v6');
      const got = await second.waitForEvents(5);
      await sleep(100);
      assert.deepEqual(second.events.map((e) => [e.type, e.key]), [
        ['put', `${base}k3`],
        ['put', `${base}k4`],
        ['put', `${base}k5`],
        ['delete', `${base}k0`],
        ['put', `${base}k6`],
      ]);
      assert.equal(second.watch.nextRevision, (got[got.length - 1] as WatchEvent).modRevision + 1);
      await second.watch.close();
    });

    it('watching compacted history fails with KVSTORE_COMPACTED', async () => {
      const base = p();
      const old = await kv.put(`${base}a`, '1');
      const latest = await kv.put(`${base}a`, '2');
      await kv.compact(latest.revision);
      const rec = recordWatch(kv, base, { fromRevision: old.revision });
      const err = await rec.waitForError();
      assert.ok(isKvstoreError(err));
      assert.equal(err.code, KvstoreErrorCode.COMPACTED);
      await rejectsWithCode(kv.compact(old.revision), KvstoreErrorCode.COMPACTED);
      await rejectsWithCode(kv.compact(latest.revision + 1_000_000), KvstoreErrorCode.INVALID_ARGUMENT);
      // The compacted revision itself is still readable history.
      const ok = recordWatch(kv, base, { fromRevision: latest.revision });
      assert.equal((await ok.waitForEvents(1))[0]?.value, '2');
      await rec.watch.close();
      await ok.watch.close();
    });

    it('rejects bad input with typed errors', async () => {
      await rejectsWithCode(kv.put('', 'x'), KvstoreErrorCode.INVALID_KEY);
      await rejectsWithCode(kv.get(''), KvstoreErrorCode.INVALID_KEY);
      await rejectsWithCode(kv.put('a\0b', 'x'), KvstoreErrorCode.INVALID_KEY);
      await rejectsWithCode(kv.put('k'.repeat(5000), 'x'), KvstoreErrorCode.INVALID_KEY);
      await rejectsWithCode(kv.put(`${p()}big`, 'x'.repeat(MAX_VALUE_BYTES + 1)), KvstoreErrorCode.VALUE_TOO_LARGE);
      await rejectsWithCode(kv.deletePrefix(''), KvstoreErrorCode.INVALID_KEY);
      await rejectsWithCode(kv.grantLease(0), KvstoreErrorCode.INVALID_ARGUMENT);
      await rejectsWithCode(kv.keepAlive('not-a-number'), KvstoreErrorCode.INVALID_ARGUMENT);
      const k = `${p()}dup`;
      await rejectsWithCode(
        kv.txn({ compare: [], success: [{ type: 'put', key: k, value: '1' }, { type: 'put', key: k, value: '2' }] }),
        KvstoreErrorCode.INVALID_ARGUMENT,
      );
      assert.throws(() => kv.watch('', { fromRevision: -1 }, { onEvents: () => undefined, onError: () => undefined }), /non-negative/);
      // A value of exactly the limit is accepted.
      const big = await kv.put(`${p()}${'m'.repeat(4000)}`, 'x'.repeat(MAX_VALUE_BYTES));
      assert.ok(big.revision > 0);
    });

    it('status reports the backend, connection and current revision', async () => {
      const put = await kv.put(`${p()}s`, 'v');
      const st = await kv.status();
      assert.equal(st.backend, kv.kind);
      assert.equal(st.connected, true);
      assert.ok(st.revision >= put.revision);
    });

    it('a closed backend refuses calls with KVSTORE_CLOSED', async () => {
      const other = await newBackend();
      const k = `${p()}c`;
      await other.backend.put(k, 'v');
      await other.backend.close();
      await other.backend.close(); // idempotent
      await rejectsWithCode(other.backend.get(k), KvstoreErrorCode.CLOSED);
      assert.equal((await other.backend.status()).connected, false);
      await other.cleanup?.();
    });
  });
}
