// Fuzzes SNAT in bpf_netdev.o (tendril_to_netdev: masquerade; tendril_from_netdev:
// replies and ICMP errors back to the pod) with fast-check through
// BPF_PROG_TEST_RUN against the reference model of testing/snatModel.ts.
// Each run resets the maps: the device with the node address and the
// masquerade flag, the masquerade CIDRs, an ipcache with the cluster's
// addresses, SNAT port ranges of a few ports (collisions and exhaustion
// happen), a SNAT table of 16 entries or a roomy one (NAT_FULL happens),
// seeded mappings whose flows are live, reset (a second ago or just now), closed both ways,
// half-closed, expired or untracked (in or past the grace), mappings of a
// former node address, and conntrack entries of flows opened towards pods.
// Then it sends 4-14 generated packets — pod → outside (TCP with any flags,
// UDP, ICMP echo request/reply and other types, other protocols,
// fragments), pods' ICMP errors about replies they got, outside → node
// replies to mapped and unmapped ports, routers' ICMP errors about
// translated packets, any of them mutated (bit flips, truncation, fields) —
// and checks after each:
//   - verdict and drop reason are one of the model's outcomes (leave,
//     translate, NAT_UNSUPPORTED_PROTO, NAT_PORT_EXHAUSTED, NAT_FULL), and
//     only the matching counter moved;
//   - a translated frame is the input with the model's addresses and ports
//     written and nothing else changed; every checksum it carries (IP, L4,
//     ICMP, embedded IP and L4) still sums as it did (valid stays valid);
//     a masqueraded port is inside the ranges; a flow with a mapping keeps
//     its port; the source port is kept when the model says it is free;
//   - the SNAT table afterwards is the model's, and its invariants hold:
//     every EGRESS entry to the node address has its INGRESS entry pointing
//     back; no two of them share a reply tuple;
//   - a reply to a flow's mapped port reaches exactly that flow's source.
// TENDRIL_FUZZ_RUNS raises the runs, TENDRIL_FUZZ_SEED replays.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import { requireRoot } from '../../../test/support/root.js';
import { formatIp, parseIp, parsePrefix } from '../../netip/index.js';
import { TcAction } from '../kernel/bpf/index.js';
import { CtFlag, CtTimeout, DropReason, MapName, NatDirection, NatFlag, TrafficDirection } from './constants.js';
import { NO_NAT_CONFIG, type CtEntryValue } from './layout.js';
import { IDENTITY, NODE_IP, POD_A, POD_B, REMOTE_POD_IP, ROUTER, WORLD_IP } from './testing/fixtures.js';
import { mutate, mutationArb, testRunAccepts, type Mutation } from './testing/packetArbitraries.js';
import { fragKeyString, ipNum, numIp, tupleString } from './testing/packetModel.js';
import { icmpEcho, icmpError, IpProto, ipv4Datagram, ipv4Frame, TcpFlag, tcpSegment, udpDatagram } from './testing/packets.js';
import { NETDEV_OBJECT, ProgramHarness } from './testing/programHarness.js';
import { MASQUERADE_CIDRS, SnatNode } from './testing/snatNode.js';
import { translationViolations } from './testing/rewriteCheck.js';
import { expectEgress, expectIngress, natKeyString, natPortRanges, readPacket, SnatTable, type NatKeyN, type NatValN, type Outcome, type SnatWorld } from './testing/snatModel.js';

requireRoot('the SNAT fuzz test');

const RUNS = Number(process.env.TENDRIL_FUZZ_RUNS ?? 200);
const SEED = Number(process.env.TENDRIL_FUZZ_SEED ?? Date.now() % 2 ** 31);

const TO_NETDEV = 'tendril_to_netdev';
const FROM_NETDEV = 'tendril_from_netdev';
type Program = typeof TO_NETDEV | typeof FROM_NETDEV;
const { OK, SHOT } = TcAction;
const code = (r: keyof typeof DropReason): number => -DropReason[r].code;
const SECOND = 1_000_000_000n;
const HOUR = 3600n * SECOND;
const CLOSING = BigInt(CtTimeout.TCP_CLOSING) * SECOND;

// ---- the node ---------------------------------------------------------------------

const NODE = ipNum(NODE_IP);
/** A node address of before: mappings to it are stale (the device's address changed). */
const FORMER_NODE_IP = '192.0.2.99';
const REMOTE_NODE_IP = '192.168.77.6';
const IDENTITY_REMOTE_NODE = 6;
/** A pod of another node in the masquerade CIDRs that the ipcache does not know: its traffic is masqueraded like a local pod's. */
const OTHER_POD_IP = '10.201.0.7';
const ROUTER_OUTSIDE = '192.0.2.1';
/** Addresses ipcache_is_cluster4 says are the cluster's: traffic to them keeps its source. */
const CLUSTER = new Set([NODE_IP, ROUTER.ip, REMOTE_POD_IP, REMOTE_NODE_IP].map(ipNum));

function inMasqueradeCidrs(addr: number): boolean {
  return MASQUERADE_CIDRS.some((c) => {
    const [net, len] = c.split('/') as [string, string];
    const mask = (0xffffffff << (32 - Number(len))) >>> 0;
    return ((addr & mask) >>> 0) === ((ipNum(net) & mask) >>> 0);
  });
}

/** SNAT table sizes: one a few mappings fill (NAT_FULL), one nothing fills here. */
const SMALL_TABLE = 10;
const LARGE_TABLE = 4096;

// ---- what a run is made of --------------------------------------------------------

type Range = { min: number; max: number };
/** The config's ranges: two of three ports, one of two, two near the built-in range, none (the built-in range). */
const CONFIGS: Range[][] = [
  [{ min: 2000, max: 2002 }, { min: 5000, max: 5002 }],
  [{ min: 2000, max: 2001 }, { min: 0, max: 0 }],
  [{ min: 61000, max: 61003 }, { min: 62000, max: 62000 }],
  [{ min: 0, max: 0 }, { min: 0, max: 0 }],
];

/** A port: the n-th of a config range (the source port SNAT may keep), or a fixed one. */
type PortSpec = { range: 0 | 1; n: number } | { fixed: number };
const portSpecArb: fc.Arbitrary<PortSpec> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ range: fc.constantFrom<0 | 1>(0, 1), n: fc.nat(3) }) },
  { weight: 3, arbitrary: fc.record({ fixed: fc.constantFrom(40000, 40001, 40002, 5353, 1024) }) },
  { weight: 1, arbitrary: fc.record({ fixed: fc.nat(65535) }) },
);

