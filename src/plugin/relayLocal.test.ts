// What tendril-cni decides by itself: a verb it does not know, stdin it cannot
// relay, a socket it cannot use, and an agent that is not there (DEL queued
// in the deletion queue the agent drains on start).
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { listQueuedDeletions } from '../api/deletionQueue.js';
import { CniErrorCode } from '../cni/errors.js';
import { assertCniError, cniEnv, runRelay } from './testing/runRelay.js';

let dir = '';
let socket = '';

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tdl-relaylocal-'));
  socket = join(dir, 'state', 'tendril.sock');
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

function conf(extra: Record<string, unknown> = {}, version = '1.0.0'): string {
  return JSON.stringify({ cniVersion: version, name: 'tdlrelay', type: 'tendril-cni', socket, ...extra });
}

describe('refused before anything is sent', () => {
  test('an unknown CNI_COMMAND is code 4', async () => {
    const e = assertCniError(await runRelay(cniEnv('EXPLODE'), conf()), CniErrorCode.InvalidEnvironmentVariables);
    assert.equal(e.msg, 'unknown CNI_COMMAND: EXPLODE');
    assert.equal(e.cniVersion, '1.1.0');
  });

  test('an invalid TENDRIL_CNI_TIMEOUT_MS is code 4', async () => {
    for (const v of ['0', '-5', 'soon', '3600001', '12ms']) {
      assertCniError(await runRelay(cniEnv('ADD', { TENDRIL_CNI_TIMEOUT_MS: v }), conf()), CniErrorCode.InvalidEnvironmentVariables, /TENDRIL_CNI_TIMEOUT_MS/);
    }
  });

  test('stdin of exactly 1 MiB is relayed; one byte more is code 7 (the API refuses a larger config)', async () => {
    const base = conf();
    const fits = base + ' '.repeat(1024 * 1024 - Buffer.byteLength(base));
    assert.equal(Buffer.byteLength(fits), 1024 * 1024);
    assertCniError(await runRelay(cniEnv('ADD'), fits), CniErrorCode.TryAgainLater);
    const e = assertCniError(await runRelay(cniEnv('ADD'), `${fits} `), CniErrorCode.InvalidNetworkConfig, /network config too large/);
    assert.equal(e.cniVersion, '1.1.0', 'an unread config has no version: the newest');
    const huge = await runRelay(cniEnv('DEL'), Buffer.alloc(64 * 1024 * 1024, 0x20));
    assertCniError(huge, CniErrorCode.InvalidNetworkConfig);
  });

  const refusals: Array<[string, string, number, RegExp]> = [
    ['stdin that is not JSON', '{"cniVersion":"1.0.0",', CniErrorCode.DecodingFailure, /^error unmarshalling network config$/],
    ['empty stdin', '', CniErrorCode.DecodingFailure, /^error unmarshalling network config$/],
    ['a JSON array', '[]', CniErrorCode.DecodingFailure, /not a JSON object/],
    ['a socket that is not a string', conf({ socket: 42 }), CniErrorCode.InvalidNetworkConfig, /"socket" must be a string/],
    ['a relative socket path', conf({ socket: 'run/tendril.sock' }), CniErrorCode.InvalidNetworkConfig, /must be an absolute path without '\.\.'/],
    ['a socket path with ..', conf({ socket: '/var/run/../tendril.sock' }), CniErrorCode.InvalidNetworkConfig, /must be an absolute path/],
    ['a socket path with a NUL', conf({ socket: '/var/run/a\u0000b.sock' }), CniErrorCode.InvalidNetworkConfig, /must be an absolute path/],
    ['a socket path too long for sun_path', conf({ socket: `/tmp/${'s'.repeat(103)}` }), CniErrorCode.InvalidNetworkConfig, /longer than a unix socket address allows/],
  ];
  for (const [what, stdin, code, msg] of refusals) {
    test(`${what}: code ${code}`, async () => {
      for (const verb of ['ADD', 'DEL']) assertCniError(await runRelay(cniEnv(verb), stdin), code, msg);
    });
  }

  test('a socket path of 107 bytes fits sun_path (the agent is just not there)', async () => {
    assertCniError(await runRelay(cniEnv('ADD'), conf({ socket: `/tmp/${'s'.repeat(102)}` })), CniErrorCode.TryAgainLater);
  });
});

describe('the agent is not running', () => {
  test('ADD, CHECK and GC are code 11 in the config\'s version; STATUS is 50', async () => {
    for (const [verb, code, version] of [['ADD', 11, '0.3.1'], ['CHECK', 11, '0.4.0'], ['GC', 11, '1.1.0'], ['STATUS', 50, '1.1.0']] as const) {
      const e = assertCniError(await runRelay(cniEnv(verb), conf({}, version)), code);
      assert.equal(e.cniVersion, version);
      assert.equal(e.details, `cannot reach the tendril agent at ${socket}: connect: No such file or directory`);
    }
  });

  test('the relay\'s errors answer in the newest version when the config\'s is not one tendril speaks', async () => {
    assert.equal(assertCniError(await runRelay(cniEnv('ADD'), conf({}, '0.2.0')), 11).cniVersion, '1.1.0');
  });

  test('DEL is queued beside the socket (0700 dir, 0600 file, the CniRequest JSON) and exits 0', async () => {
    const env = cniEnv('DEL', { CNI_NETNS: undefined });
    const stdin = conf({ note: 'quote " and é' });
    const r = await runRelay(env, stdin);
    assert.equal(r.code, 0, r.stdout);
    assert.equal(r.stdout, '');
    const qdir = join(dir, 'state', 'deletion-queue');
    assert.equal((await stat(join(dir, 'state'))).mode & 0o777, 0o700, 'a missing socket dir is made too');
    assert.equal((await stat(qdir)).mode & 0o777, 0o700);
    const names = await readdir(qdir);
    assert.equal(names.length, 1, `no temporary file is left: ${names.join(', ')}`);
    assert.match(names[0]!, /^\d{13}-[0-9a-f]{8}\.json$/);
    const ms = Number(names[0]!.split('-')[0]);
    assert.ok(Math.abs(ms - Date.now()) < 60_000, 'named by the time in ms');
    assert.equal((await stat(join(qdir, names[0]!))).mode & 0o777, 0o600);
    const expected = { command: 'DEL', containerId: env.CNI_CONTAINERID, ifName: env.CNI_IFNAME, args: env.CNI_ARGS, path: env.CNI_PATH, config: stdin };
    assert.equal(await readFile(join(qdir, names[0]!), 'utf8'), JSON.stringify(expected), 'the same bytes JSON.stringify writes');
    // The agent reads the queue with the TypeScript reader.
    const listed = await listQueuedDeletions(socket);
    assert.deepEqual(listed.map((q) => q.request), [expected]);
    await rm(join(qdir, names[0]!));
  });

  test('DEL that cannot be queued is code 5', async () => {
    const blocker = join(dir, 'blocker');
    await writeFile(blocker, '');
    const e = assertCniError(await runRelay(cniEnv('DEL'), conf({ socket: join(blocker, 'tendril.sock') })), CniErrorCode.IOFailure, /could not be queued/);
    assert.match(String(e.details), /connect: Not a directory; cannot create .*blocker\/deletion-queue: Not a directory/);
  });
});
