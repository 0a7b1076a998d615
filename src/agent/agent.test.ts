// The agent's CNI logic and API over the fake datapath: no root needed. The
// agent is the real one (embedded kvstore in a temp dir, IPAM, identities,
// policy, endpoint manager, HTTP server on a unix socket in the temp dir).
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { AgentError } from '../api/errors.js';
import type { CniRequest } from '../api/types.js';
import type { Result100 } from '../cni/index.js';
import { AgentClient } from '../client/agentClient.js';
import type { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import type { EndpointStatus } from '../endpoint/index.js';
import { LabelSet } from '../labels/index.js';
import { dbFromWebPolicy } from '../policy/testing/policies.js';
import type { AgentApi } from '../api/server/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlunit', type: 'tendril-cni' });
const POLICY = dbFromWebPolicy({ namespace: 'default' });

let node: FakeNodeAgent;
let datapath: FakeDatapath;
let api: AgentApi;
let client: AgentClient;
let pods = 0;

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-agent-unit', podCidr: '10.88.0.0/24' });
  datapath = node.datapath;
  api = node.agent.api();
  client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
});

afterEach(() => node.stop());

function newPod(): string {
  const path = `/var/run/netns/tdlagentunit${pods++}`;
  datapath.addNetns(path);
  return path;
}

