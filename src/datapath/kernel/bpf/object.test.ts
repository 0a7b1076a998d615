import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { requireRoot } from '../../../../test/support/root.js';
import { mkdirPinDir, removePinDir } from './bpffs.js';
import { u32, u64 } from './codec.js';
import { MapType, ProgType, TcAction } from './constants.js';
import { TcxLink } from './link.js';
import { RawMap, perCpuValue } from './map.js';
import { BpfObject } from './object.js';
import { CLASS_DENY, KERNEL_BAD_OBJECT, KERNEL_TEST_OBJECT, addressKey, counterCodec, expectKernelError, lpmKeyCodec, makePinRoot } from './testing/kernelTest.js';
import { ipv4Bytes, ipv4Packet } from './testing/packets.js';

requireRoot('the bpf object tests');

describe('bpf objects', () => {
  let pinRoot: string;
  const objects: BpfObject[] = [];
  const load = async (opts: Parameters<typeof BpfObject.load>[1] = {}): Promise<BpfObject> => {
    const obj = await BpfObject.load(KERNEL_TEST_OBJECT, { pinRoot, ...opts });
    objects.push(obj);
    return obj;
  };

  before(async () => {
    pinRoot = await makePinRoot('obj');
  });

  after(async () => {
    for (const o of objects) o.close();
    if (pinRoot) await removePinDir(pinRoot);
  });

  it('loads an object: programs and maps by name, pinned maps under the pin root', async () => {
    const obj = await load({ maxEntries: { tdl_lru: 512 } });
    const v1 = obj.program('tdl_count_v1');
    assert.equal(v1.type, ProgType.SCHED_CLS);
    assert.equal(v1.section, 'tc');
    assert.ok(v1.id > 0);
    assert.match(v1.tag, /^[0-9a-f]{16}$/);
    assert.ok(v1.fd > 0);
    assert.notEqual(obj.program('tdl_count_v2').id, v1.id);

    const count = obj.maps.get('tdl_count');
    assert.ok(count);
    assert.equal(count.map.info.type, MapType.HASH);
    assert.equal(count.map.info.keySize, 4);
    assert.equal(count.map.info.valueSize, 16);
    assert.equal(count.pinPath, join(pinRoot, 'tdl_count'));
    assert.equal(count.reusedPin, false);
    assert.ok(existsSync(join(pinRoot, 'tdl_count')));
    assert.ok(existsSync(join(pinRoot, 'tdl_lpm')));

    const lru = obj.maps.get('tdl_lru');
    assert.equal(lru?.pinPath, undefined, 'tdl_lru is not pinned');
    assert.equal(lru?.map.info.maxEntries, 512, 'max_entries was set before load');
    assert.equal(obj.rawMap('tdl_events').info.type, MapType.RINGBUF);
    assert.throws(() => obj.program('tdl_nope'), /has no program tdl_nope \(it has tdl_count_v1, tdl_count_v2\)/);
    // A pin of another kind is refused: a map is not a link.
    await expectKernelError(() => TcxLink.openPinned(join(pinRoot, 'tdl_count')), 'EINVAL', /^BPF_OBJ_GET .*tdl_count$/);
  });

  it('maps the kernel-internal ENOTSUPP to EOPNOTSUPP', async () => {
    const obj = await load();
    // A ring buffer has no get_next_key from user space.
    const err = await expectKernelError(() => obj.rawMap('tdl_events').nextKey(), 'EOPNOTSUPP', /^BPF_MAP_GET_NEXT_KEY tdl_events$/);
    assert.match(err.message, /kernel ENOTSUPP, 524/);
  });

  it('runs a program with BPF_PROG_TEST_RUN: verdict, packet and map side effects', async () => {
    const obj = await load();
    const prog = obj.program('tdl_count_v1');
    const counts = obj.map('tdl_count', addressKey, counterCodec);
    const lpm = obj.map('tdl_lpm', lpmKeyCodec, u32);
    const variants = obj.map('tdl_variant', u32, u64);
    const lru = obj.map('tdl_lru', addressKey, u32);
    const seen = obj.map('tdl_percpu', u32, perCpuValue(u64));
    const src = ipv4Bytes('10.77.0.1');
    counts.delete(src);
    const variantBefore = variants.get(1) ?? 0n;

    const packet = ipv4Packet({ src: '10.77.0.1', dst: '10.77.0.2', payloadLength: 22 });
    const r = await prog.testRun({ data: packet, repeat: 3 });
    assert.equal(r.retval, TcAction.OK);
    assert.deepEqual(r.data, packet, 'the program leaves the packet as it was');
    assert.ok(r.durationNs >= 0);
    assert.deepEqual(counts.get(src), { packets: 3n, bytes: BigInt(3 * packet.length) });
    assert.equal(variants.get(1), variantBefore + 3n);
    assert.equal(lru.get(ipv4Bytes('10.77.0.2')), packet.length);
    const perCpu = seen.get(0);
    assert.ok(perCpu && perCpu.reduce((a, b) => a + b, 0n) >= 3n);

    // An LPM entry classing the destination as denied turns the verdict into a drop.
    lpm.set({ prefixLen: 16, data: ipv4Bytes('10.77.0.0') }, CLASS_DENY);
    const denied = await prog.testRun({ data: packet });
    assert.equal(denied.retval, TcAction.SHOT);
    assert.equal(lpm.delete({ prefixLen: 16, data: ipv4Bytes('10.77.0.0') }), true);
    assert.equal((await prog.testRun({ data: packet })).retval, TcAction.OK);

    await expectKernelError(() => prog.testRun({ data: Buffer.alloc(4) }), 'EINVAL', /^BPF_PROG_TEST_RUN tdl_count_v1$/);
  });

  it('reuses pinned maps on a second load: the entries survive', async () => {
    const first = await load();
    const key = ipv4Bytes('10.88.0.9');
    first.map('tdl_count', addressKey, counterCodec).set(key, { packets: 41n, bytes: 4100n });
    const id = first.rawMap('tdl_count').info.id;
    first.close();

    const second = await load();
    const count = second.maps.get('tdl_count');
    assert.equal(count?.reusedPin, true);
    assert.equal(count?.map.info.id, id, 'the same kernel map');
    const counts = second.map('tdl_count', addressKey, counterCodec);
    assert.deepEqual(counts.get(key), { packets: 41n, bytes: 4100n });
    await second.program('tdl_count_v2').testRun({ data: ipv4Packet({ src: '10.88.0.9', dst: '10.88.0.1' }) });
    assert.equal(counts.get(key)?.packets, 42n, 'the new program counts on in the old map');
    assert.equal(second.maps.get('tdl_lru')?.reusedPin, false, 'unpinned maps are new');
  });

  it('refuses a pinned map of another shape, with libbpf\'s reason', async () => {
    const root = join(pinRoot, 'incompatible');
    const odd = await RawMap.create({ name: 'tdl_count', type: 'HASH', keySize: 4, valueSize: 8, maxEntries: 1024 });
    try {
      await mkdirPinDir(root);
      odd.pin(join(root, 'tdl_count'));
    } finally {
      odd.close();
    }
    const err = await expectKernelError(() => BpfObject.load(KERNEL_TEST_OBJECT, { pinRoot: root }), 'EINVAL', /^bpf_object__load kernel_test\.bpf\.o$/);
    assert.match(err.kernelMessage ?? '', /couldn't reuse pinned map at '.*tdl_count': parameter mismatch/);
    assert.match(err.message, /parameter mismatch/);
  });

  it('reports a verifier rejection with the verifier\'s log', async () => {
    const err = await expectKernelError(() => BpfObject.load(KERNEL_BAD_OBJECT), 'EACCES', /^bpf_object__load kernel_bad\.bpf\.o$/);
    assert.match(err.kernelMessage ?? '', /BEGIN PROG LOAD LOG/);
    assert.match(err.kernelMessage ?? '', /invalid access to packet/);
    assert.match(err.kernelMessage ?? '', /prog 'tdl_unchecked'/);
  });

  it('reports missing files and unknown maps to size', async () => {
    await expectKernelError(() => BpfObject.load('/nonexistent/tdl.bpf.o'), 'ENOENT', /^bpf_object__open_file \/nonexistent\/tdl\.bpf\.o$/);
    await expectKernelError(() => BpfObject.load(KERNEL_TEST_OBJECT, { maxEntries: { tdl_nope: 4 } }), 'ENOENT', /^bpf_map__set_max_entries tdl_nope$/);
    await assert.rejects(BpfObject.load(KERNEL_TEST_OBJECT, { maxEntries: { tdl_lru: 0 } }), RangeError);
  });

  it('pins nothing without a pin root', async () => {
    const obj = await BpfObject.load(KERNEL_TEST_OBJECT);
    objects.push(obj);
    for (const m of obj.maps.values()) assert.equal(m.pinPath, undefined, m.map.name);
    assert.equal(existsSync('/sys/fs/bpf/tdl_count'), false);
  });
});
