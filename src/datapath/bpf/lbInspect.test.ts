// The load-balancer and NAT listings decoded from real pinned maps (the
// objects loaded under a temp bpffs root), written through LbMaps as the
// agent writes them.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { createLogger } from '../../logging/logger.js';
import { parseIp } from '../../netip/index.js';
import { BpfMap, codec, ensureBpffs, removePinDir } from '../kernel/bpf/index.js';
import { CtKeyFlag, DeviceFlag, MapName, NatDirection, NatFlag } from './constants.js';
import { ctServiceInfo, DatapathInspector } from './inspect.js';
import { ct4Key, ctEntry, deviceInfo, lb4AffinityKey, lb4AffinityValue, nat4Entry, nat4Key } from './layout.js';
import { LbInspector } from './lbInspect.js';
import { lbMapSet, LbMaps } from './lbMaps.js';
import { type DatapathObjects, loadDatapathObjects, type MapSizes } from './objects.js';
import { ServiceRoutes } from './serviceRoutes.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the load-balancer inspection tests');

const SIZES: MapSizes = TEST_MAP_SIZES;
const log = createLogger('lb-inspect-test', 'warn');

describe('LbInspector', { timeout: 60_000 }, () => {
  let root: string;
  let objects: DatapathObjects;
  let inspector: LbInspector;

  before(async () => {
    await ensureBpffs();
    root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    const pinDir = join(root, 'tendril');
    objects = await loadDatapathObjects({ pinDir, mapSizes: SIZES });
    const raw = (n: string) => objects.lxc.rawMap(n);
    const maps = lbMapSet(raw);
    const ctAny = new BpfMap(raw(MapName.CT_ANY), ct4Key, ctEntry);
    const lb = await LbMaps.open({
      maps,
      // No router address is ever given: routes are only recorded.
      routes: new ServiceRoutes({ netlink: () => Promise.reject(new Error('no netlink in this test')), log }),
      log,
      maglevTableSize: 3,
    });
    await lb.upsertBackends([
      { id: 11, address: '10.218.0.11', port: 8080, protocol: 'UDP', state: 'active' },
      { id: 12, address: '10.218.0.12', port: 8080, protocol: 'UDP', state: 'terminating' },
    ]);
    await lb.upsertService({ id: 5, address: '0.0.0.0', port: 30053, protocol: 'UDP', type: 'NodePort', localTraffic: true, affinityTimeoutSec: 30, backendIds: [11], internalBackendIds: [11, 12], maglevTable: Uint32Array.from([11, 11, 11]) });
    const aff = new BpfMap(raw(MapName.LB_AFFINITY), lb4AffinityKey, lb4AffinityValue);
    aff.set({ client: parseIp('192.0.2.7'), revNatIndex: 5 }, { lastUsedNs: process.hrtime.bigint() - 2_000_000_000n, backendId: 11 });
    const snat = new BpfMap(raw(MapName.SNAT), nat4Key, nat4Entry);
    snat.set({ saddr: parseIp('10.218.0.11'), daddr: parseIp('198.51.100.1'), sport: 4000, dport: 53, proto: 17, dir: NatDirection.EGRESS }, { createdNs: process.hrtime.bigint(), toAddr: parseIp('192.0.2.1'), toPort: 61000, flags: NatFlag.MASQUERADE });
    const devices = new BpfMap(raw(MapName.DEVICES), codec.u32, deviceInfo);
    devices.set(7, { ipv4: parseIp('192.0.2.1'), flags: DeviceFlag.MASQUERADE, mac: '02:00:00:00:00:07' });
    ctAny.set(
      { saddr: parseIp('192.0.2.7'), daddr: parseIp('192.0.2.1'), sport: 5000, dport: 30053, proto: 17, flags: CtKeyFlag.SERVICE },
      { expiresNs: process.hrtime.bigint() + 60_000_000_000n, packets: 1n, bytes: 40n, srcIdentity: 2, dstIdentity: 1, srcEndpoint: 0, dstEndpoint: 0, revNatIndex: 5, tcpFlags: 0, flags: 0, backendId: 11, natAddr: parseIp('192.0.2.1'), natPort: 30053 },
    );
    inspector = new LbInspector(new DatapathInspector(pinDir));
  });
  after(async () => {
    objects?.close();
    if (root) await removePinDir(root);
  });

  it('lists services by frontend and scope with slots resolved to backends, backends, reverse NAT and affinity', async () => {
    const l = await inspector.lbList();
    assert.deepEqual(l.services, [
      {
        id: 5,
        frontend: '0.0.0.0:30053/UDP',
        address: '0.0.0.0',
        port: 30053,
        protocol: 'UDP',
        scope: 'external',
        flags: ['nodeport', 'local-traffic', 'affinity', 'maglev', 'two-scopes'],
        affinityTimeoutSec: 30,
        count: 1,
        slots: [{ slot: 1, backendId: 11, backend: '10.218.0.11:8080', state: 'active' }],
        maglevTable: true,
      },
      {
        id: 5,
        frontend: '0.0.0.0:30053/UDP',
        address: '0.0.0.0',
        port: 30053,
        protocol: 'UDP',
        scope: 'internal',
        flags: ['nodeport', 'local-traffic', 'affinity', 'maglev', 'two-scopes'],
        affinityTimeoutSec: 30,
        count: 2,
        slots: [
          { slot: 1, backendId: 11, backend: '10.218.0.11:8080', state: 'active' },
          { slot: 2, backendId: 12, backend: '10.218.0.12:8080', state: 'terminating' },
        ],
        maglevTable: true,
      },
    ]);
    assert.deepEqual(
      l.backends.map((b) => [b.id, b.protocol, b.state]),
      [
        [11, 'UDP', 'active'],
        [12, 'UDP', 'terminating'],
      ],
    );
    assert.deepEqual(l.reverseNat, [{ id: 5, address: '0.0.0.0', port: 30053 }]);
    assert.equal(l.affinity.length, 1);
    assert.equal(l.affinity[0]!.backendId, 11);
    assert.ok(l.affinity[0]!.idleSeconds >= 2 && l.affinity[0]!.idleSeconds < 60);
  });

  it('lists SNAT mappings and node devices', async () => {
    const n = await inspector.natList();
    assert.equal(n.mappings.length, 1);
    const { ageSeconds, ...m } = n.mappings[0]!;
    assert.ok(ageSeconds >= 0 && ageSeconds < 60);
    assert.deepEqual(m, { direction: 'egress', protocol: 'UDP', saddr: '10.218.0.11', sport: 4000, daddr: '198.51.100.1', dport: 53, toAddr: '192.0.2.1', toPort: 61000, flags: ['masquerade'] });
    assert.deepEqual(n.devices, [{ ifindex: 7, ipv4: '192.0.2.1', mac: '02:00:00:00:00:07', masquerade: true }]);
  });

  it('a service flow\'s conntrack entry says which service and backend', async () => {
    const pinned = BpfMap.openPinned(join(root, 'tendril', MapName.CT_ANY), ct4Key, ctEntry);
    try {
      const rows = [];
      for await (const row of pinned.entries()) rows.push(row);
      assert.equal(rows.length, 1);
      const [k, v] = rows[0]!;
      assert.deepEqual(ctServiceInfo(k, v), { serviceEntry: true, revNatIndex: 5, backendId: 11, frontend: '192.0.2.1:30053', hairpin: false, nodePort: false });
      assert.equal(ctServiceInfo({ ...k, flags: 0 }, { ...v, revNatIndex: 0, backendId: 0 }), undefined);
    } finally {
      pinned.close();
    }
  });
});

