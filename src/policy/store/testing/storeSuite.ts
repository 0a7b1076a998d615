/**
 * The policy store's behaviour, run against the embedded store and a real
 * etcd (policyStore.embedded.test.ts, policyStore.etcd.test.ts). Each "node"
 * is a real PolicyEngine behind PolicyRevisions, with its own kvstore client
 * (etcd) or a share of one embedded store; every test uses its own prefix.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PolicyRevisions } from '../../../endpoint/policyRevisions.js';
import { testLogger, uniquePrefix, type TestStore } from '../../../identity/testing/cluster.js';
import type { Backend } from '../../../kvstore/types.js';
import { formatPolicyName, LocalIdentityTable, parsePolicyText, PolicyEngine, PolicyErrorCode, isPolicyError, STAGED_ANNOTATION, withStaged } from '../../index.js';
import { dbFromWebPolicy } from '../../testing/policies.js';
import { PolicyStore } from '../policyStore.js';
import { decodeStoredPolicy } from '../storedPolicy.js';

export interface StoreNode {
  identities: LocalIdentityTable;
  policy: PolicyRevisions;
  store: PolicyStore<ReturnType<PolicyRevisions['upsertPolicies']>, ReturnType<PolicyRevisions['deletePolicies']>>;
  backend: Backend;
}

function tendrilPolicy(name: string, app: string, cidr = '192.0.2.0/24'): string {
  return `
apiVersion: tendril.io/v1
kind: TendrilNetworkPolicy
metadata: { name: ${name}, namespace: prod }
spec:
  endpointSelector: { matchLabels: { app: ${app} } }
  egress:
    - toCIDR: [ ${cidr} ]
`;
}

async function until(what: string, cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const names = (n: StoreNode) => n.policy.policies().map((p) => formatPolicyName(p.name)).sort();

/** A kvstore client of the test's own, which it may close; reopen() gives another on the same data. */
export interface OwnClient {
  backend: Backend;
  reopen(): Promise<Backend>;
  cleanup(): Promise<void>;
}

/** An OwnClient over `open`: every client it opened is closed by cleanup, then `afterClose` runs (removing a data dir, say). */
export async function ownClientOf(open: () => Promise<Backend>, afterClose: () => void = () => undefined): Promise<OwnClient> {
  const opened: Backend[] = [await open()];
  return {
    backend: opened[0]!,
    reopen: async () => {
      const b = await open();
      opened.push(b);
      return b;
    },
    cleanup: async () => {
      // The test may have closed some itself: closing again is allowed to fail.
      for (const b of opened) await b.close().catch(() => undefined);
      afterClose();
    },
  };
}

