/**
 * Packets an attacker writes against the trust boundaries of
 * docs/architecture.md, through BPF_PROG_TEST_RUN: each test is a way
 * around a door that was open before its fix.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { parseIp, parsePrefix } from '../../netip/index.js';
import { codec, TcAction } from '../kernel/bpf/index.js';
import { ConfigFlag, DropReason, EventType, PolicyVerdict, MapName, ReservedCookie, ServiceFlag, TraceLevel, TrafficDirection } from './constants.js';
import { deviceInfo, NO_NAT_CONFIG } from './layout.js';
import { assertEvents } from './testing/expect.js';
import { IDENTITY, installNode, NODE_IP, POD_A, POD_B, REMOTE_POD_IP, ROUTER, TEST_IFINDEX, WORLD_IP } from './testing/fixtures.js';
import { LbNode } from './testing/lbNode.js';
import { IpProto, ipv6Frame, udpFrame } from './testing/packets.js';
import { LXC_OBJECT, NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the trust-boundary probes');

const { DROP, POLICY_VERDICT } = EventType;
const { INGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

describe('trust-boundary probes: tendril_from_netdev', () => {
  const FROM_NETDEV = 'tendril_from_netdev';
  /** What arrives on the node's device: the router's MAC to the node's. */
  const wire = { srcMac: '0a:00:00:00:99:01', dstMac: '0a:00:00:00:ee:01' };
  const REMOTE_NODE_IP = '192.168.77.6';
  let h: ProgramHarness;
  let lb: LbNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(NETDEV_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    h.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(TEST_IFINDEX, { ipv4: parseIp(NODE_IP), flags: 0, mac: wire.dstMac });
    lb.addBackend({ id: 201, ip: POD_A.ip, port: 5353, proto: IpProto.UDP });
    lb.addService({ id: 21, frontend: { ip: '0.0.0.0', port: 30053, proto: IpProto.UDP }, backends: [201], flags: ServiceFlag.NODEPORT });
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  const toNodePort = (src: string, sport: number) =>
    udpFrame({ ...wire, src, dst: NODE_IP, sport, dport: 30053, payload: Buffer.from('forged') });

  it('a NodePort datagram with a forged source of the cluster (the node, its router address, a local pod) reaches its local backend as world, not as whom it names', async () => {
    // The backend admits the node (allow-localhost) and pod B, not the world.
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: false, proto: IpProto.UDP, port: 5353, cookie: 0x1001 });
    let sport = 51000;
    for (const src of [NODE_IP, ROUTER.ip, POD_B.ip]) {
      const r = await h.run(FROM_NETDEV, toNodePort(src, sport++));
      assert.equal(r.retval, TcAction.SHOT, `a datagram from the wire claiming ${src} must not reach the backend`);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, saddr: src, srcIdentity: IDENTITY.WORLD, dstEndpoint: POD_A.endpointId },
        { type: DROP, subtype: code('POLICY'), direction: INGRESS },
      ]);
      assert.equal(h.ct({ saddr: src, daddr: POD_A.ip, sport: sport - 1, dport: 5353, proto: IpProto.UDP }), undefined, 'no entry for the forged flow');
    }
  });

  it('in tunnel mode, a NodePort datagram claiming a remote pod or a remote node is world: those arrive through the overlay, never on a device', async () => {
    h.config.set(0, { traceLevel: TraceLevel.OFF, flags: ConfigFlag.TUNNEL, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 42, nodeIpv4: 0, ...NO_NAT_CONFIG });
    const endpoint = Number(parseIp(REMOTE_NODE_IP).bits);
    h.ipcache.set(parsePrefix(`${REMOTE_POD_IP}/32`), { identity: IDENTITY.REMOTE, tunnelIp4: endpoint, flags: 0 });
    h.ipcache.set(parsePrefix(`${REMOTE_NODE_IP}/32`), { identity: 6 /* remote-node */, tunnelIp4: endpoint, flags: 0 });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.REMOTE, egress: false, cookie: 0x1002 });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 6, egress: false, cookie: 0x1003 });
    let sport = 52000;
    for (const src of [REMOTE_POD_IP, REMOTE_NODE_IP]) {
      const r = await h.run(FROM_NETDEV, toNodePort(src, sport++));
      assert.equal(r.retval, TcAction.SHOT, `a datagram from the wire claiming ${src} must not reach the backend`);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, srcIdentity: IDENTITY.WORLD },
        { type: DROP, subtype: code('POLICY') },
      ]);
    }
  });

  it('still admits the world where the backend\'s policy does, and a CIDR identity by its prefix', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.CIDR_24, egress: false, cookie: 0x1004 });
    assert.equal((await h.run(FROM_NETDEV, toNodePort('203.0.113.7', 53000))).retval, TcAction.REDIRECT);
    assert.equal((await h.run(FROM_NETDEV, toNodePort(WORLD_IP, 53001))).retval, TcAction.SHOT);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD, egress: false, cookie: 0x1005 });
    assert.equal((await h.run(FROM_NETDEV, toNodePort(WORLD_IP, 53002))).retval, TcAction.REDIRECT);
  });
});

