// The datapath metrics against real maps pinned in a bpffs directory of the
// test's own (no programs loaded: the pins alone), read as a scrape reads them.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { requireRoot } from '../../test/support/root.js';
import { DropReason, MapName, MetricsReason, TrafficDirection } from '../datapath/bpf/constants.js';
import { DatapathInspector } from '../datapath/bpf/inspect.js';
import { createTestDatapathMaps, type TestDatapathMaps } from '../datapath/bpf/testing/inspectMaps.js';
import { parseIp } from '../netip/index.js';
import { AgentMetrics, pinnedDatapathSource } from './index.js';
import { sampleValue } from './testing/exposition.js';

requireRoot('the datapath metrics tests');

let maps: TestDatapathMaps;

before(async () => {
  maps = await createTestDatapathMaps();
});
after(async () => {
  await maps?.remove();
});

const ctValue = {
  expiresNs: 1n << 60n,
  packets: 1n,
  bytes: 60n,
  srcIdentity: 1000,
  dstIdentity: 2000,
  srcEndpoint: 0,
  dstEndpoint: 0,
  revNatIndex: 0,
  tcpFlags: 0,
  service: 0,
  flags: 0,
  backendId: 0,
  natAddr: parseIp('0.0.0.0'),
  natPort: 0,
};
const flow = (sport: number, proto: number) => ({ saddr: parseIp('10.200.0.5'), daddr: parseIp('10.200.0.6'), sport, dport: 80, proto, flags: 0 });
const flow6 = (sport: number, proto: number) => ({ saddr: parseIp('fd74:10:200:0::5'), daddr: parseIp('fd74:10:200:0::6'), sport, dport: 80, proto, flags: 0 });

describe('datapath metrics from the pinned maps', () => {
  test('forwarded and dropped counters by reason, conntrack entries and map pressure', async () => {
    const cpus = (maps.metrics.valueCodec as unknown as { cpus: number }).cpus;
    const onCpu0 = (p: bigint, b: bigint) => Array.from({ length: cpus }, (_, i) => (i === 0 ? { packets: p, bytes: b } : { packets: 0n, bytes: 0n }));
    maps.metrics.set({ reason: MetricsReason.FORWARDED, direction: TrafficDirection.EGRESS }, onCpu0(10n, 1000n));
    maps.metrics.set({ reason: Math.abs(DropReason.POLICY.code), direction: TrafficDirection.INGRESS }, onCpu0(2n, 120n));
    maps.metrics.set({ reason: MetricsReason.EVENTS_LOST, direction: TrafficDirection.NONE }, onCpu0(4n, 0n));
    for (let port = 1000; port < 1016; port++) maps.ctTcp.set(flow(port, 6), ctValue);
    maps.ctAny.set(flow(53, 17), ctValue);
    for (let port = 2000; port < 2005; port++) maps.ct6Tcp.set(flow6(port, 6), ctValue);

    const m = new AgentMetrics();
    m.bind({
      endpointStates: () => [],
      identities: () => ({ reserved: 0, allocated: 0 }),
      ipamAllocations: async () => [],
      ipamPodCidrs: () => [],
      policyRevision: () => 1,
      deletionQueueDepth: async () => 0,
      datapath: pinnedDatapathSource(new DatapathInspector(maps.pinDir)),
    });
    let text = await m.render();
    assert.equal(sampleValue(text, 'tendril_datapath_forwarded_packets_total', { direction: 'egress' }), 10);
    assert.equal(sampleValue(text, 'tendril_datapath_forwarded_bytes_total', { direction: 'egress' }), 1000);
    assert.equal(sampleValue(text, 'tendril_datapath_dropped_packets_total', { reason: 'POLICY', direction: 'ingress' }), 2);
    assert.equal(sampleValue(text, 'tendril_datapath_dropped_bytes_total', { reason: 'POLICY', direction: 'ingress' }), 120);
    assert.equal(sampleValue(text, 'tendril_datapath_dropped_packets_total', { reason: 'EVENTS_LOST' }), undefined, 'lost events are no drops');
    assert.equal(sampleValue(text, 'tendril_datapath_monitor_events_lost_total'), 4);
    assert.equal(sampleValue(text, 'tendril_datapath_conntrack_entries', { table: 'tcp', family: 'ipv4' }), 16);
    assert.equal(sampleValue(text, 'tendril_datapath_conntrack_entries', { table: 'any', family: 'ipv4' }), 1);
    // IPv6 conntrack: its own series, and its own table's fill (the fixture's holds 128).
    assert.equal(sampleValue(text, 'tendril_datapath_conntrack_entries', { table: 'tcp', family: 'ipv6' }), 5);
    assert.equal(sampleValue(text, 'tendril_datapath_map_pressure', { map: MapName.CT6_TCP }), 5 / 128);
    // The fixture's conntrack table holds 256 entries.
    assert.equal(sampleValue(text, 'tendril_datapath_map_entries', { map: MapName.CT_TCP }), 16);
    assert.equal(sampleValue(text, 'tendril_datapath_map_pressure', { map: MapName.CT_TCP }), 16 / 256);
    assert.equal(sampleValue(text, 'tendril_datapath_map_pressure', { map: MapName.SNAT }), undefined, 'a map not pinned is left out');

    // The kernel's counters are read anew on each scrape.
    maps.metrics.set({ reason: MetricsReason.FORWARDED, direction: TrafficDirection.EGRESS }, onCpu0(15n, 1500n));
    maps.ctTcp.delete(flow(1000, 6));
    text = await m.render();
    assert.equal(sampleValue(text, 'tendril_datapath_forwarded_packets_total', { direction: 'egress' }), 15);
    assert.equal(sampleValue(text, 'tendril_datapath_conntrack_entries', { table: 'tcp', family: 'ipv4' }), 15);
  });
});
