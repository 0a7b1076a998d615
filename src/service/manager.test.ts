import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { pino } from 'pino';
import { FakeLoadBalancer } from '../datapath/fake/fakeDatapath.js';
import { DatapathError } from '../datapath/types.js';
import { isServiceError, ServiceErrorCode } from './errors.js';
import { ServiceManager, type ServiceManagerOptions } from './manager.js';
import { ServiceStore } from './serviceStore.js';
import type { ServiceSpec } from './types.js';

const log = pino({ level: 'silent' });

const clusterIp = (ip: string, backends: ServiceSpec['backend-addresses'], extra: Partial<ServiceSpec['flags']> = {}): ServiceSpec => ({
  'frontend-address': { ip, port: 80, protocol: 'TCP' },
  'backend-addresses': backends,
  flags: { type: 'ClusterIP', ...extra },
});
const be = (ip: string, extra: Partial<ServiceSpec['backend-addresses'][number]> = {}) => ({ ip, port: 8080, ...extra });
const code = (c: ServiceErrorCode, message?: RegExp) => (err: unknown) => isServiceError(err, c) && (message === undefined || message.test(err.message));

describe('ServiceManager', () => {
  let dir: string;
  let lb: FakeLoadBalancer;
  let local: Set<string>;
  const make = (opts: Partial<ServiceManagerOptions> = {}) =>
    new ServiceManager({ loadBalancer: lb, store: new ServiceStore(join(dir, 'services')), log, localAddresses: () => local, nodeAddresses: () => ['192.0.2.10'], ...opts });
  /** The record stored for `id` as it is on disk (undefined: none). */
  const disk = (id: number) => {
    const store = new ServiceStore(join(dir, 'services'));
    try {
      return store.rawRecord(id);
    } finally {
      store.close();
    }
  };
  /** The IDs with a record on disk. */
  const stored = async () => {
    const store = new ServiceStore(join(dir, 'services'));
    try {
      return (await store.loadAll()).records.map((r) => r.id);
    } finally {
      store.close();
    }
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-svc-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    await rm(join(dir, 'services'), { recursive: true, force: true });
    lb = new FakeLoadBalancer();
    local = new Set();
  });

  it('refuses every write without a load-balancing datapath, and still reads', async () => {
    const m = make({ loadBalancer: undefined });
    await assert.rejects(m.upsert(1, clusterIp('10.96.0.1', [])), code(ServiceErrorCode.UNSUPPORTED, /eBPF datapath/));
    await assert.rejects(m.delete(1), code(ServiceErrorCode.UNSUPPORTED));
    assert.deepEqual(m.list(), []);
    assert.equal(m.get(1), undefined);
  });

  it('creates a service, renders it for the maps, and a second identical upsert changes nothing', async () => {
    const m = make();
    const r = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1'), be('10.0.0.2', { weight: 3 })], { sessionAffinity: true }));
    assert.equal(r.created, true);
    assert.equal(r.changed, true);
    assert.equal(r.service.realized, true);
    const ids = r.service['backend-addresses'].map((b) => b.id);
    assert.equal(new Set(ids).size, 2);
    assert.deepEqual(lb.services.get(1), {
      id: 1, address: '10.96.0.1', port: 80, protocol: 'TCP', type: 'ClusterIP', localTraffic: false, affinityTimeoutSec: 10800, backendIds: ids, memberIds: ids,
    });
    assert.deepEqual([...lb.backends.values()].map((b) => [b.id, b.address, b.port, b.protocol, b.state]), [[ids[0], '10.0.0.1', 8080, 'TCP', 'active'], [ids[1], '10.0.0.2', 8080, 'TCP', 'active']]);
    const calls = lb.calls.length;
    const again = await m.upsert(1, { id: 1, ...clusterIp('10.96.0.1', [be('10.0.0.1', { weight: 1, state: 'active' }), be('10.0.0.2', { weight: 3 })], { sessionAffinity: true, sessionAffinityTimeout: 10800 }) });
    assert.equal(again.created, false);
    assert.equal(again.changed, false);
    assert.equal(lb.calls.length, calls, 'no datapath call for an unchanged service');
    assert.deepEqual(m.get(1), r.service);
    assert.deepEqual(m.list().map((s) => s.id), [1]);
  });

  it('keeps terminating and other non-active backends out of the slots but in the backend map, falling back to terminating ones', async () => {
    const m = make();
    const r = await m.upsert(2, clusterIp('10.96.0.2', [be('10.0.0.1', { state: 'terminating' }), be('10.0.0.2'), be('10.0.0.3', { weight: 0 }), be('10.0.0.4', { state: 'maintenance' })]));
    const [t, a, z, mt] = r.service['backend-addresses'].map((b) => b.id);
    assert.deepEqual(lb.services.get(2)!.backendIds, [a]);
    assert.deepEqual(lb.services.get(2)!.memberIds, [t, a, z, mt], 'every backend is a member: its connections are kept');
    for (const id of [t, a, z, mt]) assert.ok(lb.backends.has(id!), `backend ${id} in the map`);
    assert.equal(lb.backends.get(t!)!.state, 'terminating');
    await m.upsert(2, clusterIp('10.96.0.2', [be('10.0.0.1', { state: 'terminating' }), be('10.0.0.2', { state: 'terminating' }), be('10.0.0.4', { state: 'quarantined' })]));
    assert.deepEqual(lb.services.get(2)!.backendIds, [t, a], 'no active backend: the terminating ones');
    assert.deepEqual(lb.services.get(2)!.memberIds, [t, a, mt], 'a backend that left is a member no more');
    assert.equal(lb.backends.has(z!), false, 'a backend that left the service and is unused is deleted');
    assert.deepEqual(lb.deletedBackends, [z]);
    assert.equal(lb.backends.get(mt!)!.state, 'quarantined');
  });

  it('shares backend IDs between services and deletes a backend only with its last service', async () => {
    const m = make();
    const a = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1'), be('10.0.0.2')]));
    const b = await m.upsert(2, clusterIp('10.96.0.2', [be('10.0.0.2', { state: 'terminating' }), be('10.0.0.3')]));
    const shared = a.service['backend-addresses'][1]!.id;
    assert.equal(b.service['backend-addresses'][0]!.id, shared);
    assert.equal(lb.backends.get(shared)!.state, 'active', 'a backend one service still serves through stays active');
    // Another protocol is another backend.
    const u = await m.upsert(3, { ...clusterIp('10.96.0.1', [be('10.0.0.2')]), 'frontend-address': { ip: '10.96.0.1', port: 80, protocol: 'UDP' } });
    assert.notEqual(u.service['backend-addresses'][0]!.id, shared);
    await m.delete(1);
    assert.equal(lb.services.has(1), false);
    assert.ok(lb.backends.has(shared));
    assert.equal(lb.backends.get(shared)!.state, 'terminating', 'the remaining reference decides the state');
    assert.deepEqual(lb.deletedBackends, [a.service['backend-addresses'][0]!.id]);
    await m.delete(2);
    assert.equal(lb.backends.has(shared), false);
    await assert.rejects(m.delete(2), code(ServiceErrorCode.NOT_FOUND, /service 2 not found/));
    // A freed ID is not handed out again at once.
    const c = await m.upsert(4, clusterIp('10.96.0.4', [be('10.0.0.9')]));
    assert.ok(!lb.deletedBackends.includes(c.service['backend-addresses'][0]!.id));
  });

  it('takes an IPv6 NodePort on one of the node\'s IPv6 addresses, and refuses an IPv6 ClusterIP there', async () => {
    const m = make({ nodeAddresses: () => ['192.0.2.10', 'fd00:2::10'] });
    const nodePort = (ip: string) => ({ ...clusterIp(ip, [be('fd00:10::1')]), flags: { type: 'NodePort' as const } });
    await m.upsert(1, nodePort('fd00:2::10'));
    assert.equal(m.get(1)?.['frontend-address'].ip, 'fd00:2::10');
    await assert.rejects(m.upsert(2, nodePort('fd00:2::99')), code(ServiceErrorCode.INVALID, /a NodePort frontend is 0\.0\.0\.0 or :: \(every node address of the family\) or one of this node's addresses/));
    await assert.rejects(m.upsert(3, clusterIp('fd00:2::10', [be('fd00:10::1')])), code(ServiceErrorCode.INVALID, /is one of this node's addresses/));
  });

  describe('a NodePort on :: (every node IPv6 address)', () => {
    const NODE = ['192.0.2.10', 'fd00:2::20', 'fd00:2::10', 'fe80::1', '::1'];
    const np6 = (ip: string, backends = [be('fd00:10::1')], port = 30080): ServiceSpec => ({ 'frontend-address': { ip, port, protocol: 'TCP' }, 'backend-addresses': backends, flags: { type: 'NodePort' } });
    /** What the datapath holds: frontend address → [ID, backend IDs]. */
    const held = () => Object.fromEntries([...lb.services.values()].map((e) => [`${e.address}:${e.port}`, [e.id, e.backendIds]]));

    it('a record edited while the agent was down cannot take another service\'s ID or serve an address the node does not have', async () => {
      const m = make({ nodeAddresses: () => NODE });
      await m.upsert(5, np6('::'));
      await m.upsert(7, np6('fd00:2::20', [be('fd00:10::3')], 30081));
      const rec = JSON.parse(disk(5)!) as { frontends: Array<{ ip: string; id: number }> };
      rec.frontends = [{ ip: 'fd00:2::10', id: 7 }, { ip: '2001:db8::66', id: 9 }, { ip: 'fd00:2::20', id: 5 }];
      const editor = new ServiceStore(join(dir, 'services'));
      editor.putRawRecord(5, JSON.stringify(rec));
      editor.close();
      lb = new FakeLoadBalancer();
      const m2 = make({ nodeAddresses: () => NODE });
      assert.equal((await m2.restore()).restored, 2);
      const frontends = Object.fromEntries([...lb.services.values()].map((e) => [`${e.address}:${e.port}`, e.id]));
      // Service 7 keeps its ID; the :: service takes its own for the one it named and a fresh one for the other; no foreign address.
      assert.equal(frontends['fd00:2::20:30081'], 7);
      assert.deepEqual(Object.keys(frontends).sort(), ['fd00:2::10:30080', 'fd00:2::20:30080', 'fd00:2::20:30081']);
      assert.equal(frontends['fd00:2::20:30080'], 5);
      assert.ok(![7, 9, 5].includes(frontends['fd00:2::10:30080']!), `a fresh ID: ${frontends['fd00:2::10:30080']}`);
    });

    it('is one datapath frontend per node IPv6 address, each under its own ID; the API shows ::', async () => {
      const m = make({ nodeAddresses: () => NODE });
      const r = await m.upsert(5, np6('::'));
      const [b1] = r.service['backend-addresses'].map((b) => b.id);
      assert.deepEqual(r.service['frontend-address'], { ip: '::', port: 30080, protocol: 'TCP' });
      // Sorted addresses; the first takes the service's ID, the others IDs from 32767 down; link-local and loopback are no frontends.
      assert.deepEqual(held(), { 'fd00:2::10:30080': [5, [b1]], 'fd00:2::20:30080': [32767, [b1]] });
      assert.equal(lb.services.get(32767)!.type, 'NodePort');
      assert.deepEqual(m.list().map((x) => x.id), [5], 'the extra frontend is no service of its own');
      // An update changes every frontend and keeps their IDs.
      const u = await m.upsert(5, np6('::', [be('fd00:10::2')]));
      const [b2] = u.service['backend-addresses'].map((b) => b.id);
      assert.deepEqual(held(), { 'fd00:2::10:30080': [5, [b2]], 'fd00:2::20:30080': [32767, [b2]] });
      // The IDs are persisted: a restart brings the same frontends back under the same IDs.
      lb = new FakeLoadBalancer();
      const m2 = make({ nodeAddresses: () => NODE });
      assert.equal((await m2.restore()).restored, 1);
      assert.deepEqual(held(), { 'fd00:2::10:30080': [5, [b2]], 'fd00:2::20:30080': [32767, [b2]] });
      assert.deepEqual(lb.restored!.services.sort((a, b) => a - b), [5, 32767]);
      // Delete removes all of them.
      await m2.delete(5);
      assert.deepEqual(held(), {});
      assert.deepEqual(lb.deletedBackends, [b2]);
    });

    it('refuses a named NodePort on one of the node addresses :: stands for (same port and protocol), and the reverse; takes another port', async () => {
      const m = make({ nodeAddresses: () => NODE });
      await m.upsert(5, np6('::'));
      const before = structuredClone(held());
      await assert.rejects(m.upsert(6, np6('fd00:2::20')), code(ServiceErrorCode.CONFLICT, /^frontend-address: fd00:2::20:30080\/TCP already belongs to service 5 \(service 5 is a NodePort on ::/));
      await assert.rejects(m.upsert(7, np6('::')), code(ServiceErrorCode.CONFLICT, /already belongs to service 5/));
      assert.deepEqual(held(), before);
      await m.upsert(6, np6('fd00:2::20', undefined, 30081));
      await m.upsert(8, { ...np6('::'), 'frontend-address': { ip: '::', port: 30080, protocol: 'UDP' } });
      await m.delete(5);
      await m.upsert(9, np6('fd00:2::10'));
      await assert.rejects(m.upsert(5, np6('::')), code(ServiceErrorCode.CONFLICT, /^frontend-address: fd00:2::10:30080\/TCP already belongs to service 9 \(:: stands for each node IPv6 address\)/));
      // IPv4 takes 0.0.0.0 beside a named node address on the same port: the datapath's exact frontend wins over its wildcard one.
      await m.upsert(10, { ...np6('0.0.0.0', [be('10.0.0.1')]) });
      await m.upsert(11, { ...np6('192.0.2.10', [be('10.0.0.2')]) });
      // An ID an extra frontend holds is not the user's to take.
      await m.upsert(12, np6('::', undefined, 30090));
      const extra = [...lb.services.values()].find((e) => e.port === 30090 && e.id !== 12)!.id;
      await assert.rejects(m.upsert(extra, clusterIp('10.96.0.1', [])), code(ServiceErrorCode.CONFLICT, new RegExp(`^id: service ID ${extra} is service 12's frontend on fd00:2::`)));
      // No IPv6 node address: nothing to serve it on.
      const v4only = make({ nodeAddresses: () => ['192.0.2.10'] });
      await assert.rejects(v4only.upsert(20, np6('::', undefined, 30100)), code(ServiceErrorCode.INVALID, /^frontend-address\.ip: a NodePort on :: is served on each of this node's IPv6 addresses, and it has none/));
    });

    it('puts every frontend back when the datapath fails half way, and a failed delete leaves the service whole', async () => {
      const three = ['fd00:2::1', 'fd00:2::2', 'fd00:2::3'];
      const m = make({ nodeAddresses: () => three });
      const first = await m.upsert(5, np6('::'));
      const before = structuredClone(held());
      const was = disk(5);
      assert.equal(Object.keys(before).length, 3);
      // The third of three frontends fails: the two written are put back as they were.
      const fail = new DatapathError('failed', 'fake: third frontend');
      lb.failNext('upsertService', fail, 2);
      await assert.rejects(m.upsert(5, np6('::', [be('fd00:10::2')])), code(ServiceErrorCode.DATAPATH_FAILED, /fake: third frontend; nothing was changed/));
      assert.deepEqual(held(), before, 'every frontend as it was');
      assert.deepEqual(m.get(5), first.service);
      assert.deepEqual([...lb.backends.keys()], [first.service['backend-addresses'][0]!.id], 'the new backend went again');
      assert.equal(disk(5), was);
      // A new :: service failing on its second frontend leaves nothing behind.
      lb.failNext('upsertService', fail, 1);
      await assert.rejects(m.upsert(6, np6('::', [be('fd00:10::3')], 30081)), code(ServiceErrorCode.DATAPATH_FAILED));
      assert.deepEqual(held(), before);
      assert.equal(m.get(6), undefined);
      // Delete fails on the second frontend: the first is written back, the service stays whole and realized.
      lb.failNext('deleteService', fail, 1);
      await assert.rejects(m.delete(5), code(ServiceErrorCode.DATAPATH_FAILED, /did not delete it/));
      assert.deepEqual(held(), before);
      assert.equal(m.get(5)!.realized, true);
      await m.delete(5);
      assert.deepEqual(held(), {});
    });

    it('follows the node addresses when written again or told they changed: a kept address keeps its ID, a gone one is deleted', async () => {
      let addrs = ['fd00:2::1', 'fd00:2::2'];
      const m = make({ nodeAddresses: () => addrs });
      await m.upsert(5, np6('::'));
      assert.deepEqual(Object.fromEntries(Object.entries(held()).map(([k, [id]]) => [k, id])), { 'fd00:2::1:30080': 5, 'fd00:2::2:30080': 32767 });
      addrs = ['fd00:2::2', 'fd00:2::3'];
      const again = await m.upsert(5, np6('::'));
      assert.equal(again.changed, true, 'the same spec on other node addresses is a change');
      assert.deepEqual(Object.fromEntries(Object.entries(held()).map(([k, [id]]) => [k, id])), { 'fd00:2::2:30080': 32767, 'fd00:2::3:30080': 5 });
      assert.equal((await m.upsert(5, np6('::'))).changed, false);
      // An address the node takes while running (a router address) is followed without a write.
      addrs = ['fd00:2::2', 'fd00:2::3', 'fd00:2::4'];
      await m.nodeAddressesChanged();
      assert.deepEqual(Object.fromEntries(Object.entries(held()).map(([k, [id]]) => [k, id])), { 'fd00:2::2:30080': 32767, 'fd00:2::3:30080': 5, 'fd00:2::4:30080': 32766 });
      assert.equal((await m.upsert(5, np6('::'))).changed, false);
      // Unless another service's NodePort is named there on the same port: then it stays as it is.
      addrs = ['fd00:2::2', 'fd00:2::3', 'fd00:2::4', 'fd00:2::5'];
      await m.upsert(9, np6('fd00:2::5'));
      await m.nodeAddressesChanged();
      assert.deepEqual(held()['fd00:2::5:30080']![0], 9);
      assert.equal(Object.keys(held()).filter((k) => k.endsWith(':30080')).length, 4);
      await m.delete(9);
      await m.nodeAddressesChanged();
      assert.equal(held()['fd00:2::5:30080']![0], 32765);
      // From a named address to ::: the named address keeps the service's ID (its connections stay).
      await m.upsert(6, np6('fd00:2::3', undefined, 30081));
      await m.upsert(6, np6('::', undefined, 30081));
      assert.equal(held()['fd00:2::3:30081']![0], 6);
      // And back: the extra frontends go.
      await m.upsert(6, np6('fd00:2::3', undefined, 30081));
      assert.deepEqual(Object.keys(held()).filter((k) => k.endsWith(':30081')), ['fd00:2::3:30081']);
      // A restart starts from the record and the addresses of then: fd00:2::5 keeps its ID.
      lb = new FakeLoadBalancer();
      await make({ nodeAddresses: () => addrs }).restore();
      assert.equal(held()['fd00:2::5:30080']![0], 32765);
    });
  });

  it('refuses a frontend another service has, changing nothing', async () => {
    const m = make();
    await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1')]));
    const before = structuredClone([...lb.services.entries()]);
    await assert.rejects(m.upsert(2, clusterIp('10.96.0.1', [be('10.0.0.2')])), code(ServiceErrorCode.CONFLICT, /10\.96\.0\.1:80\/TCP already belongs to service 1/));
    assert.deepEqual([...lb.services.entries()], before);
    assert.equal(lb.backends.size, 1);
    assert.equal(m.get(2), undefined);
    // A service may move its own frontend, which frees the old one.
    await m.upsert(1, clusterIp('10.96.0.5', [be('10.0.0.1')]));
    await m.upsert(2, clusterIp('10.96.0.1', [be('10.0.0.2')]));
    assert.deepEqual(m.list().map((s) => s['frontend-address'].ip), ['10.96.0.5', '10.96.0.1']);
  });

  it('leaves datapath, registry and disk as they were when the datapath fails', async () => {
    const m = make();
    const first = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1')]));
    const was = disk(1);
    for (const op of ['upsertBackends', 'upsertService'] as const) {
      lb.failNext(op);
      await assert.rejects(m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.2')])), code(ServiceErrorCode.DATAPATH_FAILED, /nothing was changed/));
      assert.deepEqual(m.get(1), first.service, op);
      assert.deepEqual(lb.services.get(1)!.backendIds, first.service['backend-addresses'].map((b) => b.id), op);
      assert.deepEqual([...lb.backends.keys()], [first.service['backend-addresses'][0]!.id], `${op}: the new backend went again`);
      assert.equal(disk(1), was);
    }
    lb.failNext('upsertService');
    await assert.rejects(m.upsert(2, clusterIp('10.96.0.2', [be('10.0.0.3')])), code(ServiceErrorCode.DATAPATH_FAILED));
    assert.equal(m.get(2), undefined);
    assert.equal(lb.services.has(2), false);
    assert.deepEqual(await stored(), [1]);
    lb.failNext('deleteService');
    await assert.rejects(m.delete(1), code(ServiceErrorCode.DATAPATH_FAILED));
    assert.ok(m.get(1));
    // The retry works and reuses nothing stale.
    const ok = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.2')]));
    assert.equal(ok.service.realized, true);
    assert.deepEqual(lb.services.get(1)!.backendIds, [ok.service['backend-addresses'][0]!.id]);
  });

  it('writes a service the datapath did not take again after a while', async () => {
    const m = make({ retryIntervalMs: 20 });
    await m.restore();
    await m.endpointsRestored();
    const spec: ServiceSpec = { 'frontend-address': { ip: '0.0.0.0', port: 30080, protocol: 'TCP' }, 'backend-addresses': [be('10.0.0.1')], flags: { type: 'NodePort', trafficPolicy: 'Local' } };
    const r = await m.upsert(1, spec);
    local.add('10.0.0.1');
    lb.failNext('upsertService');
    await m.localityChanged();
    assert.equal(m.get(1)!.realized, false);
    assert.deepEqual(lb.services.get(1)!.backendIds, [], 'the maps keep what they had');
    await new Promise((resolve) => setTimeout(resolve, 60));
    await m.idle();
    assert.equal(m.get(1)!.realized, true);
    assert.deepEqual(lb.services.get(1)!.backendIds, [r.service['backend-addresses'][0]!.id]);
    await m.stop();
  });

  it('refuses a service the maps have no room for', async () => {
    lb = new FakeLoadBalancer({ maxServices: 1 });
    const m = make();
    await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1')]));
    await assert.rejects(m.upsert(2, clusterIp('10.96.0.2', [be('10.0.0.2')])), code(ServiceErrorCode.DATAPATH_FAILED, /full/));
    assert.deepEqual([...lb.services.keys()], [1]);
    assert.equal(lb.backends.size, 1);
  });

  it('keeps backend IDs across a restart and lets the datapath drop what is gone', async () => {
    const m = make();
    const a = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1'), be('10.0.0.2')]));
    const b = await m.upsert(7, clusterIp('10.96.0.7', [be('10.0.0.2'), be('10.0.0.3')]));
    await m.upsert(9, clusterIp('10.96.0.9', [be('10.0.0.4')]));
    await m.delete(9);
    const oldLb = lb;
    // The pinned maps survive; one stale service and backend are left in them.
    lb = new FakeLoadBalancer();
    for (const x of oldLb.backends.values()) lb.backends.set(x.id, x);
    lb.backends.set(4242, { id: 4242, address: '10.0.9.9', port: 1, protocol: 'TCP', state: 'active' });
    lb.services.set(9, { id: 9, address: '10.96.0.9', port: 80, protocol: 'TCP', type: 'ClusterIP', localTraffic: false, affinityTimeoutSec: 0, backendIds: [4242] });
    const editor = new ServiceStore(join(dir, 'services'));
    editor.putRawRecord(13, '{"broken');
    editor.close();
    const m2 = make();
    const report = await m2.restore();
    assert.equal(report.restored, 2);
    assert.equal(report.skipped.length, 1);
    assert.deepEqual(m2.get(1), a.service);
    assert.deepEqual(m2.get(7), b.service);
    assert.deepEqual(lb.services.get(7)!.backendIds, b.service['backend-addresses'].map((x) => x.id));
    assert.deepEqual(lb.restored!.services.sort(), [1, 7]);
    assert.deepEqual(lb.restored!.backends.sort((x, y) => x - y), [...new Set([...a.service['backend-addresses'], ...b.service['backend-addresses']].map((x) => x.id))].sort((x, y) => x - y));
    assert.equal(lb.services.has(9), false);
    assert.equal(lb.backends.has(4242), false);
    assert.deepEqual(await stored(), [1, 7]);
    // New backends do not take a restored ID.
    const c = await m2.upsert(8, clusterIp('10.96.0.8', [be('10.0.0.8')]));
    assert.ok(![...a.service['backend-addresses'], ...b.service['backend-addresses']].some((x) => x.id === c.service['backend-addresses'][0]!.id));
  });

  it('sends outside traffic of a Local service only to this node\'s backends, following endpoints', async () => {
    const m = make();
    const spec: ServiceSpec = { 'frontend-address': { ip: '0.0.0.0', port: 30080, protocol: 'TCP' }, 'backend-addresses': [be('10.0.0.1'), be('10.0.0.2')], flags: { type: 'NodePort', trafficPolicy: 'Local' } };
    await m.restore();
    local.add('10.0.0.2');
    // Before endpoints are restored locality is not known yet: none is local.
    const r = await m.upsert(3, spec);
    const [id1, id2] = r.service['backend-addresses'].map((b) => b.id);
    assert.deepEqual(lb.services.get(3)!.backendIds, []);
    assert.deepEqual(lb.services.get(3)!.internalBackendIds, [id1, id2]);
    assert.equal(lb.services.get(3)!.localTraffic, true);
    await m.endpointsRestored();
    assert.deepEqual(lb.services.get(3)!.backendIds, [id2]);
    assert.deepEqual(m.get(3)!['backend-addresses'].map((b) => b.local), [false, true]);
    local.add('10.0.0.1');
    await Promise.all([m.localityChanged(), m.localityChanged(), m.localityChanged()]);
    assert.deepEqual(lb.services.get(3)!.backendIds, [id1, id2]);
    local.clear();
    await m.localityChanged();
    assert.deepEqual(lb.services.get(3)!.backendIds, []);
    // A Cluster service ignores locality; a NodePort on a foreign address is refused.
    const c = await m.upsert(4, { ...spec, 'frontend-address': { ip: '192.0.2.10', port: 30081, protocol: 'TCP' }, flags: { type: 'NodePort' } });
    assert.deepEqual(lb.services.get(4)!.backendIds, c.service['backend-addresses'].map((b) => b.id));
    assert.equal(lb.services.get(4)!.internalBackendIds, undefined);
    await assert.rejects(m.upsert(5, { ...spec, 'frontend-address': { ip: '192.0.2.99', port: 30081, protocol: 'TCP' } }), code(ServiceErrorCode.INVALID, /^frontend-address\.ip/));
    // An IPv6 NodePort on one of the node's IPv6 addresses is taken; on another IPv6 address it is refused.
    const m6 = make({ nodeAddresses: () => ['192.0.2.10', 'fd00:248::11'] });
    const v6: ServiceSpec = { 'frontend-address': { ip: 'fd00:248::11', port: 30090, protocol: 'TCP' }, 'backend-addresses': [be('fd00:10::5')], flags: { type: 'NodePort' } };
    assert.equal((await m6.upsert(6, v6)).service.realized, true);
    await assert.rejects(m6.upsert(7, { ...v6, 'frontend-address': { ip: 'fd00:248::99', port: 30090, protocol: 'TCP' } }), code(ServiceErrorCode.INVALID, /^frontend-address\.ip/));
    // The persisted locality serves the next start until endpoints are back.
    local.add('10.0.0.1');
    await m.localityChanged();
    lb = new FakeLoadBalancer();
    local.clear();
    const m2 = make();
    await m2.restore();
    assert.deepEqual(lb.services.get(3)!.backendIds, [id1]);
    await m2.endpointsRestored();
    assert.deepEqual(lb.services.get(3)!.backendIds, []);
  });

  it('keeps traffic from inside the node on its backends with internalTrafficPolicy Local, following endpoints', async () => {
    const m = make();
    await m.restore();
    await m.endpointsRestored();
    local.add('10.0.0.2');
    const cip = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1'), be('10.0.0.2')], { internalTrafficPolicy: 'Local' }));
    const [c1, c2] = cip.service['backend-addresses'].map((b) => b.id);
    assert.deepEqual(m.get(1)!.flags, { type: 'ClusterIP', trafficPolicy: 'Cluster', internalTrafficPolicy: 'Local', sessionAffinity: false, sessionAffinityTimeout: 10800, sourceRanges: [] });
    assert.deepEqual(lb.services.get(1)!.backendIds, [c2]);
    assert.equal(lb.services.get(1)!.internalBackendIds, undefined, 'a ClusterIP has one scope');
    const np: ServiceSpec = { 'frontend-address': { ip: '0.0.0.0', port: 30080, protocol: 'TCP' }, 'backend-addresses': [be('10.0.0.1'), be('10.0.0.2')], flags: { type: 'NodePort', internalTrafficPolicy: 'Local' } };
    await m.upsert(2, np);
    assert.deepEqual(lb.services.get(2)!.backendIds, [c1, c2], 'from outside: every backend');
    assert.deepEqual(lb.services.get(2)!.internalBackendIds, [c2], 'from inside: this node\'s');
    assert.equal(lb.services.get(2)!.localTraffic, false);
    local.clear();
    await m.localityChanged();
    assert.deepEqual(lb.services.get(1)!.backendIds, [], 'no local backend: the datapath drops (NO_SERVICE)');
    assert.deepEqual(lb.services.get(2)!.internalBackendIds, []);
    assert.deepEqual(lb.services.get(2)!.backendIds, [c1, c2]);
    local.add('10.0.0.1');
    await m.localityChanged();
    assert.deepEqual(lb.services.get(1)!.backendIds, [c1]);
    assert.deepEqual(lb.services.get(2)!.internalBackendIds, [c1]);
    // Both Local: one scope, this node's backends.
    await m.upsert(2, { ...np, flags: { type: 'NodePort', trafficPolicy: 'Local', internalTrafficPolicy: 'Local' } });
    assert.deepEqual(lb.services.get(2)!.backendIds, [c1]);
    assert.equal(lb.services.get(2)!.internalBackendIds, undefined);
    assert.equal(lb.services.get(2)!.localTraffic, true);
    // Back to Cluster: locality no longer matters.
    await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1'), be('10.0.0.2')]));
    assert.deepEqual(lb.services.get(1)!.backendIds, [c1, c2]);
    // The policy is persisted: a restart brings it back as it was.
    lb = new FakeLoadBalancer();
    const m2 = make();
    await m2.restore();
    assert.equal(m2.get(2)!.flags.internalTrafficPolicy, 'Local');
    assert.deepEqual(lb.services.get(2)!.backendIds, [c1]);
  });

  it('gives a Maglev table over the selectable backends with --lb-algorithm maglev', async () => {
    const m = make({ algorithm: 'maglev', maglevTableSize: 251 });
    const r = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1'), be('10.0.0.2', { weight: 2 }), be('10.0.0.3', { state: 'terminating' })]));
    const [a, b] = r.service['backend-addresses'].map((x) => x.id);
    const table = lb.services.get(1)!.maglevTable!;
    assert.equal(table.length, 251);
    const counts = new Map<number, number>();
    for (const id of table) counts.set(id, (counts.get(id) ?? 0) + 1);
    assert.deepEqual([...counts.keys()].sort(), [a, b].sort());
    assert.ok(Math.abs(counts.get(b!)! / 251 - 2 / 3) < 0.02);
    await m.upsert(2, clusterIp('10.96.0.2', []));
    assert.equal(lb.services.get(2)!.maglevTable, undefined);
    assert.deepEqual(lb.services.get(2)!.backendIds, []);
  });

  it('programs thousands of services quickly', async () => {
    const m = make();
    const start = Date.now();
    for (let i = 1; i <= 2000; i++) {
      await m.upsert(i, clusterIp(`10.96.${i >> 8}.${i & 255}`, [be(`10.1.${i >> 8}.${i & 255}`), be(`10.2.${i >> 8}.${i & 255}`), be('10.3.0.1')]));
    }
    const ms = Date.now() - start;
    assert.equal(m.size, 2000);
    assert.ok(ms < 10_000, `${ms} ms for 2000 services`);
  });

  describe('a batch (apply)', () => {
    /** A store that counts its transactions and fails them on demand. */
    class CountingStore extends ServiceStore {
      commits = 0;
      fail = false;
      override async commit(changes: Parameters<ServiceStore['commit']>[0]): Promise<void> {
        this.commits++;
        if (this.fail) throw new Error('fake: disk full');
        return super.commit(changes);
      }
    }
    const up = (id: number, spec: ServiceSpec) => ({ upsert: { ...spec, id } });

    it('makes each change as a single call would, in order, and writes the records in one transaction', async () => {
      const store = new CountingStore(join(dir, 'services'));
      const m = make({ store });
      await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1')]));
      await m.upsert(2, clusterIp('10.96.0.2', [be('10.0.0.2')]));
      await m.upsert(3, clusterIp('10.96.0.3', [be('10.0.0.3')]));
      store.commits = 0;
      const results = await m.apply([
        up(1, clusterIp('10.96.0.1', [be('10.0.0.1')])),
        up(2, clusterIp('10.96.0.2', [be('10.0.0.4')])),
        { delete: 3 },
        // The frontend service 3 let go is free for a new ID in the same batch.
        up(4, clusterIp('10.96.0.3', [be('10.0.0.3')])),
        { delete: 9 },
        up(5, clusterIp('10.96.0.1', [be('10.0.0.5')])),
        up(6, clusterIp('not-an-ip', [])),
        up(7, clusterIp('10.96.0.7', [be('10.0.0.7')])),
      ]);
      assert.deepEqual(
        results.map((r) => [r.id, r.op, r.result, r.error?.code]),
        [
          [1, 'upsert', 'unchanged', undefined],
          [2, 'upsert', 'updated', undefined],
          [3, 'delete', 'deleted', undefined],
          [4, 'upsert', 'created', undefined],
          [9, 'delete', 'not-found', undefined],
          [5, 'upsert', 'failed', ServiceErrorCode.CONFLICT],
          [6, 'upsert', 'failed', ServiceErrorCode.INVALID],
          [7, 'upsert', 'created', undefined],
        ],
      );
      assert.match(results[5]!.error!.message, /10\.96\.0\.1:80\/TCP already belongs to service 1/);
      assert.equal(store.commits, 1);
      assert.deepEqual([...lb.services.keys()].sort(), [1, 2, 4, 7]);
      assert.deepEqual(m.get(2)!['backend-addresses'].map((b) => b.ip), ['10.0.0.4']);
      // What a restart brings back is what the batch left.
      assert.deepEqual(await stored(), [1, 2, 4, 7]);
      lb = new FakeLoadBalancer();
      const m2 = make();
      assert.equal((await m2.restore()).restored, 4);
      assert.deepEqual(m2.list().map((x) => x['frontend-address'].ip), ['10.96.0.1', '10.96.0.2', '10.96.0.3', '10.96.0.7']);
    });

    it('undoes every change in the datapath when the records cannot be written, and fails whole', async () => {
      const store = new CountingStore(join(dir, 'services'));
      const m = make({ store });
      const one = await m.upsert(1, clusterIp('10.96.0.1', [be('10.0.0.1')]));
      const two = await m.upsert(2, clusterIp('10.96.0.2', [be('10.0.0.2')]));
      const held = () => Object.fromEntries([...lb.services.values()].map((e) => [e.id, e.address]));
      const before = held();
      store.fail = true;
      await assert.rejects(
        m.apply([up(1, clusterIp('10.96.0.1', [be('10.0.0.9')])), { delete: 2 }, up(3, clusterIp('10.96.0.3', [be('10.0.0.3')]))]),
        code(ServiceErrorCode.DATAPATH_FAILED, /a batch of 3 service changes: their records could not be written: fake: disk full/),
      );
      assert.deepEqual(held(), before);
      assert.deepEqual(m.list().map((x) => [x.id, x['backend-addresses'].map((b) => b.ip), x.realized]), [
        [1, ['10.0.0.1'], true],
        [2, ['10.0.0.2'], true],
      ]);
      assert.deepEqual(m.get(1)!['frontend-address'], one.service['frontend-address']);
      assert.deepEqual(m.get(2)!['backend-addresses'].map((b) => b.ip), two.service['backend-addresses'].map((b) => b.ip));
      assert.deepEqual(await stored(), [1, 2]);
      // The datapath failing to finish the batch (a route the kernel refused) undoes it the same way, before anything is written.
      store.fail = false;
      store.commits = 0;
      lb.failNext('inBatch');
      await assert.rejects(m.apply([up(3, clusterIp('10.96.0.3', [be('10.0.0.3')]))]), code(ServiceErrorCode.DATAPATH_FAILED, /the datapath did not finish it/));
      assert.deepEqual(held(), before);
      assert.equal(store.commits, 0);
    });
  });
});
