import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { KvstoreErrorCode, isKvstoreError } from '../kvstore/errors.js';
import { IdentityError, NodeLease, withLease } from './index.js';
import { embeddedStore, testLogger, waitFor } from './testing/cluster.js';

describe('NodeLease', () => {
  test('concurrent writers that lost the lease share one renewal', async () => {
    const store = await embeddedStore();
    try {
      const backend = await store.connect();
      const lease = new NodeLease(backend, { ttlSeconds: 5, keepAliveMs: 60_000, logger: testLogger });
      const renewed: string[] = [];
      lease.onRenewed((id) => renewed.push(id));
      const first = await lease.current();
      await backend.revokeLease(first);
      const ids = await Promise.all(
        Array.from({ length: 5 }, (_, i) => withLease(lease, async (id) => (await backend.put(`test/lease/${i}`, 'v', { lease: id })).kv.lease)),
      );
      assert.equal(new Set(ids).size, 1);
      assert.notEqual(ids[0], first);
      assert.deepEqual(renewed, [ids[0]]);
      await lease.stop({ revoke: true });
      assert.equal(await backend.get('test/lease/0'), undefined, 'revoke deletes the keys');
      await assert.rejects(lease.current(), (err: unknown) => err instanceof IdentityError);
    } finally {
      await store.destroy();
    }
  });

  test('keepalive notices a lost lease and grants a new one', async () => {
    const store = await embeddedStore();
    try {
      const backend = await store.connect();
      const lease = new NodeLease(backend, { ttlSeconds: 5, keepAliveMs: 50, logger: testLogger });
      const renewed: string[] = [];
      lease.onRenewed((id) => renewed.push(id));
      const first = await lease.current();
      await backend.revokeLease(first);
      const next = await waitFor('renewal', async () => {
        const id = await lease.current();
        return id !== first ? id : undefined;
      });
      // The keepalive announced the renewal once (writers re-put their keys on it)…
      assert.deepEqual(renewed, [next]);
      // …and the new lease is one the store holds: keys can hang off it.
      const put = await backend.put('test/lease/renewed', 'v', { lease: next });
      assert.equal(put.kv.lease, next);
      await assert.rejects(backend.put('test/lease/stale', 'v', { lease: first }), (err: unknown) => isKvstoreError(err) && err.code === KvstoreErrorCode.LEASE_NOT_FOUND);
      await lease.stop({ revoke: true });
      assert.equal(await backend.get('test/lease/renewed'), undefined, 'the renewed lease carried the key');
    } finally {
      await store.destroy();
    }
  });
});
