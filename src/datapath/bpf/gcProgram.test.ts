// The GC program (bpf/bpf_gc.c) on real pinned maps: a charged entry it
// removes goes back to its endpoint's budget; a full table reports a fill of
// 1 and the interval GC logs the crossing of 90% once, and the way back; the
// interval shortens as tables fill; and a pass over a big table runs in the
// kernel on libuv's pool while the event loop keeps turning.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { requireRoot } from '../../../test/support/root.js';
import type { Logger } from '../../logging/logger.js';
import { parseIp } from '../../netip/index.js';
import { codec, ensureBpffs, removePinDir } from '../kernel/bpf/index.js';
import { collectConntrack, ConntrackGc, DEFAULT_CT_GC_INTERVAL_MS, MIN_CT_GC_INTERVAL_MS, nextGcIntervalMs } from './conntrackGc.js';
import { CtFlag, MapName } from './constants.js';
import { DatapathInspector } from './inspect.js';
import { ct4Key, ct6Key, ctBudget, ctEntry, type CtEntryValue } from './layout.js';
import { type DatapathObjects, loadDatapathObjects } from './objects.js';
import { ctEntryOf } from './testing/fixtures.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the GC program tests');

const TABLE = 64;
const BIG = 200_000;

const entry = (expiresNs: bigint, over: Partial<CtEntryValue> = {}): CtEntryValue => ctEntryOf({ expiresNs, srcEndpoint: 11, flags: 0, ...over });
const key = (i: number) => ({ saddr: parseIp('10.200.0.10'), daddr: parseIp(`192.0.${(i >> 16) & 0xff}.${(i >> 8) & 0xff}`), sport: 1024 + (i & 0xff), dport: 80, proto: 6, flags: 0 });

function capture(): { log: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const log: Logger = pino({ level: 'debug' }, new Writable({ write: (c: Buffer, _e, cb) => (lines.push(JSON.parse(c.toString()) as Record<string, unknown>), cb()) }));
  return { log, lines };
}

