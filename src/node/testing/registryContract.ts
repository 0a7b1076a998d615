import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { waitFor } from '../../identity/testing/cluster.js';
import { NodeErrorCode } from '../errors.js';
import type { NodeChange, NodeRecord, NodeRegistryService } from '../types.js';

/**
 * The contract every node registry keeps, whatever holds the records: the
 * kvstore (registrySuite.ts: embedded and etcd; records under the node's
 * kvstore lease) and the Kubernetes API (src/k8s/kubernetesNodeRegistry.test.ts:
 * TendrilNode objects, liveness by Lease, over the fake API server). What
 * only one store does (keys and leases, objects, owner references, spec.ipam)
 * is tested beside its store.
 */
export interface ContractNode {
  name: string;
  registry: NodeRegistryService;
  /** Every change the registry reported since before its start. */
  changes: NodeChange[];
  /** Ends the node as SIGKILL does: no more renewals, nothing removed; its liveness runs out after the TTL. */
  crash(): Promise<void>;
}

export interface ContractCluster {
  /** Liveness of the nodes' records (kvstore lease TTL, Lease duration), seconds. */
  readonly ttlSeconds: number;
  /** A started registry publishing `record`. */
  node(record: NodeRecord): Promise<ContractNode>;
  /** A registry for node `name`, not started (the harness stops it at the end). */
  unstarted(name: string): Promise<NodeRegistryService>;
  /**
   * Writes a record for node `name` as another writer would, in the store's
   * form (a key's JSON, a TendrilNode's spec), kept alive (lease), without a
   * registry: `raw` may be invalid.
   */
  writeForeign(name: string, raw: Record<string, unknown>): Promise<void>;
  /** Deletes node `name`'s record by hand (the key, the object). */
  deleteRecord(name: string): Promise<void>;
  /** The record the store holds for `name`, as the store's decoding reads it; undefined when none (or undecodable). */
  stored(name: string): Promise<NodeRecord | undefined>;
}

export interface ContractHarness {
  /** A cluster no other test shares (a fresh key prefix, a fresh API server). */
  cluster(what: string): Promise<ContractCluster>;
  /** Stops every registry and closes every store it made. */
  destroy(): Promise<void>;
}

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

