// The client covers api/openapi.yaml: a method for every operation (and an
// operation for every method), and every method works against a real agent
// (fake datapath, no root) that checks each response against the document.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { OpenApiSchemas } from '../api/server/openapiSchemas.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../agent/testing/fakeNodeAgent.js';
import { VALIDATE_RESPONSES_ENV } from '../api/types.js';
import type { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { dbFromWebPolicy } from '../policy/testing/policies.js';
import { AgentClient, AgentResponseError, CLIENT_METHODS } from './agentClient.js';

/** AgentClient's methods that are not operations: the raw request the typed ones go through. */
const NOT_OPERATIONS = new Set(['constructor', 'request']);

test('CLIENT_METHODS maps every operationId of api/openapi.yaml to a client method, and every client method to an operation', () => {
  const operationIds = new OpenApiSchemas().operations().map((o) => o.operationId);
  assert.deepEqual(Object.keys(CLIENT_METHODS).sort(), [...operationIds].sort(), 'the table names exactly the document\'s operations');
  const methods = Object.getOwnPropertyNames(AgentClient.prototype).filter((m) => !NOT_OPERATIONS.has(m));
  for (const m of Object.values(CLIENT_METHODS)) assert.equal(typeof AgentClient.prototype[m], 'function', `AgentClient.${m}`);
  assert.deepEqual([...methods].sort(), [...new Set(Object.values(CLIENT_METHODS))].sort(), 'every method is some operation\'s');
});

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlclient', type: 'tendril-cni' });
const POLICY = dbFromWebPolicy({ namespace: 'default' });

let node: FakeNodeAgent | undefined;
let datapath: FakeDatapath;
let client: AgentClient;
const called = new Set<string>();

before(async () => {
  // The agent's own server checks its responses, as under the e2e harness.
  process.env[VALIDATE_RESPONSES_ENV] = '1';
  node = await startFakeNodeAgent({ nodeName: 'tdl-client', podCidr: '10.90.0.0/24' });
  datapath = node.datapath;
  const raw = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
  // Records which methods the test calls, so it can show it called them all.
  client = new Proxy(raw, {
    get(target, prop, receiver) {
      const v: unknown = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || typeof prop !== 'string') return v;
      called.add(prop);
      return (v as (...a: unknown[]) => unknown).bind(target);
    },
  });
});

after(async () => {
  await node?.stop();
});

