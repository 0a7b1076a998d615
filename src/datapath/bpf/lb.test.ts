/**
 * Service load-balancing in bpf_lxc.o and bpf_host.o through
 * BPF_PROG_TEST_RUN: frontend lookup, backend selection (pinned by the
 * service conntrack entry, affinity, Maglev, random), DNAT with valid
 * checksums, reverse NAT of replies and of related ICMP errors, hairpin,
 * and policy applied to the translated flow.
 */
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { requireRoot } from '../../../test/support/root.js';
import { parseIp } from '../../netip/index.js';
import { TcAction } from '../kernel/bpf/index.js';
import { NO_NAT_CONFIG } from './layout.js';
import { BackendState, CtFlag, DropReason, EventType, LB_HAIRPIN_IP4, LbScope, PolicyVerdict, ServiceFlag, TrafficDirection } from './constants.js';
import { flowHash4, maglevSlot } from './flowHash.js';
import { assertEvents, assertLifetime, checkedTuple as tuple, CtTimeout } from './testing/expect.js';
import { IDENTITY, installNode, NODE_IP, POD_A, POD_B, POD_C, REMOTE_POD_IP, ROUTER } from './testing/fixtures.js';
import { LbNode, type TestFrontend } from './testing/lbNode.js';
import {
  datagramOf,
  EtherType,
  ethernetFrame,
  fragmentFrame,
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
  udpDatagram,
  udpFrame,
} from './testing/packets.js';
import { HOST_OBJECT, LXC_OBJECT, ProgramHarness } from './testing/programHarness.js';

requireRoot('the service load-balancing program tests');

const FROM = 'tendril_from_container';
const TO = 'tendril_to_container';
const { DROP, POLICY_VERDICT } = EventType;
const { INGRESS, EGRESS } = TrafficDirection;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;

const fromA = { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac };
const fromB = { srcMac: POD_B.podMac, dstMac: POD_B.lxcMac };

const VIP = '10.96.0.10';
const WEB: TestFrontend = { ip: VIP, port: 80, proto: IpProto.TCP };
const DNS: TestFrontend = { ip: VIP, port: 53, proto: IpProto.UDP };
const BE = {
  B: { id: 101, ip: POD_B.ip, port: 8080, proto: IpProto.TCP },
  C: { id: 102, ip: POD_C.ip, port: 8080, proto: IpProto.TCP },
  REMOTE: { id: 103, ip: REMOTE_POD_IP, port: 8080, proto: IpProto.TCP },
  A: { id: 104, ip: POD_A.ip, port: 8080, proto: IpProto.TCP },
  B_DNS: { id: 105, ip: POD_B.ip, port: 5353, proto: IpProto.UDP },
} as const;
const ID = { WEB: 7, DNS: 8, NODEPORT: 9, SCOPED: 10 } as const;
const COOKIE = { ALLOW: 0x1001, DENY: 0x3003 };

/** Where a translated frame goes: addresses and ports, with every checksum checked. */

const synAtoWeb = (sport = 40000) => tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport, dport: 80, flags: TcpFlag.SYN, payload: Buffer.from('hello') });

