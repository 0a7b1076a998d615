// The ipcache mirror over the real pinned tendril_ipcache (the objects loaded
// under a temp bpffs root, the map two entries small): a write the full map
// refuses is counted in the Prometheus metric and retried until it lands,
// with the prefix's newest value.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { IPCache, IpcacheSource } from '../../ipcache/index.js';
import { createLogger } from '../../logging/logger.js';
import { AgentMetrics } from '../../metrics/index.js';
import { sampleValue } from '../../metrics/testing/exposition.js';
import { formatPrefix, parseIp, parsePrefix } from '../../netip/index.js';
import { BpfMap, ensureBpffs, removePinDir } from '../kernel/bpf/index.js';
import { MapName } from './constants.js';
import { IpcacheMapMirror } from './ipcacheMap.js';
import { ipcacheKey, ipcacheValue } from './layout.js';
import { type DatapathObjects, loadDatapathObjects } from './objects.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the ipcache map mirror tests');

const log = createLogger('ipcache-map-test', 'fatal');
const roots: string[] = [];
const opened: DatapathObjects[] = [];
after(async () => {
  for (const o of opened.reverse()) o.close();
  for (const r of roots) await removePinDir(r);
});

async function fullMirror(o: { size?: number; ownNodeIp?: string } = {}): Promise<{ mirror: IpcacheMapMirror; ipcache: IPCache; map: BpfMap<ReturnType<typeof parsePrefix>, ReturnType<typeof ipcacheValue.read>>; metrics: AgentMetrics }> {
  await ensureBpffs();
  const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
  roots.push(root);
  const objects = await loadDatapathObjects({ pinDir: join(root, 'tendril'), mapSizes: { ...TEST_MAP_SIZES, [MapName.IPCACHE]: o.size ?? 2 } });
  opened.push(objects);
  const map = new BpfMap(objects.lxc.rawMap(MapName.IPCACHE), ipcacheKey, ipcacheValue);
  const mirror = new IpcacheMapMirror(map, log, o.ownNodeIp, { initialMs: 10, maxMs: 40 });
  const ipcache = new IPCache();
  mirror.start(ipcache);
  const metrics = new AgentMetrics();
  metrics.bind({
    endpointStates: () => [],
    identities: () => ({ reserved: 0, allocated: 0 }),
    ipamAllocations: async () => [],
    ipamPodCidrs: () => [],
    policyRevision: () => 0,
    deletionQueueDepth: async () => 0,
    ipcacheMapWrites: () => mirror.writeStats(),
  });
  return { mirror, ipcache, map, metrics };
}

const meta = (owner: string) => ({ source: IpcacheSource.Local, owner });
const pinned = async (map: BpfMap<ReturnType<typeof parsePrefix>, ReturnType<typeof ipcacheValue.read>>) => {
  const out = new Map<string, number>();
  for await (const [k, v] of map.entries()) out.set(formatPrefix(k), v.identity);
  return out;
};

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) assert.fail(`timed out waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('ipcache map mirror', () => {
  it('a write the full map refused is counted and lands once there is room, with the newest identity', async () => {
    const { mirror, ipcache, map, metrics } = await fullMirror();
    try {
      ipcache.upsert('10.21.0.1/32', { ...meta('a'), identity: 1001 });
      ipcache.upsert('10.21.0.2/32', { ...meta('b'), identity: 1002 });
      ipcache.upsert('10.21.0.3/32', { ...meta('c'), identity: 1003 });
      let text = await metrics.render();
      assert.equal(sampleValue(text, 'tendril_ipcache_map_write_failures_total'), 1);
      assert.equal(sampleValue(text, 'tendril_ipcache_map_writes_pending'), 1);
      // Still full: retries fail, and are not counted again.
      await new Promise((r) => setTimeout(r, 100));
      assert.equal((await pinned(map)).has('10.21.0.3/32'), false);
      assert.deepEqual(mirror.writeStats(), { failed: 1, pending: 1 });
      // The address changes hands while it waits: the retry writes the newest identity.
      ipcache.upsert('10.21.0.3/32', { ...meta('c2'), identity: 1033 });
      assert.deepEqual(mirror.writeStats(), { failed: 2, pending: 1 });
      ipcache.delete('10.21.0.1/32', meta('a'));
      await until('the refused write lands', async () => (await pinned(map)).get('10.21.0.3/32') === 1033);
      assert.deepEqual(await pinned(map), new Map([['10.21.0.2/32', 1002], ['10.21.0.3/32', 1033]]));
      text = await metrics.render();
      assert.equal(sampleValue(text, 'tendril_ipcache_map_write_failures_total'), 2);
      assert.equal(sampleValue(text, 'tendril_ipcache_map_writes_pending'), 0);
    } finally {
      mirror.stop();
    }
  });

  it('an entry\'s tunnel endpoint is its hosting node\'s address in the member of that address\'s family; none for this node\'s own', async () => {
    const { mirror, ipcache, map } = await fullMirror({ size: 16, ownNodeIp: 'fd00:248::11' });
    try {
      // A pod of an IPv6-only node (its node IP is IPv6) is reached over IPv6, whatever the pod's family.
      ipcache.upsert('10.21.0.1/32', { ...meta('a'), identity: 1001, hostIP: 'fd00:248::12' });
      ipcache.upsert('fd00:21::1/128', { ...meta('b'), identity: 1001, hostIP: 'fd00:248::12' });
      // A node on an IPv4 underlay, as before.
      ipcache.upsert('fd00:21::2/128', { ...meta('c'), identity: 1002, hostIP: '10.248.0.13' });
      // This node's own (IPv6) node IP: no endpoint.
      ipcache.upsert('fd00:21::3/128', { ...meta('d'), identity: 1003, hostIP: 'fd00:248::11' });
      const got = async (p: string) => map.get(parsePrefix(p));
      assert.deepEqual(await got('10.21.0.1/32'), { identity: 1001, tunnelIp4: 0, tunnelIp6: parseIp('fd00:248::12'), flags: 0 });
      assert.deepEqual(await got('fd00:21::1/128'), { identity: 1001, tunnelIp4: 0, tunnelIp6: parseIp('fd00:248::12'), flags: 0 });
      assert.deepEqual(await got('fd00:21::2/128'), { identity: 1002, tunnelIp4: Number(parseIp('10.248.0.13').bits), flags: 0 });
      assert.deepEqual(await got('fd00:21::3/128'), { identity: 1003, tunnelIp4: 0, flags: 0 });
    } finally {
      mirror.stop();
    }
  });

  it('a delete after a refused write is not undone by the retry', async () => {
    const { mirror, ipcache, map } = await fullMirror();
    try {
      ipcache.upsert('10.22.0.1/32', { ...meta('a'), identity: 2001 });
      ipcache.upsert('10.22.0.2/32', { ...meta('b'), identity: 2002 });
      ipcache.upsert('10.22.0.3/32', { ...meta('c'), identity: 2003 });
      assert.deepEqual(mirror.writeStats(), { failed: 1, pending: 1 });
      // The pod that got .3 is gone before its write landed; then room appears.
      ipcache.delete('10.22.0.3/32', meta('c'));
      ipcache.delete('10.22.0.1/32', meta('a'));
      assert.deepEqual(mirror.writeStats(), { failed: 1, pending: 0 });
      await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(await pinned(map), new Map([['10.22.0.2/32', 2002]]));
    } finally {
      mirror.stop();
    }
  });
});
