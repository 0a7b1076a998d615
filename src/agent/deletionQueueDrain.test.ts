// The agent drains the deletion queue as root at start: it runs only what
// root wrote there (a root-owned regular file, not group/world-writable, in a
// root-owned 0700 directory, neither a symlink), and leaves anything else in
// place with an error in the log. Over the fake datapath; root for chown.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, chown, mkdir, readdir, rename, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { pino } from 'pino';
import { deletionQueueDir } from '../api/deletionQueue.js';
import type { CniRequest } from '../api/types.js';
import type { Logger } from '../logging/logger.js';
import { requireRoot } from '../../test/support/root.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

requireRoot('the deletion queue drain test (it plants entries owned by another user)');

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlqueue', type: 'tendril-cni' });

let node: FakeNodeAgent;
let pods = 0;
let logs: Array<{ level: number; msg: string; file?: string; dir?: string; reason?: string }> = [];

const captured: Logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as (typeof logs)[number]) });

beforeEach(async () => {
  logs = [];
  node = await startFakeNodeAgent({ nodeName: 'tdl-queue-unit', podCidr: '10.89.0.0/24', logger: captured });
});
afterEach(() => node.stop());

/** ADDs a pod; returns the DEL a runtime would have sent for it. */
async function addPod(): Promise<CniRequest> {
  const containerId = `tdl-q${pods}`;
  const netns = `/var/run/netns/tdlqueueunit${pods++}`;
  node.datapath.addNetns(netns);
  await node.agent.api().cni.handle({ command: 'ADD', containerId, netns, ifName: 'eth0', path: '/opt/cni/bin', config: CONF });
  return { command: 'DEL', containerId, netns, ifName: 'eth0', path: '/opt/cni/bin', config: CONF };
}

const qdir = () => deletionQueueDir(node.config.socket);
const entryName = (i = 0) => `${Date.now()}-0000000${i}.json`;
const containers = () => node.agent.api().endpoints.list().map((e) => e.containerId).sort();

/** Queues `req` as tendril-cni does (root, 0600, in a root 0700 dir); returns the file's path. */
async function queue(req: CniRequest, i = 0): Promise<string> {
  await mkdir(qdir(), { recursive: true, mode: 0o700 });
  const file = join(qdir(), entryName(i));
  await writeFile(file, JSON.stringify(req), { mode: 0o600 });
  return file;
}

async function restart(between: () => Promise<void>): Promise<void> {
  node = await node.restart(between, { logger: captured });
}

/** The files (or queue dirs) an error was logged about, whose reason matches (the agent drains twice per start). */
const refusedAbout = (what: RegExp) => new Set(logs.filter((l) => l.level >= 50 && what.test(`${l.msg} ${l.reason ?? ''}`)).map((l) => l.file ?? l.dir)).size;

describe('the agent drains only what root queued', () => {
  test('a DEL root queued is done at start and removed', async () => {
    const req = await addPod();
    await restart(async () => {
      await queue(req);
    });
    assert.deepEqual(containers(), []);
    assert.deepEqual(await readdir(qdir()), []);
  });

  test('an entry owned by another user (uid 65534) deletes nothing; it is logged and left in place', async () => {
    const req = await addPod();
    let file = '';
    await restart(async () => {
      file = await queue(req);
      await chown(file, 65534, 65534);
    });
    assert.deepEqual(containers(), [req.containerId], 'the endpoint is still there');
    assert.deepEqual(await readdir(qdir()), [file.split('/').pop()], 'left in place');
    assert.equal(refusedAbout(/owned by uid 65534/), 1, JSON.stringify(logs));
  });

  test('an entry that is group- or world-writable, a symlink or a FIFO deletes nothing; start does not hang', { timeout: 30_000 }, async () => {
    const reqs = [await addPod(), await addPod(), await addPod(), await addPod()];
    await restart(async () => {
      await chmod(await queue(reqs[0]!, 0), 0o620);
      await chmod(await queue(reqs[1]!, 1), 0o606);
      // A root-written request elsewhere, linked into the queue.
      const elsewhere = join(node.config.stateDir, 'planted.json');
      await writeFile(elsewhere, JSON.stringify(reqs[2]), { mode: 0o600 });
      await symlink(elsewhere, join(qdir(), entryName(2)));
      execFileSync('mkfifo', ['-m', '0600', join(qdir(), entryName(3))]);
    });
    assert.deepEqual(containers(), reqs.map((r) => r.containerId).sort());
    assert.equal((await readdir(qdir())).length, 4, 'all left in place');
    assert.equal(refusedAbout(/writable by its group or others/), 2, JSON.stringify(logs));
    assert.equal(refusedAbout(/not a regular file/), 2, JSON.stringify(logs));
  });

  const badDirs: Array<[string, (dir: string) => Promise<void>, RegExp]> = [
    ['owned by uid 65534', (d) => chown(d, 65534, 65534), /uid 65534, mode 0700/],
    ['mode 0777', (d) => chmod(d, 0o777), /uid 0, mode 0777/],
    ['mode 0755', (d) => chmod(d, 0o755), /uid 0, mode 0755/],
    [
      'a symlink to a root 0700 directory',
      async (d) => {
        const real = join(node.config.stateDir, 'real-queue');
        await rename(d, real);
        await symlink(real, d);
      },
      /symbolic link/,
    ],
  ];
  for (const [what, spoil, reason] of badDirs) {
    test(`a queue directory ${what}: nothing in it is run`, async () => {
      const req = await addPod();
      await restart(async () => {
        await queue(req);
        await spoil(qdir());
      });
      assert.deepEqual(containers(), [req.containerId]);
      assert.equal((await readdir(qdir())).length, 1, 'left in place');
      assert.equal(refusedAbout(reason), 1, JSON.stringify(logs));
    });
  }

  test('a queued DEL older than the endpoint it names (the runtime added it again since) is dropped, the endpoint kept', async () => {
    const req = await addPod();
    await mkdir(qdir(), { recursive: true, mode: 0o700 });
    const stale = join(qdir(), `${Date.now() - 60_000}-0000000a.json`);
    await restart(async () => {
      await writeFile(stale, JSON.stringify(req), { mode: 0o600 });
    });
    assert.deepEqual(containers(), [req.containerId]);
    assert.deepEqual(await readdir(qdir()), []);
  });
});
