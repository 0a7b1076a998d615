// The real tendril-agent in a namespace of the test's own, whose underlay (a
// dummy device holding the node IP) has MTU 1500: an --mtu above what it
// carries in tunnel mode (1500 - 50) is refused at start with one line on
// stderr and exit code 2, before anything is created (no state directory).
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { AGENT_BIN } from '../../test/support/agentHarness.js';
import { NetnsPool } from '../../test/support/netns.js';
import { requireRoot } from '../../test/support/root.js';
import { runOk } from '../../test/support/run.js';

requireRoot('the pod MTU start-up test');

const pool = new NetnsPool('mtu');
let ns: string;
let dir: string;

before(async () => {
  ns = (await pool.add('n')).name;
  // A veth pair inside the namespace (no dummy driver on every kernel): tdlmtu0 is the underlay.
  await runOk(['ip', '-n', ns, 'link', 'add', 'tdlmtu0', 'mtu', '1500', 'type', 'veth', 'peer', 'name', 'tdlmtu1']);
  await runOk(['ip', '-n', ns, 'link', 'set', 'tdlmtu1', 'up']);
  await runOk(['ip', '-n', ns, 'addr', 'add', '192.0.2.50/24', 'dev', 'tdlmtu0']);
  await runOk(['ip', '-n', ns, 'link', 'set', 'tdlmtu0', 'up']);
  dir = await mkdtemp(join(tmpdir(), 'tdl-mtu-'));
});

after(async () => {
  await pool.cleanup();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function agent(...args: string[]) {
  const stateDir = join(dir, 'state');
  const r = await pool.exec(ns, [AGENT_BIN, '--state-dir', stateDir, '--lib-dir', join(dir, 'lib'), '--node-name', 'tdl-mtu', '--pod-cidr', '10.97.50.0/24', '--node-ip', '192.0.2.50', '--bpffs-root', join(dir, 'nobpffs'), ...args]);
  return { ...r, stateDir };
}

test('an --mtu above the underlay MTU less the overlay is refused at start, nothing created', async () => {
  const r = await agent('--routing-mode', 'tunnel', '--mtu', '1460');
  assert.equal(r.code, 2, r.stderr);
  assert.equal(
    r.stderr.trim(),
    'tendril-agent: --mtu 1460 is larger than the underlay carries in tunnel mode: underlay MTU 1500 - 50 bytes of VXLAN = 1450 (underlay tdlmtu0, MTU 1500); lower --mtu or leave it out to use the largest that fits',
  );
  await assert.rejects(stat(r.stateDir), { code: 'ENOENT' }, 'nothing was created');
});

test('native mode refuses an --mtu above the underlay\'s own', async () => {
  const r = await agent('--routing-mode', 'native', '--mtu', '1501');
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /--mtu 1501 is larger than the underlay carries in native mode: underlay MTU 1500 = 1500 \(underlay tdlmtu0, MTU 1500\)/);
});
