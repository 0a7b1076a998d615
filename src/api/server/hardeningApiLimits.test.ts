// The API refuses what would let one request misbehave: a service frontend
// on an address the node already uses (its router, a pod), a JSON body whose
// keys repeat, a request that never finishes arriving, and policy text
// nested deeper than a parser's stack. Each is a clear 4xx (or, for the
// request that never ends, a 408 and a closed connection within the bound)
// and changes nothing. A real agent on the fake datapath, its real server on
// a unix socket for the timing tests.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { ErrorResponse } from '../types.js';
import type { Result100 } from '../../cni/index.js';
import { FakeDatapath } from '../../datapath/fake/fakeDatapath.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../../agent/testing/fakeNodeAgent.js';
import { API_REQUEST_TIMEOUT_MS, type AgentApi, buildServer, listenOnSocket } from './server.js';

let node: FakeNodeAgent;
let api: AgentApi;
let app: FastifyInstance;
let router = '';
let podIp = '';

before(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-limits', podCidr: '10.94.0.0/24', datapath: new FakeDatapath({ nodeLinks: ['eth0'], loadBalancer: true }) });
  api = node.agent.api();
  app = buildServer(api, { validateResponses: true });
  await app.ready();
  router = (await api.ipam.list()).find((a) => a.owner.startsWith('tendril:router:'))!.ip;
  node.datapath.addNetns('/var/run/netns/tdl-limits-pod');
  const { result } = (await api.cni.handle({ command: 'ADD', containerId: 'tdl-limits-pod', netns: '/var/run/netns/tdl-limits-pod', ifName: 'eth0', args: '', config: JSON.stringify({ cniVersion: '1.0.0', name: 'tdllimits', type: 'tendril-cni' }) })) as { result?: Result100 };
  podIp = result!.ips![0]!.address.split('/')[0]!;
});

after(async () => {
  await app?.close();
  await node?.stop();
});

async function call(method: 'GET' | 'PUT' | 'PATCH', url: string, payload?: string): Promise<{ status: number; body: ErrorResponse & Record<string, unknown> }> {
  const r = await app.inject({ method, url, ...(payload === undefined ? {} : { headers: { 'content-type': 'application/json' }, payload }) });
  return { status: r.statusCode, body: r.json() };
}

const service = (ip: string, type = 'ClusterIP') => JSON.stringify({ 'frontend-address': { ip, port: 80, protocol: 'TCP' }, 'backend-addresses': [{ ip: podIp, port: 8080 }], flags: { type } });

