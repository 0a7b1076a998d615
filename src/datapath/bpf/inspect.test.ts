// DatapathInspector and conntrack GC against real maps pinned in a bpffs
// directory of the test's own (no programs loaded: the pins alone).
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { pino } from 'pino';
import { Writable } from 'node:stream';
import { requireRoot } from '../../../test/support/root.js';
import { parseIp, parsePrefix } from '../../netip/index.js';
import { CtFlag, DropReason, EndpointFlag, TrafficDirection } from './constants.js';
import { ConntrackGc, collectConntrack } from './conntrackGc.js';
import { DatapathInspectError, DatapathInspector } from './inspect.js';
import { createTestDatapathMaps, type TestDatapathMaps } from './testing/inspectMaps.js';

requireRoot('the datapath inspection tests');

let maps: TestDatapathMaps;
let inspector: DatapathInspector;

before(async () => {
  maps = await createTestDatapathMaps();
  inspector = new DatapathInspector(maps.pinDir);
});
after(async () => {
  await maps?.remove();
});

const ct = (o: { expiresNs: bigint; src?: number; dst?: number; flags?: number }) => ({
  expiresNs: o.expiresNs,
  packets: 3n,
  bytes: 180n,
  srcIdentity: 1000,
  dstIdentity: 2000,
  srcEndpoint: o.src ?? 0,
  dstEndpoint: o.dst ?? 0,
  revNatIndex: 0,
  tcpFlags: 0x12,
  flags: o.flags ?? 0,
  backendId: 0,
      natAddr: parseIp('0.0.0.0'),
      natPort: 0,
});
const flow = (s: string, d: string, sport: number, dport: number, proto: number) => ({ saddr: parseIp(s), daddr: parseIp(d), sport, dport, proto, flags: 0 });

