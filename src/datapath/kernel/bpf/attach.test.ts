import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NetnsPool } from '../../../../test/support/netns.js';
import { requireRoot } from '../../../../test/support/root.js';
import { runOk } from '../../../../test/support/run.js';
import { Netlink } from '../netlink/index.js';
import { type Attachment, attach, tcxSupport } from './attach.js';
import { removePinDir } from './bpffs.js';
import { u32, u64 } from './codec.js';
import { TcxLink } from './link.js';
import { type BpfMap } from './map.js';
import { BpfObject } from './object.js';
import { KERNEL_TEST_OBJECT, addressKey, counterCodec, expectKernelError, makePinRoot } from './testing/kernelTest.js';
import { ipv4Bytes } from './testing/packets.js';

requireRoot('the bpf attach tests');

/**
 * Two namespaces joined by a veth pair (tdlva in A, tdlvb in B); the test
 * program goes on tdlvb's ingress, so A's pings to B pass through it.
 */
describe('attaching programs to a veth in a tdl namespace', () => {
  const pool = new NetnsPool('bpf');
  let a: { name: string; path: string };
  let b: { name: string; path: string };
  let ifindex: number;
  let pinRoot: string;
  let obj: BpfObject;
  let counts: BpfMap<Uint8Array, { packets: bigint; bytes: bigint }>;
  let variants: BpfMap<number, bigint>;
  const attachments: Attachment[] = [];
  const A_IP = '10.201.0.1';
  const B_IP = '10.201.0.2';

  const ping = async (count = 3): Promise<void> => {
    await runOk(['nsenter', `--net=${a.path}`, '--', 'ping', '-q', '-c', String(count), '-i', '0.05', '-W', '2', B_IP]);
  };
  const packetsFromA = (): bigint => counts.get(ipv4Bytes(A_IP))?.packets ?? 0n;
  const ranVariant = (v: 1 | 2): bigint => variants.get(v) ?? 0n;

  before(async () => {
    a = await pool.add('a');
    b = await pool.add('b');
    await runOk(['ip', '-n', a.name, 'link', 'add', 'tdlva', 'type', 'veth', 'peer', 'name', 'tdlvb', 'netns', b.name]);
    await runOk(['ip', '-n', a.name, 'addr', 'add', `${A_IP}/24`, 'dev', 'tdlva']);
    await runOk(['ip', '-n', b.name, 'addr', 'add', `${B_IP}/24`, 'dev', 'tdlvb']);
    await runOk(['ip', '-n', a.name, 'link', 'set', 'tdlva', 'up']);
    await runOk(['ip', '-n', b.name, 'link', 'set', 'tdlvb', 'up']);
    const links = JSON.parse(await runOk(['ip', '-n', b.name, '-j', 'link', 'show', 'tdlvb'])) as Array<{ ifindex: number }>;
    ifindex = links[0]!.ifindex;
    pinRoot = await makePinRoot('attach');
    obj = await BpfObject.load(KERNEL_TEST_OBJECT, { pinRoot });
    counts = obj.map('tdl_count', addressKey, counterCodec);
    variants = obj.map('tdl_variant', u32, u64);
    await ping(1); // ARP settles before counting starts
  });

  after(async () => {
    // Deleting the namespaces deletes the veth, which takes links and filters with it.
    for (const at of attachments) at.close();
    obj?.close();
    await pool.cleanup();
    if (pinRoot) await removePinDir(pinRoot);
  });

  it('attaches with a tcx link (this kernel has tcx) and counts the traffic', async () => {
    const pinPath = join(pinRoot, 'tdlvb_ingress');
    const at = await attach({ ifindex, direction: 'ingress', program: obj.program('tdl_count_v1'), netns: b.path, pinPath });
    attachments.push(at);
    assert.equal(at.mode, 'tcx');
    assert.equal(at.replacedExisting, false);
    assert.equal(tcxSupport(), true);
    assert.ok(existsSync(pinPath));

    const before1 = ranVariant(1);
    const beforeA = packetsFromA();
    await ping(3);
    assert.ok(packetsFromA() - beforeA >= 3n, `the program counted ${packetsFromA() - beforeA} packets from A`);
    assert.ok(ranVariant(1) - before1 >= 3n);

    const link = TcxLink.openPinned(pinPath);
    try {
      const info = link.info();
      assert.equal(info.ifindex, ifindex);
      assert.equal(info.direction, 'ingress');
      assert.equal(info.progId, obj.program('tdl_count_v1').id);
    } finally {
      link.close();
    }
  });

  it('replaces the program atomically through the pinned link, as a restarted agent does', async () => {
    const pinPath = join(pinRoot, 'tdlvb_ingress');
    // The agent "exits": its handles go, the pinned link keeps the program attached.
    const old = attachments.pop();
    old?.close();
    const before1 = ranVariant(1);
    await ping(2);
    assert.ok(ranVariant(1) - before1 >= 2n, 'v1 still runs while no agent holds the link');

    const at = await attach({ ifindex, direction: 'ingress', program: obj.program('tdl_count_v2'), netns: b.path, pinPath });
    attachments.push(at);
    assert.equal(at.mode, 'tcx');
    assert.equal(at.replacedExisting, true);
    const link = TcxLink.openPinned(pinPath);
    try {
      assert.equal(link.info().progId, obj.program('tdl_count_v2').id);
      // A stale expectation is refused: the link no longer runs v1.
      await expectKernelError(() => link.update(obj.program('tdl_count_v1'), { expected: obj.program('tdl_count_v1') }), 'EPERM', /^BPF_LINK_UPDATE link \d+ tdl_count_v1$/);
    } finally {
      link.close();
    }

    const v1 = ranVariant(1);
    const v2 = ranVariant(2);
    await ping(3);
    assert.equal(ranVariant(1), v1, 'v1 no longer runs');
    assert.ok(ranVariant(2) - v2 >= 3n, 'v2 runs in its place');
  });

  it('detaches: the pin goes and traffic is no longer seen', async () => {
    const at = attachments.pop();
    assert.ok(at);
    await at.detach();
    assert.equal(existsSync(join(pinRoot, 'tdlvb_ingress')), false);
    const seen = packetsFromA();
    await ping(2);
    assert.equal(packetsFromA(), seen);
  });

  it('reports a missing device as a KernelError naming the attach', async () => {
    await expectKernelError(
      () => attach({ ifindex: 999_999, direction: 'egress', program: obj.program('tdl_count_v1'), netns: b.path, mode: 'tcx' }),
      'ENODEV',
      /^BPF_LINK_CREATE tcx egress ifindex 999999 netns .* tdl_count_v1$/,
    );
  });

  it('falls back to clsact + a direct-action cls_bpf filter when forced, with the same traffic results', async () => {
    const at = await attach({ ifindex, direction: 'ingress', program: obj.program('tdl_count_v1'), netns: b.path, mode: 'clsact' });
    attachments.push(at);
    assert.equal(at.mode, 'clsact');
    assert.equal(at.replacedExisting, false);

    const nl = await Netlink.open({ netns: b.path });
    try {
      const filters = await nl.listBpfFilters(ifindex, 'ingress');
      assert.equal(filters.length, 1);
      assert.equal(filters[0]?.directAction, true);
      assert.equal(filters[0]?.programId, obj.program('tdl_count_v1').id);

      const beforeA = packetsFromA();
      const v1 = ranVariant(1);
      await ping(3);
      assert.ok(packetsFromA() - beforeA >= 3n);
      assert.ok(ranVariant(1) - v1 >= 3n);

      await at.replace(obj.program('tdl_count_v2'));
      assert.equal((await nl.listBpfFilters(ifindex, 'ingress'))[0]?.programId, obj.program('tdl_count_v2').id);
      const v1After = ranVariant(1);
      const v2 = ranVariant(2);
      await ping(3);
      assert.equal(ranVariant(1), v1After);
      assert.ok(ranVariant(2) - v2 >= 3n);

      // Attaching again at the same priority replaces the filter in place.
      const again = await attach({ ifindex, direction: 'ingress', program: obj.program('tdl_count_v1'), netns: b.path, mode: 'clsact' });
      assert.equal(again.replacedExisting, true);
      assert.equal((await nl.listBpfFilters(ifindex, 'ingress')).length, 1);

      await at.detach();
      attachments.pop();
      assert.deepEqual(await nl.listBpfFilters(ifindex, 'ingress'), []);
      const seen = packetsFromA();
      await ping(2);
      assert.equal(packetsFromA(), seen);
    } finally {
      await nl.close();
    }
  });
});