export function runPolicyStoreSuite(kind: string, makeStore: () => Promise<TestStore>, ownClient: () => Promise<OwnClient>): void {
  describe(`policy store (${kind})`, () => {
    let store: TestStore;
    let prefix: string;
    const nodes: StoreNode[] = [];

    beforeEach(async () => {
      store = await makeStore();
      prefix = uniquePrefix('policies');
    });
    afterEach(async () => {
      for (const n of nodes.splice(0)) await n.store.stop();
      await store.destroy();
    });

    async function node(backend?: Backend): Promise<StoreNode> {
      const identities = new LocalIdentityTable();
      const policy = new PolicyRevisions(new PolicyEngine({ identities, cidrIdentities: identities }));
      const b = backend ?? (await store.connect());
      const s = new PolicyStore({ backend: b, target: policy, keyPrefix: prefix, logger: testLogger });
      await s.start();
      const n = { identities, policy, store: s, backend: b };
      nodes.push(n);
      return n;
    }

    test('an import is stored one key per policy, with its document and hash; a new store on the same kvstore restores it', async () => {
      const a = await node();
      await a.store.importText(`${dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 })}---${tendrilPolicy('egress-net', 'web')}`);
      const listing = await a.backend.list(prefix);
      assert.deepEqual(listing.kvs.map((kv) => kv.key.slice(prefix.length)).sort(), ['NetworkPolicy/prod/db-from-web', 'TendrilNetworkPolicy/prod/egress-net']);
      for (const kv of listing.kvs) assert.equal(typeof decodeStoredPolicy(kv.value), 'object', kv.value);

      const again = await node();
      assert.deepEqual(names(again), names(a));
      // Re-parsed from the stored document: the same documents and rules.
      const byName = (n: StoreNode) => new Map(n.policy.policies().map((p) => [formatPolicyName(p.name), p]));
      for (const [name, p] of byName(a)) {
        assert.deepEqual(byName(again).get(name)!.document, p.document);
        assert.deepEqual(byName(again).get(name)!.rules.map((r) => r.subject.key), p.rules.map((r) => r.subject.key));
      }
    });

    test('a staged policy is stored with its annotation and restored staged; promote stores it enforced in one revision; a promote matching nothing changes nothing', async () => {
      const a = await node();
      const staged = parsePolicyText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 })).map((p) => withStaged(p, true));
      await a.store.importPolicies(staged);
      const [kv] = (await a.backend.list(prefix)).kvs;
      const stored = decodeStoredPolicy(kv!.value);
      assert.ok(typeof stored === 'object');
      assert.deepEqual((stored.document as { metadata: { annotations: unknown } }).metadata.annotations, { [STAGED_ANNOTATION]: 'true' });
      const again = await node();
      assert.equal(again.policy.policies()[0]!.staged, true, 'restored staged');

      const revision = a.policy.revision;
      await assert.rejects(a.store.promotePolicies([{ name: 'db-from-web' }, { name: 'nope' }]), (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.NOT_FOUND && /nope/.test(err.message));
      assert.equal(a.policy.revision, revision, 'nothing changed');
      assert.equal(a.policy.policies()[0]!.staged, true);
      const r = await a.store.promotePolicies([{ name: 'db-from-web', namespace: 'prod' }]);
      assert.deepEqual(r.policies.map(formatPolicyName), ['NetworkPolicy/prod/db-from-web']);
      assert.equal(a.policy.revision, revision + 1, 'one revision');
      assert.equal(a.policy.policies()[0]!.staged, undefined);
      await until('the other node sees it enforced', () => again.policy.policies()[0]?.staged === undefined);
      const third = await node();
      assert.equal(third.policy.policies()[0]!.staged, undefined, 'stored enforced');
      // Enforced policies are no promote's business.
      await assert.rejects(a.store.promotePolicies([{ name: 'db-from-web' }]), (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.NOT_FOUND);
    });

    test('a delete through the store leaves the engine\'s policies the store never held (the Kubernetes API server\'s)', async () => {
      const a = await node();
      await a.store.importText(tendrilPolicy('stored', 'web'));
      // What the Kubernetes watchers put straight into the engine.
      a.policy.upsertPolicies(parsePolicyText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 })));
      await a.store.deletePolicies({});
      assert.deepEqual(names(a), ['NetworkPolicy/prod/db-from-web']);
      await assert.rejects(a.store.deletePolicies({ kind: 'NetworkPolicy' }), (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.NOT_FOUND);
      assert.deepEqual(names(a), ['NetworkPolicy/prod/db-from-web']);
    });

    test('a store write that fails rolls the engine back: the earlier version stays in force, the store unchanged, the caller gets POLICY_STORE_FAILED', async () => {
      const own = await ownClient();
      try {
        const a = await node(own.backend);
        await a.store.importText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 }));
        const before = (await own.backend.list(prefix)).kvs.map((kv) => [kv.key, kv.value]);
        const docBefore = a.policy.policies()[0]!.document;
        const db = a.identities.allocatePod('prod', { app: 'db' });
        a.policy.upsertEndpoint({ id: 7, identity: db.id });
        const entriesBefore = a.policy.snapshot(7).entries;

        // A real failure: the kvstore client is gone (closed), every write is refused.
        await own.backend.close();
        await assert.rejects(a.store.importText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 6000 })), (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.STORE_FAILED);
        assert.deepEqual(names(a), ['NetworkPolicy/prod/db-from-web']);
        assert.deepEqual(a.policy.policies()[0]!.document, docBefore, 'the earlier version is in force again');
        assert.deepEqual(a.policy.snapshot(7).entries, entriesBefore, 'the endpoint\'s map state is what it was');
        await assert.rejects(a.store.importText(tendrilPolicy('new-one', 'web')), (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.STORE_FAILED);
        assert.deepEqual(names(a), ['NetworkPolicy/prod/db-from-web'], 'a new policy is gone again');
        await assert.rejects(a.store.deletePolicies({ name: 'db-from-web' }), (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.STORE_FAILED);
        assert.deepEqual(names(a), ['NetworkPolicy/prod/db-from-web'], 'a failed delete leaves the policy in force');
        assert.deepEqual(a.policy.snapshot(7).entries, entriesBefore);

        const reader = await own.reopen();
        assert.deepEqual((await reader.list(prefix)).kvs.map((kv) => [kv.key, kv.value]), before, 'the store holds what it held');
      } finally {
        await own.cleanup();
      }
    });

    test('a policy too large for the kvstore is refused before the engine changes', async () => {
      const a = await node();
      const rev = a.policy.revision;
      await assert.rejects(a.store.importText(hugePolicy('too-big', 1600 * 1024)), (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.INVALID_ARGUMENT);
      assert.equal(a.policy.revision, rev);
      assert.deepEqual(names(a), []);
    });

    test('an import of more policies than one transaction takes is stored whole', async () => {
      const a = await node();
      const text = Array.from({ length: 300 }, (_, i) => tendrilPolicy(`p${i}`, `a${i}`, `198.51.${i % 256}.0/24`)).join('---');
      await a.store.importText(text);
      assert.equal((await a.backend.list(prefix)).kvs.length, 300);
      const b = await node();
      assert.equal(b.policy.policies().length, 300);
      await a.store.deletePolicies({ namespace: 'prod' });
      assert.equal((await a.backend.list(prefix)).kvs.length, 0);
    });

    test('nodes follow each other: an import on A reaches B, a delete on B reaches A; echoes change nothing', async () => {
      const a = await node();
      const b = await node();
      const aDb = a.identities.allocatePod('prod', { app: 'db' });
      const bDb = b.identities.allocatePod('prod', { app: 'db' });
      b.policy.upsertEndpoint({ id: 3, identity: bDb.id });
      a.policy.upsertEndpoint({ id: 4, identity: aDb.id });
      const bOpen = b.policy.snapshot(3).entries;

      await a.store.importText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 }));
      const aRevision = a.policy.revision;
      await until('B imports A\'s policy', () => names(b).length === 1);
      assert.deepEqual(b.policy.snapshot(3).entries, a.policy.snapshot(4).entries, 'B enforces what A does');
      assert.notDeepEqual(b.policy.snapshot(3).entries, bOpen);
      await sleep(200);
      assert.equal(a.policy.revision, aRevision, 'A\'s own echo did not import the policy again');

      // A newer version from B replaces A's.
      await b.store.importText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 6543 }));
      await until('A takes B\'s version', () => JSON.stringify(a.policy.policies()[0]?.document).includes('6543'));
      assert.deepEqual(a.policy.snapshot(4).entries, b.policy.snapshot(3).entries);

      await b.store.deletePolicies({ name: 'db-from-web' });
      await until('A drops the policy B deleted', () => names(a).length === 0);
      assert.deepEqual(b.policy.snapshot(3).entries, bOpen, 'B is open again');
      assert.deepEqual(a.policy.snapshot(4).entries, bOpen);
    });

    test('clusterRevision: the kvstore revision of the last change, deletes included, the same on every node once synced', async () => {
      const a = await node();
      const b = await node();
      assert.equal(a.store.clusterRevision, 0, 'nothing stored yet');
      assert.equal(b.store.clusterRevision, 0);

      await a.store.importText(dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 }));
      const [stored] = (await a.backend.list(prefix)).kvs;
      assert.equal(a.store.clusterRevision, stored!.modRevision, 'the writer reports its own write\'s revision at once');
      await until('B reports A\'s import', () => b.store.clusterRevision === a.store.clusterRevision);
      assert.deepEqual(names(b), ['NetworkPolicy/prod/db-from-web'], 'B holds the policies of the revision it reports');

      // A delete leaves no key behind: the marker written in the same transaction carries its revision.
      const beforeDelete = a.store.clusterRevision;
      await b.store.deletePolicies({ name: 'db-from-web' });
      assert.ok(b.store.clusterRevision > beforeDelete, 'a delete raises the revision');
      await until('A reports B\'s delete', () => a.store.clusterRevision === b.store.clusterRevision);
      assert.deepEqual(names(a), []);
      const marker = await a.backend.get(`${prefix.replace(/\/$/, '')}-meta/revision`);
      assert.equal(marker?.modRevision, b.store.clusterRevision, 'the marker\'s mod revision is the revision reported');

      // A node started later reads the same number from the listing (no policy left, only the marker).
      const c = await node();
      assert.equal(c.store.clusterRevision, b.store.clusterRevision);
      assert.deepEqual(names(c), []);
      // The marker lies outside the policy prefix: no policy listing sees it.
      assert.deepEqual((await a.backend.list(prefix)).kvs, []);

      // Writes that are not policy changes (a failed delete) leave it alone.
      const settled = a.store.clusterRevision;
      await assert.rejects(a.store.deletePolicies({ name: 'nothing-here' }));
      await sleep(100);
      assert.equal(a.store.clusterRevision, settled);
      assert.equal(c.store.clusterRevision, settled);
    });

    test('clusterRevision follows a large import written in several transactions to its last one', async () => {
      const a = await node();
      const b = await node();
      const text = Array.from({ length: 300 }, (_, i) => tendrilPolicy(`p${i}`, `a${i}`, `198.51.${i % 256}.0/24`)).join('---');
      await a.store.importText(text);
      const newest = Math.max(...(await a.backend.list(prefix)).kvs.map((kv) => kv.modRevision));
      assert.equal(a.store.clusterRevision, newest);
      await until('B has caught up', () => b.store.clusterRevision === newest);
      assert.equal(b.policy.policies().length, 300);
    });
  });
}

/** A valid policy whose document is about `bytes` long (a large annotation, as kubectl's last-applied-configuration can be). */
function hugePolicy(name: string, bytes: number): string {
  return JSON.stringify({
    apiVersion: 'tendril.io/v1',
    kind: 'TendrilNetworkPolicy',
    metadata: { name, namespace: 'prod', annotations: { note: 'x'.repeat(bytes) } },
    spec: { endpointSelector: { matchLabels: { app: 'nobody' } }, egress: [{ toCIDR: ['192.0.2.0/24'] }] },
  });
}
