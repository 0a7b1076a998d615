// Runs the datapath contract and the eBPF datapath's own tests (bpfDatapathSuite)
// inside a `tdl` node namespace, so the host device, routes, sysctls and
// nftables table they create never touch the host's namespace; pinned maps
// and links live under temp bpffs roots the suite removes.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, test } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';

requireRoot('the eBPF datapath tests');

const pool = new NetnsPool('bpd');
after(() => pool.cleanup());

test('the eBPF datapath passes the datapath contract and its own tests', { timeout: 300_000 }, async () => {
  const node = await pool.add('node');
  const suite = fileURLToPath(new URL('./bpfDatapathSuite.js', import.meta.url));
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn('nsenter', [`--net=${node.path}`, '--', process.execPath, '--enable-source-maps', '--test-reporter=spec', suite], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, output);
  assert.match(output, /datapath contract: bpf/);
  assert.match(output, /BpfDatapath/);
});