test('every client method works against the agent, and every answer matches the document', async () => {
  const health = await client.health();
  assert.equal(health.status, 'ok');
  const status = await client.status();
  assert.equal(status.nodeName, health.nodeName);
  assert.equal(status.kubernetes, undefined, 'Kubernetes is off');
  assert.equal((await client.getConfig()).nodeName, 'tdl-client');
  assert.equal((await client.patchConfig({ ipamExpiration: 30_000 })).ipamExpiration, 30_000);
  assert.match(await client.metrics(), /^# HELP tendril_/m);

  const provisional = await client.postIpam({ owner: 'tdl-manual', family: 'ipv4' }, { expiration: true });
  assert.ok(provisional.address.expiresAt !== undefined, 'the expiration header makes it provisional');
  const fixed = await client.postIpamIp('10.90.0.77', { owner: 'tdl-fixed' });
  assert.equal(fixed.address.ip, '10.90.0.77');
  assert.ok((await client.listIpam()).allocations.some((a) => a.ip === '10.90.0.77'));
  assert.deepEqual(await client.deleteIpamIp('10.90.0.77'), { released: '10.90.0.77' });
  await client.deleteIpamIp(provisional.address.ip);

  datapath.addNetns('/var/run/netns/tdlclient0');
  const args = 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;TENDRIL_LABELS=app=web';
  const cniReq = { containerId: 'tdl-web', netns: '/var/run/netns/tdlclient0', ifName: 'eth0', args, path: '/opt/cni/bin', config: CONF };
  await client.cni({ command: 'ADD', ...cniReq });
  const [web] = await client.listEndpoints();
  assert.equal(web?.containerId, 'tdl-web');
  const byRef = await client.getEndpoint('pod-name:default:web');
  assert.equal(byRef.id, web!.id);
  const relabelled = await client.patchEndpointLabels(web!.id, { add: ['tier=front'] });
  assert.ok(relabelled.labels.includes('k8s:tier=front'));

  const identities = await client.listIdentities();
  assert.ok(identities.some((i) => i.id === relabelled.identity));
  assert.deepEqual((await client.getIdentity(relabelled.identity!)).labels, relabelled.identityLabels);
  assert.ok((await client.listIpcache()).some((e) => e.identity === relabelled.identity));

  // A pod someone else plumbed, adopted with an address allocated to it first.
  datapath.addNetns('/var/run/netns/tdlclient1');
  datapath.createVethPair('tdlhost1', '/var/run/netns/tdlclient1', 'eth0');
  const dbAddress = await client.postIpam({ owner: 'tdl-db' });
  const db = await client.putEndpoint('container-id:tdl-db', {
    containerId: 'tdl-db',
    ifName: 'eth0',
    netns: '/var/run/netns/tdlclient1',
    hostIfName: 'tdlhost1',
    addresses: [dbAddress.address.ip],
    labels: ['k8s:app=db'],
    podNamespace: 'default',
    podName: 'db',
  });
  assert.equal(db.hostIfName, 'tdlhost1');

  // Staged first, then promoted: enforced from then on.
  const staged = await client.putPolicy({ text: POLICY, staged: true });
  assert.deepEqual(staged.policies, ['NetworkPolicy/default/db-from-web']);
  assert.deepEqual((await client.promotePolicy({ all: true })).promoted, ['NetworkPolicy/default/db-from-web']);
  const imported = await client.putPolicy({ text: POLICY });
  assert.deepEqual(imported.policies, ['NetworkPolicy/default/db-from-web']);
  assert.equal((await client.getPolicy({ namespace: 'default' })).policies.length, 1);
  assert.ok((await client.getPolicySelectors()).length > 0);
  const trace = await client.tracePolicy({ src: ['app=web'], dst: ['app=db'], dport: '5432/tcp' });
  assert.equal(trace.verdict, 'allow');
  const dbPolicy = await client.getEndpointPolicy(db.id);
  assert.equal(dbPolicy.enforcement.ingress.enforced, true);
  assert.deepEqual((await client.deletePolicy({ all: true })).deleted, ['NetworkPolicy/default/db-from-web']);
  // Nothing lost: confirming changes nothing.
  assert.deepEqual((await client.confirmPolicyLoss()).dropped, []);

  // The node registry: this node alone, and 404 for a name it does not hold.
  const [self] = await client.listNodes();
  assert.equal(self?.name, 'tdl-client');
  assert.equal(self?.local, true);
  assert.equal((await client.getNode('tdl-client')).name, 'tdl-client');
  await assert.rejects(client.getNode('tdl-nobody'), (err: unknown) => err instanceof AgentResponseError && err.status === 404 && err.body.code === 'NOT_FOUND');

  // The kvstore, read-only: the node's own record is there; a key nobody wrote is 404.
  const kvs = await client.listKvstoreKeys('tendril/');
  const nodeKey = kvs.kvs.find((k) => k.key.includes('tdl-client'));
  assert.ok(nodeKey, kvs.kvs.map((k) => k.key).join(', '));
  // The record may be republished between the two reads: the key is what must match.
  assert.equal((await client.getKvstoreKey(nodeKey.key)).key, nodeKey.key);
  await assert.rejects(client.getKvstoreKey('tendril/tdl-nobody'), (err: unknown) => err instanceof AgentResponseError && err.status === 404 && err.body.code === 'NOT_FOUND');

  assert.deepEqual(await client.deleteEndpoint(db.id), { deleted: db.id });
  await client.cni({ command: 'DEL', ...cniReq });
  assert.deepEqual(await client.listEndpoints(), []);

  // The fake datapath loads no eBPF programs: the monitor and map operations answer 409 saying so (bpfRoutes.test.ts serves real maps).
  const noBpf = [
    () => client.monitorEvents({ type: ['drop'] }, () => undefined),
    () => client.listFlows([['verdict', 'dropped']], () => undefined),
    () => client.listBpfEndpoints(),
    () => client.listBpfIpcache(),
    () => client.getBpfPolicy(1),
    () => client.listBpfConntrack({ endpoint: 1 }),
    () => client.flushBpfConntrack(),
    () => client.gcBpfConntrack(),
    () => client.listBpfMetrics(),
    () => client.listBpfLoadBalancer(),
    () => client.listBpfNat(),
  ];
  for (const op of noBpf) await assert.rejects(op(), (err: unknown) => err instanceof AgentResponseError && err.status === 409 && /eBPF datapath is not running/.test(err.message));
  // Nor does it load-balance: services answer 409 SERVICE_UNSUPPORTED (serviceRoutes.test.ts serves them over the fake load balancer).
  const service = { 'frontend-address': { ip: '10.96.0.10', port: 80, protocol: 'TCP' as const }, 'backend-addresses': [], flags: { type: 'ClusterIP' as const } };
  const noServices = [() => client.listServices(), () => client.getService(1), () => client.putService(1, service), () => client.applyServices({ changes: [{ upsert: { ...service, id: 1 } }] }), () => client.deleteService(1)];
  for (const op of noServices) await assert.rejects(op(), (err: unknown) => err instanceof AgentResponseError && err.status === 409 && err.body.code === 'SERVICE_UNSUPPORTED');

  assert.deepEqual(
    Object.values(CLIENT_METHODS).filter((m) => !called.has(m)),
    [],
    'every operation was called',
  );
});

test('an error answer is an AgentResponseError with the document\'s ErrorResponse', async () => {
  await assert.rejects(client.getEndpoint(4242), (err: unknown) => {
    assert.ok(err instanceof AgentResponseError);
    assert.equal(err.status, 404);
    assert.equal(err.body.code, 'NOT_FOUND');
    return true;
  });
  await assert.rejects(client.deletePolicy({}), (err: unknown) => err instanceof AgentResponseError && err.status === 400 && /all=true/.test(err.message));
});

test('a request path longer than the agent could parse is refused before anything is sent', async () => {
  // Sent, such a request got a 431 and a closed connection mid-body: an EPIPE that escaped the promise.
  const unsent = new AgentClient({ socketPath: '/nonexistent/tendril.sock' });
  await assert.rejects(unsent.request('PUT', `/endpoint/${'%61'.repeat(140_000)}`, {}), RangeError);
});
