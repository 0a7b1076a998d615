import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LabelSet } from '../../labels/index.js';
import type { Backend } from '../../kvstore/types.js';
import { IdentityAllocator } from '../allocator.js';
import { MAX_GLOBAL_IDENTITY, MIN_GLOBAL_IDENTITY, ReservedIdentity } from '../constants.js';
import { IdentityError, IdentityErrorCode } from '../errors.js';
import { IdentityKeys } from '../keys.js';
import { NodeLease } from '../nodeLease.js';
import { countingBackend, testLogger, uniquePrefix, waitFor, type TestStore } from './cluster.js';

/**
 * The identity proof list, run against every kvstore backend (hono's
 * runTest pattern): embedded.test.ts and etcd.test.ts call it.
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

export function runAllocatorSuite(name: string, newStore: () => Promise<TestStore>): void {
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

    async function node(nodeName: string, prefix: string, extra: { counting?: boolean } = {}): Promise<TestNode & { calls?: Map<string, number> }> {
      const raw = await store.connect();
      const counted = extra.counting === true ? countingBackend(raw) : undefined;
      const backend = counted?.backend ?? raw;
      const lease = new NodeLease(backend, { ttlSeconds: LEASE_TTL, keepAliveMs: 300, logger: testLogger });
      const allocator = new IdentityAllocator({ backend, nodeName, lease, keyPrefix: prefix, gcIntervalMs: 0, logger: testLogger });
      await allocator.start();
      const n: TestNode & { calls?: Map<string, number> } = {
        name: nodeName,
        backend,
        lease,
        allocator,
        crash: async () => {
          await lease.stop({ revoke: false });
          await allocator.close();
        },
        ...(counted === undefined ? {} : { calls: counted.calls }),
      };
      nodes.push(n);
      return n;
    }

    async function trio(what: string): Promise<{ prefix: string; a: TestNode; b: TestNode; c: TestNode }> {
      const prefix = uniquePrefix(what);
      const [a, b, c] = await Promise.all([node('node-a', prefix), node('node-b', prefix), node('node-c', prefix)]);
      return { prefix, a, b, c };
    }

    const web = LabelSet.parse(['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop']);
    const db = LabelSet.parse(['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=shop']);

    it('equal labels get the same identity on every node; different labels differ', async () => {
      const { a, b, c } = await trio('equal');
      const [ia, ib, ic] = await Promise.all([a, b, c].map((n) => n.allocator.allocate(web)));
      assert.equal(ia!.identity.id, ib!.identity.id);
      assert.equal(ib!.identity.id, ic!.identity.id);
      assert.ok(ia!.identity.id >= MIN_GLOBAL_IDENTITY && ia!.identity.id <= MAX_GLOBAL_IDENTITY);
      assert.equal(ia!.identity.scope, 'global');
      const idb = await b.allocator.allocate(db);
      assert.notEqual(idb.identity.id, ia!.identity.id);
      // Node C learns of db's identity through its watch, without allocating it.
      const seen = await waitFor('db on node c', () => c.allocator.lookupById(idb.identity.id));
      assert.ok(seen.labels.equals(db));
      assert.equal(c.allocator.lookupByLabels(db)?.id, idb.identity.id);
    });

    it('100 concurrent allocations of one label set from each of three nodes yield one number', async () => {
      const { a, b, c } = await trio('concurrent');
      const labels = LabelSet.parse(['k8s:app=hot', 'k8s:io.kubernetes.pod.namespace=race']);
      const results = await Promise.all(
        [a, b, c].flatMap((n) => Array.from({ length: 100 }, () => n.allocator.allocate(labels))),
      );
      const ids = new Set(results.map((r) => r.identity.id));
      assert.equal(ids.size, 1, `got ${[...ids].join(', ')}`);
      const id = [...ids][0]!;
      for (const n of [a, b, c]) assert.equal(n.allocator.references(id), 100);
      assert.equal(results.filter((r) => r.isNew).length, 3, 'one first reference per node');
    });

    it('many label sets allocated concurrently on three nodes get distinct numbers, agreed everywhere', async () => {
      const { a, b, c } = await trio('many');
      const sets = Array.from({ length: 30 }, (_, i) => LabelSet.parse([`k8s:app=svc-${i}`]));
      const per = await Promise.all([a, b, c].map((n) => Promise.all(sets.map((s) => n.allocator.allocate(s)))));
      for (let i = 0; i < sets.length; i++) {
        assert.equal(per[0]![i]!.identity.id, per[1]![i]!.identity.id);
        assert.equal(per[0]![i]!.identity.id, per[2]![i]!.identity.id);
      }
      assert.equal(new Set(per[0]!.map((r) => r.identity.id)).size, sets.length);
    });

    it('repeat allocations are answered from the local cache without a kvstore round trip', async () => {
      const prefix = uniquePrefix('cache');
      const n = await node('node-a', prefix, { counting: true });
      await n.allocator.allocate(web);
      const before = [...n.calls!.values()].reduce((s, v) => s + v, 0);
      for (let i = 0; i < 50; i++) await n.allocator.allocate(web);
      for (let i = 0; i < 50; i++) await n.allocator.release(n.allocator.lookupByLabels(web)!);
      const afterCalls = [...n.calls!.values()].reduce((s, v) => s + v, 0);
      assert.equal(afterCalls - before, 0);
      assert.equal(n.allocator.references(n.allocator.lookupByLabels(web)!.id), 1);
    });

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

    it('reserved and CIDR labels; bad labels are rejected with clear errors', async () => {
      const n = await node('node-a', uniquePrefix('reserved'));
      assert.equal((await n.allocator.allocate(LabelSet.parse(['reserved:host', 'k8s:node-role=x']))).identity.id, ReservedIdentity.Host);
      assert.equal((await n.allocator.allocate(LabelSet.parse(['reserved:init']))).identity.id, ReservedIdentity.Init);
      assert.equal((await n.allocator.allocate(LabelSet.parse(['reserved:world']))).identity.id, ReservedIdentity.World);
      const cidr = await n.allocator.allocate(LabelSet.parse(['cidr:10.0.0.0/8', 'reserved:world'].slice(0, 1)));
      assert.equal(cidr.identity.scope, 'local');
      assert.equal(n.allocator.lookupById(cidr.identity.id)?.labels.toString(), 'cidr:10.0.0.0/8;');
      const bad: Array<[LabelSet, string]> = [
        [LabelSet.EMPTY, 'at least one label'],
        [LabelSet.parse(['any:app=web']), 'selector'],
        [LabelSet.parse(['reserved:init', 'k8s:app=web']), 'cannot be combined'],
        [LabelSet.from(Array.from({ length: 80 }, (_, i) => LabelSet.parse([`k8s:key-${i}-${'x'.repeat(40)}=${'v'.repeat(60)}`]).toArray()[0]!)), 'too many or too long'],
      ];
      for (const [labels, msg] of bad) {
        await assert.rejects(
          n.allocator.allocate(labels),
          (err: unknown) => err instanceof IdentityError && err.code === IdentityErrorCode.INVALID_LABELS && err.message.includes(msg),
          msg,
        );
      }
      assert.ok(n.allocator.list().some((i) => i.id === ReservedIdentity.Health));
    });
  });
}
