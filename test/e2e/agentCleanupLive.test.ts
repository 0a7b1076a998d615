// `tendril-agent cleanup` must find a running agent however it was started:
// here its --socket is outside its --state-dir and cleanup runs from another
// network namespace (where the agent's node lock is invisible), or is given
// the state dir through a symlink. Each time it refuses, names the agent
// (pid and socket), and the agent's pins, state dir and kvstore stay while
// it keeps serving; a dry run lists none of it. Once the agent has stopped,
// cleanup removes it all.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { AGENT_BIN, type AgentProcess, type SingleNode, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the live agent cleanup test');

const pool = new NetnsPool('cv');
const bpffsRoot = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
let node: string;
let elsewhere: string;
let agent: AgentProcess;
let socketDir: string;
let linkDir: string;
let cleanup = async () => {};

before(async () => {
  socketDir = await mkdtemp(join(tmpdir(), 'tdl-cvsock-'));
  linkDir = await mkdtemp(join(tmpdir(), 'tdl-cvlink-'));
  ({ node, agent, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-cv', args: ['--pod-cidr', '10.252.2.0/24', '--bpffs-root', bpffsRoot, '--socket', join(socketDir, 'agent.sock')] }));
  elsewhere = (await pool.add('other')).name;
});
after(async () => {
  await cleanup();
  await pool.cleanup();
  await rm(bpffsRoot, { recursive: true, force: true });
  await rm(socketDir, { recursive: true, force: true });
  await rm(linkDir, { recursive: true, force: true });
});

function cleanupIn(ns: string, stateDir: string, ...args: string[]) {
  return pool.exec(ns, [AGENT_BIN, 'cleanup', '--state-dir', stateDir, '--lib-dir', join(stateDir, 'lib'), '--bpffs-root', bpffsRoot, ...args]);
}

const kvstoreFile = () => join(agent.stateDir, 'lib', 'kvstore', 'tendril.db');

async function assertAgentIntact(what: string): Promise<void> {
  assert.ok(existsSync(join(bpffsRoot, 'tendril')), `${what}: the pins stay`);
  assert.ok(existsSync(agent.stateDir), `${what}: the state dir stays`);
  assert.ok(existsSync(kvstoreFile()), `${what}: the kvstore stays`);
  assert.equal((await agent.client.health()).status, 'ok', `${what}: the agent still serves`);
}

test('cleanup from another network namespace refuses an agent whose socket is outside its state dir, and names it', async () => {
  const pid = agent.pid!;
  for (const args of [['--force'], ['--force', '--socket', agent.socket]]) {
    const r = await cleanupIn(elsewhere, agent.stateDir, ...args);
    assert.equal(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, new RegExp(`refusing: an agent uses this state: agent pid ${pid}, socket ${agent.socket}: .*stop it first \\(nothing was changed\\)`));
    assert.doesNotMatch(r.stdout, /removing|done/);
    await assertAgentIntact(args.join(' '));
  }
});

test('a dry run of a live agent\'s state says it would refuse and lists none of its data', async () => {
  const r = await cleanupIn(elsewhere, agent.stateDir, '--dry-run');
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stdout, /^would refuse: nothing would be removed$/m);
  assert.doesNotMatch(r.stdout, /would remove|bpf pins|directory|kvstore/);
  assert.match(r.stderr, new RegExp(`agent pid ${agent.pid!}, socket ${agent.socket}`));
  await assertAgentIntact('dry run');
});

test('the state dir given through a symlink is still the live agent\'s', async () => {
  const link = join(linkDir, 'state');
  await symlink(agent.stateDir, link);
  const r = await cleanupIn(elsewhere, link, '--force');
  assert.equal(r.code, 1, r.stdout + r.stderr);
  assert.match(r.stderr, new RegExp(`agent pid ${agent.pid!}.*holds .*tendril\\.db`));
  await assertAgentIntact('through a symlink');
});

test('once the agent has stopped, cleanup from the node removes its pins and state', async () => {
  await agent.stop();
  // The run record edited while the agent was down: a socket nothing answers on, / as its store. A hint, never proof: cleanup goes on.
  await writeFile(join(agent.stateDir, 'agent.json'), `${JSON.stringify({ pid: 1, socket: join(socketDir, 'gone.sock'), libDir: '/', bpffsRoot: '/', kvstorePath: '/' })}\n`);
  const r = await cleanupIn(node, agent.stateDir, '--force');
  assert.equal(r.code, 0, r.stdout + r.stderr);
  assert.match(r.stdout, new RegExp(`bpf pins +${bpffsRoot}/tendril$`, 'm'));
  assert.equal(existsSync(join(bpffsRoot, 'tendril')), false);
  assert.equal(existsSync(agent.stateDir), false);
});

test('an agent whose state dir names neither its socket nor its store is found by its node lock, in its own network namespace', async (t) => {
  const lockPool = new NetnsPool('cw');
  const outside = await mkdtemp(join(tmpdir(), 'tdl-cwout-'));
  const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
  let started: SingleNode | undefined;
  t.after(async () => {
    await started?.cleanup();
    await lockPool.cleanup();
    await rm(outside, { recursive: true, force: true });
    await rm(root, { recursive: true, force: true });
  });
  // Socket and store outside the state and lib dirs, and no run record (an agent of an older version wrote none).
  const lockNode = (started = await startSingleNode(lockPool, { nodeName: 'tdl-node-cw', args: ['--pod-cidr', '10.252.3.0/24', '--bpffs-root', root, '--socket', join(outside, 'agent.sock'), '--kvstore-opt', `embedded.path=${join(outside, 'kv.db')}`] }));
  const other = (await lockPool.add('other')).name;
  await rm(join(lockNode.agent.stateDir, 'agent.json'), { force: true });
  const r = await lockPool.exec(other, [AGENT_BIN, 'cleanup', '--force', '--state-dir', lockNode.agent.stateDir, '--lib-dir', join(lockNode.agent.stateDir, 'lib'), '--bpffs-root', root]);
  assert.equal(r.code, 1, r.stdout + r.stderr);
  // The services' database in the state dir, open while the agent runs, gives it away first; the node lock finds an agent whose state dir holds nothing open.
  assert.match(r.stderr, new RegExp(`agent pid ${lockNode.agent.pid!}, socket ${lockNode.agent.socket}: .*(holds the node lock of its network namespace and serves|holds ${lockNode.agent.stateDir}/services/services\\.db open)`));
  assert.ok(existsSync(join(root, 'tendril')));
  assert.ok(existsSync(lockNode.agent.stateDir));
  assert.equal((await lockNode.agent.client.health()).status, 'ok');
});
