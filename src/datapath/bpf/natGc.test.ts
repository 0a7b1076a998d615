// SNAT GC against real pinned maps (the objects loaded under a temp bpffs
// root): a mapping goes with its flow's conntrack entry, both sides at once.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { createLogger } from '../../logging/logger.js';
import { parseIp } from '../../netip/index.js';
import { BpfMap, ensureBpffs, removePinDir } from '../kernel/bpf/index.js';
import { ConntrackGc } from './conntrackGc.js';
import { MapName, NatDirection, NatFlag } from './constants.js';
import { DatapathInspector } from './inspect.js';
import { type Ct4Key, ct4Key, type Ct6Key, ct6Key, ctEntry, type CtEntryValue, nat4Entry, type Nat4Key, nat4Key, nat6Entry, type Nat6Key, nat6Key } from './layout.js';
import { collectNat } from './natGc.js';
import { type DatapathObjects, loadDatapathObjects, type MapSizes } from './objects.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

requireRoot('the SNAT GC tests');

const SIZES: MapSizes = TEST_MAP_SIZES;

const NOW = 1_000_000_000_000n;
const OLD = NOW - 60_000_000_000n;
const NODE = '192.0.2.1';
const POD = '10.216.0.5';
const NODE6 = 'fd00:77::1';
const POD6 = 'fd10::5';