function resolvePort(spec: PortSpec, ranges: readonly Range[]): number {
  if ('fixed' in spec) return spec.fixed;
  const r = ranges[spec.range] ?? ranges[0]!;
  return r.min + (spec.n % (r.max - r.min + 1));
}

interface FlowSpec {
  src: string;
  dst: string;
  sport: PortSpec;
  dport: number;
  proto: number;
}

/** A flow of the run: mostly pods to the world, some to the cluster, some not a pod's. */
const flowArb: fc.Arbitrary<FlowSpec> = fc.record({
  src: fc.oneof({ weight: 8, arbitrary: fc.constantFrom(POD_A.ip, POD_B.ip) }, { weight: 1, arbitrary: fc.constantFrom(OTHER_POD_IP, NODE_IP, '198.51.100.77') }),
  dst: fc.oneof({ weight: 8, arbitrary: fc.constant(WORLD_IP) }, { weight: 3, arbitrary: fc.constant('203.0.113.7') }, { weight: 1, arbitrary: fc.constantFrom(REMOTE_POD_IP, REMOTE_NODE_IP, POD_B.ip, NODE_IP) }),
  sport: portSpecArb,
  dport: fc.constantFrom(80, 80, 80, 53, 443),
  proto: fc.constantFrom(IpProto.TCP, IpProto.TCP, IpProto.TCP, IpProto.UDP, IpProto.UDP, IpProto.ICMP),
});

/** A flow's tuple: an ICMP echo's identifier is its source port, its destination port 0 (as conntrack and SNAT key it). */
interface Tuple {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
}

function tupleOf(f: FlowSpec, ranges: readonly Range[]): Tuple {
  return { saddr: f.src, daddr: f.dst, sport: resolvePort(f.sport, ranges), dport: f.proto === IpProto.ICMP ? 0 : f.dport, proto: f.proto };
}

const HOLDER_STATES = ['live', 'reset', 'reset-just-now', 'closed', 'half-closed', 'expired', 'untracked-recent', 'untracked-old'] as const;
type HolderState = (typeof HOLDER_STATES)[number];

/** A mapping the run starts with: of a flow of the run, or of a filler flow of another pod to the same destination. */
interface SeedMapping {
  flow: number;
  filler: boolean;
  port: PortSpec;
  state: HolderState;
  formerAddress: boolean;
}
const seedArb: fc.Arbitrary<SeedMapping> = fc.record({
  flow: fc.nat(7),
  filler: fc.boolean(),
  port: fc.oneof({ weight: 6, arbitrary: fc.record({ range: fc.constantFrom<0 | 1>(0, 1), n: fc.nat(3) }) }, { weight: 1, arbitrary: fc.record({ fixed: fc.constantFrom(40000, 61500) }) }),
  state: fc.oneof({ weight: 4, arbitrary: fc.constant<HolderState>('live') }, { weight: 5, arbitrary: fc.constantFrom(...HOLDER_STATES) }),
  formerAddress: fc.oneof({ weight: 8, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
});

/** A flow opened from outside towards a pod (conntrack holds it reversed): the pod's packets of it are answers. */
interface InboundSeed {
  flow: number;
  /** The flow's own protocol, or another one (answered by the pod with that protocol). */
  proto: number | 'flow';
  live: boolean;
}
const inboundArb: fc.Arbitrary<InboundSeed> = fc.record({ flow: fc.nat(7), proto: fc.constantFrom<number | 'flow'>('flow', 'flow', IpProto.GRE, IpProto.SCTP), live: fc.boolean() });

const OTHER_PROTOS = [IpProto.GRE, IpProto.SCTP, 4, 50];

type Action =
  | { kind: 'out'; flow: number; shape: 'l4' | 'echo-reply' | 'icmp-other' | 'other' | 'frag-first' | 'frag-later' | 'udp-no-csum'; tcpFlags: number; otherProto: number; fragId: number; payload: number; mutations: Mutation[] }
  | { kind: 'err-out'; flow: number; type: number; code: number; embed: 'full' | 'min' | 'cut'; udpNoCsum: boolean; mutations: Mutation[] }
  | { kind: 'in'; flow: number; port: 'mapped' | PortSpec; shape: 'l4' | 'echo-request' | 'frag-first' | 'frag-later'; fragId: number; mutations: Mutation[] }
  | { kind: 'err-in'; flow: number; port: 'mapped' | PortSpec; type: number; fromPeer: boolean; embed: 'full' | 'min' | 'cut'; mutations: Mutation[] };

const mutationsArb = fc.oneof({ weight: 5, arbitrary: fc.constant<Mutation[]>([]) }, { weight: 1, arbitrary: fc.array(mutationArb, { minLength: 1, maxLength: 2 }) });
const replyPortArb = fc.oneof({ weight: 4, arbitrary: fc.constant<'mapped'>('mapped') }, { weight: 1, arbitrary: portSpecArb });
const tcpFlagsArb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(TcpFlag.SYN, TcpFlag.ACK, TcpFlag.ACK | TcpFlag.PSH, TcpFlag.FIN | TcpFlag.ACK, TcpFlag.RST, TcpFlag.RST | TcpFlag.ACK) },
  { weight: 1, arbitrary: fc.nat(255) },
);

const actionArb: fc.Arbitrary<Action> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('out' as const),
      flow: fc.nat(7),
      shape: fc.oneof({ weight: 10, arbitrary: fc.constant('l4' as const) }, { weight: 1, arbitrary: fc.constantFrom('echo-reply' as const, 'icmp-other' as const, 'other' as const, 'frag-first' as const, 'frag-later' as const, 'udp-no-csum' as const) }),
      tcpFlags: tcpFlagsArb,
      otherProto: fc.constantFrom(...OTHER_PROTOS),
      fragId: fc.constantFrom(0x77, 0x78),
      payload: fc.constantFrom(0, 0, 5, 33),
      mutations: mutationsArb,
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('err-out' as const), flow: fc.nat(7), type: fc.constantFrom(3, 11, 12), code: fc.nat(15), embed: fc.constantFrom('full' as const, 'min' as const, 'cut' as const), udpNoCsum: fc.boolean(), mutations: mutationsArb }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('in' as const), flow: fc.nat(7), port: replyPortArb, shape: fc.oneof({ weight: 6, arbitrary: fc.constant('l4' as const) }, { weight: 1, arbitrary: fc.constantFrom('echo-request' as const, 'frag-first' as const, 'frag-later' as const) }), fragId: fc.constantFrom(0x77, 0x78), mutations: mutationsArb }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('err-in' as const), flow: fc.nat(7), port: replyPortArb, type: fc.constantFrom(3, 11, 12), fromPeer: fc.boolean(), embed: fc.constantFrom('full' as const, 'min' as const, 'cut' as const), mutations: mutationsArb }) },
);

