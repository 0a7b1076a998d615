/**
 * bpf_host.o through BPF_PROG_TEST_RUN: tendril_from_host (tendril_host
 * egress, the pod CIDRs' fallback route) delivers to a local endpoint under
 * its ingress policy and drops pod addresses with no endpoint; in IPv6 it
 * also load-balances the node's own connections to a ClusterIP and sends
 * the node's packets for another node's pod into the overlay (tunnel mode);
 * tendril_to_host counts, traces and passes.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { BpfObject, codec, removePinDir, TcAction } from '../kernel/bpf/index.js';
import { makePinRoot } from '../kernel/bpf/testing/kernelTest.js';
import { MapName } from './constants.js';
import { deviceInfo, endpointInfo, endpointKey, NO_NAT_CONFIG } from './layout.js';
import { formatIp, parseIp, parsePrefix } from '../../netip/index.js';
import { ConfigFlag, CtFlag, DropReason, EventType, PolicyVerdict, ReservedCookie, TraceLevel, TracePoint, TrafficDirection } from './constants.js';
import { assertEvents } from './testing/expect.js';
import { IDENTITY, installNode, NODE_IP, POD_A, POD_B, POD_C, REMOTE_POD_IP, WORLD_IP } from './testing/fixtures.js';
import { LbNode } from './testing/lbNode.js';
import { arpFrame, icmpv6NeighborSolicitation, internetChecksum, IpProto, ipv6Frame, pseudoHeader6, readIpv4, TcpFlag, tcpFrame, truncate, udpFrame } from './testing/packets.js';
import { HOST_OBJECT, LXC_OBJECT, NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the bpf_host program tests');

const FROM_HOST = 'tendril_from_host';
const TO_HOST = 'tendril_to_host';
const { DROP, POLICY_VERDICT, TRACE } = EventType;
const { NONE, INGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

/** What the node's stack puts on tendril_host: its MACs, TTL already decremented by routing. */
const hostMacs = { srcMac: '0a:00:00:00:ff:01', dstMac: '0a:00:00:00:ff:02' };

