// A pod cannot claim a reserved identity: labels from
// CNI_ARGS, the netconf and the API may only use the sources a pod carries
// (k8s, container). A real agent over the fake datapath: no root needed.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { AgentError } from '../api/errors.js';
import type { CniRequest } from '../api/types.js';
import { CniErrorCode } from '../cni/index.js';
import { AgentClient, AgentResponseError } from '../client/agentClient.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let node: FakeNodeAgent;
let client: AgentClient;
let pods = 0;

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-ident-unit', podCidr: '10.92.0.0/24' });
  client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
});
afterEach(() => node.stop());

const CONF = { cniVersion: '1.0.0', name: 'tdlident', type: 'tendril-cni' };

function newPod(): string {
  const path = `/var/run/netns/tdlidentunit${pods++}`;
  node.datapath.addNetns(path);
  return path;
}

function add(containerId: string, netns: string, opts: { args?: string; conf?: Record<string, unknown> } = {}) {
  const req: CniRequest = { command: 'ADD', containerId, netns, ifName: 'eth0', args: opts.args ?? '', config: JSON.stringify({ ...CONF, ...opts.conf }) };
  return node.agent.api().cni.handle(req);
}

async function assertRefusedCni(p: Promise<unknown>, label: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof AgentError, String(err));
    assert.equal(err.cniCode, CniErrorCode.InvalidNetworkConfig, err.message);
    assert.ok(err.message.includes(label), `the message names the label: ${err.message}`);
    assert.match(err.message, /a pod may carry only k8s: and container: labels/);
    return true;
  });
}

/** Nothing was made for a refused ADD. */
async function assertNothingCreated(): Promise<void> {
  const api = node.agent.api();
  assert.deepEqual((await api.ipam.list()).filter((a) => !a.owner.startsWith('tendril:router')), [], 'no allocation');
  assert.deepEqual(api.endpoints.list(), [], 'no endpoint');
  assert.deepEqual(api.ipcache.list().filter((e) => e.owner.startsWith('endpoint:')), [], 'no ipcache entry');
  assert.deepEqual(await node.datapath.listPodHostInterfaces(), [], 'no interface');
}

const FORBIDDEN = ['reserved:host', 'reserved:health', 'reserved:world', 'reserved:init', 'reserved:remote-node', 'cidr:0.0.0.0/0', 'unspec:app=web', 'any:app=web'];

describe('CNI ADD', () => {
  for (const label of FORBIDDEN) {
    test(`CNI_ARGS TENDRIL_LABELS=${label} is refused with code 7 and nothing is created`, async () => {
      await assertRefusedCni(add('tdl-claim', newPod(), { args: `TENDRIL_LABELS=app=web,${label}` }), label);
      await assertNothingCreated();
    });
  }

  test('a percent-encoded reserved label in CNI_ARGS is refused too', async () => {
    await assertRefusedCni(add('tdl-claim', newPod(), { args: `TENDRIL_LABELS=${encodeURIComponent('reserved:host')}` }), 'reserved:host');
    await assertNothingCreated();
  });

  test('netconf args.tendril.labels with reserved:health (list) or a cidr label (map) is refused with code 7', async () => {
    await assertRefusedCni(add('tdl-claim', newPod(), { conf: { args: { tendril: { labels: ['app=web', 'reserved:health'] } } } }), 'reserved:health');
    await assertRefusedCni(add('tdl-claim', newPod(), { conf: { args: { tendril: { labels: { 'cidr:10.0.0.0/8': '' } } } } }), 'cidr:10.0.0.0/8');
    await assertNothingCreated();
  });

  test('k8s:, container: and source-less labels are accepted', async () => {
    await add('tdl-ok', newPod(), { args: 'K8S_POD_NAMESPACE=default;TENDRIL_LABELS=app=web,k8s:tier=front,container:image=nginx' });
    const ep = node.agent.api().endpoints.lookup('container-id:tdl-ok')!;
    assert.deepEqual(ep.labels, ['container:image=nginx', 'k8s:app=web', 'k8s:io.kubernetes.pod.namespace=default', 'k8s:tier=front']);
    assert.ok(ep.identity! >= 256, `a cluster identity, not a reserved one: ${ep.identity}`);
  });
});

describe('the API', () => {
  async function assertBadRequest(p: Promise<unknown>, label: string): Promise<void> {
    await assert.rejects(p, (err: unknown) => {
      assert.ok(err instanceof AgentResponseError, String(err));
      assert.equal(err.status, 400, err.message);
      assert.ok(err.message.includes(label), `the message names the label: ${err.message}`);
      return true;
    });
  }

  test('PATCH /endpoint/{id}/labels adding a reserved or cidr label is 400 and changes nothing', async () => {
    await add('tdl-patch', newPod(), { args: 'TENDRIL_LABELS=app=web' });
    const before = await client.getEndpoint('container-id:tdl-patch');
    for (const label of FORBIDDEN) await assertBadRequest(client.patchEndpointLabels(before.id, { add: [label] }), label);
    const after = await client.getEndpoint(before.id);
    assert.deepEqual(after.labels, before.labels);
    assert.equal(after.identity, before.identity);
    assert.equal(after.labelsRevision, before.labelsRevision);
    const ip = before.addresses[0]!.ip;
    assert.equal(node.agent.api().ipcache.list().find((e) => e.prefix.startsWith(`${ip}/`))?.identity, before.identity, 'the ipcache still maps the pod to its own identity');
    // Adding a pod's own label still works.
    assert.ok((await client.patchEndpointLabels(before.id, { add: ['tier=back'] })).labels.includes('container:tier=back'));
  });

  test('PUT /endpoint with a reserved label is 400 and the allocation is left as it was', async () => {
    const owner = 'tdl-adopt';
    const { address: allocation } = await client.postIpam({ family: 'ipv4', owner });
    const netns = newPod();
    await assertBadRequest(client.putEndpoint(`container-id:${owner}`, { containerId: owner, ifName: 'eth0', netns, hostIfName: 'tdladopt0', addresses: [allocation.ip], labels: ['app=x', 'reserved:host'] }), 'reserved:host');
    assert.deepEqual(node.agent.api().endpoints.list(), []);
    assert.deepEqual((await client.listIpam()).allocations.filter((a) => a.owner === owner).map((a) => a.ip), [allocation.ip]);
  });
});