interface RunInput {
  config: number;
  crowd: boolean;
  small: boolean;
  flows: FlowSpec[];
  seeds: SeedMapping[];
  inbound: InboundSeed[];
  actions: Action[];
}

const runArb: fc.Arbitrary<RunInput> = fc.record({
  config: fc.oneof({ weight: 4, arbitrary: fc.constant(0) }, { weight: 4, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.constant(2) }, { weight: 1, arbitrary: fc.constant(3) }),
  small: fc.boolean(),
  crowd: fc.boolean(),
  flows: fc.array(flowArb, { minLength: 2, maxLength: 8 }),
  seeds: fc.array(seedArb, { maxLength: 10 }),
  inbound: fc.array(inboundArb, { maxLength: 3 }),
  actions: fc.array(actionArb, { minLength: 4, maxLength: 14 }),
});

// ---- the harness ------------------------------------------------------------------

/** The conntrack entry of a pod's flow in a holder state (undefined: untracked). */
function holderEntry(state: HolderState, now: bigint): CtEntryValue | undefined {
  const base: CtEntryValue = {
    expiresNs: now + HOUR,
    packets: 3n,
    bytes: 180n,
    srcIdentity: IDENTITY.A,
    dstIdentity: IDENTITY.WORLD,
    srcEndpoint: POD_A.endpointId,
    dstEndpoint: 0,
    revNatIndex: 0,
    tcpFlags: TcpFlag.SYN | TcpFlag.ACK,
    flags: CtFlag.REPLY_SEEN,
    backendId: 0,
    natAddr: parseIp('0.0.0.0'),
    natPort: 0,
  };
  switch (state) {
    case 'live':
      return base;
    // A closed flow's deadline is its last packet plus the closing lifetime: a second ago, or just now.
    case 'reset':
      return { ...base, expiresNs: now + CLOSING - SECOND, tcpFlags: base.tcpFlags | TcpFlag.RST, flags: CtFlag.REPLY_SEEN | CtFlag.CLOSING };
    case 'reset-just-now':
      return { ...base, expiresNs: now + CLOSING, tcpFlags: base.tcpFlags | TcpFlag.RST, flags: CtFlag.REPLY_SEEN | CtFlag.CLOSING };
    case 'closed':
      return { ...base, expiresNs: now + CLOSING - SECOND, tcpFlags: base.tcpFlags | TcpFlag.FIN, flags: CtFlag.REPLY_SEEN | CtFlag.CLOSING | CtFlag.FIN_ORIGINAL | CtFlag.FIN_REPLY };
    case 'half-closed':
      return { ...base, tcpFlags: base.tcpFlags | TcpFlag.FIN, flags: CtFlag.REPLY_SEEN | CtFlag.CLOSING | CtFlag.FIN_ORIGINAL };
    case 'expired':
      return { ...base, expiresNs: now - SECOND };
    case 'untracked-recent':
    case 'untracked-old':
      return undefined;
  }
}

class NatFuzzHarness {
  private constructor(
    readonly h: ProgramHarness,
    readonly node: SnatNode,
    readonly size: number,
  ) {}

  static async load(size: number): Promise<NatFuzzHarness> {
    const h = await ProgramHarness.load(NETDEV_OBJECT, { [MapName.SNAT]: size });
    try {
      const node = new SnatNode(h);
      node.addDevice();
      node.addMasqueradeCidrs();
      h.addIpcache(NODE_IP, IDENTITY.HOST);
      h.addIpcache(ROUTER.ip, IDENTITY.HOST);
      h.addIpcache(REMOTE_NODE_IP, IDENTITY_REMOTE_NODE);
      h.ipcache.set(parsePrefix(`${REMOTE_POD_IP}/32`), { identity: IDENTITY.REMOTE, tunnelIp4: ipNum(REMOTE_NODE_IP), flags: 0 });
      h.addIpcache('203.0.113.0/24', IDENTITY.CIDR_24);
      return new NatFuzzHarness(h, node, size);
    } catch (err) {
      await h.close();
      throw err;
    }
  }

  async clear(): Promise<void> {
    for (const m of [this.node.snat, this.h.ctTcp, this.h.ctAny, this.h.frag] as unknown as Array<{ keys(): AsyncGenerator<unknown>; delete(k: unknown): boolean }>) {
      const keys: unknown[] = [];
      for await (const k of m.keys()) keys.push(k);
      for (const k of keys) m.delete(k);
    }
  }

  setPorts(ranges: readonly Range[]): void {
    this.h.config.set(0, { traceLevel: 0, flags: 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG, natPorts: ranges.map((r) => ({ ...r })) });
  }

  ctSet(t: Tuple, e: CtEntryValue): void {
    (t.proto === IpProto.TCP ? this.h.ctTcp : this.h.ctAny).set(this.h.ctKey(t), e);
  }

  async table(): Promise<SnatTable> {
    const t = new SnatTable(this.size);
    for await (const [k, v] of this.node.snat.entries()) {
      const key: NatKeyN = { saddr: ipNum(formatIp(k.saddr)), daddr: ipNum(formatIp(k.daddr)), sport: k.sport, dport: k.dport, proto: k.proto, dir: k.dir };
      t.entries.set(natKeyString(key), [key, { createdNs: v.createdNs, toAddr: ipNum(formatIp(v.toAddr)), toPort: v.toPort, flags: v.flags }]);
    }
    return t;
  }

  async conntrack(): Promise<Map<string, CtEntryValue>> {
    const out = new Map<string, CtEntryValue>();
    for (const m of [this.h.ctTcp, this.h.ctAny]) {
      for await (const [k, v] of m.entries()) out.set(tupleString(ipNum(formatIp(k.saddr)), ipNum(formatIp(k.daddr)), k.sport, k.dport, k.proto), v);
    }
    return out;
  }

