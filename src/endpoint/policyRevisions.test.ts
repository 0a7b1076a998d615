import { dbFromWebPolicy } from '../policy/testing/policies.js';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LocalIdentityTable, PolicyEngine } from '../policy/index.js';
import { type PolicyChange, PolicyRevisions } from './policyRevisions.js';

const DB_FROM_WEB = dbFromWebPolicy({ namespace: 'prod' });

function world() {
  const identities = new LocalIdentityTable();
  const policy = new PolicyRevisions(new PolicyEngine({ identities, cidrIdentities: identities }));
  const changes: PolicyChange[] = [];
  policy.subscribe((c) => changes.push(c));
  return { identities, policy, changes };
}

test('an endpoint joining does not move the revision; its own snapshot is at the current one', () => {
  const { identities, policy, changes } = world();
  const before = policy.revision;
  const db = identities.allocatePod('prod', { app: 'db' });
  const c = policy.upsertEndpoint({ id: 1, identity: db.id });
  assert.equal(c.revision, before);
  assert.deepEqual(c.endpoints, [1]);
  assert.equal(changes.length, 1, 'listeners hear of it');
  assert.equal(policy.snapshot(1).revision, before);
  assert.equal(policy.snapshot(1).identity, db.id);
});

test('an import moves the revision and names the endpoints it changed; an import that changes no map moves it too', () => {
  const { identities, policy } = world();
  policy.upsertEndpoint({ id: 1, identity: identities.allocatePod('prod', { app: 'db' }).id });
  policy.upsertEndpoint({ id: 2, identity: identities.allocatePod('prod', { app: 'web' }).id });
  const r = policy.importText(DB_FROM_WEB);
  assert.equal(r.revision, 2);
  assert.deepEqual(r.endpoints, [1]);
  assert.deepEqual(r.policies.map((p) => p.name), ['db-from-web']);
  const again = policy.importText(DB_FROM_WEB.replace('db-from-web', 'unused').replace('app: db', 'app: nobody'));
  assert.equal(again.revision, 3);
  assert.deepEqual(again.endpoints, []);
  const d = policy.deletePolicies({ name: 'db-from-web' });
  assert.equal(d.revision, 4);
  assert.deepEqual(d.endpoints, [1]);
});

test('an identity that changes a bound endpoint\'s map moves the revision; one that changes nothing does not', () => {
  const { identities, policy, changes } = world();
  policy.upsertEndpoint({ id: 1, identity: identities.allocatePod('prod', { app: 'db' }).id });
  policy.importText(DB_FROM_WEB);
  const rev = policy.revision;
  changes.length = 0;
  const unrelated = identities.allocatePod('prod', { app: 'cache' });
  assert.equal(policy.identitiesChanged([unrelated], []).revision, rev);
  assert.deepEqual(changes, []);
  const web = identities.allocatePod('prod', { app: 'web' });
  const c = policy.identitiesChanged([web], []);
  assert.equal(c.revision, rev + 1);
  assert.deepEqual(c.endpoints, [1]);
  assert.ok(policy.snapshot(1).entries.some((e) => e.key.identity === web.id));
  assert.equal(policy.snapshot(1).revision, rev + 1);
});

test('the engine is changed only through PolicyRevisions: others get it read-only, and what it answers follows the changes', () => {
  const { identities, policy } = world();
  const db = identities.allocatePod('prod', { app: 'db' });
  policy.upsertEndpoint({ id: 1, identity: db.id });
  const readOnly = policy.engine;
  // Compile-time half: a change through the read-only engine does not type-check (tsc fails the build if it did).
  const bypass = () => {
    // @ts-expect-error the engine's changes are PolicyRevisions' alone
    readOnly.importText(DB_FROM_WEB);
    // @ts-expect-error the engine's changes are PolicyRevisions' alone
    readOnly.upsertEndpoint({ id: 2, identity: db.id });
  };
  assert.equal(typeof bypass, 'function');
  policy.importText(DB_FROM_WEB);
  assert.equal(readOnly.revision, policy.engine.revision);
  assert.deepEqual(readOnly.endpointIds(), [1]);
  assert.ok(readOnly.endpointPolicy(1).entries.length > 0, 'the read-only view sees the imported policy');
});
