// Runs the datapath contract suite against the Linux datapath inside a `tdl`
// node namespace (runSuiteInNodeNetns).
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { runSuiteInNodeNetns } from './nodeNetnsSuite.js';

requireRoot('the Linux datapath contract test');

const pool = new NetnsPool('dpc');
after(() => pool.cleanup());

test('the Linux datapath passes the datapath contract', { timeout: 180_000 }, async () => {
  const output = await runSuiteInNodeNetns(pool, new URL('./linuxContractSuite.js', import.meta.url));
  assert.match(output, /datapath contract: linux/);
});
