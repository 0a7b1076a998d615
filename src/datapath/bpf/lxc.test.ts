/**
 * bpf_lxc.o through BPF_PROG_TEST_RUN: crafted frames into
 * tendril_from_container (what a pod sends) and tendril_to_container (what
 * the node sends a pod), with prepared maps, asserting verdicts, rewritten
 * bytes, conntrack entries, counters and ring buffer events.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { parseIp } from '../../netip/index.js';
import { TcAction } from '../kernel/bpf/index.js';
import { CtFlag, CtTimeout, DropReason, IPV6_MAX_EXT_HEADERS, EventType, MapName, MetricsReason, PolicyVerdict, ReservedCookie, TraceLevel, TracePoint, TrafficDirection } from './constants.js';
import { assertEvents, assertLifetime } from './testing/expect.js';
import { CIDR_24, IDENTITY, installNode, NODE_IP, POD_A, POD_B, POD_C, REMOTE_POD_IP, ROUTER, WORLD_IP } from './testing/fixtures.js';
import {
  arpFrame,
  datagramOf,
  EtherType,
  ethernetFrame,
  fragmentFrame,
  icmpEchoFrame,
  icmpError,
  Icmp6Type,
  IcmpType,
  icmpv6Message,
  internetChecksum,
  ipv6Bytes,
  pseudoHeader6,
  IpProto,
  ipv4Datagram,
  ipv4Frame,
  ipv6Frame,
  readArp,
  readIpv4,
  TcpFlag,
  tcpFrame,
  tcpSegment,
  truncate,
  udpDatagram,
  udpFrame,
} from './testing/packets.js';
import { LXC_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the bpf_lxc program tests');

const FROM = 'tendril_from_container';
const TO = 'tendril_to_container';
const { DROP, POLICY_VERDICT, TRACE } = EventType;
const { INGRESS, EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

/** Cookies of test rules (>= MIN_RULE_COOKIE). */
const COOKIE = { A_EGRESS: 0x1001, B_INGRESS: 0x2002, DENY: 0x3003, A_INGRESS: 0x4004, WILDCARD: 0x5005 };

/** Frames from pod A (its MAC to its gateway's). */
const fromA = { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac };
const fromB = { srcMac: POD_B.podMac, dstMac: POD_B.lxcMac };

const synAtoB = (sport = 40000, dport = 80) => tcpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport, dport, flags: TcpFlag.SYN });

