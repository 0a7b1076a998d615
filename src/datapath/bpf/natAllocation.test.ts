/**
 * SNAT port allocation under load, through BPF_PROG_TEST_RUN on
 * bpf_netdev.o: the source port kept when it is free, the port of a closed
 * flow taken once its last packet is NAT_CLOSED_REUSE_MS old, the whole range searched before NAT_PORT_EXHAUSTED, a
 * full table refusing new flows (NAT_FULL) while live ones keep their
 * mappings, the config's port ranges, and a pod's ICMP errors about
 * masqueraded flows leaving translated.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { TcAction } from '../kernel/bpf/index.js';
import { CtFlag, CtTimeout, DropReason, MapName, NAT_CLOSED_REUSE_MS, NAT_PORT_MAX, NAT_PORT_MIN, NatFlag, TrafficDirection } from './constants.js';
import { NO_NAT_CONFIG, type CtEntryValue } from './layout.js';
import { ctEntryOf, NODE_IP, POD_A, POD_B, WORLD_IP } from './testing/fixtures.js';
import { datagramOf, icmpError, IcmpType, internetChecksum, IpProto, ipv4Frame, readIpv4, readTransport, TcpFlag, tcpFrame, udpFrame } from './testing/packets.js';
import { NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';
import { SnatNode, type NatTuple } from './testing/snatNode.js';

requireRoot('the SNAT allocation program tests');

const TO_NETDEV = 'tendril_to_netdev';
const { EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;
const outMacs = { srcMac: '0a:00:00:00:ee:01', dstMac: '0a:00:00:00:ee:fe' };
const inMacs = { srcMac: '0a:00:00:00:ee:fe', dstMac: '0a:00:00:00:ee:01' };

describe('SNAT port allocation (bpf_netdev)', () => {
  let h: ProgramHarness;
  let node: SnatNode;

  async function load(sizes: Record<string, number> = { [MapName.SNAT]: 16384 }): Promise<void> {
    h = await ProgramHarness.load(NETDEV_OBJECT, sizes);
    node = new SnatNode(h);
    node.addDevice();
    node.addMasqueradeCidrs();
  }
  beforeEach(async () => load());
  afterEach(async () => {
    await h?.close();
  });

  /** Sends a SYN from `saddr:sport` to WORLD_IP:80; answers the packet's fate and the port it left with. */
  async function syn(sport: number, saddr = POD_A.ip): Promise<{ retval: number; port: number }> {
    const r = await h.run(TO_NETDEV, tcpFrame({ ...outMacs, src: saddr, dst: WORLD_IP, sport, dport: 80 }));
    const t = readTransport(r.data);
    if (r.retval === TcAction.OK) {
      assert.equal(readIpv4(r.data).src, NODE_IP);
      assert.ok(t.checksumValid);
    }
    return { retval: r.retval, port: t.sport };
  }

  const tuple = (sport: number, saddr = POD_A.ip): NatTuple => ({ saddr, daddr: WORLD_IP, sport, dport: 80, proto: IpProto.TCP });

  it('keeps the source port when it is one of SNAT\'s and free; a second pod with the same port gets another', async () => {
    assert.deepEqual(await syn(NAT_PORT_MIN + 7), { retval: TcAction.OK, port: NAT_PORT_MIN + 7 });
    const b = await syn(NAT_PORT_MIN + 7, POD_B.ip);
    assert.equal(b.retval, TcAction.OK);
    assert.notEqual(b.port, NAT_PORT_MIN + 7);
    assert.ok(b.port >= NAT_PORT_MIN && b.port <= NAT_PORT_MAX);
    // A port outside SNAT's ranges (the pod's own ephemeral range) is never kept: the node's own connections use those.
    const c = await syn(40000);
    assert.ok(c.port >= NAT_PORT_MIN && c.port <= NAT_PORT_MAX, `port ${c.port}`);
  });

  it('gives out the config\'s ranges, both of them, and keeps a port inside either', async () => {
    h.config.set(0, { traceLevel: 0, flags: 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG, natPorts: [{ min: 2000, max: 2001 }, { min: 5000, max: 5001 }] });
    assert.equal((await syn(2001)).port, 2001);
    assert.equal((await syn(5000)).port, 5000);
    const seen = new Set<number>();
    for (const sport of [40001, 40002]) {
      const r = await syn(sport);
      assert.equal(r.retval, TcAction.OK);
      seen.add(r.port);
    }
    assert.deepEqual([...seen].sort(), [2000, 5001]);
    // Four ports, four live flows: the fifth finds none.
    assert.equal((await syn(40003)).retval, TcAction.SHOT);
    assert.equal(h.metric(code('NAT_PORT_EXHAUSTED'), EGRESS).packets, 1n);
  });

  it('finds the one free port left by searching the whole range, not only a few random ones', async () => {
    const free = NAT_PORT_MIN + 1234;
    await node.claimEveryPort(WORLD_IP, 80, IpProto.TCP, NODE_IP, NatFlag.MASQUERADE, { except: free });
    for (let i = 0; i < 3; i++) {
      await h.close();
      await load();
      await node.claimEveryPort(WORLD_IP, 80, IpProto.TCP, NODE_IP, NatFlag.MASQUERADE, { except: free });
      assert.deepEqual(await syn(40000 + i), { retval: TcAction.OK, port: free });
    }
  });

  describe('a port whose flow is over is taken', () => {
    /** Every port held by a live flow but `port`, held by POD_A:40000's flow with the conntrack entry `held`. */
    async function onePortHeld(port: number, held: (now: bigint) => Partial<CtEntryValue>): Promise<void> {
      await node.claimEveryPort(WORLD_IP, 80, IpProto.TCP, NODE_IP, NatFlag.MASQUERADE, { except: port });
      node.addMapping(tuple(40000), NODE_IP, port, NatFlag.MASQUERADE);
      h.ctTcp.set(h.ctKey(tuple(40000)), ctEntryOf(held(process.hrtime.bigint())));
    }
    /** A closed flow's deadline: its last packet `agoMs` ago plus the closing lifetime. */
    const lastPacket = (now: bigint, agoMs: number): bigint => now + BigInt(CtTimeout.TCP_CLOSING) * 1_000_000_000n - BigInt(agoMs) * 1_000_000n;
    const reset = { tcpFlags: TcpFlag.SYN | TcpFlag.ACK | TcpFlag.RST, flags: CtFlag.REPLY_SEEN | CtFlag.CLOSING };

    for (const [name, held] of [
      ['reset', (now: bigint) => ({ ...reset, expiresNs: lastPacket(now, 2 * NAT_CLOSED_REUSE_MS) })],
      ['closed both ways', (now: bigint) => ({ tcpFlags: TcpFlag.SYN | TcpFlag.ACK | TcpFlag.FIN, flags: CtFlag.REPLY_SEEN | CtFlag.CLOSING | CtFlag.FIN_ORIGINAL | CtFlag.FIN_REPLY, expiresNs: lastPacket(now, 2 * NAT_CLOSED_REUSE_MS) })],
      ['expired', (now: bigint) => ({ expiresNs: now - 1n })],
    ] as const) {
      it(`${name}: the new flow gets the port, the old flow's own side goes`, async () => {
        const port = NAT_PORT_MIN + 99;
        await onePortHeld(port, held);
        assert.deepEqual(await syn(41000), { retval: TcAction.OK, port });
        assert.deepEqual(node.ingress(tuple(41000), NODE_IP, port), { toAddr: POD_A.ip, toPort: 41000, flags: NatFlag.MASQUERADE });
        assert.equal(node.egress(tuple(40000)), undefined, 'the closed flow\'s mapping is gone');
        assert.deepEqual(node.egress(tuple(41000)), { toAddr: NODE_IP, toPort: port, flags: NatFlag.MASQUERADE });
      });
    }

    for (const [name, held] of [
      ['established', () => ({})],
      ['half-closed (a FIN one way: data may still flow the other)', () => ({ tcpFlags: TcpFlag.SYN | TcpFlag.ACK | TcpFlag.FIN, flags: CtFlag.REPLY_SEEN | CtFlag.CLOSING | CtFlag.FIN_ORIGINAL })],
      // Its RST may still be on its way to the peer on another CPU: a SYN of the same tuple must not overtake it.
      ['reset just now', (now: bigint) => ({ ...reset, expiresNs: lastPacket(now, 0) })],
    ] as const) {
      it(`${name}: the port stays its flow's, the new flow finds none`, async () => {
        const port = NAT_PORT_MIN + 99;
        await onePortHeld(port, held);
        assert.equal((await syn(41000)).retval, TcAction.SHOT);
        assert.equal(h.metric(code('NAT_PORT_EXHAUSTED'), EGRESS).packets, 1n);
        assert.deepEqual(node.ingress(tuple(40000), NODE_IP, port), { toAddr: POD_A.ip, toPort: 40000, flags: NatFlag.MASQUERADE });
      });
    }
  });

  it('a full table refuses a new flow (NAT_FULL, counted) and the flows it holds keep their mappings', async () => {
    await h.close();
    await load({ [MapName.SNAT]: 7 });
    const ports: number[] = [];
    for (const sport of [40001, 40002, 40003]) ports.push((await syn(sport)).port);
    // Six sides of three mappings; the seventh entry (a reply side) fits, its original side does not.
    assert.equal((await syn(40004)).retval, TcAction.SHOT);
    assert.equal(h.metric(code('NAT_FULL'), EGRESS).packets, 1n);
    assert.equal(await node.count(), 6, 'the half-made mapping was taken back');
    assert.equal((await syn(40005)).retval, TcAction.SHOT);
    assert.equal(h.metric(code('NAT_FULL'), EGRESS).packets, 2n);
    const ack = (sport: number) => tcpFrame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, sport, dport: 80, flags: TcpFlag.ACK });
    for (const [i, sport] of [40001, 40002, 40003].entries()) {
      const r = await h.run(TO_NETDEV, ack(sport));
      assert.equal(r.retval, TcAction.OK);
      assert.equal(readTransport(r.data).sport, ports[i]);
    }
  });

  it('a stale mapping replaced (the node address changed) takes its old reply side with it', async () => {
    node.addMapping(tuple(40000), '192.0.2.99', NAT_PORT_MIN + 5, NatFlag.MASQUERADE);
    const r = await syn(40000);
    assert.equal(r.retval, TcAction.OK);
    assert.equal(node.ingress(tuple(40000), '192.0.2.99', NAT_PORT_MIN + 5), undefined);
    assert.equal(await node.count(), 2);
  });

  it('a pod\'s ICMP error about a reply that reached it through a mapping leaves as the node\'s, checksums right', async () => {
    const udp = { saddr: POD_A.ip, daddr: WORLD_IP, sport: 40053, dport: 53, proto: IpProto.UDP };
    node.addMapping(udp, NODE_IP, NAT_PORT_MIN + 53, NatFlag.MASQUERADE);
    // The reply as the pod got it (already translated back), and the pod's port unreachable about it.
    const reply = datagramOf(udpFrame({ ...inMacs, src: WORLD_IP, dst: POD_A.ip, sport: 53, dport: 40053, payload: Buffer.from('answer') }));
    const err = ipv4Frame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 3, reply, reply.length) });
    const r = await h.run(TO_NETDEV, err);
    assert.equal(r.retval, TcAction.OK);
    const ip = readIpv4(r.data);
    assert.equal(ip.src, NODE_IP);
    assert.ok(ip.checksumValid);
    const icmp = r.data.subarray(14 + 20);
    assert.equal(internetChecksum(icmp), 0, 'ICMP checksum');
    const inner = icmp.subarray(8);
    // The embedded datagram behind an Ethernet header, for the frame readers.
    const innerFrame = Buffer.concat([Buffer.from('0000000000000000000000000800', 'hex'), inner]);
    const innerIp = readIpv4(innerFrame);
    assert.equal(innerIp.dst, NODE_IP);
    assert.ok(innerIp.checksumValid, 'embedded IP checksum');
    const innerL4 = readTransport(innerFrame);
    assert.equal(innerL4.dport, NAT_PORT_MIN + 53);
    assert.ok(innerL4.checksumValid, 'embedded UDP checksum');
    // An error about a flow addressed to the pod itself (no mapping) keeps the pod's address: that is who its peer talks to.
    const direct = datagramOf(udpFrame({ ...inMacs, src: WORLD_IP, dst: POD_A.ip, sport: 53, dport: 40099, payload: Buffer.from('x') }));
    const err2 = ipv4Frame({ ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 3, direct) });
    const r2 = await h.run(TO_NETDEV, err2);
    assert.equal(r2.retval, TcAction.OK);
    assert.deepEqual(r2.data, err2);
  });
});
