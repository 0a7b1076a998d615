// api/openapi.yaml as the agent reads it: every schema compiles in the
// validators the agent uses and does what it says, the body limits follow
// from the schemas, and the error codes are the agent's.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import Fastify from 'fastify';
import { parse as parseYaml } from 'yaml';
import { AGENT_ERRORS } from '../errors.js';
import { escapedStringBytes, longestJsonBytes, UnboundedSchemaError } from './bodyLimit.js';
import { HTTP_METHODS, OPENAPI_JSON_PATH, OPENAPI_PATH, OpenApiSchemas } from './openapiSchemas.js';
import { longestBody } from './testing/longestBody.js';
import { newAjv, requestValidatorCompiler } from './validatorCompiler.js';

const spec = new OpenApiSchemas();
const raw = parseYaml(readFileSync(OPENAPI_PATH, 'utf8')) as { paths: Record<string, Record<string, { operationId?: string }>> };

test('the JSON copy the agent reads at start is the YAML document (make build writes it)', () => {
  assert.deepEqual(JSON.parse(readFileSync(OPENAPI_JSON_PATH, 'utf8')), raw);
});

test('the operations are the document\'s, each with its route under the server\'s base path', () => {
  const fromYaml = Object.entries(raw.paths).flatMap(([p, item]) => HTTP_METHODS.filter((m) => item[m]).map((m) => `${m} ${p} ${item[m]!.operationId}`));
  assert.deepEqual(
    spec.operations().map((o) => `${o.method} ${o.path} ${o.operationId}`),
    fromYaml,
  );
  assert.equal(spec.basePath, '/v1');
  assert.equal(spec.operationById('getEndpointPolicy').url, '/v1/endpoint/:id/policy');
  assert.equal(spec.operationAt('DELETE', '/v1/ipam/:ip')?.operationId, 'deleteIpamIp');
  assert.equal(spec.operationAt('GET', '/v1/nothing'), undefined);
});

test('every request body schema compiles, admits its longest body, refuses a wrong type and a field it does not name', async () => {
  const app = Fastify();
  app.setValidatorCompiler(requestValidatorCompiler());
  const withBody = spec.operations().filter((o) => spec.body(o.path, o.method));
  for (const op of withBody) {
    app.route({ method: op.method.toUpperCase() as 'POST', url: op.url, schema: { body: spec.body(op.path, op.method)! }, bodyLimit: 64 << 20, handler: async () => ({ ok: true }) });
  }
  for (const op of withBody) {
    const body = spec.body(op.path, op.method)!;
    const url = op.url.replace(/:(\w+)/g, 'x');
    const method = op.method.toUpperCase() as 'POST';
    const longest = await app.inject({ method, url, headers: { 'content-type': 'application/json' }, payload: longestBody(body) });
    assert.equal(longest.statusCode, 200, `${op.operationId}: its longest body: ${longest.body.slice(0, 300)}`);
    const wrongType = await app.inject({ method, url, payload: [] });
    assert.equal(wrongType.statusCode, 400, `${op.operationId}: an array body`);
    const extra = { ...(JSON.parse(longestBody(body)) as object), tdlUnknownField: 1 };
    const unknown = await app.inject({ method, url, payload: extra });
    assert.equal(unknown.statusCode, 400, `${op.operationId}: an unnamed field`);
    assert.match(unknown.body, /tdlUnknownField|additional properties/);
  }
  assert.deepEqual(withBody.map((o) => o.operationId).sort(), ['applyServices', 'patchConfig', 'patchEndpointLabels', 'postCni', 'promotePolicy', 'putEndpoint', 'putPolicy', 'putService', 'tracePolicy']);
  await app.close();
});