describe('DatapathInspector', () => {
  test('says the datapath is not loaded when nothing is pinned there', async () => {
    const missing = new DatapathInspector('/sys/fs/bpf/tdl-does-not-exist/tendril');
    assert.equal(missing.loaded(), false);
    await assert.rejects(missing.endpoints(), (err: unknown) => err instanceof DatapathInspectError && err.code === 'NOT_LOADED' && /not pinned/.test(err.message));
    assert.equal(inspector.loaded(), true);
  });

  test('endpoints: the local endpoint map decoded, sorted by endpoint ID', async () => {
    maps.endpoints.set(parseIp('10.200.0.12'), { ifindex: 41, identity: 30012, endpointId: 12, flags: 0, lxcMac: '02:00:00:00:00:0c', podMac: '0a:00:00:00:00:0c' });
    maps.endpoints.set(parseIp('10.200.0.1'), { ifindex: 7, identity: 1, endpointId: 0, flags: EndpointFlag.HOST, lxcMac: '02:00:00:00:00:01', podMac: '00:00:00:00:00:00' });
    const rows = await inspector.endpoints();
    assert.deepEqual(rows, [
      { ip: '10.200.0.1', endpointId: 0, identity: 1, ifindex: 7, lxcMac: '02:00:00:00:00:01', podMac: '00:00:00:00:00:00', flags: 1, host: true },
      { ip: '10.200.0.12', endpointId: 12, identity: 30012, ifindex: 41, lxcMac: '02:00:00:00:00:0c', podMac: '0a:00:00:00:00:0c', flags: 0, host: false },
    ]);
  });

  test('ipcache: prefixes with their identity and tunnel endpoint', async () => {
    maps.ipcache.set(parsePrefix('10.200.0.12/32'), { identity: 30012, tunnelIp4: 0, flags: 0 });
    maps.ipcache.set(parsePrefix('10.201.0.0/24'), { identity: 30500, tunnelIp4: 0xc0a80a02, flags: 0 });
    maps.ipcache.set(parsePrefix('0.0.0.0/0'), { identity: 2, tunnelIp4: 0, flags: 0 });
    maps.ipcache.set(parsePrefix('fd00:201::/64'), { identity: 30501, tunnelIp4: 0, tunnelIp6: parseIp('fd00:248::2'), flags: 0 });
    const rows = await inspector.ipcache();
    assert.deepEqual(rows, [
      { prefix: '0.0.0.0/0', identity: 2, flags: 0 },
      { prefix: '10.200.0.12/32', identity: 30012, flags: 0 },
      { prefix: '10.201.0.0/24', identity: 30500, tunnelEndpoint: '192.168.10.2', flags: 0 },
      { prefix: 'fd00:201::/64', identity: 30501, tunnelEndpoint: 'fd00:248::2', flags: 0 },
    ]);
  });

  test('policy: one endpoint\'s entries, port prefixes shown as ranges', async () => {
    maps.policy.set({ endpointId: 12, identity: 30500, egress: false, proto: 6, port: 80, portPrefixLen: 16 }, { cookie: 0xdeadbeef, deny: 0, l4PrefixBits: 24 });
    maps.policy.set({ endpointId: 12, identity: 0, egress: false, proto: 6, port: 8080, portPrefixLen: 13 }, { cookie: 0x1234567, deny: 0, l4PrefixBits: 21 });
    maps.policy.set({ endpointId: 12, identity: 2, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: 99, deny: 1, l4PrefixBits: 0 });
    maps.policy.set({ endpointId: 13, identity: 0, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: 1, deny: 0, l4PrefixBits: 0 });
    const rows = await inspector.policy(12);
    assert.deepEqual(
      rows.map((r) => [r.direction, r.identity, r.proto, r.portFirst, r.portLast, r.deny, r.cookie]),
      [
        ['egress', 2, 0, 0, 65535, true, 99],
        ['ingress', 0, 6, 8080, 8087, false, 0x1234567],
        ['ingress', 30500, 6, 80, 80, false, 0xdeadbeef],
      ],
    );
    assert.equal((await inspector.policy()).length, 4);
    assert.deepEqual(await inspector.policy(99), []);
  });

  test('metrics: per-CPU counters summed, reasons named', async () => {
    const cpus = maps.metrics.valueCodec as unknown as { cpus: number };
    const slots = (p: bigint, b: bigint) => Array.from({ length: cpus.cpus }, (_, i) => (i < 2 ? { packets: p, bytes: b } : { packets: 0n, bytes: 0n }));
    maps.metrics.set({ reason: 0, direction: TrafficDirection.EGRESS }, slots(10n, 1000n));
    maps.metrics.set({ reason: Math.abs(DropReason.POLICY.code), direction: TrafficDirection.INGRESS }, slots(2n, 120n));
    maps.metrics.set({ reason: 250, direction: TrafficDirection.NONE }, slots(1n, 60n));
    const rows = await inspector.metrics();
    const twoCpus = Math.min(2, cpus.cpus);
    assert.deepEqual(rows, [
      { reason: 0, reasonName: 'FORWARDED', direction: 'egress', packets: 10 * twoCpus, bytes: 1000 * twoCpus },
      { reason: 133, reasonName: 'POLICY', direction: 'ingress', packets: 2 * twoCpus, bytes: 120 * twoCpus },
      { reason: 250, reasonName: 'UNKNOWN_250', direction: 'none', packets: twoCpus, bytes: 60 * twoCpus },
    ]);
  });
});