  async fragments(): Promise<Map<string, { sport: number; dport: number }>> {
    const out = new Map<string, { sport: number; dport: number }>();
    for await (const [k, v] of this.h.frag.entries()) out.set(fragKeyString(k.saddr, k.daddr, k.id, k.proto), v);
    return out;
  }

  async metricTotals(): Promise<Map<string, bigint>> {
    const out = new Map<string, bigint>();
    for await (const [k, v] of this.h.metrics.entries()) out.set(`${k.reason}/${k.direction}`, v.reduce((a, c) => a + c.packets, 0n));
    return out;
  }
}

/** The run's flows as tuples, with the seeded state written into the maps. */
async function reset(x: NatFuzzHarness, input: RunInput): Promise<{ ranges: Range[]; flows: Tuple[] }> {
  await x.clear();
  const config = CONFIGS[input.config]!;
  x.setPorts(config);
  const ranges = natPortRanges(config);
  // A crowd: every flow to the first one's destination, so they contend for its ports.
  const first = input.flows[0]!;
  const flows = input.flows.map((f) => tupleOf(input.crowd ? { ...f, dst: first.dst, dport: first.dport, proto: first.proto } : f, ranges));
  const now = process.hrtime.bigint();
  const masqueraded = (t: Tuple): boolean => inMasqueradeCidrs(ipNum(t.saddr)) && !inMasqueradeCidrs(ipNum(t.daddr)) && !CLUSTER.has(ipNum(t.daddr));
  let seeded = 0;
  for (const [i, s] of input.seeds.entries()) {
    const base = flows[s.flow % flows.length]!;
    const t: Tuple = s.filler ? { ...base, saddr: `10.200.0.${100 + i}`, sport: 30000 + i } : base;
    if (!masqueraded(t)) continue;
    const natAddr = s.formerAddress ? FORMER_NODE_IP : NODE_IP;
    const port = resolvePort(s.port, ranges);
    // A consistent table: one mapping per tuple, one holder per reply tuple.
    if (x.node.egress(t) || x.node.ingress(t, natAddr, port) || seeded + 2 > x.size) continue;
    seeded += 2;
    x.node.addMapping(t, natAddr, port, NatFlag.MASQUERADE);
    const createdNs = s.state === 'untracked-recent' ? now : now - HOUR;
    for (const key of [x.node.egressKey(t), x.node.ingressKey(t, natAddr, port)]) x.node.snat.set(key, { ...x.node.snat.get(key)!, createdNs });
    const e = holderEntry(s.state, now);
    if (e) x.ctSet(t, e);
  }
  for (const s of input.inbound) {
    const f = flows[s.flow % flows.length]!;
    const proto = s.proto === 'flow' ? f.proto : s.proto;
    // The pod's answer (sport, dport) finds conntrack's entry of the flow it answers at (daddr, saddr, dport, sport).
    const ports = proto === IpProto.ICMP ? { sport: f.sport, dport: 0 } : proto === IpProto.GRE ? { sport: 0, dport: 0 } : { sport: f.dport, dport: f.sport };
    const e = holderEntry('live', now)!;
    x.ctSet({ saddr: f.daddr, daddr: f.saddr, ...ports, proto }, { ...e, srcEndpoint: 0, dstEndpoint: POD_A.endpointId, expiresNs: s.live ? now + HOUR : now - SECOND });
  }
  return { ranges, flows };
}

// ---- frames from actions ---------------------------------------------------------

const outMacs = { srcMac: '0a:00:00:00:ee:01', dstMac: '0a:00:00:00:ee:fe' };
const inMacs = { srcMac: '0a:00:00:00:ee:fe', dstMac: '0a:00:00:00:ee:01' };

/** An L4 datagram of `proto` from src:sport to dst:dport (ICMP: an echo request, or reply, with `id`). */
function l4Payload(proto: number, src: string, dst: string, sport: number, dport: number, o: { flags?: number; payload?: Buffer; echoReply?: boolean; id?: number } = {}): Buffer {
  const payload = o.payload ?? Buffer.alloc(0);
  if (proto === IpProto.TCP) return tcpSegment({ src, dst, sport, dport, flags: o.flags ?? TcpFlag.SYN, payload });
  if (proto === IpProto.UDP) return udpDatagram({ src, dst, sport, dport, payload });
  return icmpEcho({ id: o.id ?? sport, reply: o.echoReply ?? false, payload });
}

function embedLength(datagram: Buffer, embed: 'full' | 'min' | 'cut'): number {
  return embed === 'full' ? datagram.length : embed === 'min' ? 28 : 22;
}

/** The port an outside packet of flow `f` comes back to: its mapping's (to the node address), else the spec's. */
function replyPort(port: 'mapped' | PortSpec, f: Tuple, table: SnatTable, ranges: readonly Range[]): number {
  if (port !== 'mapped') return resolvePort(port, ranges);
  const m = table.get({ saddr: ipNum(f.saddr), daddr: ipNum(f.daddr), sport: f.sport, dport: f.dport, proto: f.proto, dir: NatDirection.EGRESS });
  return m && m.toAddr === NODE ? m.toPort : ranges[0]!.min;
}

