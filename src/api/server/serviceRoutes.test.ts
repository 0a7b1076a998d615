// /v1/service served by the agent's server (every response checked against
// api/openapi.yaml) over the agent's own ServiceManager, the load-balancer
// maps the fake datapath's in-memory ones: what a bad body is told, 404,
// 409, 503, idempotent upserts, stable IDs, deletion, and the answer
// without the eBPF datapath.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { AgentClient, AgentResponseError } from '../../client/agentClient.js';
import type { ServiceSpec, ServiceStatus } from '../../service/types.js';
import { type ServiceApiServer, startServiceApiServer } from '../../agent/testing/serviceApiServer.js';

let server: ServiceApiServer;
let client: AgentClient;

before(async () => {
  server = await startServiceApiServer({ nodeName: 'tdl-svcapi', podCidr: '10.93.0.0/24' });
  client = new AgentClient({ socketPath: server.socket, timeoutMs: 10_000 });
});

after(() => server?.stop());

const spec = (over: Partial<ServiceSpec> = {}): ServiceSpec => ({
  'frontend-address': { ip: '10.96.0.10', port: 80, protocol: 'TCP' },
  'backend-addresses': [
    { ip: '10.93.0.5', port: 8080, weight: 1, state: 'active' },
    { ip: '10.93.0.6', port: 8080 },
  ],
  flags: { type: 'ClusterIP', trafficPolicy: 'Cluster', sessionAffinity: false, sessionAffinityTimeout: 10800 },
  ...over,
});

/** The error a request is answered with; fails when it succeeds. */
async function refusal(req: Promise<unknown>): Promise<AgentResponseError> {
  try {
    await req;
  } catch (err) {
    if (err instanceof AgentResponseError) return err;
    throw err;
  }
  assert.fail('the request succeeded');
}

async function expectRefused(req: Promise<unknown>, status: number, code: string, message: RegExp): Promise<void> {
  const err = await refusal(req);
  assert.equal(err.status, status, `${err.body.code}: ${err.message}`);
  assert.equal(err.body.code, code, err.message);
  assert.match(err.message, message);
}

