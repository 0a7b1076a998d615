// The agent's wiring of the monitor, /v1/bpf/* and conntrack GC: on only for
// a datapath that says where it pinned the eBPF maps, and an agent stop ends
// open monitor streams instead of waiting for them.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { requireRoot } from '../../test/support/root.js';
import { AgentClient } from '../client/agentClient.js';
import { createTestDatapathMaps, type TestDatapathMaps } from '../datapath/bpf/testing/inspectMaps.js';
import { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { parseIp } from '../netip/index.js';
import { bpfPinDirOf } from './bpfObservability.js';
import { startFakeNodeAgent } from './testing/fakeNodeAgent.js';

requireRoot('the agent\'s eBPF observability wiring test');

let maps: TestDatapathMaps;
before(async () => {
  maps = await createTestDatapathMaps();
});
after(async () => {
  await maps?.remove();
});

test('only a datapath with a pin directory turns it on', () => {
  assert.equal(bpfPinDirOf(new FakeDatapath()), undefined);
  assert.equal(bpfPinDirOf(Object.assign(new FakeDatapath(), { bpfPinDir: '' })), undefined);
  assert.equal(bpfPinDirOf(Object.assign(new FakeDatapath(), { bpfPinDir: '/sys/fs/bpf/x/tendril' })), '/sys/fs/bpf/x/tendril');
});

test('an agent over a datapath that pinned maps serves them, and its stop ends monitor streams', async () => {
  const datapath = Object.assign(new FakeDatapath({ nodeLinks: ['eth0'] }), { bpfPinDir: maps.pinDir });
  const node = await startFakeNodeAgent({ nodeName: 'tdl-bpfwire', podCidr: '10.93.0.0/24', datapath });
  let stopped = false;
  try {
    maps.endpoints.set(parseIp('10.93.0.9'), { ifindex: 1, identity: 1, endpointId: 9, flags: 0, lxcMac: '02:00:00:00:00:09', podMac: '0a:00:00:00:00:09' });
    const client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
    const eps = await client.listBpfEndpoints();
    assert.deepEqual(eps.map((e) => [e.ip, e.endpointId, e.identityLabels]), [['10.93.0.9', 9, ['reserved:host']]]);
    const gc = await client.gcBpfConntrack();
    assert.deepEqual([gc.tcp.scanned, gc.any.scanned], [0, 0]);

    let ended = false;
    const streaming = client.monitorEvents({}, () => undefined).then(() => (ended = true));
    // The subscription is in place once the stream's headers came back; give it a moment.
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(ended, false);
    const t0 = Date.now();
    await node.stop();
    stopped = true;
    await streaming;
    assert.ok(Date.now() - t0 < 5000, `the agent stopped in ${Date.now() - t0} ms with a monitor client connected`);
  } finally {
    if (!stopped) await node.stop();
  }
});
