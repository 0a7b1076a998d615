// `tendril kvstore get|list|status` while an agent holds its embedded store:
// the store has one opener, so the reads go through the agent's API (after
// checking that agent is the one holding this store), and a write is refused
// with what to do, never calling the CLI "an agent".
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { type AgentProcess, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run, toolEnv } from '../support/run.js';
import { TENDRIL_BIN } from '../support/tendrilBin.js';

requireRoot('the kvstore-while-the-agent-runs test');

const pool = new NetnsPool('kv');
let agent: AgentProcess;
let cleanup = async () => {};

before(async () => {
  ({ agent, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-kv', args: ['--pod-cidr', '10.252.4.0/24'] }));
});
after(async () => {
  await cleanup();
  await pool.cleanup();
});

/** The agent's socket as every agent command takes it, from $TENDRIL_SOCK (--socket is tested below). */
function kvstore(...args: string[]) {
  return run([TENDRIL_BIN, 'kvstore', ...args, '--lib-dir', join(agent.stateDir, 'lib')], { env: { ...toolEnv(), TENDRIL_SOCK: agent.socket } });
}

test('status, list and get read the running agent\'s embedded store through its API', async () => {
  const status = await kvstore('status');
  assert.equal(status.code, 0, status.stderr);
  const health = await agent.client.status();
  assert.match(status.stdout, new RegExp(`^embedded: connected, revision \\d+ \\(.*read through the agent at ${agent.socket}\\)$`, 'm'));
  const revision = Number(/revision (\d+)/.exec(status.stdout)![1]);
  assert.ok(revision >= health.kvstore.revision && revision > 0, `${revision} vs the agent's ${health.kvstore.revision}`);

  const list = await kvstore('list', 'tendril/', '-o', 'json');
  assert.equal(list.code, 0, list.stderr);
  const listed = JSON.parse(list.stdout) as { revision: number; kvs: Array<{ key: string; value: string }> };
  assert.ok(listed.kvs.length > 0, 'the agent stored its node, IPAM and identities');
  const node = listed.kvs.find((k) => k.key.includes('tdl-node-kv'));
  assert.ok(node, `a key of the node: ${listed.kvs.map((k) => k.key).join(', ')}`);

  const get = await kvstore('get', node.key);
  assert.equal(get.code, 0, get.stderr);
  // The node may republish its record between the two reads: the key is what must match.
  assert.ok(get.stdout.startsWith(`${node.key} => {`), get.stdout);

  const missing = await kvstore('get', 'tendril/no/such/key');
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /key "tendril\/no\/such\/key" not found/);
  assert.equal((await agent.client.health()).status, 'ok');
});

test('a write while the agent holds the store is refused, saying a running agent holds it', async () => {
  const r = await kvstore('set', 'tendril/tdl-test', 'x');
  assert.equal(r.code, 1, r.stdout);
  assert.match(r.stderr, new RegExp(`KVSTORE_LOCKED: embedded store .*tendril\\.db is in use by another process \\(pid ${agent.pid!}\\).*a running agent holds it; stop the agent to write`));
  assert.doesNotMatch(r.stderr, /only one agent/);
  const gone = await kvstore('get', 'tendril/tdl-test');
  assert.equal(gone.code, 1);
});

test('a read given another agent\'s socket, or none that answers, says so instead of reading another store', async () => {
  const r = await run([TENDRIL_BIN, 'kvstore', 'list', '--lib-dir', join(agent.stateDir, 'lib'), '--socket', join(agent.stateDir, 'no-agent.sock')]);
  assert.equal(r.code, 1, r.stdout);
  assert.match(r.stderr, /KVSTORE_LOCKED: .*no agent answers at .*no-agent\.sock to read through: give the agent's socket with --socket/);
  const named = await run([TENDRIL_BIN, 'kvstore', 'status', '--lib-dir', join(agent.stateDir, 'lib'), '--socket', agent.socket]);
  assert.equal(named.code, 0, named.stderr);
  assert.match(named.stdout, /^embedded: connected/);
});
