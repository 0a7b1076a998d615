import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { LabelSet } from '../labels/index.js';
import type { Backend } from '../kvstore/types.js';
import { IdentityAllocator, IdentityKeys, NodeLease } from './index.js';
import { embeddedStore, testLogger, uniquePrefix, type TestStore } from './testing/cluster.js';

/**
 * Random concurrent allocate/release batches on two nodes against a model of
 * reference counts: equal labels agree across nodes, different labels never
 * share a number, reference counts match, and once every reference is
 * released the store holds no identity keys at all.
 */
const SETS = Array.from({ length: 4 }, (_, i) => LabelSet.parse([`k8s:app=p${i}`]));

type Op = { kind: 'alloc' | 'release'; node: number; set: number };
const opArb: fc.Arbitrary<Op> = fc.record({
  kind: fc.constantFrom('alloc' as const, 'release' as const),
  node: fc.integer({ min: 0, max: 1 }),
  set: fc.integer({ min: 0, max: SETS.length - 1 }),
});

describe('identity allocator: random concurrent allocate/release (property)', () => {
  let store: TestStore;
  let backend: Backend;
  before(async () => {
    store = await embeddedStore();
    backend = await store.connect();
  });
  after(async () => {
    await store.destroy();
  });

  it('agrees with a reference-count model and leaves nothing behind', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.array(opArb, { minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 6 }), async (batches) => {
        const prefix = uniquePrefix('property');
        const nodes = [0, 1].map((i) => {
          const lease = new NodeLease(backend, { ttlSeconds: 30, logger: testLogger });
          return { lease, allocator: new IdentityAllocator({ backend, nodeName: `node-${i}`, lease, keyPrefix: prefix, gcIntervalMs: 0, logger: testLogger }) };
        });
        try {
          for (const n of nodes) await n.allocator.start();
          const refs = [new Array<number>(SETS.length).fill(0), new Array<number>(SETS.length).fill(0)];
          const ids = new Map<number, number>(); // set → id while anyone holds it
          for (const batch of batches) {
            await Promise.all(
              batch.map(async (op) => {
                const a = nodes[op.node]!.allocator;
                if (op.kind === 'alloc') {
                  const { identity } = await a.allocate(SETS[op.set]!);
                  refs[op.node]![op.set]!++;
                  const known = ids.get(op.set);
                  if (known !== undefined && refs[0]![op.set]! + refs[1]![op.set]! > 1) assert.equal(identity.id, known);
                  ids.set(op.set, identity.id);
                } else if (refs[op.node]![op.set]! > 0) {
                  refs[op.node]![op.set]!--;
                  await a.release(ids.get(op.set)!);
                }
              }),
            );
            for (let s = 0; s < SETS.length; s++) {
              for (const i of [0, 1]) {
                const held = refs[i]![s]!;
                const id = nodes[i]!.allocator.lookupByLabels(SETS[s]!)?.id;
                if (held > 0) assert.equal(nodes[i]!.allocator.references(id!), held);
              }
            }
            const live = [...ids.entries()].filter(([s]) => refs[0]![s]! + refs[1]![s]! > 0).map(([, id]) => id);
            assert.equal(new Set(live).size, live.length, 'distinct label sets, distinct numbers');
          }
          for (const i of [0, 1]) {
            for (let s = 0; s < SETS.length; s++) {
              while (refs[i]![s]! > 0) {
                refs[i]![s]!--;
                await nodes[i]!.allocator.release(ids.get(s)!);
              }
            }
          }
          const left = await backend.list(new IdentityKeys(prefix).prefix);
          assert.deepEqual(left.kvs.map((kv) => kv.key), []);
        } finally {
          for (const n of nodes) {
            await n.allocator.close();
            await n.lease.stop({ revoke: true });
          }
        }
      }),
      { numRuns: 25 },
    );
  });
});
