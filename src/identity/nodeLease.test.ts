import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
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
      const first = await lease.current();
      await backend.revokeLease(first);
      const next = await waitFor('renewal', async () => {
        const id = await lease.current();
        return id !== first ? id : undefined;
      });
      assert.ok(next);
      await lease.stop();
    } finally {
      await store.destroy();
    }
  });
});
