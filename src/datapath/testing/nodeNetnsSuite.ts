/**
 * Runs a datapath test suite as a child test run inside a fresh `tdl` node
 * namespace, so the host device, routes, sysctls and nftables tables it
 * creates never touch the host's namespace (the namespace goes with
 * everything in it). Returns the child's output once it exited 0.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { NetnsPool } from '../../testing/netns.js';

export async function runSuiteInNodeNetns(pool: NetnsPool, suite: URL): Promise<string> {
  const node = await pool.add('node');
  // A child test run of its own: without the parent runner's context variable it reports normally.
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const child = spawn('nsenter', [`--net=${node.path}`, '--', process.execPath, '--enable-source-maps', '--test-reporter=spec', fileURLToPath(suite)], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr.on('data', (c: Buffer) => (output += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, output);
  return output;
}
