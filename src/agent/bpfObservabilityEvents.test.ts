// EVENTS_LOST counts what a reader could not keep up with, not what nobody
// watched: the agent's observability reads the events ring buffer from its
// start, with no monitor client, and hands every event to the flow history
// and the flow metrics. Real program (bpf_lxc.o, maps pinned in a
// bpffs directory of the test's own), real ring buffer, BPF_PROG_TEST_RUN.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { requireRoot } from '../../test/support/root.js';
import { MapName, MetricsReason, TrafficDirection } from '../datapath/bpf/constants.js';
import { endpointInfo, endpointKey, metricsKey, metricsValue } from '../datapath/bpf/layout.js';
import { POD_A, POD_B } from '../datapath/bpf/testing/fixtures.js';
import { TcpFlag, tcpFrame } from '../datapath/bpf/testing/packets.js';
import { LXC_OBJECT } from '../datapath/bpf/testing/programHarness.js';
import { BPFFS_ROOT, BpfMap, BpfObject, ensureBpffs, perCpuValue, removePinDir, TcAction } from '../datapath/kernel/bpf/index.js';
import { FlowMetrics } from '../metrics/index.js';
import { sampleValue } from '../metrics/testing/exposition.js';
import { parseIp } from '../netip/index.js';
import { BpfObservability } from './bpfObservability.js';

requireRoot('the always-read events ring buffer test');

const root = join(BPFFS_ROOT, `tdl-${randomBytes(4).toString('hex')}`);
const pinDir = join(root, 'tendril');
/** 64 KiB: about 740 records of 88 bytes. */
const RING_BYTES = 1 << 16;
/** A denied SYN emits two records (verdict, drop); 200 of them in one kernel call fit the ring, 4 such bursts do not. */
const BURST = 200;
const RECORDS_PER_BURST = 2 * BURST;
let object: BpfObject | undefined;

before(async () => {
  await ensureBpffs();
  object = await BpfObject.load(LXC_OBJECT, {
    pinRoot: pinDir,
    maxEntries: { [MapName.IPCACHE]: 64, [MapName.POLICY]: 64, [MapName.CT_TCP]: 64, [MapName.CT_ANY]: 64, [MapName.FRAG]: 64, [MapName.ENDPOINTS]: 64, [MapName.METRICS]: 64, [MapName.EVENTS]: RING_BYTES },
  });
});

after(async () => {
  object?.close();
  await removePinDir(root);
});

test('with no monitor client the ring is still read: bursts past its size lose nothing, and EVENTS_LOST stays 0', async () => {
  const endpoints = BpfMap.openPinned(join(pinDir, MapName.ENDPOINTS), endpointKey, endpointInfo);
  const metrics = BpfMap.openPinned(join(pinDir, MapName.METRICS), metricsKey, perCpuValue(metricsValue));
  const observability = new BpfObservability({ pinDir, log: pino({ level: 'silent' }), identityLabels: () => undefined, policies: () => [], policyRevision: () => 0 });
  const lost = () => (metrics.get({ reason: MetricsReason.EVENTS_LOST, direction: TrafficDirection.EGRESS }) ?? []).reduce((n, c) => n + c.packets, 0n);
  const readUpTo = async (records: number) => {
    const deadline = Date.now() + 3000;
    while (observability.monitor.stats().records < records && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  };
  try {
    for (const ep of [POD_A, POD_B]) {
      endpoints.set(parseIp(ep.ip), { ifindex: ep.ifindex, identity: ep.identity, endpointId: ep.endpointId, flags: 0, lxcMac: ep.lxcMac, podMac: ep.podMac });
    }
    await observability.start();
    // No policy entries: every SYN is denied, a verdict and a drop record each.
    const syn = tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: POD_B.ip, sport: 40200, dport: 80, flags: TcpFlag.SYN });
    const bursts = 4;
    for (let i = 1; i <= bursts; i++) {
      assert.equal((await object!.program('tendril_from_container').testRun({ data: syn, repeat: BURST })).retval, TcAction.SHOT);
      await readUpTo(i * RECORDS_PER_BURST);
    }
    assert.equal(observability.monitor.stats().subscribers, 0);
    assert.equal(observability.monitor.stats().reading, true, 'read without clients');
    assert.equal(observability.monitor.stats().records, bursts * RECORDS_PER_BURST, 'every record reached the agent');
    assert.equal(lost(), 0n, 'no record counted lost');

    // A client that comes and goes leaves the reader running.
    const sub = await observability.monitor.subscribe({}, () => undefined);
    await sub.close();
    assert.equal(observability.monitor.stats().reading, true);
    for (let i = 1; i <= 2; i++) {
      await object!.program('tendril_from_container').testRun({ data: syn, repeat: BURST });
      await readUpTo((bursts + i) * RECORDS_PER_BURST);
    }
    assert.equal(lost(), 0n);
  } finally {
    await observability.stop();
    endpoints.close();
    metrics.close();
  }
  assert.equal(observability.monitor.stats().reading, false, 'stop() stops the reader');
});

test('every event goes to the flow metrics, with the flow history or without it', async () => {
  const endpoints = BpfMap.openPinned(join(pinDir, MapName.ENDPOINTS), endpointKey, endpointInfo);
  try {
    for (const ep of [POD_A, POD_B]) {
      endpoints.set(parseIp(ep.ip), { ifindex: ep.ifindex, identity: ep.identity, endpointId: ep.endpointId, flags: 0, lxcMac: ep.lxcMac, podMac: ep.podMac });
    }
    const syn = tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: POD_B.ip, sport: 40300, dport: 80, flags: TcpFlag.SYN });
    for (const historySize of [16, 0]) {
      const registry = new Registry();
      const flowMetrics = new FlowMetrics(registry, { labels: 'none' });
      const observability = new BpfObservability({
        ...{ pinDir, log: pino({ level: 'silent' }), identityLabels: () => undefined, policies: () => [], policyRevision: () => 0 },
        ...{ flowHistory: { size: historySize, nodeName: 'tdl-node' }, flowMetrics },
      });
      try {
        await observability.start();
        assert.equal((await object!.program('tendril_from_container').testRun({ data: syn, repeat: 50 })).retval, TcAction.SHOT);
        const deadline = Date.now() + 3000;
        while (observability.monitor.stats().records < 100 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
        const text = await registry.metrics();
        assert.equal(sampleValue(text, 'tendril_flows_processed_total', { type: 'drop', verdict: 'dropped' }), 50, text);
        assert.equal(sampleValue(text, 'tendril_flow_drops_total', { reason: 'POLICY', direction: 'egress' }), 50, text);
        assert.equal(sampleValue(text, 'tendril_policy_verdicts_total', { direction: 'egress', verdict: 'dropped', rule: 'no rule allows (default deny)' }), 50, text);
        // The history folds the 50 refusals into one flow each (verdict, drop).
        if (historySize > 0) assert.deepEqual(observability.flows?.list().map((f) => f.count), [50, 50]);
        else assert.equal(observability.flows, undefined);
      } finally {
        await observability.stop();
      }
    }
  } finally {
    endpoints.close();
  }
});
