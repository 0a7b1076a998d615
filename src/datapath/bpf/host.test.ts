/**
 * bpf_host.o through BPF_PROG_TEST_RUN: tendril_from_host (tendril_host
 * egress, the pod CIDRs' fallback route) delivers to a local endpoint under
 * its ingress policy and drops pod addresses with no endpoint;
 * tendril_to_host counts, traces and passes.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { BpfObject, removePinDir, TcAction } from '../kernel/bpf/index.js';
import { makePinRoot } from '../kernel/bpf/testing/kernelTest.js';
import { MapName } from './constants.js';
import { endpointInfo, endpointKey, NO_NAT_CONFIG } from './layout.js';
import { parseIp } from '../../netip/index.js';
import { ConfigFlag, CtFlag, DropReason, EventType, PolicyVerdict, ReservedCookie, TraceLevel, TracePoint, TrafficDirection } from './constants.js';
import { assertEvents } from './testing/expect.js';
import { IDENTITY, installNode, NODE_IP, POD_A, POD_B, POD_C, REMOTE_POD_IP, WORLD_IP } from './testing/fixtures.js';
import { LbNode } from './testing/lbNode.js';
import { arpFrame, icmpv6NeighborSolicitation, IpProto, ipv6Frame, readIpv4, TcpFlag, tcpFrame, truncate, udpFrame } from './testing/packets.js';
import { HOST_OBJECT, LXC_OBJECT, ProgramHarness } from './testing/programHarness.js';

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