describe('LbInspector with an IPv6 service', { timeout: 60_000 }, () => {
  let root: string;
  let objects: DatapathObjects;
  let inspector: LbInspector;

  before(async () => {
    await ensureBpffs();
    root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    const pinDir = join(root, 'tendril');
    objects = await loadDatapathObjects({ pinDir, mapSizes: SIZES });
    const raw = (n: string) => objects.lxc.rawMap(n);
    const lb = await LbMaps.open({ maps: lbMapSet(raw), routes: new ServiceRoutes({ netlink: () => Promise.reject(new Error('no netlink in this test')), log }), log, maglevTableSize: 3 });
    await lb.upsertBackends([
      { id: 21, address: '10.218.0.21', port: 8080, protocol: 'TCP', state: 'active' },
      { id: 22, address: 'fd00:218::22', port: 8080, protocol: 'TCP', state: 'active' },
    ]);
    await lb.upsertService({ id: 8, address: '10.96.0.8', port: 80, protocol: 'TCP', type: 'ClusterIP', localTraffic: false, affinityTimeoutSec: 0, backendIds: [21] });
    await lb.upsertService({ id: 9, address: 'fd00:96::8', port: 80, protocol: 'TCP', type: 'ClusterIP', localTraffic: false, affinityTimeoutSec: 0, backendIds: [22] });
    inspector = new LbInspector(new DatapathInspector(pinDir));
  });
  after(async () => {
    objects?.close();
    if (root) await removePinDir(root);
  });

  it('lists both families: the IPv6 frontend and backend in brackets, its reverse NAT entry', async () => {
    const l = await inspector.lbList();
    assert.deepEqual(
      l.services.map((s) => [s.id, s.frontend, s.address, s.slots.map((x) => x.backend)]),
      [
        [8, '10.96.0.8:80/TCP', '10.96.0.8', ['10.218.0.21:8080']],
        [9, '[fd00:96::8]:80/TCP', 'fd00:96::8', ['[fd00:218::22]:8080']],
      ],
    );
    assert.deepEqual(l.backends.map((b) => [b.id, b.address]), [[21, '10.218.0.21'], [22, 'fd00:218::22']]);
    assert.deepEqual(l.reverseNat, [{ id: 8, address: '10.96.0.8', port: 80 }, { id: 9, address: 'fd00:96::8', port: 80 }]);
  });
});