test('every query schema compiles, coerces its values and refuses a parameter it does not name', async () => {
  const app = Fastify();
  app.setValidatorCompiler(requestValidatorCompiler());
  const withQuery = spec.operations().filter((o) => spec.query(o.path, o.method));
  for (const op of withQuery) {
    app.route({ method: op.method.toUpperCase() as 'GET', url: op.url, schema: { querystring: spec.query(op.path, op.method)! }, handler: async (req) => req.query });
  }
  const del = await app.inject({ method: 'DELETE', url: '/v1/policy?all=true' });
  assert.equal(del.statusCode, 200);
  assert.deepEqual(del.json(), { all: true });
  const missing = await app.inject({ method: 'POST', url: '/v1/ipam?family=ipv4' });
  assert.equal(missing.statusCode, 400, 'owner is required');
  for (const op of withQuery) {
    const required = new URLSearchParams((spec.query(op.path, op.method)!.required as string[]).map((n): [string, string] => [n, 'o']));
    const url = `${op.url.replace(/:(\w+)/g, 'x')}?${required.toString()}`;
    const method = op.method.toUpperCase() as 'GET';
    assert.equal((await app.inject({ method, url })).statusCode, 200, `${op.operationId} with its required parameters`);
    const r = await app.inject({ method, url: `${url}&tdlBogus=1` });
    assert.equal(r.statusCode, 400, `${op.operationId} refuses tdlBogus`);
  }
  await app.close();
});

test('every declared response compiles; errors are ErrorResponses; every operation declares 500, and 413 and 415 when it takes a body', () => {
  const ajv = newAjv({ coerce: false });
  const error = spec.schema('ErrorResponse');
  for (const op of spec.operations()) {
    const statuses = spec.statuses(op.operationId);
    assert.ok(statuses.includes('500'), `${op.operationId} declares 500`);
    if (spec.body(op.path, op.method)) for (const s of ['400', '413', '415']) assert.ok(statuses.includes(s), `${op.operationId} declares ${s}`);
    for (const status of statuses) {
      const r = spec.response(op.operationId, Number(status))!;
      const schema = (r.content as Record<string, { schema?: object }> | undefined)?.['application/json']?.schema;
      if (schema) ajv.compile(schema);
      if (Number(status) >= 400) assert.deepEqual(schema, error, `${op.operationId} ${status} is an ErrorResponse`);
    }
  }
});

test('ErrorResponse.code lists exactly the agent\'s error codes', () => {
  const codes = (spec.schema('ErrorResponse').properties as { code: { enum: string[] } }).code.enum;
  assert.deepEqual([...codes].sort(), Object.keys(AGENT_ERRORS).sort());
});

test('each body limit is the byte length of the longest body the schema admits', () => {
  for (const op of spec.operations()) {
    const body = spec.body(op.path, op.method);
    assert.equal(spec.bodyLimit(op.path, op.method), body && Buffer.byteLength(longestBody(body)), op.operationId);
  }
  // By hand for one: {"logLevel":"fatal","ipamExpiration":3600000}, keys and strings escaped (6 bytes a character).
  assert.equal(spec.bodyLimit('/config', 'patch'), 2 + (2 + 6 * 8) + 1 + (2 + 6 * 5) + 1 + (2 + 6 * 14) + 1 + 7);
  assert.equal(escapedStringBytes('a😀'), 2 + 6 + 12);
});

test('a schema that admits bodies of any length has no limit', () => {
  assert.throws(() => longestJsonBytes({ type: 'string' }), UnboundedSchemaError);
  assert.throws(() => longestJsonBytes({ type: 'array', items: { type: 'boolean' } }), UnboundedSchemaError);
  assert.throws(() => longestJsonBytes({ type: 'object', properties: {} }), /allows properties it does not name/);
  assert.throws(() => longestJsonBytes({ type: 'object', additionalProperties: false, properties: { a: { type: 'string' } } }, 'X'), /X\/properties\/a/);
  assert.equal(longestJsonBytes({ type: 'array', maxItems: 3, items: { type: 'boolean' } }), '[false,false,false]'.length);
});

test('a body that breaks the schema is refused with the field named', async () => {
  const app = Fastify();
  app.setValidatorCompiler(requestValidatorCompiler());
  app.post('/v1/cni', { schema: { body: spec.body('/cni', 'post') } }, async () => ({}));
  const r = await app.inject({ method: 'POST', url: '/v1/cni', payload: { command: 'EXPLODE', config: '{}' } });
  assert.equal(r.statusCode, 400);
  assert.match(r.body, /command/);
  await app.close();
});