describe('bpf_lxc tendril_from_container', () => {
  let h: ProgramHarness;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    installNode(h);
  });
  afterEach(async () => {
    await h?.close();
  });

  /** A's egress to B and B's ingress from A allowed on TCP/80. */
  function allowAtoB80(): void {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.A_EGRESS });
    h.addPolicy({ endpointId: POD_B.endpointId, identity: IDENTITY.A, egress: false, proto: IpProto.TCP, port: 80, cookie: COOKIE.B_INGRESS });
  }

  describe('ARP', () => {
    it('answers a request for the gateway with the lxc MAC and sends it back out the device', async () => {
      const req = arpFrame({ senderMac: POD_A.podMac, senderIp: POD_A.ip, targetIp: ROUTER.ip });
      const r = await h.run(FROM, req);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(readArp(r.data), {
        ethDst: POD_A.podMac,
        ethSrc: POD_A.lxcMac,
        op: 2,
        senderMac: POD_A.lxcMac,
        senderIp: ROUTER.ip,
        targetMac: POD_A.podMac,
        targetIp: POD_A.ip,
      });
      assert.equal(r.data.length, req.length);
      assert.deepEqual(h.metric(0, EGRESS), { packets: 1n, bytes: BigInt(req.length) });
      assertEvents(await h.takeEvents(), []);
    });

    it('answers for any other address too (a peer pod, the outside)', async () => {
      for (const target of [POD_B.ip, WORLD_IP]) {
        const r = await h.run(FROM, arpFrame({ senderMac: POD_A.podMac, senderIp: POD_A.ip, targetIp: target }));
        assert.equal(r.retval, TcAction.REDIRECT);
        assert.equal(readArp(r.data).senderIp, target);
        assert.equal(readArp(r.data).senderMac, POD_A.lxcMac);
      }
    });

    it('passes a request for the pod\'s own address (duplicate address detection), replies and strangers\' requests unchanged', async () => {
      const frames = [
        arpFrame({ senderMac: POD_A.podMac, senderIp: POD_A.ip, targetIp: POD_A.ip }),
        arpFrame({ op: 2, senderMac: POD_A.podMac, senderIp: POD_A.ip, targetMac: POD_A.lxcMac, targetIp: ROUTER.ip, ethDst: POD_A.lxcMac }),
        // Sender address of a pod on another device: not this device's endpoint to answer for.
        arpFrame({ senderMac: POD_C.podMac, senderIp: POD_C.ip, targetIp: ROUTER.ip }),
      ];
      for (const f of frames) {
        const r = await h.run(FROM, f);
        assert.equal(r.retval, TcAction.OK);
        assert.deepEqual(r.data, f);
      }
      assert.equal(h.metric(0, EGRESS).packets, 3n);
    });

    it('drops malformed ARP: not Ethernet/IPv4, or cut short', async () => {
      const wrongHw = arpFrame({ senderMac: POD_A.podMac, senderIp: POD_A.ip, targetIp: ROUTER.ip, htype: 6 });
      const wrongLen = arpFrame({ senderMac: POD_A.podMac, senderIp: POD_A.ip, targetIp: ROUTER.ip, hlen: 8 });
      const short = truncate(arpFrame({ senderMac: POD_A.podMac, senderIp: POD_A.ip, targetIp: ROUTER.ip }), 14 + 20);
      for (const f of [wrongHw, wrongLen, short]) assert.equal((await h.run(FROM, f)).retval, TcAction.SHOT);
      assert.equal(h.metric(code('ARP_INVALID'), EGRESS).packets, 3n);
      const events = await h.takeEvents(3);
      assertEvents(events, [0, 1, 2].map(() => ({ type: DROP, subtype: code('ARP_INVALID'), direction: EGRESS })));
    });
  });

  describe('TCP policy', () => {
    it('drops a SYN no entry allows: NO_MATCH verdict, DROP_POLICY, no conntrack entry', async () => {
      const syn = synAtoB();
      const r = await h.run(FROM, syn);
      assert.equal(r.retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: EGRESS, cookie: ReservedCookie.NONE, srcIdentity: IDENTITY.A, dstIdentity: IDENTITY.B, srcEndpoint: POD_A.endpointId, dstEndpoint: POD_B.endpointId, sport: 40000, dport: 80, proto: IpProto.TCP, tcpFlags: TcpFlag.SYN, saddr: POD_A.ip, daddr: POD_B.ip, ifindex: 1, origLen: syn.length },
        { type: DROP, subtype: code('POLICY'), direction: EGRESS, cookie: ReservedCookie.NONE },
      ]);
      assert.deepEqual(h.metric(code('POLICY'), EGRESS), { packets: 1n, bytes: BigInt(syn.length) });
      assert.equal(await h.ctCount(), 0);
    });

    it('drops a SYN a deny entry matches with DROP_POLICY_DENY and the deny rule\'s cookie', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.DENY, deny: true });
      assert.equal((await h.run(FROM, synAtoB())).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.DENIED, direction: EGRESS, cookie: COOKIE.DENY },
        { type: DROP, subtype: code('POLICY_DENY'), direction: EGRESS, cookie: COOKIE.DENY },
      ]);
      assert.equal(h.metric(code('POLICY_DENY'), EGRESS).packets, 1n);
      assert.equal(h.metric(code('POLICY'), EGRESS).packets, 0n);
    });

    it('checks the destination pod\'s ingress after the source\'s egress', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.A_EGRESS });
      assert.equal((await h.run(FROM, synAtoB())).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(3), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: EGRESS, cookie: COOKIE.A_EGRESS },
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, cookie: 0, srcIdentity: IDENTITY.A, dstEndpoint: POD_B.endpointId },
        { type: DROP, subtype: code('POLICY'), direction: INGRESS },
      ]);
      assert.equal(h.metric(code('POLICY'), INGRESS).packets, 1n);
      assert.equal(await h.ctCount(), 0);
    });

    it('delivers an allowed SYN to the local pod: MACs rewritten, TTL - 1 with a valid checksum, redirect, conntrack entry', async () => {
      allowAtoB80();
      h.setTraceLevel(TraceLevel.NEW_FLOWS);
      const syn = synAtoB();
      const before = process.hrtime.bigint();
      const r = await h.run(FROM, syn);
      assert.equal(r.retval, TcAction.REDIRECT);
      const ip = readIpv4(r.data);
      assert.equal(ip.ethDst, POD_B.podMac);
      assert.equal(ip.ethSrc, POD_B.lxcMac);
      assert.equal(ip.ttl, 63);
      assert.ok(ip.checksumValid, 'IPv4 header checksum');
      assert.deepEqual(r.data.subarray(14 + 20), syn.subarray(14 + 20), 'TCP segment untouched');

      const entry = h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80, proto: IpProto.TCP });
      assert.ok(entry, 'conntrack entry');
      assert.equal(entry.packets, 1n);
      assert.equal(entry.bytes, BigInt(syn.length));
      assert.equal(entry.tcpFlags, TcpFlag.SYN);
      assert.equal(entry.flags, 0);
      assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.srcEndpoint, entry.dstEndpoint], [IDENTITY.A, IDENTITY.B, POD_A.endpointId, POD_B.endpointId]);
      assertLifetime(entry, CtTimeout.TCP_SYN, before);

      assertEvents(await h.takeEvents(3), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: EGRESS, cookie: COOKIE.A_EGRESS },
        { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: INGRESS, cookie: COOKIE.B_INGRESS },
        { type: TRACE, subtype: TracePoint.TO_ENDPOINT, direction: EGRESS, saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80 },
      ]);
      assert.deepEqual(h.metric(0, EGRESS), { packets: 1n, bytes: BigInt(syn.length) });
    });

    it('lets the reply ride conntrack without policy, then tracks established and closing lifetimes', async () => {
      allowAtoB80();
      await h.run(FROM, synAtoB());
      await h.takeEvents(2);
      const tuple = { saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80, proto: IpProto.TCP };

      // B has no egress entries and A no ingress entries: only conntrack lets this through.
      const synAck = tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 80, dport: 40000, flags: TcpFlag.SYN | TcpFlag.ACK });
      let before = process.hrtime.bigint();
      const r = await h.run(FROM, synAck);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.equal(readIpv4(r.data).ethDst, POD_A.podMac);
      let entry = h.ct(tuple)!;
      assert.equal(entry.flags, CtFlag.REPLY_SEEN);
      assert.equal(entry.tcpFlags, TcpFlag.SYN | TcpFlag.ACK);
      assert.equal(entry.packets, 2n);
      assertLifetime(entry, CtTimeout.TCP_ESTABLISHED, before);
      assertEvents(await h.takeEvents(), []);

      const ack = tcpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 80, flags: TcpFlag.ACK });
      assert.equal((await h.run(FROM, ack)).retval, TcAction.REDIRECT);
      const fin = tcpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 80, flags: TcpFlag.FIN | TcpFlag.ACK });
      before = process.hrtime.bigint();
      assert.equal((await h.run(FROM, fin)).retval, TcAction.REDIRECT);
      entry = h.ct(tuple)!;
      assert.equal(entry.flags, CtFlag.REPLY_SEEN | CtFlag.CLOSING | CtFlag.FIN_ORIGINAL);
      assert.equal(entry.tcpFlags, TcpFlag.SYN | TcpFlag.ACK | TcpFlag.FIN);
      assert.equal(entry.packets, 4n);
      assertLifetime(entry, CtTimeout.TCP_CLOSING, before);
      assert.equal(h.metric(0, EGRESS).packets, 4n);
      assert.equal(await h.ctCount(), 1);
    });

    it('a one-way allow does not open new connections the other way', async () => {
      allowAtoB80();
      assert.equal((await h.run(FROM, synAtoB())).retval, TcAction.REDIRECT);
      await h.takeEvents(2);
      const synBtoA = tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 41000, dport: 80, flags: TcpFlag.SYN });
      assert.equal((await h.run(FROM, synBtoA)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: EGRESS, srcEndpoint: POD_B.endpointId, srcIdentity: IDENTITY.B, dstIdentity: IDENTITY.A },
        { type: DROP, subtype: code('POLICY'), direction: EGRESS },
      ]);
    });

    it('opens nothing with an expired entry the GC has not removed yet', async () => {
      allowAtoB80();
      await h.run(FROM, synAtoB());
      await h.takeEvents(2);
      const tuple = { saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80, proto: IpProto.TCP };
      h.ctTcp.set(h.ctKey(tuple), { ...h.ct(tuple)!, expiresNs: process.hrtime.bigint() - 1n });
      const synAck = tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 80, dport: 40000, flags: TcpFlag.SYN | TcpFlag.ACK });
      assert.equal((await h.run(FROM, synAck)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, srcEndpoint: POD_B.endpointId },
        { type: DROP, subtype: code('POLICY') },
      ]);
      // The original direction, allowed by policy, takes the slot over with a fresh entry.
      const before = process.hrtime.bigint();
      assert.equal((await h.run(FROM, synAtoB())).retval, TcAction.REDIRECT);
      const entry = h.ct(tuple)!;
      assert.equal(entry.packets, 1n);
      assertLifetime(entry, CtTimeout.TCP_SYN, before);
    });

    it('a new SYN on a closing tuple from the same side opens a fresh entry', async () => {
      allowAtoB80();
      const tuple = { saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80, proto: IpProto.TCP };
      await h.run(FROM, synAtoB());
      await h.run(FROM, tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 80, dport: 40000, flags: TcpFlag.RST | TcpFlag.ACK }));
      assert.equal(h.ct(tuple)!.flags, CtFlag.REPLY_SEEN | CtFlag.CLOSING);
      const before = process.hrtime.bigint();
      assert.equal((await h.run(FROM, synAtoB())).retval, TcAction.REDIRECT);
      const entry = h.ct(tuple)!;
      assert.equal(entry.flags, 0);
      assert.equal(entry.tcpFlags, TcpFlag.SYN);
      assert.equal(entry.packets, 1n);
      assertLifetime(entry, CtTimeout.TCP_SYN, before);
    });

    it('a new SYN on a closing tuple is judged by the policy in force now: denied, it leaves the entry closing', async () => {
      allowAtoB80();
      const tuple = { saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80, proto: IpProto.TCP };
      await h.run(FROM, synAtoB());
      await h.run(FROM, tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 80, dport: 40000, flags: TcpFlag.RST | TcpFlag.ACK }));
      await h.takeEvents(2);
      const closing = h.ct(tuple)!;
      assert.equal(closing.flags, CtFlag.REPLY_SEEN | CtFlag.CLOSING);
      const entries = [];
      for await (const k of h.policy.keys()) entries.push(k);
      for (const k of entries) h.policy.delete(k);
      for (const attempt of ['SYN', 'its retransmit']) {
        assert.equal((await h.run(FROM, synAtoB())).retval, TcAction.SHOT, attempt);
        assertEvents(await h.takeEvents(2), [
          { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: EGRESS, srcEndpoint: POD_A.endpointId },
          { type: DROP, subtype: code('POLICY'), direction: EGRESS },
        ]);
        assert.deepEqual(h.ct(tuple), closing, `${attempt}: the closing entry is untouched`);
      }
    });

    it('a lone ACK opens an entry with the SYN lifetime; only a reply makes it established', async () => {
      allowAtoB80();
      const tuple = { saddr: POD_A.ip, daddr: POD_B.ip, sport: 40100, dport: 80, proto: IpProto.TCP };
      const ack = (flags: number) => tcpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport: 40100, dport: 80, flags });
      let before = process.hrtime.bigint();
      assert.equal((await h.run(FROM, ack(TcpFlag.ACK))).retval, TcAction.REDIRECT);
      let entry = h.ct(tuple)!;
      assert.equal(entry.tcpFlags, TcpFlag.ACK);
      assertLifetime(entry, CtTimeout.TCP_SYN, before);
      // More of the same side, data included, proves nothing about the other end.
      before = process.hrtime.bigint();
      assert.equal((await h.run(FROM, ack(TcpFlag.ACK | TcpFlag.PSH))).retval, TcAction.REDIRECT);
      entry = h.ct(tuple)!;
      assert.equal(entry.flags, 0);
      assertLifetime(entry, CtTimeout.TCP_SYN, before);
      // B answers: established.
      before = process.hrtime.bigint();
      const answer = tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 80, dport: 40100, flags: TcpFlag.ACK });
      assert.equal((await h.run(FROM, answer)).retval, TcAction.REDIRECT);
      entry = h.ct(tuple)!;
      assert.equal(entry.flags, CtFlag.REPLY_SEEN);
      assertLifetime(entry, CtTimeout.TCP_ESTABLISHED, before);
      before = process.hrtime.bigint();
      assert.equal((await h.run(FROM, ack(TcpFlag.ACK))).retval, TcAction.REDIRECT);
      assertLifetime(h.ct(tuple)!, CtTimeout.TCP_ESTABLISHED, before);
    });

    it('while a build with other map layouts takes over, holds back TCP segments conntrack does not know; a SYN opens as ever', async () => {
      allowAtoB80();
      const config = h.config.get(0)!;
      h.config.set(0, { ...config, migrationUntilNs: process.hrtime.bigint() + 60_000_000_000n });
      const seg = (sport: number, flags: number) => tcpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport, dport: 80, flags });
      // Mid-flow segments of flows only the old maps know: dropped and counted (TCP sends them again), no entry made.
      for (const flags of [TcpFlag.ACK, TcpFlag.ACK | TcpFlag.PSH, TcpFlag.SYN | TcpFlag.ACK, TcpFlag.FIN | TcpFlag.ACK]) {
        assert.equal((await h.run(FROM, seg(40200, flags))).retval, TcAction.SHOT, `flags 0x${flags.toString(16)}`);
      }
      assert.equal(h.metric(code('CT_MIGRATION'), EGRESS).packets, 4n);
      assert.equal(await h.ctCount(), 0);
      assertEvents(await h.takeEvents(4), [0, 1, 2, 3].map(() => ({ type: DROP, subtype: code('CT_MIGRATION'), direction: EGRESS })));
      // A connection's first segment opens its flow; its later ones ride the entry.
      assert.equal((await h.run(FROM, seg(40201, TcpFlag.SYN))).retval, TcAction.REDIRECT);
      assert.equal((await h.run(FROM, seg(40201, TcpFlag.ACK))).retval, TcAction.REDIRECT);
      // The window over (the deadline passed, or the loader closed it): a lone ACK opens an entry as it always does.
      h.config.set(0, { ...config, migrationUntilNs: process.hrtime.bigint() - 1n });
      assert.equal((await h.run(FROM, seg(40200, TcpFlag.ACK))).retval, TcAction.REDIRECT);
      assert.equal(h.metric(code('CT_MIGRATION'), EGRESS).packets, 4n);
    });

    it('drops a delivery whose TTL would run out', async () => {
      allowAtoB80();
      const r = await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 80, ttl: 1 }));
      assert.equal(r.retval, TcAction.SHOT);
      const events = await h.takeEvents(3);
      assertEvents(events.slice(2), [{ type: DROP, subtype: code('TTL_EXCEEDED') }]);
    });
  });

  describe('UDP and ICMP', () => {
    it('passes UDP to the outside to the stack and tracks it in the non-TCP table; the reply comes back through to_container', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD, egress: true, proto: IpProto.UDP, port: 53, cookie: COOKIE.A_EGRESS });
      const query = udpFrame({ ...fromA, src: POD_A.ip, dst: WORLD_IP, sport: 5353, dport: 53, payload: Buffer.alloc(30) });
      const before = process.hrtime.bigint();
      const r = await h.run(FROM, query);
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(r.data, query, 'the stack routes it: no rewrite');
      const tuple = { saddr: POD_A.ip, daddr: WORLD_IP, sport: 5353, dport: 53, proto: IpProto.UDP };
      const entry = h.ct(tuple)!;
      assert.ok(entry);
      assert.equal(entry.dstIdentity, IDENTITY.WORLD);
      assert.equal(entry.dstEndpoint, 0);
      assertLifetime(entry, CtTimeout.ANY, before);
      assert.equal(h.ctTcp.nextKey(), undefined);
      assertEvents(await h.takeEvents(1), [{ type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: EGRESS, dstIdentity: IDENTITY.WORLD, proto: IpProto.UDP, sport: 5353, dport: 53 }]);

      const answer = udpFrame({ src: WORLD_IP, dst: POD_A.ip, sport: 53, dport: 5353 });
      assert.equal((await h.run(TO, answer)).retval, TcAction.OK);
      assert.equal(h.ct(tuple)!.flags, CtFlag.REPLY_SEEN);
      assert.equal(h.ct(tuple)!.packets, 2n);
      assert.equal(h.metric(0, INGRESS).packets, 1n);
      assertEvents(await h.takeEvents(), []);
    });

    it('tracks ICMP echo by its identifier: the request needs policy, the reply rides conntrack', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.ICMP, cookie: COOKIE.A_EGRESS });
      h.addPolicy({ endpointId: POD_B.endpointId, identity: 0, egress: false, proto: IpProto.ICMP, cookie: COOKIE.B_INGRESS });
      const echo = icmpEchoFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, id: 0x4242 });
      assert.equal((await h.run(FROM, echo)).retval, TcAction.REDIRECT);
      // The identifier is the request's source port (a reply carries it as the destination port).
      const tuple = { saddr: POD_A.ip, daddr: POD_B.ip, sport: 0x4242, dport: 0, proto: IpProto.ICMP };
      assert.ok(h.ct(tuple));
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: EGRESS, sport: 0x4242, dport: 0 },
        { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: INGRESS, cookie: COOKIE.B_INGRESS },
      ]);
      const reply = icmpEchoFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, id: 0x4242, reply: true });
      const r = await h.run(FROM, reply);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.equal(readIpv4(r.data).ethDst, POD_A.podMac);
      assert.equal(h.ct(tuple)!.flags, CtFlag.REPLY_SEEN);
      // Another identifier is another flow: B may not ping A.
      const other = icmpEchoFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, id: 0x4343 });
      assert.equal((await h.run(FROM, other)).retval, TcAction.SHOT);
      // Nor with A's own identifier: a request is no reply, even when its identifier matches a tracked ping.
      const sameId = icmpEchoFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, id: 0x4242 });
      assert.equal((await h.run(FROM, sameId)).retval, TcAction.SHOT);
    });

    it('allows an ICMP error about a tracked flow without policy, and holds an unrelated one to policy', async () => {
      allowAtoB80();
      const udpAllow = { endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.UDP, port: 9000, cookie: COOKIE.A_EGRESS };
      h.addPolicy(udpAllow);
      h.addPolicy({ ...udpAllow, endpointId: POD_B.endpointId, identity: IDENTITY.A, egress: false });
      const probe = udpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport: 33000, dport: 9000 });
      assert.equal((await h.run(FROM, probe)).retval, TcAction.REDIRECT);
      await h.takeEvents(2);

      // B answers port-unreachable about A's datagram: B has no egress policy at all.
      const unreachable = ipv4Frame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 3, datagramOf(probe)) });
      assert.equal((await h.run(FROM, unreachable)).retval, TcAction.REDIRECT);
      assertEvents(await h.takeEvents(), []);

      // The same error about a datagram nobody sent is a new flow: B's egress policy drops it.
      const stray = udpFrame({ src: POD_A.ip, dst: POD_B.ip, sport: 33001, dport: 9001 });
      const unrelated = ipv4Frame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 3, datagramOf(stray)) });
      assert.equal((await h.run(FROM, unrelated)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(2), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: EGRESS, proto: IpProto.ICMP, sport: 0, dport: 0 },
        { type: DROP, subtype: code('POLICY') },
      ]);
      // An error no policy forbids is passed but opens no conntrack entry.
      h.addPolicy({ endpointId: POD_B.endpointId, identity: IDENTITY.A, egress: true, proto: IpProto.ICMP, cookie: COOKIE.WILDCARD });
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: false, proto: IpProto.ICMP, cookie: COOKIE.A_INGRESS });
      const entriesBefore = await h.ctCount();
      assert.equal((await h.run(FROM, unrelated)).retval, TcAction.REDIRECT);
      assert.equal(await h.ctCount(), entriesBefore);
    });

    it('relates a time-exceeded about the reply direction, and an error about a TCP flow', async () => {
      allowAtoB80();
      const syn = synAtoB();
      await h.run(FROM, syn);
      // An error B sends about a segment A sent (orientation as tracked).
      const aboutSyn = ipv4Frame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.TIME_EXCEEDED, 0, datagramOf(syn)) });
      assert.equal((await h.run(FROM, aboutSyn)).retval, TcAction.REDIRECT);
      // An error A sends about a segment B sent (reversed orientation).
      const synAck = tcpFrame({ src: POD_B.ip, dst: POD_A.ip, sport: 80, dport: 40000, flags: TcpFlag.SYN | TcpFlag.ACK });
      const aboutReply = ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.PARAMETER_PROBLEM, 0, datagramOf(synAck)) });
      assert.equal((await h.run(FROM, aboutReply)).retval, TcAction.REDIRECT);
      // An error carrying too little of the datagram for ports is not related.
      const cut = ipv4Frame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 1, datagramOf(syn), 22) });
      assert.equal((await h.run(FROM, cut)).retval, TcAction.SHOT);
    });
  });

  describe('fragments', () => {
    const payload = Buffer.alloc(64, 0xab);
    const udpAllow = (): void => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.UDP, port: 7000, cookie: COOKIE.A_EGRESS });
      h.addPolicy({ endpointId: POD_B.endpointId, identity: IDENTITY.A, egress: false, proto: IpProto.UDP, port: 7000, cookie: COOKIE.B_INGRESS });
    };
    const fragments = (id: number): Buffer[] =>
      fragmentFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.UDP, id, payload: udpDatagram({ src: POD_A.ip, dst: POD_B.ip, sport: 6000, dport: 7000, payload }) }, 32);

    it('takes a later fragment\'s ports from the first one', async () => {
      udpAllow();
      const [first, ...rest] = fragments(0x7777);
      assert.equal(rest.length, 2);
      assert.equal((await h.run(FROM, first!)).retval, TcAction.REDIRECT);
      assert.deepEqual(h.frag.get({ saddr: 0x0ac8000a, daddr: 0x0ac80014, id: 0x7777, proto: IpProto.UDP }), { sport: 6000, dport: 7000 });
      for (const f of rest) {
        const r = await h.run(FROM, f);
        assert.equal(r.retval, TcAction.REDIRECT);
        assert.ok(readIpv4(r.data).checksumValid);
      }
      const entry = h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 6000, dport: 7000, proto: IpProto.UDP })!;
      assert.equal(entry.packets, 3n);
    });

    it('drops a later fragment whose first fragment was not seen, and a later fragment of a flow policy denies', async () => {
      const [, second] = fragments(0x8888);
      assert.equal((await h.run(FROM, second!)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('FRAG_NOT_FOUND'), saddr: POD_A.ip, daddr: POD_B.ip, proto: IpProto.UDP }]);
      assert.equal(h.metric(code('FRAG_NOT_FOUND'), EGRESS).packets, 1n);
      const [first, later] = fragments(0x9999);
      assert.equal((await h.run(FROM, first!)).retval, TcAction.SHOT);
      assert.equal((await h.run(FROM, later!)).retval, TcAction.SHOT);
      const events = await h.takeEvents(4);
      assertEvents(events.filter((e) => e.type === DROP), [
        { type: DROP, subtype: code('POLICY'), sport: 6000, dport: 7000 },
        { type: DROP, subtype: code('POLICY'), sport: 6000, dport: 7000 },
      ]);
    });
  });

  describe('malformed and other protocols', () => {
    it('drops truncated and inconsistent IPv4 headers', async () => {
      const good = synAtoB();
      const cases: Array<[string, Buffer, keyof typeof DropReason]> = [
        // BPF_PROG_TEST_RUN itself refuses an IPv4 frame with less than 20 header bytes (EINVAL):
        // cut short inside the options instead.
        ['IP header cut short in its options', truncate(ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.UDP, options: Buffer.from([1, 1, 1, 0, 1, 1, 1, 0]), payload: Buffer.alloc(8) }), 14 + 24), 'INVALID_PACKET'],
        ['datagram cut short', truncate(good, 14 + 20 + 10), 'INVALID_PACKET'],
        ['total length beyond the frame', ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.UDP, payload: Buffer.alloc(8), totalLength: 200 }), 'INVALID_PACKET'],
        ['IHL below 5', ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.UDP, payload: Buffer.alloc(8), ihl: 4 }), 'INVALID_PACKET'],
        ['not version 4', ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.UDP, payload: Buffer.alloc(8), version: 6 }), 'INVALID_PACKET'],
        ['TCP header too short for its datagram', ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.TCP, payload: tcpSegment({ src: POD_A.ip, dst: POD_B.ip, sport: 1, dport: 2 }).subarray(0, 12) }), 'CT_INVALID_HEADER'],
        ['UDP header too short', ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.UDP, payload: Buffer.alloc(4) }), 'CT_INVALID_HEADER'],
        ['ICMP header too short', ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.ICMP, payload: Buffer.from([8, 0, 0, 0]) }), 'CT_INVALID_HEADER'],
      ];
      for (const [what, frame, reason] of cases) {
        const r = await h.run(FROM, frame);
        assert.equal(r.retval, TcAction.SHOT, what);
        const events = await h.takeEvents(1);
        assertEvents(events, [{ type: DROP, subtype: code(reason), direction: EGRESS }]);
      }
      assert.equal(h.metric(code('INVALID_PACKET'), EGRESS).packets, 5n);
      assert.equal(h.metric(code('CT_INVALID_HEADER'), EGRESS).packets, 3n);
    });

    it('keeps IPv4 options out of the way of the L4 header', async () => {
      allowAtoB80();
      const withOptions = ipv4Frame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, proto: IpProto.TCP, options: Buffer.from([1, 1, 1, 0]), payload: tcpSegment({ src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 80 }) });
      const r = await h.run(FROM, withOptions);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.ok(readIpv4(r.data).checksumValid);
      assert.ok(h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80, proto: IpProto.TCP }));
    });

    it('drops unknown ethertypes, and IPv6 from a global address that is not the pod\'s as a forged source', async () => {
      const v6udp = ipv6Frame({ ...fromA, src: 'fd00::10', dst: 'fd00::20', nextHeader: IpProto.UDP, payload: Buffer.alloc(8) });
      assert.equal((await h.run(FROM, v6udp)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('INVALID_SOURCE'), saddr: 'fd00::10', daddr: 'fd00::20', proto: IpProto.UDP }]);
      const lldp = ethernetFrame({ src: POD_A.podMac, dst: '01:80:c2:00:00:0e', etherType: 0x88cc, payload: Buffer.alloc(46) });
      assert.equal((await h.run(FROM, lldp)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('UNKNOWN_L3') }]);
      // MLD: ICMPv6 behind a hop-by-hop header (Router Alert) passes; UDP from a link-local address meets policy.
      const hopByHop = (next: number) => Buffer.from([next, 0, 5, 2, 0, 0, 1, 0]);
      const mld = ipv6Frame({ ...fromA, src: 'fe80::1', dst: 'ff02::16', nextHeader: 0, hopLimit: 1, payload: Buffer.concat([hopByHop(IpProto.ICMPV6), Buffer.from([143, 0, 0, 0, 0, 0, 0, 0])]) });
      assert.equal((await h.run(FROM, mld)).retval, TcAction.OK);
      const hbhUdp = ipv6Frame({ ...fromA, src: 'fe80::1', dst: 'ff02::16', nextHeader: 0, payload: Buffer.concat([hopByHop(IpProto.UDP), Buffer.alloc(8)]) });
      assert.equal((await h.run(FROM, hbhUdp)).retval, TcAction.SHOT);
      assertEvents((await h.takeEvents(2)).filter((e) => e.type === DROP), [{ subtype: code('POLICY'), proto: IpProto.UDP }]);
      assert.equal(h.metric(code('UNKNOWN_L3'), EGRESS).packets, 1n);
      assert.equal(h.metric(code('INVALID_SOURCE'), EGRESS).packets, 1n);
      assert.equal(h.metric(0, EGRESS).packets, 1n);
      assert.equal(EtherType.IPV6, 0x86dd);
    });

    it('passes other IP protocols with ports 0/0 under policy', async () => {
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.REMOTE, egress: true, proto: IpProto.GRE, cookie: COOKIE.A_EGRESS });
      const gre = ipv4Frame({ ...fromA, src: POD_A.ip, dst: REMOTE_POD_IP, proto: IpProto.GRE, payload: Buffer.alloc(4) });
      assert.equal((await h.run(FROM, gre)).retval, TcAction.OK);
      assert.ok(h.ct({ saddr: POD_A.ip, daddr: REMOTE_POD_IP, sport: 0, dport: 0, proto: IpProto.GRE }));
    });
  });

  describe('source checks', () => {
    it('drops a packet whose source is not this device\'s endpoint', async () => {
      for (const src of [POD_C.ip, '10.200.0.99', ROUTER.ip]) {
        const r = await h.run(FROM, tcpFrame({ src, dst: POD_B.ip, sport: 1234, dport: 80 }));
        assert.equal(r.retval, TcAction.SHOT, src);
      }
      assertEvents(await h.takeEvents(3), [0, 1, 2].map(() => ({ type: DROP, subtype: code('INVALID_SOURCE'), direction: EGRESS, srcIdentity: 0 })));
      assert.equal(h.metric(code('INVALID_SOURCE'), EGRESS).packets, 3n);
      assert.equal(await h.ctCount(), 0);
    });
  });

  describe('policy lookup', () => {
    const toRemote = (dport: number, sport = 50000) => tcpFrame({ ...fromA, src: POD_A.ip, dst: REMOTE_POD_IP, sport, dport });
    const egress = (e: { identity: number; proto?: number; port?: number; portPrefixLen?: number; cookie: number; deny?: boolean }) =>
      h.addPolicy({ endpointId: POD_A.endpointId, egress: true, ...e });

    it('prefers the match on more L4 bits, and the identity-specific entry on a tie', async () => {
      // identity TCP/* allow (8 bits) vs wildcard TCP/80 deny (24 bits): the wildcard is more specific.
      egress({ identity: IDENTITY.REMOTE, proto: IpProto.TCP, cookie: COOKIE.A_EGRESS });
      egress({ identity: 0, proto: IpProto.TCP, port: 80, cookie: COOKIE.DENY, deny: true });
      assert.equal((await h.run(FROM, toRemote(80))).retval, TcAction.SHOT);
      assert.equal((await h.run(FROM, toRemote(81))).retval, TcAction.OK);
      assertEvents((await h.takeEvents(3)).filter((e) => e.type === POLICY_VERDICT), [
        { subtype: PolicyVerdict.DENIED, cookie: COOKIE.DENY, dstIdentity: IDENTITY.REMOTE },
        { subtype: PolicyVerdict.ALLOWED, cookie: COOKIE.A_EGRESS },
      ]);
      // A tie on TCP/443: the identity's allow beats the wildcard's deny.
      egress({ identity: IDENTITY.REMOTE, proto: IpProto.TCP, port: 443, cookie: COOKIE.A_INGRESS });
      egress({ identity: 0, proto: IpProto.TCP, port: 443, cookie: COOKIE.WILDCARD, deny: true });
      assert.equal((await h.run(FROM, toRemote(443))).retval, TcAction.OK);
      assertEvents(await h.takeEvents(1), [{ subtype: PolicyVerdict.ALLOWED, cookie: COOKIE.A_INGRESS }]);
    });

    it('matches port ranges as port prefixes and the any-protocol entry last', async () => {
      // 8080-8087 is 8080/13.
      egress({ identity: IDENTITY.REMOTE, proto: IpProto.TCP, port: 8080, portPrefixLen: 13, cookie: COOKIE.A_EGRESS });
      for (const [port, verdict] of [[8079, TcAction.SHOT], [8080, TcAction.OK], [8087, TcAction.OK], [8088, TcAction.SHOT]] as const) {
        assert.equal((await h.run(FROM, toRemote(port))).retval, verdict, `port ${port}`);
      }
      await h.takeEvents(6);
      // An any-protocol wildcard allow (0 L4 bits) loses to an identity's TCP/22 deny (24 bits) and covers the rest.
      egress({ identity: 0, cookie: COOKIE.WILDCARD });
      egress({ identity: IDENTITY.REMOTE, proto: IpProto.TCP, port: 22, cookie: COOKIE.DENY, deny: true });
      assert.equal((await h.run(FROM, toRemote(22))).retval, TcAction.SHOT);
      assert.equal((await h.run(FROM, toRemote(9999))).retval, TcAction.OK);
      const udp = udpFrame({ ...fromA, src: POD_A.ip, dst: REMOTE_POD_IP, sport: 1, dport: 22 });
      assert.equal((await h.run(FROM, udp)).retval, TcAction.OK);
      assertEvents((await h.takeEvents(4)).filter((e) => e.type === POLICY_VERDICT), [
        { subtype: PolicyVerdict.DENIED, cookie: COOKIE.DENY },
        { subtype: PolicyVerdict.ALLOWED, cookie: COOKIE.WILDCARD },
        { subtype: PolicyVerdict.ALLOWED, cookie: COOKIE.WILDCARD, proto: IpProto.UDP },
      ]);
    });

    it('classifies destinations: world when the ipcache has nothing, CIDR identities by longest prefix, the node as host', async () => {
      egress({ identity: IDENTITY.WORLD, proto: IpProto.TCP, port: 443, cookie: 0x100 });
      egress({ identity: IDENTITY.CIDR_24, proto: IpProto.TCP, port: 443, cookie: 0x124 });
      egress({ identity: IDENTITY.CIDR_25, proto: IpProto.TCP, port: 443, cookie: 0x125 });
      egress({ identity: IDENTITY.HOST, proto: IpProto.TCP, port: 443, cookie: 0x101 });
      const to = (dst: string) => tcpFrame({ ...fromA, src: POD_A.ip, dst, sport: 50000, dport: 443 });
      for (const dst of [WORLD_IP, '203.0.113.7', '203.0.113.200', NODE_IP, ROUTER.ip]) assert.equal((await h.run(FROM, to(dst))).retval, TcAction.OK, dst);
      assertEvents(await h.takeEvents(5), [
        { dstIdentity: IDENTITY.WORLD, cookie: 0x100, dstEndpoint: 0 },
        { dstIdentity: IDENTITY.CIDR_24, cookie: 0x124 },
        { dstIdentity: IDENTITY.CIDR_25, cookie: 0x125 },
        { dstIdentity: IDENTITY.HOST, cookie: 0x101, daddr: NODE_IP },
        // The router address is in tendril_lxc as a node address: host identity, and no delivery to a pod.
        { dstIdentity: IDENTITY.HOST, cookie: 0x101, daddr: ROUTER.ip, dstEndpoint: 0 },
      ]);
      assert.equal(CIDR_24, '203.0.113.0/24');
    });

    it('sends no verdict event for a direction that is not enforced', async () => {
      egress({ identity: 0, cookie: ReservedCookie.NOT_ENFORCED });
      h.addPolicy({ endpointId: POD_B.endpointId, identity: 0, egress: false, cookie: ReservedCookie.NOT_ENFORCED });
      assert.equal((await h.run(FROM, synAtoB())).retval, TcAction.REDIRECT);
      assertEvents(await h.takeEvents(), []);
      assert.ok(h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 80, proto: IpProto.TCP }));
    });
  });

  describe('trace levels', () => {
    const traces = async () => (await h.takeEvents()).filter((e) => e.type === TRACE);

    it('OFF (no config entry): no traces; NEW_FLOWS: one for the first packet; ALL: one per packet', async () => {
      allowAtoB80();
      const run2 = async (sport: number) => {
        await h.run(FROM, synAtoB(sport));
        await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: POD_B.ip, sport, dport: 80, flags: TcpFlag.ACK }));
      };
      await run2(40001);
      assert.deepEqual(await traces(), []);
      h.setTraceLevel(TraceLevel.OFF);
      await run2(40002);
      assert.deepEqual(await traces(), []);
      h.setTraceLevel(TraceLevel.NEW_FLOWS);
      await run2(40003);
      assertEvents(await traces(), [{ subtype: TracePoint.TO_ENDPOINT, sport: 40003, tcpFlags: TcpFlag.SYN }]);
      h.setTraceLevel(TraceLevel.ALL);
      await run2(40004);
      assertEvents(await traces(), [
        { subtype: TracePoint.TO_ENDPOINT, sport: 40004, tcpFlags: TcpFlag.SYN },
        { subtype: TracePoint.TO_ENDPOINT, sport: 40004, tcpFlags: TcpFlag.ACK, srcIdentity: IDENTITY.A, dstIdentity: IDENTITY.B },
      ]);
      // Outbound to the stack at ALL: TO_STACK.
      h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD, egress: true, cookie: 0x77 });
      await h.run(FROM, udpFrame({ ...fromA, src: POD_A.ip, dst: WORLD_IP, sport: 1, dport: 2 }));
      assertEvents(await traces(), [{ subtype: TracePoint.TO_STACK, direction: EGRESS }]);
    });
  });
});