describe('conntrack', () => {
  beforeEach(async () => {
    await inspector.flushConntrack();
  });

  test('list: both tables, filtered by endpoint, lifetimes relative to now', async () => {
    const now = process.hrtime.bigint();
    maps.ctTcp.set(flow('10.200.0.12', '10.200.0.13', 40000, 80, 6), ct({ expiresNs: now + 60_000_000_000n, src: 12, dst: 13, flags: CtFlag.REPLY_SEEN }));
    maps.ctAny.set(flow('10.200.0.14', '8.8.8.8', 5353, 53, 17), ct({ expiresNs: now + 30_000_000_000n, src: 14 }));
    const all = await inspector.conntrack({}, now);
    assert.equal(all.length, 2);
    const tcp = all.find((r) => r.table === 'tcp')!;
    assert.deepEqual(
      { ...tcp, expiresInSeconds: Math.round(tcp.expiresInSeconds) },
      { table: 'tcp', saddr: '10.200.0.12', daddr: '10.200.0.13', sport: 40000, dport: 80, proto: 6, expiresInSeconds: 60, packets: 3, bytes: 180, srcIdentity: 1000, dstIdentity: 2000, srcEndpoint: 12, dstEndpoint: 13, tcpFlags: 0x12, replySeen: true, closing: false, closed: false, charged: false },
    );
    assert.deepEqual((await inspector.conntrack({ endpoint: 13 })).map((r) => r.table), ['tcp']);
    assert.deepEqual((await inspector.conntrack({ endpoint: 14 })).map((r) => r.daddr), ['8.8.8.8']);
    assert.deepEqual(await inspector.conntrack({ endpoint: 99 }), []);
  });

  test('flush deletes every entry of both tables and says how many', async () => {
    const now = process.hrtime.bigint();
    for (let i = 0; i < 5; i++) maps.ctTcp.set(flow('10.200.0.12', '10.200.0.13', 41000 + i, 80, 6), ct({ expiresNs: now + 1_000_000_000n }));
    maps.ctAny.set(flow('10.200.0.12', '10.200.0.13', 7, 7, 1), ct({ expiresNs: now + 1_000_000_000n }));
    assert.deepEqual(await inspector.flushConntrack(), { tcp: 5, any: 1 });
    assert.deepEqual(await inspector.conntrack(), []);
  });

  test('GC removes the expired entries of both tables, keeps the live ones, and reports them', async () => {
    const now = process.hrtime.bigint();
    maps.ctTcp.set(flow('10.200.0.12', '10.200.0.13', 42000, 80, 6), ct({ expiresNs: now - 1n }));
    maps.ctTcp.set(flow('10.200.0.12', '10.200.0.13', 42001, 80, 6), ct({ expiresNs: now + 10_000_000_000n }));
    maps.ctAny.set(flow('10.200.0.12', '10.200.0.14', 53, 53, 17), ct({ expiresNs: now - 5_000_000_000n }));
    maps.ctAny.set(flow('10.200.0.12', '10.200.0.14', 54, 53, 17), ct({ expiresNs: now - 1_000_000_000n }));
    const r = await collectConntrack(inspector, { nowNs: now });
    assert.deepEqual(r.tcp, { scanned: 2, removed: 1 });
    assert.deepEqual(r.any, { scanned: 2, removed: 2 });
    assert.deepEqual(r.sample.map((f) => `${f.table} ${f.sport}`).sort(), ['any 53', 'any 54', 'tcp 42000']);
    const left = await inspector.conntrack({}, now);
    assert.deepEqual(left.map((f) => f.sport), [42001]);
    // A second pass has nothing left to do.
    const again = await collectConntrack(inspector, { nowNs: now });
    assert.equal(again.tcp.removed + again.any.removed, 0);
  });

  test('the interval GC runs passes on its own and logs what it removed; stop waits for it', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: 'debug' }, new Writable({ write: (c: Buffer, _e, cb) => (lines.push(JSON.parse(c.toString()) as Record<string, unknown>), cb()) }));
    maps.ctTcp.set(flow('10.200.0.12', '10.200.0.13', 43000, 80, 6), ct({ expiresNs: process.hrtime.bigint() - 1n }));
    const gc = new ConntrackGc({ inspector, log, intervalMs: 20 });
    gc.start();
    try {
      const deadline = Date.now() + 5000;
      while (!lines.some((l) => l.msg === 'conntrack GC removed expired flows')) {
        assert.ok(Date.now() < deadline, 'no GC pass logged a removal within 5 s');
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      await gc.stop();
    }
    const removal = lines.find((l) => l.msg === 'conntrack GC removed expired flows')!;
    assert.deepEqual(removal.tcp, { scanned: 1, removed: 1 });
    assert.deepEqual(removal.sample, ['tcp 10.200.0.12:43000 -> 10.200.0.13:80 proto 6']);
    assert.deepEqual(await inspector.conntrack(), []);
  });

  test('a GC pass over maps that are not pinned is logged, not thrown', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = pino({ level: 'debug' }, new Writable({ write: (c: Buffer, _e, cb) => (lines.push(JSON.parse(c.toString()) as Record<string, unknown>), cb()) }));
    const gc = new ConntrackGc({ inspector: new DatapathInspector('/sys/fs/bpf/tdl-none/tendril'), log });
    assert.equal(await gc.runOnce(), undefined);
    assert.ok(lines.some((l) => l.msg === 'conntrack GC pass failed'));
  });
});
