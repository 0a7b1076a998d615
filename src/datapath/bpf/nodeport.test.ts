/**
 * NodePort, externalIP and LoadBalancer frontends in bpf_netdev.o through
 * BPF_PROG_TEST_RUN: tendril_from_netdev (outside → frontend, local
 * backends: DNAT, the backend's ingress policy, straight into the pod with
 * the client's address kept; Local services never reach past this node)
 * and tendril_to_lo (the node to a NodePort on its own address). For a
 * backend off the node the SNAT and reverse translation are checked here;
 * where bpf_fib_lookup sends the packet depends on the host's routes, so
 * the end-to-end tests cover the forwarding itself.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { formatIp, parseIp, parsePrefix } from '../../netip/index.js';
import { codec, TcAction } from '../kernel/bpf/index.js';
import { ConfigFlag, CtFlag, DropReason, EventType, LbScope, MapName, NAT_PORT_MAX, NAT_PORT_MIN, NatFlag, PolicyVerdict, ServiceFlag, TraceLevel, TracePoint, TrafficDirection } from './constants.js';
import { deviceInfo, nat6Entry, nat6Key, NO_NAT_CONFIG } from './layout.js';
import { assertEvents, checkedTuple as tuple } from './testing/expect.js';
import { IDENTITY, installNode, NODE_IP, POD_A, REMOTE_POD_IP, ROUTER, TEST_IFINDEX, WORLD_IP } from './testing/fixtures.js';
import { LbNode, type TestFrontend } from './testing/lbNode.js';
import { internetChecksum, IpProto, ipv6Frame, pseudoHeader6, readIpv4, TcpFlag, tcpFrame, udpFrame } from './testing/packets.js';
import { LXC_OBJECT, NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the NodePort program tests');

const FROM_NETDEV = 'tendril_from_netdev';
const TO_LO = 'tendril_to_lo';
const { DROP, POLICY_VERDICT } = EventType;
const { INGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

const NODE_PORT: TestFrontend = { ip: '0.0.0.0', port: 30080, proto: IpProto.TCP };
const EXTERNAL_IP: TestFrontend = { ip: '203.0.113.50', port: 443, proto: IpProto.TCP };
const BE = {
  A: { id: 201, ip: POD_A.ip, port: 8080, proto: IpProto.TCP },
  A_TLS: { id: 202, ip: POD_A.ip, port: 8443, proto: IpProto.TCP },
  REMOTE: { id: 203, ip: REMOTE_POD_IP, port: 8080, proto: IpProto.TCP },
  A_UDP: { id: 204, ip: POD_A.ip, port: 5353, proto: IpProto.UDP },
} as const;
const ID = { NODE_PORT: 21, EXTERNAL_IP: 22, UDP: 23, LB: 24 } as const;
const COOKIE = 0x1001;
/** What arrives on the node's device: the router's MAC to the node's. */
const wire = { srcMac: '0a:00:00:00:99:01', dstMac: '0a:00:00:00:ee:01' };


