import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { requireRoot } from '../../../../test/support/root.js';
import { formatPrefix, hostPrefix, parseIp, parsePrefix, type IpPrefix } from '../../../netip/index.js';
import { removePinDir } from './bpffs.js';
import { lpmPrefix, u32 } from './codec.js';
import { MapFlag, TcAction } from './constants.js';
import { BpfMap } from './map.js';
import { BpfObject } from './object.js';
import { CLASS_DENY, KERNEL_TEST_OBJECT, makePinRoot, prefixKeyCodec } from './testing/kernelTest.js';
import { ipv4Packet } from './testing/packets.js';

requireRoot('the LPM prefix key tests');

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

describe('src/netip prefixes as LPM trie keys in the kernel', () => {
  let pinRoot: string;
  const open: Array<{ close(): void }> = [];

  before(async () => {
    pinRoot = await makePinRoot('lpmprefix');
  });

  after(async () => {
    for (const o of open) o.close();
    if (pinRoot) await removePinDir(pinRoot);
  });

  it('a prefix in the test object\'s tdl_lpm matches addresses inside it, for user space and for the program', async () => {
    const obj = await BpfObject.load(KERNEL_TEST_OBJECT, { pinRoot });
    open.push(obj);
    const lpm = obj.map('tdl_lpm', prefixKeyCodec, u32);
    const denied = parsePrefix('10.77.0.0/16');
    lpm.set(denied, CLASS_DENY);

    // BPF_MAP_LOOKUP_ELEM with an address's host key: the kernel's longest-prefix match.
    const classOf = (ip: string) => lpm.get(hostPrefix(parseIp(ip)));
    for (const inside of ['10.77.0.0', '10.77.3.4', '10.77.255.255']) assert.equal(classOf(inside), CLASS_DENY, inside);
    for (const outside of ['10.76.255.255', '10.78.0.0', '11.77.3.4', '0.0.0.0']) assert.equal(classOf(outside), undefined, outside);

    // The program builds its own /32 key from the packet's destination (struct tdl_lpm_key in the C).
    const prog = obj.program('tdl_count_v1');
    const verdict = async (dst: string) => (await prog.testRun({ data: ipv4Packet({ src: '10.99.0.1', dst }) })).retval;
    assert.equal(await verdict('10.77.3.4'), TcAction.SHOT);
    assert.equal(await verdict('10.77.255.255'), TcAction.SHOT);
    assert.equal(await verdict('10.78.3.4'), TcAction.OK);
    assert.equal(await verdict('10.76.255.255'), TcAction.OK);

    // The kernel hands the key back as it was written: netip reads the same prefix.
    assert.deepEqual((await collect(lpm.keys())).map(formatPrefix), ['10.77.0.0/16']);
    assert.equal(lpm.delete(denied), true);
    assert.equal(await verdict('10.77.3.4'), TcAction.OK);
  });

  it('IPv6 prefixes nest: the longest one holding the address answers, none for an address outside all', async () => {
    const key = lpmPrefix(6);
    const m = await BpfMap.create({ name: 'tdl_t_lpm6', type: 'LPM_TRIE', maxEntries: 8, flags: MapFlag.NO_PREALLOC }, key, u32);
    open.push(m);
    assert.equal(m.info.keySize, 20);
    const entries: Array<[IpPrefix, number]> = [
      [parsePrefix('fd00::/8'), 8],
      [parsePrefix('fd00:77::/32'), 32],
      [parsePrefix('fd00:77:0:1::/64'), 64],
      [parsePrefix('fd00:77:0:1::5/128'), 128],
    ];
    assert.equal((await m.setMany(entries)).count, entries.length);
    const lookup = (ip: string) => m.get(hostPrefix(parseIp(ip)));
    assert.equal(lookup('fd00:77:0:1::5'), 128);
    assert.equal(lookup('fd00:77:0:1::6'), 64);
    assert.equal(lookup('fd00:77:0:1:ffff:ffff:ffff:ffff'), 64);
    assert.equal(lookup('fd00:77:0:2::1'), 32);
    assert.equal(lookup('fd00:78::1'), 8);
    assert.equal(lookup('fdff:ffff::1'), 8);
    assert.equal(lookup('fe00::1'), undefined);
    assert.equal(lookup('fc00::1'), undefined);
    // A lookup key shorter than an entry does not reach into it.
    assert.equal(m.get(parsePrefix('fd00::/16')), 8);
    const back = (await collect(m.keys())).map(formatPrefix).sort();
    assert.deepEqual(back, entries.map(([p]) => formatPrefix(p)).sort());
  });
});
