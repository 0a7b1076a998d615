import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { LabelSet } from '../labels/index.js';
import { parsePrefix } from '../netip/index.js';
import {
  cidrIdentityLabels,
  IdentityAllocator,
  IdentityError,
  IdentityErrorCode,
  IdentityKeys,
  LOCAL_IDENTITY_SCOPE,
  NodeLease,
  parseIdentityNumber,
  RESERVED_IDENTITIES,
  ReservedIdentity,
  renderIdentityHeader,
  reservedIdentityForLabels,
  scopeOf,
} from './index.js';
import { LocalIdentityAllocator } from './localAllocator.js';
import { embeddedStore, testLogger, uniquePrefix, waitFor } from './testing/cluster.js';

const isCode = (code: string) => (err: unknown) => err instanceof IdentityError && err.code === code;

describe('reserved identities and constants', () => {
  test("numbered as Cilium numbers them", () => {
    assert.deepEqual(
      RESERVED_IDENTITIES.map((i) => `${i.id} ${i.labels.toString()}`),
      [
        '0 reserved:unknown;',
        '1 reserved:host;',
        '2 reserved:world;',
        '3 reserved:unmanaged;',
        '4 reserved:health;',
        '5 reserved:init;',
        '6 reserved:remote-node;',
        '7 reserved:kube-apiserver;',
        '8 reserved:ingress;',
        '9 reserved:world-ipv4;',
        '10 reserved:world-ipv6;',
      ],
    );
  });

  test('the C header carries every constant', () => {
    const h = renderIdentityHeader();
    assert.match(h, /#define IDENTITY_HOST\s+1\n/);
    assert.match(h, /#define IDENTITY_REMOTE_NODE\s+6\n/);
    assert.match(h, /#define IDENTITY_WORLD_IPV6\s+10\n/);
    assert.match(h, /#define MIN_GLOBAL_IDENTITY\s+256\n/);
    assert.match(h, /#define LOCAL_IDENTITY_SCOPE\s+0x1000000\n/);
    for (const name of Object.keys(ReservedIdentity)) assert.ok(h.includes(`IDENTITY_${name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()} `), name);
  });

  test('reserved label resolution', () => {
    assert.equal(reservedIdentityForLabels(LabelSet.parse(['reserved:host', 'k8s:kubernetes.io/hostname=n1']))?.id, 1);
    assert.equal(reservedIdentityForLabels(LabelSet.parse(['reserved:health']))?.id, 4);
    assert.equal(reservedIdentityForLabels(LabelSet.parse(['k8s:app=web'])), undefined);
    assert.throws(() => reservedIdentityForLabels(LabelSet.parse(['reserved:world', 'reserved:health'])), isCode(IdentityErrorCode.INVALID_LABELS));
  });

  test('identity numbers from outside are validated', () => {
    assert.equal(parseIdentityNumber('256'), 256);
    assert.equal(parseIdentityNumber(LOCAL_IDENTITY_SCOPE + 5), LOCAL_IDENTITY_SCOPE + 5);
    for (const bad of ['-1', '65536', '01', 'abc', '', '1e3', 1.5]) assert.throws(() => parseIdentityNumber(bad), isCode(IdentityErrorCode.INVALID_ID), String(bad));
    assert.equal(scopeOf(5), 'reserved');
    assert.equal(scopeOf(300), 'global');
    assert.equal(scopeOf(LOCAL_IDENTITY_SCOPE + 1), 'local');
  });
});

describe('IdentityKeys', () => {
  test('index and usage keys are told apart even when label keys contain "/"', () => {
    const k = new IdentityKeys('p/');
    const labels = 'k8s:app.kubernetes.io/name=web;k8s:io.kubernetes.pod.namespace=a;';
    assert.deepEqual(k.parseValueKey(k.index(labels)), { labels });
    assert.deepEqual(k.parseValueKey(k.usage(labels, 'node-a')), { labels, node: 'node-a' });
    assert.equal(k.parseIdKey(k.id(300)), 300);
    assert.equal(k.parseIdKey('p/id/0300'), undefined);
    assert.ok(!k.usagePrefix('k8s:app=web;').startsWith(k.index('k8s:app=web;k8s:x=y;')));
  });
});

describe('LocalIdentityAllocator', () => {
  test('ref-counted node-local numbers with the scope bit', () => {
    const a = new LocalIdentityAllocator();
    const l = LabelSet.parse(['cidr:10.0.0.0/8']);
    const first = a.allocate(l);
    const second = a.allocate(l);
    assert.equal(first.isNew, true);
    assert.equal(second.isNew, false);
    assert.equal(first.identity.id & LOCAL_IDENTITY_SCOPE, LOCAL_IDENTITY_SCOPE);
    assert.equal(a.release(first.identity.id), false);
    assert.equal(a.release(first.identity.id), true);
    assert.throws(() => a.release(first.identity.id), isCode(IdentityErrorCode.NOT_ALLOCATED));
    assert.equal(a.allocate(l, LOCAL_IDENTITY_SCOPE + 77).identity.id, LOCAL_IDENTITY_SCOPE + 77);
  });
});

describe('IdentityAllocator options and limits', () => {
  test('bad node names and ranges are refused; a full range is IDENTITY_EXHAUSTED', async () => {
    const store = await embeddedStore();
    try {
      const backend = await store.connect();
      const lease = new NodeLease(backend, { ttlSeconds: 5, logger: testLogger });
      assert.throws(() => new IdentityAllocator({ backend, lease, nodeName: 'bad/name' }), isCode(IdentityErrorCode.INVALID_NODE_NAME));
      assert.throws(() => new IdentityAllocator({ backend, lease, nodeName: 'n', minId: 10, maxId: 20 }), isCode(IdentityErrorCode.INVALID_ID));
      const alloc = new IdentityAllocator({ backend, lease, nodeName: 'n1', minId: 256, maxId: 257, keyPrefix: uniquePrefix('full'), gcIntervalMs: 0, logger: testLogger });
      await alloc.start();
      const ids = [];
      for (const app of ['a', 'b']) ids.push((await alloc.allocate(LabelSet.parse([`k8s:app=${app}`]))).identity.id);
      assert.deepEqual(ids.sort(), [256, 257]);
      await assert.rejects(alloc.allocate(LabelSet.parse(['k8s:app=c'])), isCode(IdentityErrorCode.EXHAUSTED));
      // Releasing one frees its number for the next label set.
      await alloc.release(256);
      assert.equal((await alloc.allocate(LabelSet.parse(['k8s:app=c']))).identity.id, 256);
      await alloc.close();
      await assert.rejects(alloc.allocate(LabelSet.parse(['k8s:app=d'])), isCode(IdentityErrorCode.CLOSED));
      await lease.stop({ revoke: true });
    } finally {
      await store.destroy();
    }
  });
});

describe('CIDR identities for the policy engine', () => {
  test('acquire/release by prefix, with cidr + reserved:world labels, node-local numbers', async () => {
    const store = await embeddedStore();
    try {
      const backend = await store.connect();
      const lease = new NodeLease(backend, { ttlSeconds: 5, logger: testLogger });
      const alloc = new IdentityAllocator({ backend, lease, nodeName: 'n1', keyPrefix: uniquePrefix('cidr'), gcIntervalMs: 0, logger: testLogger });
      const p8 = parsePrefix('10.0.0.0/8');
      const p6 = parsePrefix('fd00::/64');
      const [a, b] = alloc.acquireCidrIdentities([p8, p6]);
      assert.equal(a!.scope, 'local');
      assert.deepEqual(a!.labels.toStrings(), ['cidr:10.0.0.0/8', 'reserved:world']);
      assert.equal(alloc.get(b!.id)?.labels.toStrings()[0], 'cidr:fd00--0/64');
      assert.equal(alloc.acquireCidrIdentities([p8])[0]!.id, a!.id);
      assert.equal((await alloc.allocate(cidrIdentityLabels(p8))).identity.id, a!.id, 'allocate() agrees');
      assert.deepEqual(alloc.releaseCidrIdentities([p8, p6]), [b!.id]);
      await alloc.release(a!.id);
      assert.deepEqual(alloc.releaseCidrIdentities([p8]), [a!.id]);
      assert.throws(() => alloc.releaseCidrIdentities([p8]), isCode(IdentityErrorCode.NOT_ALLOCATED));
      await alloc.close();
      await lease.stop();
    } finally {
      await store.destroy();
    }
  });
});

describe('IdentityAllocator recovery', () => {
  test('bounded CAS retries end in IDENTITY_CONFLICT', async () => {
    const store = await embeddedStore();
    try {
      const raw = await store.connect();
      // Every transaction loses, as if other nodes always won the race.
      const backend = new Proxy(raw, {
        get: (t, p) => (p === 'txn' ? async () => ({ succeeded: false, revision: 0 }) : (Reflect.get(t, p) as unknown)),
      }) as typeof raw;
      const lease = new NodeLease(raw, { ttlSeconds: 5, logger: testLogger });
      const alloc = new IdentityAllocator({ backend, lease, nodeName: 'n1', maxRetries: 4, keyPrefix: uniquePrefix('conflict'), gcIntervalMs: 0, logger: testLogger });
      await assert.rejects(alloc.allocate(LabelSet.parse(['k8s:app=x'])), (err: unknown) => isCode(IdentityErrorCode.CONFLICT)(err) && /after 5 attempts/.test((err as Error).message));
      await alloc.close();
      await lease.stop();
    } finally {
      await store.destroy();
    }
  });

  test('an identity deleted under a holder (usage lost, then GC) is taken back with the same number', async () => {
    const store = await embeddedStore();
    try {
      const backend = await store.connect();
      const prefix = uniquePrefix('reassert');
      const keys = new IdentityKeys(prefix);
      const lease = new NodeLease(backend, { ttlSeconds: 5, logger: testLogger });
      const alloc = new IdentityAllocator({ backend, lease, nodeName: 'n1', keyPrefix: prefix, gcIntervalMs: 0, logger: testLogger });
      await alloc.start();
      const labels = LabelSet.parse(['k8s:app=phoenix']);
      const { identity } = await alloc.allocate(labels);
      const events: string[] = [];
      alloc.subscribe((evs) => events.push(...evs.map((e) => `${e.type} ${e.identity.id}`)));
      await backend.delete(keys.usage(labels.toString(), 'n1'));
      await backend.txn({ compare: [], success: [{ type: 'delete', key: keys.index(labels.toString()) }, { type: 'delete', key: keys.id(identity.id) }] });
      const back = await waitFor('identity re-created', async () => (await backend.get(keys.id(identity.id)))?.value);
      assert.equal(back, labels.toString());
      assert.ok(await waitFor('usage key back', async () => backend.get(keys.usage(labels.toString(), 'n1'))));
      // Subscribers see the deletion and then the re-creation (after any late creation event).
      await waitFor('delete then upsert', () => {
        const d = events.indexOf(`delete ${identity.id}`);
        return d >= 0 && events.indexOf(`upsert ${identity.id}`, d) > d;
      });
      assert.equal(alloc.lookupByLabels(labels)?.id, identity.id);
      await alloc.close();
      await lease.stop({ revoke: true });
    } finally {
      await store.destroy();
    }
  });

  test('restore asks for the old number but never steals one another label set holds', async () => {
    const store = await embeddedStore();
    try {
      const backend = await store.connect();
      const prefix = uniquePrefix('steal');
      const lease = new NodeLease(backend, { ttlSeconds: 5, logger: testLogger });
      const alloc = new IdentityAllocator({ backend, lease, nodeName: 'n1', keyPrefix: prefix, gcIntervalMs: 0, logger: testLogger });
      await alloc.start();
      const other = await alloc.allocate(LabelSet.parse(['k8s:app=squatter']));
      const [restored] = await alloc.restore([{ id: other.identity.id, labels: LabelSet.parse(['k8s:app=returning']) }]);
      assert.notEqual(restored!.id, other.identity.id);
      assert.equal(alloc.lookupById(other.identity.id)?.labels.toString(), 'k8s:app=squatter;');
      await alloc.close();
      await lease.stop({ revoke: true });
    } finally {
      await store.destroy();
    }
  });
});
