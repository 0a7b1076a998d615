import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { requireRoot } from '../../../../test/support/root.js';
import { KernelError } from '../errors.js';
import { removePinDir, unpin } from './bpffs.js';
import { bytes, lpmKey, struct, u32, u64 } from './codec.js';
import { MapFlag } from './constants.js';
import { possibleCpus } from './cpus.js';
import { BpfMap, RawMap, perCpuValue } from './map.js';
import { MapOfMaps } from './mapOfMaps.js';
import { expectKernelError, makePinRoot } from './testing/kernelTest.js';
import { ipv4Bytes, ipv4String } from './testing/packets.js';

requireRoot('the bpf map tests');

const valueCodec = struct({ packets: u64, bytes: u64 });

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

describe('bpf maps', () => {
  let pinRoot: string;
  const open: Array<{ close(): void }> = [];
  const track = <T extends { close(): void }>(m: T): T => {
    open.push(m);
    return m;
  };

  before(async () => {
    pinRoot = await makePinRoot('map');
  });

  after(async () => {
    for (const m of open) m.close();
    if (pinRoot) await removePinDir(pinRoot);
  });

  it('creates a hash map and updates with ANY, NOEXIST and EXIST', async () => {
    const m = track(await BpfMap.create({ name: 'tdl_t_hash', type: 'HASH', maxEntries: 64 }, u32, valueCodec));
    assert.equal(m.info.keySize, 4);
    assert.equal(m.info.valueSize, 16);
    assert.equal(m.info.maxEntries, 64);
    assert.equal(m.name, 'tdl_t_hash');
    assert.ok(m.info.id > 0);

    m.set(1, { packets: 1n, bytes: 100n });
    assert.deepEqual(m.get(1), { packets: 1n, bytes: 100n });
    m.set(1, { packets: 2n, bytes: 200n }, 'exist');
    assert.deepEqual(m.get(1), { packets: 2n, bytes: 200n });
    m.set(2, { packets: 5n, bytes: 5n }, 'noexist');
    assert.ok(m.has(2));
    assert.equal(m.nextKey(undefined) !== undefined, true);
  });

  it('answers undefined for a missing key and throws KernelErrors for real failures', async () => {
    const m = track(await BpfMap.create({ name: 'tdl_t_miss', type: 'HASH', maxEntries: 2 }, u32, u64));
    assert.equal(m.get(42), undefined);
    assert.equal(m.has(42), false);
    assert.equal(m.delete(42), false);

    m.set(1, 1n);
    const exists = await expectKernelError(() => m.set(1, 2n, 'noexist'), 'EEXIST', /^BPF_MAP_UPDATE_ELEM tdl_t_miss$/);
    assert.equal(exists.errno, 17);
    await expectKernelError(() => m.set(9, 2n, 'exist'), 'ENOENT', /^BPF_MAP_UPDATE_ELEM tdl_t_miss$/);
    m.set(2, 2n);
    // A full hash map refuses new keys.
    await expectKernelError(() => m.set(3, 3n), 'E2BIG', /^BPF_MAP_UPDATE_ELEM tdl_t_miss$/);
    assert.equal(m.delete(1), true);
    assert.equal(m.get(1), undefined);
  });

  it('checks key and value lengths natively too', async () => {
    const m = track(await RawMap.create({ name: 'tdl_t_len', type: 'HASH', keySize: 4, valueSize: 8, maxEntries: 4 }));
    assert.throws(() => m.update(Buffer.alloc(3), Buffer.alloc(8)), /key of map tdl_t_len must be 4 bytes, got 3/);
    assert.throws(() => m.update(Buffer.alloc(4), Buffer.alloc(9)), /value of map tdl_t_len must be 8 bytes, got 9/);
    assert.throws(() => m.lookup(Buffer.alloc(5)), RangeError);
    assert.throws(() => m.delete(new Uint8Array(0)), RangeError);
    assert.throws(() => new BpfMap(m, u64, u64), /key codec is 8 bytes, map tdl_t_len has 4-byte keys/);
    assert.throws(() => new BpfMap(m, u32, u32), /value codec is 4 bytes/);
  });

  it('reports a bad map spec as a KernelError naming the map', async () => {
    // An LPM trie needs BPF_F_NO_PREALLOC.
    const err = await expectKernelError(
      () => RawMap.create({ name: 'tdl_t_badlpm', type: 'LPM_TRIE', keySize: 8, valueSize: 4, maxEntries: 4 }),
      'EINVAL',
      /^BPF_MAP_CREATE tdl_t_badlpm$/,
    );
    assert.match(err.message, /BPF_MAP_CREATE tdl_t_badlpm: EINVAL/);
    await assert.rejects(RawMap.create({ name: 'tdl_name_too_long', type: 'HASH', keySize: 4, valueSize: 4, maxEntries: 1 }), /longer than 15 bytes/);
  });

  it('batch-updates a hash map with BPF_MAP_UPDATE_BATCH and iterates every entry', async () => {
    const m = track(await BpfMap.create({ name: 'tdl_t_batch', type: 'HASH', maxEntries: 4096 }, u32, u64));
    const n = 1500; // more than one dump chunk
    const entries = Array.from({ length: n }, (_, i) => [i, BigInt(i) * 3n] as const);
    const r = await m.setMany(entries);
    assert.deepEqual(r, { count: n, batched: true });
    assert.equal(m.get(1499), 4497n);

    const seen = await collect(m.entries());
    assert.equal(seen.length, n);
    assert.deepEqual(
      seen.sort((a, b) => a[0] - b[0]),
      entries.map(([k, v]) => [k, v]),
    );
    const keys = await collect(m.keys());
    assert.equal(new Set(keys).size, n);

    // The kernel's batch update has no NOEXIST: it goes entry by entry, and
    // a failure part-way says how far it got.
    const err = await expectKernelError(
      () =>
        m.setMany(
          [
            [5000, 1n],
            [1, 1n],
          ],
          'noexist',
        ),
      'EEXIST',
      /^BPF_MAP_UPDATE_ELEM tdl_t_batch \(after 1 of 2 entries\)$/,
    );
    assert.equal((err.cause as { processed?: number }).processed, 1);
    assert.equal(m.get(5000), 1n);
  });

  it('walks keys with get_next_key and an array map from index 0', async () => {
    const m = track(await BpfMap.create({ name: 'tdl_t_array', type: 'ARRAY', maxEntries: 4 }, u32, u64));
    m.set(2, 22n);
    assert.equal(m.get(0), 0n, 'array entries always exist');
    assert.equal(m.nextKey(), 0);
    assert.equal(m.nextKey(0), 1);
    assert.equal(m.nextKey(3), undefined);
    assert.deepEqual(await collect(m.entries()), [
      [0, 0n],
      [1, 0n],
      [2, 22n],
      [3, 0n],
    ]);
    await expectKernelError(() => m.set(9, 1n), 'E2BIG', /BPF_MAP_UPDATE_ELEM tdl_t_array/);
    const r = await m.setMany([
      [0, 10n],
      [1, 11n],
    ]);
    assert.equal(r.batched, true);
    assert.equal(m.get(1), 11n);
  });

  it('walks a hash map\'s keys in batches from a bucket cursor: every key once, though the walker deletes as it goes', async () => {
    const n = 5000;
    const m = track(await BpfMap.create({ name: 'tdl_t_kbatch', type: 'HASH', maxEntries: n }, u32, u64));
    await m.setMany(Array.from({ length: n }, (_, i) => [i, BigInt(i)] as [number, bigint]));
    const seen: number[] = [];
    for await (const chunk of m.raw.keyChunks(128)) {
      assert.ok(chunk.count <= 128);
      for (let i = 0; i < chunk.count; i++) {
        const k = chunk.keys.readUInt32LE(i * 4);
        seen.push(k);
        // What a GC does: the key it was handed goes at once.
        m.delete(k);
      }
    }
    assert.equal(seen.length, n, 'no key twice: the walk never started over');
    assert.equal(new Set(seen).size, n);
    assert.equal(m.nextKey(), undefined, 'all deleted');
  });

  it('falls back to one update per entry for map types without batch operations', async () => {
    // A devmap (ifindex values) has no map_update_batch: the kernel answers ENOTSUPP.
    const m = track(await BpfMap.create({ name: 'tdl_t_devmap', type: 'DEVMAP', maxEntries: 4 }, u32, u32));
    const r = await m.setMany([
      [0, 1],
      [3, 1],
    ]);
    assert.deepEqual(r, { count: 2, batched: false });
    assert.equal(m.get(3), 1);
    assert.deepEqual(await m.setMany([[1, 1]]), { count: 1, batched: false }, 'the map remembers it has no batch support');
  });

  it('looks up LPM trie prefixes by longest match', async () => {
    const key = lpmKey(bytes(4));
    const m = track(await BpfMap.create({ name: 'tdl_t_lpm', type: 'LPM_TRIE', maxEntries: 16, flags: MapFlag.NO_PREALLOC }, key, u32));
    const r = await m.setMany([
      [{ prefixLen: 8, data: ipv4Bytes('10.0.0.0') }, 8],
      [{ prefixLen: 16, data: ipv4Bytes('10.1.0.0') }, 16],
      [{ prefixLen: 24, data: ipv4Bytes('10.1.2.0') }, 24],
      [{ prefixLen: 0, data: ipv4Bytes('0.0.0.0') }, 0],
    ]);
    assert.equal(r.count, 4);
    const lookup = (ip: string): number | undefined => m.get({ prefixLen: 32, data: ipv4Bytes(ip) });
    assert.equal(lookup('10.1.2.3'), 24);
    assert.equal(lookup('10.1.9.9'), 16);
    assert.equal(lookup('10.200.0.1'), 8);
    assert.equal(lookup('192.168.0.1'), 0);
    assert.equal(m.delete({ prefixLen: 0, data: ipv4Bytes('0.0.0.0') }), true);
    assert.equal(lookup('192.168.0.1'), undefined);

    const prefixes = (await collect(m.keys())).map((k) => `${ipv4String(k.data)}/${k.prefixLen}`).sort();
    assert.deepEqual(prefixes, ['10.0.0.0/8', '10.1.0.0/16', '10.1.2.0/24']);
  });

  it('reads and writes per-CPU values, one slot per possible CPU', async () => {
    const value = perCpuValue(u64);
    assert.equal(value.cpus, possibleCpus());
    const m = track(await BpfMap.create({ name: 'tdl_t_pcpu', type: 'PERCPU_ARRAY', maxEntries: 2 }, u32, value));
    assert.equal(m.info.valueSize, 8);
    assert.equal(m.info.valueBufferSize, 8 * possibleCpus());
    const slots = Array.from({ length: value.cpus }, (_, i) => BigInt(i + 1));
    m.set(1, slots);
    assert.deepEqual(m.get(1), slots);
    assert.throws(() => new BpfMap(m.raw, u32, u64), /per-CPU/);
  });

  it('keeps recently used keys of an LRU hash when it is full', async () => {
    const m = track(await BpfMap.create({ name: 'tdl_t_lru', type: 'LRU_HASH', maxEntries: 32 }, u32, u32));
    for (let i = 0; i < 200; i++) m.set(i, i);
    let present = 0;
    for (let i = 0; i < 200; i++) if (m.get(i) !== undefined) present++;
    assert.ok(present > 0 && present <= 64, `LRU keeps a bounded number of entries, found ${present}`);
    assert.equal(m.get(199), 199, 'the newest entry is kept');
  });

  it('pins, reopens and reuses a pinned map with its entries; unpins', async () => {
    const path = join(pinRoot, 'tdl_t_pin');
    const first = await BpfMap.openOrCreatePinned(path, { name: 'tdl_t_pin', type: 'HASH', maxEntries: 8 }, u32, u64);
    assert.equal(first.created, true);
    first.map.set(7, 70n);
    first.map.close();

    const again = await BpfMap.openOrCreatePinned(path, { name: 'tdl_t_pin', type: 'HASH', maxEntries: 8 }, u32, u64);
    assert.equal(again.created, false);
    assert.equal(again.map.get(7), 70n);

    const reopened = track(BpfMap.openPinned(path, u32, u64, { type: 'HASH' }));
    assert.equal(reopened.info.id, again.map.info.id);
    again.map.close();

    unpin(path);
    assert.equal(existsSync(path), false);
    assert.equal(reopened.get(7), 70n, 'an open fd keeps the map alive after unpin');
  });

  it('refuses an incompatible pinned map with a clear error', async () => {
    const path = join(pinRoot, 'tdl_t_shape');
    const m = track(await RawMap.create({ name: 'tdl_t_shape', type: 'HASH', keySize: 4, valueSize: 8, maxEntries: 8 }));
    m.pin(path);
    const err = await expectKernelError(() => BpfMap.openPinned(path, u32, u32), 'EINVAL', /^BPF_OBJ_GET .*tdl_t_shape$/);
    assert.match(err.message, /pinned map tdl_t_shape is incompatible: value size 8, expected 4/);
    const err2 = await expectKernelError(
      () => BpfMap.openOrCreatePinned(path, { name: 'tdl_t_shape', type: 'ARRAY', maxEntries: 16 }, u32, u64),
      'EINVAL',
      /BPF_OBJ_GET/,
    );
    assert.match(err2.message, /type HASH, expected ARRAY; max entries 8, expected 16/);
    await expectKernelError(() => RawMap.openPinned(join(pinRoot, 'tdl_absent')), 'ENOENT', /^BPF_OBJ_GET .*tdl_absent$/);
  });

  it('puts inner maps into a HASH_OF_MAPS and takes them out again, off the event loop', async () => {
    const template = track(await RawMap.create({ name: 'tdl_t_tmpl', type: 'ARRAY', keySize: 4, valueSize: 8, maxEntries: 4 }));
    const outer = track(await MapOfMaps.create({ name: 'tdl_t_hom', type: 'HASH_OF_MAPS', maxEntries: 8, innerMap: template }, u32));
    assert.equal(outer.info.valueSize, 4);
    const a = await BpfMap.create({ name: 'tdl_t_inner_a', type: 'ARRAY', maxEntries: 4 }, u32, u64);
    const b = track(await BpfMap.create({ name: 'tdl_t_inner_b', type: 'ARRAY', maxEntries: 4 }, u32, u64));
    const aId = a.info.id;
    a.set(1, 11n);

    // The outer map holds its own reference: the inner handle may go right after the call.
    const setting = outer.set(7, a);
    a.close();
    await setting;
    assert.equal(outer.innerMapId(7), aId, 'a lookup answers the inner map ID');
    assert.equal(outer.has(8), false);

    await expectKernelError(() => outer.set(7, b, 'noexist'), 'EEXIST', /^BPF_MAP_UPDATE_ELEM tdl_t_hom$/);
    await outer.set(7, b, 'exist');
    assert.equal(outer.innerMapId(7), b.info.id);
    await outer.set(9, b.raw);
    assert.deepEqual((await collect(outer.keys())).sort(), [7, 9]);

    // The kernel checks every inner map against the template's shape.
    const odd = track(await RawMap.create({ name: 'tdl_t_odd', type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: 4 }));
    await expectKernelError(() => outer.set(3, odd), 'EINVAL', /^BPF_MAP_UPDATE_ELEM tdl_t_hom$/);

    assert.equal(await outer.delete(7), true);
    assert.equal(await outer.delete(7), false);
    assert.equal(outer.innerMapId(7), undefined);
  });

  it('indexes inner maps by position in an ARRAY_OF_MAPS', async () => {
    const template = track(await RawMap.create({ name: 'tdl_t_tmpl2', type: 'HASH', keySize: 4, valueSize: 4, maxEntries: 16 }));
    const outer = track(await MapOfMaps.create({ name: 'tdl_t_aom', type: 'ARRAY_OF_MAPS', maxEntries: 2, innerMap: template }, u32));
    const inner = track(await BpfMap.create({ name: 'tdl_t_inner_c', type: 'HASH', maxEntries: 16 }, u32, u32));
    await outer.set(1, inner);
    assert.equal(outer.innerMapId(0), undefined, 'an empty slot reads as absent');
    assert.equal(outer.innerMapId(1), inner.info.id);
    await expectKernelError(() => outer.set(2, inner), 'E2BIG', /^BPF_MAP_UPDATE_ELEM tdl_t_aom$/);
    assert.equal(await outer.delete(1), true);
    assert.equal(outer.innerMapId(1), undefined);
  });

  it('keeps maps of maps away from the synchronous element calls', async () => {
    const template = track(await RawMap.create({ name: 'tdl_t_tmpl3', type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: 1 }));
    const outer = track(await RawMap.create({ name: 'tdl_t_hom2', type: 'HASH_OF_MAPS', keySize: 4, valueSize: 4, maxEntries: 4, innerMap: template }));
    const key = Buffer.alloc(4);
    const fd = Buffer.alloc(4);
    fd.writeUInt32LE(template.fd);
    // Each would wait for an RCU grace period on the event loop; a batch would carry fd numbers the caller may close meanwhile.
    assert.throws(() => outer.update(key, fd), (e: Error) => e instanceof TypeError && /tdl_t_hom2 is a map of maps: an update waits for an RCU grace period/.test(e.message));
    assert.throws(() => outer.delete(key), (e: Error) => e instanceof TypeError && /a delete waits/.test(e.message));
    await assert.rejects(outer.updateBatch([[key, fd]]), TypeError);
    assert.throws(() => new BpfMap(outer, u32, u32), /is a map of maps: open it as a MapOfMaps/);
    assert.throws(() => new MapOfMaps(template, u32), /tdl_t_tmpl3 is not a map of maps/);
    await assert.rejects(template.setInnerMap(key, template), /is not a map of maps/);
    await assert.rejects(template.deleteInnerMap(key), /is not a map of maps/);
    assert.equal(outer.lookup(key), undefined, 'nothing was written');
  });

  it('pins and reopens a map of maps', async () => {
    const path = join(pinRoot, 'tdl_t_pin_hom');
    const template = track(await RawMap.create({ name: 'tdl_t_tmpl4', type: 'ARRAY', keySize: 4, valueSize: 8, maxEntries: 1 }));
    const spec = { name: 'tdl_t_pin_hom', type: 'HASH_OF_MAPS', maxEntries: 4, innerMap: template } as const;
    const first = await MapOfMaps.openOrCreatePinned(path, spec, u32);
    track(first.map);
    assert.equal(first.created, true);
    await first.map.set(1, template);
    const again = await MapOfMaps.openOrCreatePinned(path, spec, u32);
    track(again.map);
    assert.equal(again.created, false);
    assert.equal(again.map.innerMapId(1), template.info.id);
    assert.throws(() => MapOfMaps.openPinned(path, u32, { type: 'ARRAY_OF_MAPS' }), /type HASH_OF_MAPS, expected ARRAY_OF_MAPS/);
    unpin(path);
  });

  it('fails on a closed map without touching a reused fd number', async () => {
    const m = await BpfMap.create({ name: 'tdl_t_closed', type: 'HASH', maxEntries: 2 }, u32, u32);
    m.close();
    m.close();
    assert.throws(() => m.get(1), (err: Error) => !(err instanceof KernelError) && /is closed/.test(err.message));
  });
});
