// tendril-cni against a scripted stand-in for the agent: what it sends, that
// it prints the answer verbatim with the answer's exit code, and that an
// agent that is slow, wrong, partial, huge or gone gives a clear CNI error
// (or, for DEL, a queued deletion) and never a hang.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { CNI_EXIT_CODE_HEADER } from '../api/types.js';
import { assertCniError, cniEnv, runRelay } from './testing/runRelay.js';
import { httpAnswer, type Script, ScriptedAgent } from './testing/scriptedAgent.js';

const TIMEOUT_MS = 400;
let agent: ScriptedAgent | undefined;

async function withAgent(script: Script): Promise<ScriptedAgent> {
  agent = await ScriptedAgent.start(script);
  return agent;
}

afterEach(async () => {
  await agent?.stop();
  agent = undefined;
});
after(async () => {
  await agent?.stop();
});

function conf(socket: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ cniVersion: '1.0.0', name: 'tdlrelay', type: 'tendril-cni', socket, ...extra });
}

const answer = (body: string, exitCode: number) => httpAnswer(200, body, { [CNI_EXIT_CODE_HEADER]: String(exitCode), 'Content-Type': 'application/json' });

describe('the request', () => {
  test('POST /v1/cni with every CNI variable, the stdin bytes unchanged, and the answer printed as is', async () => {
    const printed = '{\n    "cniVersion": "1.0.0",\n    "ips": []\n}\n';
    const a = await withAgent((s) => s.end(answer(printed, 0)));
    // Escapes, raw whitespace, quotes, non-ASCII and a control character (escaped, as JSON requires).
    const stdin = `{\t"cniVersion": "1.0.0",\n "name": "tdl\\"relay\\\\", "type": "tendril-cni", "socket": ${JSON.stringify(a.socket)},\r\n "x": "é😀\\u0001\\ud800"}\n`;
    const env = cniEnv('ADD', { CNI_ARGS: 'K8S_POD_NAME=a"b\\c;X=\u00e9' });
    const r = await runRelay(env, stdin);
    assert.equal(r.code, 0, r.stdout);
    assert.equal(r.stdout, printed);
    assert.equal(a.requests.length, 1);
    const [req] = a.requests;
    assert.equal(req!.head[0], 'POST /v1/cni HTTP/1.1');
    const headers = Object.fromEntries(req!.head.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
    assert.equal(headers['content-type'], 'application/json');
    assert.equal(headers.connection, 'close');
    assert.equal(headers.host, 'localhost');
    assert.equal(Number(headers['content-length']), req!.body.length);
    assert.deepEqual(JSON.parse(req!.body.toString('utf8')), {
      command: 'ADD',
      containerId: env.CNI_CONTAINERID,
      netns: env.CNI_NETNS,
      ifName: env.CNI_IFNAME,
      args: env.CNI_ARGS,
      path: env.CNI_PATH,
      config: stdin,
    });
  });

  test('unset variables are left out, empty ones are sent empty', async () => {
    const a = await withAgent((s) => s.end(answer('', 0)));
    const r = await runRelay({ CNI_COMMAND: 'GC', CNI_PATH: '', CNI_ARGS: undefined }, conf(a.socket));
    assert.equal(r.code, 0);
    assert.equal(r.stdout, '');
    assert.deepEqual(JSON.parse(a.requests[0]!.body.toString('utf8')), { command: 'GC', path: '', config: conf(a.socket) });
  });

  test('an answer with exit code 1 is printed as is and exits 1', async () => {
    const printed = '{\n    "code": 7,\n    "msg": "from the agent",\n    "cniVersion": "1.0.0"\n}\n';
    const a = await withAgent((s) => s.end(answer(printed, 1)));
    const r = await runRelay(cniEnv('CHECK'), conf(a.socket));
    assert.equal(r.code, 1);
    assert.equal(r.stdout, printed);
  });

  test('the netconf socket wins over TENDRIL_SOCK; TENDRIL_SOCK is used without one', async () => {
    const a = await withAgent((s) => s.end(answer('', 0)));
    const viaEnv = await runRelay(cniEnv('DEL', { TENDRIL_SOCK: a.socket }), JSON.stringify({ cniVersion: '1.0.0', name: 'n', type: 'tendril-cni' }));
    assert.equal(viaEnv.code, 0, viaEnv.stdout);
    const emptyField = await runRelay(cniEnv('DEL', { TENDRIL_SOCK: a.socket }), conf(''));
    assert.equal(emptyField.code, 0, emptyField.stdout);
    assert.equal(a.requests.length, 2);
    const other = join(a.dir, 'other', 'tendril.sock');
    const viaConf = await runRelay(cniEnv('ADD', { TENDRIL_SOCK: a.socket }), conf(other));
    assertCniError(viaConf, 11);
    assert.match(String(viaConf.out!.details), new RegExp(other));
    assert.equal(a.requests.length, 2);
  });
});

describe('an agent that misbehaves', () => {
  const timed = (extra: Record<string, string> = {}) => ({ TENDRIL_CNI_TIMEOUT_MS: String(TIMEOUT_MS), ...extra });

  test('never answers: ADD, CHECK and GC are 11, STATUS is 50, after the timeout', async () => {
    const a = await withAgent(() => undefined);
    for (const [verb, code] of [['ADD', 11], ['CHECK', 11], ['GC', 11], ['STATUS', 50]] as const) {
      const r = await runRelay(cniEnv(verb, timed()), conf(a.socket), 10_000);
      const e = assertCniError(r, code);
      assert.equal(e.cniVersion, '1.0.0', 'the error speaks the config\'s version');
      assert.match(String(e.details), /no complete answer in time \(0 bytes received\)/);
      assert.ok(r.ms >= TIMEOUT_MS - 50 && r.ms < TIMEOUT_MS + 3000, `${verb} took ${r.ms} ms`);
    }
    assert.equal(existsSync(join(a.dir, 'deletion-queue')), false, 'only DEL queues');
  });

  // A stopped (SIGSTOP) or wedged agent accepts the connection and says nothing.
  // DEL must not fail (the runtime would retry it for ever) nor wait minutes:
  // it is queued, and the agent drains it on start. The agent may also still
  // take the request it received once it runs again: DEL is idempotent, so
  // doing it twice is harmless (see relayAgent.test.ts).
  test('never answers: DEL is queued after the timeout and exits 0, with the request the agent got', async () => {
    const a = await withAgent(() => undefined);
    const r = await runRelay(cniEnv('DEL', timed()), conf(a.socket), 10_000);
    assert.equal(r.code, 0, `stdout: ${r.stdout} stderr: ${r.stderr}`);
    assert.equal(r.stdout, '');
    assert.ok(r.ms >= TIMEOUT_MS - 50 && r.ms < TIMEOUT_MS + 3000, `DEL took ${r.ms} ms`);
    const queued = await readdir(join(a.dir, 'deletion-queue'));
    assert.equal(queued.length, 1);
    assert.deepEqual(JSON.parse(await readFile(join(a.dir, 'deletion-queue', queued[0]!), 'utf8')), JSON.parse(a.requests[0]!.body.toString('utf8')));
  });

  test('never answers: DEL gives up within seconds by default, ADD keeps its long deadline', async () => {
    const a = await withAgent(() => undefined);
    const [del, add] = await Promise.all([
      runRelay(cniEnv('DEL'), conf(a.socket), 20_000),
      runRelay(cniEnv('ADD'), conf(a.socket), 15_000).then(
        () => assert.fail('ADD gave up within 15 s'),
        (err: Error) => err,
      ),
    ]);
    assert.equal(del.code, 0, `stdout: ${del.stdout} stderr: ${del.stderr}`);
    assert.ok(del.ms >= 9_000 && del.ms < 12_000, `DEL took ${del.ms} ms`);
    assert.equal((await readdir(join(a.dir, 'deletion-queue'))).length, 1);
    assert.match(add.message, /did not exit within 15000 ms/);
  });

  test('dribbles a header that never ends: 11 after the timeout', async () => {
    const a = await withAgent((s) => {
      s.write('HTTP/1.1 200 OK\r\n');
      a.every(50, () => s.write('X-Slow: y\r\n'));
    });
    const r = await runRelay(cniEnv('ADD', timed()), conf(a.socket), 10_000);
    assert.match(String(assertCniError(r, 11).details), /no complete answer in time \(\d+ bytes received\)/);
  });

  test('dribbles a header past its size limit: 999 at once, without waiting for the timeout', async () => {
    const a = await withAgent((s) => {
      s.write('HTTP/1.1 200 OK\r\nX-Big: ');
      a.every(5, () => s.write('y'.repeat(4096)));
    });
    const r = await runRelay(cniEnv('ADD'), conf(a.socket), 10_000);
    assert.match(String(assertCniError(r, 999, /invalid answer/).details), /header section too large/);
  });

  const bad: Array<[string, (a: ScriptedAgent) => Script, RegExp]> = [
    ['garbage, keeping the connection open', () => (s) => s.write('hello there\r\n\r\n'), /not an HTTP response/],
    ['HTTP/1.2', () => (s) => s.write('HTTP/1.2 200 OK\r\n\r\n'), /not HTTP\/1.0 or HTTP\/1.1/],
    ['a truncated body', () => (s) => s.end(answer('{"cniVersion":"1.0.0"}', 0).subarray(0, -5)), /answer truncated/],
    ['a truncated header', () => (s) => s.end('HTTP/1.1 200 OK\r\nContent-Le'), /answer truncated/],
    ['a body larger than 4 MiB', () => (s) => s.end(answer('x'.repeat(4 * 1024 * 1024 + 1), 0)), /body too large/],
    ['a Content-Length of 100 GB', () => (s) => s.write('HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n'), /body too large/],
    ['no Content-Length', () => (s) => s.end(`HTTP/1.1 200 OK\r\n${CNI_EXIT_CODE_HEADER}: 0\r\n\r\n{}`), /no Content-Length/],
    ['chunked coding', () => (s) => s.end(`HTTP/1.1 200 OK\r\n${CNI_EXIT_CODE_HEADER}: 0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`), /Transfer-Encoding/],
    ['bytes after the body', () => (s) => s.end(Buffer.concat([answer('{}', 0), Buffer.from('extra')])), /bytes after the body/],
    ['an exit code that is not 0 or 1', () => (s) => s.end(httpAnswer(200, '{}', { [CNI_EXIT_CODE_HEADER]: '2' })), /malformed Tendril-Cni-Exit-Code/],
    ['two Content-Lengths', () => (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}'), /repeated Content-Length/],
  ];
  for (const [what, script, detail] of bad) {
    test(`${what}: 999 with the reason`, async () => {
      const a = await withAgent((s, req) => script(a)(s, req));
      const r = await runRelay(cniEnv('ADD'), conf(a.socket), 10_000);
      const e = assertCniError(r, 999, /invalid answer from the tendril agent/);
      assert.match(String(e.details), detail);
      assert.ok(r.ms < 5000, `${what} took ${r.ms} ms`);
    });
  }

  test('an error status with an ErrorResponse: 999 with the status and the agent\'s message', async () => {
    const a = await withAgent((s) => s.end(httpAnswer(400, JSON.stringify({ code: 'INVALID_REQUEST', message: 'invalid request: body/containerId must NOT have more than 1024 characters', cniCode: 7 }))));
    const r = await runRelay(cniEnv('ADD'), conf(a.socket));
    const e = assertCniError(r, 999, /did not answer with CNI output/);
    assert.equal(e.details, 'HTTP 400: invalid request: body/containerId must NOT have more than 1024 characters');
  });

  test('an error status with a body that is not JSON: 999 with the status and the start of the body', async () => {
    const a = await withAgent((s) => s.end(httpAnswer(502, 'bad gateway\u0000and more')));
    const e = assertCniError(await runRelay(cniEnv('ADD'), conf(a.socket)), 999);
    assert.equal(e.details, 'HTTP 502: bad gateway and more');
  });

  test('a 200 without the exit code header: 999', async () => {
    const a = await withAgent((s) => s.end(httpAnswer(200, '{}')));
    const e = assertCniError(await runRelay(cniEnv('ADD'), conf(a.socket)), 999);
    assert.match(String(e.details), /HTTP 200 without a Tendril-Cni-Exit-Code header/);
  });

  test('hangs up without answering (an agent killed mid-call): ADD 11, STATUS 50, DEL queued', async () => {
    const a = await withAgent((s) => s.destroy());
    assert.match(String(assertCniError(await runRelay(cniEnv('ADD'), conf(a.socket)), 11).details), /closed the connection without answering/);
    assertCniError(await runRelay(cniEnv('STATUS'), conf(a.socket)), 50);
    const del = await runRelay(cniEnv('DEL'), conf(a.socket));
    assert.equal(del.code, 0, del.stdout);
    assert.equal((await readdir(join(a.dir, 'deletion-queue'))).length, 1);
  });

  test('a socket path that is a plain file: unreachable, 11', async () => {
    const a = await withAgent(() => undefined);
    const file = join(a.dir, 'not-a-socket');
    await writeFile(file, '');
    assert.match(String(assertCniError(await runRelay(cniEnv('ADD'), conf(file)), 11).details), /connect: Connection refused/);
  });
});
