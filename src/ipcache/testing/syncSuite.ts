import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { breakableWatches } from '../../kvstore/testing/breakableWatches.js';
import type { Backend } from '../../kvstore/types.js';
import { LOCAL_IDENTITY_SCOPE, NodeLease } from '../../identity/index.js';
import { testLogger, uniquePrefix, waitFor, type TestStore } from '../../identity/testing/cluster.js';
import { IPCache } from '../ipcache.js';
import { KvstoreIPCacheSync } from '../kvstoreSync.js';
import { NodeAddressEntries } from '../nodeAddresses.js';
import { runSyncContract, type ContractEndpoint, type SyncContractHarness, type SyncContractNode } from './syncContract.js';

/** The ipcache proof list, run against every kvstore backend. */
interface SyncNode {
  name: string;
  ipcache: IPCache;
  sync: KvstoreIPCacheSync;
  lease: NodeLease;
  backend: Backend;
  crash(): Promise<void>;
}

const LEASE_TTL = 2;

/** The contract's view of a kvstore: one key prefix per cluster, one client (etcd: one connection) and lease per node. */
function kvstoreContractHarness(newStore: () => Promise<TestStore>): () => Promise<SyncContractHarness> {
  return async () => {
    const store = await newStore();
    const running = new Set<{ sync: KvstoreIPCacheSync; lease: NodeLease }>();
    const halt = async (n: { sync: KvstoreIPCacheSync; lease: NodeLease }) => {
      if (!running.delete(n)) return;
      // Keepalives stop, nothing is revoked: the lease expires by itself (as when an agent stops or dies).
      await n.lease.stop({ revoke: false });
      await n.sync.stop();
    };
    return {
      cluster: async (what) => {
        const prefix = uniquePrefix(`ipcache-contract-${what}`);
        const lives = new Map<string, { nodeIP: string; sync: KvstoreIPCacheSync; lease: NodeLease; endpoints: Map<number, ContractEndpoint> }>();
        const start = async (nodeName: string, nodeIP: string, endpoints: Map<number, ContractEndpoint>): Promise<SyncContractNode> => {
          const former = lives.get(nodeName);
          if (former !== undefined) await halt(former);
          const backend = await store.connect();
          const lease = new NodeLease(backend, { ttlSeconds: LEASE_TTL, keepAliveMs: 300, logger: testLogger });
          const ipcache = new IPCache({ logger: testLogger });
          const sync = new KvstoreIPCacheSync({ backend, ipcache, nodeName, nodeIP, lease, keyPrefix: prefix, logger: testLogger });
          const life = { nodeIP, sync, lease, endpoints };
          lives.set(nodeName, life);
          running.add(life);
          await sync.start();
          const upsert = (ep: ContractEndpoint) => {
            for (const ip of ep.addresses) ipcache.upsert(ip, { source: 'local', owner: `endpoint:${ep.id}`, identity: ep.identity });
          };
          for (const ep of endpoints.values()) upsert(ep);
          return {
            name: nodeName,
            ipcache,
            publish: async (ep) => {
              endpoints.set(ep.id, ep);
              upsert(ep);
            },
            withdraw: (ep) => {
              endpoints.delete(ep.id);
              for (const ip of ep.addresses) ipcache.delete(ip, { source: 'local', owner: `endpoint:${ep.id}` });
            },
            flush: () => sync.flush(),
            pruneStale: () => sync.pruneStale(),
          };
        };
        const life = (nodeName: string) => {
          const l = lives.get(nodeName);
          if (l === undefined) throw new Error(`no node ${nodeName}`);
          return l;
        };
        return {
          // A new life starts with no endpoints: the contract publishes the restored ones.
          node: (nodeName, nodeIP) => start(nodeName, nodeIP, new Map()),
          stop: (nodeName) => halt(life(nodeName)),
          kill: (nodeName) => halt(life(nodeName)),
          // The node restarts and publishes what it still runs (its keys went with its lease).
          revive: (nodeName) => start(nodeName, life(nodeName).nodeIP, life(nodeName).endpoints),
          writeBroken: async (ip) => {
            const backend = await store.connect();
            await backend.put(`${prefix}${ip}`, '{"identity":"three hundred","hostIP":"nowhere"}');
          },
        };
      },
      destroy: async () => {
        for (const n of [...running]) await halt(n);
        await store.destroy();
      },
    };
  };
}

