// Runs the eBPF datapath's routing-mode tests (bpfDatapathTunnelSuite) inside
// a `tdl` node namespace (runSuiteInNodeNetns): tendril_vxlan, tendril_host
// and the routes are made there and go with it.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { runSuiteInNodeNetns } from '../testing/nodeNetnsSuite.js';

requireRoot('the eBPF datapath routing-mode tests');

const pool = new NetnsPool('bpt');
after(() => pool.cleanup());

test('the eBPF datapath makes the overlay in tunnel mode and removes it in native mode', { timeout: 300_000 }, async () => {
  const output = await runSuiteInNodeNetns(pool, new URL('./bpfDatapathTunnelSuite.js', import.meta.url));
  assert.match(output, /BpfDatapath routing modes/);
  assert.doesNotMatch(output, /^# fail [1-9]/m);
});
