// The API refuses what its document (api/openapi.yaml) and
// the node's safety do not allow, with a 4xx and nothing changed — over a real
// agent on the fake datapath (no root). The uplink case runs again with a real
// agent and kernel in test/e2e/hardeningApi.test.ts.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { ErrorResponse } from '../types.js';
import { DatapathError } from '../../datapath/types.js';
import { IdentityError, parseIdentityNumber } from '../../identity/index.js';
import { toAgentError } from '../errorMapping.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../../agent/testing/fakeNodeAgent.js';
import { type AgentApi, buildServer } from './server.js';

let node: FakeNodeAgent;
let api: AgentApi;
let app: FastifyInstance;
let router: string;

before(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-hard', podCidr: '10.91.0.0/24' });
  api = node.agent.api();
  app = buildServer(api, { validateResponses: true });
  await app.ready();
  router = (await api.ipam.list()).find((a) => a.owner.startsWith('tendril:router:'))?.ip ?? '';
  assert.notEqual(router, '', 'the node has a router address');
});

after(async () => {
  await app?.close();
  await node?.stop();
});

const json = { 'content-type': 'application/json' };

async function call(method: 'GET' | 'PUT' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown): Promise<{ status: number; body: ErrorResponse & Record<string, unknown> }> {
  const r = await app.inject({ method, url, ...(payload === undefined ? {} : { headers: json, payload: typeof payload === 'string' ? payload : JSON.stringify(payload) }) });
  return { status: r.statusCode, body: r.json() };
}

/** An address allocated to `owner` through POST /ipam. */
async function allocate(owner: string): Promise<string> {
  const r = await call('POST', `/v1/ipam?owner=${owner}`);
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return (r.body.address as { ip: string }).ip;
}

/** The node's links, routes and endpoints: a refused call changes none of them. */
async function snapshot(): Promise<unknown> {
  return {
    links: node.datapath.linkNames(),
    routes: node.datapath.hostRoutes(),
    endpoints: api.endpoints.list().map((e) => e.id),
    allocations: (await api.ipam.list()).map((a) => `${a.owner}=${a.ip}`).sort(),
  };
}