describe('bpf_lxc tendril_to_container', () => {
  let h: ProgramHarness;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    installNode(h);
  });
  afterEach(async () => {
    await h?.close();
  });

  it('enforces the pod\'s ingress policy on the node\'s traffic with the host identity', async () => {
    const fromNode = (sport: number) => tcpFrame({ src: NODE_IP, dst: POD_A.ip, sport, dport: 8080 });
    assert.equal((await h.run(TO, fromNode(30000))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, srcIdentity: IDENTITY.HOST, dstIdentity: IDENTITY.A, dstEndpoint: POD_A.endpointId, srcEndpoint: 0 },
      { type: DROP, subtype: code('POLICY'), direction: INGRESS },
    ]);
    assert.equal(h.metric(code('POLICY'), INGRESS).packets, 1n);

    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
    h.setTraceLevel(TraceLevel.NEW_FLOWS);
    const frame = fromNode(30001);
    const r = await h.run(TO, frame);
    assert.equal(r.retval, TcAction.OK);
    assert.deepEqual(r.data, frame, 'the stack already addressed it');
    const entry = h.ct({ saddr: NODE_IP, daddr: POD_A.ip, sport: 30001, dport: 8080, proto: IpProto.TCP })!;
    assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.srcEndpoint, entry.dstEndpoint], [IDENTITY.HOST, IDENTITY.A, 0, POD_A.endpointId]);
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: INGRESS, cookie: ReservedCookie.ALLOW_LOCALHOST },
      { type: TRACE, subtype: TracePoint.FROM_STACK, direction: INGRESS },
    ]);
    assert.equal(h.metric(0, INGRESS).packets, 1n);

    // The pod's answer leaves through from_container on conntrack alone (A has no egress entries).
    const answer = tcpFrame({ ...fromA, src: POD_A.ip, dst: NODE_IP, sport: 8080, dport: 30001, flags: TcpFlag.SYN | TcpFlag.ACK });
    assert.equal((await h.run(FROM, answer)).retval, TcAction.OK);
    assert.equal(h.ct({ saddr: NODE_IP, daddr: POD_A.ip, sport: 30001, dport: 8080, proto: IpProto.TCP })!.flags, CtFlag.REPLY_SEEN);
  });

  it('classifies sources by the ipcache: world without an entry, CIDR identities, remote pods', async () => {
    for (const [identity, cookie] of [[IDENTITY.CIDR_24, 0x24], [IDENTITY.REMOTE, 0x40]] as const) {
      h.addPolicy({ endpointId: POD_A.endpointId, identity, egress: false, proto: IpProto.UDP, cookie });
    }
    const from = (src: string) => udpFrame({ src, dst: POD_A.ip, sport: 1000, dport: 2000 });
    assert.equal((await h.run(TO, from('203.0.113.9'))).retval, TcAction.OK);
    assert.equal((await h.run(TO, from(REMOTE_POD_IP))).retval, TcAction.OK);
    assert.equal((await h.run(TO, from(WORLD_IP))).retval, TcAction.SHOT);
    assertEvents((await h.takeEvents(4)).filter((e) => e.type === POLICY_VERDICT), [
      { subtype: PolicyVerdict.ALLOWED, srcIdentity: IDENTITY.CIDR_24, cookie: 0x24 },
      { subtype: PolicyVerdict.ALLOWED, srcIdentity: IDENTITY.REMOTE, cookie: 0x40 },
      { subtype: PolicyVerdict.NO_MATCH, srcIdentity: IDENTITY.WORLD },
    ]);
  });

  it('allows an ICMP error about the pod\'s own outbound flow (after masquerade is undone)', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD, egress: true, proto: IpProto.UDP, cookie: 0x55 });
    const out = udpFrame({ ...fromA, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 33434, ttl: 3 });
    assert.equal((await h.run(FROM, out)).retval, TcAction.OK);
    const timeExceeded = ipv4Frame({ src: '192.0.2.1', dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.TIME_EXCEEDED, 0, datagramOf(out)) });
    assert.equal((await h.run(TO, timeExceeded)).retval, TcAction.OK);
    const unrelated = ipv4Frame({ src: '192.0.2.1', dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.TIME_EXCEEDED, 0, datagramOf(udpFrame({ src: POD_A.ip, dst: WORLD_IP, sport: 40001, dport: 33434 }))) });
    assert.equal((await h.run(TO, unrelated)).retval, TcAction.SHOT);
  });

  it('passes ARP, multicast and broadcast; drops unicast for any address but this device\'s endpoint (NOT_FOR_ENDPOINT)', async () => {
    const arp = arpFrame({ senderMac: POD_A.lxcMac, senderIp: ROUTER.ip, targetIp: POD_A.ip });
    assert.equal((await h.run(TO, arp)).retval, TcAction.OK);
    for (const dst of ['224.0.0.251', '255.255.255.255']) assert.equal((await h.run(TO, udpFrame({ src: ROUTER.ip, dst, sport: 5353, dport: 5353 }))).retval, TcAction.OK, dst);
    assert.equal(h.metric(0, INGRESS).packets, 3n);
    // A pod address with no endpoint, the node's own address, and a pod that lives on another device (C, ifindex 77).
    for (const dst of ['10.200.0.99', ROUTER.ip, POD_C.ip]) {
      const r = await h.run(TO, udpFrame({ src: WORLD_IP, dst, sport: 1, dport: 2 }));
      assert.equal(r.retval, TcAction.SHOT, dst);
    }
    assertEvents(await h.takeEvents(3), [
      { type: DROP, subtype: code('NOT_FOR_ENDPOINT'), direction: INGRESS, daddr: '10.200.0.99', srcIdentity: IDENTITY.WORLD, dstEndpoint: 0 },
      { type: DROP, subtype: code('NOT_FOR_ENDPOINT'), direction: INGRESS, daddr: ROUTER.ip, dstIdentity: IDENTITY.HOST, dstEndpoint: 0 },
      { type: DROP, subtype: code('NOT_FOR_ENDPOINT'), direction: INGRESS, daddr: POD_C.ip, dstIdentity: IDENTITY.C, dstEndpoint: POD_C.endpointId },
    ]);
    assert.equal(h.metric(code('NOT_FOR_ENDPOINT'), INGRESS).packets, 3n);
    // Even what C's policy would allow and what conntrack knows: the device decides first.
    h.addPolicy({ endpointId: POD_C.endpointId, identity: 0, egress: false, cookie: ReservedCookie.NOT_ENFORCED });
    assert.equal((await h.run(TO, udpFrame({ src: WORLD_IP, dst: POD_C.ip, sport: 1, dport: 2 }))).retval, TcAction.SHOT);
    assert.equal(await h.ctCount(), 0);
  });

  it('drops a truncated IPv4 header and a later fragment with no first fragment', async () => {
    assert.equal((await h.run(TO, truncate(udpFrame({ src: WORLD_IP, dst: POD_A.ip, sport: 1, dport: 2 }), 14 + 22))).retval, TcAction.SHOT);
    const later = ipv4Frame({ src: WORLD_IP, dst: POD_A.ip, proto: IpProto.UDP, id: 5, fragmentOffset: 64, payload: Buffer.alloc(16) });
    assert.equal((await h.run(TO, later)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: DROP, subtype: code('INVALID_PACKET'), direction: INGRESS },
      { type: DROP, subtype: code('FRAG_NOT_FOUND'), direction: INGRESS, dstEndpoint: POD_A.endpointId, srcIdentity: IDENTITY.WORLD },
    ]);
    // ipv4Datagram is what ipv4Frame wraps.
    assert.equal(ipv4Datagram({ src: WORLD_IP, dst: POD_A.ip, proto: 17, payload: Buffer.alloc(0) }).length, 20);
  });
});