/** A record's JSON as another writer puts it (NodeRecord fields; the store's form is the harness's business). */
function raw(record: NodeRecord, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { ...(JSON.parse(JSON.stringify(record)) as Record<string, unknown>), ...overrides };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function runRegistryContract(name: string, newHarness: () => Promise<ContractHarness>): void {
  describe(`node registry contract: ${name}`, () => {
    let harness: ContractHarness;
    before(async () => {
      harness = await newHarness();
    });
    after(async () => {
      await harness?.destroy();
    });

    const names = (n: ContractNode) => n.registry.list().map((r) => r.name);
    const events = (n: ContractNode, node: string) => n.changes.filter((c) => c.node.name === node).map((c) => c.type);

    it('publishes its own record and sees the others; the first listing is not reported as changes', async () => {
      const cluster = await harness.cluster('see');
      const a = await cluster.node(nodeRecord('node-a', 1));
      assert.deepEqual(names(a), ['node-a']);
      assert.equal(a.registry.nodeName, 'node-a');
      const b = await cluster.node(nodeRecord('node-b', 2));
      // b's first listing already holds a; a learns of b as a change.
      assert.deepEqual(names(b), ['node-a', 'node-b']);
      assert.deepEqual(b.changes, [], 'what the first listing held (its own record too) is not a change');
      await waitFor('b on a', () => a.registry.get('node-b'));
      assert.deepEqual(names(a), ['node-a', 'node-b']);
      assert.deepEqual(events(a, 'node-b'), ['upsert']);
      assert.deepEqual(a.registry.get('node-b'), b.registry.get('node-b'));
      assert.deepEqual(a.registry.get('node-b'), { ...nodeRecord('node-b', 2), startedAt: b.registry.get('node-b')!.startedAt });
      assert.deepEqual(await cluster.stored('node-b'), b.registry.get('node-b'), 'the store holds what the node publishes');
      assert.ok((a.registry.revisionOf('node-b') ?? 0) > 0);
      assert.ok((a.registry.revisionOf('node-a') ?? 0) > 0);
      assert.equal(a.registry.revisionOf('node-zz'), undefined);
      assert.equal(a.registry.get('node-zz'), undefined);
    });

    it('an update reaches the other node as an upsert with the previous record; the same content again is no change', async () => {
      const cluster = await harness.cluster('update');
      const a = await cluster.node(nodeRecord('node-a', 1));
      const b = await cluster.node(nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      const rev0 = a.registry.revisionOf('node-b')!;
      const next = nodeRecord('node-b', 2, { podCidrs: ['10.200.2.0/24', '10.200.3.0/26', 'fd00:200::/64'], health: { status: 'degraded', reason: 'datapath' } });
      await b.registry.update(next);
      assert.deepEqual(b.registry.get('node-b')?.podCidrs, next.podCidrs, 'own view at once');
      const change = await waitFor('update on a', () => a.changes.find((c) => c.type === 'upsert' && c.node.name === 'node-b' && c.previous !== undefined));
      assert.ok(change.type === 'upsert');
      assert.deepEqual(change.node.podCidrs, next.podCidrs);
      assert.deepEqual(change.previous?.podCidrs, ['10.200.2.0/24']);
      assert.deepEqual(a.registry.get('node-b')?.health, { status: 'degraded', reason: 'datapath' });
      assert.ok(a.registry.revisionOf('node-b')! > rev0);
      // Back to ok: the reason goes too.
      await b.registry.update({ ...next, health: { status: 'ok' } });
      await waitFor('ok on a', () => a.registry.get('node-b')?.health.status === 'ok');
      assert.deepEqual(a.registry.get('node-b')?.health, { status: 'ok' });
      assert.deepEqual(await cluster.stored('node-b'), { ...next, health: { status: 'ok' } });
      const seen = a.changes.length;
      await b.registry.update({ ...next, health: { status: 'ok' } });
      await sleep(300);
      assert.equal(a.changes.length, seen, 'writing the same content again is no change for anyone');
    });

    it('refuses an own record other nodes could not decode; nothing is written', async () => {
      const cluster = await harness.cluster('invalid');
      const r = await cluster.unstarted('node-a');
      await assert.rejects(r.start(nodeRecord('node-b', 1)), (e: Error & { code?: string }) => e.code === NodeErrorCode.INVALID_RECORD);
      const r2 = await cluster.unstarted('node-a');
      await assert.rejects(r2.start(nodeRecord('node-a', 1, { podCidrs: ['10.200.1.7/24'] })), /podCidrs/);
      const r3 = await cluster.unstarted('node-a');
      await assert.rejects(r3.update(nodeRecord('node-a', 1)), (e: Error & { code?: string }) => e.code === NodeErrorCode.NOT_RUNNING);
      assert.equal(await cluster.stored('node-a'), undefined);
    });

    it("a crashed node leaves the others' view with a delete once its TTL ran out, not before", async () => {
      const cluster = await harness.cluster('death');
      const a = await cluster.node(nodeRecord('node-a', 1));
      const b = await cluster.node(nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      await b.crash();
      const t0 = Date.now();
      await sleep(cluster.ttlSeconds * 500);
      assert.ok(a.registry.get('node-b'), 'still listed within its TTL');
      const del = await waitFor('b gone on a', () => a.changes.find((c) => c.type === 'delete' && c.node.name === 'node-b'), (cluster.ttlSeconds + 5) * 1000);
      assert.ok(Date.now() - t0 >= cluster.ttlSeconds * 500, 'the record outlived the crash');
      assert.equal(del.node.routingMode, 'tunnel');
      assert.deepEqual(del.node.podCidrs, ['10.200.2.0/24']);
      assert.deepEqual(names(a), ['node-a']);
      assert.equal(a.registry.get('node-b'), undefined);
      assert.equal(a.registry.revisionOf('node-b'), undefined);
    });

    it('a dead node that comes back is an upsert again', async () => {
      const cluster = await harness.cluster('return');
      const a = await cluster.node(nodeRecord('node-a', 1));
      const b = await cluster.node(nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      await b.crash();
      await waitFor('b gone on a', () => a.registry.get('node-b') === undefined, (cluster.ttlSeconds + 5) * 1000);
      const back = nodeRecord('node-b', 2, { podCidrs: ['10.200.22.0/24'] });
      await cluster.node(back);
      await waitFor('b back on a', () => a.registry.get('node-b'));
      assert.deepEqual(a.registry.get('node-b')?.podCidrs, ['10.200.22.0/24']);
      assert.deepEqual(events(a, 'node-b'), ['upsert', 'delete', 'upsert']);
      assert.deepEqual(names(a), ['node-a', 'node-b']);
    });

    it('a node restarted within its TTL stays listed throughout: an upsert with the previous record, no delete', async () => {
      const cluster = await harness.cluster('restart');
      const a = await cluster.node(nodeRecord('node-a', 1));
      const first = nodeRecord('node-b', 2, { startedAt: '2026-01-01T00:00:00.000Z' });
      const b = await cluster.node(first);
      await waitFor('b on a', () => a.registry.get('node-b'));
      await b.crash();
      const second = nodeRecord('node-b', 2, { startedAt: '2026-01-01T00:05:00.000Z' });
      await cluster.node(second);
      const up = await waitFor('restart on a', () => a.changes.find((c) => c.type === 'upsert' && c.node.name === 'node-b' && c.previous !== undefined));
      assert.ok(up.type === 'upsert');
      assert.equal(up.previous?.startedAt, first.startedAt);
      assert.equal(up.node.startedAt, second.startedAt);
      // Past the first run's TTL: the restarted node keeps it alive.
      await sleep((cluster.ttlSeconds + 1) * 1000);
      assert.equal(a.registry.get('node-b')?.startedAt, second.startedAt);
      assert.deepEqual(events(a, 'node-b'), ['upsert', 'upsert']);
    });

    it('records that do not decode are logged and ignored; a record turned garbage counts as deleted', async () => {
      const cluster = await harness.cluster('garbage');
      const a = await cluster.node(nodeRecord('node-a', 1));
      const b = await cluster.node(nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      // Each passes any schema the store has, and fails the record's own rules.
      await cluster.writeForeign('node-y', raw(nodeRecord('node-y', 3), { addresses: [{ type: 'InternalIP', ip: '999.1.1.1' }] }));
      await cluster.writeForeign('node-x', raw(nodeRecord('node-x', 4), { podCidrs: ['10.9.0.7/24'] }));
      await cluster.writeForeign('node-t', raw(nodeRecord('node-t', 6), { tunnel: undefined })); // tunnel mode without tunnel
      await cluster.writeForeign('node-b', raw(nodeRecord('node-b', 2), { addresses: [{ type: 'InternalIP', ip: '192.168.50.300' }] }));
      await waitFor('b gone on a', () => a.changes.find((c) => c.type === 'delete' && c.node.name === 'node-b'));
      // A good record after them shows the garbage was passed over, not stuck in front.
      await cluster.writeForeign('node-s', raw(nodeRecord('node-s', 7)));
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
      // A fresh registry lists past the garbage too.
      const c = await cluster.node(nodeRecord('node-c', 8));
      assert.deepEqual(names(c), ['node-a', 'node-c', 'node-s']);
      void b;
    });

    it('its own record deleted by hand is written again; the others end with the node present', async () => {
      const cluster = await harness.cluster('deleted');
      const a = await cluster.node(nodeRecord('node-a', 1));
      const b = await cluster.node(nodeRecord('node-b', 2));
      await waitFor('b on a', () => a.registry.get('node-b'));
      await cluster.deleteRecord('node-b');
      const back = await waitFor('republished', () => cluster.stored('node-b'));
      assert.deepEqual(back, b.registry.get('node-b'));
      await waitFor('b on a after the delete', () => a.changes.filter((c) => c.node.name === 'node-b').length >= 3 && a.registry.get('node-b'));
      assert.deepEqual(events(a, 'node-b'), ['upsert', 'delete', 'upsert']);
      // It stays: the rewritten record is held alive as the first was.
      await sleep((cluster.ttlSeconds + 1) * 1000);
      assert.ok(await cluster.stored('node-b'));
      assert.ok(a.registry.get('node-b'));
    });
  });
}
