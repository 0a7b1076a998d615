// Runs the datapath contract suite against the Linux datapath inside a `tdl`
// node namespace, so routes, sysctls and the nftables table it creates never
// touch the host's namespace; the namespace goes with everything in it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';

requireRoot('the Linux datapath contract test');

const pool = new NetnsPool('dpc');
after(() => pool.cleanup());

test('the Linux datapath passes the datapath contract', { timeout: 180_000 }, async () => {
  const node = await pool.add('node');
  const suite = fileURLToPath(new URL('./linuxContractSuite.js', import.meta.url));
  // A child test run of its own: without the parent runner's context variable it reports normally.
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn('nsenter', [`--net=${node.path}`, '--', process.execPath, '--enable-source-maps', '--test-reporter=spec', suite], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, output);
  assert.match(output, /datapath contract: linux/);
});