describe('SNAT GC', { timeout: 60_000 }, () => {
  let root: string;
  let objects: DatapathObjects;
  let snat: BpfMap<Nat4Key, ReturnType<typeof nat4Entry.read>>;
  let ctTcp: BpfMap<Ct4Key, CtEntryValue>;
  let ctAny: BpfMap<Ct4Key, CtEntryValue>;
  let snat6: BpfMap<Nat6Key, ReturnType<typeof nat6Entry.read>>;
  let ct6Tcp: BpfMap<Ct6Key, CtEntryValue>;
  let ct6Any: BpfMap<Ct6Key, CtEntryValue>;
  let inspector: DatapathInspector;

  before(async () => {
    await ensureBpffs();
    root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    objects = await loadDatapathObjects({ pinDir: join(root, 'tendril'), mapSizes: SIZES });
    snat = objects.netdev.map(MapName.SNAT, nat4Key, nat4Entry);
    ctTcp = objects.netdev.map(MapName.CT_TCP, ct4Key, ctEntry);
    ctAny = objects.netdev.map(MapName.CT_ANY, ct4Key, ctEntry);
    snat6 = objects.netdev.map(MapName.SNAT6, nat6Key, nat6Entry);
    ct6Tcp = objects.netdev.map(MapName.CT6_TCP, ct6Key, ctEntry);
    ct6Any = objects.netdev.map(MapName.CT6_ANY, ct6Key, ctEntry);
    inspector = new DatapathInspector(join(root, 'tendril'));
  });
  after(async () => {
    objects?.close();
    if (root) await removePinDir(root);
  });

  /** Both sides of a mapping of (POD:sport → remote:dport) to NODE:natPort. */
  function mapping(proto: number, sport: number, remote: string, dport: number, natPort: number, createdNs = OLD) {
    const egress: Nat4Key = { saddr: parseIp(POD), daddr: parseIp(remote), sport, dport, proto, dir: NatDirection.EGRESS };
    // ICMP echo (dport 0): the request carries the identifier as sport, the reply as dport.
    const ingress: Nat4Key = { saddr: parseIp(remote), daddr: parseIp(NODE), sport: dport, dport: natPort, proto, dir: NatDirection.INGRESS };
    snat.set(egress, { createdNs, toAddr: parseIp(NODE), toPort: natPort, flags: NatFlag.MASQUERADE });
    snat.set(ingress, { createdNs, toAddr: parseIp(POD), toPort: sport, flags: NatFlag.MASQUERADE });
    const flow: Ct4Key = { saddr: parseIp(POD), daddr: parseIp(remote), sport, dport, proto, flags: 0 };
    return { egress, ingress, flow };
  }
  const ct = (expiresNs: bigint): CtEntryValue => ({
    expiresNs,
    packets: 1n,
    bytes: 1n,
    srcIdentity: 1,
    dstIdentity: 2,
    srcEndpoint: 1,
    dstEndpoint: 0,
    revNatIndex: 0,
    tcpFlags: 0,
    flags: 0,
    backendId: 0,
    natAddr: parseIp('0.0.0.0'),
    natPort: 0,
  });

  it('keeps mappings of live flows; removes both sides of those whose flow is gone or expired (TCP, UDP, ICMP echo)', async () => {
    const live = mapping(6, 40000, '198.51.100.1', 443, 61000);
    ctTcp.set(live.flow, ct(NOW + 1_000_000_000n));
    const gone = mapping(6, 40001, '198.51.100.1', 443, 61001);
    const expired = mapping(17, 40002, '198.51.100.2', 53, 61002);
    ctAny.set(expired.flow, ct(NOW - 1n));
    const echo = mapping(1, 7, '198.51.100.3', 0, 61003);
    const r = await collectNat(inspector, { nowNs: NOW });
    assert.deepEqual(r, { scanned: 8, removed: 3, orphans: 0 });
    assert.ok(snat.get(live.egress));
    assert.ok(snat.get(live.ingress));
    for (const m of [gone, expired, echo]) {
      assert.equal(snat.get(m.egress), undefined);
      assert.equal(snat.get(m.ingress), undefined);
    }
    snat.delete(live.egress);
    snat.delete(live.ingress);
    ctTcp.delete(live.flow);
    ctAny.delete(expired.flow);
  });

  it('matches each side to its own partner when a NAT port serves two remote ports', async () => {
    const a = mapping(6, 40010, '198.51.100.9', 80, 61010);
    const b = mapping(6, 40010, '198.51.100.9', 81, 61010);
    ctTcp.set(b.flow, ct(NOW + 1_000_000_000n));
    const r = await collectNat(inspector, { nowNs: NOW });
    assert.equal(r.removed, 1);
    assert.equal(snat.get(a.egress), undefined);
    assert.equal(snat.get(a.ingress), undefined);
    assert.ok(snat.get(b.egress));
    assert.ok(snat.get(b.ingress));
    snat.delete(b.egress);
    snat.delete(b.ingress);
    ctTcp.delete(b.flow);
  });

  it('leaves young mappings alone (a flow being opened); removes an old reply side without its egress side', async () => {
    const young = mapping(17, 40020, '198.51.100.4', 53, 61020, NOW - 1_000_000_000n);
    const orphan = mapping(17, 40021, '198.51.100.4', 53, 61021);
    snat.delete(orphan.egress);
    const youngOrphan = mapping(17, 40022, '198.51.100.4', 53, 61022, NOW - 1_000_000_000n);
    snat.delete(youngOrphan.egress);
    const r = await collectNat(inspector, { nowNs: NOW });
    assert.deepEqual(r, { scanned: 4, removed: 0, orphans: 1 });
    assert.ok(snat.get(young.egress));
    assert.equal(snat.get(orphan.ingress), undefined);
    assert.ok(snat.get(youngOrphan.ingress));
    for (const k of [young.egress, young.ingress, youngOrphan.ingress]) snat.delete(k);
  });

  /** mapping() for tendril_snat6: (POD6:sport → remote:dport) to NODE6:natPort. */
  function mapping6(proto: number, sport: number, remote: string, dport: number, natPort: number, createdNs = OLD) {
    const egress: Nat6Key = { saddr: parseIp(POD6), daddr: parseIp(remote), sport, dport, proto, dir: NatDirection.EGRESS };
    const ingress: Nat6Key = { saddr: parseIp(remote), daddr: parseIp(NODE6), sport: dport, dport: natPort, proto, dir: NatDirection.INGRESS };
    snat6.set(egress, { createdNs, toAddr: parseIp(NODE6), toPort: natPort, flags: NatFlag.MASQUERADE });
    snat6.set(ingress, { createdNs, toAddr: parseIp(POD6), toPort: sport, flags: NatFlag.MASQUERADE });
    const flow: Ct6Key = { saddr: parseIp(POD6), daddr: parseIp(remote), sport, dport, proto, flags: 0 };
    return { egress, ingress, flow };
  }

  it('IPv6 (tendril_snat6): keeps live flows\' mappings, removes those whose flow is gone or expired, and old orphaned reply sides', async () => {
    const live = mapping6(6, 40000, '2001:db8::1', 443, 61000);
    ct6Tcp.set(live.flow, ct(NOW + 1_000_000_000n));
    const gone = mapping6(6, 40001, '2001:db8::1', 443, 61001);
    const expired = mapping6(17, 40002, '2001:db8::2', 53, 61002);
    ct6Any.set(expired.flow, ct(NOW - 1n));
    const echo = mapping6(58, 7, '2001:db8::3', 0, 61003);
    const young = mapping6(17, 40020, '2001:db8::4', 53, 61020, NOW - 1_000_000_000n);
    const orphan = mapping6(17, 40021, '2001:db8::4', 53, 61021);
    snat6.delete(orphan.egress);
    const r = await collectNat(inspector, { nowNs: NOW });
    assert.deepEqual(r, { scanned: 11, removed: 3, orphans: 1 });
    for (const k of [live.egress, live.ingress, young.egress, young.ingress]) assert.ok(snat6.get(k));
    for (const m of [gone, expired, echo]) {
      assert.equal(snat6.get(m.egress), undefined);
      assert.equal(snat6.get(m.ingress), undefined);
    }
    assert.equal(snat6.get(orphan.ingress), undefined);
    for (const k of [live.egress, live.ingress, young.egress, young.ingress]) snat6.delete(k);
    ct6Tcp.delete(live.flow);
    ct6Any.delete(expired.flow);
  });

  it('runs from the conntrack GC loop: a flow that expired takes its mapping along in the same pass', async () => {
    const now = process.hrtime.bigint();
    const m = mapping(6, 40030, '198.51.100.5', 443, 61030, now - 60_000_000_000n);
    ctTcp.set(m.flow, ct(now - 1n));
    const gc = new ConntrackGc({ inspector, log: createLogger('nat-gc-test', 'warn') });
    const r = await gc.runOnce();
    assert.ok(r);
    assert.equal(r.tcp.removed, 1);
    assert.deepEqual(gc.lastNat, { scanned: 2, removed: 1, orphans: 0 });
    assert.equal(snat.get(m.egress), undefined);
    assert.equal(snat.get(m.ingress), undefined);
  });
});
