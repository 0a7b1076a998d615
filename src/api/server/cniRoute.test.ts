// POST /v1/cni answers what tendril-cni prints and the code it exits with;
// here against a CniHandler that answers as the CNI service does, without a
// datapath (the relay's own tests run it against a real agent).
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { AgentError } from '../errors.js';
import { CNI_EXIT_CODE_HEADER, type CniRequest, type CniResponse } from '../types.js';
import type { Result100 } from '../../cni/types.js';
import { cniRoute } from './cniRoute.js';
import { OpenApiSchemas } from './openapiSchemas.js';

const RESULT: Result100 = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'lxc1', mac: '0a:00:00:00:00:01' }, { name: 'eth0', mac: '0a:00:00:00:00:02', sandbox: '/var/run/netns/p' }],
  ips: [{ interface: 1, address: '10.1.0.5/32', gateway: '10.1.0.1' }],
  routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }],
};

/** Answers each call with the next outcome and records what it was asked. */
class ScriptedHandler {
  readonly calls: CniRequest[] = [];
  constructor(private readonly outcome: () => Promise<CniResponse>) {}
  handle(req: CniRequest): Promise<CniResponse> {
    this.calls.push(req);
    return this.outcome();
  }
}

let logged = '';
const log = pino(
  { level: 'info' },
  new Writable({
    write(chunk: Buffer, _enc, done) {
      logged += chunk.toString();
      done();
    },
  }),
);
const apps: FastifyInstance[] = [];
after(async () => {
  for (const a of apps) await a.close();
});

async function post(handler: ScriptedHandler, body: Partial<CniRequest> & Record<string, unknown>) {
  const app = Fastify();
  apps.push(app);
  app.post('/v1/cni', { schema: { body: new OpenApiSchemas().body('/cni', 'post') } }, cniRoute(handler, log));
  return app.inject({ method: 'POST', url: '/v1/cni', payload: body });
}

const env = { containerId: 'c1', netns: '/var/run/netns/p', ifName: 'eth0', args: '', path: '/opt/cni/bin' };
const conf = (cniVersion: string) => JSON.stringify({ cniVersion, name: 'n', type: 'tendril-cni' });

describe('POST /v1/cni', () => {
  test('ADD: the result in the config\'s version, as the skel printed it, exit code 0', async () => {
    const h = new ScriptedHandler(async () => ({ result: RESULT }));
    const r = await post(h, { command: 'ADD', ...env, config: conf('0.4.0') });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers[CNI_EXIT_CODE_HEADER], '0');
    assert.match(String(r.headers['content-type']), /^application\/json/);
    const out = JSON.parse(r.body) as { cniVersion: string; ips: Array<{ version: string }> };
    assert.equal(out.cniVersion, '0.4.0');
    assert.equal(out.ips[0]!.version, '4');
    assert.equal(r.body, `${JSON.stringify(out, null, 4)}\n`);
    assert.deepEqual(h.calls, [{ command: 'ADD', ...env, config: conf('0.4.0') }]);
  });

  test('DEL: an empty body, exit code 0', async () => {
    const r = await post(new ScriptedHandler(async () => ({})), { command: 'DEL', ...env, config: conf('1.0.0') });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers[CNI_EXIT_CODE_HEADER], '0');
    assert.equal(r.body, '');
    assert.doesNotMatch(String(r.headers['content-type'] ?? ''), /json/);
  });

  test('an agent error: the CNI error in the config\'s version with the error\'s CNI code, exit code 1', async () => {
    const r = await post(new ScriptedHandler(async () => Promise.reject(new AgentError('NOT_READY', 'not ready', 'kvstore down'))), { command: 'STATUS', path: '/x', config: conf('1.1.0') });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers[CNI_EXIT_CODE_HEADER], '1');
    assert.equal(r.body, `${JSON.stringify({ code: 50, msg: 'not ready', cniVersion: '1.1.0', details: 'kvstore down' }, null, 4)}\n`);
  });

  test('a delegated plugin\'s own code passes through', async () => {
    const r = await post(new ScriptedHandler(async () => Promise.reject(new AgentError('IPAM_FAILED', 'host-local failed', '', 11))), { command: 'ADD', ...env, config: conf('1.0.0') });
    assert.equal((JSON.parse(r.body) as { code: number }).code, 11);
  });

  test('a failure that is not an AgentError: 999 and logged', async () => {
    logged = '';
    const r = await post(new ScriptedHandler(async () => Promise.reject(new TypeError('boom'))), { command: 'CHECK', ...env, config: conf('1.0.0') });
    assert.equal(r.headers[CNI_EXIT_CODE_HEADER], '1');
    assert.deepEqual(JSON.parse(r.body), { code: 999, msg: 'boom', cniVersion: '1.0.0' });
    assert.match(logged, /CNI call failed/);
  });

  test('what the skel refuses never reaches the handler', async () => {
    const h = new ScriptedHandler(async () => ({}));
    const missing = await post(h, { command: 'ADD', containerId: 'c1', ifName: 'eth0', path: '/x', config: conf('1.0.0') });
    assert.equal(missing.headers[CNI_EXIT_CODE_HEADER], '1');
    assert.equal((JSON.parse(missing.body) as { msg: string }).msg, 'required env variables [CNI_NETNS] missing');
    const notJson = await post(h, { command: 'DEL', ...env, config: '{' });
    assert.equal((JSON.parse(notJson.body) as { code: number }).code, 6);
    const tooOld = await post(h, { command: 'GC', ...env, config: conf('1.0.0') });
    assert.equal((JSON.parse(tooOld.body) as { code: number }).code, 1);
    assert.equal(h.calls.length, 0);
  });

  test('a request outside the schema is a 400 ErrorResponse, not CNI output', async () => {
    const r = await post(new ScriptedHandler(async () => ({})), { command: 'ADD', containerId: 'c'.repeat(2000), config: '{}' });
    assert.equal(r.statusCode, 400);
    assert.equal(r.headers[CNI_EXIT_CODE_HEADER], undefined);
  });
});
