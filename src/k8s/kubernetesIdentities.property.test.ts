import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import fc from 'fast-check';
import { FakeKubeApi } from '../../test/support/fakeKubeApi.js';
import { testLogger } from '../identity/testing/cluster.js';
import { LabelSet } from '../labels/index.js';
import { KubernetesIdentities } from './kubernetesIdentities.js';
import { identityOfObject, TENDRIL_IDENTITY_GROUP, TENDRIL_IDENTITY_VERSION } from './tendrilIdentity.js';

/**
 * Racing stores over one API server, in a range of 12 numbers so label sets
 * collide, wrap around and meet numbers other label sets (or unreadable
 * objects) already hold: whatever the interleaving, each label set ends
 * with one object and one number on every store, and no two label sets share one.
 */
const MIN = 300;
const MAX = 311;
const SETS = Array.from({ length: 6 }, (_, i) => LabelSet.parse([`k8s:app=p${i}`]));

const caseArb = fc.record({
  /** Numbers occupied before the race: by an outside label set, or by an unreadable object. */
  occupied: fc.uniqueArray(fc.record({ id: fc.integer({ min: MIN, max: MAX }), readable: fc.boolean() }), { selector: (o) => o.id, maxLength: 5 }),
  /** Per store, the label sets it asks for, all at once. */
  asks: fc.array(fc.array(fc.integer({ min: 0, max: SETS.length - 1 }), { minLength: 1, maxLength: 6 }), { minLength: 2, maxLength: 4 }),
});

describe('Kubernetes identities: racing stores (property)', () => {
  it('one object and one number per label set, distinct across label sets, on every store', async () => {
    await fc.assert(
      fc.asyncProperty(caseArb, async ({ occupied, asks }) => {
        const fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
        const stores: KubernetesIdentities[] = [];
        try {
          for (const o of occupied) {
            fake.create('tendrilidentities', {
              apiVersion: `${TENDRIL_IDENTITY_GROUP}/${TENDRIL_IDENTITY_VERSION}`,
              kind: 'TendrilIdentity',
              metadata: { name: String(o.id) },
              'security-labels': o.readable ? { 'k8s:app': `outsider-${o.id}` } : { unreadable: 'x' },
            });
          }
          const kc = new KubeConfig();
          kc.loadFromFile(await fake.kubeconfig());
          for (let i = 0; i < asks.length; i++) stores.push(new KubernetesIdentities({ kubeConfig: kc, logger: testLogger, minId: MIN, maxId: MAX }));
          await Promise.all(stores.map((s) => s.start()));
          const results = await Promise.all(asks.flatMap((sets, i) => sets.map(async (set) => ({ set, id: (await stores[i]!.acquire(SETS[set]!)).id }))));
          const idOfSet = new Map<number, number>();
          for (const r of results) {
            const seen = idOfSet.get(r.set);
            if (seen === undefined) idOfSet.set(r.set, r.id);
            else assert.equal(r.id, seen, `label set ${r.set}: ${seen} and ${r.id}`);
          }
          assert.equal(new Set(idOfSet.values()).size, idOfSet.size, 'distinct label sets, distinct numbers');
          for (const id of idOfSet.values()) assert.ok(!occupied.some((o) => o.id === id), `${id} was already taken`);
          const objects = (fake.list('tendrilidentities') as KubernetesObject[]).map((o) => identityOfObject(o)).filter((i) => typeof i !== 'string');
          for (const [set, id] of idOfSet) {
            const holding = objects.filter((i) => i.labels.equals(SETS[set]!));
            assert.deepEqual(holding.map((i) => i.id), [id], `label set ${set}: one object`);
          }
        } finally {
          for (const s of stores) await s.stop();
          await fake.stop();
        }
      }),
      { numRuns: 30 },
    );
  });
});
