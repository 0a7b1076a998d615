// An ADD slower than --ipam-expiration: its provisional
// allocation expired, and the address may be someone else's by the time the
// endpoint would be ready. ADD must fail and roll everything back. A real
// agent over the fake datapath, whose gate holds the first regeneration.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, test } from 'node:test';
import { AgentError } from '../api/errors.js';
import { CniErrorCode } from '../cni/index.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let node: FakeNodeAgent;

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-expiry-unit', podCidr: '10.93.0.0/24' });
});
afterEach(() => node.stop());

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlexpiry', type: 'tendril-cni' });

test('an ADD whose allocation expired before it confirms fails with code 11, rolls back, and leaves the new holder alone', async () => {
  const api = node.agent.api();
  api.health.patchConfig({ ipamExpiration: 1000 });
  const netns = '/var/run/netns/tdlexpiryunit0';
  node.datapath.addNetns(netns);
  const gate = node.datapath.gate('syncEndpoint');
  const adding = api.cni.handle({ command: 'ADD', containerId: 'tdl-slow', netns, ifName: 'eth0', args: 'TENDRIL_LABELS=app=slow', config: CONF });
  adding.catch(() => undefined); // observed below, once the gate opens
  await gate.arrived();
  const ip = (await api.ipam.list()).find((a) => a.owner === 'tdl-slow')?.ip;
  assert.ok(ip, 'the ADD holds a provisional address');
  // The expirer releases it while the first regeneration is held, and someone else takes it.
  for (const deadline = Date.now() + 10_000; (await api.ipam.list()).some((a) => a.owner === 'tdl-slow'); ) {
    assert.ok(Date.now() < deadline, 'the provisional allocation expires');
    await new Promise((r) => setTimeout(r, 50));
  }
  await api.ipam.allocate({ owner: 'tdl-thief', family: 4, ip, provisional: false });
  gate.open();

  await assert.rejects(adding, (err: unknown) => {
    assert.ok(err instanceof AgentError, String(err));
    assert.equal(err.cniCode, CniErrorCode.TryAgainLater, err.message);
    assert.match(err.message, /no longer allocated/);
    return true;
  });
  assert.deepEqual(api.endpoints.list(), [], 'no endpoint is left ready on a released address');
  assert.deepEqual(await node.datapath.listPodHostInterfaces(), [], 'no interface');
  assert.deepEqual(node.datapath.linkNames(netns), ['lo'], 'nothing left in the pod');
  assert.deepEqual(api.ipcache.list().filter((e) => e.owner.startsWith('endpoint:')), [], 'no ipcache entry');
  assert.deepEqual((await api.ipam.list()).filter((a) => a.ip === ip).map((a) => a.owner), ['tdl-thief'], 'the address stays with its new holder');
});