describe('bpf_host', () => {
  let h: ProgramHarness;

  beforeEach(async () => {
    h = await ProgramHarness.load(HOST_OBJECT);
    installNode(h);
  });
  afterEach(async () => {
    await h?.close();
  });

  describe('tendril_from_host', () => {
    it('delivers to a local endpoint under its ingress policy: MACs for the pod, TTL as routed, redirect, conntrack', async () => {
      const frame = tcpFrame({ ...hostMacs, src: NODE_IP, dst: POD_A.ip, sport: 36000, dport: 8080, ttl: 63 });
      assert.equal((await h.run(FROM_HOST, frame)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, srcIdentity: IDENTITY.HOST, dstEndpoint: POD_A.endpointId },
        { type: DROP, subtype: code('POLICY'), direction: INGRESS },
      ]);

      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
      h.setTraceLevel(TraceLevel.NEW_FLOWS);
      const r = await h.run(FROM_HOST, frame);
      assert.equal(r.retval, TcAction.REDIRECT);
      const ip = readIpv4(r.data);
      assert.equal(ip.ethDst, POD_A.podMac);
      assert.equal(ip.ethSrc, POD_A.lxcMac);
      assert.equal(ip.ttl, 63);
      assert.ok(ip.checksumValid);
      const entry = h.ct({ saddr: NODE_IP, daddr: POD_A.ip, sport: 36000, dport: 8080, proto: IpProto.TCP })!;
      assert.ok(entry);
      assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.dstEndpoint, entry.flags], [IDENTITY.HOST, IDENTITY.A, POD_A.endpointId, 0]);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, cookie: ReservedCookie.ALLOW_LOCALHOST },
        { type: TRACE, subtype: TracePoint.TO_ENDPOINT, direction: INGRESS },
      ]);
      assert.equal(h.metric(0, INGRESS).packets, 1n);
      assert.equal(h.metric(code('POLICY'), INGRESS).packets, 1n);
    });

    it('pins the same maps as bpf_lxc: the second object loaded into one pin directory reuses every map', async () => {
      const pinRoot = await makePinRoot('h1-shared');
      const loaded: BpfObject[] = [];
      try {
        loaded.push(await BpfObject.load(LXC_OBJECT, { pinRoot, maxEntries: { [MapName.CT_TCP]: 1024, [MapName.CT_ANY]: 1024 } }));
        loaded.push(await BpfObject.load(HOST_OBJECT, { pinRoot, maxEntries: { [MapName.CT_TCP]: 1024, [MapName.CT_ANY]: 1024 } }));
        const [lxc, host] = loaded as [BpfObject, BpfObject];
        for (const name of Object.values(MapName)) {
          assert.equal(lxc.maps.get(name)?.reusedPin, false, `${name} created by bpf_lxc.o`);
          assert.equal(host.maps.get(name)?.reusedPin, true, `${name} reused by bpf_host.o`);
        }
        lxc.map(MapName.ENDPOINTS, endpointKey, endpointInfo).set(parseIp(POD_A.ip), { ...POD_A, flags: 0 });
        assert.equal(host.map(MapName.ENDPOINTS, endpointKey, endpointInfo).get(parseIp(POD_A.ip))?.endpointId, POD_A.endpointId);
      } finally {
        for (const o of loaded) o.close();
        await removePinDir(pinRoot);
      }
    });

    it('shares conntrack with bpf_lxc: the pod\'s reply through from_container rides the entry', async () => {
      // Both objects pinned into one directory would share maps; here the entry is carried over by hand.
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
      assert.equal((await h.run(FROM_HOST, tcpFrame({ ...hostMacs, src: NODE_IP, dst: POD_A.ip, sport: 36001, dport: 8080 }))).retval, TcAction.REDIRECT);
      const tuple = { saddr: NODE_IP, daddr: POD_A.ip, sport: 36001, dport: 8080, proto: IpProto.TCP };
      const lxc = await ProgramHarness.load(LXC_OBJECT);
      try {
        installNode(lxc);
        lxc.ctTcp.set(lxc.ctKey(tuple), h.ct(tuple)!);
        const reply = tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: NODE_IP, sport: 8080, dport: 36001, flags: TcpFlag.SYN | TcpFlag.ACK });
        assert.equal((await lxc.run('tendril_from_container', reply)).retval, TcAction.OK);
        assert.equal(lxc.ct(tuple)!.flags, CtFlag.REPLY_SEEN);
      } finally {
        await lxc.close();
      }
    });

    it('drops a pod address with no local endpoint (a remote pod\'s, or an unused one) as DROP_UNKNOWN_ENDPOINT', async () => {
      for (const dst of [REMOTE_POD_IP, '10.200.0.99']) {
        assert.equal((await h.run(FROM_HOST, udpFrame({ ...hostMacs, src: NODE_IP, dst, sport: 1, dport: 2 }))).retval, TcAction.SHOT, dst);
      }
      assertEvents(await h.takeEvents(2), [
        { type: DROP, subtype: code('UNKNOWN_ENDPOINT'), direction: NONE, daddr: REMOTE_POD_IP, dstIdentity: IDENTITY.REMOTE },
        { type: DROP, subtype: code('UNKNOWN_ENDPOINT'), direction: NONE, daddr: '10.200.0.99', dstIdentity: IDENTITY.WORLD },
      ]);
      assert.equal(h.metric(code('UNKNOWN_ENDPOINT'), NONE).packets, 2n);
    });

    /** A device of the node a router sends traffic in on: skb->ingress_ifindex of a forwarded packet. */
    const OUTSIDE_DEVICE = 9;

    it('judges a packet the node forwards to a local pod by its source address, never as the node: a forged node address is world', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
      const forged = tcpFrame({ ...hostMacs, src: NODE_IP, dst: POD_A.ip, sport: 36100, dport: 8080, flags: TcpFlag.SYN });
      assert.equal((await h.runForwarded(FROM_HOST, forged, OUTSIDE_DEVICE)).retval, TcAction.SHOT, 'from a device, the node\'s address is no proof of the node');
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, srcIdentity: IDENTITY.WORLD, dstEndpoint: POD_A.endpointId },
        { type: DROP, subtype: code('POLICY'), srcIdentity: IDENTITY.WORLD },
      ]);
      // The node's own packet (no ingress device) is the node's.
      assert.equal((await h.run(FROM_HOST, forged)).retval, TcAction.REDIRECT);
    });

    describe('a ClusterIP', () => {
      const CLUSTER_IP = { ip: '10.96.0.10', port: 80, proto: IpProto.TCP };
      let lb: LbNode;
      beforeEach(() => {
        lb = new LbNode(h);
        lb.addBackend({ id: 101, ip: POD_A.ip, port: 8080, proto: IpProto.TCP });
        lb.addService({ id: 1, frontend: CLUSTER_IP, backends: [101] });
        h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: false, cookie: 0x1001 });
      });
      afterEach(() => lb?.close());
      const syn = (src: string, sport: number) => tcpFrame({ ...hostMacs, src, dst: CLUSTER_IP.ip, sport, dport: CLUSTER_IP.port, flags: TcpFlag.SYN });

      it('forwarded from a device (a router sent it here) is dropped as CLUSTERIP_FROM_OUTSIDE, before any backend is chosen', async () => {
        const r = await h.runForwarded(FROM_HOST, syn(WORLD_IP, 50000), OUTSIDE_DEVICE);
        assert.equal(r.retval, TcAction.SHOT);
        assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('CLUSTERIP_FROM_OUTSIDE'), direction: NONE, saddr: WORLD_IP, daddr: CLUSTER_IP.ip, srcIdentity: IDENTITY.WORLD }]);
        assert.equal(h.metric(code('CLUSTERIP_FROM_OUTSIDE'), NONE).packets, 1n);
        assert.equal(await h.ctCount(), 0);
      });

      it('answers the node itself, and a local pod\'s packet from its own device', async () => {
        const own = await h.run(FROM_HOST, syn(NODE_IP, 50001));
        assert.equal(own.retval, TcAction.REDIRECT);
        const pod = await h.runForwarded(FROM_HOST, syn(POD_B.ip, 50002), POD_B.ifindex);
        assert.equal(pod.retval, TcAction.REDIRECT);
        // POD_C lives on another device: its address from this one is forged.
        const forged = await h.runForwarded(FROM_HOST, syn(POD_C.ip, 50003), OUTSIDE_DEVICE);
        assert.equal(forged.retval, TcAction.SHOT);
      });

      it('answers the outside with --bpf-lb-external-clusterip (ConfigFlag.EXTERNAL_CLUSTERIP)', async () => {
        h.config.set(0, { traceLevel: TraceLevel.OFF, flags: ConfigFlag.EXTERNAL_CLUSTERIP, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG });
        const r = await h.runForwarded(FROM_HOST, syn(WORLD_IP, 50004), OUTSIDE_DEVICE);
        assert.equal(r.retval, TcAction.REDIRECT);
        assert.equal(readIpv4(r.data).dst, POD_A.ip);
      });
    });

    it('passes ARP and IPv6 (counted), drops a truncated IPv4 header', async () => {
      assert.equal((await h.run(FROM_HOST, arpFrame({ senderMac: hostMacs.srcMac, senderIp: NODE_IP, targetIp: POD_A.ip }))).retval, TcAction.OK);
      const ns = ipv6Frame({ src: 'fe80::1', dst: 'ff02::1:ff00:1', nextHeader: IpProto.ICMPV6, payload: icmpv6NeighborSolicitation('fe80::1', 'ff02::1:ff00:1', 'fe80::2') });
      assert.equal((await h.run(FROM_HOST, ns)).retval, TcAction.OK);
      assert.equal(h.metric(0, NONE).packets, 2n);
      assert.equal((await h.run(FROM_HOST, truncate(udpFrame({ src: NODE_IP, dst: POD_A.ip, sport: 1, dport: 2 }), 14 + 22))).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('INVALID_PACKET') }]);
    });
  });

  describe('tendril_from_host, IPv6', () => {
    const A6 = 'fd00:10::a';
    const NODE6 = 'fd00:77::5';
    beforeEach(() => {
      h.addEndpoint({ ...POD_A, ip: A6 });
      h.addIpcache(`${A6}/128`, IDENTITY.A);
      h.addIpcache(`${NODE6}/128`, IDENTITY.HOST);
    });

    const OUTSIDE_DEVICE = 9;
    const VIP6 = 'fd00:96::10';
    const WORLD6 = '2001:db8:99::9';
    /** An IPv6 pod on another node, the IPv4 underlay address of that node, and tendril_vxlan's ifindex. */
    const REMOTE6 = 'fd00:b::20';
    const REMOTE_NODE_IP = '192.168.77.6';
    const TUNNEL_IFINDEX = 42;
    const WEB = { ip: VIP6, port: 80, proto: IpProto.TCP };
    const tunnelMode = (on: boolean) =>
      h.config.set(0, { traceLevel: TraceLevel.ALL, flags: on ? ConfigFlag.TUNNEL : 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: TUNNEL_IFINDEX, nodeIpv4: 0, ...NO_NAT_CONFIG });
    const remotePod = () => h.ipcache.set(parsePrefix(`${REMOTE6}/128`), { identity: IDENTITY.REMOTE, tunnelIp4: Number(parseIp(REMOTE_NODE_IP).bits), flags: 0 });

    /** An IPv6 TCP/UDP frame's addresses and ports, its L4 checksum checked over the IPv6 pseudo-header. */
    function tuple6(frame: Uint8Array): { src: string; dst: string; sport: number; dport: number } {
      const b = Buffer.from(frame);
      assert.equal(b.readUInt16BE(12), 0x86dd);
      const addr = (o: number) => formatIp(parseIp(Array.from({ length: 8 }, (_, i) => b.readUInt16BE(o + 2 * i).toString(16)).join(':')));
      const [src, dst] = [addr(22), addr(38)];
      const l4 = b.subarray(54, 54 + b.readUInt16BE(18));
      assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(src, dst, b[20]!, l4.length), l4])), 0, 'L4 checksum over the IPv6 pseudo-header');
      return { src, dst, sport: l4.readUInt16BE(0), dport: l4.readUInt16BE(2) };
    }

    describe('an IPv6 ClusterIP', () => {
      let lb: LbNode;
      beforeEach(() => {
        lb = new LbNode(h);
        lb.addBackend({ id: 201, ip: A6, port: 8080, proto: IpProto.TCP });
        lb.addBackend({ id: 202, ip: REMOTE6, port: 8080, proto: IpProto.TCP });
      });
      afterEach(() => lb?.close());
      const syn = (src: string, sport: number) => tcpFrame({ ...hostMacs, src, dst: VIP6, sport, dport: 80, flags: TcpFlag.SYN });

      it('the node\'s own connection: DNAT to a local backend under its ingress policy (as host), conntrack with the reverse NAT; the backend\'s reply through from_container gets the frontend back', async () => {
        lb.addService({ id: 7, frontend: WEB, backends: [201] });
        h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
        const r = await h.run(FROM_HOST, syn(NODE6, 36010));
        assert.equal(r.retval, TcAction.REDIRECT);
        assert.deepEqual(tuple6(r.data), { src: NODE6, dst: A6, sport: 36010, dport: 8080 });
        assert.equal(r.data.subarray(0, 6).toString('hex'), POD_A.podMac.replace(/:/g, ''));
        const tuple = { saddr: NODE6, daddr: A6, sport: 36010, dport: 8080, proto: IpProto.TCP };
        const entry = h.ct(tuple)!;
        assert.ok(entry, 'tracked after DNAT');
        assert.deepEqual([entry.srcIdentity, entry.dstEndpoint, entry.revNatIndex], [IDENTITY.HOST, POD_A.endpointId, 7]);

        const lxc = await ProgramHarness.load(LXC_OBJECT);
        const lxcLb = new LbNode(lxc);
        try {
          installNode(lxc);
          lxc.addEndpoint({ ...POD_A, ip: A6 });
          lxc.addIpcache(`${NODE6}/128`, IDENTITY.HOST);
          lxcLb.addBackend({ id: 201, ip: A6, port: 8080, proto: IpProto.TCP });
          lxcLb.addService({ id: 7, frontend: WEB, backends: [201] });
          lxc.ct6Tcp.set(lxc.ctKey(tuple), entry);
          const reply = tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: A6, dst: NODE6, sport: 8080, dport: 36010, flags: TcpFlag.SYN | TcpFlag.ACK });
          const back = await lxc.run('tendril_from_container', reply);
          assert.equal(back.retval, TcAction.OK);
          assert.deepEqual(tuple6(back.data), { src: VIP6, dst: NODE6, sport: 80, dport: 36010 }, 'the node sees the frontend it connected to');
        } finally {
          lxcLb.close();
          await lxc.close();
        }
      });

      it('forwarded from a device (a router sent it here) is CLUSTERIP_FROM_OUTSIDE before any backend is chosen, the source world-ipv6 even when it claims the node\'s address', async () => {
        lb.addService({ id: 7, frontend: WEB, backends: [201] });
        h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
        for (const [src, sport] of [[WORLD6, 50000], [NODE6, 50001]] as const) {
          assert.equal((await h.runForwarded(FROM_HOST, syn(src, sport), OUTSIDE_DEVICE)).retval, TcAction.SHOT, src);
        }
        assertEvents(await h.takeEvents(2), [
          { type: DROP, subtype: code('CLUSTERIP_FROM_OUTSIDE'), direction: NONE, saddr: WORLD6, daddr: VIP6, srcIdentity: IDENTITY.WORLD_IPV6 },
          { type: DROP, subtype: code('CLUSTERIP_FROM_OUTSIDE'), direction: NONE, saddr: NODE6, daddr: VIP6, srcIdentity: IDENTITY.WORLD_IPV6 },
        ]);
        assert.equal(await h.ctCount(6), 0);
        // With --bpf-lb-external-clusterip it is a frontend, its client still world-ipv6: a policy admitting only host drops it.
        h.config.set(0, { traceLevel: TraceLevel.OFF, flags: ConfigFlag.EXTERNAL_CLUSTERIP, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG });
        assert.equal((await h.runForwarded(FROM_HOST, syn(NODE6, 50002), OUTSIDE_DEVICE)).retval, TcAction.SHOT);
        assertEvents(await h.takeEvents(2), [
          { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, srcIdentity: IDENTITY.WORLD_IPV6, daddr: A6, dport: 8080 },
          { type: DROP, subtype: code('POLICY') },
        ]);
      });

      it('a backend on another node, tunnel mode: DNAT, conntrack with the reverse NAT, into the overlay with the host identity', async () => {
        tunnelMode(true);
        remotePod();
        lb.addService({ id: 8, frontend: WEB, backends: [202] });
        const r = await h.run(FROM_HOST, syn(NODE6, 36020));
        assert.equal(r.retval, TcAction.REDIRECT);
        assert.deepEqual(tuple6(r.data), { src: NODE6, dst: REMOTE6, sport: 36020, dport: 8080 });
        assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_OVERLAY, saddr: NODE6, daddr: REMOTE6, srcIdentity: IDENTITY.HOST, dstIdentity: IDENTITY.REMOTE }]);
        const entry = h.ct({ saddr: NODE6, daddr: REMOTE6, sport: 36020, dport: 8080, proto: IpProto.TCP })!;
        assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.revNatIndex], [IDENTITY.HOST, IDENTITY.REMOTE, 8]);
      });

      it('the remote backend\'s reply arriving on a device gets the frontend back before the node\'s stack takes it (tendril_from_netdev)', async () => {
        lb.addService({ id: 8, frontend: WEB, backends: [202] });
        tunnelMode(true);
        remotePod();
        assert.equal((await h.run(FROM_HOST, syn(NODE6, 36030))).retval, TcAction.REDIRECT);
        const tuple = { saddr: NODE6, daddr: REMOTE6, sport: 36030, dport: 8080, proto: IpProto.TCP };
        const netdev = await ProgramHarness.load(NETDEV_OBJECT);
        const netLb = new LbNode(netdev);
        try {
          installNode(netdev);
          netdev.object.map(MapName.DEVICES, codec.u32, deviceInfo).set(1, { ipv4: parseIp(NODE_IP), flags: 0, mac: hostMacs.dstMac });
          netdev.addIpcache(`${NODE6}/128`, IDENTITY.HOST);
          netLb.addBackend({ id: 202, ip: REMOTE6, port: 8080, proto: IpProto.TCP });
          netLb.addService({ id: 8, frontend: WEB, backends: [202] });
          netdev.ct6Tcp.set(netdev.ctKey(tuple), h.ct(tuple)!);
          const reply = tcpFrame({ ...hostMacs, src: REMOTE6, dst: NODE6, sport: 8080, dport: 36030, flags: TcpFlag.SYN | TcpFlag.ACK });
          const r = await netdev.run('tendril_from_netdev', reply);
          assert.equal(r.retval, TcAction.OK);
          assert.deepEqual(tuple6(r.data), { src: VIP6, dst: NODE6, sport: 80, dport: 36030 });
          // A packet from that backend no flow of the node's opened is left as it is.
          const stray = tcpFrame({ ...hostMacs, src: REMOTE6, dst: NODE6, sport: 8080, dport: 36031, flags: TcpFlag.SYN | TcpFlag.ACK });
          assert.deepEqual((await netdev.run('tendril_from_netdev', stray)).data, stray);
        } finally {
          netLb.close();
          await netdev.close();
        }
      });
    });

    it('tunnel mode: the node\'s packet for another node\'s IPv6 pod goes into the overlay with the host identity; a forwarded one with its own (world-ipv6), never host; natively it stays UNKNOWN_ENDPOINT', async () => {
      remotePod();
      tunnelMode(true);
      const frame = (src: string) => udpFrame({ ...hostMacs, src, dst: REMOTE6, sport: 5000, dport: 53 });
      const own = await h.run(FROM_HOST, frame(NODE6));
      assert.equal(own.retval, TcAction.REDIRECT);
      assert.deepEqual(own.data, frame(NODE6), 'the sender leaves the inner packet as it is');
      for (const src of [WORLD6, NODE6]) assert.equal((await h.runForwarded(FROM_HOST, frame(src), OUTSIDE_DEVICE)).retval, TcAction.REDIRECT, src);
      assertEvents(await h.takeEvents(3), [
        { type: TRACE, subtype: TracePoint.TO_OVERLAY, direction: NONE, saddr: NODE6, daddr: REMOTE6, srcIdentity: IDENTITY.HOST, dstIdentity: IDENTITY.REMOTE },
        { type: TRACE, subtype: TracePoint.TO_OVERLAY, saddr: WORLD6, srcIdentity: IDENTITY.WORLD_IPV6 },
        { type: TRACE, subtype: TracePoint.TO_OVERLAY, saddr: NODE6, srcIdentity: IDENTITY.WORLD_IPV6 },
      ]);
      tunnelMode(false);
      assert.equal((await h.run(FROM_HOST, frame(NODE6))).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('UNKNOWN_ENDPOINT'), dstIdentity: IDENTITY.REMOTE }]);
    });

    it('delivers to a local endpoint\'s IPv6 address under its ingress policy with conntrack; an IPv6 pod address with no endpoint is UNKNOWN_ENDPOINT; the node\'s ND and multicast pass', async () => {
      const frame = tcpFrame({ ...hostMacs, src: NODE6, dst: A6, sport: 36000, dport: 8080, ttl: 63 });
      assert.equal((await h.run(FROM_HOST, frame)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, srcIdentity: IDENTITY.HOST, dstEndpoint: POD_A.endpointId, saddr: NODE6, daddr: A6 },
        { type: DROP, subtype: code('POLICY'), direction: INGRESS },
      ]);
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
      const r = await h.run(FROM_HOST, frame);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.equal(r.data.subarray(0, 6).toString('hex'), POD_A.podMac.replace(/:/g, ''));
      assert.equal(r.data.subarray(6, 12).toString('hex'), POD_A.lxcMac.replace(/:/g, ''));
      assert.deepEqual(r.data.subarray(12), frame.subarray(12), 'nothing else changed');
      const entry = h.ct({ saddr: NODE6, daddr: A6, sport: 36000, dport: 8080, proto: IpProto.TCP });
      assert.ok(entry);
      assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.dstEndpoint], [IDENTITY.HOST, IDENTITY.A, POD_A.endpointId]);
      await h.takeEvents(1);
      assert.equal((await h.run(FROM_HOST, tcpFrame({ ...hostMacs, src: NODE6, dst: 'fd00:10::99', sport: 1, dport: 2 }))).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('UNKNOWN_ENDPOINT') }]);
      const ns = ipv6Frame({ src: NODE6, dst: A6, nextHeader: IpProto.ICMPV6, hopLimit: 255, payload: icmpv6NeighborSolicitation(NODE6, A6, A6) });
      assert.equal((await h.run(FROM_HOST, ns)).retval, TcAction.OK);
      assert.equal((await h.run(FROM_HOST, udpFrame({ src: NODE6, dst: 'ff02::fb', sport: 5353, dport: 5353 }))).retval, TcAction.OK);
    });
  });

  describe('tendril_to_host', () => {
    it('passes everything, counts it, and traces it only at trace level ALL', async () => {
      const frame = udpFrame({ src: POD_A.ip, dst: WORLD_IP, sport: 10, dport: 20 });
      const r = await h.run(TO_HOST, frame);
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(r.data, frame);
      h.setTraceLevel(TraceLevel.NEW_FLOWS);
      await h.run(TO_HOST, frame);
      assertEvents(await h.takeEvents(), []);
      h.setTraceLevel(TraceLevel.ALL);
      await h.run(TO_HOST, frame);
      assert.equal((await h.run(TO_HOST, arpFrame({ senderMac: hostMacs.srcMac, senderIp: NODE_IP, targetIp: POD_A.ip }))).retval, TcAction.OK);
      assertEvents(await h.takeEvents(2), [
        { type: TRACE, subtype: TracePoint.TO_HOST, direction: NONE, saddr: POD_A.ip, daddr: WORLD_IP, proto: IpProto.UDP, sport: 0, origLen: frame.length },
        { type: TRACE, subtype: TracePoint.TO_HOST, direction: NONE },
      ]);
      assert.deepEqual(h.metric(0, NONE), { packets: 4n, bytes: BigInt(3 * frame.length + 42) });
    });
  });
});
