// What tendril-cni decides by itself: a verb it does not know, stdin it cannot
// relay, a socket it cannot use, and an agent that is not there (DEL queued
// in the deletion queue the agent drains on start).
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
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
  // The socket's directory exists, as the agent makes it (root, 0700): only the socket is missing.
  await mkdir(join(dir, 'state'), { mode: 0o700 });
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
    assert.deepEqual(listed.map((q) => ('request' in q ? q.request : q.refused)), [expected]);
    await rm(join(qdir, names[0]!));
  });

  test('DEL that cannot be queued is code 5', async () => {
    const blocker = join(dir, 'blocker');
    await writeFile(blocker, '');
    const e = assertCniError(await runRelay(cniEnv('DEL'), conf({ socket: join(blocker, 'tendril.sock') })), CniErrorCode.IOFailure, /could not be queued/);
    assert.match(String(e.details), /connect: Not a directory; the socket's directory .*blocker does not exist or is not a directory/);
  });
});

// The agent runs what it finds in the queue as root: the relay writes it only
// where no one but root can write, and makes no directory tree on the way.
describe('the deletion queue is written only where only root can write', () => {
  const base = () => join(dir, 'q');
  before(async () => {
    await mkdir(base(), { mode: 0o700 });
  });

  async function refusedDel(sockDir: string, detail: RegExp): Promise<void> {
    const e = assertCniError(await runRelay(cniEnv('DEL'), conf({ socket: join(sockDir, 'tendril.sock') })), CniErrorCode.IOFailure, /could not be queued/);
    assert.match(String(e.details), detail);
  }

  test('a socket whose directory does not exist (a typo): code 5, no directory made', async () => {
    await refusedDel(join(base(), 'typo', 'nested'), /the socket's directory .*\/typo\/nested does not exist or is not a directory: no agent can serve there/);
    assert.equal(existsSync(join(base(), 'typo')), false, 'nothing created');
  });

  test('a socket directory writable by others (1777, like /tmp), or by its group: code 5, no queue made', async () => {
    for (const mode of [0o1777, 0o770]) {
      const d = join(base(), `open${mode.toString(8)}`);
      await mkdir(d);
      await chmod(d, mode);
      await refusedDel(d, /writable by its group or others/);
      assert.equal(existsSync(join(d, 'deletion-queue')), false);
    }
  });

  test('a socket directory not owned by root: code 5, no queue made', async () => {
    const d = join(base(), 'nobodys');
    await mkdir(d, { mode: 0o700 });
    await chown(d, 65534, 65534);
    await refusedDel(d, /owned by uid 65534, not root/);
    assert.equal(existsSync(join(d, 'deletion-queue')), false);
  });

  test('a queue that is a symlink, not 0700, or not root\'s: code 5, nothing written', async () => {
    const target = join(base(), 'elsewhere');
    await mkdir(target, { mode: 0o700 });
    const cases: Array<[string, (q: string) => Promise<void>, RegExp]> = [
      ['link', (q) => symlink(target, q), /deletion-queue is a symbolic link/],
      ['mode755', async (q) => { await mkdir(q); await chmod(q, 0o755); }, /must be a directory owned by root with mode 0700 \(it is uid 0, mode 0755\)/],
      ['nobody', async (q) => { await mkdir(q, { mode: 0o700 }); await chown(q, 65534, 65534); }, /\(it is uid 65534, mode 0700\)/],
      ['file', (q) => writeFile(q, ''), /deletion-queue is not a directory/],
    ];
    for (const [name, make, detail] of cases) {
      const d = join(base(), name);
      await mkdir(d, { mode: 0o700 });
      const q = join(d, 'deletion-queue');
      await make(q);
      await refusedDel(d, detail);
      if (name !== 'file') assert.deepEqual(await readdir(q), []);
    }
    assert.deepEqual(await readdir(target), [], 'nothing written through the link');
  });
});