function buildFrame(a: Action, f: Tuple, table: SnatTable, ranges: readonly Range[]): { program: Program; frame: Buffer } {
  switch (a.kind) {
    case 'out': {
      const l3 = { ...outMacs, src: f.saddr, dst: f.daddr };
      const payload = Buffer.alloc(a.payload, 0x5a);
      let frame: Buffer;
      switch (a.shape) {
        case 'l4':
          frame = ipv4Frame({ ...l3, proto: f.proto, payload: l4Payload(f.proto, f.saddr, f.daddr, f.sport, f.dport, { flags: a.tcpFlags, payload }) });
          break;
        case 'echo-reply':
          frame = ipv4Frame({ ...l3, proto: IpProto.ICMP, payload: icmpEcho({ id: f.sport, reply: true, payload }) });
          break;
        case 'icmp-other': {
          const m = Buffer.alloc(20);
          m[0] = 13; // timestamp request: no error, no echo
          frame = ipv4Frame({ ...l3, proto: IpProto.ICMP, payload: m });
          break;
        }
        case 'other': {
          const p = Buffer.alloc(16);
          p.writeUInt16BE(f.sport, 0);
          p.writeUInt16BE(f.dport, 2);
          frame = ipv4Frame({ ...l3, proto: a.otherProto, payload: p });
          break;
        }
        case 'frag-first':
          frame = ipv4Frame({ ...l3, proto: f.proto, id: a.fragId, moreFragments: true, payload: l4Payload(f.proto, f.saddr, f.daddr, f.sport, f.dport, { flags: a.tcpFlags, payload: Buffer.alloc(24, 1) }).subarray(0, 24) });
          break;
        case 'frag-later':
          frame = ipv4Frame({ ...l3, proto: f.proto, id: a.fragId, fragmentOffset: 24, payload: Buffer.alloc(16, 0xab) });
          break;
        case 'udp-no-csum': {
          const d = udpDatagram({ src: f.saddr, dst: f.daddr, sport: f.sport, dport: f.dport || 53, payload });
          d.writeUInt16BE(0, 6);
          frame = ipv4Frame({ ...l3, proto: IpProto.UDP, payload: d });
          break;
        }
      }
      return { program: TO_NETDEV, frame };
    }
    case 'err-out': {
      // The reply as the pod got it (translated back), then the pod's error about it.
      const reply = l4Payload(f.proto, f.daddr, f.saddr, f.dport, f.sport, { flags: TcpFlag.SYN | TcpFlag.ACK, payload: Buffer.from('answer'), echoReply: true, id: f.sport });
      if (a.udpNoCsum && f.proto === IpProto.UDP) reply.writeUInt16BE(0, 6);
      const datagram = ipv4Datagram({ src: f.daddr, dst: f.saddr, proto: f.proto, payload: reply });
      const frame = ipv4Frame({ ...outMacs, src: f.saddr, dst: f.daddr, proto: IpProto.ICMP, payload: icmpError(a.type, a.code, datagram, embedLength(datagram, a.embed)) });
      return { program: TO_NETDEV, frame };
    }
    case 'in': {
      const port = replyPort(a.port, f, table, ranges);
      const l3 = { ...inMacs, src: f.daddr, dst: NODE_IP };
      let frame: Buffer;
      switch (a.shape) {
        case 'l4':
          frame = ipv4Frame({ ...l3, proto: f.proto, payload: l4Payload(f.proto, f.daddr, NODE_IP, f.dport, port, { flags: TcpFlag.SYN | TcpFlag.ACK, echoReply: true, id: port, payload: Buffer.from('reply') }) });
          break;
        case 'echo-request':
          frame = ipv4Frame({ ...l3, proto: IpProto.ICMP, payload: icmpEcho({ id: port }) });
          break;
        case 'frag-first':
          frame = ipv4Frame({ ...l3, proto: f.proto, id: a.fragId, moreFragments: true, payload: l4Payload(f.proto, f.daddr, NODE_IP, f.dport, port, { flags: TcpFlag.ACK, echoReply: true, id: port, payload: Buffer.alloc(24, 2) }).subarray(0, 24) });
          break;
        case 'frag-later':
          frame = ipv4Frame({ ...l3, proto: f.proto, id: a.fragId, fragmentOffset: 24, payload: Buffer.alloc(16, 0xcd) });
          break;
      }
      return { program: FROM_NETDEV, frame };
    }
    case 'err-in': {
      // The packet as the node sent it (translated), then an error about it from a router or the peer.
      const port = replyPort(a.port, f, table, ranges);
      const sent = ipv4Datagram({ src: NODE_IP, dst: f.daddr, proto: f.proto, payload: l4Payload(f.proto, NODE_IP, f.daddr, port, f.dport, { id: port, payload: Buffer.from('query') }) });
      const frame = ipv4Frame({ ...inMacs, src: a.fromPeer ? f.daddr : ROUTER_OUTSIDE, dst: NODE_IP, proto: IpProto.ICMP, payload: icmpError(a.type, a.type === 3 ? 3 : 0, sent, embedLength(sent, a.embed)) });
      return { program: FROM_NETDEV, frame };
    }
  }
}

// ---- checks -----------------------------------------------------------------------

/**
 * The SNAT table's invariants: every EGRESS entry to the node address and a port of the ranges has its reply side
 * pointing back, and no two share one. Others are stale (the node's address or the ranges changed): the flow's next
 * packet replaces them, and a failure to may leave them without a reply side.
 */
function tableInvariants(t: SnatTable, ranges: readonly Range[]): string[] {
  const v: string[] = [];
  const replies = new Map<string, string>();
  for (const [s, [k, e]] of t.entries) {
    if (k.dir !== NatDirection.EGRESS || e.toAddr !== NODE || !ranges.some((r) => e.toPort >= r.min && e.toPort <= r.max)) continue;
    const r = t.get({ saddr: k.daddr, daddr: e.toAddr, sport: k.dport, dport: e.toPort, proto: k.proto, dir: NatDirection.INGRESS });
    if (!r) v.push(`${s} → ${numIp(e.toAddr)}:${e.toPort} has no INGRESS entry`);
    else if (r.toAddr !== k.saddr || r.toPort !== k.sport) v.push(`${s} → ${numIp(e.toAddr)}:${e.toPort}: its INGRESS entry points to ${numIp(r.toAddr)}:${r.toPort}`);
    const reply = tupleString(k.daddr, e.toAddr, k.dport, e.toPort, k.proto);
    const other = replies.get(reply);
    if (other) v.push(`${s} and ${other} both map to ${reply}`);
    replies.set(reply, s);
  }
  return v;
}

/** Why the table after the packet is not the model's; empty when it is. Fresh entries were written between t0 and t1. */
function tableViolations(actual: SnatTable, want: SnatTable, t0: bigint, t1: bigint): string[] {
  const v: string[] = [];
  const show = (e: NatValN): string => `${numIp(e.toAddr)}:${e.toPort} flags ${e.flags}`;
  for (const [s, [, w]] of want.entries) {
    const a = actual.entries.get(s)?.[1];
    if (!a) v.push(`${s} missing (the model has → ${show(w)})`);
    else if (a.toAddr !== w.toAddr || a.toPort !== w.toPort || a.flags !== w.flags) v.push(`${s} → ${show(a)}, the model says → ${show(w)}`);
    else if (w.fresh ? a.createdNs < t0 || a.createdNs > t1 : a.createdNs !== w.createdNs) v.push(`${s} created_ns ${a.createdNs}, the model says ${w.fresh ? `between ${t0} and ${t1}` : w.createdNs}`);
  }
  for (const [s, [, a]] of actual.entries) if (!want.entries.has(s)) v.push(`${s} → ${show(a)} is not in the model's table`);
  return v;
}