describe('bpf_lxc ICMPv6', () => {
  let h: ProgramHarness;
  /** The link-local addresses ping -6 uses between a pod and the node (its lxc device). */
  const POD_LL = 'fe80::800:ff:fe00:a02';
  const NODE_LL = 'fe80::800:ff:fe00:a01';
  const fromPod = (dst: string, type: number, body?: Buffer) =>
    ipv6Frame({ ...fromA, src: POD_LL, dst, nextHeader: IpProto.ICMPV6, hopLimit: 255, payload: icmpv6Message(POD_LL, dst, type, body) });
  const toPod = (src: string, type: number, body?: Buffer) =>
    ipv6Frame({ srcMac: POD_A.lxcMac, dstMac: POD_A.podMac, src, dst: POD_LL, nextHeader: IpProto.ICMPV6, hopLimit: 255, payload: icmpv6Message(src, POD_LL, type, body) });
  const echoBody = () => Buffer.from([0x12, 0x34, 0, 1, 0xde, 0xad, 0xbe, 0xef]);

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    // Only A owns the test device (ifindex 1): an IPv6 packet names no endpoint, the device does.
    installNode(h);
    h.addEndpoint({ ...POD_B, ifindex: 78 });
  });
  afterEach(async () => {
    await h?.close();
  });

  it('an echo from the pod meets its egress policy as protocol 58 with the world as peer: denied by default', async () => {
    const echo = fromPod(NODE_LL, Icmp6Type.ECHO_REQUEST, echoBody());
    assert.equal((await h.run(FROM, echo)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: EGRESS, proto: IpProto.ICMPV6, srcEndpoint: POD_A.endpointId, srcIdentity: IDENTITY.A, dstIdentity: IDENTITY.WORLD_IPV6, saddr: POD_LL, daddr: NODE_LL },
      { type: DROP, subtype: code('POLICY'), direction: EGRESS },
    ]);
    assert.equal(h.metric(code('POLICY'), EGRESS).packets, 1n);
    // A deny rule for ICMPv6 says so by its cookie; an allow on protocol 58 (or any protocol) lets it through.
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: true, proto: IpProto.ICMPV6, cookie: COOKIE.DENY, deny: true });
    assert.equal((await h.run(FROM, echo)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.DENIED, cookie: COOKIE.DENY },
      { type: DROP, subtype: code('POLICY_DENY'), cookie: COOKIE.DENY },
    ]);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: true, proto: IpProto.ICMPV6, cookie: COOKIE.A_EGRESS });
    const r = await h.run(FROM, echo);
    assert.equal(r.retval, TcAction.OK);
    assert.deepEqual(r.data, echo);
    assertEvents(await h.takeEvents(1), [{ type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, cookie: COOKIE.A_EGRESS }]);
    // Tracked in the IPv6 table (the identifier as the request's source port): the reply rides the entry.
    assert.equal(await h.ctCount(), 0);
    assert.ok(h.ct({ saddr: POD_LL, daddr: NODE_LL, sport: 0x1234, dport: 0, proto: IpProto.ICMPV6 }));
  });

  it('a pod whose egress is not enforced pings freely, without verdict events', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: ReservedCookie.NOT_ENFORCED });
    assert.equal((await h.run(FROM, fromPod(NODE_LL, Icmp6Type.ECHO_REQUEST, echoBody()))).retval, TcAction.OK);
    assert.equal((await h.run(FROM, fromPod(NODE_LL, Icmp6Type.ECHO_REPLY, echoBody()))).retval, TcAction.OK);
    assertEvents(await h.takeEvents(), []);
  });

  it('classifies the peer by the ipcache\'s IPv6 prefixes', async () => {
    h.addIpcache('fd00:1::/64', IDENTITY.CIDR_24);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.CIDR_24, egress: true, cookie: COOKIE.A_EGRESS });
    assert.equal((await h.run(FROM, fromPod('fd00:1::5', Icmp6Type.ECHO_REQUEST, echoBody()))).retval, TcAction.OK);
    assert.equal((await h.run(FROM, fromPod('fd00:2::5', Icmp6Type.ECHO_REQUEST, echoBody()))).retval, TcAction.SHOT);
    assertEvents((await h.takeEvents(3)).filter((e) => e.type === POLICY_VERDICT), [
      { subtype: PolicyVerdict.ALLOWED, dstIdentity: IDENTITY.CIDR_24, daddr: 'fd00:1::5' },
      { subtype: PolicyVerdict.NO_MATCH, dstIdentity: IDENTITY.WORLD_IPV6, daddr: 'fd00:2::5' },
    ]);
  });

  it('passes neighbour discovery, router solicitation and MLD from the pod without policy; refuses its router advertisements and redirects', async () => {
    // Neighbour solicitations are answered here (bpf_lxc IPv6 tests); what is left goes to the stack.
    for (const type of [Icmp6Type.ROUTER_SOLICIT, Icmp6Type.NEIGH_ADVERT, Icmp6Type.MLD_REPORT, Icmp6Type.MLD_DONE, Icmp6Type.MLD2_REPORT, Icmp6Type.MLD_QUERY]) {
      // An advertisement speaks for the pod's own (link-local) address; the rest carry zeros.
      const body = type === Icmp6Type.NEIGH_ADVERT ? Buffer.concat([Buffer.from([0x20, 0, 0, 0]), ipv6Bytes(POD_LL)]) : Buffer.alloc(20);
      assert.equal((await h.run(FROM, fromPod('ff02::2', type, body))).retval, TcAction.OK, `type ${type}`);
    }
    assert.equal(h.metric(0, EGRESS).packets, 6n);
    for (const type of [Icmp6Type.ROUTER_ADVERT, Icmp6Type.REDIRECT]) {
      assert.equal((await h.run(FROM, fromPod('ff02::1', type, Buffer.alloc(36)))).retval, TcAction.SHOT, `type ${type}`);
    }
    assertEvents(await h.takeEvents(2), [
      { type: DROP, subtype: code('ICMP6_NOT_ALLOWED'), direction: EGRESS, proto: IpProto.ICMPV6 },
      { type: DROP, subtype: code('ICMP6_NOT_ALLOWED'), direction: EGRESS },
    ]);
    assert.equal(h.metric(code('ICMP6_NOT_ALLOWED'), EGRESS).packets, 2n);
    // Even a pod whose egress is open may not advertise itself as a router.
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: ReservedCookie.NOT_ENFORCED });
    assert.equal((await h.run(FROM, fromPod('ff02::1', Icmp6Type.ROUTER_ADVERT, Buffer.alloc(12)))).retval, TcAction.SHOT);
  });

  it('to the pod: an echo meets its ingress policy; router advertisements, redirects, the lxc device\'s router solicitations, neighbour discovery and MLD pass', async () => {
    const echo = toPod(NODE_LL, Icmp6Type.ECHO_REQUEST, echoBody());
    assert.equal((await h.run(TO, echo)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, proto: IpProto.ICMPV6, dstEndpoint: POD_A.endpointId, dstIdentity: IDENTITY.A, srcIdentity: IDENTITY.WORLD_IPV6, saddr: NODE_LL, daddr: POD_LL },
      { type: DROP, subtype: code('POLICY'), direction: INGRESS },
    ]);
    for (const type of [Icmp6Type.ROUTER_ADVERT, Icmp6Type.REDIRECT, Icmp6Type.ROUTER_SOLICIT, Icmp6Type.NEIGH_SOLICIT, Icmp6Type.NEIGH_ADVERT, Icmp6Type.MLD_QUERY]) {
      assert.equal((await h.run(TO, toPod(NODE_LL, type, Buffer.alloc(36)))).retval, TcAction.OK, `type ${type}`);
    }
    assertEvents(await h.takeEvents(), []);
    // The host identity's allow-localhost entry does not cover the node's link-local address: it is no ipcache entry.
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: ReservedCookie.ALLOW_LOCALHOST });
    assert.equal((await h.run(TO, echo)).retval, TcAction.SHOT);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: false, cookie: COOKIE.A_INGRESS });
    assert.equal((await h.run(TO, echo)).retval, TcAction.OK);
  });

  it('holds a device with no endpoint to policy: nothing matches, dropped', async () => {
    h.endpoints.delete(parseIp(POD_A.ip));
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: ReservedCookie.NOT_ENFORCED });
    assert.equal((await h.run(FROM, fromPod(NODE_LL, Icmp6Type.ECHO_REQUEST, echoBody()))).retval, TcAction.SHOT);
    assertEvents((await h.takeEvents(2)).filter((e) => e.type === DROP), [{ subtype: code('POLICY'), srcEndpoint: 0 }]);
  });

  it('walks at most six extension headers (INVALID_EXTHDR past them) and drops what is cut short as INVALID_PACKET', async () => {
    const ext = (next: number, len = 0) => Buffer.concat([Buffer.from([next, len]), Buffer.alloc(6 + len * 8)]);
    const v6 = (nextHeader: number, payload: Buffer) => ipv6Frame({ ...fromA, src: POD_LL, dst: 'ff02::16', nextHeader, hopLimit: 1, payload });
    const mld = icmpv6Message(POD_LL, 'ff02::16', Icmp6Type.MLD2_REPORT, Buffer.alloc(4));
    // Hop-by-hop, destination options (16 bytes), routing: MLD behind three headers still passes.
    assert.equal((await h.run(FROM, v6(0, Buffer.concat([ext(60), ext(43, 1), ext(IpProto.ICMPV6), mld])))).retval, TcAction.OK);
    // Six headers (IPV6_MAX_EXT_HEADERS) still pass; a seventh is past the bound: dropped, whatever follows.
    const chain = (n: number) => Buffer.concat([...Array.from({ length: n - 1 }, () => ext(60)), ext(IpProto.ICMPV6), mld]);
    assert.equal(IPV6_MAX_EXT_HEADERS, 6);
    assert.equal((await h.run(FROM, v6(0, chain(6)))).retval, TcAction.OK);
    assert.equal((await h.run(FROM, v6(0, chain(7)))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('INVALID_EXTHDR'), direction: EGRESS }]);
    assert.equal(h.metric(code('INVALID_EXTHDR'), EGRESS).packets, 1n);
    const cases: Array<[string, Buffer]> = [
      ['hop-by-hop header cut short', v6(0, Buffer.from([IpProto.ICMPV6, 0, 5, 2]))],
      ['hop-by-hop length past the payload', v6(0, Buffer.concat([Buffer.from([IpProto.ICMPV6, 4]), Buffer.alloc(6), mld]))],
      ['ICMPv6 header cut short', v6(IpProto.ICMPV6, Buffer.from([Icmp6Type.ECHO_REQUEST, 0]))],
      ['payload length past the frame', truncate(fromPod(NODE_LL, Icmp6Type.ECHO_REQUEST, echoBody()), 14 + 40 + 4)],
    ];
    for (const [what, frame] of cases) {
      assert.equal((await h.run(FROM, frame)).retval, TcAction.SHOT, what);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('INVALID_PACKET') }]);
    }
  });
});

