import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { NetnsPool } from '../../test/support/netns.js';
import { requireRoot } from '../../test/support/root.js';
import { runOk } from '../../test/support/run.js';
import { readInterfaceAddresses } from './interfaceAddresses.js';

const pool = new NetnsPool('ifa');
after(() => pool.cleanup());

test('the node\'s interface addresses, read over netlink: global ones in, loopback and link-local out', async () => {
  requireRoot('reads addresses in a test network namespace');
  const ns = await pool.add('n');
  await runOk(['ip', '-n', ns.name, 'link', 'add', 'tdlifa0', 'type', 'veth', 'peer', 'name', 'tdlifa1']);
  await runOk(['ip', '-n', ns.name, 'address', 'add', '10.77.0.1/24', 'dev', 'tdlifa0']);
  await runOk(['ip', '-n', ns.name, 'address', 'add', '169.254.7.7/16', 'scope', 'link', 'dev', 'tdlifa0']);
  await runOk(['ip', '-n', ns.name, 'address', 'add', 'fd77::1/64', 'dev', 'tdlifa0', 'nodad']);
  const addrs = await readInterfaceAddresses(ns.path);
  assert.deepEqual(addrs.sort(), ['10.77.0.1', 'fd77::1']);
});
