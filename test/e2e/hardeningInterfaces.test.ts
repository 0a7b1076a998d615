// On the kernel: an ADD or DEL never deletes or replaces an
// interface that is not its own attachment's. A real agent in a node
// namespace, tendril-cni exec'd by libcni, pods that are namespaces.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CniError, type Result100 } from '../../src/cni/index.js';
import { hostInterfaceName } from '../../src/datapath/linux/links.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, ping, podAllocations, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the interface ownership e2e test');

const pool = new NetnsPool('hi');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

const conflist = (): NetworkConfigList => confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name: 'tdlhardif', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId]] });

/** The links of a namespace with their indexes, peers and MACs, so a replacement shows. */
async function links(ns: string): Promise<string> {
  const r = await pool.exec(ns, ['ip', '-o', 'link', 'show']);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout;
}

async function routes(ns: string): Promise<string> {
  return (await pool.exec(ns, ['ip', 'route', 'show'])).stdout;
}

/** Everything of the node and of a pod an ADD or DEL of another attachment must leave as it was. */
async function world(pod: string) {
  return { podLinks: await links(pod), podRoutes: await routes(pod), nodeLinks: await links(node), nodeRoutes: await routes(node), allocations: await podAllocations(agent), endpoints: (await agent.client.listEndpoints()).map((e) => `${e.containerId}:${e.hostIfName}:${e.state}`) };
}

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-hi', args: ['--pod-cidr', '10.244.0.0/24'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

describe('two attachments, one pod namespace, one interface name', () => {
  test('ADD cb into ca\'s namespace with eth0 exits 1 "already exists" (code 4); ca\'s veth, endpoint and address are untouched and it still talks', async () => {
    const p = await pool.add('p');
    const r = (await runtime.addNetworkList(conflist(), rt('tdl-hi-ca', p.path))) as Result100;
    const ip = r.ips![0]!.address.split('/')[0]!;
    const before = await world(p.name);
    await assert.rejects(runtime.addNetworkList(conflist(), rt('tdl-hi-cb', p.path)), (e: unknown) => {
      assert.ok(e instanceof CniError, String(e));
      assert.equal(e.code, 4, e.message);
      assert.match(e.message, /eth0 already exists/);
      return true;
    });
    assert.deepEqual(await world(p.name), before);
    assert.ok(await ping(pool, node, ip), 'ca still talks');
    await runtime.checkNetworkList(conflist(), rt('tdl-hi-ca', p.path));
    await runtime.delNetworkList(conflist(), rt('tdl-hi-cb', p.path));
    await runtime.delNetworkList(conflist(), rt('tdl-hi-ca', p.path));
    assert.deepEqual(await podHostLinks(pool, node), []);
  });

  test('DEL of a container that never existed, pointing at a live pod\'s namespace, touches nothing of that pod', async () => {
    const p = await pool.add('q');
    const r = (await runtime.addNetworkList(conflist(), rt('tdl-hi-live', p.path))) as Result100;
    const ip = r.ips![0]!.address.split('/')[0]!;
    const before = await world(p.name);
    await runtime.delNetworkList(conflist(), rt('tdl-hi-never', p.path));
    assert.deepEqual(await world(p.name), before);
    assert.ok(await ping(pool, node, ip));
    await runtime.delNetworkList(conflist(), rt('tdl-hi-live', p.path));
  });
});

describe('what an interrupted ADD left is still replaced', () => {
  test('a veth pair under this attachment\'s own lxc name, its peer eth0 in the pod, gives way to the ADD', async () => {
    const p = await pool.add('r');
    const hostIf = hostInterfaceName('tdl-hi-int', 'eth0');
    // What an agent killed between creating the veth and saving the endpoint leaves.
    const made = await pool.exec(node, ['ip', 'link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', p.name]);
    assert.equal(made.code, 0, made.stderr);
    const r = (await runtime.addNetworkList(conflist(), rt('tdl-hi-int', p.path))) as Result100;
    assert.equal(r.interfaces![0]!.name, hostIf);
    assert.ok(await ping(pool, p.name, '10.244.0.1'), 'the new eth0 works');
    await runtime.delNetworkList(conflist(), rt('tdl-hi-int', p.path));
    assert.deepEqual(await podHostLinks(pool, node), []);
  });
});
