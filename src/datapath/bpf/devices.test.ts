// Node device detection (--devices) in a `tdl` namespace of its own, read
// through a netlink socket opened there. Attaching the programs is tested in
// bpfDatapathSuite, which runs inside its node namespace (an ifindex means
// the device of the namespace the attaching process is in).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { runOk } from '../../../test/support/run.js';
import { requireRoot } from '../../../test/support/root.js';
import { Netlink } from '../kernel/netlink/index.js';
import { isDatapathError } from '../types.js';
import { detectDevices } from './devices.js';

requireRoot('the node device detection tests');

const pool = new NetnsPool('dev');

describe('detectDevices', { timeout: 60_000 }, () => {
  let nl: Netlink;
  let node: string;

  before(async () => {
    const ns = await pool.add('node');
    const outside = await pool.add('out');
    node = ns.name;
    const ip = (...argv: string[]) => runOk(['ip', '-n', node, ...argv]);
    // The kernel here has no dummy driver: veth pairs stand in for plain devices.
    // A device to the outside with a global address: detected.
    await ip('link', 'add', 'tdlup0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', outside.name);
    await ip('addr', 'add', '192.0.2.10/24', 'dev', 'tdlup0');
    await ip('addr', 'add', '192.0.2.11/24', 'dev', 'tdlup0');
    await ip('link', 'set', 'tdlup0', 'up');
    // Up but only a link-scope address; down with a global one; tendril's own; a pod's: none of them.
    await ip('link', 'add', 'tdllink', 'type', 'veth', 'peer', 'name', 'tdllinkp');
    await ip('addr', 'add', '169.254.7.1/16', 'dev', 'tdllink', 'scope', 'link');
    await ip('link', 'set', 'tdllink', 'up');
    await ip('link', 'add', 'tdldown', 'type', 'veth', 'peer', 'name', 'tdldownp');
    await ip('addr', 'add', '198.51.100.1/24', 'dev', 'tdldown');
    await ip('link', 'add', 'tendril_host', 'type', 'veth', 'peer', 'name', 'tendril_net');
    await ip('addr', 'add', '10.217.0.1/32', 'dev', 'tendril_host');
    await ip('link', 'set', 'tendril_host', 'up');
    await ip('link', 'add', 'lxc0123456789ab', 'type', 'veth', 'peer', 'name', 'tdllxcp');
    await ip('addr', 'add', '10.217.0.9/32', 'dev', 'lxc0123456789ab');
    await ip('link', 'set', 'lxc0123456789ab', 'up');
    // A bridge port carries no address of its own; the bridge with an address is the device.
    await ip('link', 'add', 'tdlbr0', 'type', 'bridge');
    await ip('link', 'add', 'tdlport', 'type', 'veth', 'peer', 'name', 'tdlportp');
    await ip('link', 'set', 'tdlport', 'master', 'tdlbr0');
    await ip('link', 'set', 'tdlport', 'up');
    await ip('addr', 'add', '203.0.113.1/24', 'dev', 'tdlbr0');
    await ip('link', 'set', 'tdlbr0', 'up');
    await ip('addr', 'add', '127.0.0.2/8', 'dev', 'lo');
    // An IPv6-only node's device: a global IPv6 address, no IPv4 one.
    await ip('link', 'add', 'tdlv6', 'type', 'veth', 'peer', 'name', 'tdlv6p');
    await ip('addr', 'add', '2001:db8:7::1/64', 'dev', 'tdlv6', 'nodad');
    await ip('link', 'set', 'tdlv6', 'up');
    nl = await Netlink.open({ netns: ns.path });
  });
  after(async () => {
    await nl?.close();
    await pool.cleanup();
  });

  it('detects the interfaces that are up with a global address of either family, except lo, tendril_* and pods\' interfaces, with their first addresses and MAC', async () => {
    const devices = await detectDevices(nl);
    assert.deepEqual(
      devices.map((d) => [d.name, d.ipv4, d.ipv6]),
      [
        ['tdlbr0', '203.0.113.1', undefined],
        ['tdlup0', '192.0.2.10', undefined],
        // An IPv6-only node's device: no IPv4 address, its IPv6 one the IPv6 masquerade source.
        ['tdlv6', undefined, '2001:db8:7::1'],
      ],
    );
    const up = await nl.getLink('tdlup0');
    assert.equal(devices[1]!.ifindex, up.index);
    assert.equal(devices[1]!.mac, up.mac);
  });

  it('leaves out interfaces the caller says are pods\' (adopted ones, any name)', async () => {
    const devices = await detectDevices(nl, { exclude: (name) => name === 'tdlbr0' || name === 'tdlv6' });
    assert.deepEqual(
      devices.map((d) => d.name),
      ['tdlup0'],
    );
  });

  it('takes exactly the configured devices; one that does not exist, cannot be one or has no global address fails', async () => {
    assert.deepEqual(
      (await detectDevices(nl, { configured: ['tdlup0'] })).map((d) => d.name),
      ['tdlup0'],
    );
    await assert.rejects(detectDevices(nl, { configured: ['tdlup0', 'tdlnope'] }), (err: unknown) => isDatapathError(err, 'not-found') && /tdlnope/.test((err as Error).message));
    await assert.rejects(detectDevices(nl, { configured: ['lo'] }), (err: unknown) => isDatapathError(err, 'refused'));
    await assert.rejects(detectDevices(nl, { configured: ['tdllink'] }), (err: unknown) => isDatapathError(err, 'failed') && /no global IPv4 or IPv6 address/.test((err as Error).message));
    // An IPv6-only node's device is taken, with no IPv4 address.
    const [v6] = await detectDevices(nl, { configured: ['tdlv6'] });
    assert.deepEqual([v6?.name, v6?.ipv4, v6?.ipv6], ['tdlv6', undefined, '2001:db8:7::1']);
  });
});
