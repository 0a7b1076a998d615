import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { breakableWatches } from '../../kvstore/testing/breakableWatches.js';
import type { Backend } from '../../kvstore/types.js';
import { NodeLease } from '../../identity/index.js';
import { testLogger, uniquePrefix, waitFor, type TestStore } from '../../identity/testing/cluster.js';
import { NodeErrorCode } from '../errors.js';
import { NodeRegistry } from '../nodeRegistry.js';
import type { NodeChange, NodeRecord } from '../types.js';

const LEASE_TTL = 2;

export function nodeRecord(name: string, n: number, overrides: Partial<NodeRecord> = {}): NodeRecord {
  return {
    name,
    addresses: [
      { type: 'InternalIP', ip: `192.168.50.${n}` },
      { type: 'RouterIP', ip: `10.200.${n}.1` },
    ],
    podCidrs: [`10.200.${n}.0/24`],
    routingMode: 'tunnel',
    tunnel: { protocol: 'vxlan', port: 8472 },
    health: { status: 'ok' },
    startedAt: new Date().toISOString(),
    ...overrides,
  };
}

interface TestNode {
  name: string;
  registry: NodeRegistry;
  lease: NodeLease;
  backend: Backend;
  changes: NodeChange[];
  /** Stops keepalives without revoking (the record goes when the TTL runs out), as SIGKILL does. */
  crash(): Promise<void>;
  /** A clean shutdown: the lease is revoked and the record goes at once. */
  shutdown(): Promise<void>;
}

