import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LabelSet } from '../../labels/index.js';
import type { IdentityAllocator } from '../allocator.js';
import { MAX_GLOBAL_IDENTITY, MIN_GLOBAL_IDENTITY, ReservedIdentity } from '../constants.js';
import { IdentityError, IdentityErrorCode } from '../errors.js';
import { waitFor } from './cluster.js';

/**
 * The contract every identity allocator keeps, whatever holds the cluster's
 * identities: the kvstore (allocatorSuite.ts, embedded and etcd) and the
 * Kubernetes API (src/k8s/kubernetesIdentities.test.ts, over the fake API
 * server). What only one store does (kvstore usage keys and GC, objects in
 * the API) is tested beside its store.
 */
export interface ContractNode {
  name: string;
  allocator: IdentityAllocator;
  /** Requests this node made to its store so far (cache hits must not add any). */
  roundTrips(): number;
}

export interface ContractCluster {
  /** A started allocator for one node of this cluster. */
  node(name: string): Promise<ContractNode>;
}

export interface ContractHarness {
  /** A cluster no other test shares (a fresh key prefix, a fresh API server). */
  cluster(what: string): Promise<ContractCluster>;
  /** Closes every node and cluster it made. */
  destroy(): Promise<void>;
}

export const web = LabelSet.parse(['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop']);
export const db = LabelSet.parse(['k8s:app=db', 'k8s:io.kubernetes.pod.namespace=shop']);

export function runAllocatorContract(name: string, newHarness: () => Promise<ContractHarness>): void {
  describe(`identity allocator contract: ${name}`, () => {
    let harness: ContractHarness;
    before(async () => {
      harness = await newHarness();
    });
    after(async () => {
      await harness?.destroy();
    });

    async function trio(what: string): Promise<[ContractNode, ContractNode, ContractNode]> {
      const cluster = await harness.cluster(what);
      const [a, b, c] = await Promise.all([cluster.node('node-a'), cluster.node('node-b'), cluster.node('node-c')]);
      return [a!, b!, c!];
    }

    it('equal labels get the same identity on every node; different labels differ', async () => {
      const [a, b, c] = await trio('equal');
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
      const [a, b, c] = await trio('concurrent');
      const labels = LabelSet.parse(['k8s:app=hot', 'k8s:io.kubernetes.pod.namespace=race']);
      const results = await Promise.all([a, b, c].flatMap((n) => Array.from({ length: 100 }, () => n.allocator.allocate(labels))));
      const ids = new Set(results.map((r) => r.identity.id));
      assert.equal(ids.size, 1, `got ${[...ids].join(', ')}`);
      const id = [...ids][0]!;
      for (const n of [a, b, c]) assert.equal(n.allocator.references(id), 100);
      assert.equal(results.filter((r) => r.isNew).length, 3, 'one first reference per node');
      for (const n of [a, b, c]) {
        const seen = await waitFor(`the identity on ${n.name}`, () => n.allocator.list().filter((i) => i.labels.equals(labels)));
        assert.deepEqual(seen.map((i) => i.id), [id], `${n.name} sees one identity for the labels`);
      }
    });

    it('many label sets allocated concurrently on three nodes get distinct numbers, agreed everywhere', async () => {
      const nodes = await trio('many');
      const sets = Array.from({ length: 30 }, (_, i) => LabelSet.parse([`k8s:app=svc-${i}`]));
      const per = await Promise.all(nodes.map((n) => Promise.all(sets.map((s) => n.allocator.allocate(s)))));
      for (let i = 0; i < sets.length; i++) {
        assert.equal(per[0]![i]!.identity.id, per[1]![i]!.identity.id);
        assert.equal(per[0]![i]!.identity.id, per[2]![i]!.identity.id);
      }
      assert.equal(new Set(per[0]!.map((r) => r.identity.id)).size, sets.length);
    });

    it('repeat allocations and releases of a held identity cost no round trip', async () => {
      const n = await (await harness.cluster('cache')).node('node-a');
      await n.allocator.allocate(web);
      const before = n.roundTrips();
      for (let i = 0; i < 50; i++) await n.allocator.allocate(web);
      for (let i = 0; i < 50; i++) await n.allocator.release(n.allocator.lookupByLabels(web)!);
      assert.equal(n.roundTrips() - before, 0);
      assert.equal(n.allocator.references(n.allocator.lookupByLabels(web)!.id), 1);
    });

    it('an identity another node created is joined without creating anything', async () => {
      const [a, b] = await trio('join');
      const { identity } = await a.allocator.allocate(web);
      await waitFor('identity on b', () => b.allocator.lookupById(identity.id));
      const got = await b.allocator.allocate(web);
      assert.equal(got.identity.id, identity.id);
      assert.equal(got.isNew, true, "b's first reference");
      assert.equal(b.allocator.references(identity.id), 1);
    });

    it('release counts references: true with the last, then NOT_ALLOCATED', async () => {
      const n = await (await harness.cluster('release')).node('node-a');
      const { identity } = await n.allocator.allocate(web);
      await n.allocator.allocate(web);
      assert.equal(await n.allocator.release(identity), false);
      assert.equal(await n.allocator.release(identity.id), true);
      assert.equal(n.allocator.references(identity.id), 0);
      await assert.rejects(n.allocator.release(identity), (err: unknown) => err instanceof IdentityError && err.code === IdentityErrorCode.NOT_ALLOCATED);
    });

    it('restore keeps a live identity number and never takes a number that other labels hold', async () => {
      const [a, b] = await trio('restore-live');
      const { identity: w } = await a.allocator.allocate(web);
      const { identity: d } = await a.allocator.allocate(db);
      await waitFor('both on b', () => b.allocator.lookupById(w.id) !== undefined && b.allocator.lookupById(d.id) !== undefined);
      const other = LabelSet.parse(['k8s:app=other']);
      const restored = await b.allocator.restore([
        { id: w.id, labels: web },
        // A stale record: d's number now means db, not `other`.
        { id: d.id, labels: other },
      ]);
      assert.equal(restored[0]!.id, w.id);
      assert.notEqual(restored[1]!.id, d.id);
      assert.ok(restored[1]!.labels.equals(other));
      const onA = await waitFor('other on a', () => a.allocator.lookupById(restored[1]!.id));
      assert.ok(onA.labels.equals(other));
    });

    it('reserved and CIDR labels resolve locally; bad labels are rejected with clear errors', async () => {
      const n = await (await harness.cluster('reserved')).node('node-a');
      const before = n.roundTrips();
      assert.equal((await n.allocator.allocate(LabelSet.parse(['reserved:host', 'k8s:node-role=x']))).identity.id, ReservedIdentity.Host);
      assert.equal((await n.allocator.allocate(LabelSet.parse(['reserved:init']))).identity.id, ReservedIdentity.Init);
      assert.equal((await n.allocator.allocate(LabelSet.parse(['reserved:world']))).identity.id, ReservedIdentity.World);
      const cidr = await n.allocator.allocate(LabelSet.parse(['cidr:10.0.0.0/8']));
      assert.equal(cidr.identity.scope, 'local');
      assert.equal(n.allocator.lookupById(cidr.identity.id)?.labels.toString(), 'cidr:10.0.0.0/8;');
      assert.equal(n.roundTrips() - before, 0, 'reserved and CIDR identities never reach the store');
      const bad: Array<[LabelSet, string]> = [
        [LabelSet.EMPTY, 'at least one label'],
        [LabelSet.parse(['any:app=web']), 'selector'],
        [LabelSet.parse(['reserved:init', 'k8s:app=web']), 'cannot be combined'],
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
