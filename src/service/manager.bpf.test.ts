// ServiceManager over the real load-balancer maps (LbMaps on the datapath's
// pinned maps, loaded under a temp bpffs root at small sizes): what the
// manager renders is what the kernel's maps hold, a removed backend leaves
// the service's members (its conntrack entries are not walked), and a restart keeps IDs and drops stale entries.
// No program is attached and no route is written (the router is never set).
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NetnsPool } from '../../test/support/netns.js';
import { requireRoot } from '../../test/support/root.js';
import { runOk } from '../../test/support/run.js';
import { Netlink } from '../datapath/kernel/netlink/index.js';
import { createLogger } from '../logging/logger.js';
import { parseIp } from '../netip/index.js';
import { ensureBpffs, removePinDir } from '../datapath/kernel/bpf/index.js';
import { CtKeyFlag, LbScope, MapName } from '../datapath/bpf/constants.js';
import { ct4Key, ctEntry } from '../datapath/bpf/layout.js';
import { lbMapSet, LbMaps, type LbMapSet } from '../datapath/bpf/lbMaps.js';
import { BpfMap } from '../datapath/kernel/bpf/index.js';
import { loadDatapathObjects, type MapSizes } from '../datapath/bpf/objects.js';
import { ServiceRoutes } from '../datapath/bpf/serviceRoutes.js';
import { ServiceManager } from './manager.js';
import { ServiceStore } from './serviceStore.js';
import { TEST_MAP_SIZES } from '../datapath/bpf/testing/programHarness.js';

requireRoot('the service manager test over the real maps');

const log = createLogger('svc-bpf-test', 'warn');
const MAGLEV_SIZE = 251;
const SIZES: MapSizes = TEST_MAP_SIZES;

