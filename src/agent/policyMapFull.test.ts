// A map state beyond the per-endpoint policy entry limit (--bpf-policy-endpoint-max)
// fails the endpoint's regeneration with an error the API shows; the datapath keeps
// exactly what it held, and the endpoint recovers once the policy fits again.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../../test/support/run.js';
import type { CniRequest } from '../api/types.js';
import { VALIDATE_RESPONSES_ENV } from '../api/types.js';
import { CLI_MAIN } from '../cli/testing/cliProcess.js';
import { dbFromWebPolicy } from '../policy/testing/policies.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlpolicyfull', type: 'tendril-cni' });
const LIMIT = 4;

/** db admits web on six ports: six ingress entries, plus db's own not-enforced egress and allow-localhost. */
const WIDE = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-many-ports, namespace: default }
spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress:
    - from: [ { podSelector: { matchLabels: { app: web } } } ]
      ports: [ { port: 5001 }, { port: 5003 }, { port: 5005 }, { port: 5007 }, { port: 5009 }, { port: 5011 } ]
`;

let node: FakeNodeAgent;
let pods = 0;

async function addPod(containerId: string, labels: string): Promise<number> {
  const netns = `/var/run/netns/tdlpolicyfull${pods++}`;
  node.datapath.addNetns(netns);
  const req: CniRequest = { command: 'ADD', containerId, netns, ifName: 'eth0', args: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${containerId};TENDRIL_LABELS=${labels}`, config: CONF };
  await node.agent.api().cni.handle(req);
  return node.agent.api().endpoints.lookup(`container-id:${containerId}`)!.id;
}

async function until(what: string, cond: () => boolean): Promise<void> {
  const end = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

before(async () => {
  // Every answer of the agent's API is checked against api/openapi.yaml (the new notReady field included).
  process.env[VALIDATE_RESPONSES_ENV] = '1';
  node = await startFakeNodeAgent({ nodeName: 'tdl-policyfull', podCidr: '10.93.0.0/24', policyEndpointMaxEntries: LIMIT });
});

after(async () => {
  await node?.stop();
});

test('a policy beyond the per-endpoint limit: the endpoint is not-ready with the reason, its datapath state unchanged; it recovers when the policy goes', async () => {
  const db = await addPod('tdl-pf-db', 'app=db');
  await addPod('tdl-pf-web', 'app=web');
  const status = () => node.agent.api().endpoints.lookup(String(db))!;
  await node.agent.api().policy.import(dbFromWebPolicy({ namespace: 'default', tcpPort: 5432 }));
  await until('db realizes the small policy', () => status().state === 'ready' && status().policyRevision === node.agent.api().policy.revision);
  const held = JSON.stringify(node.datapath.endpointState(db)!.policy.entries);
  assert.ok(node.datapath.endpointState(db)!.policy.entries.length <= LIMIT);

  await node.agent.api().policy.import(WIDE);
  await until('db fails its regeneration', () => status().state === 'not-ready');
  const failed = status();
  assert.match(failed.regenerationError ?? '', /policy map|entries/i, failed.regenerationError);
  assert.match(failed.regenerationError ?? '', new RegExp(String(LIMIT)));
  assert.equal(JSON.stringify(node.datapath.endpointState(db)!.policy.entries), held, 'the datapath keeps exactly what it held: nothing half-written');
  assert.ok(failed.policyRevision < node.agent.api().policy.revision, 'the realized revision stays behind');
  const computed = node.agent.api().policy.endpointPolicy(db);
  assert.ok(computed.error, 'GET /endpoint/{id}/policy names the overflow too');

  await node.agent.api().policy.delete({ name: 'db-many-ports', namespace: 'default' });
  await until('db is ready again', () => status().state === 'ready');
  assert.equal(JSON.stringify(node.datapath.endpointState(db)!.policy.entries), held);
});

test('`tendril policy import` says which endpoints went not-ready and why, not "regenerated"; so do the API and -o json', async () => {
  const api = node.agent.api();
  const db = api.endpoints.lookup('container-id:tdl-pf-db')!.id;
  const status = () => api.endpoints.lookup(String(db))!;
  await until('db is ready with the small policy', () => status().state === 'ready');
  const cli = (args: string[], input: string) => run([process.execPath, CLI_MAIN, 'policy', ...args, '--socket', node.config.socket], { input });

  const text = await cli(['import', '-'], WIDE);
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /^Endpoints regenerated: 0$/m, text.stdout);
  assert.match(text.stdout, /^Endpoints NOT ready: 1 \(their previous policy stays in force\)$/m, text.stdout);
  assert.match(text.stdout, new RegExp(`^  endpoint ${db}: its policy needs \\d+ policy map entries, the limit is ${LIMIT} \\(--bpf-policy-endpoint-max\\)`, 'm'), text.stdout);
  await until('db is not-ready', () => status().state === 'not-ready');

  // Deleting the wide policy regenerates db: it is named among the regenerated and no longer not-ready.
  const del = await cli(['delete', '--name', 'db-many-ports', '--namespace', 'default', '-o', 'json'], '');
  assert.equal(del.code, 0, del.stderr);
  const deleted = JSON.parse(del.stdout) as { regenerated: number[]; notReady: unknown[] };
  assert.deepEqual(deleted.notReady, []);
  assert.ok(deleted.regenerated.includes(db), del.stdout);
  await until('db is ready again', () => status().state === 'ready');

  const json = await cli(['import', '-', '-o', 'json'], WIDE);
  assert.equal(json.code, 0, json.stderr);
  const body = JSON.parse(json.stdout) as { regenerated: number[]; notReady: Array<{ endpoint: number; reason: string }> };
  assert.deepEqual(body.regenerated, [], 'db is not counted as regenerated');
  assert.deepEqual(body.notReady.map((n) => n.endpoint), [db]);
  assert.match(body.notReady[0]!.reason, new RegExp(`the limit is ${LIMIT}`));
  await api.policy.delete({ name: 'db-many-ports', namespace: 'default' });
  await until('db is ready at the end', () => status().state === 'ready');
});
