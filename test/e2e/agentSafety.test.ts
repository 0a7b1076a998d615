// What the agent must refuse to do, with a real agent in a node namespace:
// plumb or tear down pods in its own network namespace (or in a file that is
// no namespace), and free an address a live endpoint still uses. Also: the
// policy revision an endpoint realizes is visible on the endpoint.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CniError, type Result100 } from '../../src/cni/index.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, podAllocations, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { linkExists, NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { runOk } from '../support/run.js';

requireRoot('the agent safety test');

const pool = new NetnsPool('sf');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};
let scratch = '';

const conflist = (): NetworkConfigList => confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name: 'tdlsafety', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
const rt = (containerId: string, netns: string, labels = 'app=safety'): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId], ['TENDRIL_LABELS', labels]] });
const nodePath = () => `/var/run/netns/${node}`;

async function rejectsWithCode(p: Promise<unknown>, code: number, message?: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof CniError, String(e));
    assert.equal(e.code, code, e.message);
    if (message) assert.match(e.message, message);
    return true;
  });
}

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-s', args: ['--pod-cidr', '10.243.0.0/24'] }));
  scratch = await mkdtemp(join(tmpdir(), 'tdl-safety-'));
  // The node's own "uplink", named like the interface a pod would get.
  await runOk(['nsenter', `--net=${nodePath()}`, '--', 'ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'tdlsfpeer0']);
});

after(async () => {
  await cleanup();
  await pool.cleanup();
  await rm(scratch, { recursive: true, force: true });
});

describe('CNI_NETNS naming the agent\'s own namespace', () => {
  test('ADD and CHECK are refused with code 4; nothing is allocated, created or deleted', async () => {
    await rejectsWithCode(runtime.addNetworkList(conflist(), rt('tdl-sf-host', nodePath())), 4, /node's own network namespace/);
    assert.equal(await linkExists(pool, node, 'eth0'), true, 'the node\'s eth0 is still there');
    assert.deepEqual(await podAllocations(agent), []);
    assert.deepEqual(await podHostLinks(pool, node), []);
    assert.deepEqual(await agent.client.listEndpoints(), []);
  });

  test('DEL leaves the namespace\'s interfaces alone and still releases the container\'s addresses', async () => {
    const pod = await pool.add('pod');
    await runtime.addNetworkList(conflist(), rt('tdl-sf-a', pod.path));
    assert.equal((await podAllocations(agent)).length, 1);
    // The runtime's DEL names the node's namespace instead of the pod's.
    await runtime.delNetworkList(conflist(), rt('tdl-sf-a', nodePath()));
    assert.equal(await linkExists(pool, node, 'eth0'), true, 'the node\'s eth0 is still there');
    assert.deepEqual(await podAllocations(agent), []);
    assert.deepEqual(await agent.client.listEndpoints(), []);
    assert.deepEqual(await podHostLinks(pool, node), []);
  });
});

describe('CNI_NETNS that is no namespace', () => {
  test('a FIFO is refused with code 4 at once and the agent keeps serving', async () => {
    const fifo = join(scratch, 'netns-fifo');
    await runOk(['mkfifo', fifo]);
    const started = Date.now();
    await rejectsWithCode(runtime.addNetworkList(conflist(), rt('tdl-sf-fifo', fifo)), 4, /not a network namespace/);
    assert.ok(Date.now() - started < 5000, 'answered without opening the FIFO');
    await runtime.delNetworkList(conflist(), rt('tdl-sf-fifo', fifo));
    const pod = await pool.add('after');
    await runtime.addNetworkList(conflist(), rt('tdl-sf-after', pod.path));
    await runtime.delNetworkList(conflist(), rt('tdl-sf-after', pod.path));
    assert.deepEqual(await podAllocations(agent), []);
  });
});

describe('the API', () => {
  test('DELETE /ipam/{ip} for an address a live endpoint holds answers 409 and frees nothing', async () => {
    const pod = await pool.add('ipam');
    const r = (await runtime.addNetworkList(conflist(), rt('tdl-sf-ipam', pod.path))) as Result100;
    const ip = r.ips![0]!.address.split('/')[0]!;
    await assert.rejects(agent.client.request('DELETE', `/ipam/${ip}`), (e: unknown) => (e as { status?: number }).status === 409);
    assert.deepEqual(await podAllocations(agent), [`tdl-sf-ipam=${ip}`]);
    await runtime.delNetworkList(conflist(), rt('tdl-sf-ipam', pod.path));
    assert.deepEqual(await podAllocations(agent), []);
  });

  test('an endpoint shows the policy revision it realizes after an import', async () => {
    const pod = await pool.add('policy');
    await runtime.addNetworkList(conflist(), rt('tdl-sf-db', pod.path, 'app=db'));
    const ep = await agent.client.getEndpoint('container-id:tdl-sf-db');
    assert.equal(ep.state, 'ready');
    assert.equal(ep.policyRevision, ep.desiredPolicyRevision);
    const policy = 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: { name: db, namespace: default }\nspec:\n  podSelector: { matchLabels: { app: db } }\n  policyTypes: [Ingress]\n';
    const imported = await agent.client.request<{ revision: number; regenerated: number[] }>('PUT', '/policy', { text: policy });
    assert.deepEqual(imported.regenerated, [ep.id]);
    const deadline = Date.now() + 10_000;
    let now = ep;
    while (now.policyRevision !== imported.revision && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      now = await agent.client.getEndpoint(String(ep.id));
    }
    assert.equal(now.policyRevision, imported.revision);
    assert.equal(now.desiredPolicyRevision, imported.revision);
    await agent.client.request('DELETE', '/policy?all=true');
    await runtime.delNetworkList(conflist(), rt('tdl-sf-db', pod.path));
  });
});
