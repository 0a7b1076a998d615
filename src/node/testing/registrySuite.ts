import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { breakableWatches } from '../../kvstore/testing/breakableWatches.js';
import type { Backend } from '../../kvstore/types.js';
import { NodeLease } from '../../identity/index.js';
import { testLogger, uniquePrefix, waitFor, type TestStore } from '../../identity/testing/cluster.js';
import { decodeNodeRecord } from '../nodeRecord.js';
import { NodeRegistry } from '../nodeRegistry.js';
import type { NodeChange, NodeRecord } from '../types.js';
import { nodeRecord, runRegistryContract, type ContractHarness } from './registryContract.js';

const LEASE_TTL = 2;

export { nodeRecord };

/** The contract's cluster over a kvstore: a fresh key prefix, one NodeLease per node. */
function kvstoreHarness(newStore: () => Promise<TestStore>): () => Promise<ContractHarness> {
  return async () => {
    const store = await newStore();
    const stops: Array<() => Promise<void>> = [];
    return {
      cluster: async (what) => {
        const prefix = uniquePrefix(`nodes-${what}`);
        const admin = await store.connect();
        const unstarted = async (name: string) => {
          const backend = await store.connect();
          const lease = new NodeLease(backend, { ttlSeconds: LEASE_TTL, keepAliveMs: 300, logger: testLogger });
          const registry = new NodeRegistry({ backend, lease, nodeName: name, keyPrefix: prefix, logger: testLogger });
          let down = false;
          const crash = async () => {
            if (down) return;
            down = true;
            await lease.stop({ revoke: false });
            await registry.stop();
          };
          stops.push(crash);
          return { registry, crash };
        };
        return {
          ttlSeconds: LEASE_TTL,
          unstarted: async (name) => (await unstarted(name)).registry,
          node: async (record) => {
            const { registry, crash } = await unstarted(record.name);
            const changes: NodeChange[] = [];
            registry.subscribe((c) => changes.push(c));
            await registry.start(record);
            return { name: record.name, registry, changes, crash };
          },
          // A key without a lease: it stays until deleted, as a live node's would.
          writeForeign: async (name, raw) => {
            await admin.put(`${prefix}${name}`, JSON.stringify(raw));
          },
          deleteRecord: async (name) => {
            await admin.delete(`${prefix}${name}`);
          },
          stored: async (name) => {
            const kv = await admin.get(`${prefix}${name}`);
            const r = kv === undefined ? undefined : decodeNodeRecord(kv.value, name);
            return typeof r === 'string' ? undefined : r;
          },
        };
      },
      destroy: async () => {
        for (const s of stops.splice(0)) await s();
        await store.destroy();
      },
    };
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

/**
 * The node registry's proof list, run against every kvstore backend: the
 * contract every registry keeps (registryContract.ts), then what only the
 * kvstore one does (keys under the node's lease, revocation, a watch that
 * fails and lists again).
 */
export function runRegistrySuite(name: string, newStore: () => Promise<TestStore>): void {
  runRegistryContract(`kvstore ${name}`, kvstoreHarness(newStore));

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

    it('a reader (follow(), no lease: the relay) lists the nodes with their flows address and writes nothing', async () => {
      const prefix = uniquePrefix('nodes-reader');
      await node(prefix, nodeRecord('node-a', 1, { flows: { address: '192.168.50.1:4245', tls: false } }));
      const backend = await store.connect();
      const reader = new NodeRegistry({ backend, nodeName: 'tdl-relay', keyPrefix: prefix, logger: testLogger });
      await reader.follow();
      try {
        assert.deepEqual(reader.list().map((r) => [r.name, r.flows]), [['node-a', { address: '192.168.50.1:4245', tls: false }]]);
        assert.equal(await backend.get(reader.key('tdl-relay')), undefined);
        const b = await node(prefix, nodeRecord('node-b', 2));
        await waitFor('node-b joins the reader', () => reader.get('node-b'));
        assert.equal(reader.get('node-b')?.flows, undefined, 'a record without a flows address (an older agent) is still a node');
        await b.shutdown();
        await waitFor('node-b leaves the reader', () => reader.get('node-b') === undefined);
        await assert.rejects(reader.start(nodeRecord('tdl-relay', 9)), /was started before|only follows/);
      } finally {
        await reader.stop();
        await backend.close();
      }
    });

    it('a record is the key of its node, held by the writer\'s lease; revisionOf is the key\'s mod revision', async () => {
      const prefix = uniquePrefix('nodes-see');
      const a = await node(prefix, nodeRecord('node-a', 1));
      const b = await node(prefix, nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      const kv = await a.backend.get(a.registry.key('node-b'));
      assert.equal(a.registry.revisionOf('node-b'), kv?.modRevision);
      assert.notEqual(kv?.lease, '0');
      assert.equal(kv?.lease, String(await b.lease.current()));
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

    it('keys the contract cannot express: not JSON, a record naming another node, a key that is no node name, unknown fields', async () => {
      const prefix = uniquePrefix('nodes-garbage');
      const a = await node(prefix, nodeRecord('node-a', 1));
      const bad = [
        ['node-x', 'not json'],
        ['node-w', JSON.stringify(nodeRecord('node-v', 4))], // names another node
        ['bad/name', JSON.stringify(nodeRecord('node-u', 5))],
      ];
      for (const [k, v] of bad) await a.backend.put(`${prefix}${k}`, v!);
      // A newer agent's extra field does not make its record garbage, and is not handed on.
      await a.backend.put(`${prefix}node-s`, JSON.stringify({ ...nodeRecord('node-s', 7), futureField: { x: 1 } }));
      await waitFor('node-s on a', () => a.registry.get('node-s'));
      assert.deepEqual(a.registry.list().map((r) => r.name), ['node-a', 'node-s']);
      assert.deepEqual(a.changes.map((c) => [c.type, c.node.name]), [['upsert', 'node-s']]);
      assert.equal((a.registry.get('node-s') as unknown as Record<string, unknown>).futureField, undefined);
      const c = await node(prefix, nodeRecord('node-c', 8));
      assert.deepEqual(c.registry.list().map((r) => r.name), ['node-a', 'node-c', 'node-s']);
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