describe('trust-boundary probes: tendril_to_container', () => {
  const TO_CONTAINER = 'tendril_to_container';
  /** A device of the node a router sends traffic in on (skb->ingress_ifindex of a forwarded packet). */
  const OUTSIDE_DEVICE = 9;
  const REMOTE_NODE_IP = '192.168.77.6';
  const toA = { srcMac: POD_A.lxcMac, dstMac: POD_A.podMac };
  let h: ProgramHarness;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    installNode(h);
  });
  afterEach(async () => {
    await h?.close();
  });

  const datagram = (src: string, sport: number) => udpFrame({ ...toA, src, dst: POD_A.ip, sport, dport: 5353, payload: Buffer.from('forged') });

  it('a datagram the node forwards from a device to a pod, claiming a local pod, is world: that pod sends from its own device only', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: false, cookie: 0x2001 });
    const r = await h.runForwarded(TO_CONTAINER, datagram(POD_B.ip, 54000), OUTSIDE_DEVICE);
    assert.equal(r.retval, TcAction.SHOT, 'pod B\'s address from the wire is no proof of pod B');
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, srcIdentity: IDENTITY.WORLD, dstEndpoint: POD_A.endpointId },
      { type: DROP, subtype: code('POLICY'), direction: INGRESS },
    ]);
    // Pod B's own packet through the stack (it came in on B's device) is B's, and the node's own is the node's.
    assert.equal((await h.runForwarded(TO_CONTAINER, datagram(POD_B.ip, 54001), POD_B.ifindex)).retval, TcAction.OK);
  });

  it('in tunnel mode, a datagram forwarded from a device claiming a remote pod or a remote node is world: those come through the overlay', async () => {
    h.config.set(0, { traceLevel: TraceLevel.OFF, flags: ConfigFlag.TUNNEL, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 42, nodeIpv4: 0, ...NO_NAT_CONFIG });
    const endpoint = Number(parseIp(REMOTE_NODE_IP).bits);
    h.ipcache.set(parsePrefix(`${REMOTE_POD_IP}/32`), { identity: IDENTITY.REMOTE, tunnelIp4: endpoint, flags: 0 });
    h.ipcache.set(parsePrefix(`${REMOTE_NODE_IP}/32`), { identity: 6 /* remote-node */, tunnelIp4: endpoint, flags: 0 });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.REMOTE, egress: false, cookie: 0x2002 });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 6, egress: false, cookie: 0x2003 });
    let sport = 55000;
    for (const src of [REMOTE_POD_IP, REMOTE_NODE_IP]) {
      const r = await h.runForwarded(TO_CONTAINER, datagram(src, sport++), OUTSIDE_DEVICE);
      assert.equal(r.retval, TcAction.SHOT, `a datagram from the wire claiming ${src} must not reach the pod`);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, srcIdentity: IDENTITY.WORLD },
        { type: DROP, subtype: code('POLICY') },
      ]);
    }
    // Native routing: a remote pod does arrive on a device, and is itself.
    h.config.set(0, { traceLevel: TraceLevel.OFF, flags: 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG });
    assert.equal((await h.runForwarded(TO_CONTAINER, datagram(REMOTE_POD_IP, sport++), OUTSIDE_DEVICE)).retval, TcAction.OK);
  });

  it('the node\'s own datagram (no ingress device) is still the node\'s', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
    assert.equal((await h.run(TO_CONTAINER, datagram(NODE_IP, 56000))).retval, TcAction.OK);
  });
});

