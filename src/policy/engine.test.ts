import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { cidrLabelKey } from '../labels/index.js';
import { parsePrefix } from '../netip/index.js';
import { PolicyEngine } from './engine.js';
import { PolicyErrorCode, PolicyMapOverflowError, PolicyNotFoundError, UnknownIdentityError } from './errors.js';
import { LocalIdentityTable } from './identities.js';
import { formatMapKey, mapKeyString, type MapEntry } from './mapState.js';
import { parsePortProtocol, portRangeToPrefixes } from './ports.js';
import { TestWorld } from './testing/world.js';
import { Proto } from './types.js';

const allowFrom = (name: string, subjectApp: string, peerApp: string, extra = '') => `
apiVersion: tendril.io/v1
kind: TendrilClusterwideNetworkPolicy
metadata: {name: ${name}, labels: {team: t-${subjectApp}}}
spec:
  endpointSelector: {matchLabels: {app: ${subjectApp}}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: ${peerApp}}}]
    toPorts: [{ports: [{port: "80", protocol: TCP}]}]
${extra}
---
`;

/** What changed between two of an endpoint's maps: keys that appeared or changed verdict, keys that went. */
function changes(before: readonly MapEntry[], after: readonly MapEntry[]): { upserts: MapEntry[]; deletes: string[] } {
  const old = new Map(before.map((e) => [mapKeyString(e.key), e]));
  const upserts = after.filter((e) => old.get(mapKeyString(e.key))?.verdict !== e.verdict);
  const now = new Set(after.map((e) => mapKeyString(e.key)));
  return { upserts, deletes: before.filter((e) => !now.has(mapKeyString(e.key))).map((e) => formatMapKey(e.key)) };
}

