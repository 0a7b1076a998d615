// The eBPF datapath's routing modes: tendril_vxlan, tendril_config's tunnel
// fields, tendril_host's MTU and the routes to remote pods, against real
// devices, tcx links and pinned maps. Not a *.test file: it programs the
// namespace it runs in, so bpfDatapathTunnel.test.ts runs it in a throw-away
// node namespace; its pins live under temp bpffs roots removed at the end.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createLogger } from '../../logging/logger.js';
import { formatIp, parseIp } from '../../netip/index.js';
import { runOk } from '../../testing/run.js';
import { BpfMap, codec, removePinDir, TcxLink } from '../kernel/bpf/index.js';
import { Netlink } from '../kernel/netlink/index.js';
import { HOST_NEXTHOP } from '../linux/hostNextHop.js';
import { NODE_ROUTE_PROTOCOL } from '../linux/remoteNodeRoutes.js';
import { getSysctl, interfaceSysctl } from '../linux/sysctl.js';
import { BpfDatapath, type BpfRoutingOptions } from './bpfDatapath.js';
import { ConfigFlag, MapName, TUNNEL_DEFAULT_PORT } from './constants.js';
import { datapathConfig } from './layout.js';
import type { MapSizes } from './objects.js';
import { TUNNEL_DEVICE } from './overlay.js';
import { TEST_MAP_SIZES } from './testing/programHarness.js';

const log = createLogger('bpf-datapath-tunnel-test', 'warn');
const SIZES: MapSizes = TEST_MAP_SIZES;
const ROUTER = '10.218.0.1';
const NODE = { routerAddresses: [{ family: 4 as const, ip: ROUTER }], masqueradeCidrs: [] };
const TUNNEL: BpfRoutingOptions = { mode: 'tunnel', tunnelPort: TUNNEL_DEFAULT_PORT, podMtu: 1450 };

