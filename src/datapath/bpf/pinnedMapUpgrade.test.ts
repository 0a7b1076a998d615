/**
 * An agent of this release starting on the pins of the previous one: the
 * conntrack and SNAT maps were LRU hashes, and libbpf would refuse them.
 * They are carried over to plain hashes with every entry, and the objects
 * load on them.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { createLogger } from '../../logging/logger.js';
import { parseIp } from '../../netip/index.js';
import { ensureBpffs, removePinDir } from '../kernel/bpf/bpffs.js';
import { BpfMap, RawMap } from '../kernel/bpf/index.js';
import { MapName, NatDirection } from './constants.js';
import { ct4Key, ctEntry, nat4Entry, nat4Key } from './layout.js';
import { loadDatapathObjects } from './objects.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the pinned map upgrade tests');

const BPF_MAP_TYPE_HASH = 1;
const BPF_MAP_TYPE_LRU_HASH = 9;
const roots: string[] = [];
after(async () => {
  for (const r of roots) await removePinDir(r);
});

describe('pinned maps of the previous release', () => {
  it('conntrack and SNAT pinned as LRU hashes are carried over to plain hashes, entries and all; the objects load on them', async () => {
    await ensureBpffs();
    const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    roots.push(root);
    const pinDir = join(root, 'tendril');
    await mkdir(pinDir, { recursive: true });
    const size = TEST_MAP_SIZES[MapName.CT_TCP]!;
    const ct = await BpfMap.create({ type: BPF_MAP_TYPE_LRU_HASH, name: MapName.CT_TCP, maxEntries: size }, ct4Key, ctEntry);
    const flows = 300;
    for (let i = 0; i < flows; i++) {
      ct.set(
        { saddr: parseIp('10.200.0.10'), daddr: parseIp('192.0.2.1'), sport: 10000 + i, dport: 80, proto: 6, flags: 0 },
        { expiresNs: 123n + BigInt(i), packets: 1n, bytes: 60n, srcIdentity: 1000, dstIdentity: 2, srcEndpoint: 11, dstEndpoint: 0, revNatIndex: 0, tcpFlags: 2, flags: 0, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 },
      );
    }
    ct.pin(join(pinDir, MapName.CT_TCP));
    ct.close();
    const snat = await BpfMap.create({ type: BPF_MAP_TYPE_LRU_HASH, name: MapName.SNAT, maxEntries: TEST_MAP_SIZES[MapName.SNAT]! }, nat4Key, nat4Entry);
    const key = { saddr: parseIp('10.200.0.10'), daddr: parseIp('192.0.2.1'), sport: 10000, dport: 80, proto: 6, dir: NatDirection.EGRESS };
    snat.set(key, { createdNs: 5n, toAddr: parseIp('192.168.1.2'), toPort: 61001, flags: 1 });
    snat.pin(join(pinDir, MapName.SNAT));
    snat.close();

    const objects = await loadDatapathObjects({ pinDir, mapSizes: TEST_MAP_SIZES, log: createLogger('upgrade-test', 'warn') });
    try {
      for (const name of [MapName.CT_TCP, MapName.SNAT]) {
        const m = RawMap.openPinned(join(pinDir, name));
        try {
          assert.equal(m.info.type, BPF_MAP_TYPE_HASH, `${name} is a plain hash now`);
        } finally {
          m.close();
        }
      }
      const ctNow = objects.lxc.map(MapName.CT_TCP, ct4Key, ctEntry);
      let n = 0;
      for await (const [k, v] of ctNow.entries()) {
        n++;
        assert.equal(v.expiresNs, 123n + BigInt(k.sport - 10000));
      }
      assert.equal(n, flows);
      assert.deepEqual(objects.netdev.map(MapName.SNAT, nat4Key, nat4Entry).get(key), { createdNs: 5n, toAddr: parseIp('192.168.1.2'), toPort: 61001, flags: 1 });
    } finally {
      objects.close();
    }
  });
});
