// Policy through the agent's API and CLI: import, per-endpoint map state,
// trace, delete, and invalid documents rejected whole.
import { dbFromWebPolicy } from '../../src/policy/testing/policies.js';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { type CniRuntime, confListFromBytes } from '../../src/libcni/index.js';
import { type AgentProcess, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run } from '../support/run.js';
import { TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the agent policy test');

const pool = new NetnsPool('po');
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

const POLICY = dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 });

async function addPod(name: string, labels: string): Promise<Endpoint> {
  const ns = await pool.add(name);
  const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlpolicy', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
  await runtime.addNetworkList(list, { containerId: `tdl-${name}`, netns: ns.path, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'prod'], ['K8S_POD_NAME', name], ['TENDRIL_LABELS', labels]] });
  return (await agent.client.getEndpoint(`container-id:tdl-${name}`)) as Endpoint;
}

const cli = (...args: string[]) => run([TENDRIL_BIN, ...args, '--socket', agent.socket]);

before(async () => {
  ({ agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-p', args: ['--pod-cidr', '10.251.0.0/24'] }));
});
after(async () => {
  await cleanup();
  await pool.cleanup();
});

test('an imported NetworkPolicy shapes the selected endpoint\'s map state and the trace', async () => {
  const web = await addPod('web', 'app=web');
  const db = await addPod('db', 'app=db');
  const before = (await agent.client.request<{ entries: unknown[]; enforcement: Record<string, unknown> }>('GET', `/endpoint/${db.id}/policy`));
  const r = await run([TENDRIL_BIN, 'policy', 'import', '-', '--socket', agent.socket, '-o', 'json'], { input: POLICY });
  assert.equal(r.code, 0, r.stderr);
  const result = JSON.parse(r.stdout) as { policies: string[]; regenerated: number[] };
  assert.deepEqual(result.policies, ['NetworkPolicy/prod/db-from-web']);
  assert.ok(result.regenerated.includes(db.id), 'the db endpoint was regenerated');

  const after = await agent.client.request<{ identity: number; entries: Array<{ key: { direction: string; identity: number } }>; datapathEnforced: boolean }>('GET', `/endpoint/${db.id}/policy`);
  assert.notDeepEqual(after.entries, before.entries);
  assert.ok(after.entries.some((e) => e.key.direction === 'ingress' && e.key.identity === web.identity), 'an ingress entry for the web identity');
  // The agent's default datapath is eBPF: the map state is in force on packets.
  assert.equal(after.datapathEnforced, true);

  const allowed = await cli('policy', 'trace', '--src', 'app=web,io.kubernetes.pod.namespace=prod', '--dst', 'app=db,io.kubernetes.pod.namespace=prod', '--dport', '5432/tcp');
  assert.equal(allowed.code, 0, allowed.stdout + allowed.stderr);
  assert.match(allowed.stdout, /Final verdict: ALLOW/);
  const denied = await cli('policy', 'trace', '--src', 'app=other,io.kubernetes.pod.namespace=prod', '--dst', 'app=db,io.kubernetes.pod.namespace=prod', '--dport', '5432/tcp');
  assert.equal(denied.code, 1);
  assert.match(denied.stdout, /Final verdict: (DENY|DROP)/i);

  const selectors = await cli('policy', 'selectors', '-o', 'json');
  assert.ok((JSON.parse(selectors.stdout) as Array<{ identities: number[] }>).some((s) => s.identities.includes(web.identity!)));
});

test('an invalid policy is rejected whole with a message naming the field', async () => {
  const bad = POLICY.replace('policyTypes: [Ingress]', 'policyTypes: [Sideways]');
  const r = await run([TENDRIL_BIN, 'policy', 'import', '-', '--socket', agent.socket], { input: bad });
  assert.equal(r.code, 1);
  assert.match(r.stderr, /policyTypes/);
});

test('delete needs a selection; by name it removes the policy', async () => {
  const none = await cli('policy', 'delete');
  assert.equal(none.code, 1);
  assert.match(none.stderr, /--all/);
  assert.doesNotMatch(none.stderr, /all=true/);
  const del = await cli('policy', 'delete', '--name', 'db-from-web', '--namespace', 'prod', '-o', 'json');
  assert.equal(del.code, 0, del.stderr);
  assert.deepEqual((JSON.parse(del.stdout) as { deleted: string[] }).deleted, ['NetworkPolicy/prod/db-from-web']);
  const get = JSON.parse((await cli('policy', 'get', '-o', 'json')).stdout) as { policies: unknown[] };
  assert.deepEqual(get.policies, []);
});
