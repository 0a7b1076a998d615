import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LabelSet } from '../../labels/index.js';
import type { Backend } from '../../kvstore/types.js';
import { IdentityAllocator } from '../allocator.js';
import { IdentityError, IdentityErrorCode } from '../errors.js';
import { IdentityKeys } from '../keys.js';
import { NodeLease } from '../nodeLease.js';
import { countingBackend, testLogger, uniquePrefix, waitFor, type TestStore } from './cluster.js';
import { runAllocatorContract, web, db, type ContractHarness } from './allocatorContract.js';

/**
 * The identity proof list, run against every kvstore backend (hono's
 * runTest pattern): embedded.test.ts and etcd.test.ts call it. The contract
 * every store keeps (allocatorContract.ts) runs first; the tests below are
 * what only the kvstore does (usage keys on node leases, GC by the agents).
 */
export interface TestNode {
  name: string;
  backend: Backend;
  lease: NodeLease;
  allocator: IdentityAllocator;
  /** Dies without a word: keepalives stop, nothing is revoked or deleted. */
  crash(): Promise<void>;
}

const LEASE_TTL = 2;
/** The node lease's own calls: the node's, not the allocator's. */
const LEASE_METHODS = new Set(['grantLease', 'keepAlive', 'revokeLease']);

/** The contract's view of a kvstore: one key prefix per cluster, one client (etcd: one connection) per node. */
function kvstoreHarness(newStore: () => Promise<TestStore>): () => Promise<ContractHarness> {
  return async () => {
    const store = await newStore();
    const opened: Array<{ allocator: IdentityAllocator; lease: NodeLease }> = [];
    return {
      cluster: async (what) => {
        const prefix = uniquePrefix(what);
        return {
          node: async (nodeName) => {
            const counted = countingBackend(await store.connect());
            const lease = new NodeLease(counted.backend, { ttlSeconds: LEASE_TTL, keepAliveMs: 300, logger: testLogger });
            const allocator = new IdentityAllocator({ backend: counted.backend, nodeName, lease, keyPrefix: prefix, gcIntervalMs: 0, logger: testLogger });
            opened.push({ allocator, lease });
            await allocator.start();
            const calls = () => [...counted.calls].filter(([m]) => !LEASE_METHODS.has(m)).reduce((s, [, v]) => s + v, 0);
            return { name: nodeName, allocator, roundTrips: calls };
          },
        };
      },
      destroy: async () => {
        for (const o of opened) {
          await o.allocator.close();
          await o.lease.stop();
        }
        await store.destroy();
      },
    };
  };
}