describe('BpfDatapath routing modes', { timeout: 120_000 }, () => {
  const root = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
  const pinDir = join(root, 'tendril');
  const opened: BpfDatapath[] = [];
  let nl: Netlink;
  const open = async (routing?: BpfRoutingOptions) => {
    const dp = await BpfDatapath.open({ bpffsRoot: root, log, mapSizes: SIZES, ...(routing ? { routing } : {}) });
    opened.push(dp);
    return dp;
  };
  const config = () => {
    const m = BpfMap.openPinned(join(pinDir, MapName.CONFIG), codec.u32, datapathConfig);
    try {
      return m.get(0)!;
    } finally {
      m.close();
    }
  };
  const ingressLink = () => {
    const l = TcxLink.openPinned(join(pinDir, 'links', `${TUNNEL_DEVICE}-ingress`));
    try {
      return l.info();
    } finally {
      l.close();
    }
  };
  /** iproute2's view of the device (an independent witness of what netlink made). */
  const ipLink = async (name: string) => {
    const [l] = JSON.parse(await runOk(['ip', '-d', '-j', 'link', 'show', 'dev', name])) as Array<{
      ifindex: number;
      mtu: number;
      flags: string[];
      linkinfo: { info_kind: string; info_data: { port: number; external?: boolean; learning?: boolean; id?: number } };
    }>;
    return l!;
  };

  before(async () => {
    nl = await Netlink.open();
  });
  after(async () => {
    for (const dp of opened) await dp.close();
    await nl?.close();
    await removePinDir(root);
  });

  it('tunnel mode: setupNode makes tendril_vxlan (external, the port, no learning, the pod MTU, up, rp_filter 0) with tendril_from_overlay on ingress, and writes the tunnel into tendril_config', async () => {
    const dp = await open(TUNNEL);
    assert.equal(dp.nodeRouting.mode, 'tunnel');
    await dp.setupNode(NODE);
    const vxlan = await ipLink(TUNNEL_DEVICE);
    assert.equal(vxlan.linkinfo.info_kind, 'vxlan');
    assert.equal(vxlan.linkinfo.info_data.port, TUNNEL_DEFAULT_PORT);
    assert.equal(vxlan.linkinfo.info_data.external, true);
    assert.equal(vxlan.linkinfo.info_data.learning, false);
    assert.equal(vxlan.mtu, 1450);
    assert.ok(vxlan.flags.includes('UP'));
    assert.equal(await getSysctl(interfaceSysctl(4, TUNNEL_DEVICE, 'rp_filter')), '0');
    const link = ingressLink();
    assert.equal(link.ifindex, vxlan.ifindex);
    assert.equal(link.progId, dp['objects'].fromOverlay.id);
    assert.equal(existsSync(join(pinDir, 'links', `${TUNNEL_DEVICE}-egress`)), false, 'nothing on egress: the programs set the tunnel key and redirect');
    const host = await ipLink('tendril_host');
    assert.deepEqual(config(), { traceLevel: config().traceLevel, flags: ConfigFlag.TUNNEL, hostIfindex: host.ifindex, maglevTableSize: config().maglevTableSize, tunnelIfindex: vxlan.ifindex, nodeIpv4: config().nodeIpv4, nodeIpv6: config().nodeIpv6, natPorts: config().natPorts, ctEndpointMax: 0, migrationUntilNs: 0n });
    assert.equal(host.mtu, 1450, 'what the node sends to remote pods fits the overlay');
    // Idempotent: a second setupNode keeps the device.
    await dp.setupNode(NODE);
    assert.equal((await ipLink(TUNNEL_DEVICE)).ifindex, vxlan.ifindex);
    assert.equal(config().tunnelIfindex, vxlan.ifindex);
  });

  it('tunnel mode: routes to remote pods go into tendril_host through the next hop (in force without any service), from the router address', async () => {
    const dp = await open(TUNNEL);
    await dp.setupNode(NODE);
    const neigh = JSON.parse(await runOk(['ip', '-j', 'neigh', 'show', HOST_NEXTHOP, 'dev', 'tendril_host'])) as Array<{ lladdr: string; state: string[] }>;
    assert.equal(neigh[0]?.lladdr, (await nl.getLink('tendril_net')).mac);
    await dp.nodeRouting.upsertRemoteNode({ name: 'b', nodeIp: '192.0.2.2', podCidrs: ['10.218.1.0/24'] });
    const [route] = JSON.parse(await runOk(['ip', '-j', '-N', 'route', 'show', 'exact', '10.218.1.0/24'])) as Array<{ dev: string; gateway: string; prefsrc: string; protocol: string | number }>;
    assert.deepEqual([route?.dev, route?.gateway, route?.prefsrc, Number(route?.protocol)], ['tendril_host', HOST_NEXTHOP, ROUTER, NODE_ROUTE_PROTOCOL]);
    // A restarted agent's routes in the kernel: pruned when the node is not live.
    const again = await open(TUNNEL);
    await again.setupNode(NODE);
    await again.nodeRouting.pruneRemoteNodes([]);
    assert.equal(JSON.parse(await runOk(['ip', '-j', 'route', 'show', 'exact', '10.218.1.0/24'])).length, 0);
  });

  it('a restart keeps the tunnel in tendril_config until setupNode; a device of the name with another port or not external is replaced', async () => {
    const before = config();
    assert.equal(before.flags, ConfigFlag.TUNNEL);
    const restarted = await open({ ...TUNNEL, tunnelPort: 8473 });
    assert.deepEqual(config(), before, 'packets keep going out the tunnel while the agent starts');
    await restarted.setupNode(NODE);
    const moved = await ipLink(TUNNEL_DEVICE);
    assert.equal(moved.linkinfo.info_data.port, 8473);
    assert.notEqual(moved.ifindex, before.tunnelIfindex);
    assert.equal(config().tunnelIfindex, moved.ifindex);
    assert.equal(ingressLink().ifindex, moved.ifindex, 'the program follows the new device');
    // A classic (not external) VXLAN device of our name, made by hand.
    await nl.deleteLink(TUNNEL_DEVICE);
    await nl.createVxlan({ name: TUNNEL_DEVICE, vni: 42, external: false, port: TUNNEL_DEFAULT_PORT });
    const dp = await open(TUNNEL);
    await dp.setupNode(NODE);
    const fixed = await ipLink(TUNNEL_DEVICE);
    assert.equal(fixed.linkinfo.info_data.external, true);
    assert.equal(fixed.linkinfo.info_data.port, TUNNEL_DEFAULT_PORT);
    assert.equal(config().tunnelIfindex, fixed.ifindex);
    assert.equal(ingressLink().progId, dp['objects'].fromOverlay.id);
  });

  it('native mode removes a tunnel-mode run\'s tendril_vxlan, its pins and the tunnel from tendril_config, and gives tendril_host the pod MTU', async () => {
    assert.ok(await nl.findLink(TUNNEL_DEVICE));
    const dp = await open({ mode: 'native', tunnelPort: TUNNEL_DEFAULT_PORT, podMtu: 1500, nodeIp: '192.0.2.1', nodeIp6: 'fd00:248::11' });
    assert.equal(dp.nodeRouting.mode, 'native');
    // The node's addresses of both families (an IPv6 NodePort flow's SNAT source to a backend through the overlay).
    assert.deepEqual([config().nodeIpv4, formatIp(config().nodeIpv6)], [Number(parseIp('192.0.2.1').bits), 'fd00:248::11']);
    assert.equal(config().flags & ConfigFlag.TUNNEL, 0, 'native mode drops the tunnel at open');
    await dp.setupNode(NODE);
    assert.equal(await nl.findLink(TUNNEL_DEVICE), undefined);
    assert.equal(existsSync(join(pinDir, 'links', `${TUNNEL_DEVICE}-ingress`)), false);
    const c = config();
    assert.equal(c.flags, 0);
    assert.equal(c.tunnelIfindex, 0);
    assert.ok(c.hostIfindex > 0);
    assert.equal((await ipLink('tendril_host')).mtu, 1500);
    // Without routing options: native, and tendril_host's MTU is left as it is.
    const plain = await open();
    assert.equal(plain.nodeRouting.mode, 'native');
    await plain.setupNode(NODE);
    assert.equal(config().flags, 0);
    assert.deepEqual([config().nodeIpv4, formatIp(config().nodeIpv6)], [0, '::'], 'no node address known');
    // An IPv6-only node: its node IP is its IPv6 one.
    await open({ mode: 'native', tunnelPort: TUNNEL_DEFAULT_PORT, podMtu: 1500, nodeIp: 'fd00:248::12' });
    assert.deepEqual([config().nodeIpv4, formatIp(config().nodeIpv6)], [0, 'fd00:248::12']);
  });
});
