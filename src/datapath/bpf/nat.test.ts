/**
 * SNAT in bpf_netdev.o through BPF_PROG_TEST_RUN: masquerade of pod traffic
 * leaving the masquerade CIDRs (tendril_to_netdev), the reverse translation
 * of replies and of ICMP errors about masqueraded flows
 * (tendril_from_netdev), the port allocator and its exhaustion, and the
 * NodePort flag replies carry on to the NodePort code. Checksums are
 * verified here, in TypeScript, over the bytes the programs wrote.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { parseIp } from '../../netip/index.js';
import { TcAction } from '../kernel/bpf/index.js';
import { DropReason, EventType, MapName, NAT_PORT_MAX, NAT_PORT_MIN, NatFlag, TrafficDirection } from './constants.js';
import { ctEntryOf, NODE_IP, POD_A, POD_B, REMOTE_POD_IP, WORLD_IP } from './testing/fixtures.js';
import {
  datagramOf,
  icmpEchoFrame,
  icmpError,
  IcmpType,
  internetChecksum,
  IpProto,
  ipv4Frame,
  readIpv4,
  readTransport,
  TcpFlag,
  tcpFrame,
  udpFrame,
  fragmentFrame,
  udpDatagram,
} from './testing/packets.js';
import { NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';
import { SnatNode, type NatTuple } from './testing/snatNode.js';

requireRoot('the SNAT program tests');

const TO_NETDEV = 'tendril_to_netdev';
const FROM_NETDEV = 'tendril_from_netdev';
const { INGRESS, EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

/** What the stack sends out of the device for a pod (routed: the node's MACs). */
const outMacs = { srcMac: '0a:00:00:00:ee:01', dstMac: '0a:00:00:00:ee:fe' };
const inMacs = { srcMac: '0a:00:00:00:ee:fe', dstMac: '0a:00:00:00:ee:01' };

const tcpA: NatTuple = { saddr: POD_A.ip, daddr: WORLD_IP, sport: 40000, dport: 80, proto: IpProto.TCP };

function inRange(port: number): boolean {
  return port >= NAT_PORT_MIN && port <= NAT_PORT_MAX;
}

