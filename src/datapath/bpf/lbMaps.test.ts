// LbMaps against the real pinned maps (the three objects loaded under a
// temp bpffs root, small sizes) and real routes in a `tdl` namespace of its
// own (netlink works there through its socket; nothing is attached).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { runOk } from '../../../test/support/run.js';
import { requireRoot } from '../../../test/support/root.js';
import { createLogger } from '../../logging/logger.js';
import { formatPrefix, parseIp, parsePrefix } from '../../netip/index.js';
import { BpfMap, ensureBpffs, removePinDir } from '../kernel/bpf/index.js';
import { Netlink } from '../kernel/netlink/index.js';
import { isDatapathError, type LbServiceEntry } from '../types.js';
import { CtKeyFlag, LbScope, MapName, ServiceFlag } from './constants.js';
import { ct4Key, ctEntry, type CtEntryValue, lb4AffinityKey, lb4AffinityValue, type Lb4Key, lb4Service } from './layout.js';
import { lbMapSet, LbMaps, type LbMapSet } from './lbMaps.js';
import { type DatapathObjects, loadDatapathObjects, type MapSizes } from './objects.js';
import { SERVICE_ROUTE_NEXTHOP, SERVICE_ROUTE_PROTOCOL, ServiceRoutes } from './serviceRoutes.js';
import { HOST_NEXTHOP6 } from '../linux/hostNextHop.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the load-balancer map tests');

const log = createLogger('lb-maps-test', 'warn');
const SIZES: MapSizes = TEST_MAP_SIZES;
const MAGLEV_SIZE = 7;
const ROUTER = '10.215.0.1';

const pool = new NetnsPool('lbm');
const roots: string[] = [];
const opened: Array<{ close(): void | Promise<void> }> = [];
after(async () => {
  for (const o of opened.reverse()) await o.close();
  for (const r of roots) await removePinDir(r);
  await pool.cleanup();
});

async function loadMaps(sizes: MapSizes = SIZES): Promise<{ objects: DatapathObjects; maps: LbMapSet }> {
  await ensureBpffs();
  const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
  roots.push(root);
  const objects = await loadDatapathObjects({ pinDir: join(root, 'tendril'), mapSizes: sizes });
  opened.push(objects);
  const raw = (name: string) => objects.lxc.rawMap(name);
  return {
    objects,
    maps: lbMapSet(raw),
  };
}

async function dumpServices(maps: LbMapSet): Promise<Map<string, { key: Lb4Key; value: ReturnType<typeof lb4Service.read> }>> {
  const out = new Map<string, { key: Lb4Key; value: ReturnType<typeof lb4Service.read> }>();
  for await (const [k, v] of maps.services.entries()) out.set(`${k.address.bits}:${k.dport}/${k.proto}/${k.scope}#${k.backendSlot}`, { key: k, value: v });
  return out;
}

/** The backends tendril_lb4_member holds for service `id`, sorted. */
async function members(maps: LbMapSet, id: number): Promise<number[]> {
  const out: number[] = [];
  for await (const k of maps.members.keys()) if (k.revNatIndex === id) out.push(k.backendId);
  return out.sort((a, b) => a - b);
}

const fkey = (address: string, port: number, slot: number, scope: number = LbScope.EXTERNAL, proto = 6): Lb4Key => ({ address: parseIp(address), dport: port, backendSlot: slot, proto, scope });

const be = (id: number, state: 'active' | 'terminating' = 'active') => ({ id, address: `10.215.1.${id}`, port: 8080, protocol: 'TCP' as const, state });
const svc = (over: Partial<LbServiceEntry> = {}): LbServiceEntry => ({ id: 1, address: '10.96.0.10', port: 80, protocol: 'TCP', type: 'ClusterIP', localTraffic: false, affinityTimeoutSec: 0, backendIds: [1, 2, 3], ...over });

const ctValue = (backendId: number, revNatIndex: number): CtEntryValue => ({
  expiresNs: 1n << 60n,
  packets: 1n,
  bytes: 60n,
  srcIdentity: 1,
  dstIdentity: 2,
  srcEndpoint: 0,
  dstEndpoint: 0,
  revNatIndex,
  tcpFlags: 0,
  flags: 0,
  backendId,
  natAddr: parseIp('10.96.0.10'),
  natPort: 80,
});

