// RemoteNodeRoutes against a real `tdl` namespace: the routes it makes are
// read back with iproute2 (an independent witness), in both routing modes.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { RtnetlinkWatch } from '../../../test/support/rtnetlinkWatch.js';
import { createLogger } from '../../logging/logger.js';
import { Netlink, NetlinkBatch } from '../kernel/netlink/index.js';
import { isDatapathError } from '../types.js';
import { HOST_NEXTHOP, HOST_NEXTHOP6 } from './hostNextHop.js';
import { NODE_ROUTE_PROTOCOL, RemoteNodeRoutes } from './remoteNodeRoutes.js';

requireRoot('the remote node routes tests');

const log = createLogger('remote-node-routes-test', 'warn');
const ROUTER = '10.215.0.1';
const ROUTER6 = 'fd00:215::1';
/** The underlay: tdlu0 192.0.2.1/24 and 2001:db8:2::1/64 (its veth peer tdlu1 is up too, so the link has carrier). */
const UNDERLAY = 'tdlu0';

interface IpRoute {
  dst: string;
  gateway?: string;
  dev?: string;
  protocol?: string | number;
  prefsrc?: string;
  flags?: string[];
}

describe('RemoteNodeRoutes', { timeout: 60_000 }, () => {
  const pool = new NetnsPool('rnr');
  let ns: { name: string; path: string };
  let nl: Netlink;
  const routes = (mode: 'tunnel' | 'native') => new RemoteNodeRoutes({ mode, netlink: async () => nl, log });

  /** Main-table IPv4 routes as `ip` shows them, by destination (protocol as a number). */
  async function ipRoutes(): Promise<Map<string, IpRoute>> {
    const r = await pool.exec(ns.name, ['ip', '-j', '-N', '-4', 'route', 'show', 'table', 'main']);
    assert.equal(r.code, 0, r.stderr);
    const list = JSON.parse(r.stdout) as IpRoute[];
    return new Map(list.map((x) => [x.dst, { ...x, protocol: Number(x.protocol ?? 3) }]));
  }
  /** Main-table IPv6 routes of ours, as `ip` shows them. */
  async function ipRoutes6(): Promise<Map<string, IpRoute>> {
    const r = await pool.exec(ns.name, ['ip', '-j', '-N', '-6', 'route', 'show', 'table', 'main', 'proto', String(NODE_ROUTE_PROTOCOL)]);
    assert.equal(r.code, 0, r.stderr);
    const list = JSON.parse(r.stdout || '[]') as IpRoute[];
    return new Map(list.map((x) => [x.dst, x]));
  }
  async function ours6(): Promise<string[]> {
    return [...(await ipRoutes6()).keys()].sort();
  }
  async function ours(): Promise<string[]> {
    return [...(await ipRoutes()).values()].filter((r) => r.protocol === NODE_ROUTE_PROTOCOL).map((r) => r.dst).sort();
  }

  before(async () => {
    ns = await pool.add('node');
    nl = await Netlink.open({ netns: ns.path });
    await nl.createVeth({ name: 'tendril_host', peer: { name: 'tendril_net' } });
    await nl.createVeth({ name: UNDERLAY, peer: { name: 'tdlu1' } });
    const [host, net, u0, u1] = await Promise.all(['tendril_host', 'tendril_net', UNDERLAY, 'tdlu1'].map((n) => nl.getLink(n)));
    await nl.apply(
      new NetlinkBatch()
        .setLink(host!.index, { up: true })
        .setLink(net!.index, { up: true })
        .setLink(u0!.index, { up: true })
        .setLink(u1!.index, { up: true })
        .addAddress({ index: host!.index, address: `${ROUTER}/32` })
        .addAddress({ index: u0!.index, address: '192.0.2.1/24' }),
    );
    // nodad: the address is usable as a route's source at once.
    const v6 = await pool.exec(ns.name, ['ip', '-6', 'addr', 'add', '2001:db8:2::1/64', 'dev', UNDERLAY, 'nodad']);
    assert.equal(v6.code, 0, v6.stderr);
    // Someone else's routes: never touched, whatever the datapath does.
    await nl.addRoute({ dst: '198.51.100.0/24', gateway: '192.0.2.9' });
    await nl.addRoute({ dst: '10.9.9.0/24', gateway: '192.0.2.9', protocol: 211 });
  });
  after(async () => {
    await nl?.close();
    await pool.cleanup();
  });
  beforeEach(async () => {
    // Each test starts from a namespace without node routes (a failed test leaves none behind for the next).
    for (const dst of [...(await ours()), ...(await ours6())]) await nl.deleteRoute({ dst, protocol: NODE_ROUTE_PROTOCOL });
  });

  async function othersIntact(): Promise<void> {
    const all = await ipRoutes();
    assert.equal(all.get('198.51.100.0/24')?.gateway, '192.0.2.9');
    assert.equal(all.get('10.9.9.0/24')?.protocol, 211);
  }

  it('native: each IPv4 pod CIDR via the node IP (the kernel picks the device), protocol 212; IPv6 CIDRs need an IPv6 node IP', async () => {
    const r = routes('native');
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.1.0/24', '10.1.2.0/24', 'fd00:1::/64'] });
    const all = await ipRoutes();
    for (const cidr of ['10.1.1.0/24', '10.1.2.0/24']) {
      const route = all.get(cidr);
      assert.deepEqual([route?.gateway, route?.dev, route?.protocol], ['192.0.2.2', UNDERLAY, NODE_ROUTE_PROTOCOL], cidr);
    }
    assert.deepEqual(await ours6(), [], 'no IPv6 next hop: no IPv6 route');
    assert.deepEqual(r.remoteNodes().get('b'), { name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.1.0/24', '10.1.2.0/24'] });
    // Idempotent: the same call again changes nothing and does not fail.
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.1.0/24', '10.1.2.0/24'] });
    assert.deepEqual(await ours(), ['10.1.1.0/24', '10.1.2.0/24']);
    await othersIntact();
    await r.removeRemoteNode('b');
  });

  it('native: each IPv6 pod CIDR via the node\'s IPv6 address, protocol 212; moves, removal and prune cover IPv6 too', async () => {
    const r = routes('native');
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', nodeIp6: '2001:DB8:2::2', podCidrs: ['10.1.1.0/24', 'fd00:1:0:0::/64', 'fd00:2::/64'] });
    const v6 = await ipRoutes6();
    assert.deepEqual(await ours6(), ['fd00:1::/64', 'fd00:2::/64']);
    for (const cidr of ['fd00:1::/64', 'fd00:2::/64']) assert.deepEqual([v6.get(cidr)?.gateway, v6.get(cidr)?.dev], ['2001:db8:2::2', UNDERLAY], cidr);
    assert.equal((await ipRoutes()).get('10.1.1.0/24')?.gateway, '192.0.2.2');
    assert.deepEqual(r.remoteNodes().get('b'), { name: 'b', nodeIp: '192.0.2.2', nodeIp6: '2001:db8:2::2', podCidrs: ['10.1.1.0/24', 'fd00:1::/64', 'fd00:2::/64'] });
    // The node moves its IPv6 address and gives up a CIDR.
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', nodeIp6: '2001:db8:2::3', podCidrs: ['10.1.1.0/24', 'fd00:2::/64'] });
    assert.deepEqual(await ours6(), ['fd00:2::/64']);
    assert.equal((await ipRoutes6()).get('fd00:2::/64')?.gateway, '2001:db8:2::3');
    // It loses its IPv6 address: its IPv6 routes go, the IPv4 one stays.
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.1.0/24', 'fd00:2::/64'] });
    assert.deepEqual(await ours6(), []);
    assert.deepEqual(await ours(), ['10.1.1.0/24']);
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', nodeIp6: '2001:db8:2::2', podCidrs: ['10.1.1.0/24', 'fd00:2::/64'] });
    await r.removeRemoteNode('b');
    assert.deepEqual([...(await ours()), ...(await ours6())], []);
    // A restarted agent prunes an IPv6 route of ours nobody claims.
    await nl.addRoute({ dst: 'fd00:9::/64', gateway: '2001:db8:2::9', protocol: NODE_ROUTE_PROTOCOL });
    await routes('native').pruneRemoteNodes([]);
    assert.deepEqual(await ours6(), []);
    await othersIntact();
    // Tunnel mode: an IPv6 pod CIDR waits for the IPv6 router address, then goes into tendril_host via the IPv6 next hop.
    const t = routes('tunnel');
    await t.setRouter(ROUTER);
    await t.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', nodeIp6: '2001:db8:2::2', podCidrs: ['10.1.1.0/24', 'fd00:2::/64'] });
    assert.deepEqual(await ours6(), [], 'no IPv6 route before the IPv6 router address is known');
    assert.deepEqual(await ours(), ['10.1.1.0/24']);
    await pool.exec(ns.name, ['ip', '-6', 'addr', 'replace', `${ROUTER6}/128`, 'dev', 'tendril_host', 'nodad']);
    await t.setRouter(ROUTER6);
    const route6 = (await ipRoutes6()).get('fd00:2::/64');
    assert.deepEqual([route6?.gateway, route6?.dev, route6?.prefsrc, route6?.flags?.includes('onlink')], [HOST_NEXTHOP6, 'tendril_host', ROUTER6, true]);
    const neigh6 = JSON.parse((await pool.exec(ns.name, ['ip', '-j', '-6', 'neigh', 'show', HOST_NEXTHOP6, 'dev', 'tendril_host'])).stdout) as Array<{ lladdr: string; state: string[] }>;
    assert.deepEqual([neigh6[0]?.lladdr, neigh6[0]?.state], [(await nl.getLink('tendril_net')).mac, ['PERMANENT']]);
    await t.removeRemoteNode('b');
    assert.deepEqual(await ours6(), []);
    await assert.rejects(r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', nodeIp6: '192.0.2.3', podCidrs: [] }), (err: unknown) => isDatapathError(err, 'failed') && /not an IPv6 address/.test((err as Error).message));
  });

  it('native: an upsert replaces the node\'s CIDR set and next hop; remove takes them all; unknown names are fine', async () => {
    const r = routes('native');
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.1.0/24', '10.1.2.0/24'] });
    await r.upsertRemoteNode({ name: 'c', nodeIp: '192.0.2.3', podCidrs: ['10.1.3.0/24'] });
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.4', podCidrs: ['10.1.2.0/24', '10.1.4.0/26'] });
    const all = await ipRoutes();
    assert.deepEqual(await ours(), ['10.1.2.0/24', '10.1.3.0/24', '10.1.4.0/26']);
    assert.equal(all.get('10.1.2.0/24')?.gateway, '192.0.2.4');
    assert.equal(all.get('10.1.4.0/26')?.gateway, '192.0.2.4');
    assert.equal(all.get('10.1.3.0/24')?.gateway, '192.0.2.3');
    await r.removeRemoteNode('b');
    assert.deepEqual(await ours(), ['10.1.3.0/24']);
    assert.deepEqual([...r.remoteNodes().keys()], ['c']);
    await r.removeRemoteNode('b');
    await r.removeRemoteNode('never-seen');
    await r.removeRemoteNode('c');
    assert.deepEqual(await ours(), []);
    await othersIntact();
  });

  it('a CIDR two nodes claim (a block moving) routes to the newer claim, and back to the older when it lets go', async () => {
    const r = routes('native');
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.5.0/26'] });
    await r.upsertRemoteNode({ name: 'c', nodeIp: '192.0.2.3', podCidrs: ['10.1.5.0/26'] });
    assert.equal((await ipRoutes()).get('10.1.5.0/26')?.gateway, '192.0.2.3');
    await r.upsertRemoteNode({ name: 'c', nodeIp: '192.0.2.3', podCidrs: [] });
    assert.equal((await ipRoutes()).get('10.1.5.0/26')?.gateway, '192.0.2.2');
    await r.removeRemoteNode('b');
    assert.deepEqual(await ours(), []);
  });

  it('prune after a restart: routes of nodes not live and protocol-212 routes nobody claims go; live nodes\' and others\' stay', async () => {
    const first = routes('native');
    await first.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.1.0/24'] });
    await first.upsertRemoteNode({ name: 'gone', nodeIp: '192.0.2.3', podCidrs: ['10.1.6.0/24', '10.1.7.0/24'] });
    // A route a run in the other mode left, to a CIDR no node has now.
    await nl.addRoute({ dst: '10.1.8.0/24', gateway: HOST_NEXTHOP, onlink: true, link: 'tendril_host', protocol: NODE_ROUTE_PROTOCOL });
    const second = routes('native');
    await second.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.1.1.0/24'] });
    await second.pruneRemoteNodes(['b']);
    assert.deepEqual(await ours(), ['10.1.1.0/24']);
    await othersIntact();
    // Prune also forgets nodes this instance held that are not live any more.
    await second.upsertRemoteNode({ name: 'c', nodeIp: '192.0.2.3', podCidrs: ['10.1.9.0/24'] });
    await second.pruneRemoteNodes(['c']);
    assert.deepEqual(await ours(), ['10.1.9.0/24']);
    assert.deepEqual([...second.remoteNodes().keys()], ['c']);
    await second.pruneRemoteNodes([]);
    assert.deepEqual(await ours(), []);
    await othersIntact();
  });

  it('tunnel: routes wait for the router address, then go via the next hop onlink on tendril_host from the router address, with its permanent neighbour', async () => {
    await nl.deleteNeighbour({ link: 'tendril_host', ip: HOST_NEXTHOP }).catch(() => undefined);
    const r = routes('tunnel');
    assert.equal(r.mode, 'tunnel');
    await r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.2.1.0/24'] });
    assert.deepEqual(await ours(), [], 'nothing before the router address is known');
    await r.setRouter(ROUTER);
    await r.upsertRemoteNode({ name: 'c', nodeIp: '192.0.2.3', podCidrs: ['10.2.2.0/24', '10.2.3.0/24'] });
    const all = await ipRoutes();
    for (const cidr of ['10.2.1.0/24', '10.2.2.0/24', '10.2.3.0/24']) {
      const route = all.get(cidr);
      assert.deepEqual([route?.gateway, route?.dev, route?.prefsrc, route?.protocol, route?.flags?.includes('onlink')], [HOST_NEXTHOP, 'tendril_host', ROUTER, NODE_ROUTE_PROTOCOL, true], cidr);
    }
    const neigh = JSON.parse((await pool.exec(ns.name, ['ip', '-j', 'neigh', 'show', HOST_NEXTHOP, 'dev', 'tendril_host'])).stdout) as Array<{ lladdr: string; state: string[] }>;
    assert.equal(neigh[0]?.lladdr, (await nl.getLink('tendril_net')).mac);
    assert.deepEqual(neigh[0]?.state, ['PERMANENT']);
    await r.upsertRemoteNode({ name: 'c', nodeIp: '192.0.2.3', podCidrs: ['10.2.3.0/24'] });
    assert.deepEqual(await ours(), ['10.2.1.0/24', '10.2.3.0/24']);
    await r.removeRemoteNode('c');
    await r.removeRemoteNode('b');
    assert.deepEqual(await ours(), []);
    await othersIntact();
  });

  it('a restart leaves the routes it finds as it would write them alone (no rtnetlink event, both families, both modes) and rewrites one that differs', async () => {
    await pool.exec(ns.name, ['ip', '-6', 'addr', 'replace', `${ROUTER6}/128`, 'dev', 'tendril_host', 'nodad']);
    const b = { name: 'b', nodeIp: '192.0.2.2', nodeIp6: '2001:db8:2::2', podCidrs: ['10.3.1.0/24', 'fd00:3:1::/64'] };
    const c = { name: 'c', nodeIp: '192.0.2.3', nodeIp6: '2001:db8:2::3', podCidrs: ['10.3.2.0/24', 'fd00:3:2::/64'] };
    for (const mode of ['native', 'tunnel'] as const) {
      const start = async () => {
        const r = routes(mode);
        if (mode === 'tunnel') for (const router of [ROUTER, ROUTER6]) await r.setRouter(router);
        for (const node of [b, c]) await r.upsertRemoteNode(node);
        await r.pruneRemoteNodes(['b', 'c']);
        return r;
      };
      await start();
      // Another agent's hand on c's IPv6 route while this one was down: not what it writes.
      const moved = await pool.exec(ns.name, ['ip', '-6', 'route', 'replace', 'fd00:3:2::/64', 'via', '2001:db8:2::9', 'proto', String(NODE_ROUTE_PROTOCOL)]);
      assert.equal(moved.code, 0, moved.stderr);
      const watch = await RtnetlinkWatch.start(ns.path);
      let r: RemoteNodeRoutes;
      try {
        r = await start();
        await new Promise((res) => setTimeout(res, 200));
      } finally {
        await watch.stop();
      }
      const changes = watch.changes();
      assert.equal(changes.length, 1, `${mode}: a restart writes only the route that differs: ${JSON.stringify(changes)}`);
      assert.match(changes[0]!, /^\[ROUTE\]fd00:3:2::\/64 /, `${mode}: ${changes[0]}`);
      assert.equal((await ipRoutes6()).get('fd00:3:2::/64')?.gateway, mode === 'native' ? '2001:db8:2::3' : HOST_NEXTHOP6);
      // After the start, a change goes to the kernel again.
      await r.upsertRemoteNode({ ...b, podCidrs: ['10.3.1.0/24'] });
      assert.deepEqual(await ours6(), ['fd00:3:2::/64']);
      for (const node of [b, c]) await r.removeRemoteNode(node.name);
    }
    await othersIntact();
  });

  it('a native-mode start replaces a tunnel-mode run\'s route to a live node in place', async () => {
    const tunnel = routes('tunnel');
    await tunnel.setRouter(ROUTER);
    await tunnel.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.2.4.0/24'] });
    const native = routes('native');
    await native.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.2.4.0/24'] });
    await native.pruneRemoteNodes(['b']);
    const route = (await ipRoutes()).get('10.2.4.0/24');
    assert.deepEqual([route?.gateway, route?.dev], ['192.0.2.2', UNDERLAY]);
    await native.removeRemoteNode('b');
  });

  it('an IPv6-only node (its node IP IPv6): native routes its IPv6 pod CIDRs via that address, never its IPv4 ones; tunnel mode routes its IPv4 ones into tendril_host (the overlay reaches it over IPv6)', async () => {
    const r = routes('native');
    await r.upsertRemoteNode({ name: 'v6', nodeIp: '2001:db8:2::6', podCidrs: ['10.3.9.0/24', 'fd00:6::/64'] });
    assert.deepEqual(await ours6(), ['fd00:6::/64']);
    assert.equal((await ipRoutes6()).get('fd00:6::/64')?.gateway, '2001:db8:2::6');
    assert.deepEqual(await ours(), []);
    assert.deepEqual(r.remoteNodes().get('v6'), { name: 'v6', nodeIp: '2001:db8:2::6', podCidrs: ['fd00:6::/64'] });
    await r.removeRemoteNode('v6');
    assert.deepEqual(await ours6(), []);
    const t = routes('tunnel');
    await t.setRouter(ROUTER);
    await t.upsertRemoteNode({ name: 'v6', nodeIp: '2001:db8:2::6', podCidrs: ['10.3.9.0/24', 'fd00:6::/64'] });
    assert.deepEqual([...(await ours()), ...(await ours6())], ['10.3.9.0/24']);
    const route = (await ipRoutes()).get('10.3.9.0/24');
    assert.deepEqual([route?.gateway, route?.dev, route?.prefsrc], [HOST_NEXTHOP, 'tendril_host', ROUTER]);
    await t.removeRemoteNode('v6');
  });

  it('errors are DatapathErrors: a node IP that is no address (nothing changes), a next hop off the underlay, a bad CIDR', async () => {
    const r = routes('native');
    await assert.rejects(r.upsertRemoteNode({ name: 'b', nodeIp: 'node-b', podCidrs: ['10.3.1.0/24'] }), (err: unknown) => isDatapathError(err, 'failed') && /not an IP address/.test((err as Error).message));
    assert.equal(r.remoteNodes().size, 0);
    await assert.rejects(r.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.3.1.0/33'] }), (err: unknown) => isDatapathError(err, 'failed') && /not a CIDR/.test((err as Error).message));
    await assert.rejects(r.upsertRemoteNode({ name: 'far', nodeIp: '203.0.113.7', podCidrs: ['10.3.2.0/24'] }), (err: unknown) => isDatapathError(err) && /10\.3\.2\.0\/24.*far/.test((err as Error).message));
    // A later, correct call for the node converges.
    await r.upsertRemoteNode({ name: 'far', nodeIp: '192.0.2.7', podCidrs: ['10.3.2.0/24'] });
    assert.equal((await ipRoutes()).get('10.3.2.0/24')?.gateway, '192.0.2.7');
    await r.removeRemoteNode('far');
    // Tunnel mode: the router address must be an address, and the host device must exist.
    await assert.rejects(routes('tunnel').setRouter('router'), (err: unknown) => isDatapathError(err, 'failed'));
    const missing = new RemoteNodeRoutes({ mode: 'tunnel', netlink: async () => nl, log, hostDevice: 'tdlnothere0' });
    await assert.rejects(missing.setRouter(ROUTER), (err: unknown) => isDatapathError(err, 'not-found'));
  });
});