describe('/v1/service', () => {
  test('PUT creates (201) with the defaults filled in; GET and the list show it; the maps hold it', async () => {
    const created = await client.request<ServiceStatus>('PUT', '/service/7', spec());
    assert.equal(created.id, 7);
    assert.deepEqual(created['frontend-address'], { ip: '10.96.0.10', port: 80, protocol: 'TCP' });
    assert.deepEqual(
      created['backend-addresses'].map((b) => [b.ip, b.port, b.weight, b.state]),
      [
        ['10.93.0.5', 8080, 1, 'active'],
        ['10.93.0.6', 8080, 1, 'active'],
      ],
    );
    assert.ok(created['backend-addresses'].every((b) => b.id > 0));
    assert.deepEqual(created.flags, { type: 'ClusterIP', trafficPolicy: 'Cluster', internalTrafficPolicy: 'Cluster', sessionAffinity: false, sessionAffinityTimeout: 10800, sourceRanges: [] });
    assert.equal(created.realized, true);
    assert.deepEqual(await client.getService(7), created);
    assert.deepEqual(await client.listServices(), [created]);
    const entry = server.lb.services.get(7);
    assert.equal(entry?.address, '10.96.0.10');
    assert.deepEqual(entry?.backendIds, created['backend-addresses'].map((b) => b.id));
  });

  test('the same body again is 200 and changes nothing; the ID and backend IDs stay', async () => {
    const first = await client.getService(7);
    const again = await client.putService(7, spec());
    assert.deepEqual(again, first);
    // What GET answers can be PUT back as it is.
    assert.deepEqual(await client.putService('7', first), first);
    // A changed backend list keeps the IDs of the backends that stay.
    const changed = await client.putService(7, spec({ 'backend-addresses': [{ ip: '10.93.0.6', port: 8080 }, { ip: '10.93.0.7', port: 8080, state: 'terminating' }] }));
    assert.equal(changed.id, 7);
    assert.equal(changed['backend-addresses'][0]!.id, first['backend-addresses'][1]!.id);
    assert.equal(changed['backend-addresses'][1]!.state, 'terminating');
    assert.deepEqual(server.lb.services.get(7)?.backendIds, [changed['backend-addresses'][0]!.id], 'only the active backend takes new connections');
    // The body's ID may be given; it must be the path's.
    assert.equal((await client.putService(7, spec({ id: 7 }))).id, 7);
  });

  test('a body the document refuses: 400 INVALID_REQUEST naming the field', async () => {
    const put = (body: unknown) => client.request('PUT', '/service/8', body);
    const { flags, ...noFlags } = spec();
    void flags;
    await expectRefused(put(noFlags), 400, 'INVALID_REQUEST', /flags/);
    await expectRefused(put({ ...spec(), tdlExtra: 1 }), 400, 'INVALID_REQUEST', /tdlExtra/);
    await expectRefused(put(spec({ 'frontend-address': { ip: '10.96.0.11', port: 70000, protocol: 'TCP' } })), 400, 'INVALID_REQUEST', /frontend-address\/port/);
    await expectRefused(put({ ...spec(), 'frontend-address': { ip: '10.96.0.11', port: 80, protocol: 'ICMP' } }), 400, 'INVALID_REQUEST', /protocol.*TCP/);
    await expectRefused(put({ ...spec(), 'backend-addresses': [{ ip: '10.93.0.5', port: 80, state: 'gone' }] }), 400, 'INVALID_REQUEST', /backend-addresses\/0\/state.*active/);
    await expectRefused(put({ ...spec(), 'backend-addresses': [{ ip: '10.93.0.5', port: 80, weight: -1 }] }), 400, 'INVALID_REQUEST', /weight/);
    await expectRefused(put({ ...spec(), flags: { type: 'Headless' } }), 400, 'INVALID_REQUEST', /flags\/type.*ClusterIP/);
    await expectRefused(put({ ...spec(), flags: { type: 'ClusterIP', sessionAffinity: true, sessionAffinityTimeout: 0 } }), 400, 'INVALID_REQUEST', /sessionAffinityTimeout/);
    await expectRefused(put({ ...spec(), 'backend-addresses': {} }), 400, 'INVALID_REQUEST', /backend-addresses must be array/);
    await expectRefused(put([]), 400, 'INVALID_REQUEST', /object/);
    assert.equal(server.services.get(8), undefined, 'nothing was created');
  });

  test('a service tendril cannot serve: 400 SERVICE_INVALID naming the field', async () => {
    const put = (body: unknown, id: string | number = 8) => client.request('PUT', `/service/${id}`, body);
    const fe = (ip: string, protocol = 'TCP') => ({ 'frontend-address': { ip, port: 80, protocol } });
    await expectRefused(put({ ...spec(), ...fe('10.96.0') }), 400, 'SERVICE_INVALID', /frontend-address\.ip: "10\.96\.0" is not an IP address/);
    await expectRefused(put({ ...spec(), ...fe('fd00::10') }), 400, 'SERVICE_INVALID', /backend-addresses\[0\]\.ip: 10\.93\.0\.5 is not IPv6 like the frontend fd00::10 \(a service is one family\)/);
    await expectRefused(put({ ...spec(), ...fe('127.0.0.1') }), 400, 'SERVICE_INVALID', /frontend-address\.ip: 127\.0\.0\.1 is a loopback address/);
    await expectRefused(put({ ...spec(), ...fe('10.96.0.11', 'SCTP') }), 400, 'SERVICE_INVALID', /frontend-address\.protocol: SCTP services are not supported/);
    await expectRefused(put(spec({ 'backend-addresses': [{ ip: '10.93.0.5', port: 80 }, { ip: '10.93.0.5', port: 80 }] })), 400, 'SERVICE_INVALID', /backend-addresses\[1\]: duplicate of backend-addresses\[0\]/);
    await expectRefused(put(spec({ 'backend-addresses': [{ ip: '224.0.0.5', port: 80 }] })), 400, 'SERVICE_INVALID', /backend-addresses\[0\]\.ip: 224\.0\.0\.5 is a multicast address/);
    await expectRefused(put(spec({ flags: { type: 'ClusterIP', trafficPolicy: 'Local' } })), 400, 'SERVICE_INVALID', /flags\.trafficPolicy: Local applies to NodePort/);
    await expectRefused(put(spec({ id: 9 })), 400, 'SERVICE_INVALID', /id: the body's ID 9 is not the path's 8/);
    for (const bad of ['0', '65536', 'web', '-1']) await expectRefused(put(spec(), bad), 400, 'SERVICE_INVALID', /invalid service ID .*1 to 65535/);
    await expectRefused(client.getService('x'), 400, 'SERVICE_INVALID', /invalid service ID "x"/);
    await expectRefused(client.deleteService(0), 400, 'SERVICE_INVALID', /invalid service ID "0"/);
    assert.equal(server.services.get(8), undefined, 'nothing was created');
  });

  test('404 for a service that does not exist', async () => {
    await expectRefused(client.getService(4242), 404, 'SERVICE_NOT_FOUND', /service 4242 not found/);
    await expectRefused(client.deleteService(4242), 404, 'SERVICE_NOT_FOUND', /service 4242 not found/);
  });

  test('409 when the frontend belongs to another ID; the other service is untouched', async () => {
    const before7 = await client.getService(7);
    await expectRefused(client.putService(8, spec()), 409, 'SERVICE_CONFLICT', /10\.96\.0\.10:80\/TCP already belongs to service 7/);
    assert.deepEqual(await client.getService(7), before7);
    await expectRefused(client.getService(8), 404, 'SERVICE_NOT_FOUND', /service 8 not found/);
    // The same address and port over UDP is another frontend.
    const udp = await client.putService(8, spec({ 'frontend-address': { ip: '10.96.0.10', port: 80, protocol: 'UDP' } }));
    assert.equal(udp['frontend-address'].protocol, 'UDP');
  });

  test('503 when the maps do not take the service; nothing changed', async () => {
    const before7 = await client.getService(7);
    server.lb.failNext('upsertBackends', new Error('tdl: map full'));
    await expectRefused(client.putService(7, spec({ 'backend-addresses': [{ ip: '10.93.0.9', port: 8080 }] })), 503, 'SERVICE_DATAPATH_FAILED', /map full/);
    assert.deepEqual((await client.getService(7))['backend-addresses'], before7['backend-addresses']);
  });

  test('DELETE removes the service and its entries; the ID can be used again', async () => {
    assert.deepEqual(await client.deleteService(8), { deleted: 8 });
    await expectRefused(client.getService(8), 404, 'SERVICE_NOT_FOUND', /not found/);
    assert.equal(server.lb.services.has(8), false);
    assert.deepEqual((await client.listServices()).map((s) => s.id), [7]);
    assert.deepEqual(await client.deleteService(7), { deleted: 7 });
    assert.deepEqual(await client.listServices(), []);
    assert.equal(server.lb.backends.size, 0, 'backends no service uses are gone');
    const again = await refusal(client.deleteService(7));
    assert.equal(again.status, 404);
    assert.equal((await client.request<ServiceStatus>('PUT', '/service/7', spec())).id, 7);
    await client.deleteService(7);
  });

  test('without the eBPF datapath: 409 SERVICE_UNSUPPORTED on every route', async () => {
    const plain = new AgentClient({ socketPath: server.socketWithoutServices, timeoutMs: 10_000 });
    for (const op of [() => plain.listServices(), () => plain.getService(1), () => plain.putService(1, spec()), () => plain.deleteService(1), () => plain.applyServices({ changes: [{ delete: 1 }] })]) {
      await expectRefused(op(), 409, 'SERVICE_UNSUPPORTED', /services need the eBPF datapath/);
    }
  });

  test('PATCH: a batch answers each change\'s outcome; a body of the wrong shape is a 400 that changes nothing', async () => {
    const r = await client.applyServices({
      changes: [{ upsert: { ...spec(), id: 21 } }, { upsert: { ...spec({ 'frontend-address': { ip: '10.96.0.22', port: 80, protocol: 'TCP' } }), id: 22 } }, { upsert: { ...spec(), id: 23 } }, { delete: 24 }],
    });
    assert.equal(r.failed, 1);
    assert.deepEqual(r.results.map((x) => [x.id, x.op, x.result, x.error?.code]), [
      [21, 'upsert', 'created', undefined],
      [22, 'upsert', 'created', undefined],
      [23, 'upsert', 'failed', 'SERVICE_CONFLICT'],
      [24, 'delete', 'not-found', undefined],
    ]);
    assert.equal((await client.getService(21)).realized, true);
    const before = await client.listServices();
    await expectRefused(client.request('PATCH', '/service', { changes: [{ delete: 21 }, { upsert: { ...spec(), id: 25 }, delete: 21 }] }), 400, 'INVALID_REQUEST', /changes\/1/);
    await expectRefused(client.request('PATCH', '/service', { changes: [] }), 400, 'INVALID_REQUEST', /must NOT have fewer than 1 items/);
    const tooMany = Array.from({ length: 65 }, (_, j) => ({ ip: `10.93.1.${j}`, port: 80 }));
    await expectRefused(client.request('PATCH', '/service', { changes: [{ upsert: { ...spec({ 'backend-addresses': tooMany }), id: 26 } }] }), 400, 'INVALID_REQUEST', /must NOT have more than 64 items/);
    assert.deepEqual(await client.listServices(), before);
    assert.deepEqual((await client.applyServices({ changes: [{ delete: 21 }, { delete: 22 }] })).results.map((x) => x.result), ['deleted', 'deleted']);
  });
});
