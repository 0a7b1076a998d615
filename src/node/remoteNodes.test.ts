import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, afterEach, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { FakeNodeRouting } from '../datapath/fake/fakeNodeRouting.js';
import { NodeLease, ReservedIdentity } from '../identity/index.js';
import { testLogger, uniquePrefix, waitFor, embeddedStore, type TestStore } from '../identity/testing/cluster.js';
import { IPCache } from '../ipcache/ipcache.js';
import { NodeAddressEntries } from '../ipcache/nodeAddresses.js';
import { NodeRegistry } from './nodeRegistry.js';
import { RemoteNodes } from './remoteNodes.js';
import { nodeRecord } from './testing/registrySuite.js';
import type { NodeRecord } from './types.js';
import type { Logger } from '../logging/logger.js';

// RemoteNodes over real registries on one embedded store, a real IPCache and
// the in-memory node routing.
describe('remote nodes', () => {
  let store: TestStore;
  const stops: Array<() => Promise<void>> = [];
  before(async () => {
    store = await embeddedStore();
  });
  afterEach(async () => {
    for (const s of stops.splice(0).reverse()) await s();
  });
  after(async () => {
    await store.destroy();
  });

  async function registry(prefix: string, record: NodeRecord): Promise<{ registry: NodeRegistry; shutdown(): Promise<void> }> {
    const backend = await store.connect();
    const lease = new NodeLease(backend, { ttlSeconds: 5, logger: testLogger });
    const r = new NodeRegistry({ backend, lease, nodeName: record.name, keyPrefix: prefix, logger: testLogger });
    await r.start(record);
    let down = false;
    const shutdown = async () => {
      if (down) return;
      down = true;
      await r.stop();
      await lease.stop({ revoke: true });
    };
    stops.push(shutdown);
    return { registry: r, shutdown };
  }

  function remoteNodes(reg: NodeRegistry, ipcache: IPCache, routing?: FakeNodeRouting, logger: Logger = testLogger): RemoteNodes {
    const rn = new RemoteNodes({ registry: reg, nodeName: 'node-a', ipcache, ...(routing ? { routing } : {}), logger, retryMs: 50 });
    stops.push(() => rn.stop());
    return rn;
  }

  const dualStack = (n: number) =>
    nodeRecord(`node-${String.fromCharCode(96 + n)}`, n, {
      addresses: [
        { type: 'InternalIP', ip: `fd00:50::${n}` },
        { type: 'InternalIP', ip: `192.168.50.${n}` },
        { type: 'RouterIP', ip: `10.200.${n}.1` },
      ],
      podCidrs: [`10.200.${n}.0/24`, `fd00:200:${n}::/64`],
    });

  it('installs ipcache entries and routes of every other node, follows updates and deletes, ignores its own', async () => {
    const prefix = uniquePrefix('remote-nodes');
    const a = await registry(prefix, dualStack(1));
    const b = await registry(prefix, dualStack(2));
    const c = await registry(prefix, dualStack(3));
    await waitFor('b and c on a', () => a.registry.list().length === 3);
    const ipcache = new IPCache({ logger: testLogger });
    // This node's own addresses, as the agent holds them: local, identity host.
    new NodeAddressEntries(ipcache, 'node-a').set(['192.168.50.1', '10.200.1.1']);
    const routing = new FakeNodeRouting('tunnel');
    const rn = remoteNodes(a.registry, ipcache, routing);
    await rn.start();

    assert.ok(rn.installed('node-b') && rn.installed('node-c'));
    assert.equal(rn.installed('node-a'), false);
    assert.deepEqual([...routing.remoteNodes().keys()].sort(), ['node-b', 'node-c']);
    // Every pod CIDR with both next hops: the datapath routes what its mode carries.
    assert.deepEqual(routing.remoteNodes().get('node-b'), { name: 'node-b', nodeIp: '192.168.50.2', nodeIp6: 'fd00:50::2', podCidrs: ['10.200.2.0/24', 'fd00:200:2::/64'] });
    for (const ip of ['192.168.50.2', '10.200.2.1', 'fd00:50::2']) {
      const e = ipcache.lookup(ip);
      assert.ok(e, ip);
      assert.equal(e.identity, ReservedIdentity.RemoteNode);
      assert.equal(e.hostIP, '192.168.50.2', 'tunnel endpoint = the first IPv4 InternalIP');
      assert.equal(e.source, 'kvstore');
      assert.equal(e.owner, 'node:node-b');
    }
    assert.equal(ipcache.lookup('10.200.1.1')?.identity, ReservedIdentity.Host, 'own addresses untouched');
    assert.deepEqual(ipcache.candidates('10.200.1.1').map((e) => e.source), ['local']);
    const prune = routing.calls.find((x) => x.op === 'pruneRemoteNodes');
    assert.deepEqual(prune?.names.sort(), ['node-b', 'node-c']);

    // b moves its router address and gets a second CIDR.
    await b.registry.update({
      ...dualStack(2),
      addresses: [
        { type: 'InternalIP', ip: '192.168.50.2' },
        { type: 'RouterIP', ip: '10.201.2.1' },
      ],
      podCidrs: ['10.200.2.0/24', '10.201.2.0/24'],
    });
    await waitFor('b updated', () => routing.remoteNodes().get('node-b')?.podCidrs.includes('10.201.2.0/24') === true);
    assert.equal(routing.remoteNodes().get('node-b')?.nodeIp6, undefined, 'b gave up its IPv6 InternalIP: no IPv6 next hop');
    await rn.idle();
    assert.equal(ipcache.lookup('10.201.2.1')?.owner, 'node:node-b');
    assert.equal(ipcache.get('10.200.2.1'), undefined, 'the address b gave up is gone');
    assert.equal(ipcache.get('fd00:50::2'), undefined);
    assert.ok(rn.installed('node-b'));

    // c leaves.
    await c.shutdown();
    await waitFor('c removed', () => !routing.remoteNodes().has('node-c'));
    await rn.idle();
    assert.equal(rn.installed('node-c'), false);
    for (const ip of ['192.168.50.3', '10.200.3.1', 'fd00:50::3']) assert.equal(ipcache.get(ip), undefined, ip);

    // a's own record changing is none of RemoteNodes' business.
    const before = routing.calls.length;
    await a.registry.update({ ...dualStack(1), health: { status: 'degraded', reason: 'test' } });
    await new Promise((r) => setTimeout(r, 100));
    await rn.idle();
    assert.equal(routing.calls.length, before);
    assert.equal(ipcache.lookup('192.168.50.1')?.identity, ReservedIdentity.Host);

    // A node joining after start.
    await registry(prefix, dualStack(4));
    await waitFor('d installed', () => rn.installed('node-d'));
    assert.equal(ipcache.lookup('192.168.50.4')?.identity, ReservedIdentity.RemoteNode);
  });

  it('prunes routes an earlier run left for nodes that are gone', async () => {
    const prefix = uniquePrefix('remote-prune');
    const a = await registry(prefix, dualStack(1));
    await registry(prefix, dualStack(2));
    await waitFor('b on a', () => a.registry.get('node-b'));
    const routing = new FakeNodeRouting('native');
    routing.seed({ name: 'node-z', nodeIp: '192.168.50.26', podCidrs: ['10.200.26.0/24'] });
    routing.seed({ name: 'node-b', nodeIp: '192.168.50.99', podCidrs: ['10.99.0.0/24'] });
    const rn = remoteNodes(a.registry, new IPCache({ logger: testLogger }), routing);
    await rn.start();
    assert.deepEqual([...routing.remoteNodes().keys()], ['node-b']);
    assert.deepEqual(routing.remoteNodes().get('node-b')?.podCidrs, ['10.200.2.0/24', 'fd00:200:2::/64'], 'stale routes of a live node replaced');
    const ops = routing.calls.map((c) => c.op);
    // Pruning first: an install that comes after can never be undone by the prune of a listing older than it.
    assert.ok(ops.indexOf('pruneRemoteNodes') < ops.indexOf('upsertRemoteNode'), 'prunes first, then installs');
  });

  it('retries a failed route install on a timer, without unhandled rejections', async () => {
    const prefix = uniquePrefix('remote-retry');
    const a = await registry(prefix, dualStack(1));
    await registry(prefix, dualStack(2));
    await waitFor('b on a', () => a.registry.get('node-b'));
    const routing = new FakeNodeRouting('tunnel');
    routing.failNext('upsertRemoteNode');
    routing.failNext('upsertRemoteNode');
    routing.failNext('pruneRemoteNodes');
    const ipcache = new IPCache({ logger: testLogger });
    const rn = remoteNodes(a.registry, ipcache, routing);
    await rn.start();
    assert.equal(rn.installed('node-b'), false);
    assert.equal(ipcache.lookup('192.168.50.2')?.identity, ReservedIdentity.RemoteNode, 'ipcache entries do not wait for routes');
    await waitFor('b installed after retries', () => rn.installed('node-b'), 5000);
    assert.equal(routing.calls.filter((c) => c.op === 'upsertRemoteNode').length, 3);
    assert.ok(routing.remoteNodes().has('node-b'));

    // A failed removal is retried too: the node's routes do not outlive it.
    routing.failNext('removeRemoteNode');
    const c = await registry(prefix, dualStack(3));
    await waitFor('c installed', () => rn.installed('node-c'));
    await c.shutdown();
    await waitFor('c removed after a retry', () => !routing.remoteNodes().has('node-c'), 5000);
    assert.equal(routing.calls.filter((x) => x.op === 'removeRemoteNode').length, 2);
    assert.equal(ipcache.get('192.168.50.3'), undefined);
  });

  it('without node routing, keeps the ipcache entries only; a node without an IPv4 InternalIP has its IPv6 one as tunnel endpoint', async () => {
    const prefix = uniquePrefix('remote-noroute');
    const a = await registry(prefix, dualStack(1));
    await registry(prefix, nodeRecord('node-b', 2, { addresses: [{ type: 'InternalIP', ip: 'fd00:50::2' }], podCidrs: ['fd00:200:2::/64'] }));
    await waitFor('b on a', () => a.registry.get('node-b'));
    const ipcache = new IPCache({ logger: testLogger });
    const rn = remoteNodes(a.registry, ipcache);
    await rn.start();
    assert.ok(rn.installed('node-b'));
    const e = ipcache.lookup('fd00:50::2');
    assert.equal(e?.identity, ReservedIdentity.RemoteNode);
    assert.equal(e?.hostIP, 'fd00:50::2');
  });

  it('an IPv6-only node: its IPv6 InternalIP is its addresses\' tunnel endpoint (an IPv6 underlay) and, in native routing, its IPv6 pod CIDRs\' node IP', async () => {
    const prefix = uniquePrefix('remote-v6only');
    const a = await registry(prefix, dualStack(1));
    await registry(prefix, nodeRecord('node-b', 2, { addresses: [{ type: 'InternalIP', ip: 'fd00:50::2' }, { type: 'RouterIP', ip: 'fd00:200:2::1' }], podCidrs: ['fd00:200:2::/64'] }));
    await waitFor('b on a', () => a.registry.get('node-b'));
    const ipcache = new IPCache({ logger: testLogger });
    const routing = new FakeNodeRouting('native');
    const rn = remoteNodes(a.registry, ipcache, routing);
    await rn.start();
    assert.ok(rn.installed('node-b'));
    assert.deepEqual(routing.remoteNodes().get('node-b'), { name: 'node-b', nodeIp: 'fd00:50::2', podCidrs: ['fd00:200:2::/64'] });
    for (const ip of ['fd00:50::2', 'fd00:200:2::1']) {
      assert.equal(ipcache.lookup(ip)?.identity, ReservedIdentity.RemoteNode, ip);
      assert.equal(ipcache.lookup(ip)?.hostIP, 'fd00:50::2', `${ip}: the IPv6 tunnel endpoint`);
    }
  });
  it('an IPv6-only node reaches a dual-stack peer at its IPv6 InternalIP (a cluster may mix them), and warns once about a peer it has no family in common with', async () => {
    const prefix = uniquePrefix('remote-mixed');
    const a = await registry(prefix, nodeRecord('node-a', 1, { addresses: [{ type: 'InternalIP', ip: 'fd00:50::1' }], podCidrs: ['fd00:200:1::/64'] }));
    await registry(prefix, dualStack(2));
    await registry(prefix, nodeRecord('node-c', 3, { addresses: [{ type: 'InternalIP', ip: 'fd00:50::3' }], podCidrs: ['10.200.3.0/24'] }));
    await registry(prefix, nodeRecord('node-d', 4, { addresses: [{ type: 'InternalIP', ip: '192.168.50.4' }], podCidrs: ['10.200.4.0/24'] }));
    await waitFor('b, c and d on a', () => a.registry.get('node-b') && a.registry.get('node-c') && a.registry.get('node-d'));
    const lines: Array<{ msg: string; node?: string }> = [];
    const sink = new Writable({ write: (chunk: Buffer, _enc, cb) => (lines.push(JSON.parse(chunk.toString()) as { msg: string; node?: string }), cb()) });
    const ipcache = new IPCache({ logger: testLogger });
    const rn = remoteNodes(a.registry, ipcache, new FakeNodeRouting('tunnel'), pino({ level: 'warn' }, sink));
    await rn.start();
    await rn.idle();
    // node-b's addresses (its IPv4 InternalIP among them) are reached over the IPv6 underlay, at its IPv6 InternalIP.
    for (const ip of ['192.168.50.2', 'fd00:50::2', '10.200.2.1']) assert.equal(ipcache.lookup(ip)?.hostIP, 'fd00:50::2', ip);
    assert.equal(ipcache.lookup('fd00:50::3')?.hostIP, 'fd00:50::3');
    const warned = lines.filter((l) => /is reached through the overlay at its IPv4 node IP/.test(l.msg));
    // node-d has an IPv4 node IP alone, and node-a no IPv4 InternalIP.
    assert.deepEqual(warned.map((l) => l.node), ['node-d']);
  });

  it('a dual-stack node reaches a dual-stack peer at its IPv4 InternalIP and an IPv6-only one at its IPv6 InternalIP', async () => {
    const prefix = uniquePrefix('remote-mixed4');
    const a = await registry(prefix, dualStack(1));
    await registry(prefix, dualStack(2));
    await registry(prefix, nodeRecord('node-c', 3, { addresses: [{ type: 'InternalIP', ip: 'fd00:50::3' }], podCidrs: ['fd00:200:3::/64'] }));
    await waitFor('b and c on a', () => a.registry.get('node-b') && a.registry.get('node-c'));
    const ipcache = new IPCache({ logger: testLogger });
    const rn = remoteNodes(a.registry, ipcache, new FakeNodeRouting('tunnel'));
    await rn.start();
    await rn.idle();
    assert.equal(ipcache.lookup('fd00:50::2')?.hostIP, '192.168.50.2');
    assert.equal(ipcache.lookup('fd00:50::3')?.hostIP, 'fd00:50::3');
  });
});