describe('bpf_netdev NodePort', () => {
  let h: ProgramHarness;
  let lb: LbNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(NETDEV_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    h.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(TEST_IFINDEX, { ipv4: parseIp(NODE_IP), flags: 0, mac: wire.dstMac });
    for (const b of Object.values(BE)) lb.addBackend(b);
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  describe('tendril_from_netdev', () => {
    it('delivers to a local backend with the client\'s source kept: DNAT, ingress policy, TTL - 1, the pod\'s MACs, NODEPORT conntrack', async () => {
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.A.id], flags: ServiceFlag.NODEPORT });
      const syn = tcpFrame({ ...wire, src: WORLD_IP, dst: NODE_IP, sport: 50000, dport: 30080, flags: TcpFlag.SYN });
      assert.equal((await h.run(FROM_NETDEV, syn)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, srcIdentity: IDENTITY.WORLD, dstEndpoint: POD_A.endpointId, daddr: POD_A.ip, dport: 8080 },
        { type: DROP, subtype: code('POLICY'), direction: INGRESS },
      ]);

      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD, egress: false, proto: IpProto.TCP, port: 8080, cookie: COOKIE });
      const r = await h.run(FROM_NETDEV, syn);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: WORLD_IP, dst: POD_A.ip, sport: 50000, dport: 8080 });
      const ip = readIpv4(r.data);
      assert.deepEqual([ip.ttl, ip.ethDst, ip.ethSrc], [63, POD_A.podMac, POD_A.lxcMac]);
      const t = { saddr: WORLD_IP, daddr: POD_A.ip, sport: 50000, dport: 8080, proto: IpProto.TCP };
      const entry = h.ct(t)!;
      assert.deepEqual(
        [entry.flags, entry.srcIdentity, entry.dstIdentity, entry.revNatIndex, entry.backendId, entry.natAddr, entry.natPort],
        [CtFlag.NODEPORT, IDENTITY.WORLD, IDENTITY.A, ID.NODE_PORT, BE.A.id, parseIp(NODE_IP), 30080],
      );
      const ack = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: WORLD_IP, dst: NODE_IP, sport: 50000, dport: 30080, flags: TcpFlag.ACK }));
      assert.equal(ack.retval, TcAction.REDIRECT);
      assert.equal(h.ct(t)!.packets, 2n, 'the SYN dropped by policy opened nothing; SYN and ACK counted');

      // The backend's reply through bpf_lxc: source = the node address and NodePort, to the stack for the client.
      const lxc = await ProgramHarness.load(LXC_OBJECT);
      const lxcLb = new LbNode(lxc);
      try {
        installNode(lxc);
        lxcLb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.A.id], flags: ServiceFlag.NODEPORT });
        lxc.ctTcp.set(lxc.ctKey(t), h.ct(t)!);
        const reply = await lxc.run('tendril_from_container', tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: WORLD_IP, sport: 8080, dport: 50000, flags: TcpFlag.SYN | TcpFlag.ACK }));
        assert.equal(reply.retval, TcAction.OK);
        assert.deepEqual(tuple(reply.data), { src: NODE_IP, dst: WORLD_IP, sport: 30080, dport: 50000 });
      } finally {
        lxcLb.close();
        await lxc.close();
      }
    });

    it('load-balances an externalIP and UDP NodePorts the same way', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: false, cookie: COOKIE });
      lb.addService({ id: ID.EXTERNAL_IP, frontend: EXTERNAL_IP, backends: [BE.A_TLS.id], flags: ServiceFlag.EXTERNAL_IP });
      let r = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: WORLD_IP, dst: EXTERNAL_IP.ip, sport: 50001, dport: 443 }));
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: WORLD_IP, dst: POD_A.ip, sport: 50001, dport: 8443 });

      lb.addService({ id: ID.UDP, frontend: { ip: '0.0.0.0', port: 30053, proto: IpProto.UDP }, backends: [BE.A_UDP.id], flags: ServiceFlag.NODEPORT });
      r = await h.run(FROM_NETDEV, udpFrame({ ...wire, src: WORLD_IP, dst: NODE_IP, sport: 50002, dport: 30053, payload: Buffer.from('q') }));
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: WORLD_IP, dst: POD_A.ip, sport: 50002, dport: 5353 });
    });

    it('never uses the INTERNAL scope: a Local service without a backend on this node drops with DROP_NO_SERVICE', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: false, cookie: COOKIE });
      const flags = ServiceFlag.NODEPORT | ServiceFlag.LOCAL_TRAFFIC | ServiceFlag.TWO_SCOPES;
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [], flags });
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.REMOTE.id], flags, scope: LbScope.INTERNAL });
      const syn = tcpFrame({ ...wire, src: WORLD_IP, dst: NODE_IP, sport: 50003, dport: 30080 });
      assert.equal((await h.run(FROM_NETDEV, syn)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NO_SERVICE'), direction: INGRESS, saddr: WORLD_IP, srcIdentity: IDENTITY.WORLD }]);
      assert.equal(h.metric(code('NO_SERVICE'), INGRESS).packets, 1n);

      // With a backend here the client's address reaches it unchanged.
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.A.id], flags });
      const r = await h.run(FROM_NETDEV, syn);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: WORLD_IP, dst: POD_A.ip, sport: 50003, dport: 8080 });
    });

    it('a LoadBalancer with loadBalancerSourceRanges takes only sources inside them: any other packet to it is dropped (NOT_IN_SRC_RANGE), established flows too', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: false, cookie: COOKIE });
      const LB: TestFrontend = { ip: '203.0.113.80', port: 80, proto: IpProto.TCP };
      lb.addService({ id: ID.LB, frontend: LB, backends: [BE.A.id], flags: ServiceFlag.LOADBALANCER | ServiceFlag.SOURCE_RANGES });
      lb.addSourceRange(ID.LB, '192.0.2.0/24');
      const syn = (src: string, sport: number) => tcpFrame({ ...wire, src, dst: LB.ip, sport, dport: 80, flags: TcpFlag.SYN });
      assert.equal((await h.run(FROM_NETDEV, syn(WORLD_IP, 50010))).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NOT_IN_SRC_RANGE'), direction: INGRESS, saddr: WORLD_IP, srcIdentity: IDENTITY.WORLD }]);
      assert.equal(h.metric(code('NOT_IN_SRC_RANGE'), INGRESS).packets, 1n);
      assert.equal(h.ct({ saddr: WORLD_IP, daddr: POD_A.ip, sport: 50010, dport: 8080, proto: IpProto.TCP }), undefined, 'nothing tracked for a refused source');
      const inside = await h.run(FROM_NETDEV, syn('192.0.2.7', 50011));
      assert.equal(inside.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(inside.data), { src: '192.0.2.7', dst: POD_A.ip, sport: 50011, dport: 8080 });
      // A range added lets the other source in; taken away, its established flow's next packet is dropped too.
      lb.addSourceRange(ID.LB, `${WORLD_IP}/32`);
      assert.equal((await h.run(FROM_NETDEV, syn(WORLD_IP, 50012))).retval, TcAction.REDIRECT);
      lb.sourceRanges.delete({ serviceId: ID.LB, prefix: parsePrefix(`${WORLD_IP}/32`) });
      const ack = tcpFrame({ ...wire, src: WORLD_IP, dst: LB.ip, sport: 50012, dport: 80, flags: TcpFlag.ACK });
      assert.equal((await h.run(FROM_NETDEV, ack)).retval, TcAction.SHOT);
      // Without SOURCE_RANGES in slot 0 the entries are not looked at: every source.
      lb.addService({ id: ID.LB, frontend: LB, backends: [BE.A.id], flags: ServiceFlag.LOADBALANCER });
      assert.equal((await h.run(FROM_NETDEV, syn(WORLD_IP, 50013))).retval, TcAction.REDIRECT);
    });

    it('SNATs a Cluster NodePort flow to a backend off the node and reverse-translates its reply (where the host has a route to it; the e2e proves the way out)', async () => {
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.REMOTE.id], flags: ServiceFlag.NODEPORT });
      const r = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: WORLD_IP, dst: NODE_IP, sport: 50010, dport: 30080 }));
      assert.ok(r.retval === TcAction.REDIRECT || r.retval === TcAction.SHOT, `verdict ${r.retval}`);
      if (r.retval === TcAction.SHOT) {
        // No route to the backend where the test runs: the SNAT address is the FIB's device's, so nothing is mapped.
        assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('FIB_LOOKUP_FAILED') }]);
        assert.deepEqual(tuple(r.data), { src: WORLD_IP, dst: REMOTE_POD_IP, sport: 50010, dport: 8080 });
        return;
      }
      const out = tuple(r.data);
      assert.deepEqual([out.src, out.dst, out.dport], [NODE_IP, REMOTE_POD_IP, 8080]);
      assert.ok(out.sport >= NAT_PORT_MIN && out.sport <= NAT_PORT_MAX, `NAT port ${out.sport}`);
      const t = { saddr: WORLD_IP, daddr: REMOTE_POD_IP, sport: 50010, dport: 8080, proto: IpProto.TCP };
      const entry = h.ct(t)!;
      assert.ok(entry, 'conntrack keyed by the translated tuple before SNAT');
      assert.deepEqual([entry.flags, entry.revNatIndex, entry.natAddr, entry.natPort], [CtFlag.NODEPORT, ID.NODE_PORT, parseIp(NODE_IP), 30080]);
      await h.takeEvents();

      const reply = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: REMOTE_POD_IP, dst: NODE_IP, sport: 8080, dport: out.sport, flags: TcpFlag.SYN | TcpFlag.ACK }));
      assert.ok(reply.retval === TcAction.REDIRECT || reply.retval === TcAction.SHOT, `verdict ${reply.retval}`);
      assert.deepEqual(tuple(reply.data), { src: NODE_IP, dst: WORLD_IP, sport: 30080, dport: 50010 });
      assert.equal(h.ct(t)!.flags, CtFlag.NODEPORT | CtFlag.REPLY_SEEN);
      if (reply.retval === TcAction.SHOT) assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('FIB_LOOKUP_FAILED') }]);
    });

    it('gives the reply of a backend off the node to the node\'s ClusterIP connection (router address) the frontend back', async () => {
      const t = { saddr: ROUTER.ip, daddr: REMOTE_POD_IP, sport: 36001, dport: 8080, proto: IpProto.TCP };
      lb.addService({ id: ID.UDP, frontend: { ip: '10.96.0.10', port: 80, proto: IpProto.TCP }, backends: [BE.REMOTE.id] });
      const now = process.hrtime.bigint();
      h.ctTcp.set(h.ctKey(t), {
        expiresNs: now + 60_000_000_000n, packets: 1n, bytes: 60n, srcIdentity: IDENTITY.HOST, dstIdentity: IDENTITY.REMOTE, srcEndpoint: 0, dstEndpoint: 0,
        revNatIndex: ID.UDP, tcpFlags: TcpFlag.SYN, flags: 0, backendId: BE.REMOTE.id, natAddr: parseIp('10.96.0.10'), natPort: 80,
      });
      const r = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: REMOTE_POD_IP, dst: ROUTER.ip, sport: 8080, dport: 36001, flags: TcpFlag.SYN | TcpFlag.ACK }));
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(tuple(r.data), { src: '10.96.0.10', dst: ROUTER.ip, sport: 80, dport: 36001 });
      assert.equal(h.ct(t)!.flags, CtFlag.REPLY_SEEN);
    });

    it('drops traffic from outside to a ClusterIP (CLUSTERIP_FROM_OUTSIDE): the stack would route it into tendril_host, which load-balances the node\'s own', async () => {
      lb.addService({ id: ID.UDP, frontend: { ip: '10.96.0.10', port: 80, proto: IpProto.TCP }, backends: [BE.A.id] });
      h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: false, cookie: COOKIE });
      const syn = tcpFrame({ ...wire, src: WORLD_IP, dst: '10.96.0.10', sport: 50007, dport: 80, flags: TcpFlag.SYN });
      assert.equal((await h.run(FROM_NETDEV, syn)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('CLUSTERIP_FROM_OUTSIDE'), direction: INGRESS, saddr: WORLD_IP, daddr: '10.96.0.10', srcIdentity: IDENTITY.WORLD }]);
      assert.equal(h.metric(code('CLUSTERIP_FROM_OUTSIDE'), INGRESS).packets, 1n);
      assert.equal(await h.ctCount(), 0);

      // --bpf-lb-external-clusterip: a frontend for the outside like a NodePort.
      h.config.set(0, { traceLevel: 0, flags: ConfigFlag.EXTERNAL_CLUSTERIP, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG });
      const r = await h.run(FROM_NETDEV, syn);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: WORLD_IP, dst: POD_A.ip, sport: 50007, dport: 8080 });
    });

    it('leaves traffic that addresses no service to the stack untouched', async () => {
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.A.id], flags: ServiceFlag.NODEPORT });
      const frames = [
        tcpFrame({ ...wire, src: WORLD_IP, dst: NODE_IP, sport: 50004, dport: 22 }),
        udpFrame({ ...wire, src: WORLD_IP, dst: NODE_IP, sport: 50005, dport: 30080 }),
        // The NodePort on an address that is not the node's.
        tcpFrame({ ...wire, src: WORLD_IP, dst: '198.51.100.77', sport: 50006, dport: 30080 }),
      ];
      for (const f of frames) {
        const r = await h.run(FROM_NETDEV, f);
        assert.equal(r.retval, TcAction.OK);
        assert.deepEqual(r.data, f);
      }
      assert.equal(await h.ctCount(), 0);
    });
  });

  describe('tendril_to_lo', () => {
    it('takes the node\'s connection to its own NodePort straight to a local backend (the node\'s identity, INTERNAL scope)', async () => {
      const flags = ServiceFlag.NODEPORT | ServiceFlag.LOCAL_TRAFFIC | ServiceFlag.TWO_SCOPES;
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [], flags });
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.A.id], flags, scope: LbScope.INTERNAL });
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: COOKIE });
      const loMacs = { srcMac: '00:00:00:00:00:00', dstMac: '00:00:00:00:00:00' };
      const syn = tcpFrame({ ...loMacs, src: NODE_IP, dst: NODE_IP, sport: 45000, dport: 30080 });
      const r = await h.run(TO_LO, syn);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: NODE_IP, dst: POD_A.ip, sport: 45000, dport: 8080 });
      const ip = readIpv4(r.data);
      assert.deepEqual([ip.ttl, ip.ethDst, ip.ethSrc], [64, POD_A.podMac, POD_A.lxcMac]);
      const entry = h.ct({ saddr: NODE_IP, daddr: POD_A.ip, sport: 45000, dport: 8080, proto: IpProto.TCP })!;
      assert.deepEqual([entry.srcIdentity, entry.revNatIndex, entry.natAddr, entry.natPort, entry.flags], [IDENTITY.HOST, ID.NODE_PORT, parseIp(NODE_IP), 30080, 0]);

      const other = tcpFrame({ ...loMacs, src: '127.0.0.1', dst: '127.0.0.1', sport: 45001, dport: 8080 });
      const o = await h.run(TO_LO, other);
      assert.equal(o.retval, TcAction.OK);
      assert.deepEqual(o.data, other);
    });

    it('chooses among the backends on this node when the service also has some off it', async () => {
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.REMOTE.id, BE.A.id, BE.REMOTE.id], flags: ServiceFlag.NODEPORT });
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: COOKIE });
      for (let sport = 46000; sport < 46020; sport++) {
        const r = await h.run(TO_LO, tcpFrame({ src: NODE_IP, dst: NODE_IP, sport, dport: 30080 }));
        assert.equal(r.retval, TcAction.REDIRECT, `connection from port ${sport}`);
        assert.equal(tuple(r.data).dst, POD_A.ip);
      }
    });

    it('finds the one local backend among 100 on every connection (every slot is looked at, not 16 from a random one)', async () => {
      const backends: number[] = [];
      for (let i = 0; i < 100; i++) {
        const id = 1000 + i;
        // Slot 50 holds the local backend; the others are on other nodes.
        lb.addBackend(i === 50 ? { ...BE.A, id } : { id, ip: `10.201.1.${i + 1}`, port: 8080, proto: IpProto.TCP });
        backends.push(id);
      }
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends, flags: ServiceFlag.NODEPORT });
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: COOKIE });
      const outcomes = new Map<string, number>();
      for (let sport = 47000; sport < 47100; sport++) {
        const r = await h.run(TO_LO, tcpFrame({ src: NODE_IP, dst: NODE_IP, sport, dport: 30080, flags: TcpFlag.SYN }));
        const o = r.retval === TcAction.REDIRECT ? tuple(r.data).dst : `verdict ${r.retval}`;
        outcomes.set(o, (outcomes.get(o) ?? 0) + 1);
      }
      assert.deepEqual(Object.fromEntries(outcomes), { [POD_A.ip]: 100 }, 'every connection reaches the local backend');
      assert.equal(h.metric(code('NO_SERVICE'), INGRESS).packets, 0n);
    });

    it('drops with DROP_NO_SERVICE when the service has no backend on this node (lo cannot reach it)', async () => {
      lb.addService({ id: ID.NODE_PORT, frontend: NODE_PORT, backends: [BE.REMOTE.id], flags: ServiceFlag.NODEPORT });
      const syn = tcpFrame({ src: NODE_IP, dst: NODE_IP, sport: 45002, dport: 30080 });
      assert.equal((await h.run(TO_LO, syn)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NO_SERVICE'), srcIdentity: IDENTITY.HOST }]);
      assert.equal(h.metric(code('NO_SERVICE'), INGRESS).packets, 1n);
    });
  });
});