function cni(command: CniRequest['command'], containerId: string, netns: string, labels = 'app=web'): Promise<{ result?: Result100 }> {
  return api.cni.handle({ command, containerId, netns, ifName: 'eth0', args: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${containerId};TENDRIL_LABELS=${labels}`, config: CONF });
}

async function rejectsWithCni(p: Promise<unknown>, code: number, message?: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof AgentError, String(err));
    assert.equal(err.cniCode, code, err.message);
    if (message) assert.match(err.message, message);
    return true;
  });
}

const podAllocations = async () => (await api.ipam.list()).filter((a) => !a.owner.startsWith('tendril:router')).map((a) => `${a.owner}=${a.ip}`);
const heldIdentities = () => api.identities.list().filter((i) => (i.references ?? 0) > 0);

/** Nothing of a failed or deleted pod is left: allocation, endpoint, identity reference, ipcache entry, interface. */
async function assertClean(): Promise<void> {
  assert.deepEqual(await podAllocations(), [], 'no allocation');
  assert.deepEqual(api.endpoints.list(), [], 'no endpoint');
  assert.deepEqual(heldIdentities(), [], 'no identity reference');
  assert.deepEqual(api.ipcache.list().filter((e) => e.owner.startsWith('endpoint:')), [], 'no ipcache entry');
  assert.deepEqual(await datapath.listPodHostInterfaces(), [], 'no pod interface');
}

describe('CNI ADD, CHECK, DEL', () => {
  test('ADD answers with the address once the endpoint is ready at the current policy revision; DEL removes everything', async () => {
    const netns = newPod();
    const { result } = await cni('ADD', 'tdl-a', netns);
    const ip = result!.ips![0]!.address;
    assert.match(ip, /^10\.88\.0\.\d+\/32$/);
    assert.equal(result!.ips![0]!.gateway, '10.88.0.1');
    const ep = await client.getEndpoint('container-id:tdl-a');
    assert.equal(ep.state, 'ready');
    assert.equal(ep.policyRevision, ep.desiredPolicyRevision);
    assert.equal(datapath.endpointState(ep.id)?.identity, ep.identity);
    assert.equal((await api.ipam.list()).find((a) => `${a.ip}/32` === ip)?.expiresAt, undefined, 'the address was confirmed');
    await cni('CHECK', 'tdl-a', netns);
    await cni('DEL', 'tdl-a', netns);
    await cni('DEL', 'tdl-a', netns);
    await assertClean();
  });

  test('a repeated ADD of a live attachment answers with its existing result and changes nothing', async () => {
    const netns = newPod();
    const first = await cni('ADD', 'tdl-a', netns);
    const before = api.endpoints.lookup('container-id:tdl-a')!;
    await api.endpoints.updateLabels(before.id, LabelSet.parse([...before.labels, 'container:extra=kept']));
    const labelled = api.endpoints.lookup('container-id:tdl-a')!;
    const again = await cni('ADD', 'tdl-a', netns);
    assert.deepEqual(again, first, 'same addresses and MACs');
    const after = api.endpoints.lookup('container-id:tdl-a')!;
    assert.equal(after.id, before.id);
    assert.deepEqual(after.labels, labelled.labels, 'labels set since the first ADD are kept');
    assert.equal(api.endpoints.list().length, 1);
    assert.equal((await podAllocations()).length, 1);
    // The same attachment asked for another address: refused, the pod keeps its own.
    await rejectsWithCni(api.cni.handle({ command: 'ADD', containerId: 'tdl-a', netns, ifName: 'eth0', args: 'IP=10.88.0.200', config: CONF }), 4, /already attached with 10\.88\.0\.\d+/);
    assert.equal(api.endpoints.lookup('container-id:tdl-a')!.id, before.id);
    await cni('DEL', 'tdl-a', netns);
  });

  test('after an agent restart, a repeated ADD of a restored endpoint answers with its existing result', async () => {
    const netns = newPod();
    const first = await cni('ADD', 'tdl-r', netns);
    const before = api.endpoints.lookup('container-id:tdl-r')!;
    node = await node.restart();
    api = node.agent.api();
    const again = await cni('ADD', 'tdl-r', netns);
    assert.deepEqual(again, first);
    assert.equal(api.endpoints.lookup('container-id:tdl-r')!.id, before.id);
    assert.equal((await podAllocations()).length, 1);
    await cni('DEL', 'tdl-r', netns);
  });

  test('the same attachment in another namespace is refused (code 4) while the first is live; replaced once it is gone', async () => {
    const netns = newPod();
    const first = await cni('ADD', 'tdl-a', netns);
    const other = newPod();
    await rejectsWithCni(cni('ADD', 'tdl-a', other), 4, /already attached .* in network namespace .*DEL it first/);
    assert.equal(api.endpoints.list().length, 1);
    datapath.removeNetns(netns);
    const replaced = await cni('ADD', 'tdl-a', other);
    assert.equal(replaced.result!.interfaces![1]!.sandbox, other);
    assert.notEqual(api.endpoints.lookup('container-id:tdl-a')!.netns, netns);
    assert.equal((await podAllocations()).length, 1);
    assert.ok(first.result);
    await cni('DEL', 'tdl-a', other);
  });
});

describe('ADD undoes every step when a later one fails', () => {
  const cases: Array<[string, () => void]> = [
    ['the pod network', () => datapath.failNext('addPod')],
    ['the first regeneration', () => datapath.failNext('syncEndpoint')],
  ];
  for (const [step, inject] of cases) {
    test(`failure at ${step} → code 102, nothing left`, async () => {
      const netns = newPod();
      inject();
      await rejectsWithCni(cni('ADD', 'tdl-fail', netns), 102);
      await assertClean();
      assert.deepEqual(datapath.linkNames(netns), ['lo']);
    });
  }

  test('a namespace that does not exist → code 102, the allocation rolled back', async () => {
    await rejectsWithCni(cni('ADD', 'tdl-nons', '/var/run/netns/tdl-does-not-exist'), 102);
    await assertClean();
  });
});

describe('CNI_NETNS that is not a pod\'s namespace', () => {
  test('ADD and CHECK with the agent\'s own namespace are refused with code 4; nothing is allocated or created', async () => {
    for (const netns of ['/proc/self/ns/net', '/proc/1/ns/net']) {
      await rejectsWithCni(cni('ADD', 'tdl-host', netns), 4, /node's own network namespace/);
    }
    datapath.addNonNetnsFile('/tmp/tdl-fifo');
    await rejectsWithCni(cni('ADD', 'tdl-fifo', '/tmp/tdl-fifo'), 4, /not a network namespace/);
    await rejectsWithCni(cni('CHECK', 'tdl-host', '/proc/self/ns/net'), 4);
    assert.equal(datapath.calls.filter((c) => c.op === 'addPod' || c.op === 'removePod').length, 0);
    assert.ok(datapath.linkNames()!.includes('eth0'), 'the node\'s eth0 is untouched');
    await assertClean();
  });

  test('DEL with the agent\'s own namespace releases the container\'s addresses but leaves the namespace\'s interfaces alone', async () => {
    await cni('ADD', 'tdl-a', newPod());
    assert.equal((await podAllocations()).length, 1);
    await cni('DEL', 'tdl-a', '/proc/self/ns/net');
    assert.ok(datapath.linkNames()!.includes('eth0'), 'the node\'s eth0 is untouched');
    await assertClean();
  });
});

describe('the API', () => {
  test('DELETE /ipam/{ip} of an address a live endpoint holds answers 409 and frees nothing', async () => {
    const netns = newPod();
    const { result } = await cni('ADD', 'tdl-a', netns);
    const ip = result!.ips![0]!.address.split('/')[0]!;
    await assert.rejects(client.request('DELETE', `/ipam/${ip}`), (e: unknown) => (e as { status?: number }).status === 409);
    assert.deepEqual(await podAllocations(), [`tdl-a=${ip}`]);
    await cni('DEL', 'tdl-a', netns);
    await assert.rejects(client.request('DELETE', `/ipam/${ip}`), (e: unknown) => (e as { status?: number }).status === 404);
    const manual = await client.request<{ address: { ip: string } }>('POST', '/ipam?owner=tdl-manual');
    await client.request('DELETE', `/ipam/${manual.address.ip}`);
    assert.deepEqual(await podAllocations(), []);
  });

  test('PUT /policy regenerates the selected endpoint; GET /endpoint/{id} shows the revision realized', async () => {
    await cni('ADD', 'tdl-web', newPod(), 'app=web');
    await cni('ADD', 'tdl-db', newPod(), 'app=db');
    const db = await client.getEndpoint('container-id:tdl-db');
    const r = await client.request<{ revision: number; regenerated: number[] }>('PUT', '/policy', { text: POLICY });
    assert.deepEqual(r.regenerated, [db.id]);
    const deadline = Date.now() + 5000;
    let now = db;
    while (now.policyRevision !== r.revision && Date.now() < deadline) {
      await new Promise((res) => setTimeout(res, 10));
      now = await client.getEndpoint(String(db.id));
    }
    assert.equal(now.policyRevision, r.revision);
    assert.equal(now.desiredPolicyRevision, r.revision);
    assert.equal(now.state, 'ready');
    const policy = await client.request<{ policyRevision: number; realizedPolicyRevision: number }>('GET', `/endpoint/${db.id}/policy`);
    assert.equal(policy.realizedPolicyRevision, r.revision);
  });

  test('PATCH /endpoint/{id}/labels gives a new identity and answers once it is regenerated', async () => {
    await cni('ADD', 'tdl-a', newPod(), 'app=one');
    const before = await client.getEndpoint('container-id:tdl-a');
    const after = await client.request<EndpointStatus>('PATCH', `/endpoint/${before.id}/labels`, { add: ['app=two'], delete: ['app'] });
    assert.notEqual(after.identity, before.identity);
    assert.ok(after.labels.includes('k8s:app=two'));
    assert.equal(after.state, 'ready');
    assert.equal(datapath.endpointState(before.id)?.identity, after.identity);
  });

  test('DELETE /endpoint/{id} removes the endpoint and releases its addresses', async () => {
    await cni('ADD', 'tdl-a', newPod());
    const ep = await client.getEndpoint('container-id:tdl-a');
    await client.request('DELETE', `/endpoint/${ep.id}`);
    await assertClean();
  });
});
