// The API server as the agent builds it, over a real Agent on the fake
// datapath (no root): it serves exactly the operations of api/openapi.yaml,
// takes each operation's longest schema-valid body and not a byte more, and
// in validation mode turns a response the document does not describe into a
// loud 500.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import type { ErrorResponse, Health } from '../types.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../../agent/testing/fakeNodeAgent.js';
import { OpenApiSchemas } from './openapiSchemas.js';
import { RESPONSE_MISMATCH } from './responseValidator.js';
import { type AgentApi, buildServer, servedRoutes } from './server.js';
import { longestBody } from './testing/longestBody.js';

const spec = new OpenApiSchemas();
let node: FakeNodeAgent | undefined;
let api: AgentApi;
let app: FastifyInstance;

before(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-api', podCidr: '10.89.0.0/24' });
  api = node.agent.api();
  app = buildServer(api, { validateResponses: true });
  await app.ready();
});

after(async () => {
  await app?.close();
  await node?.stop();
});

/** An operation's URL with its path parameters filled in. */
const urlOf = (operationId: string, id = '1'): string => spec.operationById(operationId).url.replace(/:(\w+)/g, id);

describe('routes', () => {
  test('the server serves every operation of api/openapi.yaml and nothing else', () => {
    const served = servedRoutes(app);
    assert.deepEqual(spec.compareRoutes(served), { unserved: [], undocumented: [] });
    assert.equal(served.length, spec.operations().length);
  });

  test('the comparison names an operation that is not served and a route the document does not describe', () => {
    const served = servedRoutes(app).filter((r) => !(r.method === 'GET' && r.url === '/v1/ip'));
    assert.deepEqual(spec.compareRoutes([...served, { method: 'GET', url: '/v1/tdl-extra' }]), { unserved: ['GET /v1/ip (listIpcache)'], undocumented: ['GET /v1/tdl-extra'] });
  });
});

describe('body limits', () => {
  const withBody = spec.operations().filter((o) => spec.body(o.path, o.method));

  for (const op of withBody) {
    test(`${op.operationId}: the longest body its schema admits gets past the limit; one byte more is refused with 413`, async () => {
      const limit = spec.bodyLimit(op.path, op.method)!;
      const body = longestBody(spec.body(op.path, op.method)!);
      assert.equal(Buffer.byteLength(body), limit);
      const method = op.method.toUpperCase() as 'PUT';
      const headers = { 'content-type': 'application/json' };
      const atLimit = await app.inject({ method, url: urlOf(op.operationId, 'container-id:tdl-limit'), headers, payload: body });
      // Past the limit and the schema, the handler decides (most refuse astral-character names); the response matched the document.
      assert.notEqual(atLimit.statusCode, 413, atLimit.body.slice(0, 300));
      assert.doesNotMatch(atLimit.body, /does not match api\/openapi\.yaml/);
      const over = await app.inject({ method, url: urlOf(op.operationId, 'container-id:tdl-limit'), headers, payload: `${body} ` });
      assert.equal(over.statusCode, 413, over.body.slice(0, 300));
      const err = over.json<ErrorResponse>();
      assert.equal(err.code, 'INVALID_REQUEST');
      assert.match(err.message, new RegExp(`at most ${limit} bytes`));
    });
  }

  test('PATCH /config takes its longest body whole: "fatal" and 3600000, every character escaped', async () => {
    const before = api.health.config();
    const r = await app.inject({ method: 'PATCH', url: '/v1/config', headers: { 'content-type': 'application/json' }, payload: longestBody(spec.body('/config', 'patch')!) });
    assert.equal(r.statusCode, 200, r.body);
    assert.equal(r.json<{ ipamExpiration: number }>().ipamExpiration, 3_600_000);
    api.health.patchConfig({ logLevel: before.logLevel, ipamExpiration: before.ipamExpiration });
  });

  test('a body that is not JSON is refused with 415, as the document says', async () => {
    const r = await app.inject({ method: 'PATCH', url: '/v1/config', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: 'logLevel=info' });
    assert.equal(r.statusCode, 415);
    assert.equal(r.json<ErrorResponse>().code, 'INVALID_REQUEST');
  });
});

