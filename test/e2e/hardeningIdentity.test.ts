// Through the real tendril-cni and libcni: a pod cannot
// claim a reserved identity or a CIDR label. A refused ADD is CNI code 7 and
// leaves nothing behind; the API answers 400 and changes nothing.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CniError } from '../../src/cni/index.js';
import { AgentResponseError } from '../../src/client/agentClient.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, podAllocations, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the reserved identity hardening test');

const pool = new NetnsPool('hi');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};
let claims = 0;

const conflist = (labels?: string[]): NetworkConfigList =>
  confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name: 'tdlident', plugins: [{ type: 'tendril-cni', socket: agent.socket, ...(labels ? { args: { tendril: { labels } } } : {}) }] }));
const rt = (containerId: string, netns: string, labels: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId], ['TENDRIL_LABELS', labels]] });

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-hi', args: ['--pod-cidr', '10.244.7.0/24'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

async function assertNothingCreated(): Promise<void> {
  assert.deepEqual(await podAllocations(agent), [], 'no allocation');
  assert.deepEqual(await podHostLinks(pool, node), [], 'no pod interface');
  assert.deepEqual(await agent.client.listEndpoints(), [], 'no endpoint');
  assert.deepEqual((await agent.client.listIpcache()).filter((e) => e.owner.startsWith('endpoint:')), [], 'no ipcache entry');
}

describe('a pod claiming a reserved identity', () => {
  for (const [what, labels, netconfLabels] of [
    ['CNI_ARGS TENDRIL_LABELS=reserved:host', 'reserved:host', undefined],
    ['CNI_ARGS TENDRIL_LABELS with cidr:0.0.0.0/0', 'app=web,cidr:0.0.0.0/0', undefined],
    ['netconf args.tendril.labels reserved:health', 'app=web', ['reserved:health']],
  ] as const) {
    test(`${what}: ADD exits with code 7 and creates nothing`, async () => {
      const p = await pool.add(`claim${claims++}`);
      await assert.rejects(runtime.addNetworkList(conflist(netconfLabels ? [...netconfLabels] : undefined), rt('tdl-hi-claim', p.path, labels)), (e: unknown) => {
        assert.ok(e instanceof CniError, String(e));
        assert.equal(e.code, 7, e.message);
        assert.match(e.message, /a pod may carry only k8s: and container: labels/);
        return true;
      });
      assert.equal((await pool.exec(p.name, ['ip', 'link', 'show', 'eth0'])).code, 1, 'no interface in the pod');
      await assertNothingCreated();
    });
  }

  test('PATCH /endpoint/{id}/labels with reserved:host is 400; the pod keeps its identity and ipcache entry', async () => {
    const p = await pool.add('patch');
    await runtime.addNetworkList(conflist(), rt('tdl-hi-patch', p.path, 'app=web'));
    const before = await agent.client.getEndpoint('container-id:tdl-hi-patch');
    await assert.rejects(agent.client.patchEndpointLabels(before.id, { add: ['reserved:host'] }), (e: unknown) => e instanceof AgentResponseError && e.status === 400 && e.message.includes('reserved:host'));
    const after = await agent.client.getEndpoint(before.id);
    assert.deepEqual([after.labels, after.identity], [before.labels, before.identity]);
    const entry = (await agent.client.listIpcache()).find((e) => e.prefix === `${before.addresses[0]!.ip}/32`);
    assert.equal(entry?.identity, before.identity, 'the ipcache does not publish the pod as the host');
    await runtime.delNetworkList(conflist(), rt('tdl-hi-patch', p.path, 'app=web'));
    await assertNothingCreated();
  });
});