/** The node registry's proof list, run against every kvstore backend. */
export function runRegistrySuite(name: string, newStore: () => Promise<TestStore>): void {
  describe(`node registry: ${name}`, () => {
    let store: TestStore;
    const nodes: TestNode[] = [];
    before(async () => {
      store = await newStore();
    });
    after(async () => {
      for (const n of nodes) {
        await n.registry.stop();
        await n.lease.stop({ revoke: false });
      }
      await store.destroy();
    });

    async function node(prefix: string, record: NodeRecord, wrap?: (b: Backend) => Backend): Promise<TestNode> {
      const raw = await store.connect();
      const backend = wrap === undefined ? raw : wrap(raw);
      const lease = new NodeLease(backend, { ttlSeconds: LEASE_TTL, keepAliveMs: 300, logger: testLogger });
      const registry = new NodeRegistry({ backend, lease, nodeName: record.name, keyPrefix: prefix, logger: testLogger });
      const changes: NodeChange[] = [];
      registry.subscribe((c) => changes.push(c));
      await registry.start(record);
      const n: TestNode = {
        name: record.name,
        registry,
        lease,
        backend,
        changes,
        crash: async () => {
          await lease.stop({ revoke: false });
          await registry.stop();
        },
        shutdown: async () => {
          await registry.stop();
          await lease.stop({ revoke: true });
        },
      };
      nodes.push(n);
      return n;
    }

    const names = (n: TestNode) => n.registry.list().map((r) => r.name);

    it('two registries on one store see each other; the own record is in list()', async () => {
      const prefix = uniquePrefix('nodes-see');
      const a = await node(prefix, nodeRecord('node-a', 1));
      assert.deepEqual(names(a), ['node-a']);
      const b = await node(prefix, nodeRecord('node-b', 2));
      // b's first listing already holds a; a learns of b through its watch.
      assert.deepEqual(names(b), ['node-a', 'node-b']);
      assert.deepEqual(b.changes, [], 'the first listing is not reported as changes');
      await waitFor('b on a', () => a.registry.get('node-b'));
      assert.deepEqual(names(a), ['node-a', 'node-b']);
      assert.deepEqual(a.changes.map((c) => [c.type, c.node.name]), [['upsert', 'node-b']]);
      assert.deepEqual(a.registry.get('node-b'), b.registry.get('node-b'));
      assert.equal(a.registry.get('node-b')?.podCidrs[0], '10.200.2.0/24');
      const kv = await a.backend.get(a.registry.key('node-b'));
      assert.equal(a.registry.revisionOf('node-b'), kv?.modRevision);
      assert.ok((a.registry.revisionOf('node-a') ?? 0) > 0);
      assert.equal(a.registry.revisionOf('node-zz'), undefined);
      // The record is held by the writer's lease.
      assert.notEqual(kv?.lease, '0');
    });

    it('an update reaches the other node as an upsert with the previous record', async () => {
      const prefix = uniquePrefix('nodes-update');
      const a = await node(prefix, nodeRecord('node-a', 1));
      const b = await node(prefix, nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      const rev0 = a.registry.revisionOf('node-b')!;
      const next = nodeRecord('node-b', 2, { podCidrs: ['10.200.2.0/24', '10.200.3.0/26', 'fd00:200::/64'], health: { status: 'degraded', reason: 'datapath' } });
      await b.registry.update(next);
      assert.deepEqual(b.registry.get('node-b')?.podCidrs, next.podCidrs, 'own view at once');
      const change = await waitFor('update on a', () => a.changes.find((c) => c.type === 'upsert' && c.node.name === 'node-b' && c.previous !== undefined));
      assert.equal(change.type, 'upsert');
      if (change.type === 'upsert') {
        assert.deepEqual(change.node.podCidrs, next.podCidrs);
        assert.deepEqual(change.previous?.podCidrs, ['10.200.2.0/24']);
      }
      assert.equal(a.registry.get('node-b')?.health.status, 'degraded');
      assert.ok(a.registry.revisionOf('node-b')! > rev0);
      // Writing the same content again is no change for anyone.
      const before = a.changes.length;
      await b.registry.update(next);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(a.changes.length, before);
    });

    it('rejects an own record that other nodes could not decode', async () => {
      const prefix = uniquePrefix('nodes-invalid');
      const backend = await store.connect();
      const lease = new NodeLease(backend, { ttlSeconds: LEASE_TTL, logger: testLogger });
      const r = new NodeRegistry({ backend, lease, nodeName: 'node-a', keyPrefix: prefix, logger: testLogger });
      await assert.rejects(r.start(nodeRecord('node-b', 1)), (e: Error & { code?: string }) => e.code === NodeErrorCode.INVALID_RECORD);
      const r2 = new NodeRegistry({ backend, lease, nodeName: 'node-a', keyPrefix: prefix, logger: testLogger });
      await assert.rejects(r2.start(nodeRecord('node-a', 1, { podCidrs: ['10.200.1.7/24'] })), /podCidrs/);
      await assert.rejects(r2.update(nodeRecord('node-a', 1)), (e: Error & { code?: string }) => e.code === NodeErrorCode.NOT_RUNNING);
      assert.equal((await backend.list(prefix)).kvs.length, 0);
      await lease.stop();
    });

    it('a node whose lease is revoked disappears from the others with a delete change', async () => {
      const prefix = uniquePrefix('nodes-revoke');
      const a = await node(prefix, nodeRecord('node-a', 1));
      const b = await node(prefix, nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      await b.shutdown();
      const del = await waitFor('delete of b on a', () => a.changes.find((c) => c.type === 'delete' && c.node.name === 'node-b'));
      assert.equal(del.node.routingMode, 'tunnel');
      assert.deepEqual(names(a), ['node-a']);
      assert.equal(a.registry.revisionOf('node-b'), undefined);
    });

    it("a crashed node's record goes when its lease expires", async () => {
      const prefix = uniquePrefix('nodes-expire');
      const a = await node(prefix, nodeRecord('node-a', 1));
      const b = await node(prefix, nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      await b.crash();
      const t0 = Date.now();
      await waitFor('b expired on a', () => a.changes.find((c) => c.type === 'delete' && c.node.name === 'node-b'), (LEASE_TTL + 5) * 1000);
      assert.ok(Date.now() - t0 >= 500, 'the record outlived the crash until the TTL ran out');
      assert.deepEqual(names(a), ['node-a']);
    });

    it('records that do not decode are logged and ignored; a record turned garbage counts as deleted', async () => {
      const prefix = uniquePrefix('nodes-garbage');
      const a = await node(prefix, nodeRecord('node-a', 1));
      const b = await node(prefix, nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      const bad = [
        ['node-x', 'not json'],
        ['node-y', JSON.stringify({ ...nodeRecord('node-y', 3), addresses: [{ type: 'InternalIP', ip: '999.1.1.1' }] })],
        ['node-w', JSON.stringify(nodeRecord('node-v', 4))], // names another node
        ['bad/name', JSON.stringify(nodeRecord('node-u', 5))],
        ['node-t', JSON.stringify({ ...nodeRecord('node-t', 6), tunnel: undefined })], // tunnel mode without tunnel
      ];
      for (const [k, v] of bad) await a.backend.put(`${prefix}${k}`, v!);
      await a.backend.put(`${prefix}node-b`, '{"name":"node-b"}');
      await waitFor('b gone on a', () => a.changes.find((c) => c.type === 'delete' && c.node.name === 'node-b'));
      // A good record after them shows the garbage was passed over, not stuck in front.
      await a.backend.put(`${prefix}node-s`, JSON.stringify({ ...nodeRecord('node-s', 7), futureField: { x: 1 } }));
      await waitFor('node-s on a', () => a.registry.get('node-s'));
      assert.deepEqual(names(a), ['node-a', 'node-s']);
      assert.deepEqual(
        a.changes.map((c) => [c.type, c.node.name]),
        [
          ['upsert', 'node-b'],
          ['delete', 'node-b'],
          ['upsert', 'node-s'],
        ],
      );
      assert.equal((a.registry.get('node-s') as unknown as Record<string, unknown>).futureField, undefined);
      // A fresh registry lists past the garbage too.
      const c = await node(prefix, nodeRecord('node-c', 8));
      assert.deepEqual(names(c), ['node-a', 'node-c', 'node-s']);
      void b;
    });

    it('the own record is written again under a new lease after the old one is lost', async () => {
      const prefix = uniquePrefix('nodes-relay');
      const a = await node(prefix, nodeRecord('node-a', 1));
      const b = await node(prefix, nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      const before = (await b.backend.get(b.registry.key('node-b')))!;
      await b.backend.revokeLease(before.lease);
      const after = await waitFor('republished', async () => {
        const kv = await b.backend.get(b.registry.key('node-b'));
        return kv !== undefined && kv.lease !== before.lease ? kv : undefined;
      });
      assert.notEqual(after.lease, '0');
      await waitFor('b back on a', () => a.registry.get('node-b') !== undefined && (a.registry.revisionOf('node-b') ?? 0) >= after.modRevision);
      const last = a.changes.filter((c) => c.node.name === 'node-b').at(-1);
      assert.equal(last?.type, 'upsert', 'a ends with b present');
      // The republished record is held by the lease the node keeps alive: it survives several TTLs.
      await new Promise((r) => setTimeout(r, (LEASE_TTL + 1) * 1000));
      assert.ok(await b.backend.get(b.registry.key('node-b')));
      assert.ok(a.registry.get('node-b'));
    });

    it('after a failed watch the re-list hands subscribers the difference', async () => {
      const prefix = uniquePrefix('nodes-resync');
      let breaker: ReturnType<typeof breakableWatches> | undefined;
      const a = await node(prefix, nodeRecord('node-a', 1), (raw) => {
        breaker = breakableWatches(raw);
        return breaker.backend;
      });
      const b = await node(prefix, nodeRecord('node-b', 2));
      const c = await node(prefix, nodeRecord('node-c', 3));
      const d = await node(prefix, nodeRecord('node-d', 4));
      await waitFor('b, c, d on a', () => names(a).length === 4);
      breaker!.deafen();
      const seen = a.changes.length;
      await b.registry.update(nodeRecord('node-b', 2, { podCidrs: ['10.200.2.0/24', '10.201.0.0/24'] }));
      await d.shutdown();
      const e = await node(prefix, nodeRecord('node-e', 5));
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(a.changes.length, seen, 'deaf: nothing arrived');
      breaker!.compact();
      await waitFor('a resynced', () => a.changes.length >= seen + 3);
      const got = a.changes
        .slice(seen)
        .map((ch) => `${ch.type} ${ch.node.name}${ch.type === 'upsert' && ch.previous !== undefined ? ' (was)' : ''}`)
        .sort();
      assert.deepEqual(got, ['delete node-d', 'upsert node-b (was)', 'upsert node-e']);
      assert.deepEqual(names(a), ['node-a', 'node-b', 'node-c', 'node-e']);
      void c;
      void e;
    });
  });
}