describe('ServiceManager over the real maps', { timeout: 120_000 }, () => {
  let root: string;
  let dir: string;
  let maps: LbMapSet;
  let ctTcp: BpfMap<ReturnType<typeof ct4Key.read>, ReturnType<typeof ctEntry.read>>;
  const closers: Array<() => unknown> = [];
  const pool = new NetnsPool('svcb');
  let nl: Netlink;
  // Routes go to tendril_host of a namespace of the test's own (no router is set: only deletions reach it).
  const routes = () => new ServiceRoutes({ netlink: async () => nl, log });
  const manager = (lb: LbMaps, nodeAddresses?: () => string[]) =>
    new ServiceManager({ loadBalancer: lb, store: new ServiceStore(join(dir, 'services')), log, algorithm: 'maglev', maglevTableSize: MAGLEV_SIZE, ...(nodeAddresses ? { nodeAddresses } : {}) });

  before(async () => {
    const ns = await pool.add('node');
    closers.push(() => pool.cleanup());
    await runOk(['ip', '-n', ns.name, 'link', 'add', 'tendril_host', 'type', 'veth', 'peer', 'name', 'tendril_net']);
    nl = await Netlink.open({ netns: ns.path });
    closers.push(() => nl.close());
    await ensureBpffs();
    root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    dir = await mkdtemp(join(tmpdir(), 'tdl-svcbpf-'));
    const objects = await loadDatapathObjects({ pinDir: join(root, 'tendril'), mapSizes: SIZES });
    closers.push(() => objects.close());
    const raw = (name: string) => objects.lxc.rawMap(name);
    maps = lbMapSet(raw);
    ctTcp = new BpfMap(raw(MapName.CT_TCP), ct4Key, ctEntry);
  });
  after(async () => {
    for (const c of closers.reverse()) await c();
    if (root) await removePinDir(root);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const slot = (address: string, port: number, s: number, scope: number = LbScope.EXTERNAL) => ({ address: parseIp(address), dport: port, backendSlot: s, proto: 6, scope });

  it('writes, shrinks, restores and cleans up services as the manager renders them', async () => {
    const lb = await LbMaps.open({ maps, routes: routes(), log, maglevTableSize: MAGLEV_SIZE });
    const m = manager(lb);
    await m.restore();
    await m.endpointsRestored();
    const r = await m.upsert(10, {
      'frontend-address': { ip: '10.96.0.10', port: 80, protocol: 'TCP' },
      'backend-addresses': [{ ip: '10.215.1.1', port: 8080 }, { ip: '10.215.1.2', port: 8080 }, { ip: '10.215.1.3', port: 8080, state: 'terminating' }],
      flags: { type: 'ClusterIP', sessionAffinity: true, sessionAffinityTimeout: 60 },
    });
    const [a, b, t] = r.service['backend-addresses'].map((x) => x.id);
    const head = maps.services.get(slot('10.96.0.10', 80, 0));
    assert.equal(head?.count, 2);
    assert.equal(head?.revNatIndex, 10);
    assert.equal(head?.affinityTimeout, 60);
    assert.deepEqual([1, 2].map((s) => maps.services.get(slot('10.96.0.10', 80, s))?.backendId), [a, b]);
    assert.deepEqual(maps.backends.get(t!), { address: parseIp('10.215.1.3'), port: 8080, proto: 6, state: 1 });
    assert.deepEqual(maps.revNat.get(10), { address: parseIp('10.96.0.10'), port: 80 });
    assert.deepEqual([...(await toArray(maps.maglev.keys()))], [10]);
    assert.deepEqual(await members(), [`10/${a}`, `10/${b}`, `10/${t}`].sort(), 'every backend, the terminating one too');

    // A connection pinned to backend b: b leaves the service's members; the entries stay (the datapath chooses again).
    const ct = { saddr: parseIp('10.215.2.1'), daddr: parseIp('10.215.1.2'), sport: 40000, dport: 8080, proto: 6, flags: 0 };
    const svcCt = { saddr: parseIp('10.215.2.1'), daddr: parseIp('10.96.0.10'), sport: 40000, dport: 80, proto: 6, flags: CtKeyFlag.SERVICE };
    const value = { expiresNs: 1n << 60n, packets: 1n, bytes: 60n, srcIdentity: 1, dstIdentity: 2, srcEndpoint: 0, dstEndpoint: 0, revNatIndex: 10, tcpFlags: 0, flags: 0, backendId: b!, natAddr: parseIp('10.96.0.10'), natPort: 80 };
    ctTcp.set(ct, value);
    ctTcp.set(svcCt, value);
    await m.upsert(10, {
      'frontend-address': { ip: '10.96.0.10', port: 80, protocol: 'TCP' },
      'backend-addresses': [{ ip: '10.215.1.1', port: 8080 }, { ip: '10.215.1.3', port: 8080, state: 'terminating' }],
      flags: { type: 'ClusterIP' },
    });
    assert.equal(maps.services.get(slot('10.96.0.10', 80, 0))?.count, 1);
    assert.equal(maps.services.get(slot('10.96.0.10', 80, 2)), undefined, 'the slot beyond the count went');
    assert.equal(maps.backends.get(b!), undefined);
    assert.deepEqual(await members(), [`10/${a}`, `10/${t}`].sort());
    assert.ok(ctTcp.get(ct), 'conntrack is not walked: the translated entry stays');
    assert.ok(ctTcp.get(svcCt), 'the service entry stays');
    ctTcp.delete(ct);
    ctTcp.delete(svcCt);

    await m.upsert(11, {
      'frontend-address': { ip: '0.0.0.0', port: 30080, protocol: 'TCP' },
      'backend-addresses': [{ ip: '10.215.1.1', port: 8080 }],
      flags: { type: 'NodePort', trafficPolicy: 'Local' },
    });
    assert.equal(maps.services.get(slot('0.0.0.0', 30080, 0))?.count, 0, 'no local backend for outside traffic');
    assert.equal(maps.services.get(slot('0.0.0.0', 30080, 0, LbScope.INTERNAL))?.count, 1);

    // Restart: new handles on the same pinned maps; a service deleted meanwhile (its record gone) is dropped.
    const editor = new ServiceStore(join(dir, 'services'));
    await editor.remove(11);
    editor.close();
    const lb2 = await LbMaps.open({ maps, routes: routes(), log, maglevTableSize: MAGLEV_SIZE });
    const m2 = manager(lb2);
    const report = await m2.restore();
    assert.equal(report.restored, 1);
    assert.deepEqual(m2.get(10)!['backend-addresses'].map((x) => x.id), [a, t]);
    assert.equal(maps.services.get(slot('0.0.0.0', 30080, 0)), undefined);
    assert.equal(maps.revNat.get(11), undefined);
    assert.deepEqual((await toArray(maps.backends.keys())).sort(), [a, t].sort());
    assert.deepEqual(await members(), [`10/${a}`, `10/${t}`].sort(), 'the deleted service\'s members went');

    await m2.delete(10);
    assert.equal((await toArray(maps.services.keys())).length, 0);
    assert.equal((await toArray(maps.backends.keys())).length, 0);
    assert.equal((await toArray(maps.maglev.keys())).length, 0);
    assert.deepEqual(await members(), []);
  });

  it('writes a NodePort on :: as one tendril_lb6_svc frontend per node IPv6 address, each with its own reverse NAT entry', async () => {
    const lb = await LbMaps.open({ maps, routes: routes(), log, maglevTableSize: MAGLEV_SIZE });
    const m = manager(lb, () => ['192.0.2.10', 'fd00:2::20', 'fd00:2::10']);
    await m.restore();
    await m.endpointsRestored();
    const r = await m.upsert(12, { 'frontend-address': { ip: '::', port: 30090, protocol: 'TCP' }, 'backend-addresses': [{ ip: 'fd00:215::1', port: 8080 }], flags: { type: 'NodePort' } });
    const [b] = r.service['backend-addresses'].map((x) => x.id);
    for (const [ip, id] of [['fd00:2::10', 12], ['fd00:2::20', 32767]] as const) {
      const head = maps.services.get(slot(ip, 30090, 0));
      assert.deepEqual([head?.count, head?.revNatIndex], [1, id], ip);
      assert.equal(maps.services.get(slot(ip, 30090, 1))?.backendId, b, ip);
      // A reply through this frontend leaves from the address the client reached.
      assert.deepEqual(maps.revNat.get(id), { address: parseIp(ip), port: 30090 }, `reverse NAT ${id}`);
    }
    assert.equal(maps.services.get(slot('::', 30090, 0)), undefined, 'no wildcard IPv6 entry');
    assert.deepEqual(await members(), [`12/${b}`, `32767/${b}`]);
    await m.delete(12);
    assert.equal((await toArray(maps.services.keys())).length, 0);
    assert.equal(maps.revNat.get(12), undefined);
    assert.equal(maps.revNat.get(32767), undefined);
    assert.deepEqual(await members(), []);
  });

  /** tendril_lb4_member as `service/backend`, sorted. */
  async function members(): Promise<string[]> {
    return (await toArray(maps.members.keys())).map((k) => `${k.revNatIndex}/${k.backendId}`).sort();
  }
});

async function toArray<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}
