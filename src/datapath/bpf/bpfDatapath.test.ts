// Runs the datapath contract and the eBPF datapath's own tests (bpfDatapathSuite)
// inside a `tdl` node namespace (runSuiteInNodeNetns); pinned maps and links
// live under temp bpffs roots the suite removes.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { runSuiteInNodeNetns } from '../testing/nodeNetnsSuite.js';

requireRoot('the eBPF datapath tests');

const pool = new NetnsPool('bpd');
after(() => pool.cleanup());

test('the eBPF datapath passes the datapath contract and its own tests', { timeout: 300_000 }, async () => {
  const output = await runSuiteInNodeNetns(pool, new URL('./bpfDatapathSuite.js', import.meta.url));
  assert.match(output, /datapath contract: bpf/);
  assert.match(output, /BpfDatapath/);
});
