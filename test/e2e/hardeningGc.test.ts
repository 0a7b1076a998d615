// Through libcni and the real tendril-cni: GC of one
// network leaves the pods of another alone, and a GC on a netconf older than
// 1.1.0 is refused (code 1) before anything is deleted.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CniError, CniErrorCode } from '../../src/cni/index.js';
import type { ApiEndpoint } from '../../src/api/types.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, podAllocations, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the GC hardening test');

const pool = new NetnsPool('hg');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

const conflist = (name: string): NetworkConfigList => confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name, plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['TENDRIL_LABELS', 'app=gc']] });
const endpointIds = async () => ((await agent.client.listEndpoints()) as ApiEndpoint[]).map((e) => e.containerId).sort();

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-hg', args: ['--pod-cidr', '10.244.8.0/24'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

describe('CNI GC and network names', () => {
  test('GC of network tdlother with an empty valid list removes only its own pods', async () => {
    const a = await pool.add('a');
    const b = await pool.add('b');
    const c = await pool.add('c');
    await runtime.addNetworkList(conflist('tdlgc'), rt('tdl-hg-a', a.path));
    await runtime.addNetworkList(conflist('tdlgc'), rt('tdl-hg-b', b.path));
    await runtime.addNetworkList(conflist('tdlother'), rt('tdl-hg-c', c.path));
    assert.deepEqual(await endpointIds(), ['tdl-hg-a', 'tdl-hg-b', 'tdl-hg-c']);

    await runtime.gcNetworkList(conflist('tdlother'), { validAttachments: [] });
    assert.deepEqual(await endpointIds(), ['tdl-hg-a', 'tdl-hg-b']);
    assert.deepEqual((await podAllocations(agent)).map((x) => x.split('=')[0]).sort(), ['tdl-hg-a', 'tdl-hg-b']);
    assert.equal((await podHostLinks(pool, node)).length, 2);
    for (const p of [a, b]) assert.equal((await pool.exec(p.name, ['ip', 'link', 'show', 'eth0'])).code, 0, 'the other network\'s pods keep their interface');

    // A GC on a 1.0.0 netconf of the pods' own network: refused, nothing deleted.
    const config = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlgc', type: 'tendril-cni', socket: agent.socket, 'cni.dev/valid-attachments': [] });
    const exec = await agent.client.cni({ command: 'GC', path: '/opt/cni/bin', config }).catch((e: unknown) => e);
    assert.ok(exec instanceof CniError && exec.code === CniErrorCode.IncompatibleVersion, String(exec));
    assert.deepEqual(await endpointIds(), ['tdl-hg-a', 'tdl-hg-b']);
    const shown = (await agent.client.getEndpoint('container-id:tdl-hg-a')) as ApiEndpoint;
    assert.equal(shown.networkName, 'tdlgc', 'the API shows the endpoint\'s network');

    await runtime.gcNetworkList(conflist('tdlgc'), { validAttachments: [{ containerID: 'tdl-hg-b', ifname: 'eth0' }] });
    assert.deepEqual(await endpointIds(), ['tdl-hg-b']);
    await runtime.delNetworkList(conflist('tdlgc'), rt('tdl-hg-b', b.path));
    assert.deepEqual(await podAllocations(agent), []);
  });
});