describe('request validation', () => {
  test('a body field the document does not name is refused, not dropped', async () => {
    const r = await app.inject({ method: 'PATCH', url: '/v1/config', payload: { logLevel: 'info', tdlUnknown: 1 } });
    assert.equal(r.statusCode, 400);
    assert.match(r.json<ErrorResponse>().message, /additional properties/);
  });

  test('a body value of the wrong type is refused, not coerced', async () => {
    const r = await app.inject({ method: 'PATCH', url: '/v1/config', payload: { ipamExpirationMs: '5000' } });
    assert.equal(r.statusCode, 400);
  });

  test('a query parameter the document does not name is refused', async () => {
    const r = await app.inject({ method: 'GET', url: '/v1/policy?tdlUnknown=1' });
    assert.equal(r.statusCode, 400);
  });
});

describe('response validation', () => {
  /** A server over the agent whose health answer leaves out what the document requires. */
  async function serverWithBrokenHealth(logs: string[]): Promise<FastifyInstance> {
    const log = pino(
      { level: 'info' },
      new Writable({
        write(chunk: Buffer, _enc, done) {
          logs.push(chunk.toString());
          done();
        },
      }),
    );
    const broken: AgentApi = { ...api, log, health: { ...api.health, health: async () => ({ status: 'ok', kvstore: { backend: 'embedded', connected: true, revision: 1 }, endpoints: 0 }) as unknown as Health } };
    const s = buildServer(broken, { validateResponses: true });
    await s.ready();
    return s;
  }

  test('a response the document does not describe becomes a 500 naming the operation, the status and the schema error, and a log line', async () => {
    const logs: string[] = [];
    const s = await serverWithBrokenHealth(logs);
    try {
      const r = await s.inject({ method: 'GET', url: '/v1/healthz' });
      assert.equal(r.statusCode, 500);
      const err = r.json<ErrorResponse>();
      assert.equal(err.code, 'INTERNAL');
      assert.match(err.message, /^response of getHealthz \(200\) does not match api\/openapi\.yaml: body \(root\) must have required property 'nodeName'/);
      assert.equal(logs.length, 1);
      const line = JSON.parse(logs[0]!) as { msg: string; operationId: string; status: number; problem: string; level: number };
      assert.equal(line.msg, RESPONSE_MISMATCH);
      assert.deepEqual([line.operationId, line.status, line.level], ['getHealthz', 200, 50]);
      assert.match(line.problem, /nodeName/);
    } finally {
      await s.close();
    }
  });

  test('without validation the same response goes out as it is', async () => {
    const s = buildServer({ ...api, health: { ...api.health, health: async () => ({ status: 'ok' }) as unknown as Health } }, { validateResponses: false });
    try {
      const r = await s.inject({ method: 'GET', url: '/v1/healthz' });
      assert.equal(r.statusCode, 200);
      assert.deepEqual(r.json(), { status: 'ok' });
    } finally {
      await s.close();
    }
  });

  test('error responses are checked too: a 404 the operation declares passes, and the real agent\'s answers all match', async () => {
    const cases: Array<[string, string, number]> = [
      ['GET', '/v1/endpoint/4242', 404],
      ['GET', '/v1/endpoint/nonsense', 400],
      ['DELETE', '/v1/ipam/not-an-ip', 400],
      ['DELETE', '/v1/ipam/10.89.0.77', 404],
      ['GET', '/v1/identity/999999', 400],
      ['GET', '/v1/identity/4242', 404],
      ['DELETE', '/v1/policy', 400],
      ['GET', '/v1/healthz', 200],
      ['GET', '/v1/config', 200],
      ['GET', '/v1/tdl-no-such-route', 404],
    ];
    for (const [method, url, status] of cases) {
      const r = await app.inject({ method: method as 'GET', url });
      assert.equal(r.statusCode, status, `${method} ${url}: ${r.body}`);
    }
  });
});