describe('request bodies are held to the document', () => {
  test('PATCH /config with a field the document does not name is 400 and changes nothing', async () => {
    const before = api.health.config();
    const r = await call('PATCH', '/v1/config', { bogus: 1 });
    assert.equal(r.status, 400);
    assert.equal(r.body.code, 'INVALID_REQUEST');
    assert.deepEqual(api.health.config(), before);
  });

  test('PATCH /config with ipamExpirationMs as a string is 400 and not applied', async () => {
    const before = api.health.config();
    const r = await call('PATCH', '/v1/config', { ipamExpirationMs: '5000' });
    assert.equal(r.status, 400);
    assert.deepEqual(api.health.config(), before);
  });

  test('a label that is a number is 400, never "k8s:5"', async () => {
    const pod = '/var/run/netns/tdl-hard-labels';
    node.datapath.addNetns(pod);
    node.datapath.createVethPair('tdlhardl0', pod, 'eth0');
    const ip = await allocate('tdl-labels');
    const body = { containerId: 'tdl-labels', ifName: 'eth0', netns: pod, hostIfName: 'tdlhardl0', addresses: [ip] };
    const before = await snapshot();
    const put = await call('PUT', '/v1/endpoint/container-id:tdl-labels', { ...body, labels: [5] });
    assert.equal(put.status, 400, JSON.stringify(put.body));
    assert.deepEqual(await snapshot(), before);
    const created = await call('PUT', '/v1/endpoint/container-id:tdl-labels', { ...body, labels: ['app=x'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const patch = await call('PATCH', '/v1/endpoint/container-id:tdl-labels/labels', { add: [5] });
    assert.equal(patch.status, 400);
    const ep = api.endpoints.lookup('container-id:tdl-labels')!;
    assert.ok(!ep.labels.some((l) => l.endsWith(':5')), ep.labels.join(','));
    assert.equal((await call('DELETE', '/v1/endpoint/container-id:tdl-labels')).status, 200);
  });
});

describe('the router address is the node\'s gateway, not an allocation to hand around', () => {
  test('DELETE /ipam/<router address> is refused with 409 and the address stays the router\'s', async () => {
    const r = await call('DELETE', `/v1/ipam/${router}`);
    assert.equal(r.status, 409, JSON.stringify(r.body));
    assert.equal(r.body.code, 'CONFLICT');
    assert.match(r.body.message, /router/);
    assert.equal((await api.ipam.list()).find((a) => a.ip === router)?.owner.startsWith('tendril:router:'), true);
  });

  test('POST /ipam/<router address> is refused with 409', async () => {
    const r = await call('POST', `/v1/ipam/${router}?owner=tdl-thief`);
    assert.equal(r.status, 409, JSON.stringify(r.body));
    assert.equal(r.body.code, 'CONFLICT');
    assert.equal((await api.ipam.list()).find((a) => a.ip === router)?.owner.startsWith('tendril:router:'), true);
  });
});

describe('PUT /endpoint adopts only a veth whose peer is in the pod\'s namespace', () => {
  test('the node\'s uplink as hostIfName is 400 and nothing changes; the uplink is still there', async () => {
    const pod = '/var/run/netns/tdl-hard-uplink';
    node.datapath.addNetns(pod);
    const ip = await allocate('tdl-uplink');
    const before = await snapshot();
    const r = await call('PUT', '/v1/endpoint/container-id:tdl-uplink', { containerId: 'tdl-uplink', ifName: 'eth0', netns: pod, hostIfName: 'eth0', addresses: [ip] });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.code, 'INVALID_REQUEST');
    assert.match(r.body.message, /eth0/);
    assert.deepEqual(await snapshot(), before);
    assert.ok(node.datapath.linkNames()!.includes('eth0'));
    assert.ok(!node.datapath.hostRoutes().some((rt) => rt.dev === 'eth0'), 'no route over the uplink');
  });

  test('tendril_host, a veth whose peer is in another pod\'s namespace, and a pod-side name that does not match are 400', async () => {
    const pod = '/var/run/netns/tdl-hard-mine';
    const other = '/var/run/netns/tdl-hard-other';
    node.datapath.addNetns(pod);
    node.datapath.addNetns(other);
    node.datapath.createVethPair('tdlhardo0', other, 'eth0');
    node.datapath.createVethPair('tdlhardm0', pod, 'eth1');
    const ip = await allocate('tdl-mine');
    const before = await snapshot();
    for (const [hostIfName, why] of [['tendril_host', /tendril_host/], ['tdlhardo0', /tdlhardo0/], ['tdlhardm0', /eth1|eth0/], ['tdlnosuch0', /tdlnosuch0/]] as const) {
      const r = await call('PUT', '/v1/endpoint/container-id:tdl-mine', { containerId: 'tdl-mine', ifName: 'eth0', netns: pod, hostIfName, addresses: [ip] });
      assert.equal(r.status, 400, `${hostIfName}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.message, why);
      assert.deepEqual(await snapshot(), before, hostIfName);
    }
  });

  test('DELETE of an adopted endpoint removes its host routes and leaves the interface, which tendril did not create', async () => {
    const pod = '/var/run/netns/tdl-hard-adopt';
    node.datapath.addNetns(pod);
    node.datapath.createVethPair('tdlharda0', pod, 'eth0');
    const ip = await allocate('tdl-adopt');
    const r = await call('PUT', '/v1/endpoint/container-id:tdl-adopt', { containerId: 'tdl-adopt', ifName: 'eth0', netns: pod, hostIfName: 'tdlharda0', addresses: [ip] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(node.datapath.hostRoutes().find((rt) => rt.dst === `${ip}/32`)?.dev, 'tdlharda0');
    const d = await call('DELETE', '/v1/endpoint/container-id:tdl-adopt');
    assert.equal(d.status, 200, JSON.stringify(d.body));
    assert.ok(node.datapath.linkNames()!.includes('tdlharda0'), 'the adopted host interface stays');
    assert.ok(node.datapath.linkNames(pod)!.includes('eth0'), 'the pod side stays');
    assert.equal(node.datapath.hostRoutes().find((rt) => rt.dst === `${ip}/32`), undefined, 'the host route went');
  });
});

describe('identities and policy documents', () => {
  test('GET /identity/4294967295 is 400, not 503', async () => {
    const r = await call('GET', '/v1/identity/4294967295');
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.code, 'INVALID_REQUEST');
  });

  test('an identity number out of range is the caller\'s fault wherever it surfaces: INVALID_REQUEST (400), never TRY_AGAIN (503)', () => {
    let err: unknown;
    try {
      parseIdentityNumber('4294967295');
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof IdentityError);
    const mapped = toAgentError(err);
    assert.deepEqual([mapped.code, mapped.httpStatus], ['INVALID_REQUEST', 400]);
  });

  test('a datapath refusal is INVALID_REQUEST (400), not DATAPATH_FAILED (500)', () => {
    const mapped = toAgentError(new DatapathError('refused', 'refusing to adopt eth0: it is not a veth'));
    assert.deepEqual([mapped.code, mapped.httpStatus], ['INVALID_REQUEST', 400]);
  });

  test('a YAML alias bomb in PUT /policy is 400, quickly, with bounded memory', async () => {
    const lines = ['a0: &a0 [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 1; i < 12; i++) lines.push(`a${i}: &a${i} [${Array.from({ length: 10 }, () => `*a${i - 1}`).join(', ')}]`);
    const text = lines.join('\n');
    const heapBefore = process.memoryUsage().heapUsed;
    const started = Date.now();
    const r = await call('PUT', '/v1/policy', { text });
    const ms = Date.now() - started;
    assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 300));
    assert.equal(r.body.code, 'INVALID_REQUEST');
    assert.match(r.body.message, /alias/i);
    assert.ok(ms < 2000, `answered in ${ms} ms`);
    assert.ok(process.memoryUsage().heapUsed - heapBefore < 200 * 1024 * 1024, 'memory stayed bounded');
  });
});
