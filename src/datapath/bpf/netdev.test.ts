/**
 * bpf_netdev.o's programs through BPF_PROG_TEST_RUN as programs: what they
 * count and trace (only what tendril translates, at the configured trace
 * level), and that the node's own traffic and traffic that is not
 * tendril's (ARP, IPv6, malformed IPv4) passes untouched and uncounted.
 * The translations themselves are nat.test.ts's.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { TcAction } from '../kernel/bpf/index.js';
import { EventType, TraceLevel, TracePoint, TrafficDirection } from './constants.js';
import { assertEvents } from './testing/expect.js';
import { NODE_IP, POD_A, WORLD_IP } from './testing/fixtures.js';
import {
  arpFrame,
  icmpv6NeighborSolicitation,
  IpProto,
  ipv4Frame,
  ipv6Frame,
  readTransport,
  TcpFlag,
  tcpFrame,
  truncate,
  udpFrame,
} from './testing/packets.js';
import { NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';
import { SnatNode } from './testing/snatNode.js';

requireRoot('the bpf_netdev program tests');

const TO_NETDEV = 'tendril_to_netdev';
const FROM_NETDEV = 'tendril_from_netdev';
const TO_LO = 'tendril_to_lo';
const { TRACE } = EventType;
const { INGRESS, EGRESS } = TrafficDirection;

const outMacs = { srcMac: '0a:00:00:00:ee:01', dstMac: '0a:00:00:00:ee:fe' };
const inMacs = { srcMac: '0a:00:00:00:ee:fe', dstMac: '0a:00:00:00:ee:01' };

const podSyn = () => tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80, flags: TcpFlag.SYN });
const podAck = () => tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport: 40000, dport: 80, flags: TcpFlag.ACK });
const replyTo = (port: number) => tcpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 80, dport: port, flags: TcpFlag.SYN | TcpFlag.ACK });

describe('bpf_netdev programs', () => {
  let h: ProgramHarness;
  let node: SnatNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(NETDEV_OBJECT);
    node = new SnatNode(h);
    node.addDevice();
    node.addMasqueradeCidrs();
  });
  afterEach(async () => {
    await h?.close();
  });

  async function masqueradedPort(frame: Buffer): Promise<number> {
    const r = await h.run(TO_NETDEV, frame);
    assert.equal(r.retval, TcAction.OK);
    return readTransport(r.data).sport;
  }

  describe('counting and tracing', () => {
    it('at trace level ALL traces every translated packet: TO_NETWORK as it leaves, FROM_NETWORK as its reply arrives', async () => {
      h.setTraceLevel(TraceLevel.ALL);
      const syn = podSyn();
      const port = await masqueradedPort(syn);
      const reply = replyTo(port);
      assert.equal((await h.run(FROM_NETDEV, reply)).retval, TcAction.OK);
      assertEvents(await h.takeEvents(2), [
        { type: TRACE, subtype: TracePoint.TO_NETWORK, direction: EGRESS, saddr: NODE_IP, daddr: WORLD_IP, sport: port, dport: 80, proto: IpProto.TCP, ifindex: 1, origLen: syn.length },
        { type: TRACE, subtype: TracePoint.FROM_NETWORK, direction: INGRESS, saddr: WORLD_IP, daddr: POD_A.ip, sport: 80, dport: 40000, proto: IpProto.TCP },
      ]);
      assert.deepEqual(h.metric(0, EGRESS), { packets: 1n, bytes: BigInt(syn.length) });
      assert.deepEqual(h.metric(0, INGRESS), { packets: 1n, bytes: BigInt(reply.length) });
    });

    it('at NEW_FLOWS traces the packet that made a mapping only', async () => {
      h.setTraceLevel(TraceLevel.NEW_FLOWS);
      const port = await masqueradedPort(podSyn());
      await masqueradedPort(podAck());
      await h.run(FROM_NETDEV, replyTo(port));
      assertEvents(await h.takeEvents(1), [{ type: TRACE, subtype: TracePoint.TO_NETWORK, direction: EGRESS, saddr: NODE_IP, sport: port }]);
      assert.equal(h.metric(0, EGRESS).packets, 2n);
      assert.equal(h.metric(0, INGRESS).packets, 1n);
    });

    it('traces nothing with tracing off (no config entry), and still counts', async () => {
      const port = await masqueradedPort(podSyn());
      await h.run(FROM_NETDEV, replyTo(port));
      assertEvents(await h.takeEvents(), []);
      assert.equal(h.metric(0, EGRESS).packets, 1n);
      assert.equal(h.metric(0, INGRESS).packets, 1n);
    });

    it('neither counts nor traces the node\'s own traffic, even at ALL', async () => {
      h.setTraceLevel(TraceLevel.ALL);
      const own = [
        tcpFrame({ ...outMacs, src: NODE_IP, dst: WORLD_IP, sport: 50000, dport: 443 }),
        udpFrame({ ...outMacs, src: NODE_IP, dst: WORLD_IP, sport: 50001, dport: 53 }),
      ];
      for (const f of own) assert.deepEqual((await h.run(TO_NETDEV, f)).data, f);
      const inbound = [
        tcpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 443, dport: 50000, flags: TcpFlag.ACK }),
        tcpFrame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, sport: 40000, dport: 22 }),
      ];
      for (const f of inbound) assert.deepEqual((await h.run(FROM_NETDEV, f)).data, f);
      for (const f of inbound) assert.deepEqual((await h.run(TO_LO, f)).data, f);
      assertEvents(await h.takeEvents(), []);
      assert.equal(h.metric(0, EGRESS).packets, 0n);
      assert.equal(h.metric(0, INGRESS).packets, 0n);
    });

    it('translates no reply that arrives on a device without an entry', async () => {
      const port = await masqueradedPort(podSyn());
      node.devices.delete(1);
      const reply = replyTo(port);
      const r = await h.run(FROM_NETDEV, reply);
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(r.data, reply);
    });
  });

  describe('traffic that is not tendril\'s passes untouched and uncounted', () => {
    const notOurs = (): Array<[string, Buffer]> => {
      const syn = podSyn();
      const ipv4Bad = Buffer.from(syn);
      ipv4Bad[14] = 0x35; // IPv4 with ihl 5 but version 3
      const tooLong = ipv4Frame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.UDP, payload: Buffer.alloc(8), totalLength: 200 });
      return [
        ['ARP', arpFrame({ senderMac: outMacs.srcMac, senderIp: NODE_IP, targetIp: WORLD_IP })],
        ['IPv6', ipv6Frame({ ...outMacs, src: 'fe80::1', dst: 'ff02::1:ff00:2', nextHeader: IpProto.ICMPV6, payload: icmpv6NeighborSolicitation('fe80::1', 'ff02::1:ff00:2', 'fe80::2') })],
        ['an IPv4 header cut short in its options', truncate(ipv4Frame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.UDP, options: Buffer.from([1, 1, 1, 0, 1, 1, 1, 0]), payload: Buffer.alloc(8) }), 14 + 24)],
        ['a TCP header cut short', ipv4Frame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.TCP, payload: Buffer.alloc(10) })],
        ['a datagram cut short', truncate(syn, 14 + 20 + 10)],
        ['a bad IP version', ipv4Bad],
        ['a total length past the frame', tooLong],
      ];
    };

    for (const program of [TO_NETDEV, FROM_NETDEV, TO_LO]) {
      it(`${program}: ARP, IPv6 and malformed IPv4`, async () => {
        h.setTraceLevel(TraceLevel.ALL);
        for (const [what, f] of notOurs()) {
          const r = await h.run(program, f).catch((err: unknown) => {
            throw new Error(`${what}: ${String(err)}`);
          });
          assert.equal(r.retval, TcAction.OK, what);
          assert.deepEqual(r.data, f, what);
        }
        assertEvents(await h.takeEvents(), []);
        assert.equal(h.metric(0, EGRESS).packets + h.metric(0, INGRESS).packets, 0n);
        assert.equal(await node.count(), 0);
      });
    }
  });
});