const describeOutcome = (o: Outcome): string => (o.action === 'drop' ? `drop ${o.reason} (${o.why})` : `${o.action}${o.port !== undefined ? ` port ${o.port}` : ''} (${o.why})`);

function summarize(outcomes: Outcome[]): string {
  const shown = outcomes.slice(0, 4).map(describeOutcome);
  return outcomes.length > 4 ? `${shown.join('; ')}; … ${outcomes.length} outcomes` : shown.join('; ');
}

interface PacketRun {
  program: Program;
  frame: Buffer;
  action: Action;
  flow: Tuple;
  before: SnatTable;
  after: SnatTable;
  retval: number;
  out: Buffer;
  metrics: Array<[string, bigint]>;
  t0: bigint;
  t1: bigint;
  world: SnatWorld;
}

/** Checks one packet against the model; returns the violations and the outcome name it matched. */
function checkPacket(p: PacketRun, ranges: readonly Range[]): { violations: string[]; outcome?: Outcome } {
  const outcomes = (p.program === TO_NETDEV ? expectEgress : expectIngress)(p.frame, p.world, p.before);
  const direction = p.program === TO_NETDEV ? TrafficDirection.EGRESS : TrafficDirection.INGRESS;
  const v: string[] = [];
  const counted = p.metrics.map(([k]) => k);
  let candidates: Outcome[];
  if (p.retval === SHOT) {
    const reasons = counted.filter((k) => k.endsWith(`/${direction}`) && !k.startsWith('0/'));
    if (counted.length !== 1 || reasons.length !== 1) v.push(`a drop moved counters ${JSON.stringify(counted)}, not one of its reason`);
    const r = Number(reasons[0]?.split('/')[0]);
    candidates = outcomes.filter((o) => o.action === 'drop' && o.reason === r);
    if (candidates.length === 0) v.push(`dropped (reason ${r}); the model says ${summarize(outcomes)}`);
  } else if (p.retval !== OK) {
    return { violations: [`verdict ${p.retval} is neither OK nor SHOT`] };
  } else if (p.out.equals(p.frame)) {
    if (counted.length !== 0) v.push(`a packet left alone moved counters ${JSON.stringify(counted)}`);
    candidates = outcomes.filter((o) => o.action === 'leave');
    if (candidates.length === 0) v.push(`left alone; the model says ${summarize(outcomes)}`);
  } else {
    if (counted.length !== 1 || counted[0] !== `0/${direction}`) v.push(`a translated packet moved counters ${JSON.stringify(counted)}, not 0/${direction}`);
    const ip = readPacket(p.frame, p.world.frags)!.ip;
    const tried = outcomes.filter((o) => o.action === 'translate').map((o) => ({ o, why: translationViolations(p.frame, p.out, ip, o.rewrite!) }));
    candidates = tried.filter((t) => t.why.length === 0).map((t) => t.o);
    if (tried.length === 0) v.push(`translated to ${p.out.subarray(14).toString('hex')}; the model says ${summarize(outcomes)}`);
    else if (candidates.length === 0) v.push(`translated wrongly: ${tried[0]!.why.join('; ')} (the model: ${summarize(tried.map((t) => t.o))})`);
  }
  // The table: the model's after one of the matching outcomes, and its invariants in any case.
  const tv = candidates.map((o) => ({ o, why: tableViolations(p.after, o.table, p.t0, p.t1) }));
  const match = tv.find((t) => t.why.length === 0);
  if (candidates.length > 0 && !match) v.push(`SNAT table: ${tv[0]!.why.slice(0, 4).join('; ')} (outcome ${describeOutcome(tv[0]!.o)})`);
  v.push(...tableInvariants(p.after, ranges).map((s) => `invariant: ${s}`));

  // The properties the model encodes, said once more in their own words.
  const ip = readPacket(p.frame, p.world.frags)?.ip;
  if (p.program === TO_NETDEV && ip && p.retval === OK && !p.out.equals(p.frame) && ip.proto !== IpProto.ICMP && (ip.fragOff & 0x1fff) === 0) {
    const sport = p.out.readUInt16BE(ip.l4Off);
    if (!ranges.some((r) => sport >= r.min && sport <= r.max)) v.push(`masqueraded with port ${sport}, outside the ranges ${JSON.stringify(ranges)}`);
    const mine = p.before.get({ saddr: ip.saddr, daddr: ip.daddr, sport: p.frame.readUInt16BE(ip.l4Off), dport: p.frame.readUInt16BE(ip.l4Off + 2), proto: ip.proto, dir: NatDirection.EGRESS });
    const back = mine && p.before.get({ saddr: ip.daddr, daddr: mine.toAddr, sport: p.frame.readUInt16BE(ip.l4Off + 2), dport: mine.toPort, proto: ip.proto, dir: NatDirection.INGRESS });
    const live = mine && ranges.some((r) => mine.toPort >= r.min && mine.toPort <= r.max);
    if (mine && live && mine.toAddr === NODE && back && back.toAddr === ip.saddr && sport !== mine.toPort) v.push(`the flow's mapping holds port ${mine.toPort}, the packet left with ${sport}`);
  }
  if (p.action.kind === 'in' && p.action.port === 'mapped' && p.action.mutations.length === 0 && ip && p.retval === OK && (ip.fragOff & 0x1fff) === 0 && ip.proto !== IpProto.ICMP) {
    const f = p.flow;
    const m = p.before.get({ saddr: ipNum(f.saddr), daddr: ipNum(f.daddr), sport: f.sport, dport: f.dport, proto: f.proto, dir: NatDirection.EGRESS });
    const dport = p.frame.readUInt16BE(ip.l4Off + 2);
    // A mapping's port outside the ranges (the config changed since) is no longer SNAT's: its replies are left to the stack.
    const inRanges = ranges.some((r) => dport >= r.min && dport <= r.max);
    if (inRanges && m && m.toAddr === NODE && m.toPort === dport && ip.saddr === ipNum(f.daddr) && p.frame.readUInt16BE(ip.l4Off) === f.dport && tableInvariants(p.before, ranges).length === 0) {
      const to = `${numIp(p.out.readUInt32BE(30))}:${p.out.readUInt16BE(ip.l4Off + 2)}`;
      if (to !== `${f.saddr}:${f.sport}`) v.push(`a reply to ${f.saddr}:${f.sport}'s port ${dport} went to ${to}`);
    }
  }
  return { violations: v, ...(match ? { outcome: match.o } : {}) };
}

