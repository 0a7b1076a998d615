import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PolicyErrorCode, isPolicyError } from './errors.js';
import { MapState, type MapEntry } from './mapState.js';
import { parsePolicyText } from './ruleParser.js';
import { STAGED_ANNOTATION, withStaged } from './staged.js';
import { TestWorld } from './testing/world.js';
import { Proto } from './types.js';

/** db accepts ingress only from web on TCP/80; staged with `staged`. */
const dbFromWeb = (staged: boolean | string = false) => `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: db-from-web
  namespace: prod
${staged === false ? '' : `  annotations: { ${STAGED_ANNOTATION}: "${staged === true ? 'true' : staged}" }\n`}spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress:
    - from: [ { podSelector: { matchLabels: { app: web } } } ]
      ports: [ { protocol: TCP, port: 80 } ]
`;

const stateOf = (entries: readonly MapEntry[]) => {
  const m = new MapState();
  m.replaceAll(entries);
  return m;
};

describe('staged policies: the annotation', () => {
  test('"true" stages a policy, "false" or none enforces it, anything else is refused at its field', () => {
    assert.equal(parsePolicyText(dbFromWeb(true))[0]!.staged, true);
    assert.equal(parsePolicyText(dbFromWeb('false'))[0]!.staged, undefined);
    assert.equal(parsePolicyText(dbFromWeb())[0]!.staged, undefined);
    assert.throws(
      () => parsePolicyText(dbFromWeb('yes')),
      (err: unknown) => isPolicyError(err) && err.code === PolicyErrorCode.INVALID && /metadata\.annotations\.tendril\.io\/staged: must be "true" or "false", not "yes"/.test(err.message),
    );
  });

  test('a tendril policy and a CiliumNetworkPolicy take it too', () => {
    const doc = (kind: string, apiVersion: string) => `
apiVersion: ${apiVersion}
kind: ${kind}
metadata: { name: p, namespace: prod, annotations: { ${STAGED_ANNOTATION}: "true" } }
spec:
  endpointSelector: { matchLabels: { app: db } }
  ingress: [ { fromEndpoints: [ { matchLabels: { app: web } } ] } ]
`;
    assert.equal(parsePolicyText(doc('TendrilNetworkPolicy', 'tendril.io/v1'))[0]!.staged, true);
    assert.equal(parsePolicyText(doc('CiliumNetworkPolicy', 'cilium.io/v2'))[0]!.staged, true);
  });

  test('withStaged sets and removes the annotation in the document, keeping the others; the rules stay', () => {
    const [p] = parsePolicyText(dbFromWeb());
    const staged = withStaged(p!, true);
    assert.equal(staged.staged, true);
    assert.deepEqual((staged.document as { metadata: unknown }).metadata, { name: 'db-from-web', namespace: 'prod', annotations: { [STAGED_ANNOTATION]: 'true' } });
    assert.equal(staged.rules, p!.rules);
    // What the store re-reads from the staged document is staged again.
    assert.equal(parsePolicyText(JSON.stringify(staged.document))[0]!.staged, true);
    const promoted = withStaged(staged, false);
    assert.equal(promoted.staged, undefined);
    assert.deepEqual(promoted.document, p!.document);
    const other = withStaged({ ...staged, document: { ...(staged.document as object), metadata: { name: 'db-from-web', annotations: { a: 'b', [STAGED_ANNOTATION]: 'true' } } } }, false);
    assert.deepEqual((other.document as { metadata: unknown }).metadata, { name: 'db-from-web', annotations: { a: 'b' } });
  });
});