describe('services in bpf_lxc', () => {
  let h: ProgramHarness;
  let lb: LbNode;

  beforeEach(async () => {
    h = await ProgramHarness.load(LXC_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    for (const b of Object.values(BE)) lb.addBackend(b);
    // A may reach anything; every pod accepts from anyone: these tests are about translation (policy has its own test).
    h.addPolicy({ endpointId: POD_A.endpointId, identity: 0, egress: true, cookie: COOKIE.ALLOW });
    for (const ep of [POD_A, POD_B, POD_C]) h.addPolicy({ endpointId: ep.endpointId, identity: 0, egress: false, cookie: COOKIE.ALLOW });
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  describe('lookup', () => {
    it('DNATs TCP and UDP to their frontends with valid IP and L4 checksums; other ports, protocols and addresses pass untouched', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id] });
      lb.addService({ id: ID.DNS, frontend: DNS, backends: [BE.B_DNS.id] });

      const syn = synAtoWeb();
      let r = await h.run(FROM, syn);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 8080 });
      assert.equal(readIpv4(r.data).ethDst, POD_B.podMac);
      assert.deepEqual(r.data.subarray(14 + 20 + 20), syn.subarray(14 + 20 + 20), 'payload untouched');

      r = await h.run(FROM, udpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 33000, dport: 53, payload: Buffer.from('query') }));
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: POD_A.ip, dst: POD_B.ip, sport: 33000, dport: 5353 });

      const misses = [
        tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 40001, dport: 53 }), // a UDP frontend's port over TCP
        udpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 40002, dport: 80 }),
        tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 40003, dport: 81 }),
        tcpFrame({ ...fromA, src: POD_A.ip, dst: '10.96.0.11', sport: 40004, dport: 80 }),
        icmpEchoFrame({ ...fromA, src: POD_A.ip, dst: VIP, id: 80 }),
        ipv4Frame({ ...fromA, src: POD_A.ip, dst: VIP, proto: IpProto.SCTP, payload: Buffer.from([0, 1, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0]) }),
      ];
      for (const f of misses) {
        const m = await h.run(FROM, f);
        assert.equal(m.retval, TcAction.OK);
        assert.deepEqual(m.data, f, 'no service: untouched');
      }
    });

    it('takes a NodePort on a node address (not on any other), and the INTERNAL scope of a TWO_SCOPES frontend', async () => {
      const nodePort: TestFrontend = { ip: '0.0.0.0', port: 30080, proto: IpProto.TCP };
      lb.addService({ id: ID.NODEPORT, frontend: nodePort, backends: [BE.B.id], flags: ServiceFlag.NODEPORT });
      let r = await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: NODE_IP, sport: 40000, dport: 30080 }));
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: POD_A.ip, dst: POD_B.ip, sport: 40000, dport: 8080 });
      const entry = h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 8080, proto: IpProto.TCP })!;
      assert.deepEqual([entry.natAddr, entry.natPort, entry.revNatIndex, entry.backendId], [parseIp(NODE_IP), 30080, ID.NODEPORT, BE.B.id], 'the node address the client used');
      const elsewhere = tcpFrame({ ...fromA, src: POD_A.ip, dst: '198.51.100.9', sport: 40000, dport: 30080 });
      r = await h.run(FROM, elsewhere);
      assert.deepEqual(r.data, elsewhere);

      // Local traffic policy: outside traffic sees no backend here, pods see every backend.
      const scoped: TestFrontend = { ip: '10.96.0.20', port: 80, proto: IpProto.TCP };
      const flags = ServiceFlag.LOCAL_TRAFFIC | ServiceFlag.TWO_SCOPES;
      lb.addService({ id: ID.SCOPED, frontend: scoped, backends: [], flags });
      lb.addService({ id: ID.SCOPED, frontend: scoped, backends: [BE.C.id], flags, scope: LbScope.INTERNAL });
      r = await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: scoped.ip, sport: 40005, dport: 80 }));
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.equal(tuple(r.data).dst, POD_C.ip);
    });

    it('drops with DROP_NO_SERVICE, counted, when the frontend has no backend', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [] });
      const syn = synAtoWeb();
      assert.equal((await h.run(FROM, syn)).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(1), [{ type: DROP, subtype: code('NO_SERVICE'), direction: EGRESS, saddr: POD_A.ip, daddr: VIP, dport: 80 }]);
      assert.deepEqual(h.metric(code('NO_SERVICE'), EGRESS), { packets: 1n, bytes: BigInt(syn.length) });
      assert.equal(await h.ctCount(), 0);
    });
  });

  describe('backend selection', () => {
    beforeEach(() => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id, BE.C.id, BE.REMOTE.id] });
    });

    it('the service entry, which sees only the client, is established by its ACK; the flow\'s own entry waits for a reply', async () => {
      const sport = 42000;
      const to = tuple((await h.run(FROM, synAtoWeb(sport))).data);
      const before = process.hrtime.bigint();
      await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport, dport: 80, flags: TcpFlag.ACK }));
      const svcEntry = lb.serviceCt({ saddr: POD_A.ip, daddr: VIP, sport, dport: 80, proto: IpProto.TCP })!;
      assert.equal(svcEntry.flags & CtFlag.SERVICE, CtFlag.SERVICE);
      assertLifetime(svcEntry, CtTimeout.TCP_ESTABLISHED, before);
      const flowEntry = h.ct({ saddr: POD_A.ip, daddr: to.dst, sport, dport: to.dport, proto: IpProto.TCP })!;
      assert.equal(flowEntry.flags & CtFlag.SERVICE, 0);
      assertLifetime(flowEntry, CtTimeout.TCP_SYN, before);
    });

    it('spreads connections at random and pins each to its backend in a service conntrack entry', async () => {
      const chosen = new Set<string>();
      for (let sport = 41000; sport < 41030; sport++) {
        const first = tuple((await h.run(FROM, synAtoWeb(sport))).data).dst;
        chosen.add(first);
        const svcEntry = lb.serviceCt({ saddr: POD_A.ip, daddr: VIP, sport, dport: 80, proto: IpProto.TCP })!;
        assert.ok(svcEntry, 'service entry');
        const backend = Object.values(BE).find((b) => b.id === svcEntry.backendId)!;
        assert.equal(backend.ip, first);
        assert.deepEqual([svcEntry.revNatIndex, svcEntry.natAddr, svcEntry.natPort], [ID.WEB, parseIp(VIP), 80]);
        for (let i = 0; i < 3; i++) {
          const ack = tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport, dport: 80, flags: TcpFlag.ACK });
          assert.equal(tuple((await h.run(FROM, ack)).data).dst, first, 'the same backend for the connection\'s life');
        }
        assert.equal(lb.serviceCt({ saddr: POD_A.ip, daddr: VIP, sport, dport: 80, proto: IpProto.TCP })!.packets, 4n);
      }
      assert.equal(chosen.size, 3, 'every backend got connections');
    });

    it('re-selects when the pinned backend is deleted; a terminating one keeps its connection', async () => {
      const t = { saddr: POD_A.ip, daddr: VIP, sport: 41000, dport: 80, proto: IpProto.TCP };
      const first = tuple((await h.run(FROM, synAtoWeb(41000))).data).dst;
      const pinned = lb.serviceCt(t)!.backendId;
      assert.equal(Object.values(BE).find((b) => b.id === pinned)!.ip, first);

      // Terminating: out of the slots, still a backend.
      const rest: number[] = [BE.B.id, BE.C.id, BE.REMOTE.id].filter((id) => id !== pinned);
      lb.addService({ id: ID.WEB, frontend: WEB, backends: rest });
      lb.services.delete(lb.serviceKey(WEB, 3));
      lb.backends.set(pinned, { ...lb.backends.get(pinned)!, state: BackendState.TERMINATING });
      const ack = tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 41000, dport: 80, flags: TcpFlag.ACK });
      assert.equal(tuple((await h.run(FROM, ack)).data).dst, first);

      // Deleted: the next packet of the same tuple goes to a live backend, pinned anew.
      lb.backends.delete(pinned);
      const next = tuple((await h.run(FROM, ack)).data).dst;
      assert.notEqual(next, first);
      const repinned = lb.serviceCt(t)!.backendId;
      assert.ok(rest.includes(repinned));
      assert.equal(Object.values(BE).find((b) => b.id === repinned)!.ip, next);
    });

    it('re-pins a flow whose backend left the service but still backs another, on its next packet, to a live member; the old entry is overwritten, not walked', async () => {
      const t = { saddr: POD_A.ip, daddr: VIP, sport: 41200, dport: 80, proto: IpProto.TCP };
      const first = tuple((await h.run(FROM, synAtoWeb(41200))).data).dst;
      const pinned = lb.serviceCt(t)!.backendId;
      // Another service keeps the backend in tendril_lb4_be (backend IDs are shared).
      lb.addService({ id: ID.SCOPED, frontend: { ip: '10.96.0.20', port: 80, proto: IpProto.TCP }, backends: [pinned] });
      const ack = tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 41200, dport: 80, flags: TcpFlag.ACK });
      assert.equal(tuple((await h.run(FROM, ack)).data).dst, first, 'pinned while a member');

      // The agent rewrites WEB without it: slots first, the membership last.
      const rest: number[] = [BE.B.id, BE.C.id, BE.REMOTE.id].filter((id) => id !== pinned);
      lb.addService({ id: ID.WEB, frontend: WEB, backends: rest });
      lb.services.delete(lb.serviceKey(WEB, 3));
      lb.removeMember(ID.WEB, pinned);
      assert.ok(lb.backends.get(pinned), 'still a backend (of the other service)');
      const next = tuple((await h.run(FROM, ack)).data).dst;
      assert.notEqual(next, first);
      const repinned = lb.serviceCt(t)!;
      assert.ok(rest.includes(repinned.backendId));
      assert.equal(Object.values(BE).find((b) => b.id === repinned.backendId)!.ip, next);
      assert.equal(repinned.revNatIndex, ID.WEB);
      for (let i = 0; i < 3; i++) assert.equal(tuple((await h.run(FROM, ack)).data).dst, next, 'stays on the new backend');

      // The same for UDP (a connected client's datagrams), and the other service's flows to the backend are untouched.
      lb.addService({ id: ID.DNS, frontend: DNS, backends: [BE.B_DNS.id] });
      const q = udpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 33100, dport: 53 });
      assert.equal(tuple((await h.run(FROM, q)).data).dport, 5353);
      const udpBe = { id: 106, ip: POD_C.ip, port: 5354, proto: IpProto.UDP };
      lb.addBackend(udpBe);
      lb.addService({ id: ID.DNS, frontend: DNS, backends: [udpBe.id] });
      lb.removeMember(ID.DNS, BE.B_DNS.id);
      assert.deepEqual(tuple((await h.run(FROM, q)).data), { src: POD_A.ip, dst: POD_C.ip, sport: 33100, dport: 5354 });
      assert.equal(lb.serviceCt({ saddr: POD_A.ip, daddr: VIP, sport: 33100, dport: 53, proto: IpProto.UDP })!.backendId, udpBe.id);
      const other = tcpFrame({ ...fromA, src: POD_A.ip, dst: '10.96.0.20', sport: 41201, dport: 80 });
      assert.equal(tuple((await h.run(FROM, other)).data).dst, first, 'the service it still backs still sends to it');
    });

    it('chooses afresh for a SYN that reuses a closed connection\'s client port: a backend drained since takes none', async () => {
      const t = { saddr: POD_A.ip, daddr: VIP, sport: 41100, dport: 80, proto: IpProto.TCP };
      const first = tuple((await h.run(FROM, synAtoWeb(41100))).data).dst;
      const pinned = lb.serviceCt(t)!.backendId;
      await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 41100, dport: 80, flags: TcpFlag.FIN | TcpFlag.ACK }));
      // The pinned backend goes into maintenance: out of the slots, still a backend (its connections would live on).
      const rest: number[] = [BE.B.id, BE.C.id, BE.REMOTE.id].filter((id) => id !== pinned);
      lb.addService({ id: ID.WEB, frontend: WEB, backends: rest });
      lb.services.delete(lb.serviceKey(WEB, 3));
      lb.backends.set(pinned, { ...lb.backends.get(pinned)!, state: BackendState.MAINTENANCE });
      const next = tuple((await h.run(FROM, synAtoWeb(41100))).data).dst;
      assert.notEqual(next, first, 'the new connection on the reused port is not pinned to the drained backend');
      assert.ok(rest.includes(lb.serviceCt(t)!.backendId));
    });

    it('chooses afresh for a SYN that reuses the port of a connection moved to another backend and reset there (its service entry never saw the end)', async () => {
      const t = { saddr: POD_A.ip, daddr: VIP, sport: 41150, dport: 80, proto: IpProto.TCP };
      const first = tuple((await h.run(FROM, synAtoWeb(41150))).data).dst;
      const pinned = lb.serviceCt(t)!.backendId;
      const ack = tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 41150, dport: 80, flags: TcpFlag.ACK });
      // Its backend leaves: the next segment is re-pinned to another one, whose reset ends the
      // connection on its way back through the translated flow's entry, not the service entry.
      const rest: number[] = [BE.B.id, BE.C.id, BE.REMOTE.id].filter((id) => id !== pinned);
      lb.addService({ id: ID.WEB, frontend: WEB, backends: rest });
      lb.services.delete(lb.serviceKey(WEB, 3));
      lb.backends.delete(pinned);
      const moved = tuple((await h.run(FROM, ack)).data).dst;
      assert.notEqual(moved, first);
      const service = lb.serviceCt(t)!;
      const repinned = service.backendId;
      assert.ok(rest.includes(repinned));
      assert.equal(service.flags & CtFlag.CLOSING, 0, 'the service entry does not know the connection ended');
      // That backend is drained since (maintenance: out of the slots, still a member).
      const left = rest.filter((id) => id !== repinned);
      lb.addService({ id: ID.WEB, frontend: WEB, backends: left });
      for (let slot = left.length + 1; slot <= 3; slot++) lb.services.delete(lb.serviceKey(WEB, slot));
      lb.backends.set(repinned, { ...lb.backends.get(repinned)!, state: BackendState.MAINTENANCE });
      const next = tuple((await h.run(FROM, synAtoWeb(41150))).data).dst;
      assert.notEqual(next, moved, 'the new connection on the reused port is not pinned to the drained backend');
      assert.ok(left.includes(lb.serviceCt(t)!.backendId));
    });

    it('pins a client to one backend with ClientIP affinity, and lets go once the timeout passed', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id, BE.C.id, BE.REMOTE.id], flags: ServiceFlag.AFFINITY, affinityTimeout: 30 });
      const first = tuple((await h.run(FROM, synAtoWeb(42000))).data).dst;
      for (let sport = 42001; sport < 42020; sport++) assert.equal(tuple((await h.run(FROM, synAtoWeb(sport))).data).dst, first, `connection from port ${sport}`);
      const key = { client: parseIp(POD_A.ip), revNatIndex: ID.WEB };
      const aff = lb.affinity.get(key)!;
      assert.equal(Object.values(BE).find((b) => b.id === aff.backendId)!.ip, first);
      assert.ok(process.hrtime.bigint() - aff.lastUsedNs < 5_000_000_000n);

      // Stale affinity (older than the timeout): new connections spread again. The timeout is short
      // because a machine up for less than five minutes has a monotonic clock that cannot go back 301 s.
      const seen = new Set<string>();
      for (let sport = 43000; sport < 43030; sport++) {
        lb.affinity.set(key, { ...lb.affinity.get(key)!, lastUsedNs: process.hrtime.bigint() - 31_000_000_000n });
        seen.add(tuple((await h.run(FROM, synAtoWeb(sport))).data).dst);
      }
      assert.ok(seen.size > 1);
    });

    it('ignores a fresh affinity to a backend that is not (any more) a member of the service', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id, BE.C.id], flags: ServiceFlag.AFFINITY, affinityTimeout: 30 });
      lb.services.delete(lb.serviceKey(WEB, 3));
      lb.removeMember(ID.WEB, BE.REMOTE.id);
      // BE.A is an ACTIVE backend (of the node), never this service's; the client's affinity names it.
      const key = { client: parseIp(POD_A.ip), revNatIndex: ID.WEB };
      lb.affinity.set(key, { lastUsedNs: process.hrtime.bigint(), backendId: BE.A.id });
      const dst = tuple((await h.run(FROM, synAtoWeb(42500))).data).dst;
      assert.ok([POD_B.ip, POD_C.ip].includes(dst), `a member, not the affinity's non-member: ${dst}`);
      const aff = lb.affinity.get(key)!;
      assert.ok(([BE.B.id, BE.C.id] as number[]).includes(aff.backendId), 'the affinity follows the new choice');
      assert.equal(Object.values(BE).find((b) => b.id === aff.backendId)!.ip, dst);
      // A member's affinity is kept.
      for (let sport = 42501; sport < 42506; sport++) assert.equal(tuple((await h.run(FROM, synAtoWeb(sport))).data).dst, dst);
    });

    it('picks table[flowHash % size] from the service\'s Maglev table', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id, BE.C.id, BE.REMOTE.id], flags: ServiceFlag.MAGLEV });
      const table = [BE.B.id, BE.C.id, BE.REMOTE.id, BE.C.id, BE.B.id, BE.REMOTE.id, BE.REMOTE.id];
      await lb.setMaglev(ID.WEB, table);
      h.config.set(0, { traceLevel: 0, flags: 0, hostIfindex: 0, maglevTableSize: table.length, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG });
      const counts = new Map<number, number>();
      for (let sport = 44000; sport < 44040; sport++) {
        const slot = maglevSlot({ saddr: POD_A.ip, daddr: VIP, sport, dport: 80, proto: IpProto.TCP }, table.length);
        const want = Object.values(BE).find((b) => b.id === table[slot])!;
        assert.equal(tuple((await h.run(FROM, synAtoWeb(sport))).data).dst, want.ip, `port ${sport}: slot ${slot}`);
        counts.set(slot, (counts.get(slot) ?? 0) + 1);
      }
      assert.ok(counts.size >= 5, 'the hash spreads over the table');
      // UDP too, and the hash is the tuple's, not the port's alone.
      assert.notEqual(flowHash4({ saddr: POD_A.ip, daddr: VIP, sport: 1, dport: 80, proto: 6 }), flowHash4({ saddr: POD_A.ip, daddr: VIP, sport: 1, dport: 80, proto: 17 }));
    });
  });

  describe('reverse NAT', () => {
    it('gives a local backend\'s reply the frontend as source, with valid checksums, TCP and UDP', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id] });
      lb.addService({ id: ID.DNS, frontend: DNS, backends: [BE.B_DNS.id] });
      await h.run(FROM, synAtoWeb());
      const synAck = tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 8080, dport: 40000, flags: TcpFlag.SYN | TcpFlag.ACK, payload: Buffer.from('hi') });
      let r = await h.run(FROM, synAck);
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: VIP, dst: POD_A.ip, sport: 80, dport: 40000 });
      assert.equal(readIpv4(r.data).ethDst, POD_A.podMac);
      const entry = h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 8080, proto: IpProto.TCP })!;
      assert.deepEqual([entry.flags, entry.revNatIndex, entry.backendId], [CtFlag.REPLY_SEEN, ID.WEB, BE.B.id]);

      await h.run(FROM, udpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 33000, dport: 53 }));
      r = await h.run(FROM, udpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 5353, dport: 33000, payload: Buffer.from('answer') }));
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: VIP, dst: POD_A.ip, sport: 53, dport: 33000 });

      // The service is gone (no reverse NAT entry): replies pass as they are.
      lb.revNat.delete(ID.WEB);
      const ack = tcpFrame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, sport: 8080, dport: 40000, flags: TcpFlag.ACK });
      r = await h.run(FROM, ack);
      assert.deepEqual(tuple(r.data), { src: POD_B.ip, dst: POD_A.ip, sport: 8080, dport: 40000 });
    });

    it('translates a reply that comes back through the stack (backend off the node) in to_container', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.REMOTE.id] });
      const r = await h.run(FROM, synAtoWeb());
      assert.equal(r.retval, TcAction.OK);
      assert.deepEqual(tuple(r.data), { src: POD_A.ip, dst: REMOTE_POD_IP, sport: 40000, dport: 8080 });
      const reply = await h.run(TO, tcpFrame({ src: REMOTE_POD_IP, dst: POD_A.ip, sport: 8080, dport: 40000, flags: TcpFlag.SYN | TcpFlag.ACK, ttl: 62 }));
      assert.equal(reply.retval, TcAction.OK);
      assert.deepEqual(tuple(reply.data), { src: VIP, dst: POD_A.ip, sport: 80, dport: 40000 });
    });

    it('translates an ICMP port-unreachable about a service datagram back: outer source, embedded destination, every checksum', async () => {
      lb.addService({ id: ID.DNS, frontend: DNS, backends: [BE.B_DNS.id] });
      const query = udpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 33000, dport: 53, payload: Buffer.from('query') });
      const translated = (await h.run(FROM, query)).data;
      assert.equal(readIpv4(translated).dst, POD_B.ip);
      // B's kernel answers about the datagram it got (the whole of it, so its UDP checksum can be checked after translation).
      const offending = datagramOf(translated);
      const error = ipv4Frame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 3, offending, offending.length) });
      const r = await h.run(FROM, error);
      assert.equal(r.retval, TcAction.REDIRECT);
      const outer = readIpv4(r.data);
      assert.deepEqual([outer.src, outer.dst, outer.checksumValid], [VIP, POD_A.ip, true]);
      assert.ok(readTransport(r.data).checksumValid, 'ICMP checksum');
      const inner = r.data.subarray(14 + 20 + 8);
      assert.equal(internetChecksum(inner.subarray(0, 20)), 0, 'embedded IPv4 header checksum');
      const embedded = tuple(ethernetFrame({ etherType: EtherType.IPV4, payload: inner }));
      assert.deepEqual(embedded, { src: POD_A.ip, dst: VIP, sport: 33000, dport: 53 });
      assert.deepEqual(inner.subarray(28), Buffer.from('query'));

      // As routers send it (header + 8 bytes): translated the same, ICMP checksum right.
      const short = ipv4Frame({ ...fromB, src: POD_B.ip, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.DEST_UNREACH, 3, offending) });
      const s = await h.run(FROM, short);
      assert.equal(s.retval, TcAction.REDIRECT);
      assert.ok(readTransport(s.data).checksumValid, 'ICMP checksum (short)');
      const shortInner = s.data.subarray(14 + 20 + 8);
      assert.equal(internetChecksum(shortInner.subarray(0, 20)), 0);
      assert.equal(readIpv4(ethernetFrame({ etherType: EtherType.IPV4, payload: shortInner })).dst, VIP);
      assert.equal(shortInner.readUInt16BE(22), 53);
    });
    it('translates an error a router on the way sends about a TCP segment to a backend off the node (to_container): embedded destination only', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.REMOTE.id] });
      const translated = (await h.run(FROM, synAtoWeb())).data;
      const router = '10.201.0.1';
      const error = ipv4Frame({ src: router, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(IcmpType.TIME_EXCEEDED, 0, datagramOf(translated)) });
      const r = await h.run(TO, error);
      assert.equal(r.retval, TcAction.OK);
      const outer = readIpv4(r.data);
      assert.deepEqual([outer.src, outer.dst, outer.checksumValid], [router, POD_A.ip, true], 'a router\'s address stays');
      assert.ok(readTransport(r.data).checksumValid, 'ICMP checksum');
      const inner = r.data.subarray(14 + 20 + 8);
      assert.equal(internetChecksum(inner.subarray(0, 20)), 0, 'embedded IPv4 header checksum');
      assert.equal(readIpv4(ethernetFrame({ etherType: EtherType.IPV4, payload: inner })).dst, VIP);
      assert.deepEqual([inner.readUInt16BE(20), inner.readUInt16BE(22)], [40000, 80]);
    });
  });

  describe('fragments', () => {
    it('DNATs a fragmented datagram: the first fragment\'s port and checksum, later fragments\' address only; the reply is reverse-translated', async () => {
      lb.addService({ id: ID.DNS, frontend: DNS, backends: [BE.B_DNS.id] });
      const payload = Buffer.alloc(64, 0x5a);
      const datagram = udpDatagram({ src: POD_A.ip, dst: VIP, sport: 33000, dport: 53, payload });
      const frags = fragmentFrame({ ...fromA, src: POD_A.ip, dst: VIP, proto: IpProto.UDP, id: 0x4242, payload: datagram }, 32);
      const out: Buffer[] = [];
      for (const f of frags) {
        const r = await h.run(FROM, f);
        assert.equal(r.retval, TcAction.REDIRECT);
        const ip = readIpv4(r.data);
        assert.deepEqual([ip.dst, ip.checksumValid], [POD_B.ip, true]);
        out.push(r.data.subarray(14 + 20));
      }
      // Reassembled, the datagram is A → B:5353 with a valid UDP checksum.
      const whole = ipv4Frame({ src: POD_A.ip, dst: POD_B.ip, proto: IpProto.UDP, payload: Buffer.concat(out) });
      assert.deepEqual(tuple(whole), { src: POD_A.ip, dst: POD_B.ip, sport: 33000, dport: 5353 });
      assert.equal(h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 33000, dport: 5353, proto: IpProto.UDP })!.packets, BigInt(frags.length));
    });
  });

  describe('hairpin', () => {
    it('lets a pod reach its own service: source LB_HAIRPIN_IP4 there, both addresses restored on the reply', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.A.id] });
      const r = await h.run(FROM, synAtoWeb());
      assert.equal(r.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(r.data), { src: LB_HAIRPIN_IP4, dst: POD_A.ip, sport: 40000, dport: 8080 });
      assert.equal(readIpv4(r.data).ethDst, POD_A.podMac);
      const entry = h.ct({ saddr: LB_HAIRPIN_IP4, daddr: POD_A.ip, sport: 40000, dport: 8080, proto: IpProto.TCP })!;
      assert.equal(entry.flags, CtFlag.HAIRPIN);
      assert.deepEqual([entry.srcIdentity, entry.dstIdentity], [IDENTITY.A, IDENTITY.A]);

      const synAck = tcpFrame({ ...fromA, src: POD_A.ip, dst: LB_HAIRPIN_IP4, sport: 8080, dport: 40000, flags: TcpFlag.SYN | TcpFlag.ACK });
      const back = await h.run(FROM, synAck);
      assert.equal(back.retval, TcAction.REDIRECT);
      assert.deepEqual(tuple(back.data), { src: VIP, dst: POD_A.ip, sport: 80, dport: 40000 });
      assert.equal(readIpv4(back.data).ethDst, POD_A.podMac);

      const ack = await h.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: VIP, sport: 40000, dport: 80, flags: TcpFlag.ACK }));
      assert.deepEqual(tuple(ack.data), { src: LB_HAIRPIN_IP4, dst: POD_A.ip, sport: 40000, dport: 8080 });
      assert.equal(h.ct({ saddr: LB_HAIRPIN_IP4, daddr: POD_A.ip, sport: 40000, dport: 8080, proto: IpProto.TCP })!.flags, CtFlag.HAIRPIN | CtFlag.REPLY_SEEN);
    });
  });

  describe('policy', () => {
    it('holds the translated flow to the backend\'s ingress policy: a deny at the backend drops it', async () => {
      lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.B.id] });
      h.addPolicy({ endpointId: POD_B.endpointId, identity: IDENTITY.A, egress: false, proto: IpProto.TCP, port: 8080, cookie: COOKIE.DENY, deny: true });
      assert.equal((await h.run(FROM, synAtoWeb())).retval, TcAction.SHOT);
      assertEvents(await h.takeEvents(3), [
        { type: POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, direction: EGRESS, dstIdentity: IDENTITY.B },
        { type: POLICY_VERDICT, subtype: PolicyVerdict.DENIED, direction: INGRESS, srcIdentity: IDENTITY.A, dstEndpoint: POD_B.endpointId, daddr: POD_B.ip, dport: 8080, cookie: COOKIE.DENY },
        { type: DROP, subtype: code('POLICY_DENY'), direction: INGRESS },
      ]);
      assert.equal(h.ct({ saddr: POD_A.ip, daddr: POD_B.ip, sport: 40000, dport: 8080, proto: IpProto.TCP }), undefined);
    });
  });
});