describe('bpf_lxc IPv6 pod addresses', () => {
  let h: ProgramHarness;
  /** The pods' IPv6 addresses, in tendril_lxc under the family-6 key and in the ipcache. */
  const A6 = 'fd00:10::a';
  const B6 = 'fd00:10::b';
  const C6 = 'fd00:10::c';
  const ROUTER6 = 'fd00:10::1';
  const WORLD6 = '2001:db8::9';
  const fromA6 = (nextHeader: number, payload: Buffer, over: { src?: string; dst?: string; hopLimit?: number } = {}) =>
    ipv6Frame({ ...fromA, src: over.src ?? A6, dst: over.dst ?? B6, nextHeader, hopLimit: over.hopLimit ?? 64, payload });
  const tcp6 = (src: string, dst: string, sport: number, dport: number, flags: number, macs = fromA) =>
    ipv6Frame({ ...macs, src, dst, nextHeader: IpProto.TCP, payload: tcpSegment({ src, dst, sport, dport, flags }) });
  const echo6 = (src: string, dst: string, type: number, id: number, macs = fromA) =>
    ipv6Frame({ ...macs, src, dst, nextHeader: IpProto.ICMPV6, payload: icmpv6Message(src, dst, type, Buffer.from([id >> 8, id & 0xff, 0, 1])) });
  /** A's egress to B and B's ingress from A allowed on TCP/80. */
  const allowAtoB80 = () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.A_EGRESS });
    h.addPolicy({ endpointId: POD_B.endpointId, identity: IDENTITY.A, egress: false, proto: IpProto.TCP, port: 80, cookie: COOKIE.B_INGRESS });
  };

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    installNode(h);
    for (const [ep, ip] of [[POD_A, A6], [POD_B, B6], [POD_C, C6], [ROUTER, ROUTER6]] as const) {
      h.addEndpoint({ ...ep, ip });
      h.addIpcache(`${ip}/128`, ep.identity);
    }
  });
  afterEach(async () => {
    await h?.close();
  });

  it('judges a new TCP flow by the source\'s egress and the local destination\'s ingress, then delivers it: MACs, hop limit - 1, conntrack entry in tendril_ct6_tcp', async () => {
    const syn = tcp6(A6, B6, 40000, 80, TcpFlag.SYN);
    assert.equal((await h.run(FROM, syn)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: EGRESS, proto: IpProto.TCP, srcIdentity: IDENTITY.A, dstIdentity: IDENTITY.B, saddr: A6, daddr: B6, dport: 80 },
      { type: DROP, subtype: code('POLICY'), direction: EGRESS },
    ]);
    assert.equal(await h.ctCount(6), 0);
    // A's egress alone is not enough: B's ingress decides too.
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.B, egress: true, proto: IpProto.TCP, port: 80, cookie: COOKIE.A_EGRESS });
    assert.equal((await h.run(FROM, syn)).retval, TcAction.SHOT);
    assertEvents((await h.takeEvents(3)).filter((e) => e.type === DROP), [{ subtype: code('POLICY'), direction: INGRESS, dstEndpoint: POD_B.endpointId }]);
    allowAtoB80();
    const r = await h.run(FROM, syn);
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.equal(r.data.subarray(0, 6).toString('hex'), POD_B.podMac.replace(/:/g, ''));
    assert.equal(r.data.subarray(6, 12).toString('hex'), POD_B.lxcMac.replace(/:/g, ''));
    assert.equal(r.data[14 + 7], 63, 'hop limit - 1');
    assert.deepEqual(r.data.subarray(14 + 8), syn.subarray(14 + 8), 'addresses and segment untouched');
    const entry = h.ct({ saddr: A6, daddr: B6, sport: 40000, dport: 80, proto: IpProto.TCP });
    assert.ok(entry, 'conntrack entry');
    assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.srcEndpoint, entry.dstEndpoint, entry.tcpFlags], [IDENTITY.A, IDENTITY.B, POD_A.endpointId, POD_B.endpointId, TcpFlag.SYN]);
    assert.equal(await h.ctCount(4), 0, 'nothing in the IPv4 tables');
    await h.takeEvents(2);
    // B's SYN-ACK rides the entry: B has no egress policy, A no ingress entry for it.
    const synAck = tcp6(B6, A6, 80, 40000, TcpFlag.SYN | TcpFlag.ACK, fromB);
    const reply = await h.run(FROM, synAck);
    assert.equal(reply.retval, TcAction.REDIRECT);
    assert.equal(reply.data.subarray(0, 6).toString('hex'), POD_A.podMac.replace(/:/g, ''));
    assertEvents(await h.takeEvents(), []);
    assert.equal(h.ct({ saddr: A6, daddr: B6, sport: 40000, dport: 80, proto: IpProto.TCP })!.flags & CtFlag.REPLY_SEEN, CtFlag.REPLY_SEEN);
    // A hop limit that would run out is not delivered.
    const last = ipv6Frame({ ...fromA, src: A6, dst: B6, nextHeader: IpProto.TCP, hopLimit: 1, payload: tcpSegment({ src: A6, dst: B6, sport: 40000, dport: 80, flags: TcpFlag.ACK }) });
    assert.equal((await h.run(FROM, last)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('TTL_EXCEEDED') }]);
  });

  it('tracks ICMPv6 echo by its identifier and UDP to the world; replies come back through to_container on conntrack, unsolicited traffic meets ingress policy', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: true, proto: IpProto.ICMPV6, cookie: COOKIE.A_EGRESS });
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: true, proto: IpProto.UDP, port: 53, cookie: COOKIE.A_EGRESS });
    assert.equal((await h.run(FROM, echo6(A6, WORLD6, Icmp6Type.ECHO_REQUEST, 0x4242))).retval, TcAction.OK);
    assert.ok(h.ct({ saddr: A6, daddr: WORLD6, sport: 0x4242, dport: 0, proto: IpProto.ICMPV6 }));
    const toA = { srcMac: POD_A.lxcMac, dstMac: POD_A.podMac };
    assert.equal((await h.run(TO, echo6(WORLD6, A6, Icmp6Type.ECHO_REPLY, 0x4242, toA))).retval, TcAction.OK);
    // Another identifier is no reply: A's ingress has no entry for the world.
    assert.equal((await h.run(TO, echo6(WORLD6, A6, Icmp6Type.ECHO_REPLY, 0x4343, toA))).retval, TcAction.SHOT);
    // A request from the world is a new flow the other way.
    assert.equal((await h.run(TO, echo6(WORLD6, A6, Icmp6Type.ECHO_REQUEST, 0x4242, toA))).retval, TcAction.SHOT);
    const dns = udpFrame({ ...fromA, src: A6, dst: WORLD6, sport: 5353, dport: 53 });
    assert.equal((await h.run(FROM, dns)).retval, TcAction.OK);
    assert.ok(h.ct({ saddr: A6, daddr: WORLD6, sport: 5353, dport: 53, proto: IpProto.UDP }));
    assert.equal((await h.run(TO, udpFrame({ ...toA, src: WORLD6, dst: A6, sport: 53, dport: 5353 }))).retval, TcAction.OK);
    assert.equal((await h.run(TO, udpFrame({ ...toA, src: WORLD6, dst: A6, sport: 53, dport: 5354 }))).retval, TcAction.SHOT);
    const drops = (await h.takeEvents(6)).filter((e) => e.type === DROP);
    assert.deepEqual(drops.map((d) => [d.subtype, d.direction, d.srcIdentity, d.dstEndpoint]), [0, 1, 2].map(() => [code('POLICY'), INGRESS, IDENTITY.WORLD_IPV6, POD_A.endpointId]));
    // The UDP echo's entry is in tendril_ct6_any, none in the IPv4 tables.
    assert.equal(await h.ctCount(6), 2);
    assert.equal(await h.ctCount(4), 0);
  });

  it('drops a source that is not this device\'s endpoint: another pod\'s, an unknown address, the router\'s', async () => {
    for (const src of [C6, 'fd00:10::99', ROUTER6]) {
      assert.equal((await h.run(FROM, tcp6(src, B6, 1234, 80, TcpFlag.SYN))).retval, TcAction.SHOT, src);
    }
    assertEvents(await h.takeEvents(3), [0, 1, 2].map(() => ({ type: DROP, subtype: code('INVALID_SOURCE'), direction: EGRESS })));
    assert.equal(h.metric(code('INVALID_SOURCE'), EGRESS).packets, 3n);
    // Neighbour discovery from another pod's address is forged too.
    const na = fromA6(IpProto.ICMPV6, icmpv6Message(C6, 'ff02::1', Icmp6Type.NEIGH_ADVERT, Buffer.alloc(20)), { src: C6, dst: 'ff02::1', hopLimit: 255 });
    assert.equal((await h.run(FROM, na)).retval, TcAction.SHOT);
    assert.equal(await h.ctCount(6), 0);
  });

  it('answers a neighbour solicitation for the gateway with the lxc MAC; the pod\'s own address and duplicate address detection go to the stack', async () => {
    const mcast = 'ff02::1:ff00:1';
    const sllao = (mac: string) => Buffer.concat([Buffer.from([1, 1]), Buffer.from(mac.replace(/:/g, ''), 'hex')]);
    const ns = (src: string, target: string, opt: Buffer) => {
      const body = Buffer.concat([Buffer.alloc(4), ipv6Bytes(target), opt]);
      return fromA6(IpProto.ICMPV6, icmpv6Message(src, mcast, Icmp6Type.NEIGH_SOLICIT, body), { src, dst: mcast, hopLimit: 255 });
    };
    const r = await h.run(FROM, ns(A6, ROUTER6, sllao(POD_A.podMac)));
    assert.equal(r.retval, TcAction.REDIRECT);
    const na = r.data;
    assert.equal(na.length, 14 + 40 + 32);
    assert.equal(na.subarray(0, 6).toString('hex'), POD_A.podMac.replace(/:/g, ''), 'to the pod');
    assert.equal(na.subarray(6, 12).toString('hex'), POD_A.lxcMac.replace(/:/g, ''), 'from the lxc device');
    assert.equal(na.readUInt16BE(12), EtherType.IPV6);
    assert.equal(na.readUInt32BE(14), 0x60000000);
    assert.equal(na.readUInt16BE(18), 32, 'payload length');
    assert.deepEqual([na[20], na[21]], [IpProto.ICMPV6, 255]);
    assert.deepEqual(na.subarray(22, 38), ipv6Bytes(ROUTER6), 'from the target');
    assert.deepEqual(na.subarray(38, 54), ipv6Bytes(A6), 'to the solicitor');
    assert.deepEqual([na[54], na[55]], [Icmp6Type.NEIGH_ADVERT, 0]);
    assert.equal(na.readUInt32BE(58), 0x60000000, 'solicited and override');
    assert.deepEqual(na.subarray(62, 78), ipv6Bytes(ROUTER6), 'target');
    assert.deepEqual(na.subarray(78, 86), Buffer.concat([Buffer.from([2, 1]), Buffer.from(POD_A.lxcMac.replace(/:/g, ''), 'hex')]), 'target link-layer address');
    assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(ROUTER6, A6, IpProto.ICMPV6, 32), na.subarray(54)])), 0, 'ICMPv6 checksum');
    // Without a source link-layer option (the frame grows by the option), and from the link-local address.
    const plain = await h.run(FROM, ns('fe80::800:ff:fe00:a02', ROUTER6, Buffer.alloc(0)));
    assert.equal(plain.retval, TcAction.REDIRECT);
    assert.equal(plain.data.length, 86);
    assert.equal(internetChecksum(Buffer.concat([pseudoHeader6(ROUTER6, 'fe80::800:ff:fe00:a02', IpProto.ICMPV6, 32), plain.data.subarray(54)])), 0);
    // The pod's own address, and DAD (the unspecified source): the stack's.
    for (const frame of [ns(A6, A6, sllao(POD_A.podMac)), ns('::', A6, Buffer.alloc(0))]) {
      const p = await h.run(FROM, frame);
      assert.equal(p.retval, TcAction.OK);
      assert.deepEqual(p.data, frame);
    }
    // A link-layer option that is not the pod's MAC, a forged source, a hop limit not 255: refused.
    assert.equal((await h.run(FROM, ns(A6, ROUTER6, sllao('0a:00:00:00:ee:ee')))).retval, TcAction.SHOT);
    assert.equal((await h.run(FROM, ns(C6, ROUTER6, sllao(POD_A.podMac)))).retval, TcAction.SHOT);
    const low = ipv6Frame({ ...fromA, src: A6, dst: mcast, nextHeader: IpProto.ICMPV6, hopLimit: 64, payload: icmpv6Message(A6, mcast, Icmp6Type.NEIGH_SOLICIT, Buffer.concat([Buffer.alloc(4), ipv6Bytes(ROUTER6)])) });
    assert.equal((await h.run(FROM, low)).retval, TcAction.SHOT);
    assertEvents((await h.takeEvents(3)).filter((e) => e.type === DROP), [
      { subtype: code('INVALID_SOURCE') },
      { subtype: code('INVALID_SOURCE') },
      { subtype: code('INVALID_PACKET') },
    ]);
  });

  it('passes a neighbour advertisement from the pod only for its own address with its own MAC; one for the gateway, another pod, with another MAC or a bad option, or from the unspecified address is refused', async () => {
    const tlla = (mac: string, type = 2, len = 1) => Buffer.concat([Buffer.from([type, len]), Buffer.from(mac.replace(/:/g, ''), 'hex')]);
    const na = (src: string, target: string, opt: Buffer) =>
      fromA6(IpProto.ICMPV6, icmpv6Message(src, 'ff02::1', Icmp6Type.NEIGH_ADVERT, Buffer.concat([Buffer.from([0x20, 0, 0, 0]), ipv6Bytes(target), opt])), { src, dst: 'ff02::1', hopLimit: 255 });
    const passed: Array<[string, Buffer]> = [
      ['its own address, its MAC', na(A6, A6, tlla(POD_A.podMac))],
      ['its own address, no option', na(A6, A6, Buffer.alloc(0))],
      // (Which endpoint owns a link-local source is the device's: the test device holds more than one, so no option here.)
      ['its link-local address, no option', na('fe80::800:ff:fe00:a02', 'fe80::800:ff:fe00:a02', Buffer.alloc(0))],
    ];
    for (const [what, frame] of passed) {
      const r = await h.run(FROM, frame);
      assert.equal(r.retval, TcAction.OK, what);
      assert.deepEqual(r.data, frame, `${what}: unchanged, to the stack`);
    }
    const refused: Array<[string, Buffer, keyof typeof DropReason]> = [
      ['the gateway\'s address', na(A6, ROUTER6, tlla(POD_A.podMac)), 'INVALID_SOURCE'],
      ['another pod\'s address', na(A6, C6, tlla(POD_A.podMac)), 'INVALID_SOURCE'],
      ['its address with another MAC', na(A6, A6, tlla('0a:00:00:00:ee:ee')), 'INVALID_SOURCE'],
      ['a source link-layer option', na(A6, A6, tlla(POD_A.podMac, 1)), 'INVALID_SOURCE'],
      ['an option of the wrong length', na(A6, A6, tlla(POD_A.podMac, 2, 2)), 'INVALID_SOURCE'],
      ['from the unspecified address', na('::', A6, tlla(POD_A.podMac)), 'INVALID_SOURCE'],
      ['too short for a target', fromA6(IpProto.ICMPV6, icmpv6Message(A6, 'ff02::1', Icmp6Type.NEIGH_ADVERT, Buffer.alloc(8)), { dst: 'ff02::1', hopLimit: 255 }), 'INVALID_PACKET'],
    ];
    for (const [what, frame] of refused) assert.equal((await h.run(FROM, frame)).retval, TcAction.SHOT, what);
    assertEvents((await h.takeEvents(refused.length)).filter((e) => e.type === DROP), refused.map(([, , r]) => ({ subtype: code(r), direction: EGRESS })));
    assert.equal(h.metric(code('INVALID_SOURCE'), EGRESS).packets, 6n);
  });

  // As to_container_ipv4: a NodePort delivers into the pod itself, so the stack handing the pod a packet of a tuple
  // a NodePort translation was left on means the client now talks to the pod directly (a client port reused).
  it('a client that reached the pod through a NodePort and now talks to it directly: the entry drops the NodePort translation (lb_direct), so replies leave from the pod\'s own address', async () => {
    const CLIENT6 = '2001:db8::77';
    const tuple = { saddr: CLIENT6, daddr: A6, sport: 50000, dport: 8080, proto: IpProto.TCP };
    const now = process.hrtime.bigint();
    h.ct6Tcp.set(h.ctKey(tuple), {
      expiresNs: now + 3600n * 1_000_000_000n,
      packets: 3n,
      bytes: 180n,
      srcIdentity: IDENTITY.WORLD_IPV6,
      dstIdentity: IDENTITY.A,
      srcEndpoint: 0,
      dstEndpoint: POD_A.endpointId,
      revNatIndex: 7,
      tcpFlags: TcpFlag.SYN | TcpFlag.ACK,
      flags: CtFlag.NODEPORT | CtFlag.REPLY_SEEN,
      backendId: 3,
      natAddr: parseIp('0.0.0.0'),
      natPort: 30080,
    });
    const toA = { srcMac: POD_A.lxcMac, dstMac: POD_A.podMac };
    const r = await h.run(TO, tcp6(CLIENT6, A6, 50000, 8080, TcpFlag.ACK, toA));
    assert.equal(r.retval, TcAction.OK, 'established: delivered');
    const e = h.ct(tuple)!;
    assert.deepEqual({ nodePort: e.flags & CtFlag.NODEPORT, revNatIndex: e.revNatIndex, backendId: e.backendId, natPort: e.natPort }, { nodePort: 0, revNatIndex: 0, backendId: 0, natPort: 0 }, 'the stale NodePort translation is gone');
    // The pod's reply is no longer reverse-translated: it leaves from A6:8080 as sent.
    const reply = tcp6(A6, CLIENT6, 8080, 50000, TcpFlag.ACK);
    const out = await h.run(FROM, reply);
    assert.equal(out.retval, TcAction.OK);
    assert.deepEqual(out.data.subarray(14 + 8, 14 + 24), ipv6Bytes(A6), 'from the pod\'s own address');
    assert.equal(out.data.readUInt16BE(14 + 40), 8080, 'from the pod\'s own port');
  });

  it('refuses router advertisements and redirects from the pod\'s address', async () => {
    for (const type of [Icmp6Type.ROUTER_ADVERT, Icmp6Type.REDIRECT]) {
      const f = fromA6(IpProto.ICMPV6, icmpv6Message(A6, 'ff02::1', type, Buffer.alloc(36)), { dst: 'ff02::1', hopLimit: 255 });
      assert.equal((await h.run(FROM, f)).retval, TcAction.SHOT);
    }
    assert.equal(h.metric(code('ICMP6_NOT_ALLOWED'), EGRESS).packets, 2n);
  });

  it('relates an ICMPv6 error only when its embedded header is a tracked flow the error goes back to; a forged inner header meets policy', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: true, proto: IpProto.UDP, port: 53, cookie: COOKIE.A_EGRESS });
    const dns = udpFrame({ ...fromA, src: A6, dst: WORLD6, sport: 5353, dport: 53 });
    assert.equal((await h.run(FROM, dns)).retval, TcAction.OK);
    await h.takeEvents(1);
    const toA = { srcMac: POD_A.lxcMac, dstMac: POD_A.podMac };
    const error6 = (src: string, dst: string, offending: Buffer) =>
      ipv6Frame({ ...toA, src, dst, nextHeader: IpProto.ICMPV6, payload: icmpv6Message(src, dst, 1, Buffer.concat([Buffer.alloc(4), offending])) });
    const inner = (src: string, dst: string, sport: number, dport: number) => datagramOf(udpFrame({ src, dst, sport, dport }));
    // Port unreachable about A's own query: related, passes without A's ingress policy.
    assert.equal((await h.run(TO, error6(WORLD6, A6, inner(A6, WORLD6, 5353, 53)))).retval, TcAction.OK);
    assertEvents(await h.takeEvents(), []);
    // Forged: a tuple nobody sent, or A's flow in an error addressed to A but claiming B sent it.
    for (const forged of [inner(A6, WORLD6, 5353, 54), inner(B6, WORLD6, 5353, 53)]) {
      assert.equal((await h.run(TO, error6(WORLD6, A6, forged))).retval, TcAction.SHOT);
    }
    assertEvents((await h.takeEvents(4)).filter((e) => e.type === DROP), [
      { subtype: code('POLICY'), direction: INGRESS, proto: IpProto.ICMPV6 },
      { subtype: code('POLICY'), direction: INGRESS, proto: IpProto.ICMPV6 },
    ]);
    assert.equal(await h.ctCount(6), 1, 'an error opens no entry');
  });

  it('takes a later fragment\'s ports from the first fragment\'s record in tendril_frag6, and drops one without it', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.WORLD_IPV6, egress: true, proto: IpProto.UDP, port: 53, cookie: COOKIE.A_EGRESS });
    const frag = (offset: number, more: boolean, id: number, payload: Buffer) => {
      const fh = Buffer.from([IpProto.UDP, 0, 0, 0, 0, 0, 0, 0]);
      fh.writeUInt16BE(offset | (more ? 1 : 0), 2);
      fh.writeUInt32BE(id, 4);
      return fromA6(44, Buffer.concat([fh, payload]), { dst: WORLD6 });
    };
    const udp = udpDatagram({ src: A6, dst: WORLD6, sport: 5353, dport: 53, payload: Buffer.alloc(16) });
    assert.equal((await h.run(FROM, frag(0, true, 0x1234, udp.subarray(0, 16)))).retval, TcAction.OK);
    assert.equal((await h.run(FROM, frag(16, false, 0x1234, udp.subarray(16)))).retval, TcAction.OK);
    assert.equal((await h.run(FROM, frag(16, false, 0x9999, udp.subarray(16)))).retval, TcAction.SHOT);
    assertEvents((await h.takeEvents(2)).filter((e) => e.type === DROP), [{ subtype: code('FRAG_NOT_FOUND') }]);
  });

  it('to the pod: only its own address, multicast (ff00::/8) passes, another pod\'s address is NOT_FOR_ENDPOINT; a chain of extension headers past the bound is INVALID_EXTHDR', async () => {
    const toA = { srcMac: POD_A.lxcMac, dstMac: POD_A.podMac };
    assert.equal((await h.run(TO, udpFrame({ ...toA, src: WORLD6, dst: 'ff02::fb', sport: 5353, dport: 5353 }))).retval, TcAction.OK);
    assert.equal((await h.run(TO, udpFrame({ ...toA, src: WORLD6, dst: C6, sport: 1, dport: 2 }))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NOT_FOR_ENDPOINT'), dstIdentity: IDENTITY.C, dstEndpoint: POD_C.endpointId }]);
    const ext = (next: number) => Buffer.from([next, 0, 0, 0, 0, 0, 0, 0]);
    const chain = Buffer.concat([ext(60), ext(43), ext(51), ext(60), ext(60), ext(60), ext(IpProto.UDP), udpDatagram({ src: WORLD6, dst: A6, sport: 1, dport: 2 })]);
    assert.equal((await h.run(TO, ipv6Frame({ ...toA, src: WORLD6, dst: A6, nextHeader: 0, payload: chain }))).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('INVALID_EXTHDR'), direction: INGRESS }]);
  });
});

describe('bpf_lxc: a full events ring buffer', () => {
  it('loses the records, never the verdict, and counts each lost one under EVENTS_LOST', async () => {
    // 4 KiB holds about 46 records; 200 denied SYNs in one kernel call emit 400 with no reader in between.
    const h = await ProgramHarness.load(LXC_OBJECT, { [MapName.EVENTS]: 4096 });
    try {
      installNode(h);
      const syn = synAtoB();
      const r = await h.run('tendril_from_container', syn, 200);
      assert.equal(r.retval, TcAction.SHOT);
      assert.deepEqual(h.metric(code('POLICY'), EGRESS), { packets: 200n, bytes: 200n * BigInt(syn.length) }, 'every drop is counted');
      const lost = h.metric(MetricsReason.EVENTS_LOST, EGRESS);
      const received = (await h.takeEvents(1)).length;
      assert.ok(lost.packets > 0n, 'some records did not fit');
      assert.equal(Number(lost.packets) + received, 400, `every record either arrived (${received}) or was counted lost (${lost.packets})`);
    } finally {
      await h.close();
    }
  });
});