describe('PolicyEngine incremental updates', () => {
  test('a new identity yields diffs only for endpoints whose selectors select it', () => {
    const w = new TestWorld();
    const db = w.pod('prod/db', { app: 'db' });
    const other = w.pod('prod/other', { app: 'other' });
    w.import(allowFrom('db', 'db', 'web'));
    const web = w.identities.allocatePod('prod', { app: 'web' });
    const before = w.engine.endpointPolicy(db.endpointId).entries;
    const r = w.engine.identitiesChanged([web]);
    assert.deepEqual(r.regenerations.map((x) => x.endpointId), [db.endpointId]);
    const diff = changes(before, w.engine.endpointPolicy(db.endpointId).entries);
    assert.deepEqual(diff.upserts.map((e) => `${formatMapKey(e.key)} ${e.verdict}`), [`ingress identity=${web.id} TCP/80 allow`]);
    assert.deepEqual(diff.deletes, []);
    w.apply(r.regenerations);
    assert.equal(w.mapVerdict(web, db, 80), 'allow');
    assert.equal(w.mapVerdict(web, other, 80), 'allow');
    // An identity nobody selects changes nothing.
    assert.deepEqual(w.engine.identitiesChanged([w.identities.allocatePod('prod', { app: 'zzz' })]).regenerations, []);
    // Its removal deletes exactly its entry.
    const held = w.engine.endpointPolicy(db.endpointId).entries;
    const gone = w.engine.identitiesChanged([], [web.id]);
    assert.deepEqual(gone.regenerations.map((x) => changes(held, w.engine.endpointPolicy(x.endpointId).entries).deletes), [[`ingress identity=${web.id} TCP/80`]]);
  });

  test('a policy change regenerates only the endpoints its rules select', () => {
    const w = new TestWorld();
    const a = w.pod('prod/a', { app: 'a' });
    const b = w.pod('prod/b', { app: 'b' });
    w.pod('prod/c', { app: 'c' });
    const r = w.engine.importText(allowFrom('a', 'a', 'b'));
    assert.equal(r.revision, 2);
    assert.deepEqual(r.regenerations.map((x) => x.endpointId), [a.endpointId]);
    assert.ok(r.regenerations.every((x) => x.policyRevision === 2));
    w.apply(r.regenerations);
    assert.equal(w.mapVerdict(b, a, 80), 'allow');
    // Re-importing the same policy is a new revision but no map changes.
    const again = w.engine.importText(allowFrom('a', 'a', 'b'));
    assert.equal(again.revision, 3);
    assert.deepEqual(again.regenerations, []);
  });

  test('delete by name and by labels', () => {
    const w = new TestWorld();
    const a = w.pod('prod/a', { app: 'a' });
    const b = w.pod('prod/b', { app: 'b' });
    w.import(allowFrom('pa', 'a', 'b') + allowFrom('pb', 'b', 'a'));
    const c = w.pod('prod/c', { app: 'c' });
    assert.equal(w.mapVerdict(c, a, 80), 'deny');
    const byName = w.engine.deletePolicies({ name: 'pa' });
    assert.deepEqual(byName.deleted.map((n) => n.name), ['pa']);
    w.apply(byName.regenerations);
    assert.equal(w.mapVerdict(c, a, 80), 'allow');
    assert.equal(w.mapVerdict(c, b, 80), 'deny');
    const byLabels = w.engine.deletePolicies({ labels: ['team=t-b'] });
    assert.deepEqual(byLabels.deleted.map((n) => n.name), ['pb']);
    w.apply(byLabels.regenerations);
    assert.equal(w.mapVerdict(c, b, 80), 'allow');
    assert.throws(() => w.engine.deletePolicies({ name: 'pa' }), PolicyNotFoundError);
    assert.equal(w.engine.policies().length, 0);
    // Selectors and CIDR identities are released with the last policy that used them.
    assert.deepEqual(w.engine.selectors(), []);
  });

  test('CIDR rules get local CIDR identities, released on delete', () => {
    const w = new TestWorld();
    const a = w.pod('prod/a', { app: 'a' });
    w.import(`
apiVersion: tendril.io/v1
kind: TendrilClusterwideNetworkPolicy
metadata: {name: out}
spec:
  endpointSelector: {matchLabels: {app: a}}
  egress: [{toCIDRSet: [{cidr: 10.0.0.0/8, except: [10.9.0.0/16]}]}]
`);
    const inside = w.external('10.1.1.1');
    const excepted = w.external('10.9.1.1');
    assert.ok(inside.id >= 1 << 24 && excepted.id >= 1 << 24 && inside.id !== excepted.id);
    assert.equal(w.mapVerdict(a, inside, 443), 'allow');
    assert.equal(w.mapVerdict(a, excepted, 443), 'deny');
    w.apply(w.engine.deletePolicies({ name: 'out' }).regenerations);
    assert.equal(w.identities.get(inside.id), undefined);
    assert.equal(w.mapVerdict(a, w.world, 443), 'allow');
  });

  test('endpoints that share an identity share the computation but get their own regenerations', () => {
    const w = new TestWorld();
    const a1 = w.pod('prod/a', { app: 'a' });
    const r = w.engine.upsertEndpoint({ id: 99, identity: a1.identity.id });
    assert.deepEqual(r.regenerations.map((x) => x.endpointId), [99]);
    w.apply(r.regenerations);
    const imp = w.engine.importText(allowFrom('a', 'a', 'b'));
    assert.deepEqual(imp.regenerations.map((x) => x.endpointId), [a1.endpointId, 99]);
    assert.throws(() => w.engine.upsertEndpoint({ id: 5, identity: 12345 }), UnknownIdentityError);
  });

  test('new labels on an endpoint\'s own identity re-select its rules', () => {
    const w = new TestWorld();
    const a = w.pod('prod/a', { app: 'a' });
    const b = w.pod('prod/b', { app: 'b' });
    w.import(allowFrom('b-only', 'b', 'nobody'));
    assert.equal(w.mapVerdict(a, b, 80), 'deny');
    const relabelled = { id: b.identity.id, labels: w.identities.allocatePod('prod', { app: 'c' }).labels };
    const r = w.engine.identitiesChanged([relabelled]);
    assert.ok(r.regenerations.some((x) => x.endpointId === b.endpointId));
    w.apply(r.regenerations);
    assert.equal(w.mapVerdict(a, b, 80), 'allow');
  });

  test('an endpoint that changes identity gets the diff between the two maps', () => {
    const w = new TestWorld();
    const a = w.pod('prod/a', { app: 'a' });
    const bId = w.identities.allocatePod('prod', { app: 'b' });
    w.import(allowFrom('a', 'a', 'b'));
    w.apply(w.engine.identitiesChanged([bId]).regenerations);
    const r = w.engine.upsertEndpoint({ id: a.endpointId, identity: bId.id });
    w.apply(r.regenerations);
    const held = [...w.datapath.get(a.endpointId)!.entries()].map((e) => formatMapKey(e.key)).sort();
    assert.deepEqual(held, ['egress identity=any any', 'ingress identity=any any']);
  });
});