describe('the GC program', { timeout: 120_000 }, () => {
  const roots: string[] = [];
  const opened: DatapathObjects[] = [];
  async function load(ctTcp: number): Promise<{ objects: DatapathObjects; inspector: DatapathInspector }> {
    await ensureBpffs();
    const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    roots.push(root);
    const objects = await loadDatapathObjects({ pinDir: join(root, 'tendril'), mapSizes: { ...TEST_MAP_SIZES, [MapName.CT_TCP]: ctTcp } });
    opened.push(objects);
    return { objects, inspector: new DatapathInspector(join(root, 'tendril')) };
  }
  before(async () => {
    await ensureBpffs();
  });
  after(async () => {
    for (const o of opened) o.close();
    for (const r of roots) await removePinDir(r);
  });

  it('gives a removed charged entry back to its endpoint\'s budget, and leaves live ones charged', async () => {
    const { objects, inspector } = await load(TABLE);
    const ct = objects.lxc.map(MapName.CT_TCP, ct4Key, ctEntry);
    const budget = objects.lxc.map(MapName.CT_BUDGET, codec.u32, ctBudget);
    const now = process.hrtime.bigint();
    ct.set(key(1), entry(now - 1n, { flags: CtFlag.CHARGED }));
    ct.set(key(2), entry(now - 1n, { flags: CtFlag.CHARGED, srcEndpoint: 0, dstEndpoint: 12 }));
    ct.set(key(3), entry(now + 60_000_000_000n, { flags: CtFlag.CHARGED }));
    ct.set(key(4), entry(now - 1n));
    budget.set(11, { entries: 2 });
    budget.set(12, { entries: 1 });
    const r = await collectConntrack(inspector, { nowNs: now });
    assert.deepEqual(r.tcp, { scanned: 4, removed: 3 });
    assert.equal(budget.get(11)?.entries, 1, 'endpoint 11 keeps the live entry\'s charge');
    assert.equal(budget.get(12)?.entries, 0, 'a flow opened to endpoint 12 is charged to it');
  });

  it('walks the IPv6 tables too: expired entries go (with their charge and a sample), live ones stay and are listed by the inspector', async () => {
    const { objects, inspector } = await load(TABLE);
    const ct6Tcp = objects.lxc.map(MapName.CT6_TCP, ct6Key, ctEntry);
    const ct6Any = objects.lxc.map(MapName.CT6_ANY, ct6Key, ctEntry);
    const budget = objects.lxc.map(MapName.CT_BUDGET, codec.u32, ctBudget);
    const now = process.hrtime.bigint();
    const key6 = (i: number, proto: number) => ({ saddr: parseIp('fd00:10::a'), daddr: parseIp(`2001:db8::${i}`), sport: 1024 + i, dport: 443, proto, flags: 0 });
    ct6Tcp.set(key6(1, 6), entry(now - 1n, { flags: CtFlag.CHARGED }));
    ct6Tcp.set(key6(2, 6), entry(now + 60_000_000_000n));
    ct6Any.set(key6(3, 17), entry(now - 1n));
    budget.set(11, { entries: 1 });
    const listed = await inspector.conntrack({}, now);
    assert.deepEqual(listed.map((r) => [r.table, r.saddr, r.daddr, r.sport]).sort(), [
      ['any', 'fd00:10::a', '2001:db8::3', 1027],
      ['tcp', 'fd00:10::a', '2001:db8::1', 1025],
      ['tcp', 'fd00:10::a', '2001:db8::2', 1026],
    ]);
    const r = await collectConntrack(inspector, { nowNs: now });
    assert.deepEqual(r.tcp, { scanned: 2, removed: 1 });
    assert.deepEqual(r.any, { scanned: 1, removed: 1 });
    assert.deepEqual(r.sample.map((f) => `${f.table} ${f.daddr}:${f.dport}`).sort(), ['any 2001:db8::3:443', 'tcp 2001:db8::1:443']);
    assert.equal(budget.get(11)?.entries, 0, 'the charged IPv6 entry gave its count back');
    assert.ok(ct6Tcp.get(key6(2, 6)), 'the live entry stays');
    assert.ok(r.fill.some((f) => f.map === MapName.CT6_TCP && f.entries === 1));
    assert.deepEqual(await inspector.flushConntrack(), { tcp: 1, any: 0 });
  });

  it('a full table reports a fill of 1; the interval GC logs the crossing of 90% once, and the way back under', async () => {
    const { objects, inspector } = await load(TABLE);
    const ct = objects.lxc.map(MapName.CT_TCP, ct4Key, ctEntry);
    const far = process.hrtime.bigint() + 3600_000_000_000n;
    for (let i = 0; i < TABLE; i++) ct.set(key(i), entry(far));
    assert.throws(() => ct.set(key(TABLE), entry(far)), 'a plain hash refuses the entry past its size');
    const { log, lines } = capture();
    const gc = new ConntrackGc({ inspector, log });
    const first = await gc.runOnce();
    assert.deepEqual(first?.fill.find((f) => f.map === MapName.CT_TCP), { map: MapName.CT_TCP, entries: TABLE, maxEntries: TABLE });
    await gc.runOnce();
    const warned = lines.filter((l) => String(l.msg).startsWith('map over 90% full') && l.map === MapName.CT_TCP);
    assert.equal(warned.length, 1, 'logged once, not on every pass');
    for (let i = 0; i < TABLE / 2; i++) ct.set(key(i), entry(1n));
    await gc.runOnce();
    assert.ok(lines.some((l) => l.msg === 'map back under 90% full' && l.map === MapName.CT_TCP));
  });

  it('the interval shortens as tables fill', () => {
    const f = (entries: number) => [{ map: MapName.CT_TCP, entries, maxEntries: 100 }];
    assert.equal(nextGcIntervalMs(DEFAULT_CT_GC_INTERVAL_MS, f(10)), DEFAULT_CT_GC_INTERVAL_MS);
    assert.equal(nextGcIntervalMs(DEFAULT_CT_GC_INTERVAL_MS, f(30)), DEFAULT_CT_GC_INTERVAL_MS / 4);
    assert.equal(nextGcIntervalMs(DEFAULT_CT_GC_INTERVAL_MS, f(60)), MIN_CT_GC_INTERVAL_MS);
    assert.equal(nextGcIntervalMs(500, f(60)), 500, 'never longer than asked');
  });

  it(`a pass over ${BIG} entries runs off the event loop: timers keep firing`, async () => {
    const { objects, inspector } = await load(BIG);
    const ct = objects.lxc.map(MapName.CT_TCP, ct4Key, ctEntry);
    const now = process.hrtime.bigint();
    const entries: Array<[ReturnType<typeof key>, CtEntryValue]> = [];
    for (let i = 0; i < BIG; i++) entries.push([key(i), entry(i % 2 === 0 ? now - 1n : now + 3600_000_000_000n)]);
    await ct.setMany(entries);
    let maxGap = 0;
    let last = performance.now();
    const ticker = setInterval(() => {
      const t = performance.now();
      maxGap = Math.max(maxGap, t - last);
      last = t;
    }, 5);
    try {
      const r = await collectConntrack(inspector, { nowNs: now });
      assert.deepEqual(r.tcp, { scanned: BIG, removed: BIG / 2 });
    } finally {
      clearInterval(ticker);
    }
    // The pass's own work is in the kernel; what the loop sees is the load and a few map writes.
    assert.ok(maxGap < 200, `the event loop stalled ${maxGap.toFixed(0)} ms during the pass`);
  });
});