/**
 * IPv6 frontends from outside to a backend on another node (Cluster
 * policy): conntrack keyed before SNAT, the source the node's IPv6
 * InternalIP (tunnel mode, into the overlay with the client's identity)
 * or the FIB's device's IPv6 address (native), and the reply (or an
 * ICMPv6 error about the flow) back to the client with the frontend as
 * source. Where the FIB sends a packet depends on the host's routes: the
 * tunnel mode's way out is the program's alone, the native one is checked
 * where the host has an IPv6 route, the forwarding itself by the e2e
 * (test/e2e/clusterIpv6Suite.ts).
 */
describe('bpf_netdev NodePort to a backend on another node, IPv6', () => {
  let h: ProgramHarness;
  let lb: LbNode;
  /** The address the NodePort is on (the device's), the node's IPv6 InternalIP, an outside client, a pod on another node and that node's underlay address. */
  const NODE6 = 'fd00:77::5';
  const INTERNAL6 = 'fd00:248::11';
  const CLIENT6 = '2001:db8:99::9';
  const REMOTE6 = 'fd00:201::5';
  const REMOTE_NODE_IP = '192.168.77.6';
  const TUNNEL_IFINDEX = 42;
  const FRONTEND6: TestFrontend = { ip: NODE6, port: 30080, proto: IpProto.TCP };
  const BE6 = { LOCAL: { id: 301, ip: 'fd00:10::a', port: 8080, proto: IpProto.TCP }, REMOTE: { id: 302, ip: REMOTE6, port: 8080, proto: IpProto.TCP } } as const;
  const SVC = 31;

  const config = (tunnel: boolean, nodeIpv6?: string) =>
    h.config.set(0, {
      traceLevel: TraceLevel.ALL, flags: tunnel ? ConfigFlag.TUNNEL : 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: TUNNEL_IFINDEX, nodeIpv4: 0,
      ...NO_NAT_CONFIG, ...(nodeIpv6 === undefined ? {} : { nodeIpv6: parseIp(nodeIpv6) }),
    });
  const device = (ipv6?: string) => h.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(TEST_IFINDEX, { ipv4: parseIp(NODE_IP), flags: 0, mac: wire.dstMac, ...(ipv6 === undefined ? {} : { ipv6: parseIp(ipv6) }) });
  const syn = (sport: number) => tcpFrame({ ...wire, src: CLIENT6, dst: NODE6, sport, dport: 30080, flags: TcpFlag.SYN });

  /** An IPv6 TCP/UDP frame's addresses and ports, its L4 checksum checked over the IPv6 pseudo-header. */
  function tuple6(frame: Uint8Array): { src: string; dst: string; sport: number; dport: number } {
    const b = Buffer.from(frame);
    assert.equal(b.readUInt16BE(12), 0x86dd);
    const [src, dst] = [addr6(b, 22), addr6(b, 38)];
    const l4 = b.subarray(54, 54 + b.readUInt16BE(18));
    assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, b[20]!, l4.length), l4])), 0, 'L4 checksum over the IPv6 pseudo-header');
    return { src, dst, sport: l4.readUInt16BE(0), dport: l4.readUInt16BE(2) };
  }
  const addr6 = (b: Buffer, o: number) => formatIp(parseIp(Array.from({ length: 8 }, (_, i) => b.readUInt16BE(o + 2 * i).toString(16)).join(':')));

  beforeEach(async () => {
    h = await ProgramHarness.load(NETDEV_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    device(NODE6);
    h.addIpcache(`${NODE6}/128`, IDENTITY.HOST);
    h.addIpcache(`${INTERNAL6}/128`, IDENTITY.HOST);
    h.addEndpoint({ ...POD_A, ip: BE6.LOCAL.ip });
    for (const b of Object.values(BE6)) lb.addBackend(b);
    lb.addService({ id: SVC, frontend: FRONTEND6, backends: [BE6.REMOTE.id], flags: ServiceFlag.NODEPORT });
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  it('tunnel mode: DNAT, conntrack keyed before SNAT, SNAT to the node\'s IPv6 InternalIP and a NAT port, into the overlay as the client (world-ipv6, never host, even for an address the ipcache calls the host)', async () => {
    config(true, INTERNAL6);
    h.ipcache.set(parsePrefix(`${REMOTE6}/128`), { identity: IDENTITY.REMOTE, tunnelIp4: Number(parseIp(REMOTE_NODE_IP).bits), flags: 0 });
    // The client's address spoofs one the ipcache gives the host identity: from a device it is still world-ipv6 (GO-2023-1643).
    h.addIpcache(`${CLIENT6}/128`, IDENTITY.HOST);
    const r = await h.run(FROM_NETDEV, syn(50020));
    assert.equal(r.retval, TcAction.REDIRECT);
    const out = tuple6(r.data);
    assert.deepEqual([out.src, out.dst, out.dport], [INTERNAL6, REMOTE6, 8080]);
    assert.ok(out.sport >= NAT_PORT_MIN && out.sport <= NAT_PORT_MAX, `NAT port ${out.sport}`);
    // The flow's identity is the client's (the VNI tunnel_encap4 sets): world-ipv6.
    assertEvents(await h.takeEvents(1), [{ type: EventType.TRACE, subtype: TracePoint.TO_OVERLAY, saddr: INTERNAL6, daddr: REMOTE6, srcIdentity: IDENTITY.WORLD_IPV6, dstIdentity: IDENTITY.REMOTE }]);
    const t = { saddr: CLIENT6, daddr: REMOTE6, sport: 50020, dport: 8080, proto: IpProto.TCP };
    const entry = h.ct(t)!;
    assert.ok(entry, 'conntrack keyed by the translated tuple before SNAT');
    assert.deepEqual([entry.flags, entry.srcIdentity, entry.dstIdentity, entry.revNatIndex, entry.backendId], [CtFlag.NODEPORT, IDENTITY.WORLD_IPV6, IDENTITY.REMOTE, SVC, BE6.REMOTE.id]);
    // Both sides of the NodePort mapping in tendril_snat6, flagged NODEPORT: the reply side points back at the client.
    const sides: string[] = [];
    for await (const [k, v] of h.object.map(MapName.SNAT6, nat6Key, nat6Entry).entries()) sides.push(`${formatIp(k.saddr)}:${k.sport} -> ${formatIp(v.toAddr)}:${v.toPort} flags ${v.flags}`);
    assert.deepEqual(sides.sort(), [`${CLIENT6}:50020 -> ${INTERNAL6}:${out.sport} flags ${NatFlag.NODEPORT}`, `${REMOTE6}:8080 -> ${CLIENT6}:50020 flags ${NatFlag.NODEPORT}`].sort());

    // The backend's reply (as the overlay hands it on, or on a device): destination the client again, source the frontend, then by the FIB.
    const reply = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: REMOTE6, dst: INTERNAL6, sport: 8080, dport: out.sport, flags: TcpFlag.SYN | TcpFlag.ACK }));
    assert.ok(reply.retval === TcAction.REDIRECT || reply.retval === TcAction.SHOT, `verdict ${reply.retval}`);
    assert.deepEqual(tuple6(reply.data), { src: NODE6, dst: CLIENT6, sport: 30080, dport: 50020 });
    assert.equal(h.ct(t)!.flags, CtFlag.NODEPORT | CtFlag.REPLY_SEEN);
    // A packet to the NAT port that no flow opened is no reply: refused, never handed to the stack.
    await h.takeEvents();
    const stray = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: '2001:db8:66::6', dst: INTERNAL6, sport: 8080, dport: out.sport, flags: TcpFlag.SYN | TcpFlag.ACK }));
    assert.equal(stray.retval, TcAction.OK, 'no mapping for that tuple: the stack\'s');
  });

  it('tunnel mode without an IPv6 InternalIP: the arrival device\'s IPv6 address; neither: DROP_NO_CONFIG, nothing tracked or mapped', async () => {
    config(true);
    h.ipcache.set(parsePrefix(`${REMOTE6}/128`), { identity: IDENTITY.REMOTE, tunnelIp4: Number(parseIp(REMOTE_NODE_IP).bits), flags: 0 });
    const r = await h.run(FROM_NETDEV, syn(50021));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.equal(tuple6(r.data).src, NODE6);

    device();
    await h.takeEvents();
    assert.equal((await h.run(FROM_NETDEV, syn(50022))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NO_CONFIG'), saddr: CLIENT6, daddr: REMOTE6 }]);
    assert.equal(h.ct({ saddr: CLIENT6, daddr: REMOTE6, sport: 50022, dport: 8080, proto: IpProto.TCP }), undefined);
  });

  it('native mode: SNAT to the IPv6 address of the device the FIB chose (the arrival device\'s when that is none of ours), out by the FIB; the reply back to the client', async () => {
    config(false);
    const r = await h.run(FROM_NETDEV, syn(50030));
    assert.ok(r.retval === TcAction.REDIRECT || r.retval === TcAction.SHOT, `verdict ${r.retval}`);
    if (r.retval === TcAction.SHOT) {
      // No IPv6 route to the backend where the test runs: nothing translated, nothing mapped.
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('FIB_LOOKUP_FAILED') }]);
      assert.deepEqual(tuple6(r.data), { src: CLIENT6, dst: REMOTE6, sport: 50030, dport: 8080 });
      return;
    }
    const out = tuple6(r.data);
    assert.deepEqual([out.src, out.dst, out.dport], [NODE6, REMOTE6, 8080]);
    assert.equal(r.data[14 + 7], 63, 'hop limit - 1');
    const t = { saddr: CLIENT6, daddr: REMOTE6, sport: 50030, dport: 8080, proto: IpProto.TCP };
    assert.deepEqual([h.ct(t)!.flags, h.ct(t)!.srcIdentity], [CtFlag.NODEPORT, IDENTITY.WORLD_IPV6]);
    const reply = await h.run(FROM_NETDEV, tcpFrame({ ...wire, src: REMOTE6, dst: NODE6, sport: 8080, dport: out.sport, flags: TcpFlag.SYN | TcpFlag.ACK }));
    assert.deepEqual(tuple6(reply.data), { src: NODE6, dst: CLIENT6, sport: 30080, dport: 50030 });
    assert.equal(h.ct(t)!.flags, CtFlag.NODEPORT | CtFlag.REPLY_SEEN);
  });

  it('the backend\'s ICMPv6 error about the SNATed flow goes back to the client about its own datagram: the frontend outside and inside', async () => {
    config(true, INTERNAL6);
    h.ipcache.set(parsePrefix(`${REMOTE6}/128`), { identity: IDENTITY.REMOTE, tunnelIp4: Number(parseIp(REMOTE_NODE_IP).bits), flags: 0 });
    const first = await h.run(FROM_NETDEV, syn(50040));
    assert.equal(first.retval, TcAction.REDIRECT);
    const natPort = tuple6(first.data).sport;
    // The backend answers port unreachable to the node's InternalIP, quoting the datagram it got.
    const quoted = Buffer.from(first.data.subarray(14));
    const msg = Buffer.concat([Buffer.from([1, 4, 0, 0, 0, 0, 0, 0]), quoted]);
    msg.writeUInt16BE(internetChecksum(Buffer.concat([pseudoHeader6(REMOTE6, INTERNAL6, IpProto.ICMPV6, msg.length), msg])), 2);
    const r = await h.run(FROM_NETDEV, ipv6Frame({ ...wire, src: REMOTE6, dst: INTERNAL6, nextHeader: IpProto.ICMPV6, payload: msg }));
    assert.ok(r.retval === TcAction.REDIRECT || r.retval === TcAction.SHOT, `verdict ${r.retval}`);
    const out = Buffer.from(r.data);
    assert.deepEqual([addr6(out, 22), addr6(out, 38)], [NODE6, CLIENT6], 'outer: from the frontend to the client');
    const icmp = out.subarray(54);
    assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(NODE6, CLIENT6, IpProto.ICMPV6, icmp.length), icmp])), 0, 'ICMPv6 checksum');
    const inner = icmp.subarray(8);
    assert.deepEqual([addr6(inner, 8), addr6(inner, 24)], [CLIENT6, NODE6], 'the quoted datagram is the client\'s to the frontend');
    assert.deepEqual([inner.readUInt16BE(40), inner.readUInt16BE(42)], [50040, 30080]);
    assert.notEqual(natPort, 50040);
  });

  it('a Local service never leaves the node: only its backends here are chosen, none here is DROP_NO_SERVICE', async () => {
    config(true, INTERNAL6);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: false, cookie: COOKIE });
    const flags = ServiceFlag.NODEPORT | ServiceFlag.LOCAL_TRAFFIC | ServiceFlag.TWO_SCOPES;
    lb.addService({ id: SVC, frontend: FRONTEND6, backends: [], flags });
    lb.addService({ id: SVC, frontend: FRONTEND6, backends: [BE6.REMOTE.id], flags, scope: LbScope.INTERNAL });
    assert.equal((await h.run(FROM_NETDEV, syn(50050))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NO_SERVICE'), direction: INGRESS, srcIdentity: IDENTITY.WORLD_IPV6 }]);
    lb.addService({ id: SVC, frontend: FRONTEND6, backends: [BE6.LOCAL.id], flags });
    const r = await h.run(FROM_NETDEV, syn(50051));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(r.data), { src: CLIENT6, dst: BE6.LOCAL.ip, sport: 50051, dport: 8080 });
  });

  it('an IPv6 LoadBalancer\'s loadBalancerSourceRanges: a source outside them is NOT_IN_SRC_RANGE, one inside reaches the backend', async () => {
    config(true, INTERNAL6);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: false, cookie: COOKIE });
    const LB6: TestFrontend = { ip: '2001:db8:80::1', port: 443, proto: IpProto.TCP };
    lb.addService({ id: 32, frontend: LB6, backends: [BE6.LOCAL.id], flags: ServiceFlag.LOADBALANCER | ServiceFlag.SOURCE_RANGES });
    lb.addSourceRange(32, '2001:db8:99::/48');
    const from = (src: string, sport: number) => tcpFrame({ ...wire, src, dst: LB6.ip, sport, dport: 443, flags: TcpFlag.SYN });
    assert.equal((await h.run(FROM_NETDEV, from('2001:db8:98::9', 50060))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NOT_IN_SRC_RANGE'), direction: INGRESS, srcIdentity: IDENTITY.WORLD_IPV6 }]);
    const r = await h.run(FROM_NETDEV, from(CLIENT6, 50061));
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple6(r.data), { src: CLIENT6, dst: BE6.LOCAL.ip, sport: 50061, dport: 8080 });
  });
});