describe('per-endpoint entry limit', () => {
  test('exceeding the limit is an error on that endpoint, and the previous map stays', () => {
    const ids = new LocalIdentityTable();
    const engine = new PolicyEngine({ identities: ids, cidrIdentities: ids, maxEntriesPerEndpoint: 6 });
    const db = ids.allocatePod('prod', { app: 'db' });
    const small = ids.allocatePod('prod', { app: 'small' });
    engine.upsertEndpoint({ id: 1, identity: db.id });
    engine.upsertEndpoint({ id: 2, identity: small.id });
    const ok = engine.importText(allowFrom('db', 'db', 'web'));
    assert.equal(ok.regenerations[0]!.error, undefined);
    const held = engine.endpointPolicy(1).entries;
    const webs = Array.from({ length: 8 }, (_, i) => ids.allocatePod('prod', { app: 'web', n: String(i) }));
    const r = engine.identitiesChanged(webs);
    assert.equal(r.regenerations.length, 1);
    const regen = r.regenerations[0]!;
    assert.ok(regen.error instanceof PolicyMapOverflowError);
    assert.equal(regen.error.code, PolicyErrorCode.MAP_OVERFLOW);
    assert.equal(regen.entries, 10);
    assert.ok(engine.endpointPolicy(1).error instanceof PolicyMapOverflowError);
    assert.equal(engine.endpointPolicy(2).error, undefined);
    // Back under the limit: against the last map the endpoint holds, one peer is new.
    const back = engine.identitiesChanged([], webs.slice(1).map((x) => x.id));
    assert.equal(back.regenerations[0]!.error, undefined);
    assert.deepEqual(changes(held, engine.endpointPolicy(1).entries).upserts.map((e) => e.key.identity), [webs[0]!.id]);
  });
});

describe('per-endpoint entry limit, joining', () => {
  test('an endpoint that joins an overflowing policy gets the error, then the whole map once it fits', () => {
    const ids = new LocalIdentityTable();
    const engine = new PolicyEngine({ identities: ids, maxEntriesPerEndpoint: 4 });
    const db = ids.allocatePod('prod', { app: 'db' });
    engine.importText(allowFrom('db', 'db', 'web'));
    const webs = Array.from({ length: 5 }, (_, i) => ids.allocatePod('prod', { app: 'web', n: String(i) }));
    engine.identitiesChanged(webs);
    const join = engine.upsertEndpoint({ id: 7, identity: db.id });
    assert.equal(join.regenerations.length, 1);
    assert.ok(join.regenerations[0]!.error instanceof PolicyMapOverflowError);
    const fits = engine.identitiesChanged([], webs.slice(2).map((x) => x.id));
    const r = fits.regenerations.find((x) => x.endpointId === 7)!;
    assert.equal(r.error, undefined);
    assert.equal(engine.endpointPolicy(7).entries.length, r.entries);
  });
});

