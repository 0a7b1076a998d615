// A second agent on an owned node, or on a socket path it must not take,
// fails before it touches anything:
// no directory, no kvstore, no datapath call. Real agents over the fake
// datapath, no root needed.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createLogger } from '../logging/logger.js';
import { Agent } from './agent.js';
import { checkSocketPath } from '../api/server/server.js';
import { type AgentConfig, defaultConfig, validateConfig } from './config.js';
import { NetnsNodeLock } from './nodeLock.js';
import { OwnershipError } from '../errors/ownershipError.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let first: FakeNodeAgent;
let scratch = '';

before(async () => {
  first = await startFakeNodeAgent({ nodeName: 'tdl-own-first', podCidr: '10.89.0.0/24' });
  scratch = await mkdtemp(join(tmpdir(), 'tdl-own-unit-'));
});

after(async () => {
  await first.stop();
  await rm(scratch, { recursive: true, force: true });
});

/** A second agent's config: its own directories under `name`, the socket as given. */
function secondConfig(name: string, socket?: string): AgentConfig {
  const dir = join(scratch, name);
  return validateConfig({ ...defaultConfig(), nodeName: 'tdl-own-second', stateDir: join(dir, 'state'), libDir: join(dir, 'lib'), socket: socket ?? join(dir, 'state', 'tendril.sock'), podCidrs: ['10.90.0.0/24'] });
}

/** The first agent's node lock (startFakeNodeAgent names it after the agent's temp dir). */
const firstNodeLock = () => new NetnsNodeLock({ name: `tendril-agent-fake-${basename(dirname(first.config.stateDir))}` });
const otherNodeLock = (name: string) => new NetnsNodeLock({ name: `tendril-agent-fake-other-${name}-${process.pid}` });

async function assertRefusedUntouched(config: AgentConfig, nodeLock: NetnsNodeLock, code: OwnershipError['code'], message: RegExp): Promise<void> {
  const callsBefore = first.datapath.calls.length;
  await assert.rejects(Agent.start(config, createLogger('tdl-own-second', 'silent'), { datapath: first.datapath, nodeLock }), (e: unknown) => {
    assert.ok(e instanceof OwnershipError, String(e));
    assert.equal(e.code, code);
    assert.match(e.message, message);
    return true;
  });
  assert.equal(first.datapath.calls.length, callsBefore, 'no datapath call');
  await assert.rejects(stat(config.stateDir), { code: 'ENOENT' }, 'no state dir');
  await assert.rejects(stat(config.libDir), { code: 'ENOENT' }, 'no kvstore');
  assert.equal((await first.agent.api().health.health()).status, 'ok');
}

describe('a second agent', () => {
  test('on the same node (its lock held) is refused with NODE_OWNED naming the holder', async () => {
    await assertRefusedUntouched(secondConfig('same-node'), firstNodeLock(), 'NODE_OWNED', new RegExp(`another agent owns this node .*pid ${process.pid}`));
  });

  test('on another node but the first agent\'s socket is refused with SOCKET_SERVED', async () => {
    await assertRefusedUntouched(secondConfig('same-socket', first.config.socket), otherNodeLock('a'), 'SOCKET_SERVED', /another agent is serving/);
    // Its lock was given back: the same node can still get an agent.
    const claim = await otherNodeLock('a').claim();
    await claim.release();
  });

  test('with --socket naming a regular file is refused and the file is left as it was', async () => {
    const file = join(scratch, 'precious.txt');
    await writeFile(file, 'keep me\n');
    await assertRefusedUntouched(secondConfig('regular-file', file), otherNodeLock('b'), 'SOCKET_PATH_TAKEN', /exists and is not a socket/);
    assert.equal(await readFile(file, 'utf8'), 'keep me\n');
  });
});

describe('checkSocketPath', () => {
  test('nothing there is free; a symlink or a directory is refused and kept', async () => {
    assert.equal(await checkSocketPath(join(scratch, 'absent.sock')), 'free');
    const link = join(scratch, 'link.sock');
    await symlink(first.config.socket, link);
    await assert.rejects(checkSocketPath(link), { code: 'SOCKET_PATH_TAKEN' });
    assert.ok((await stat(link)).isSocket(), 'the symlink still points at the live socket');
    await assert.rejects(checkSocketPath(scratch), { code: 'SOCKET_PATH_TAKEN' });
  });

  test('a socket file its dead owner left behind is stale', async () => {
    const path = join(scratch, 'stale.sock');
    // A process that binds the socket and is killed before it can remove it.
    const script = `require('node:net').createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, 'SIGKILL'));`;
    await new Promise((resolve) => spawn(process.execPath, ['-e', script], { stdio: 'ignore' }).once('exit', resolve));
    assert.ok((await stat(path)).isSocket());
    assert.equal(await checkSocketPath(path), 'stale');
  });

  test('a live agent\'s socket is SOCKET_SERVED', async () => {
    await assert.rejects(checkSocketPath(first.config.socket), { code: 'SOCKET_SERVED' });
  });
});
