// Delegated IPAM, dual-stack: the real agent (over the fake datapath) and
// the real host-local plugin. The plugin decides the families: one ADD of
// it answers an address per configured range, and the pod gets every one of
// them, each with its gateway on the host device; DEL frees them all. A
// plugin configured with one family gives that family only.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import type { Result100 } from '../cni/index.js';
import { CNI_BIN_DIR } from '../ipam/testing/subjects.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let dataDir: string;
let node: FakeNodeAgent;
let pods = 0;

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'tdl-deleg-'));
});
after(async () => {
  await rm(dataDir, { recursive: true, force: true });
});
beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-deleg-ds', podCidr: '10.0.0.0/24', config: { ipam: 'delegated', podCidrs: [], cniPath: [CNI_BIN_DIR] } });
});
afterEach(() => node.stop());

function conf(name: string, ranges: Array<Array<{ subnet: string; gateway?: string }>>): string {
  return JSON.stringify({ cniVersion: '1.0.0', name, type: 'tendril-cni', ipam: { type: 'host-local', dataDir, ranges } });
}

const held = async (name: string) => (await readdir(join(dataDir, name))).filter((f) => !f.startsWith('last_reserved') && f !== 'lock');

describe('delegated IPAM with both families', () => {
  test('the pod gets the IPv4 and the IPv6 address host-local gave, each with its gateway, and DEL frees both', async () => {
    const config = conf('tdldual', [[{ subnet: '10.63.0.0/24', gateway: '10.63.0.1' }], [{ subnet: 'fd00:63::/120', gateway: 'fd00:63::1' }]]);
    const r = (await node.agent.api().cni.handle({ command: 'ADD', containerId: 'tdl-deleg-a', netns: await newNetns(), ifName: 'eth0', args: '', config })) as { result: Result100 };
    const ips = r.result.ips!.map((a) => `${a.address} via ${a.gateway}`);
    assert.deepEqual(ips.length, 2, ips.join(', '));
    assert.match(ips[0]!, /^10\.63\.0\.\d+\/32 via 10\.63\.0\.1$/);
    assert.match(ips[1]!, /^fd00:63::[0-9a-f]+\/128 via fd00:63::1$/);
    assert.ok(r.result.routes!.some((x) => x.dst === '::/0' && x.gw === 'fd00:63::1'), JSON.stringify(r.result.routes));
    const ep = node.agent.api().endpoints.list().find((e) => e.containerId === 'tdl-deleg-a')!;
    assert.deepEqual(ep.addresses.map((a) => a.family), [4, 6]);
    // Each family's gateway is on the host device, as the router address of a kvstore mode is.
    assert.deepEqual(node.datapath.node().routerAddresses, ['10.63.0.1', 'fd00:63::1']);
    assert.equal((await held('tdldual')).length, 2);
    await node.agent.api().cni.handle({ command: 'DEL', containerId: 'tdl-deleg-a', netns: ep.netns, ifName: 'eth0', args: '', config });
    assert.deepEqual(await held('tdldual'), []);
  });

  test('a plugin configured with IPv6 only gives the pod its IPv6 address only', async () => {
    const config = conf('tdlv6', [[{ subnet: 'fd00:64::/120', gateway: 'fd00:64::1' }]]);
    const r = (await node.agent.api().cni.handle({ command: 'ADD', containerId: 'tdl-deleg-b', netns: await newNetns(), ifName: 'eth0', args: '', config })) as { result: Result100 };
    assert.deepEqual(r.result.ips!.map((a) => a.gateway), ['fd00:64::1']);
    assert.deepEqual(r.result.routes, [{ dst: '::/0', gw: 'fd00:64::1' }]);
  });
});

async function newNetns(): Promise<string> {
  const netns = `/var/run/netns/tdldeleg${pods++}`;
  node.datapath.addNetns(netns);
  return netns;
}
