/**
 * Pinned maps of a build whose layouts differ (build/bpf-variant: a field
 * added to ct_entry, lb4_service and lb4_backend) adopted by this build and
 * back: every entry carried over field by field, the added field zero, the
 * maps whose layout is the same kept as they are (the same kernel map), the
 * programs on a device swapped to the new build, no staging pin left.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { NetnsPool } from '../../../test/support/netns.js';
import { loadObjectsIn } from '../../../test/support/datapathLoad.js';
import { createLogger } from '../../logging/logger.js';
import { parseIp } from '../../netip/index.js';
import { codec, ensureBpffs, removePinDir, RawMap } from '../kernel/bpf/index.js';
import { Netlink } from '../kernel/netlink/index.js';
import { Btf } from './btf.js';
import { declaredMaps, type Layout } from './btfLayout.js';
import { MapName } from './constants.js';
import { ct4Key, ctEntry, type CtEntryValue, lb4Backend, lb4Key, lb4Service } from './layout.js';
import { compileConversion } from './mapConversion.js';
import { pinnedLayouts, STAGING_DIR } from './mapMigration.js';
import { DEFAULT_OBJECT_DIR, loadDatapathObjects, ProgramName } from './objects.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the pinned map migration tests');

const VARIANT_DIR = join(DEFAULT_OBJECT_DIR, '..', 'bpf-variant');
const log = createLogger('migration-test', 'warn');
const roots: string[] = [];
const pool = new NetnsPool('mig');
after(async () => {
  for (const r of roots) await removePinDir(r);
  await pool.cleanup();
});

async function pinDirOf(): Promise<string> {
  await ensureBpffs();
  const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
  roots.push(root);
  const pinDir = join(root, 'tendril');
  await mkdir(pinDir, { recursive: true });
  return pinDir;
}

const offsetOf = (l: Layout, field: string): number => {
  assert.equal(l.kind, 'struct');
  const f = l.fields.find((x) => x.name === field);
  assert.ok(f, `${field} in the layout`);
  return f.offset;
};

function ctValue(i: number): CtEntryValue {
  return {
    expiresNs: 10_000_000_000n + BigInt(i),
    packets: BigInt(i + 1),
    bytes: BigInt(60 * (i + 1)),
    srcIdentity: 1000 + i,
    dstIdentity: 2000,
    srcEndpoint: 11,
    dstEndpoint: 12,
    revNatIndex: 7,
    tcpFlags: 0x12,
    flags: 1,
    backendId: 3,
    natAddr: parseIp('192.0.2.7'),
    natPort: 30080,
  };
}

const ctKey = (i: number) => ({ saddr: parseIp('10.200.0.10'), daddr: parseIp('10.200.0.20'), sport: 20000 + i, dport: 80, proto: 6, flags: 0 });

describe('pinned maps of another layout', () => {
  it('are converted field by field to the new layout and back, with the programs on a device swapped', async () => {
    const pinDir = await pinDirOf();
    // The variant build's maps, pinned, with entries in its own layout (written through the converter, from this build's codecs).
    const variant = await loadDatapathObjects({ pinDir, objectDir: VARIANT_DIR, mapSizes: TEST_MAP_SIZES, log });
    const ns = await pool.add('a');
    const nsLinkName = 'tdlmig0';
    await pool.exec(ns.name, ['ip', 'link', 'add', nsLinkName, 'type', 'veth', 'peer', 'name', 'tdlmig1']);
    let variantCtLayout: Layout;
    let variantIds: { fromContainer: number; toContainer: number };
    try {
      const ct = variant.lxc.rawMap(MapName.CT_TCP);
      const layouts = pinnedLayouts(ct)!;
      variantCtLayout = layouts.value;
      const here = Btf.ofFile(join(DEFAULT_OBJECT_DIR, 'bpf_lxc.o'));
      const hereCt = declaredMaps(here).find((m) => m.name === MapName.CT_TCP)!;
      const toVariant = compileConversion(hereCt.value!, layouts.value);
      assert.deepEqual(toVariant.changes, ['added upgrade_probe (zero)']);
      const probeAt = offsetOf(layouts.value, 'upgrade_probe');
      for (let i = 0; i < 200; i++) {
        const v = new Uint8Array(ct.info.valueSize);
        assert.ok(toVariant.convert(codec.encode(ctEntry, ctValue(i)), 0, v, 0));
        v[probeAt] = 0xab; // dropped on the way to a layout without the field
        ct.update(codec.encode(ct4Key, ctKey(i)), v);
      }
      const svc = variant.lxc.rawMap(MapName.LB_SERVICES);
      const svcLayouts = pinnedLayouts(svc)!;
      const hereSvc = declaredMaps(here).find((m) => m.name === MapName.LB_SERVICES)!;
      const sv = new Uint8Array(svc.info.valueSize);
      compileConversion(hereSvc.value!, svcLayouts.value).convert(codec.encode(lb4Service, { backendId: 0, affinityTimeout: 30, count: 2, revNatIndex: 7, flags: 3 }), 0, sv, 0);
      svc.update(codec.encode(lb4Key, { address: parseIp('10.96.0.7'), dport: 80, backendSlot: 0, proto: 6, scope: 0 }), sv);
      const be = variant.lxc.rawMap(MapName.LB_BACKENDS);
      const beLayouts = pinnedLayouts(be)!;
      const hereBe = declaredMaps(here).find((m) => m.name === MapName.LB_BACKENDS)!;
      const bv = new Uint8Array(be.info.valueSize);
      compileConversion(hereBe.value!, beLayouts.value).convert(codec.encode(lb4Backend, { address: parseIp('10.200.0.20'), port: 8080, proto: 6, state: 0 }), 0, bv, 0);
      be.update(new Uint8Array([3, 0, 0, 0]), bv);
      // The variant's programs on a device of the namespace: a clsact filter each way, as a pod's lxc device has.
      const nl = await Netlink.open({ netns: ns.path });
      try {
        const dev = (await nl.getLink(nsLinkName)).index;
        await nl.addClsact(dev);
        for (const [direction, program] of [['ingress', variant.fromContainer], ['egress', variant.toContainer]] as const) {
          await nl.addBpfFilter({ link: dev, direction, fd: program.fd, name: program.name.slice(0, 15), priority: 1, handle: 1, directAction: true });
        }
      } finally {
        await nl.close();
      }
      variantIds = { fromContainer: variant.fromContainer.id, toContainer: variant.toContainer.id };
    } finally {
      variant.close();
    }
    const endpointsBefore = RawMap.openPinned(join(pinDir, MapName.ENDPOINTS));
    const endpointsId = endpointsBefore.info.id;
    endpointsBefore.close();

    // This build adopts them: in the namespace whose device runs the variant's programs.
    const loaded = await loadObjectsIn(ns.path, { pinDir, mapSizes: TEST_MAP_SIZES });
    const here = await loadDatapathObjects({ pinDir, mapSizes: TEST_MAP_SIZES, log }); // no migration left: reads the adopted maps
    try {
      assert.equal(existsSync(join(pinDir, STAGING_DIR)), false, 'no staging pins left');
      const ct = here.lxc.map(MapName.CT_TCP, ct4Key, ctEntry);
      let n = 0;
      for await (const [k, v] of ct.entries()) {
        assert.deepEqual(v, ctValue(k.sport - 20000));
        n++;
      }
      assert.equal(n, 200);
      assert.deepEqual(here.lxc.map(MapName.LB_SERVICES, lb4Key, lb4Service).get({ address: parseIp('10.96.0.7'), dport: 80, backendSlot: 0, proto: 6, scope: 0 }), { backendId: 0, affinityTimeout: 30, count: 2, revNatIndex: 7, flags: 3 });
      const beMap = RawMap.openPinned(join(pinDir, MapName.LB_BACKENDS));
      try {
        assert.deepEqual(codec.decode(lb4Backend, beMap.lookup(new Uint8Array([3, 0, 0, 0]))!), { address: parseIp('10.200.0.20'), port: 8080, proto: 6, state: 0 });
      } finally {
        beMap.close();
      }
      const endpointsAfter = RawMap.openPinned(join(pinDir, MapName.ENDPOINTS));
      assert.equal(endpointsAfter.info.id, endpointsId, 'a map of the same layout is the same kernel map');
      endpointsAfter.close();
      const nl = await Netlink.open({ netns: ns.path });
      try {
        const ids = (d: 'ingress' | 'egress') => nl.listBpfFilters(nsLinkName, d).then((f) => f.map((x) => x.programId));
        assert.deepEqual(await ids('ingress'), [loaded.programs[ProgramName.FROM_CONTAINER]], 'the device runs the new build now');
        assert.deepEqual(await ids('egress'), [loaded.programs[ProgramName.TO_CONTAINER]]);
        assert.notEqual(loaded.programs[ProgramName.FROM_CONTAINER], variantIds.fromContainer);
        assert.notEqual(loaded.programs[ProgramName.TO_CONTAINER], variantIds.toContainer);
      } finally {
        await nl.close();
      }
    } finally {
      here.close();
    }

    // And back: the field the variant has and this build lacks comes back zero.
    const loadedBack = await loadObjectsIn(ns.path, { pinDir, objectDir: VARIANT_DIR, mapSizes: TEST_MAP_SIZES });
    const back = await loadDatapathObjects({ pinDir, objectDir: VARIANT_DIR, mapSizes: TEST_MAP_SIZES, log });
    try {
      const ct = back.lxc.rawMap(MapName.CT_TCP);
      const toHere = compileConversion(variantCtLayout, declaredMaps(Btf.ofFile(join(DEFAULT_OBJECT_DIR, 'bpf_lxc.o'))).find((m) => m.name === MapName.CT_TCP)!.value!);
      const probeAt = offsetOf(variantCtLayout, 'upgrade_probe');
      let n = 0;
      for await (const [k, v] of ct.entries()) {
        assert.equal(v[probeAt], 0, 'the field this build did not have is zero');
        const out = new Uint8Array(ctEntry.size);
        assert.ok(toHere.convert(v, 0, out, 0));
        assert.deepEqual(codec.decode(ctEntry, Buffer.from(out)), ctValue(codec.decode(ct4Key, k).sport - 20000));
        n++;
      }
      assert.equal(n, 200);
      const nl = await Netlink.open({ netns: ns.path });
      try {
        assert.deepEqual((await nl.listBpfFilters(nsLinkName, 'ingress')).map((x) => x.programId), [loadedBack.programs[ProgramName.FROM_CONTAINER]]);
      } finally {
        await nl.close();
      }
    } finally {
      back.close();
    }
  });

  it('a pinned map without BTF whose sizes differ is refused with the reason, and the old pins stay', async () => {
    const pinDir = await pinDirOf();
    const old = await RawMap.create({ type: 'HASH', name: MapName.LB_BACKENDS, keySize: 4, valueSize: 12, maxEntries: TEST_MAP_SIZES[MapName.LB_BACKENDS]! });
    old.pin(join(pinDir, MapName.LB_BACKENDS));
    const id = old.info.id;
    old.close();
    await assert.rejects(loadDatapathObjects({ pinDir, mapSizes: TEST_MAP_SIZES, log }), /tendril_lb4_be \(value size 12 → 8.*no BTF/);
    const still = RawMap.openPinned(join(pinDir, MapName.LB_BACKENDS));
    assert.equal(still.info.id, id);
    still.close();
    assert.equal(existsSync(join(pinDir, STAGING_DIR)), false);
  });
  it('a smaller size that cannot take what a pinned table holds is refused (live state would go); one that can is carried', async () => {
    const pinDir = await pinDirOf();
    const old = await RawMap.create({ type: 'HASH', name: MapName.LB_BACKENDS, keySize: 4, valueSize: 8, maxEntries: TEST_MAP_SIZES[MapName.LB_BACKENDS]! });
    for (let id = 1; id <= 3; id++) old.update(Uint8Array.of(id, 0, 0, 0), Uint8Array.of(10, 0, 0, id, 0, 80, 0, 0));
    old.pin(join(pinDir, MapName.LB_BACKENDS));
    const id = old.info.id;
    old.close();
    await assert.rejects(loadDatapathObjects({ pinDir, mapSizes: { ...TEST_MAP_SIZES, [MapName.LB_BACKENDS]: 2 }, log }), /tendril_lb4_be \(.*max entries \d+ → 2\): it holds more than the 2 entries/);
    const still = RawMap.openPinned(join(pinDir, MapName.LB_BACKENDS));
    assert.equal(still.info.id, id, 'the refused map stays as it was');
    still.close();
    assert.equal(existsSync(join(pinDir, STAGING_DIR)), false);

    const objects = await loadDatapathObjects({ pinDir, mapSizes: { ...TEST_MAP_SIZES, [MapName.LB_BACKENDS]: 3 }, log });
    try {
      const carried = RawMap.openPinned(join(pinDir, MapName.LB_BACKENDS));
      assert.equal(carried.info.maxEntries, 3);
      assert.deepEqual([1, 2, 3].map((n) => carried.lookup(Uint8Array.of(n, 0, 0, 0))?.[3]), [1, 2, 3], 'every entry carried into the smaller map');
      carried.close();
    } finally {
      objects.close();
    }
  });
});
