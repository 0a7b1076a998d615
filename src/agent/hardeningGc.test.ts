// CNI GC acts only on attachments of the network it names, and the agent
// enforces the spec's version rule for GC itself. A real
// agent over the fake datapath: no root needed.
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { AgentError } from '../api/errors.js';
import type { CniRequest } from '../api/types.js';
import { CniError, CniErrorCode } from '../cni/index.js';
import { AgentClient } from '../client/agentClient.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let node: FakeNodeAgent;
let pods = 0;

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-gc-unit', podCidr: '10.91.0.0/24' });
});
afterEach(() => node.stop());

const conf = (name: string, version = '1.1.0', extra: Record<string, unknown> = {}) => JSON.stringify({ cniVersion: version, name, type: 'tendril-cni', ...extra });

function newPod(): string {
  const path = `/var/run/netns/tdlgcunit${pods++}`;
  node.datapath.addNetns(path);
  return path;
}

function cni(command: CniRequest['command'], containerId: string, netns: string, config: string) {
  return node.agent.api().cni.handle({ command, containerId, netns, ifName: 'eth0', args: 'TENDRIL_LABELS=app=gc', config });
}

function gc(config: string) {
  return node.agent.api().cni.handle({ command: 'GC', config });
}

const valid = (...ids: string[]) => ({ 'cni.dev/valid-attachments': ids.map((containerID) => ({ containerID, ifname: 'eth0' })) });
const endpointIds = () => node.agent.api().endpoints.list().map((e) => e.containerId).sort();
const podOwners = async () => (await node.agent.api().ipam.list()).filter((a) => !a.owner.startsWith('tendril:router')).map((a) => a.owner).sort();

describe('GC acts only on the named network', () => {
  test('GC of network "other" leaves every endpoint of network "tdl" and its address alone', async () => {
    await cni('ADD', 'tdl-net-a', newPod(), conf('tdlnet'));
    await cni('ADD', 'tdl-net-b', newPod(), conf('tdlnet'));
    await cni('ADD', 'tdl-other-a', newPod(), conf('other'));
    await cni('ADD', 'tdl-other-b', newPod(), conf('other'));
    assert.equal(node.agent.api().endpoints.lookup('container-id:tdl-net-a')?.networkName, 'tdlnet', 'the endpoint records its network');

    // The runtime of network "other" still has tdl-other-a only.
    await gc(conf('other', '1.1.0', valid('tdl-other-a')));
    assert.deepEqual(endpointIds(), ['tdl-net-a', 'tdl-net-b', 'tdl-other-a']);
    assert.deepEqual(await podOwners(), ['tdl-net-a', 'tdl-net-b', 'tdl-other-a'], 'the other network\'s addresses stay allocated');
    assert.equal((await node.datapath.listPodHostInterfaces()).length, 3);

    await gc(conf('other', '1.1.0', valid()));
    assert.deepEqual(endpointIds(), ['tdl-net-a', 'tdl-net-b']);
    assert.deepEqual(await podOwners(), ['tdl-net-a', 'tdl-net-b']);

    await gc(conf('tdlnet', '1.1.0', valid('tdl-net-b')));
    assert.deepEqual(endpointIds(), ['tdl-net-b']);
    assert.deepEqual(await podOwners(), ['tdl-net-b']);
  });

  test('an endpoint restored from a record without a network name is never deleted by GC', async () => {
    const netns = newPod();
    await cni('ADD', 'tdl-old', netns, conf('tdlnet'));
    const ep = node.agent.api().endpoints.lookup('container-id:tdl-old')!;
    node = await node.restart(async () => {
      // A record written before endpoints knew their network.
      const file = join(node.config.stateDir, 'endpoints', String(ep.id), 'endpoint.json');
      const record = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
      delete record.networkName;
      await writeFile(file, JSON.stringify(record));
    });
    assert.equal(node.agent.api().endpoints.lookup('container-id:tdl-old')?.networkName, undefined);
    for (const name of ['tdlnet', 'other']) await gc(conf(name, '1.1.0', valid()));
    assert.deepEqual(endpointIds(), ['tdl-old']);
    assert.deepEqual(await podOwners(), ['tdl-old']);
    // DEL still removes it.
    await cni('DEL', 'tdl-old', netns, conf('tdlnet'));
    assert.deepEqual(endpointIds(), []);
  });
});

describe('the agent enforces the version rule for GC (and CHECK, STATUS) itself', () => {
  test('GC on a 1.0.0 netconf is refused with code 1 by the CNI service and deletes nothing', async () => {
    await cni('ADD', 'tdl-v-a', newPod(), conf('tdlnet', '1.0.0'));
    await assert.rejects(gc(conf('tdlnet', '1.0.0', valid())), (err: unknown) => {
      assert.ok(err instanceof AgentError, String(err));
      assert.equal(err.cniCode, CniErrorCode.IncompatibleVersion, err.message);
      assert.match(err.message, /does not allow GC/);
      return true;
    });
    assert.deepEqual(endpointIds(), ['tdl-v-a']);
    assert.deepEqual(await podOwners(), ['tdl-v-a']);
  });

  test('CHECK below 0.4.0 and STATUS below 1.1.0 are refused with code 1 by the CNI service', async () => {
    const netns = newPod();
    await cni('ADD', 'tdl-v-c', netns, conf('tdlnet', '0.3.1'));
    for (const [command, version] of [['CHECK', '0.3.1'], ['STATUS', '1.0.0']] as const) {
      await assert.rejects(cni(command, 'tdl-v-c', netns, conf('tdlnet', version)), (err: unknown) => err instanceof AgentError && err.cniCode === CniErrorCode.IncompatibleVersion);
    }
  });

  test('POST /v1/cni with GC on a 1.0.0 netconf answers code 1 and deletes nothing', async () => {
    await cni('ADD', 'tdl-v-b', newPod(), conf('tdlnet', '1.0.0'));
    const client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
    await assert.rejects(client.cni({ command: 'GC', path: '/opt/cni/bin', config: conf('tdlnet', '1.0.0', valid()) }), (err: unknown) => err instanceof CniError && err.code === CniErrorCode.IncompatibleVersion);
    assert.deepEqual(endpointIds(), ['tdl-v-b']);
  });
});