describe('staged policies: the engine\'s staged view', () => {
  test('a staged policy leaves the enforced map state alone and gives the endpoints it selects a staged view with its default deny', () => {
    const w = new TestWorld();
    const db = w.pod('prod/db', { app: 'db' });
    const web = w.pod('prod/web', { app: 'web' });
    const enforcedBefore = w.engine.endpointPolicy(db.endpointId).entries;
    const revision = w.engine.revision;

    const r = w.engine.importText(dbFromWeb(true));
    assert.equal(w.engine.revision, revision + 1);
    assert.deepEqual(r.regenerations.map((x) => x.endpointId), [db.endpointId], 'only db: its staged view appeared');
    const p = w.engine.endpointPolicy(db.endpointId);
    assert.deepEqual(p.entries, enforcedBefore, 'the enforced map state is unchanged');
    assert.equal(p.enforcement.ingress.enforced, false);
    assert.ok(p.staged, 'db has a staged view');
    assert.equal(p.staged.enforcement.ingress.enforced, true);
    assert.deepEqual(p.staged.enforcement.ingress.by.map((o) => o.policy), ['NetworkPolicy/prod/db-from-web']);
    assert.equal(p.staged.enforcement.egress.enforced, false);
    assert.equal(r.regenerations[0]!.entries, p.entries.length + p.staged.entries.length, 'both count against the entry limit');

    const view = stateOf(p.staged.entries);
    assert.equal(view.lookup('ingress', web.identity.id, Proto.TCP, 80)?.verdict, 'allow');
    assert.equal(view.lookup('ingress', web.identity.id, Proto.TCP, 8080), undefined, 'default deny in the staged view');
    assert.equal(view.lookup('egress', web.identity.id, Proto.TCP, 8080)?.builtin, 'not-enforced');
    // Enforced: everything still passes.
    assert.equal(w.engine.lookup(db.endpointId, 'ingress', web.identity.id, Proto.TCP, 8080).verdict, 'allow');
    assert.equal(w.engine.endpointPolicy(web.endpointId).staged, undefined, 'web: no staged policy selects it');
    assert.equal(w.engine.endpointEnforcement(db.endpointId, true)?.ingress.enforced, true);
    assert.equal(w.engine.endpointEnforcement(db.endpointId)?.ingress.enforced, false);
  });

  test('the staged view is the enforced policies and the staged ones together', () => {
    const w = new TestWorld();
    const db = w.pod('prod/db', { app: 'db' });
    const web = w.pod('prod/web', { app: 'web' });
    w.engine.importText(dbFromWeb());
    w.engine.importText(`
apiVersion: tendril.io/v1
kind: TendrilNetworkPolicy
metadata: { name: deny-web-80, namespace: prod, annotations: { ${STAGED_ANNOTATION}: "true" } }
spec:
  endpointSelector: { matchLabels: { app: db } }
  ingressDeny: [ { fromEndpoints: [ { matchLabels: { app: web } } ], toPorts: [ { ports: [ { port: "80", protocol: TCP } ] } ] } ]
`);
    assert.equal(w.engine.lookup(db.endpointId, 'ingress', web.identity.id, Proto.TCP, 80).verdict, 'allow', 'enforced: the allow');
    const view = stateOf(w.engine.endpointPolicy(db.endpointId).staged!.entries);
    assert.equal(view.lookup('ingress', web.identity.id, Proto.TCP, 80)?.verdict, 'deny', 'staged view: the staged deny wins');
  });

  test('the staged view follows identity changes; promoting makes it the enforced state in one revision; deleting ends it', () => {
    const w = new TestWorld();
    const db = w.pod('prod/db', { app: 'db' });
    w.engine.importText(dbFromWeb(true));
    const web = w.identities.allocatePod('prod', { app: 'web' });
    const r = w.engine.identitiesChanged([web]);
    assert.deepEqual(r.regenerations.map((x) => x.endpointId), [db.endpointId]);
    const staged = w.engine.endpointPolicy(db.endpointId).staged!;
    assert.equal(stateOf(staged.entries).lookup('ingress', web.id, Proto.TCP, 80)?.verdict, 'allow');
    assert.equal(w.engine.lookup(db.endpointId, 'ingress', web.id, Proto.TCP, 8080).verdict, 'allow');

    const revision = w.engine.revision;
    const promoted = w.engine.upsertPolicies(w.engine.policies().map((p) => withStaged(p, false)));
    assert.equal(promoted.revision, revision + 1);
    assert.deepEqual(promoted.regenerations.map((x) => x.endpointId), [db.endpointId]);
    const after = w.engine.endpointPolicy(db.endpointId);
    assert.equal(after.staged, undefined, 'nothing staged is left');
    assert.deepEqual(after.entries, staged.entries, 'the enforced state is what the staged view was');
    assert.equal(w.engine.lookup(db.endpointId, 'ingress', web.id, Proto.TCP, 8080).verdict, 'deny');

    w.engine.upsertPolicies(w.engine.policies().map((p) => withStaged(p, true)));
    assert.ok(w.engine.endpointPolicy(db.endpointId).staged);
    const gone = w.engine.deletePolicies({ name: 'db-from-web' });
    assert.deepEqual(gone.regenerations.map((x) => x.endpointId), [db.endpointId]);
    assert.equal(w.engine.endpointPolicy(db.endpointId).staged, undefined);
  });

  test('the entry limit counts the staged view: an overflow leaves the endpoint on its previous map', () => {
    const w = new TestWorld({ maxEntriesPerEndpoint: 3 });
    const db = w.pod('prod/db', { app: 'db' });
    w.pod('prod/web', { app: 'web' });
    const r = w.engine.importText(dbFromWeb(true));
    assert.equal(r.regenerations.length, 1);
    assert.ok(r.regenerations[0]!.error, 'enforced 2 + staged 3 entries do not fit 3');
    assert.equal(r.regenerations[0]!.endpointId, db.endpointId);
  });
});