export function runSyncSuite(name: string, newStore: () => Promise<TestStore>): void {
  runSyncContract(`kvstore (${name})`, kvstoreContractHarness(newStore), { deathTimeoutMs: (LEASE_TTL + 5) * 1000 });
  describe(`ipcache kvstore sync: ${name}`, () => {
    let store: TestStore;
    const nodes: SyncNode[] = [];
    before(async () => {
      store = await newStore();
    });
    after(async () => {
      for (const n of nodes) {
        await n.sync.stop();
        await n.lease.stop();
      }
      await store.destroy();
    });

    async function node(nodeName: string, nodeIP: string, prefix: string, wrap?: (b: Backend) => Backend, nodeIP6?: string): Promise<SyncNode> {
      const raw = await store.connect();
      const backend = wrap === undefined ? raw : wrap(raw);
      const lease = new NodeLease(backend, { ttlSeconds: LEASE_TTL, keepAliveMs: 300, logger: testLogger });
      const ipcache = new IPCache({ logger: testLogger });
      const sync = new KvstoreIPCacheSync({ backend, ipcache, nodeName, nodeIP, lease, keyPrefix: prefix, logger: testLogger, ...(nodeIP6 === undefined ? {} : { nodeIP6 }) });
      await sync.start();
      const n: SyncNode = {
        name: nodeName,
        ipcache,
        sync,
        lease,
        backend,
        crash: async () => {
          await lease.stop({ revoke: false });
          await sync.stop();
        },
      };
      nodes.push(n);
      return n;
    }

    it("a pod on node A appears in node B's ipcache with A as its host; the delay is measured", async (t) => {
      const prefix = uniquePrefix('ipcache-prop');
      const a = await node('node-a', '192.168.0.1', prefix);
      const b = await node('node-b', '192.168.0.2', prefix);
      const delays: number[] = [];
      const arrivals = new Map<string, () => void>();
      b.ipcache.subscribe({ onUpsert: (e) => arrivals.get(e.prefix)?.(), onDelete: () => undefined });
      for (let i = 1; i <= 20; i++) {
        const ip = `10.0.1.${i}`;
        const arrived = new Promise<void>((resolve) => arrivals.set(`${ip}/32`, resolve));
        const t0 = performance.now();
        a.ipcache.upsert(ip, { source: 'local', owner: `endpoint:${i}`, identity: 300 + i });
        await arrived;
        delays.push(performance.now() - t0);
        const seen = b.ipcache.lookup(ip)!;
        assert.equal(seen.identity, 300 + i);
        assert.equal(seen.hostIP, '192.168.0.1');
        assert.equal(seen.source, 'kvstore');
      }
      delays.sort((x, y) => x - y);
      t.diagnostic(`ipcache A→B propagation over ${name}: p50 ${delays[10]!.toFixed(2)} ms, max ${delays[19]!.toFixed(2)} ms (20 addresses)`);
      // Our own entries are not mirrored back as kvstore entries.
      assert.deepEqual(a.ipcache.candidates('10.0.1.1').map((e) => e.source), ['local']);
      a.ipcache.delete('10.0.1.1', { source: 'local', owner: 'endpoint:1' });
      await waitFor('delete on b', () => b.ipcache.lookup('10.0.1.1') === undefined);
    });

    it('a dual-stack node publishes its IPv6 InternalIP beside its IPv4 node IP: a node whose node IP is IPv6 alone takes it as the host, an IPv4 one the IPv4 node IP', async () => {
      const prefix = uniquePrefix('ipcache-mixed');
      const a = await node('node-a', '192.168.0.1', prefix, undefined, 'fd00:168::1');
      const b = await node('node-b', '192.168.0.2', prefix);
      const c = await node('node-c', 'fd00:168::3', prefix);
      a.ipcache.upsert('10.0.9.1', { source: 'local', owner: 'endpoint:1', identity: 301 });
      a.ipcache.upsert('fd00:9::1', { source: 'local', owner: 'endpoint:1', identity: 301 });
      await waitFor('both on b and c', () => ['10.0.9.1', 'fd00:9::1'].every((ip) => b.ipcache.lookup(ip) !== undefined && c.ipcache.lookup(ip) !== undefined));
      for (const ip of ['10.0.9.1', 'fd00:9::1']) {
        assert.equal(b.ipcache.lookup(ip)?.hostIP, '192.168.0.1', `${ip} on b`);
        assert.equal(c.ipcache.lookup(ip)?.hostIP, 'fd00:168::1', `${ip} on c`);
      }
      // c's own entries name its IPv6 node IP, whoever reads them.
      c.ipcache.upsert('10.0.9.3', { source: 'local', owner: 'endpoint:3', identity: 303 });
      await waitFor('c\'s pod on a', () => a.ipcache.lookup('10.0.9.3') !== undefined);
      assert.equal(a.ipcache.lookup('10.0.9.3')?.hostIP, 'fd00:168::3');
      for (const n of [a, c]) n.ipcache.delete(n === a ? '10.0.9.1' : '10.0.9.3', { source: 'local', owner: n === a ? 'endpoint:1' : 'endpoint:3' });
      a.ipcache.delete('fd00:9::1', { source: 'local', owner: 'endpoint:1' });
    });

    it("a stale delete from the old node does not wipe the address's new owner", async () => {
      const prefix = uniquePrefix('ipcache-stale');
      const a = await node('node-a', '192.168.0.1', prefix);
      const b = await node('node-b', '192.168.0.2', prefix);
      const c = await node('node-c', '192.168.0.3', prefix);
      a.ipcache.upsert('10.0.2.9', { source: 'local', owner: 'endpoint:1', identity: 300 });
      await a.sync.flush();
      // The pod moves: the address is reused on node B before node A's delete runs.
      b.ipcache.upsert('10.0.2.9', { source: 'local', owner: 'endpoint:7', identity: 301 });
      await b.sync.flush();
      a.ipcache.delete('10.0.2.9', { source: 'local', owner: 'endpoint:1' });
      await a.sync.flush();
      assert.equal(a.sync.stats.staleDeletesSkipped, 1);
      const kv = await c.backend.get(c.sync.key('10.0.2.9'));
      assert.ok(kv, 'the key of the new owner survives');
      const seen = await waitFor('b entry on c', () => {
        const e = c.ipcache.lookup('10.0.2.9');
        return e?.identity === 301 ? e : undefined;
      });
      assert.equal(seen.hostIP, '192.168.0.2');
      await waitFor('b entry on a', () => a.ipcache.lookup('10.0.2.9')?.identity === 301);
    });

    it("a dead node's entries disappear everywhere once its lease expires", async () => {
      const prefix = uniquePrefix('ipcache-dead');
      const a = await node('node-a', '192.168.0.1', prefix);
      const b = await node('node-b', '192.168.0.2', prefix);
      a.ipcache.upsert('10.0.3.1', { source: 'local', owner: 'endpoint:1', identity: 300 });
      a.ipcache.upsert('10.0.3.0/28', { source: 'local', owner: 'endpoint:2', identity: 301 });
      b.ipcache.upsert('10.0.4.1', { source: 'local', owner: 'endpoint:3', identity: 302 });
      await waitFor('a entries on b', () => b.ipcache.get('10.0.3.0/28') !== undefined && b.ipcache.get('10.0.3.1') !== undefined);
      await a.crash();
      const t0 = Date.now();
      await waitFor('a entries gone from b', () => b.ipcache.lookup('10.0.3.1') === undefined && b.ipcache.lookup('10.0.3.2') === undefined, (LEASE_TTL + 5) * 1000);
      assert.ok(Date.now() - t0 < (LEASE_TTL + 5) * 1000);
      assert.equal(b.ipcache.lookup('10.0.4.1')?.identity, 302, "b's own entry stays");
    });

    it('a failed watch (compaction) re-lists and reconciles what it missed', async () => {
      const prefix = uniquePrefix('ipcache-compact');
      const a = await node('node-a', '192.168.0.1', prefix);
      let breaker: ReturnType<typeof breakableWatches> | undefined;
      const b = await node('node-b', '192.168.0.2', prefix, (raw) => {
        breaker = breakableWatches(raw);
        return breaker.backend;
      });
      a.ipcache.upsert('10.0.5.1', { source: 'local', owner: 'endpoint:1', identity: 300 });
      await waitFor('first entry on b', () => b.ipcache.lookup('10.0.5.1'));
      breaker!.deafen();
      a.ipcache.delete('10.0.5.1', { source: 'local', owner: 'endpoint:1' });
      a.ipcache.upsert('10.0.5.2', { source: 'local', owner: 'endpoint:2', identity: 301 });
      await a.sync.flush();
      assert.ok(b.ipcache.lookup('10.0.5.1'), 'b missed the delete while deaf');
      breaker!.compact();
      await waitFor('b reconciled', () => b.ipcache.lookup('10.0.5.1') === undefined && b.ipcache.lookup('10.0.5.2')?.identity === 301);
      assert.equal(b.sync.stats.resyncs, 1);
    });

    it('after an agent restart, keys of the earlier life that were not restored are pruned', async () => {
      const prefix = uniquePrefix('ipcache-prune');
      const first = await node('node-a', '192.168.0.1', prefix);
      first.ipcache.upsert('10.0.7.1', { source: 'local', owner: 'endpoint:1', identity: 300 });
      first.ipcache.upsert('10.0.7.2', { source: 'local', owner: 'endpoint:2', identity: 301 });
      await first.sync.flush();
      await first.crash();
      const again = await node('node-a', '192.168.0.1', prefix);
      again.ipcache.upsert('10.0.7.1', { source: 'local', owner: 'endpoint:1', identity: 300 });
      assert.equal(await again.sync.pruneStale(), 1);
      assert.equal(await again.backend.get(again.sync.key('10.0.7.2')), undefined);
      assert.ok(await again.backend.get(again.sync.key('10.0.7.1')));
    });

    it('node-local (CIDR) identities are never published', async () => {
      const prefix = uniquePrefix('ipcache-local');
      const a = await node('node-a', '192.168.0.1', prefix);
      a.ipcache.upsert('10.9.0.0/16', { source: 'local', owner: 'cidr-policy', identity: LOCAL_IDENTITY_SCOPE + 1 });
      a.ipcache.upsert('10.9.0.1', { source: 'local', owner: 'endpoint:1', identity: 300 });
      await a.sync.flush();
      assert.equal(await a.backend.get(a.sync.key('10.9.0.0/16')), undefined);
      assert.ok(await a.backend.get(a.sync.key('10.9.0.1')));
    });

    it("the node's own addresses (identity host) are never published: other nodes know them as a remote node's", async () => {
      const prefix = uniquePrefix('ipcache-host');
      const a = await node('node-a', '192.168.0.1', prefix);
      const b = await node('node-b', '192.168.0.2', prefix);
      const own = new NodeAddressEntries(a.ipcache, 'node-a');
      own.set(['10.0.8.1', '192.168.0.1']);
      a.ipcache.upsert('10.0.8.5', { source: 'local', owner: 'endpoint:1', identity: 300 });
      await a.sync.flush();
      assert.equal(await a.backend.get(a.sync.key('10.0.8.1')), undefined);
      assert.equal(await a.backend.get(a.sync.key('192.168.0.1')), undefined);
      await waitFor('the pod on b', () => b.ipcache.lookup('10.0.8.5')?.identity === 300);
      assert.equal(b.ipcache.get('10.0.8.1'), undefined);
      assert.equal(a.ipcache.get('10.0.8.1')?.identity, 1);
      own.set([]);
      assert.equal(a.ipcache.get('10.0.8.1'), undefined);
    });

    it('entries are published again after the node lease is lost', async () => {
      const prefix = uniquePrefix('ipcache-relay');
      const a = await node('node-a', '192.168.0.1', prefix);
      const b = await node('node-b', '192.168.0.2', prefix);
      a.ipcache.upsert('10.0.6.1', { source: 'local', owner: 'endpoint:1', identity: 300 });
      await a.sync.flush();
      const before = await a.backend.get(a.sync.key('10.0.6.1'));
      await a.backend.revokeLease(before!.lease);
      await waitFor('republished', async () => {
        const kv = await a.backend.get(a.sync.key('10.0.6.1'));
        return kv !== undefined && kv.lease !== before!.lease;
      });
      await waitFor('back on b', () => b.ipcache.lookup('10.0.6.1')?.identity === 300);
    });
  });
}