describe('SNAT (bpf_netdev)', () => {
  let h: ProgramHarness;
  let node: SnatNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(NETDEV_OBJECT, { [MapName.SNAT]: 16384 });
    node = new SnatNode(h);
    node.addDevice();
    node.addMasqueradeCidrs();
  });
  afterEach(async () => {
    await h?.close();
  });

  /** Sends `frame` out of the device; returns the translated frame and its source port (or echo id). */
  async function masquerade(frame: Buffer): Promise<{ out: Buffer; port: number }> {
    const r = await h.run(TO_NETDEV, frame);
    assert.equal(r.retval, TcAction.OK);
    const ip = readIpv4(r.data);
    assert.equal(ip.src, NODE_IP, 'source is the node address');
    assert.ok(ip.checksumValid, 'IPv4 header checksum');
    const l4 = readTransport(r.data);
    assert.ok(l4.checksumValid, 'L4 checksum');
    const port = l4.proto === IpProto.ICMP ? l4.icmpId : l4.sport;
    assert.ok(inRange(port), `port ${port} in ${NAT_PORT_MIN}..${NAT_PORT_MAX}`);
    return { out: r.data, port };
  }

  describe('masquerade (tendril_to_netdev)', () => {
    it('translates a TCP SYN to the node address and a port from the range, both sides of the mapping recorded', async () => {
      const syn = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80, flags: TcpFlag.SYN, payload: Buffer.from('hello') });
      const { out, port } = await masquerade(syn);
      const t = readTransport(out);
      assert.equal(t.dport, 80);
      assert.equal(readIpv4(out).dst, WORLD_IP);
      assert.equal(out.length, syn.length);
      // Only the source address, the source port and the checksums differ.
      const same = (b: Buffer): Buffer => {
        const c = Buffer.from(b);
        c.fill(0, 14 + 10, 14 + 16);
        c.fill(0, 14 + 20, 14 + 22);
        c.fill(0, 14 + 36, 14 + 38);
        return c;
      };
      assert.deepEqual(same(out), same(syn));

      assert.deepEqual(node.egress(tcpA), { toAddr: NODE_IP, toPort: port, flags: NatFlag.MASQUERADE });
      assert.deepEqual(node.ingress(tcpA, NODE_IP, port), { toAddr: POD_A.ip, toPort: 40000, flags: NatFlag.MASQUERADE });
      assert.equal(await node.count(), 2);
      assert.equal(h.metric(0, EGRESS).packets, 1n);
    });

    it('translates UDP (checksum kept), and UDP without a checksum keeps none', async () => {
      const udp = udpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 5353, dport: 53, payload: Buffer.from('query') });
      const { port } = await masquerade(udp);
      assert.ok(node.egress({ saddr: POD_A.ip, daddr: WORLD_IP, sport: 5353, dport: 53, proto: IpProto.UDP }));

      const bare = udpDatagram({ src: POD_A.ip, dst: WORLD_IP, sport: 5354, dport: 53, payload: Buffer.from('x') });
      bare.writeUInt16BE(0, 6);
      const r = await masquerade(ipv4Frame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.UDP, payload: bare }));
      assert.equal(r.out.readUInt16BE(14 + 20 + 6), 0, 'UDP checksum stays 0');
      assert.notEqual(r.port, port);
    });

    it('translates an ICMP echo request: the identifier is the port; a reply the pod sends to an outside ping keeps its address', async () => {
      const ping = icmpEchoFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, id: 0x4242, seq: 7, payload: Buffer.from('ping') });
      const { out, port } = await masquerade(ping);
      assert.equal(readTransport(out).icmpType, IcmpType.ECHO);
      const echo: NatTuple = { saddr: POD_A.ip, daddr: WORLD_IP, sport: 0x4242, dport: 0, proto: IpProto.ICMP };
      assert.deepEqual(node.egress(echo), { toAddr: NODE_IP, toPort: port, flags: NatFlag.MASQUERADE });
      assert.deepEqual(node.ingress(echo, NODE_IP, port), { toAddr: POD_A.ip, toPort: 0x4242, flags: NatFlag.MASQUERADE });

      // The outside pinged the pod (conntrack holds the request): the answer is the pod's own.
      h.ctAny.set(h.ctKey({ saddr: WORLD_IP, daddr: POD_A.ip, sport: 0x5151, dport: 0, proto: IpProto.ICMP }), ctEntryOf({ srcIdentity: 2, dstIdentity: 0, srcEndpoint: 0, dstEndpoint: POD_A.endpointId, tcpFlags: 0, flags: 0 }));
      const pong = icmpEchoFrame({ ...outMacs, reply: true, src: POD_A.ip, dst: WORLD_IP, id: 0x5151 });
      const r = await h.run(TO_NETDEV, pong);
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(r.data, pong);
    });

    it('reuses the mapping for the same tuple', async () => {
      const syn = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 });
      const first = await masquerade(syn);
      const ack = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80, flags: TcpFlag.ACK });
      for (let i = 0; i < 5; i++) assert.equal((await masquerade(ack)).port, first.port);
      assert.equal(await node.count(), 2);
    });

    it('restores the reply side of a mapping when it went missing', async () => {
      const syn = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 });
      const { port } = await masquerade(syn);
      assert.ok(node.snat.delete(node.ingressKey(tcpA, NODE_IP, port)));
      assert.equal((await masquerade(syn)).port, port);
      assert.deepEqual(node.ingress(tcpA, NODE_IP, port), { toAddr: POD_A.ip, toPort: 40000, flags: NatFlag.MASQUERADE });
    });

    it('moves a tuple to a new port when its reply side was lost and another flow holds that port now', async () => {
      const syn = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 });
      const { port } = await masquerade(syn);
      const other = { ...tcpA, saddr: POD_B.ip, sport: 41000 };
      node.snat.set(node.ingressKey(tcpA, NODE_IP, port), { createdNs: 1n, toAddr: parseIp(other.saddr), toPort: other.sport, flags: NatFlag.MASQUERADE });
      const moved = await masquerade(syn);
      assert.notEqual(moved.port, port);
      assert.deepEqual(node.egress(tcpA), { toAddr: NODE_IP, toPort: moved.port, flags: NatFlag.MASQUERADE });
      assert.equal(node.ingress(tcpA, NODE_IP, port)?.toAddr, POD_B.ip, 'the other flow keeps its port');
      assert.equal(node.ingress(tcpA, NODE_IP, moved.port)?.toAddr, POD_A.ip);
    });

    it('gives two pods with the same source port to the same destination distinct ports', async () => {
      const a = await masquerade(tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 }));
      const b = await masquerade(tcpFrame({ ...outMacs, src: POD_B.ip, dst: WORLD_IP, sport: 40000, dport: 80 }));
      assert.notEqual(a.port, b.port);
      assert.equal(node.ingress({ ...tcpA, saddr: POD_B.ip }, NODE_IP, b.port)?.toAddr, POD_B.ip);
      assert.equal(await node.count(), 4);
    });

    it('leaves destinations inside the masquerade CIDRs, sources outside them, and the node\'s own traffic untouched', async () => {
      const frames = [
        tcpFrame({ ...outMacs, src: POD_A.ip, dst: REMOTE_POD_IP, sport: 40000, dport: 80 }),
        tcpFrame({ ...outMacs, src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 80 }),
        tcpFrame({ ...outMacs, src: '192.168.77.50', dst: WORLD_IP, sport: 40000, dport: 80 }),
        tcpFrame({ ...outMacs, src: NODE_IP, dst: WORLD_IP, sport: 40000, dport: 80 }),
        udpFrame({ ...outMacs, src: NODE_IP, dst: WORLD_IP, sport: 61500, dport: 53 }),
      ];
      for (const f of frames) {
        const r = await h.run(TO_NETDEV, f);
        assert.equal(r.retval, TcAction.OK);
        assert.deepEqual(r.data, f);
      }
      assert.equal(await node.count(), 0);
      assert.equal(h.metric(0, EGRESS).packets, 0n);
    });

    it('leaves everything untouched on a device without DEVICE_F_MASQUERADE, or with no device entry', async () => {
      const syn = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 });
      node.addDevice({ masquerade: false });
      let r = await h.run(TO_NETDEV, syn);
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(r.data, syn);
      node.devices.delete(1);
      r = await h.run(TO_NETDEV, syn);
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(r.data, syn);
      assert.equal(await node.count(), 0);
    });

    it('drops a protocol it cannot translate (NAT_UNSUPPORTED_PROTO, counted) rather than let it out with the pod\'s address', async () => {
      const gre = ipv4Frame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.GRE, payload: Buffer.alloc(16, 1) });
      const r = await h.run(TO_NETDEV, gre);
      assert.equal(r.retval, TcAction.SHOT);
      assert.equal(h.metric(code('NAT_UNSUPPORTED_PROTO'), EGRESS).packets, 1n);
      assert.equal(await node.count(), 0);
      // An echo reply that answers no ping from outside: the same.
      const pong = icmpEchoFrame({ ...outMacs, reply: true, src: POD_A.ip, dst: WORLD_IP, id: 0x5151 });
      assert.equal((await h.run(TO_NETDEV, pong)).retval, TcAction.SHOT);
      assert.equal(h.metric(code('NAT_UNSUPPORTED_PROTO'), EGRESS).packets, 2n);
      // The same protocol answering a flow the outside opened towards the pod keeps the pod's address.
      h.ctAny.set(h.ctKey({ saddr: WORLD_IP, daddr: POD_A.ip, sport: 0, dport: 0, proto: IpProto.GRE }), ctEntryOf({ srcIdentity: 2, dstIdentity: 0, srcEndpoint: 0, dstEndpoint: POD_A.endpointId, tcpFlags: 0, flags: 0 }));
      const back = await h.run(TO_NETDEV, gre);
      assert.equal(back.retval, TcAction.OK);
      assert.deepEqual(back.data, gre);
    });

    it('does not masquerade the pod\'s replies to a connection opened from outside (conntrack has it reversed)', async () => {
      h.ctTcp.set(h.ctKey({ saddr: WORLD_IP, daddr: POD_A.ip, sport: 51000, dport: 8080, proto: IpProto.TCP }), {
        expiresNs: process.hrtime.bigint() + 60_000_000_000n,
        packets: 1n,
        bytes: 60n,
        srcIdentity: 2,
        dstIdentity: POD_A.identity,
        srcEndpoint: 0,
        dstEndpoint: POD_A.endpointId,
        revNatIndex: 0,
        tcpFlags: TcpFlag.SYN,
        flags: 0,
        backendId: 0,
        natAddr: parseIp('0.0.0.0'),
        natPort: 0,
      });
      const synAck = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 8080, dport: 51000, flags: TcpFlag.SYN | TcpFlag.ACK });
      const r = await h.run(TO_NETDEV, synAck);
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(r.data, synAck);
      assert.equal(await node.count(), 0);
    });

    it('translates both fragments of a datagram: the first with its port, the later one its address alone', async () => {
      const payload = udpDatagram({ src: POD_A.ip, dst: WORLD_IP, sport: 7000, dport: 7001, payload: Buffer.alloc(64, 7) });
      const [first, later] = fragmentFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.UDP, payload, id: 0x777 }, 40);
      const r1 = await h.run(TO_NETDEV, first!);
      const r2 = await h.run(TO_NETDEV, later!);
      for (const r of [r1, r2]) {
        assert.equal(r.retval, TcAction.OK);
        assert.equal(readIpv4(r.data).src, NODE_IP);
        assert.ok(readIpv4(r.data).checksumValid);
      }
      assert.deepEqual(r2.data.subarray(14 + 20), later!.subarray(14 + 20), 'later fragment payload untouched');
      // The UDP checksum covers the whole reassembled datagram.
      const whole = Buffer.concat([r1.data.subarray(14 + 20), r2.data.subarray(14 + 20)]);
      const port = whole.readUInt16BE(0);
      assert.ok(inRange(port));
      const check = udpFrame({ src: NODE_IP, dst: WORLD_IP, sport: port, dport: 7001, payload: Buffer.alloc(64, 7) });
      assert.deepEqual(whole, check.subarray(14 + 20));
    });

    it('drops with NAT_PORT_EXHAUSTED, counted, when every port towards the destination is taken', async () => {
      await node.claimEveryPort(WORLD_IP, 80, IpProto.TCP, NODE_IP, NatFlag.MASQUERADE);
      const syn = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 });
      const r = await h.run(TO_NETDEV, syn);
      assert.equal(r.retval, TcAction.SHOT);
      assert.deepEqual(h.metric(code('NAT_PORT_EXHAUSTED'), EGRESS), { packets: 1n, bytes: BigInt(syn.length) });
      assert.equal(node.egress(tcpA), undefined);
      const events = await h.takeEvents(1);
      assert.equal(events.length, 1);
      assert.equal(events[0]!.type, EventType.DROP);
      assert.equal(events[0]!.subtype, code('NAT_PORT_EXHAUSTED'));
      // Another destination port is another reply tuple: ports are free there.
      await masquerade(tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 443 }));
    });
  });

  describe('replies (tendril_from_netdev)', () => {
    it('gives a reply its pod back as destination, checksums valid, and hands it to the stack', async () => {
      const { port } = await masquerade(tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 }));
      const synAck = tcpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 80, dport: port, flags: TcpFlag.SYN | TcpFlag.ACK, payload: Buffer.from('hi') });
      const r = await h.run(FROM_NETDEV, synAck);
      assert.equal(r.retval, TcAction.OK);
      const ip = readIpv4(r.data);
      assert.equal(ip.src, WORLD_IP);
      assert.equal(ip.dst, POD_A.ip);
      assert.ok(ip.checksumValid);
      const t = readTransport(r.data);
      assert.deepEqual([t.sport, t.dport, t.checksumValid], [80, 40000, true]);
      assert.equal(h.metric(0, INGRESS).packets, 1n);
    });

    it('translates UDP and ICMP echo replies', async () => {
      const udp = await masquerade(udpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 5353, dport: 53 }));
      let r = await h.run(FROM_NETDEV, udpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 53, dport: udp.port, payload: Buffer.from('answer') }));
      assert.equal(readIpv4(r.data).dst, POD_A.ip);
      assert.deepEqual([readTransport(r.data).dport, readTransport(r.data).checksumValid], [5353, true]);

      const echo = await masquerade(icmpEchoFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, id: 0x4242 }));
      r = await h.run(FROM_NETDEV, icmpEchoFrame({ ...inMacs, reply: true, src: WORLD_IP, dst: NODE_IP, id: echo.port }));
      assert.equal(r.retval, TcAction.OK);
      assert.equal(readIpv4(r.data).dst, POD_A.ip);
      assert.ok(readIpv4(r.data).checksumValid);
      const t = readTransport(r.data);
      assert.deepEqual([t.icmpType, t.icmpId, t.checksumValid], [IcmpType.ECHO_REPLY, 0x4242, true]);
    });

    it('passes a packet to a mapped port that matches no mapping untouched', async () => {
      const { port } = await masquerade(tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 }));
      const frames = [
        // From another remote address, another remote port, to a port never mapped, below the range.
        tcpFrame({ ...inMacs, src: '198.51.100.10', dst: NODE_IP, sport: 80, dport: port }),
        tcpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 81, dport: port }),
        tcpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 80, dport: port === NAT_PORT_MAX ? NAT_PORT_MIN : port + 1 }),
        tcpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 80, dport: 22 }),
        udpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 80, dport: port }),
        icmpEchoFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, id: port }),
      ];
      for (const f of frames) {
        const r = await h.run(FROM_NETDEV, f);
        assert.equal(r.retval, TcAction.OK);
        assert.deepEqual(r.data, f);
      }
      assert.equal(h.metric(0, INGRESS).packets, 0n);
    });

    it('leaves a NodePort SNAT reply to the NodePort code: destination restored, not passed as a masquerade reply', async () => {
      const client: NatTuple = { saddr: '203.0.113.7', daddr: REMOTE_POD_IP, sport: 45000, dport: 8080, proto: IpProto.TCP };
      node.addMapping(client, NODE_IP, 62000, NatFlag.NODEPORT);
      const reply = tcpFrame({ ...inMacs, src: REMOTE_POD_IP, dst: NODE_IP, sport: 8080, dport: 62000, flags: TcpFlag.SYN | TcpFlag.ACK });
      const r = await h.run(FROM_NETDEV, reply);
      const ip = readIpv4(r.data);
      assert.equal(ip.dst, client.saddr);
      assert.ok(ip.checksumValid);
      const t = readTransport(r.data);
      assert.equal(t.dport, 45000);
      assert.ok(t.checksumValid);
    });

    describe('ICMP errors about masqueraded flows', () => {
      /** The pod's datagram as it left, translated, and the error the destination sends back about it. */
      async function errorRoundTrip(frame: Buffer, embed?: number): Promise<{ sent: Buffer; back: Buffer; retval: number }> {
        const { out } = await masquerade(frame);
        const err = icmpError(IcmpType.DEST_UNREACH, 3, datagramOf(out), embed);
        const r = await h.run(FROM_NETDEV, ipv4Frame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, proto: IpProto.ICMP, payload: err }));
        return { sent: datagramOf(frame), back: r.data, retval: r.retval };
      }

      function assertErrorToPod(back: Buffer, sent: Buffer, embedded: number): void {
        const ip = readIpv4(back);
        assert.equal(ip.dst, POD_A.ip);
        assert.equal(ip.src, WORLD_IP);
        assert.ok(ip.checksumValid, 'outer IPv4 checksum');
        const icmp = back.subarray(14 + 20);
        assert.equal(internetChecksum(icmp), 0, 'ICMP checksum');
        // The embedded datagram is again the pod's own, byte for byte (its checksums with it).
        assert.deepEqual(icmp.subarray(8, 8 + embedded), sent.subarray(0, embedded));
      }

      it('translates a port unreachable about a UDP datagram back to the pod (whole datagram embedded)', async () => {
        const udp = udpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 5353, dport: 53, payload: Buffer.from('query') });
        const { sent, back, retval } = await errorRoundTrip(udp, 1000);
        assert.equal(retval, TcAction.OK);
        assertErrorToPod(back, sent, sent.length);
        assert.equal(h.metric(0, INGRESS).packets, 1n);
      });

      it('translates errors about TCP (8 bytes embedded, and the whole segment) and about an echo request', async () => {
        const syn = tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80 });
        let rt = await errorRoundTrip(syn);
        assertErrorToPod(rt.back, rt.sent, 28);
        rt = await errorRoundTrip(syn, 1000);
        assertErrorToPod(rt.back, rt.sent, rt.sent.length);
        const ping = icmpEchoFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, id: 0x4242, payload: Buffer.from('abcdefgh') });
        rt = await errorRoundTrip(ping, 1000);
        assertErrorToPod(rt.back, rt.sent, rt.sent.length);
      });

      it('passes an error about no mapping untouched', async () => {
        const foreign = udpFrame({ src: NODE_IP, dst: WORLD_IP, sport: 61234, dport: 53 });
        const err = ipv4Frame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 3, datagramOf(foreign)) });
        const r = await h.run(FROM_NETDEV, err);
        assert.equal(r.retval, TcAction.OK);
        assert.deepEqual(r.data, err);
      });
    });
  });
});
