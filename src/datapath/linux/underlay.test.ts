// detectUnderlay against real `tdl` namespaces: each rule in its order.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { Netlink, NetlinkBatch } from '../kernel/netlink/index.js';
import { isDatapathError } from '../types.js';
import { detectUnderlay } from './underlay.js';

requireRoot('the underlay detection tests');

describe('detectUnderlay', { timeout: 60_000 }, () => {
  const pool = new NetnsPool('und');
  let ns: { name: string; path: string };
  let nl: Netlink;
  const index = async (name: string) => (await nl.getLink(name)).index;

  before(async () => {
    ns = await pool.add('node');
    nl = await Netlink.open({ netns: ns.path });
  });
  after(async () => {
    await nl?.close();
    await pool.cleanup();
  });

  it('a namespace with nothing but loopback has none', async () => {
    assert.equal(await detectUnderlay({ netns: ns.path }), undefined);
    assert.equal(await detectUnderlay({ netns: ns.path, nodeIp: '127.0.0.1' }), undefined, 'lo is never the underlay');
  });

  it('finds the device by node IP, then --devices, then the default route, then the first up device with a global IPv4', async () => {
    // Made first, so they come first by index: tendril's and pods' devices are never the underlay.
    await nl.createVeth({ name: 'tendril_host', peer: { name: 'tendril_net' } });
    await nl.createVeth({ name: 'lxc0tdl', peer: { name: 'lxc1tdl' } });
    await nl.createVeth({ name: 'tdlu0', mtu: 1400, peer: { name: 'tdlu1', mtu: 1300 } });
    const batch = new NetlinkBatch();
    for (const name of ['tendril_host', 'tendril_net', 'lxc0tdl', 'lxc1tdl', 'tdlu0', 'tdlu1']) batch.setLink(await index(name), { up: true });
    batch
      .addAddress({ index: await index('tendril_host'), address: '10.217.0.1/32' })
      .addAddress({ index: await index('lxc0tdl'), address: '10.217.1.1/24' })
      .addAddress({ index: await index('tdlu0'), address: '192.0.2.1/24' })
      .addAddress({ index: await index('tdlu1'), address: '198.51.100.1/24' })
      .addAddress({ index: await index('tdlu1'), address: '198.51.100.2/24' });
    await nl.apply(batch);
    const u0 = { device: 'tdlu0', ifindex: await index('tdlu0'), mtu: 1400 };
    const u1 = { device: 'tdlu1', ifindex: await index('tdlu1'), mtu: 1300 };

    // No default route: the first up device (by index) with a global IPv4 other than tendril_* and lxc*.
    const [first, second] = u0.ifindex < u1.ifindex ? [{ ...u0, ip: '192.0.2.1' }, { ...u1, ip: '198.51.100.1' }] : [{ ...u1, ip: '198.51.100.1' }, { ...u0, ip: '192.0.2.1' }];
    assert.deepEqual(await detectUnderlay({ netns: ns.path }), first);
    // The default route's device, its first address.
    await nl.addRoute({ dst: 'default', gateway: '198.51.100.254' });
    assert.deepEqual(await detectUnderlay({ netns: ns.path }), { ...u1, ip: '198.51.100.1' });
    // A node IP no device holds says nothing: the next rule decides.
    assert.deepEqual(await detectUnderlay({ netns: ns.path, nodeIp: '203.0.113.5' }), { ...u1, ip: '198.51.100.1' });
    // --devices before the default route: the first that exists with a global IPv4.
    assert.deepEqual(await detectUnderlay({ netns: ns.path, devices: ['tdlmissing0', 'tendril_host', 'tdlu0'] }), { ...u0, ip: '192.0.2.1' });
    // The node IP first of all, that very address (the device's second one here).
    assert.deepEqual(await detectUnderlay({ netns: ns.path, nodeIp: '198.51.100.2', devices: ['tdlu0'] }), { ...u1, ip: '198.51.100.2' });
    assert.deepEqual(await detectUnderlay({ netns: ns.path, nodeIp: '192.0.2.1' }), { ...u0, ip: '192.0.2.1' });
    // The router address on tendril_host is never the node IP's device.
    assert.deepEqual(await detectUnderlay({ netns: ns.path, nodeIp: '10.217.0.1' }), { ...u1, ip: '198.51.100.1' });
    // A down device is not picked by the last rule.
    await nl.deleteRoute({ dst: 'default', family: 4 });
    assert.deepEqual(await detectUnderlay({ netns: ns.path }), first);
    await nl.setLink(first.device, { up: false });
    assert.deepEqual(await detectUnderlay({ netns: ns.path }), second);
    await nl.setLink(first.device, { up: true });
  });

  it('a device with a global IPv6 address next to its IPv4 one reports it as ip6 (the node\'s second InternalIP); link-local ones are not', async () => {
    const u0 = { device: 'tdlu0', ifindex: await index('tdlu0'), mtu: 1400 };
    assert.deepEqual(await detectUnderlay({ netns: ns.path, nodeIp: '192.0.2.1' }), { ...u0, ip: '192.0.2.1' }, 'a veth\'s fe80:: address is no InternalIP');
    const r = await pool.exec(ns.name, ['ip', '-6', 'addr', 'add', '2001:db8:7::1/64', 'dev', 'tdlu0', 'nodad']);
    assert.equal(r.code, 0, r.stderr);
    try {
      assert.deepEqual(await detectUnderlay({ netns: ns.path, nodeIp: '192.0.2.1' }), { ...u0, ip: '192.0.2.1', ip6: '2001:db8:7::1' });
      assert.deepEqual(await detectUnderlay({ netns: ns.path, devices: ['tdlu0'] }), { ...u0, ip: '192.0.2.1', ip6: '2001:db8:7::1' });
      // An IPv6 node IP is the node IP itself: no second one.
      assert.deepEqual(await detectUnderlay({ netns: ns.path, nodeIp: '2001:db8:7::1' }), { ...u0, ip: '2001:db8:7::1' });
    } finally {
      await pool.exec(ns.name, ['ip', '-6', 'addr', 'del', '2001:db8:7::1/64', 'dev', 'tdlu0']);
    }
  });

  it('an IPv6-only node (no global IPv4 anywhere): --devices, the IPv6 default route\'s device, then the first up device with a global IPv6', async () => {
    const { name: ns6, path } = await pool.add('v6only');
    const nl6 = await Netlink.open({ netns: path });
    try {
      await nl6.createVeth({ name: 'tdlv0', mtu: 1400, peer: { name: 'tdlv1', mtu: 1300 } });
      const [v0, v1] = [await nl6.getLink('tdlv0'), await nl6.getLink('tdlv1')];
      await nl6.apply(new NetlinkBatch().setLink(v0.index, { up: true }).setLink(v1.index, { up: true }));
      for (const [dev, a] of [['tdlv0', '2001:db8:8::1/64'], ['tdlv1', '2001:db8:9::1/64']] as const) {
        const r = await pool.exec(ns6, ['ip', '-6', 'addr', 'add', a, 'dev', dev, 'nodad']);
        assert.equal(r.code, 0, r.stderr);
      }
      const u0 = { device: 'tdlv0', ifindex: v0.index, mtu: 1400, ip: '2001:db8:8::1' };
      const u1 = { device: 'tdlv1', ifindex: v1.index, mtu: 1300, ip: '2001:db8:9::1' };
      assert.deepEqual(await detectUnderlay({ netns: path }), v0.index < v1.index ? u0 : u1, 'the first up device with a global IPv6');
      assert.deepEqual(await detectUnderlay({ netns: path, devices: ['tdlv1'] }), u1);
      const r = await pool.exec(ns6, ['ip', '-6', 'route', 'add', 'default', 'via', '2001:db8:9::fe', 'dev', 'tdlv1']);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(await detectUnderlay({ netns: path }), u1, 'the IPv6 default route\'s device');
      assert.deepEqual(await detectUnderlay({ netns: path, nodeIp: '2001:db8:8::1' }), u0);
    } finally {
      await nl6.close();
    }
  });

  it('errors: a node IP that is not an address, a namespace that does not exist', async () => {
    await assert.rejects(detectUnderlay({ netns: ns.path, nodeIp: 'node-a' }), (err: unknown) => isDatapathError(err, 'failed') && /node-a/.test((err as Error).message));
    await assert.rejects(detectUnderlay({ netns: '/var/run/netns/tdl-no-such-ns' }), (err: unknown) => isDatapathError(err, 'netns-gone'));
  });
});