// ---- the property ---------------------------------------------------------------

const harnesses = new Map<number, NatFuzzHarness>();
async function harness(size: number): Promise<NatFuzzHarness> {
  let x = harnesses.get(size);
  if (!x) harnesses.set(size, (x = await NatFuzzHarness.load(size)));
  return x;
}

/** What the model expected of the packets run: shows which paths the runs reached. */
const outcomeCounts = new Map<string, number>();
let refused = 0;

function countOutcome(kind: Action['kind'], o: Outcome | undefined): void {
  const name = `${kind} ${o ? (o.action === 'drop' ? `drop ${o.reason}` : o.action) : 'violation'}`;
  outcomeCounts.set(name, (outcomeCounts.get(name) ?? 0) + 1);
}

async function runPackets(input: RunInput): Promise<string[]> {
  const x = await harness(input.small ? SMALL_TABLE : LARGE_TABLE);
  const { ranges, flows } = await reset(x, input);
  const violations: string[] = [];
  let table = await x.table();
  const seeded = tableInvariants(table, ranges);
  if (seeded.length > 0) return [`the seeded table breaks the invariants: ${seeded.join('; ')}`];
  for (const [n, action] of input.actions.entries()) {
    const flow = flows[action.flow % flows.length]!;
    const built = buildFrame(action, flow, table, ranges);
    const frame = action.mutations.reduce((f, m) => mutate(f, m), built.frame);
    if (!testRunAccepts(frame)) {
      refused++;
      continue;
    }
    const ct = await x.conntrack();
    const frags = await x.fragments();
    const metricsBefore = await x.metricTotals();
    const t0 = process.hrtime.bigint();
    const r = await x.h.run(built.program, frame);
    const t1 = process.hrtime.bigint();
    const after = await x.table();
    const metricsAfter = await x.metricTotals();
    const metrics = [...metricsAfter].filter(([k, c]) => c !== (metricsBefore.get(k) ?? 0n));
    const world: SnatWorld = {
      nodeAddr: NODE,
      ranges,
      masquerade: inMasqueradeCidrs,
      cluster: (a) => CLUSTER.has(a),
      ct,
      frags,
      now: t0,
    };
    const observed = { program: built.program, frame, action, flow, before: table, after, retval: r.retval, out: r.data, metrics, t0, t1 };
    let { violations: v, outcome } = checkPacket({ ...observed, world }, ranges);
    // The program's clock read somewhere in [t0, t1]: a closed flow's port that turned free for reuse in between may go either way.
    if (v.length > 0) {
      const late = checkPacket({ ...observed, world: { ...world, now: t1 } }, ranges);
      if (late.violations.length === 0) ({ violations: v, outcome } = late);
    }
    countOutcome(action.kind, outcome);
    for (const s of v) violations.push(`packet ${n} (${action.kind}${action.kind === 'out' || action.kind === 'in' ? ` ${action.shape}` : ''}${action.mutations.length ? ' mutated' : ''} of ${tupleString(ipNum(flow.saddr), ipNum(flow.daddr), flow.sport, flow.dport, flow.proto)}, ${frame.toString('hex')}): ${s}`);
    if (v.length > 0) break;
    table = after;
  }
  return violations;
}

const show = (i: RunInput): string => `config ${JSON.stringify(CONFIGS[i.config])}, table ${i.small ? SMALL_TABLE : LARGE_TABLE}${i.crowd ? ', a crowd' : ''}\n  flows ${JSON.stringify(i.flows)}\n  seeds ${JSON.stringify(i.seeds)}\n  inbound ${JSON.stringify(i.inbound)}`;