describe('IPv6', () => {
  test('IPv6 CIDR rules select IPv6 CIDR identities only', () => {
    const w = new TestWorld();
    const a = w.pod('prod/a', { app: 'a' });
    w.import(`
apiVersion: tendril.io/v1
kind: TendrilClusterwideNetworkPolicy
metadata: {name: v6}
spec:
  endpointSelector: {matchLabels: {app: a}}
  egress: [{toCIDRSet: [{cidr: "2001:db8::/32", except: ["2001:db8:1::/48"]}, {cidr: 10.0.0.0/8}]}]
`);
    const cidrIds = [...w.identities.list()].filter((i) => i.id >= 1 << 24);
    assert.equal(cidrIds.length, 3);
    const withPrefix = (p: string) => cidrIds.find((i) => i.labels.toString().includes(`cidr:${cidrLabelKey(parsePrefix(p))};`))!;
    const inside = withPrefix('2001:db8::/32');
    const excepted = withPrefix('2001:db8:1::/48');
    assert.equal(w.mapVerdict(a, inside, 443), 'allow');
    assert.equal(w.mapVerdict(a, excepted, 443), 'deny');
    assert.equal(w.traceVerdict(a, excepted, 443), 'deny');
  });
});

describe('trace', () => {
  test('explains the deciding rules and the enforcing policy', () => {
    const w = new TestWorld();
    const a = w.pod('prod/a', { app: 'a' });
    const b = w.pod('prod/b', { app: 'b' });
    w.import(allowFrom('a', 'a', 'b', '  ingressDeny:\n  - fromEndpoints: [{matchLabels: {app: b}}]\n    toPorts: [{ports: [{port: "22", protocol: TCP}]}]'));
    const ok = w.engine.trace({ endpoint: b.endpointId }, { endpoint: a.endpointId }, Proto.TCP, 80);
    assert.equal(ok.verdict, 'allow');
    assert.deepEqual(ok.ingress.decidingRules, [{ policy: 'TendrilClusterwideNetworkPolicy/a', rule: 0, path: 'spec.ingress[0]' }]);
    const denied = w.engine.trace({ endpoint: b.endpointId }, { endpoint: a.endpointId }, Proto.TCP, 22);
    assert.equal(denied.ingress.reason, 'deny-rule');
    const dflt = w.engine.trace({ endpoint: b.endpointId }, { endpoint: a.endpointId }, Proto.TCP, 443);
    assert.equal(dflt.ingress.reason, 'default-deny');
    assert.deepEqual(dflt.ingress.enforcedBy.map((r) => r.policy), ['TendrilClusterwideNetworkPolicy/a']);
  });
});

describe('port ranges', () => {
  test('trace ports parse as <port>[/proto]', () => {
    assert.deepEqual(parsePortProtocol('80/tcp'), { port: 80, proto: Proto.TCP });
    assert.deepEqual(parsePortProtocol('53/UDP'), { port: 53, proto: Proto.UDP });
    assert.deepEqual(parsePortProtocol('443'), { port: 443, proto: Proto.TCP });
    assert.deepEqual(parsePortProtocol('icmp'), { port: 0, proto: Proto.ICMP });
    for (const bad of ['0', '70000', '80/gre', 'x']) assert.throws(() => parsePortProtocol(bad), { code: PolicyErrorCode.INVALID_ARGUMENT });
  });

  test('decompose into aligned prefixes that cover the range exactly', () => {
    assert.deepEqual(portRangeToPrefixes(80, 90), [
      { port: 80, prefixLen: 13 },
      { port: 88, prefixLen: 15 },
      { port: 90, prefixLen: 16 },
    ]);
    assert.deepEqual(portRangeToPrefixes(0, 65535), [{ port: 0, prefixLen: 0 }]);
    assert.deepEqual(portRangeToPrefixes(1, 65535).length, 16);
    for (const [lo, hi] of [
      [1, 1],
      [1023, 1025],
      [32000, 32768],
      [5, 60000],
    ] as const) {
      const blocks = portRangeToPrefixes(lo, hi);
      let next = lo;
      for (const b of blocks) {
        assert.equal(b.port, next);
        assert.equal(b.port % (1 << (16 - b.prefixLen)), 0);
        next = b.port + (1 << (16 - b.prefixLen));
      }
      assert.equal(next, hi + 1);
    }
  });
});
