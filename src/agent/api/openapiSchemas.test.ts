import assert from 'node:assert/strict';
import { test } from 'node:test';
import Fastify from 'fastify';
import { parse as parseYaml } from 'yaml';
import { readFileSync } from 'node:fs';
import { OPENAPI_PATH, OpenApiSchemas } from './openapiSchemas.js';

// Every request schema in api/openapi.yaml must compile in the validator the
// agent uses; a schema that does not would stop the agent at start-up.
test('every operation\'s body and query schema compiles in fastify\'s validator', async () => {
  const doc = parseYaml(readFileSync(OPENAPI_PATH, 'utf8')) as { paths: Record<string, Record<string, unknown>> };
  const spec = new OpenApiSchemas();
  const app = Fastify();
  let routes = 0;
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of ['get', 'put', 'post', 'patch', 'delete'] as const) {
      if (!item[method]) continue;
      const body = spec.body(path, method);
      const querystring = spec.query(path, method);
      app.route({ method: method.toUpperCase() as 'GET', url: `/v1${path.replace(/\{(\w+)\}/g, ':$1')}`, schema: { ...(body ? { body } : {}), ...(querystring ? { querystring } : {}) }, handler: async () => ({}) });
      routes++;
    }
  }
  await app.ready();
  await app.close();
  assert.ok(routes >= 15, `${routes} operations`);
});

test('a body that breaks the schema is refused with the field named', async () => {
  const spec = new OpenApiSchemas();
  const app = Fastify();
  app.post('/v1/cni', { schema: { body: spec.body('/cni', 'post') } }, async () => ({}));
  const r = await app.inject({ method: 'POST', url: '/v1/cni', payload: { command: 'EXPLODE', config: '{}' } });
  assert.equal(r.statusCode, 400);
  assert.match(r.body, /command/);
  await app.close();
});