describe('trust-boundary probes: IPv6 at a pod\'s device', () => {
  const OUTSIDE_DEVICE = 9;
  const A6 = 'fd00:10::a';
  const B6 = 'fd00:10::b';
  const NODE6 = 'fd00:77::5';
  const toA = { srcMac: POD_A.lxcMac, dstMac: POD_A.podMac };
  const fromA = { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac };
  let h: ProgramHarness;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    installNode(h);
    h.addEndpoint({ ...POD_A, ip: A6 });
    h.addEndpoint({ ...POD_B, ip: B6, ifindex: 78 });
    h.addIpcache(`${A6}/128`, IDENTITY.A);
    h.addIpcache(`${B6}/128`, IDENTITY.B);
    h.addIpcache(`${NODE6}/128`, IDENTITY.HOST);
  });
  afterEach(async () => {
    await h?.close();
  });

  const datagram = (src: string, sport: number) => udpFrame({ ...toA, src, dst: A6, sport, dport: 5353, payload: Buffer.from('forged') });

  it('a datagram forwarded from a device claiming a local pod\'s or the node\'s IPv6 address is world (world-ipv6)', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: false, cookie: 0x2001 });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
    let sport = 54000;
    for (const src of [B6, NODE6]) {
      const r = await h.runForwarded('tendril_to_container', datagram(src, sport++), OUTSIDE_DEVICE);
      assert.equal(r.retval, TcAction.SHOT, `${src} from the wire is no proof of who sent it`);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, srcIdentity: IDENTITY.WORLD_IPV6, dstEndpoint: POD_A.endpointId },
        { type: DROP, subtype: code('POLICY'), direction: INGRESS },
      ]);
    }
    // B's own datagram through the stack (in on B's device) is B's; the node's own (no ingress device) the node's.
    assert.equal((await h.runForwarded('tendril_to_container', datagram(B6, sport++), 78)).retval, TcAction.OK);
    assert.equal((await h.run('tendril_to_container', datagram(NODE6, sport++))).retval, TcAction.OK);
  });

  it('a pod cannot send as another pod, the node, or a global address that is not its own; nor hide its packet past the extension-header bound', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: ReservedCookie.NOT_ENFORCED });
    let sport = 40000;
    for (const src of [B6, NODE6, 'fd00:10::99']) {
      const r = await h.run('tendril_from_container', udpFrame({ ...fromA, src, dst: '2001:db8::1', sport: sport++, dport: 53 }));
      assert.equal(r.retval, TcAction.SHOT, `A must not send as ${src}`);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('INVALID_SOURCE') }]);
    }
    const ext = (next: number) => Buffer.from([next, 0, 0, 0, 0, 0, 0, 0]);
    const hidden = ipv6Frame({ ...fromA, src: A6, dst: '2001:db8::1', nextHeader: 60, payload: Buffer.concat([...[60, 60, 60, 60, 60, 60].map(ext), ext(IpProto.UDP), Buffer.alloc(8)]) });
    assert.equal((await h.run('tendril_from_container', hidden)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('INVALID_EXTHDR') }]);
  });
});