describe('a service frontend on an address the node uses', () => {
  const cases: Array<[string, () => string, string, RegExp]> = [
    ['the router address as a ClusterIP', () => router, 'ClusterIP', /router address/],
    ['a pod\'s address as a ClusterIP', () => podIp, 'ClusterIP', /a pod's address/],
    ['a free address of the pod CIDR as a ClusterIP', () => '10.94.0.200', 'ClusterIP', /pod CIDR 10\.94\.0\.0\/24/],
    ['a pod\'s address as an external IP', () => podIp, 'ExternalIPs', /a pod's address/],
    ['the router address as a LoadBalancer IP', () => router, 'LoadBalancer', /router address/],
  ];
  for (const [what, ip, type, why] of cases) {
    test(`${what} is 400 naming the field and the reason; no service is made`, async () => {
      const r = await call('PUT', '/v1/service/7', service(ip(), type));
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.code, 'SERVICE_INVALID');
      assert.match(r.body.message, /^frontend-address\.ip: /);
      assert.match(r.body.message, why);
      assert.equal(api.services!.get(7), undefined);
    });
  }

  test('a ClusterIP outside the node\'s addresses is still served', async () => {
    const r = await call('PUT', '/v1/service/8', service('10.96.0.8'));
    assert.equal(r.status, 201, JSON.stringify(r.body));
  });
});

describe('a JSON body with a repeated key', () => {
  test('top level, nested, and spelled with an escape: 400 naming the key and where; nothing changed', async () => {
    const before = api.health.config();
    const cases: Array<[string, string, string, RegExp]> = [
      ['PATCH', '/v1/config', '{"ipamExpirationMs": 5000, "ipamExpirationMs": 6000}', /"ipamExpirationMs".*the top level/],
      ['PUT', '/v1/service/9', service('10.96.0.9').replace('"port":80,', '"port":80,"port":81,'), /"port".*\/frontend-address/],
      ['PUT', '/v1/service/9', service('10.96.0.9').replace('"port":8080', '"port":8080,"p\\u006frt":8081'), /"port".*\/backend-addresses\/0/],
      ['PUT', '/v1/policy', '{"text": "a: 1", "text": "b: 2"}', /"text"/],
    ];
    for (const [method, url, body, message] of cases) {
      const r = await call(method as 'PUT' | 'PATCH', url, body);
      assert.equal(r.status, 400, `${url}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.code, 'INVALID_REQUEST');
      assert.match(r.body.message, /appears more than once/);
      assert.match(r.body.message, message);
    }
    assert.deepEqual(api.health.config(), before);
    assert.equal(api.services!.get(9), undefined);
    assert.deepEqual(api.policy.list({}), []);
  });

  test('the same key in different objects, and a repeated value, are fine', async () => {
    const r = await call('PUT', '/v1/service/10', service('10.96.0.10'));
    assert.equal(r.status, 201, JSON.stringify(r.body));
  });
});

describe('policy text nested deeper than the limit', () => {
  for (const [what, text] of [
    ['flow', `${'['.repeat(100_000)}${']'.repeat(100_000)}`],
    ['block sequences', `${'- '.repeat(50_000)}x`],
  ] as const) {
    test(`${what}: 400 naming the limit, not "Maximum call stack size exceeded"`, async () => {
      const started = Date.now();
      const r = await call('PUT', '/v1/policy', JSON.stringify({ text }));
      assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 500));
      assert.match(r.body.message, /nested deeper than 64 levels/);
      assert.doesNotMatch(r.body.message, /call stack/);
      assert.ok(Date.now() - started < 5000, `answered in ${Date.now() - started} ms`);
    });
  }
});

describe('every request is bounded in time', () => {
  const LIMIT_MS = 800;
  let dir = '';
  let bounded: FastifyInstance;
  let sock = '';

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-limits-'));
    sock = join(dir, 'api.sock');
    bounded = buildServer(api, { requestTimeoutMs: LIMIT_MS });
    await listenOnSocket(bounded, sock);
  });

  after(async () => {
    await bounded?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('the agent\'s server has the bound by default', () => {
    const server = buildServer(api).server;
    assert.equal(server.requestTimeout, API_REQUEST_TIMEOUT_MS);
    assert.equal(server.headersTimeout, API_REQUEST_TIMEOUT_MS);
  });

  /** Connects, runs `send` on the socket, and answers what came back and when the connection closed (ms after connect). */
  function session(send: (s: Socket) => () => void, giveUpMs: number): Promise<{ answer: string; closedAfterMs: number | undefined }> {
    return new Promise((resolve, reject) => {
      const s = connect(sock);
      let answer = '';
      let stop = () => {};
      const started = Date.now();
      const timer = setTimeout(() => {
        stop();
        s.destroy();
        resolve({ answer, closedAfterMs: undefined });
      }, giveUpMs);
      s.on('connect', () => (stop = send(s)));
      s.on('data', (c: Buffer) => (answer += c.toString()));
      s.on('error', (err: NodeJS.ErrnoException) => {
        // The server closing on us while we still write is part of being cut off.
        if (err.code !== 'EPIPE' && err.code !== 'ECONNRESET') reject(err);
      });
      s.on('close', () => {
        clearTimeout(timer);
        stop();
        resolve({ answer, closedAfterMs: Date.now() - started });
      });
    });
  }

  test('a chunked body that never ends is cut with a 408 and the connection closed within the bound', async (t) => {
    const r = await session((s) => {
      s.write('PUT /v1/policy HTTP/1.1\r\nHost: tendril\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
      s.write('c\r\n{"text": "a:\r\n');
      // One byte of the string every 50 ms, forever: never idle, never finished.
      const every = setInterval(() => {
        if (!s.destroyed) s.write('1\r\nx\r\n');
      }, 50);
      return () => clearInterval(every);
    }, 10 * LIMIT_MS);
    assert.ok(r.closedAfterMs !== undefined, `the connection was still open after ${10 * LIMIT_MS} ms; answer so far: ${JSON.stringify(r.answer)}`);
    // node:http writes the 408 and closes; a client still writing may get the reset before it reads the answer.
    t.diagnostic(`never-ending chunked body: connection closed ${r.closedAfterMs} ms after connect (bound ${LIMIT_MS} ms), answer ${JSON.stringify(r.answer.split('\r\n')[0] ?? '')}`);
    if (r.answer !== '') assert.match(r.answer, /^HTTP\/1\.1 408 /);
    // The bound, plus node:http's check interval (a quarter of it), plus slack for a busy machine.
    assert.ok(r.closedAfterMs <= LIMIT_MS * 1.25 + 700, `closed after ${r.closedAfterMs} ms, the bound is ${LIMIT_MS} ms`);
  });

  test('headers that never end are cut the same way; a connection that sends nothing is closed too', async () => {
    const slow = await session((s) => {
      s.write('GET /v1/status HTTP/1.1\r\nHost: tendril\r\n');
      const every = setInterval(() => {
        if (!s.destroyed) s.write('X-Pad: y\r\n');
      }, 50);
      return () => clearInterval(every);
    }, 10 * LIMIT_MS);
    assert.ok(slow.closedAfterMs !== undefined && slow.closedAfterMs <= LIMIT_MS * 1.25 + 700, `closed after ${slow.closedAfterMs} ms`);
    if (slow.answer !== '') assert.match(slow.answer, /^HTTP\/1\.1 408 /);
    const silent = await session(() => () => {}, 10 * LIMIT_MS);
    assert.ok(silent.closedAfterMs !== undefined && silent.closedAfterMs <= LIMIT_MS * 1.25 + 700, `a silent connection closed after ${silent.closedAfterMs} ms`);
  });

  test('a request sent in time is answered as ever', async () => {
    const r = await session((s) => {
      s.write('GET /v1/healthz HTTP/1.1\r\nHost: tendril\r\nConnection: close\r\n\r\n');
      return () => {};
    }, 10 * LIMIT_MS);
    assert.match(r.answer, /^HTTP\/1\.1 200 /);
  });
});
