// registerFlowUi: the bundle's files by exact name with their content types,
// nothing outside it (no traversal, encoded or not), and a clear 503 when
// the UI was never built.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { FLOW_UI_NOT_BUILT, registerFlowUi } from './index.js';

let dir = '';
let app: FastifyInstance;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tdl-flowui-'));
  await mkdir(join(dir, 'ui/assets'), { recursive: true });
  await writeFile(join(dir, 'ui/index.html'), '<!doctype html><title>t</title>');
  await writeFile(join(dir, 'ui/assets/main-ABC.js'), 'console.log(1)');
  await writeFile(join(dir, 'ui/assets/main-ABC.css'), 'body{}');
  await writeFile(join(dir, 'secret.txt'), 'outside the bundle');
  app = Fastify();
  registerFlowUi(app, { dir: join(dir, 'ui') });
  app.get('/v1/flows', async () => 'api');
});

after(async () => {
  await app.close();
  await rm(dir, { recursive: true, force: true });
});

describe('registerFlowUi', () => {
  test('index.html at /, assets by name, each with its content type', async () => {
    const index = await app.inject('/');
    assert.equal(index.statusCode, 200);
    assert.equal(index.headers['content-type'], 'text/html; charset=utf-8');
    assert.equal(index.headers['cache-control'], 'no-cache');
    assert.match(index.body, /<title>t<\/title>/);
    const js = await app.inject('/assets/main-ABC.js');
    assert.equal(js.statusCode, 200);
    assert.equal(js.headers['content-type'], 'text/javascript; charset=utf-8');
    assert.match(String(js.headers['cache-control']), /immutable/);
    assert.equal((await app.inject('/assets/main-ABC.css')).headers['content-type'], 'text/css; charset=utf-8');
    assert.equal((await app.inject('/v1/flows')).body, 'api', 'the API beside it is untouched');
  });

  test('nothing outside the bundle, however the path is spelled', async () => {
    for (const url of ['/assets/../../secret.txt', '/assets/%2e%2e/%2e%2e/secret.txt', '/assets/..%2f..%2fsecret.txt', '/assets/', '/assets/nope.js', '/index.html/../secret.txt', '/assets//etc/passwd']) {
      const r = await app.inject(url);
      assert.ok(r.statusCode === 404, `${url}: ${r.statusCode} ${r.body.slice(0, 80)}`);
      assert.doesNotMatch(r.body, /outside the bundle/);
    }
  });

  test('not built: the page says so with a 503, the server still starts', async () => {
    const bare = Fastify();
    registerFlowUi(bare, { dir: join(dir, 'missing') });
    const r = await bare.inject('/');
    assert.equal(r.statusCode, 503);
    assert.equal(r.body, `${FLOW_UI_NOT_BUILT}\n`);
    await bare.close();
  });

  test('a prefix mounts it elsewhere', async () => {
    const other = Fastify();
    registerFlowUi(other, { dir: join(dir, 'ui'), prefix: '/ui/' });
    assert.equal((await other.inject('/ui/')).statusCode, 200);
    assert.equal((await other.inject('/ui/assets/main-ABC.js')).statusCode, 200);
    assert.equal((await other.inject('/')).statusCode, 404);
    assert.throws(() => registerFlowUi(Fastify(), { prefix: 'ui' }), /must start and end with '\/'/);
    await other.close();
  });
});