describe(`SNAT fuzz (bpf_netdev; seed ${SEED}, ${RUNS} runs; TENDRIL_FUZZ_SEED / TENDRIL_FUZZ_RUNS)`, () => {
  after(async () => {
    for (const x of harnesses.values()) await x.h.close();
  });

  it('generated packets keep to the SNAT model and its invariants', async (t) => {
    const started = Date.now();
    const result = await fc.check(
      fc.asyncProperty(runArb, async (input) => {
        const violations = await runPackets(input);
        if (violations.length > 0) throw new Error(`${violations.join('\n')}\n${show(input)}`);
      }),
      { numRuns: RUNS, seed: SEED },
    );
    t.diagnostic(`model outcomes ${JSON.stringify(Object.fromEntries([...outcomeCounts].sort()))}`);
    t.diagnostic(`${result.numRuns} runs in ${Date.now() - started} ms; frames the kernel refuses to test-run: ${refused}`);
    if (result.failed) {
      assert.fail(`SNAT broke the model (reproduce with TENDRIL_FUZZ_SEED=${SEED} TENDRIL_FUZZ_RUNS=${RUNS}, counterexample path ${result.counterexamplePath}):\n${result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance)}`);
    }
    // The runs reached every decision the model knows.
    const reached = ['out translate', 'out leave', `out drop ${code('NAT_UNSUPPORTED_PROTO')}`, `out drop ${code('NAT_PORT_EXHAUSTED')}`, `out drop ${code('NAT_FULL')}`, 'err-out translate', 'err-out leave', 'in translate', 'in leave', 'err-in translate', 'err-in leave'];
    for (const name of reached) {
      if (RUNS >= 100) assert.ok((outcomeCounts.get(name) ?? 0) > 0, `no run reached "${name}"`);
    }
  });

  /** A fresh table of `size` entries with the ranges given, every other map empty. */
  async function fresh(size: number, ranges: Range[]): Promise<NatFuzzHarness> {
    const x = await harness(size);
    await x.clear();
    x.setPorts(ranges);
    return x;
  }
  const syn = (saddr: string, sport: number, daddr = WORLD_IP): Buffer => ipv4Frame({ ...outMacs, src: saddr, dst: daddr, proto: IpProto.TCP, payload: tcpSegment({ src: saddr, dst: daddr, sport, dport: 80 }) });
  const dropReason = async (x: NatFuzzHarness, before: Map<string, bigint>): Promise<string[]> => [...(await x.metricTotals())].filter(([k, c]) => c !== (before.get(k) ?? 0n)).map(([k]) => k);

  // Found by this fuzzer (seed 1): a mapping keeps its port after the ranges changed (--bpf-nat-port-range or the node's
  // ephemeral range, across an agent restart: the SNAT map is pinned), so the flow leaves with a port snat4_rev_netdev
  // no longer takes replies on (it passes anything outside the ranges to the stack) — and one the node may now use itself.
  it('regression: a flow whose mapping holds a port outside the ranges now gets a port inside them, and its replies come back', async (t) => {
    const x = await fresh(LARGE_TABLE, [{ min: 2000, max: 2002 }, { min: 0, max: 0 }]);
    const flow: Tuple = { saddr: POD_A.ip, daddr: WORLD_IP, sport: 40000, dport: 80, proto: IpProto.TCP };
    x.node.addMapping(flow, NODE_IP, 61500, NatFlag.MASQUERADE);
    x.ctSet(flow, holderEntry('live', process.hrtime.bigint())!);
    const frame = syn(POD_A.ip, 40000);
    t.diagnostic(`frame ${frame.toString('hex')}`);
    const r = await x.h.run(TO_NETDEV, frame);
    assert.equal(r.retval, OK);
    const port = r.data.readUInt16BE(14 + 20);
    assert.ok(port >= 2000 && port <= 2002, `the packet left with port ${port}, outside 2000-2002: a reply to it is not translated back`);
    const reply = ipv4Frame({ ...inMacs, src: WORLD_IP, dst: NODE_IP, proto: IpProto.TCP, payload: tcpSegment({ src: WORLD_IP, dst: NODE_IP, sport: 80, dport: port, flags: TcpFlag.SYN | TcpFlag.ACK }) });
    const back = await x.h.run(FROM_NETDEV, reply);
    assert.equal(numIp(back.data.readUInt32BE(30)), POD_A.ip, 'the reply goes back to the pod');
    assert.equal(back.data.readUInt16BE(14 + 22), 40000);
  });

  // Found writing this fuzzer's model (the C allowed NAT_FULL where a port could be taken): once the table is full, the first probe of a free port ends the
  // search with NAT_FULL, though a port of a flow that is over needs no room (the takeover replaces its entry and frees
  // the old flow's own): under load, closed connections' ports — the ones the GC has not collected yet — go unused.
  it('regression: a full table still gives a new flow the port of a reset flow (NAT_FULL only when no port can be taken)', async (t) => {
    const ranges = [{ min: 2000, max: 2050 }, { min: 0, max: 0 }];
    for (let trial = 0; trial < 5; trial++) {
      const x = await fresh(4, ranges);
      const now = process.hrtime.bigint();
      // Two mappings fill the table: a reset connection's on port 2000 to WORLD_IP:80, a live one's elsewhere.
      const reset: Tuple = { saddr: POD_B.ip, daddr: WORLD_IP, sport: 40000, dport: 80, proto: IpProto.TCP };
      const live: Tuple = { saddr: POD_B.ip, daddr: '203.0.113.7', sport: 40001, dport: 80, proto: IpProto.TCP };
      x.node.addMapping(reset, NODE_IP, 2000, NatFlag.MASQUERADE);
      x.ctSet(reset, holderEntry('reset', now)!);
      x.node.addMapping(live, NODE_IP, 2001, NatFlag.MASQUERADE);
      x.ctSet(live, holderEntry('live', now)!);
      const before = await x.metricTotals();
      const frame = syn(POD_A.ip, 41000);
      const r = await x.h.run(TO_NETDEV, frame);
      const counted = await dropReason(x, before);
      t.diagnostic(`trial ${trial}: verdict ${r.retval}, counters ${JSON.stringify(counted)}`);
      assert.equal(r.retval, OK, `trial ${trial}: refused (${JSON.stringify(counted)}; NAT_FULL is ${code('NAT_FULL')}) though the reset flow's port 2000 was free to take`);
      assert.equal(r.data.readUInt16BE(14 + 20), 2000);
      assert.equal(x.node.egress(reset), undefined, 'the reset flow\'s mapping went with its port');
    }
  });

  // Found writing this fuzzer's model: a first fragment of ICMP that is no echo request records ports 0 → 0, as an echo
  // request with identifier 0 does, and nat4_translatable takes any later fragment with destination port 0 for an echo
  // request: the later fragments of a pod's timestamp request (its first fragment dropped NAT_UNSUPPORTED_PROTO), or of
  // an ICMP error about a flow SNAT never mapped (its first fragment leaves with the pod's address), leave with the
  // node's address, and each makes an echo mapping (identifier 0) that holds a port until the GC.
  it('regression: the later fragment of a pod\'s ICMP timestamp request is refused like its first, and maps nothing', async (t) => {
    const x = await fresh(LARGE_TABLE, [{ min: 2000, max: 2002 }, { min: 0, max: 0 }]);
    const timestamp = Buffer.alloc(40);
    timestamp[0] = 13;
    const spec = { ...outMacs, src: POD_A.ip, dst: WORLD_IP, proto: IpProto.ICMP, id: 0x4d, payload: timestamp };
    const first = ipv4Frame({ ...spec, payload: timestamp.subarray(0, 24), moreFragments: true });
    const later = ipv4Frame({ ...spec, payload: timestamp.subarray(24), fragmentOffset: 24 });
    const before = await x.metricTotals();
    const r1 = await x.h.run(TO_NETDEV, first);
    assert.equal(r1.retval, SHOT, 'the first fragment: SNAT cannot translate a timestamp request');
    assert.deepEqual(await dropReason(x, before), [`${code('NAT_UNSUPPORTED_PROTO')}/${TrafficDirection.EGRESS}`]);
    t.diagnostic(`later fragment ${later.toString('hex')}`);
    const mid = await x.metricTotals();
    const r2 = await x.h.run(TO_NETDEV, later);
    assert.equal(r2.retval, SHOT, `the later fragment ${r2.retval === OK ? `left as ${numIp(r2.data.readUInt32BE(26))}'s` : 'was not refused'}`);
    assert.deepEqual(await dropReason(x, mid), [`${code('NAT_UNSUPPORTED_PROTO')}/${TrafficDirection.EGRESS}`]);
    assert.equal(await x.node.count(), 0, 'no mapping for a flow SNAT does not translate');
  });
});