/** The inner map's entries, read by ID (bpftool: this process has no fd of it). */
function innerEntries(id: number): number[] {
  const r = spawnSync('bpftool', ['-j', 'map', 'dump', 'id', String(id)], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  // Without BTF bpftool prints keys and values as little-endian byte lists ("0x04").
  const u32 = (x: number | string[]) => (typeof x === 'number' ? x : Buffer.from(x.map((h) => parseInt(h, 16))).readUInt32LE(0));
  const rows = JSON.parse(r.stdout) as Array<{ key: number | string[]; value: number | string[] }>;
  return rows
    .map((row) => [u32(row.key), u32(row.value)] as const)
    .sort((a, b) => a[0] - b[0])
    .map(([, v]) => v);
}

describe('LbMaps', { timeout: 120_000 }, () => {
  let maps: LbMapSet;
  let objects: DatapathObjects;
  let lb: LbMaps;
  let nsPath: string;
  let nsName: string;
  let nl: Netlink;
  let routes: ServiceRoutes;

  const routeOf = async (address: string) => (await nl.listRoutes({ family: 4, table: 254 })).find((r) => r.dst === `${address}/32`);

  before(async () => {
    const ns = await pool.add('node');
    nsPath = ns.path;
    nsName = ns.name;
    await runOk(['ip', '-n', ns.name, 'link', 'add', 'tendril_host', 'type', 'veth', 'peer', 'name', 'tendril_net']);
    await runOk(['ip', '-n', ns.name, 'link', 'set', 'tendril_host', 'up']);
    await runOk(['ip', '-n', ns.name, 'link', 'set', 'tendril_net', 'up']);
    await runOk(['ip', '-n', ns.name, 'addr', 'add', `${ROUTER}/32`, 'dev', 'tendril_host']);
    nl = await Netlink.open({ netns: nsPath });
    opened.push({ close: () => nl.close() });
    ({ maps, objects } = await loadMaps());
    routes = new ServiceRoutes({ netlink: async () => nl, log });
    lb = await LbMaps.open({ maps, routes, log, maglevTableSize: MAGLEV_SIZE });
  });

  it('an IPv6 ClusterIP: its backends, slots and reverse NAT in the lb6 maps, members shared; a service is one family', async () => {
    const be6 = (id: number) => ({ id, address: `fd00:215::${id}`, port: 8080, protocol: 'TCP' as const, state: 'active' as const });
    const VIP6 = 'fd00:96::10';
    await lb.upsertBackends([be6(61), be6(62)]);
    assert.equal(maps.backends.familyOf(61), 6);
    assert.deepEqual(maps.backends.v6.get(61), { address: parseIp('fd00:215::61'), port: 8080, proto: 6, state: 0 });
    assert.equal(maps.backends.v4.get(61), undefined);
    await lb.upsertService(svc({ id: 60, address: VIP6, backendIds: [61, 62] }));
    assert.deepEqual(maps.services.get(fkey(VIP6, 80, 0)), { backendId: 0, affinityTimeout: 0, count: 2, revNatIndex: 60, flags: 0 });
    assert.equal(maps.services.get(fkey(VIP6, 80, 2))?.backendId, 62);
    assert.equal(maps.services.get(fkey('0.0.0.0', 80, 0)), undefined, 'nothing in the IPv4 map');
    assert.deepEqual(maps.revNat.v6.get(60), { address: parseIp(VIP6), port: 80 });
    assert.deepEqual(await members(maps, 60), [61, 62]);
    assert.equal(await routeOf(VIP6), undefined, 'no IPv4 route for an IPv6 frontend');
    // A backend of the other family in an IPv6 service is refused, nothing written.
    await lb.upsertBackends([be(63)]);
    await assert.rejects(lb.upsertService(svc({ id: 60, address: VIP6, backendIds: [61, 63] })), /backends 63 are not IPv6 like its frontend/);
    assert.equal(maps.services.get(fkey(VIP6, 80, 0))?.count, 2);
    // Reopened from the pins: the IPv6 service is found again, and deleted whole.
    const again = await LbMaps.open({ maps, routes, log, maglevTableSize: MAGLEV_SIZE });
    assert.ok(again.serviceIds().includes(60));
    await again.deleteService(60);
    await again.deleteBackends([61, 62, 63]);
    assert.equal(maps.services.get(fkey(VIP6, 80, 0)), undefined);
    assert.equal(maps.revNat.get(60), undefined);
    assert.equal(maps.backends.get(61), undefined);
    lb = await LbMaps.open({ maps, routes, log, maglevTableSize: MAGLEV_SIZE });
  });

  it('an IPv6 ClusterIP\'s /128 goes to tendril_host via the IPv6 next hop once the IPv6 router is known, with it as source; it goes with its last holder; a stale one is pruned', async () => {
    const ROUTER6 = 'fd00:241::1';
    const VIP6 = 'fd00:96::20';
    const route6 = async (address: string) => (await nl.listRoutes({ family: 6, table: 254 })).find((r) => r.dst === `${address}/128`);
    await runOk(['ip', '-n', nsName, '-6', 'addr', 'add', `${ROUTER6}/128`, 'dev', 'tendril_host', 'nodad']);
    await lb.upsertBackends([{ id: 71, address: 'fd00:215::71', port: 8080, protocol: 'TCP', state: 'active' }]);
    await lb.upsertService(svc({ id: 70, address: VIP6, backendIds: [71] }));
    assert.equal(await route6(VIP6), undefined, 'recorded only until an IPv6 router address is known');
    await lb.setRouter(ROUTER6);
    const r = await route6(VIP6);
    assert.deepEqual([r?.gateway, r?.prefsrc, r?.protocol], [HOST_NEXTHOP6, ROUTER6, SERVICE_ROUTE_PROTOCOL]);
    const neigh = (await nl.listNeighbours({ family: 6, link: 'tendril_host' })).find((n) => n.ip === HOST_NEXTHOP6);
    assert.equal(neigh?.mac, (await nl.getLink('tendril_net')).mac, 'the IPv6 next hop resolves to tendril_net without solicitation');
    assert.equal(await routeOf('10.96.0.10'), undefined, 'an IPv6 router puts no IPv4 route in force');
    await nl.replaceRoute({ dst: 'fd00:96::99/128', gateway: HOST_NEXTHOP6, onlink: true, link: 'tendril_host', prefsrc: ROUTER6, protocol: SERVICE_ROUTE_PROTOCOL });
    assert.deepEqual(await routes.prune(), ['fd00:96::99']);
    assert.ok(await route6(VIP6), 'a held route stays');
    await lb.deleteService(70);
    await lb.deleteBackends([71]);
    assert.equal(await route6(VIP6), undefined);
  });

  it('a ClusterIP: backends, slots 1..n, slot 0 with count and flags, reverse NAT; its route once the router is known', async () => {
    await lb.upsertBackends([be(1), be(2), be(3, 'terminating')]);
    assert.deepEqual(maps.backends.get(3), { address: parseIp('10.215.1.3'), port: 8080, proto: 6, state: 1 });
    await lb.upsertService(svc());
    const s = await dumpServices(maps);
    assert.equal(s.size, 4);
    assert.deepEqual(maps.services.get(fkey('10.96.0.10', 80, 0)), { backendId: 0, affinityTimeout: 0, count: 3, revNatIndex: 1, flags: 0 });
    for (const slot of [1, 2, 3]) assert.equal(maps.services.get(fkey('10.96.0.10', 80, slot))?.backendId, slot);
    assert.deepEqual(maps.revNat.get(1), { address: parseIp('10.96.0.10'), port: 80 });
    assert.equal(await routeOf('10.96.0.10'), undefined, 'no route before the router address is known');
    await lb.setRouter(ROUTER);
    const r = await routeOf('10.96.0.10');
    assert.ok(r);
    assert.equal(r.gateway, SERVICE_ROUTE_NEXTHOP);
    assert.equal(r.prefsrc, ROUTER);
    assert.equal(r.protocol, SERVICE_ROUTE_PROTOCOL);
    const neigh = (await nl.listNeighbours({ family: 4, link: 'tendril_host' })).find((n) => n.ip === SERVICE_ROUTE_NEXTHOP);
    const peer = await nl.getLink('tendril_net');
    assert.equal(neigh?.mac, peer.mac);
  });

  it('shrinks and grows in place; a second ClusterIP on the same address shares the route until the last goes', async () => {
    await lb.upsertService(svc({ backendIds: [2] }));
    let s = await dumpServices(maps);
    assert.equal(s.size, 2);
    assert.equal(maps.services.get(fkey('10.96.0.10', 80, 0))?.count, 1);
    assert.equal(maps.services.get(fkey('10.96.0.10', 80, 1))?.backendId, 2);
    await lb.upsertService(svc({ backendIds: [1, 2] }));
    s = await dumpServices(maps);
    assert.equal(s.size, 3);
    await lb.upsertService(svc({ id: 2, port: 443, backendIds: [1] }));
    await lb.deleteService(1);
    assert.equal(maps.services.get(fkey('10.96.0.10', 80, 0)), undefined);
    assert.equal(maps.revNat.get(1), undefined);
    assert.ok(await routeOf('10.96.0.10'), 'service 2 still holds the address');
    await lb.deleteService(2);
    assert.equal(await routeOf('10.96.0.10'), undefined);
    assert.equal((await dumpServices(maps)).size, 0);
  });

  it('flags from type, traffic policy, affinity, Maglev; two scopes with the internal one written and removed', async () => {
    await lb.upsertBackends([be(4), be(5)]);
    const np = svc({ id: 3, address: '0.0.0.0', port: 30080, type: 'NodePort', localTraffic: true, affinityTimeoutSec: 60, backendIds: [4], internalBackendIds: [4, 5] });
    await lb.upsertService(np);
    const slot0 = maps.services.get(fkey('0.0.0.0', 30080, 0))!;
    assert.equal(slot0.flags, ServiceFlag.NODEPORT | ServiceFlag.LOCAL_TRAFFIC | ServiceFlag.AFFINITY | ServiceFlag.TWO_SCOPES);
    assert.equal(slot0.affinityTimeout, 60);
    assert.equal(slot0.count, 1);
    assert.equal(maps.services.get(fkey('0.0.0.0', 30080, 0, LbScope.INTERNAL))?.count, 2);
    assert.equal(maps.services.get(fkey('0.0.0.0', 30080, 2, LbScope.INTERNAL))?.backendId, 5);
    assert.equal(await routeOf('0.0.0.0'), undefined, 'no route for a NodePort');
    // Cluster policy again: the internal scope goes.
    await lb.upsertService(svc({ id: 3, address: '0.0.0.0', port: 30080, type: 'NodePort', affinityTimeoutSec: 60, backendIds: [4, 5] }));
    assert.equal(maps.services.get(fkey('0.0.0.0', 30080, 0, LbScope.INTERNAL)), undefined);
    assert.equal(maps.services.get(fkey('0.0.0.0', 30080, 1, LbScope.INTERNAL)), undefined);
    assert.equal(maps.services.get(fkey('0.0.0.0', 30080, 0))?.flags, ServiceFlag.NODEPORT | ServiceFlag.AFFINITY);
    const ext = svc({ id: 4, address: '192.0.2.10', type: 'ExternalIPs', backendIds: [4, 5], maglevTable: Uint32Array.from([4, 5, 4, 5, 4, 5, 4]) });
    await lb.upsertService(ext);
    assert.equal(maps.services.get(fkey('192.0.2.10', 80, 0))?.flags, ServiceFlag.EXTERNAL_IP | ServiceFlag.MAGLEV);
    const firstInner = maps.maglev.innerMapId(4)!;
    assert.ok(firstInner > 0);
    assert.deepEqual(innerEntries(firstInner), [4, 5, 4, 5, 4, 5, 4]);
    await lb.upsertService({ ...ext, maglevTable: Uint32Array.from([5, 5, 5, 5, 5, 5, 5]) });
    const second = maps.maglev.innerMapId(4)!;
    assert.notEqual(second, firstInner, 'a new table is swapped in whole');
    assert.deepEqual(innerEntries(second), [5, 5, 5, 5, 5, 5, 5]);
    await assert.rejects(lb.upsertService({ ...ext, maglevTable: new Uint32Array(3) }), /Maglev table of 3 entries/);
    await lb.upsertService(svc({ id: 4, address: '192.0.2.10', type: 'LoadBalancer', backendIds: [4, 5] }));
    assert.equal(maps.maglev.has(4), false);
    assert.equal(maps.services.get(fkey('192.0.2.10', 80, 0))?.flags, ServiceFlag.LOADBALANCER);
    await lb.deleteService(3);
    await lb.deleteService(4);
  });

  it('a frontend another (stale) ID holds is taken over; backends it does not know are refused', async () => {
    await lb.upsertService(svc({ id: 5, address: '10.96.0.20', backendIds: [4, 5] }));
    await lb.upsertService(svc({ id: 6, address: '10.96.0.20', backendIds: [4] }));
    assert.deepEqual(maps.services.get(fkey('10.96.0.20', 80, 0)), { backendId: 0, affinityTimeout: 0, count: 1, revNatIndex: 6, flags: 0 });
    assert.equal(maps.services.get(fkey('10.96.0.20', 80, 2)), undefined);
    assert.equal(maps.revNat.get(5), undefined);
    assert.ok(await routeOf('10.96.0.20'), 'the new holder keeps the route');
    await assert.rejects(lb.upsertService(svc({ id: 7, address: '10.96.0.21', backendIds: [99] })), (err: unknown) => isDatapathError(err, 'not-found'));
    assert.equal(maps.services.get(fkey('10.96.0.21', 80, 0)), undefined);
    await lb.deleteService(6);
    assert.equal(await routeOf('10.96.0.20'), undefined);
  });

  it('members: every backend the service has, before its slots; one that leaves is a member no more, its conntrack and affinity entries stay (not walked); deleteBackends refused while a service has it', async () => {
    await lb.upsertBackends([be(6), be(7), be(10, 'terminating')]);
    await assert.rejects(lb.upsertService(svc({ id: 7, address: '10.96.0.30', protocol: 'UDP', backendIds: [6, 7], memberIds: [6, 7, 98] })), (err: unknown) => isDatapathError(err, 'not-found') && /98/.test((err as Error).message));
    assert.deepEqual(await members(maps, 7), [], 'a refused service adds no member');
    await lb.upsertService(svc({ id: 7, address: '10.96.0.30', protocol: 'UDP', backendIds: [6, 7], memberIds: [6, 7, 10] }));
    assert.deepEqual(await members(maps, 7), [6, 7, 10], 'the terminating backend, which has no slot, is a member');
    await assert.rejects(lb.deleteBackends([6]), (err: unknown) => isDatapathError(err, 'refused'));
    await assert.rejects(lb.deleteBackends([10]), (err: unknown) => isDatapathError(err, 'refused') && /service 7/.test((err as Error).message), 'a member without a slot');
    const ctAny = new BpfMap(objects.lxc.rawMap(MapName.CT_ANY), ct4Key, ctEntry);
    const affinity = new BpfMap(objects.lxc.rawMap(MapName.LB_AFFINITY), lb4AffinityKey, lb4AffinityValue);
    const client = parseIp('10.215.2.1');
    const svcFlow = { saddr: client, daddr: parseIp('10.96.0.30'), sport: 5000, dport: 80, proto: 17, flags: CtKeyFlag.SERVICE };
    ctAny.set(svcFlow, ctValue(6, 7));
    affinity.set({ client, revNatIndex: 7 }, { lastUsedNs: 1n, backendId: 6 });
    // Out of the slots but still in the Maglev table: a member, still refused (the table would send flows to a missing backend).
    await lb.upsertService(svc({ id: 7, address: '10.96.0.30', protocol: 'UDP', backendIds: [7], maglevTable: Uint32Array.from([6, 7, 6, 7, 6, 7, 6]) }));
    assert.deepEqual(await members(maps, 7), [6, 7]);
    await assert.rejects(lb.deleteBackends([6]), (err: unknown) => isDatapathError(err, 'refused') && /service 7/.test((err as Error).message));
    await lb.upsertService(svc({ id: 7, address: '10.96.0.30', protocol: 'UDP', backendIds: [7] }));
    assert.deepEqual(await members(maps, 7), [7]);
    await lb.deleteBackends([6, 10]);
    assert.equal(maps.backends.get(6), undefined);
    assert.ok(ctAny.get(svcFlow), 'conntrack is not walked: the datapath chooses again for this flow');
    assert.ok(affinity.get({ client, revNatIndex: 7 }), 'nor is the affinity map: a non-member is ignored there');
    ctAny.delete(svcFlow);
    affinity.delete({ client, revNatIndex: 7 });
    await lb.deleteService(7);
    assert.deepEqual(await members(maps, 7), [], 'the service\'s members go with it');
  });

  it('a restart rebuilds the shadow from the maps; restoreDone removes services, backends, tables and routes the agent no longer has', async () => {
    await lb.upsertBackends([be(8), be(9)]);
    await lb.upsertService(svc({ id: 8, address: '10.96.0.40', backendIds: [8] }));
    await lb.upsertService(svc({ id: 9, address: '10.96.0.41', backendIds: [9], maglevTable: Uint32Array.from([9, 9, 9, 9, 9, 9, 9]) }));
    // A route of ours no service holds (a previous run's) and someone else's route, which stays.
    await nl.replaceRoute({ dst: '10.96.0.99/32', gateway: SERVICE_ROUTE_NEXTHOP, onlink: true, link: 'tendril_host', prefsrc: ROUTER, protocol: SERVICE_ROUTE_PROTOCOL });
    await nl.replaceRoute({ dst: '10.96.0.98/32', link: 'tendril_host' });
    // Service 8 as a datapath without tendril_lb4_member left it: its slots' backends become members at start.
    maps.members.delete({ revNatIndex: 8, backendId: 8 });
    const restarted = await LbMaps.open({ maps, routes: new ServiceRoutes({ netlink: async () => nl, log }), log, maglevTableSize: MAGLEV_SIZE });
    assert.deepEqual(restarted.serviceIds().filter((id) => id >= 8), [8, 9]);
    assert.deepEqual(await members(maps, 8), [8], 'seeded from the slots');
    await restarted.setRouter(ROUTER);
    const liveBackends = restarted.backendIds().filter((id) => id !== 9);
    await restarted.restoreDone([8], liveBackends);
    assert.ok(maps.services.get(fkey('10.96.0.40', 80, 0)));
    assert.equal(maps.services.get(fkey('10.96.0.41', 80, 0)), undefined);
    assert.equal(maps.services.get(fkey('10.96.0.41', 80, 1)), undefined);
    assert.equal(maps.revNat.get(9), undefined);
    assert.equal(maps.maglev.has(9), false);
    assert.equal(maps.backends.get(9), undefined);
    assert.deepEqual([await members(maps, 8), await members(maps, 9)], [[8], []]);
    assert.ok(maps.backends.get(8));
    assert.ok(await routeOf('10.96.0.40'));
    assert.equal(await routeOf('10.96.0.41'), undefined);
    assert.equal(await routeOf('10.96.0.99'), undefined);
    assert.ok(await routeOf('10.96.0.98'), "someone else's route stays");
    // The restarted instance knows the slots the first one wrote, and can delete what it wrote.
    await assert.rejects(restarted.deleteBackends([8]), (err: unknown) => isDatapathError(err, 'refused'));
    await restarted.deleteService(8);
    assert.equal(maps.services.get(fkey('10.96.0.40', 80, 0)), undefined);
    assert.equal(await routeOf('10.96.0.40'), undefined);
    await nl.deleteRoute({ dst: '10.96.0.98/32', link: 'tendril_host' });
  });

  it('a failed upsert (service map full) puts back exactly what the map held', async () => {
    const small = await loadMaps({ ...SIZES, [MapName.LB_SERVICES]: 5 });
    const slb = await LbMaps.open({ maps: small.maps, routes: new ServiceRoutes({ netlink: async () => nl, log }), log, maglevTableSize: MAGLEV_SIZE });
    await slb.upsertBackends([be(1), be(2), be(3), be(4), be(5)]);
    await slb.upsertService(svc({ id: 1, address: '10.96.1.1', backendIds: [1, 2] }));
    const before = await dumpServices(small.maps);
    await assert.rejects(slb.upsertService(svc({ id: 2, address: '10.96.1.2', backendIds: [1, 2, 3] })), (err: unknown) => isDatapathError(err, 'failed') && /full/.test((err as Error).message));
    assert.deepEqual(await dumpServices(small.maps), before);
    // Growing in place: slots 3..5 are new keys, and the map has room for two.
    await assert.rejects(slb.upsertService(svc({ id: 1, address: '10.96.1.1', backendIds: [1, 2, 3, 4, 5] })), /full/);
    assert.deepEqual(await dumpServices(small.maps), before);
    assert.equal(small.maps.revNat.get(2), undefined);
    assert.deepEqual([await members(small.maps, 1), await members(small.maps, 2)], [[1, 2], []], 'members put back too');
    // Still consistent: the service can shrink and be deleted.
    await slb.upsertService(svc({ id: 1, address: '10.96.1.1', backendIds: [3] }));
    await slb.deleteService(1);
    assert.equal((await dumpServices(small.maps)).size, 0);
  });

  it('inside inBatch, the frontends\' routes go in together when it returns (more than one netlink batch); one whose service went meanwhile does not', async () => {
    const big = await loadMaps({ ...SIZES, [MapName.LB_SERVICES]: 1024, [MapName.LB_REVNAT]: 512, [MapName.LB_MEMBERS]: 512 });
    const batchRoutes = new ServiceRoutes({ netlink: async () => nl, log });
    const blb = await LbMaps.open({ maps: big.maps, routes: batchRoutes, log, maglevTableSize: MAGLEV_SIZE });
    await blb.setRouter(ROUTER);
    const vip = (i: number) => `10.97.${i >> 7}.${(i & 127) + 1}`;
    await blb.upsertBackends([be(1)]);
    await blb.inBatch(async () => {
      for (let i = 0; i < 300; i++) await blb.upsertService(svc({ id: 100 + i, address: vip(i), backendIds: [1] }));
      assert.equal(await routeOf(vip(0)), undefined, 'not before the batch ends');
      await blb.deleteService(100 + 299);
    });
    const ours = (await nl.listRoutes({ family: 4, table: 254 })).filter((r) => r.protocol === SERVICE_ROUTE_PROTOCOL && r.dst.startsWith('10.97.'));
    assert.equal(ours.length, 299);
    const r = await routeOf(vip(298));
    assert.deepEqual([r?.gateway, r?.prefsrc, r?.onlink], [SERVICE_ROUTE_NEXTHOP, ROUTER, true]);
    assert.equal(await routeOf(vip(299)), undefined);
    // Released as a single upsert's would be.
    await blb.inBatch(async () => {
      for (let i = 0; i < 299; i++) await blb.deleteService(100 + i);
    });
    assert.equal((await nl.listRoutes({ family: 4, table: 254 })).filter((x) => x.dst.startsWith('10.97.')).length, 0);
    await blb.deleteBackends([1]);
  });

  it('loadBalancerSourceRanges: the prefixes go in before slot 0 carries SOURCE_RANGES, change in place, go with the service; a restart finds them; strays go at restoreDone', async () => {
    const ranges = async () => {
      const out: string[] = [];
      for await (const k of maps.sourceRanges.keys()) out.push(`${k.serviceId} ${formatPrefix(k.prefix)}`);
      return out.sort();
    };
    await lb.upsertBackends([be(11)]);
    const lbSvc = (sourceRanges?: string[]) => svc({ id: 11, address: '198.51.100.11', type: 'LoadBalancer', backendIds: [11], ...(sourceRanges ? { sourceRanges } : {}) });
    await lb.upsertService(lbSvc(['203.0.113.0/24', '192.0.2.0/25']));
    assert.deepEqual(await ranges(), ['11 192.0.2.0/25', '11 203.0.113.0/24']);
    assert.equal(maps.services.get(fkey('198.51.100.11', 80, 0))!.flags, ServiceFlag.LOADBALANCER | ServiceFlag.SOURCE_RANGES);
    await lb.upsertService(lbSvc(['203.0.113.0/24', '10.0.0.0/8']));
    assert.deepEqual(await ranges(), ['11 10.0.0.0/8', '11 203.0.113.0/24']);
    await assert.rejects(lb.upsertService(lbSvc(['2001:db8::/32'])), /source range 2001:db8::\/32 is not IPv4 like its frontend/);
    assert.deepEqual(await ranges(), ['11 10.0.0.0/8', '11 203.0.113.0/24'], 'a refused write changes nothing');
    // A restart rebuilds the ranges from the map; one no service has (left by a crash) goes at restoreDone.
    maps.sourceRanges.set({ serviceId: 4242, prefix: parsePrefix('192.0.2.0/24') }, 1);
    const restarted = await LbMaps.open({ maps, routes: new ServiceRoutes({ netlink: async () => nl, log }), log, maglevTableSize: MAGLEV_SIZE });
    await restarted.restoreDone([...restarted.serviceIds()], restarted.backendIds());
    assert.deepEqual(await ranges(), ['11 10.0.0.0/8', '11 203.0.113.0/24']);
    await restarted.upsertService(lbSvc());
    assert.deepEqual(await ranges(), []);
    assert.equal(maps.services.get(fkey('198.51.100.11', 80, 0))!.flags, ServiceFlag.LOADBALANCER);
    await restarted.upsertService(lbSvc(['203.0.113.0/24']));
    await restarted.deleteService(11);
    assert.deepEqual(await ranges(), []);
    await restarted.deleteBackends([11]);
    lb = await LbMaps.open({ maps, routes, log, maglevTableSize: MAGLEV_SIZE });
  });
});