describe('services in bpf_host tendril_from_host', () => {
  let h: ProgramHarness;
  let lb: LbNode;
  const fromNode = { srcMac: '0a:00:00:00:ff:01', dstMac: '0a:00:00:00:ff:02' };

  beforeEach(async () => {
    h = await ProgramHarness.load(HOST_OBJECT);
    lb = new LbNode(h);
    installNode(h);
    lb.addBackend(BE.A);
    lb.addBackend(BE.REMOTE);
  });
  afterEach(async () => {
    lb?.close();
    await h?.close();
  });

  it('load-balances the node\'s connection to a ClusterIP: DNAT, the backend\'s ingress policy against the host identity, delivery', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.A.id] });
    const syn = tcpFrame({ ...fromNode, src: ROUTER.ip, dst: VIP, sport: 36000, dport: 80, ttl: 63 });
    assert.equal((await h.run('tendril_from_host', syn)).retval, TcAction.SHOT);
    assertEvents(await h.takeEvents(2), [
      { type: POLICY_VERDICT, subtype: PolicyVerdict.NO_MATCH, direction: INGRESS, srcIdentity: IDENTITY.HOST, dstEndpoint: POD_A.endpointId, daddr: POD_A.ip, dport: 8080 },
      { type: DROP, subtype: code('POLICY'), direction: INGRESS },
    ]);
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: COOKIE.ALLOW });
    const r = await h.run('tendril_from_host', syn);
    assert.equal(r.retval, TcAction.REDIRECT);
    assert.deepEqual(tuple(r.data), { src: ROUTER.ip, dst: POD_A.ip, sport: 36000, dport: 8080 });
    assert.equal(readIpv4(r.data).ethDst, POD_A.podMac);
    const entry = h.ct({ saddr: ROUTER.ip, daddr: POD_A.ip, sport: 36000, dport: 8080, proto: IpProto.TCP })!;
    assert.deepEqual([entry.srcIdentity, entry.revNatIndex, entry.natAddr, entry.natPort], [IDENTITY.HOST, ID.WEB, parseIp(VIP), 80]);

    // The backend's reply (bpf_lxc, from_container) gets the frontend back and goes to the stack.
    const lxc = await ProgramHarness.load(LXC_OBJECT);
    const lxcLb = new LbNode(lxc);
    try {
      installNode(lxc);
      lxcLb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.A.id] });
      const t = { saddr: ROUTER.ip, daddr: POD_A.ip, sport: 36000, dport: 8080, proto: IpProto.TCP };
      lxc.ctTcp.set(lxc.ctKey(t), entry);
      const reply = await lxc.run(FROM, tcpFrame({ ...fromA, src: POD_A.ip, dst: ROUTER.ip, sport: 8080, dport: 36000, flags: TcpFlag.SYN | TcpFlag.ACK }));
      assert.equal(reply.retval, TcAction.OK);
      assert.deepEqual(tuple(reply.data), { src: VIP, dst: ROUTER.ip, sport: 80, dport: 36000 });
    } finally {
      lxcLb.close();
      await lxc.close();
    }
  });

  it('moves the node\'s connection off a backend that left the service (bpf_host checks membership too)', async () => {
    h.addPolicy({ endpointId: POD_A.endpointId, identity: IDENTITY.HOST, egress: false, cookie: COOKIE.ALLOW });
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.A.id] });
    const t = { saddr: ROUTER.ip, daddr: VIP, sport: 36100, dport: 80, proto: IpProto.TCP };
    const syn = tcpFrame({ ...fromNode, src: ROUTER.ip, dst: VIP, sport: 36100, dport: 80, ttl: 63 });
    assert.equal(tuple((await h.run('tendril_from_host', syn)).data).dst, POD_A.ip);
    assert.equal(lb.serviceCt(t)!.backendId, BE.A.id);
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.REMOTE.id] });
    lb.removeMember(ID.WEB, BE.A.id);
    const ack = tcpFrame({ ...fromNode, src: ROUTER.ip, dst: VIP, sport: 36100, dport: 80, flags: TcpFlag.ACK, ttl: 63 });
    assert.equal(tuple((await h.run('tendril_from_host', ack)).data).dst, REMOTE_POD_IP);
    assert.equal(lb.serviceCt(t)!.backendId, BE.REMOTE.id);
    await h.takeEvents();
  });

  it('sends a connection to a backend off the node out by the FIB with its conntrack entry; no backend: DROP_NO_SERVICE', async () => {
    lb.addService({ id: ID.WEB, frontend: WEB, backends: [BE.REMOTE.id] });
    const r = await h.run('tendril_from_host', tcpFrame({ ...fromNode, src: ROUTER.ip, dst: VIP, sport: 36001, dport: 80 }));
    // The test runner's namespace has no route to the backend: a redirect where it has one, else FIB_LOOKUP_FAILED (the e2e proves the way out).
    assert.ok(r.retval === TcAction.REDIRECT || r.retval === TcAction.SHOT, `verdict ${r.retval}`);
    assert.deepEqual(tuple(r.data), { src: ROUTER.ip, dst: REMOTE_POD_IP, sport: 36001, dport: 8080 });
    await h.takeEvents();
    const entry = h.ct({ saddr: ROUTER.ip, daddr: REMOTE_POD_IP, sport: 36001, dport: 8080, proto: IpProto.TCP })!;
    assert.deepEqual([entry.srcIdentity, entry.dstIdentity, entry.revNatIndex], [IDENTITY.HOST, IDENTITY.REMOTE, ID.WEB]);

    lb.addService({ id: ID.DNS, frontend: DNS, backends: [] });
    assert.equal((await h.run('tendril_from_host', udpFrame({ ...fromNode, src: ROUTER.ip, dst: VIP, sport: 36002, dport: 53 }))).retval, TcAction.SHOT);
    const events = await h.takeEvents(1);
    assertEvents(events.filter((e) => e.type === DROP), [{ type: DROP, subtype: code('NO_SERVICE'), srcIdentity: IDENTITY.HOST, daddr: VIP }]);
  });
});