export function runAllocatorSuite(name: string, newStore: () => Promise<TestStore>): void {
  runAllocatorContract(`kvstore ${name}`, kvstoreHarness(newStore));
  describe(`identity allocator: ${name}`, () => {
    let store: TestStore;
    const nodes: TestNode[] = [];

    before(async () => {
      store = await newStore();
    });
    after(async () => {
      for (const n of nodes) {
        await n.allocator.close();
        await n.lease.stop();
      }
      await store.destroy();
    });

    async function node(nodeName: string, prefix: string): Promise<TestNode> {
      const backend = await store.connect();
      const lease = new NodeLease(backend, { ttlSeconds: LEASE_TTL, keepAliveMs: 300, logger: testLogger });
      const allocator = new IdentityAllocator({ backend, nodeName, lease, keyPrefix: prefix, gcIntervalMs: 0, logger: testLogger });
      await allocator.start();
      const n: TestNode = {
        name: nodeName,
        backend,
        lease,
        allocator,
        crash: async () => {
          await lease.stop({ revoke: false });
          await allocator.close();
        },
      };
      nodes.push(n);
      return n;
    }

    async function trio(what: string): Promise<{ prefix: string; a: TestNode; b: TestNode; c: TestNode }> {
      const prefix = uniquePrefix(what);
      const [a, b, c] = await Promise.all([node('node-a', prefix), node('node-b', prefix), node('node-c', prefix)]);
      return { prefix, a, b, c };
    }

    it('an identity is released when its last user on the last node goes', async () => {
      const { prefix, a, b, c } = await trio('release');
      const keys = new IdentityKeys(prefix);
      const { identity } = await a.allocator.allocate(web);
      await b.allocator.allocate(web);
      await b.allocator.allocate(web);
      await waitFor('identity on c', () => c.allocator.lookupById(identity.id));
      assert.equal(await a.allocator.release(identity), true);
      assert.ok(await a.backend.get(keys.id(identity.id)), 'still used by node b');
      assert.equal(await b.allocator.release(identity), false);
      assert.equal(await b.allocator.release(identity), true);
      assert.equal(await a.backend.get(keys.id(identity.id)), undefined);
      assert.equal(await a.backend.get(keys.index(web.toString())), undefined);
      await waitFor('identity gone on c', () => c.allocator.lookupById(identity.id) === undefined);
      await assert.rejects(b.allocator.release(identity), (err: unknown) => err instanceof IdentityError && err.code === IdentityErrorCode.NOT_ALLOCATED);
    });

    it("a dead node's expired lease releases the identities only it held", async () => {
      const prefix = uniquePrefix('dead');
      const [a, b] = await Promise.all([node('node-a', prefix), node('node-b', prefix)]);
      const onlyA = LabelSet.parse(['k8s:app=lonely']);
      const { identity: lonely } = await a.allocator.allocate(onlyA);
      const { identity: shared } = await a.allocator.allocate(web);
      await b.allocator.allocate(web);
      assert.deepEqual((await b.allocator.gc()).deleted, [], 'nothing to collect while node a lives');
      await a.crash();
      const keys = new IdentityKeys(prefix);
      await waitFor('node a usage keys to expire', async () => (await b.backend.list(keys.usagePrefix(onlyA.toString()))).kvs.length === 0, (LEASE_TTL + 5) * 1000);
      const res = await b.allocator.gc();
      assert.deepEqual(res.deleted, [lonely.id]);
      assert.equal(await b.backend.get(keys.id(lonely.id)), undefined);
      assert.ok(await b.backend.get(keys.id(shared.id)), 'an identity node b still uses survives');
      await waitFor('lonely gone from b', () => b.allocator.lookupById(lonely.id) === undefined);
    });

    it('an agent restart keeps its identity numbers (restore)', async () => {
      const prefix = uniquePrefix('restore');
      const first = await node('node-a', prefix);
      const other = await node('node-b', prefix);
      const { identity: kept } = await first.allocator.allocate(web);
      const { identity: dbId } = await first.allocator.allocate(db);
      await first.crash();
      // Meanwhile the cluster forgets db entirely (lease expiry + GC by node b).
      const keys = new IdentityKeys(prefix);
      await waitFor('usage keys to expire', async () => (await other.backend.list(keys.valuePrefix)).kvs.every((kv) => !kv.key.endsWith('/node-a')), (LEASE_TTL + 5) * 1000);
      await other.allocator.gc();
      assert.equal(await other.backend.get(keys.id(dbId.id)), undefined);
      const again = await node('node-a', prefix);
      const restored = await again.allocator.restore([
        { id: kept.id, labels: web },
        { id: dbId.id, labels: db },
      ]);
      assert.deepEqual(restored.map((i) => i.id), [kept.id, dbId.id]);
    });

    it('a node whose lease was lost writes its usage keys again under a new lease', async () => {
      const prefix = uniquePrefix('relay');
      const n = await node('node-a', prefix);
      const { identity } = await n.allocator.allocate(web);
      const keys = new IdentityKeys(prefix);
      const usageKey = keys.usage(web.toString(), 'node-a');
      const before = await n.backend.get(usageKey);
      assert.ok(before);
      await n.backend.revokeLease(before.lease); // what an expiry during a partition looks like
      const after = await waitFor('usage key rewritten', async () => {
        const kv = await n.backend.get(usageKey);
        return kv !== undefined && kv.lease !== before.lease ? kv : undefined;
      });
      assert.equal(after.value, String(identity.id));
    });

    it('labels too long for a kvstore key are rejected with a clear error', async () => {
      const n = await node('node-a', uniquePrefix('long'));
      const long = LabelSet.from(Array.from({ length: 80 }, (_, i) => LabelSet.parse([`k8s:key-${i}-${'x'.repeat(40)}=${'v'.repeat(60)}`]).toArray()[0]!));
      await assert.rejects(
        n.allocator.allocate(long),
        (err: unknown) => err instanceof IdentityError && err.code === IdentityErrorCode.INVALID_LABELS && err.message.includes('too many or too long'),
      );
    });
  });
}
