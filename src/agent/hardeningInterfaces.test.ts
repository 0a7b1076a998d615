// An ADD or DEL never deletes or replaces an interface that
// is not its own attachment's. The real agent over the fake datapath (no
// root); test/e2e/hardeningInterfaces.test.ts proves the same on the kernel.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { AgentError } from '../api/errors.js';
import type { CniRequest } from '../api/types.js';
import type { Result100 } from '../cni/index.js';
import type { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { hostInterfaceName } from '../datapath/linux/links.js';
import type { AgentApi } from '../api/server/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.1.0', name: 'tdlunit', type: 'tendril-cni' });

let node: FakeNodeAgent;
let datapath: FakeDatapath;
let api: AgentApi;
let pods = 0;

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-hardening-if', podCidr: '10.89.0.0/24' });
  datapath = node.datapath;
  api = node.agent.api();
});

afterEach(() => node.stop());

function newPod(): string {
  const path = `/var/run/netns/tdlhardif${pods++}`;
  datapath.addNetns(path);
  return path;
}

function cni(command: CniRequest['command'], containerId: string, netns: string, ifName = 'eth0'): Promise<{ result?: Result100 }> {
  return api.cni.handle({ command, containerId, netns, ifName, args: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${containerId}`, config: CONF });
}

const podAllocations = async () => (await api.ipam.list()).filter((a) => !a.owner.startsWith('tendril:router')).map((a) => `${a.owner}=${a.ip}`);

/** Everything `ca` owns, to compare before and after another attachment's call. */
async function snapshot(netns: string) {
  return {
    podLinks: datapath.linkNames(netns),
    nodeLinks: datapath.linkNames(),
    hostRoutes: datapath.hostRoutes(),
    allocations: await podAllocations(),
    endpoints: api.endpoints.list().map((e) => `${e.containerId}:${e.hostIfName}:${e.state}`),
  };
}

describe('two attachments, one pod namespace, one interface name', () => {
  test('ADD of cb with the eth0 ca holds is refused "already exists" (code 4), and ca keeps its veth, endpoint and address', async () => {
    const p = newPod();
    await cni('ADD', 'tdl-ca', p);
    const before = await snapshot(p);
    await assert.rejects(cni('ADD', 'tdl-cb', p), (err: unknown) => {
      assert.ok(err instanceof AgentError, String(err));
      assert.match(err.message, /already exists/);
      assert.equal(err.cniCode, 4, err.message);
      assert.equal(err.httpStatus, 400);
      return true;
    });
    assert.deepEqual(await snapshot(p), before, 'nothing of ca changed, nothing of cb left');
    await cni('CHECK', 'tdl-ca', p);
  });

  test('DEL of a container that never existed, pointing at a live pod\'s namespace, deletes nothing of that pod', async () => {
    const p = newPod();
    await cni('ADD', 'tdl-ca', p);
    const before = await snapshot(p);
    await cni('DEL', 'tdl-never', p);
    assert.deepEqual(await snapshot(p), before);
    await cni('CHECK', 'tdl-ca', p);
  });

  test('a second interface of the same container in the same pod is its own attachment', async () => {
    const p = newPod();
    await cni('ADD', 'tdl-ca', p);
    await cni('ADD', 'tdl-ca', p, 'net1');
    assert.deepEqual(datapath.linkNames(p), ['eth0', 'lo', 'net1']);
    await cni('DEL', 'tdl-ca', p, 'net1');
    assert.deepEqual(datapath.linkNames(p), ['eth0', 'lo']);
    assert.ok(api.endpoints.list().some((e) => e.containerId === 'tdl-ca' && e.ifName === 'eth0' && e.state === 'ready'));
  });
});

describe('an interface in the pod that is no attachment\'s', () => {
  test('ADD is refused "already exists" and the interface stays; nothing is allocated', async () => {
    const p = newPod();
    datapath.createVethPair('tdlforeign0', p, 'eth0');
    await assert.rejects(cni('ADD', 'tdl-cf', p), /already exists/);
    assert.deepEqual(datapath.linkNames(p), ['eth0', 'lo']);
    assert.ok(datapath.linkNames()!.includes('tdlforeign0'));
    assert.deepEqual(await podAllocations(), []);
    assert.deepEqual(await datapath.listPodHostInterfaces(), []);
  });

  test('DEL leaves it alone and still releases the container\'s addresses', async () => {
    const p = newPod();
    datapath.createVethPair('tdlforeign1', p, 'eth0');
    await cni('DEL', 'tdl-cf', p);
    assert.deepEqual(datapath.linkNames(p), ['eth0', 'lo']);
    assert.ok(datapath.linkNames()!.includes('tdlforeign1'));
  });
});

describe('what an interrupted ADD left is still replaced', () => {
  test('a veth pair of this attachment\'s own host name, no endpoint owning it, gives way to the new ADD', async () => {
    const p = newPod();
    const hostIf = hostInterfaceName('tdl-ci', 'eth0');
    // What an agent killed right after creating the veth leaves behind.
    datapath.createVethPair(hostIf, p, 'eth0');
    const { result } = await cni('ADD', 'tdl-ci', p);
    assert.equal(result!.interfaces![0]!.name, hostIf);
    await cni('CHECK', 'tdl-ci', p);
    assert.deepEqual(await datapath.listPodHostInterfaces(), [hostIf]);
  });

  test('this attachment\'s host end whose peer is elsewhere is replaced; the new pod gets the veth', async () => {
    const old = newPod();
    const p = newPod();
    const hostIf = hostInterfaceName('tdl-cj', 'eth0');
    datapath.createVethPair(hostIf, old, 'eth0');
    await cni('ADD', 'tdl-cj', p);
    await cni('CHECK', 'tdl-cj', p);
    assert.deepEqual(datapath.linkNames(old), ['lo'], 'the leftover pair is gone');
  });

  test('the host name another endpoint owns is never replaced', async () => {
    const p = newPod();
    const q = newPod();
    const squatted = hostInterfaceName('tdl-victim', 'eth0');
    // Someone adopts (PUT /endpoint) a veth that carries another attachment's lxc name.
    datapath.createVethPair(squatted, p, 'eth0');
    const ip = (await api.ipam.allocate({ owner: 'tdl-adopted', family: 4, provisional: false })).allocation.ip;
    await api.endpoints.adopt({ containerId: 'tdl-adopted', ifName: 'eth0', netns: p, hostIfName: squatted, addresses: [ip] });
    const before = await snapshot(p);
    await assert.rejects(cni('ADD', 'tdl-victim', q), /already|belongs/);
    await cni('DEL', 'tdl-victim', q);
    assert.deepEqual(await snapshot(p), before);
  });
});
