// Fuzzes the datapath programs (bpf_lxc.o: tendril_from_container,
// tendril_to_container; bpf_host.o: tendril_from_host, tendril_to_host)
// with fast-check through BPF_PROG_TEST_RUN: every packet a pod or the
// network sends is outside input. Each run resets the maps (two local pods
// A and B on the test device, pod C on another, the router address, an
// ipcache with pod, host and CIDR entries (anything else is world), a generated policy with
// allow, deny and port-range entries, a few tracked flows and a fragment
// record in each IP version), then sends 1-3 generated frames (well-formed, mutated, random)
// and checks after each:
//   - the verdict is TC_ACT_OK, TC_ACT_SHOT or TC_ACT_REDIRECT;
//   - a drop emits exactly one DROP event with a known reason and counts it
//     under that reason; a pass emits none and counts it as forwarded;
//   - only a well-formed, allowed new flow (from the pod's own address on
//     the lxc side) creates a conntrack entry, and only its own;
//   - a redirect hands on a valid frame: the destination pod's MACs, TTL one
//     less (from_container) or as routed (from_host), the header checksum
//     still valid, nothing else changed; an ARP reply only to a request of
//     the device's own pod;
//   - the verdict and drop reason agree with a reference model in
//     TypeScript that parses the frame itself and decides new flows with
//     MapState.lookup (src/policy/mapState.ts) over the same entries
//     (on a pod's device: IPv6 through the bounded extension-header walk,
//     ND/MLD by direction, a neighbour solicitation answered, a link-local
//     source under the device owner's policy with conntrack, any other
//     source not the pod's refused; to_container only for the device's own
//     pod, multicast passing; ICMPv6 errors related only when they go back
//     to the sender of a tracked flow they embed, forged ones held to
//     policy; IPv6 fragments given ports only by their own first's record;
//     neighbour solicitations and advertisements with a link-layer address
//     or target not the pod's).
// tendril_from_host runs in tunnel mode with a ClusterIP, and each frame
// arrives either from the node itself or forwarded from a device (a pod's,
// or another): the model also says which identity a forwarded source has,
// the VNI a packet for a remote pod is encapsulated with (checked on its
// TO_OVERLAY trace), and that a forwarded ClusterIP packet not from a local
// pod's own device is CLUSTERIP_FROM_OUTSIDE.
// TENDRIL_FUZZ_RUNS raises the runs per program, TENDRIL_FUZZ_SEED replays.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import { requireRoot } from '../../../test/support/root.js';
import { BpfObject, type BpfMap, codec, perCpuValue, RingBufferReader, TcAction } from '../kernel/bpf/index.js';
import { formatIp, ipFromBytes, parseIp, parsePrefix } from '../../netip/index.js';
import { MapState } from '../../policy/mapState.js';
import type { Direction } from '../../policy/types.js';
import { ConfigFlag, DropReason, EndpointFlag, EventType, LbScope, MapName, POLICY_KEY_FIXED_BITS, TraceLevel, TracePoint } from './constants.js';
import { ct4Key, ct6Key, ctEntry, datapathConfig, endpointInfo, endpointKey, frag4Key, frag4Ports, frag6Key, ipcacheKey, ipcacheValue, lb4Key, lb4Service, metricsKey, metricsValue, policyEntry, policyKey, type CtEntryValue, NO_NAT_CONFIG } from './layout.js';
import { CIDR_24, CIDR_25, IDENTITY, NODE_IP, POD_A, POD_B, POD_C, REMOTE_POD_IP, ROUTER, TEST_IFINDEX } from './testing/fixtures.js';
import { EXPIRED_FLOW, FUZZ_MAX_FRAME, fuzzFrameArb, SEED_FLOWS, SEED_FLOWS6, SEED_FRAGMENT, SEED_FRAGMENT6, testRunAccepts, truncations, type FuzzFrame, type FuzzSide } from './testing/packetArbitraries.js';
import { datagramOf, EtherType, ethernetFrame, icmpEcho, icmpError, IpProto, internetChecksum, ipv4Datagram, ipv4Frame, ipv6Frame, TcpFlag, tcpFrame, udpDatagram, udpFrame } from './testing/packets.js';
import { HOST_OBJECT, LXC_OBJECT, skbContext } from './testing/programHarness.js';
import { fragKeyString, hasPorts, ipNum, parseIpv4, parseL4, tupleString as ctKeyString, type Ipv4, type L4 } from './testing/packetModel.js';
import { frag6KeyString, isLaterFragment6, isLinkLocal6, isMulticast6, isUnspecified6, parseIpv6, parseL4v6, tuple6String, type Ipv6, type L4v6 } from './testing/packetModel6.js';
import { pseudoHeader6 } from './testing/packets.js';

requireRoot('the datapath packet fuzz test');

const RUNS = Number(process.env.TENDRIL_FUZZ_RUNS ?? 300);
const SEED = Number(process.env.TENDRIL_FUZZ_SEED ?? Date.now() % 2 ** 31);

type Program = 'tendril_from_container' | 'tendril_to_container' | 'tendril_from_host' | 'tendril_to_host';
const { OK, SHOT, REDIRECT } = TcAction;
const KNOWN_DROP_CODES = new Set(Object.values(DropReason).map((r) => -r.code));
const reason = (r: keyof typeof DropReason): number => -DropReason[r].code;

// ---- the node: endpoints and ipcache, as TypeScript sees them ----------------------

interface Endpoint {
  ip: string;
  ifindex: number;
  identity: number;
  endpointId: number;
  flags: number;
  lxcMac: string;
  podMac: string;
}
const ENDPOINTS: Endpoint[] = [POD_A, POD_B, POD_C, ROUTER].map((e) => ({ ...e, flags: e.flags ?? 0 }));
const IPCACHE: Array<[string, number]> = [
  [`${POD_A.ip}/32`, IDENTITY.A],
  [`${POD_B.ip}/32`, IDENTITY.B],
  [`${POD_C.ip}/32`, IDENTITY.C],
  [`${ROUTER.ip}/32`, IDENTITY.HOST],
  [`${NODE_IP}/32`, IDENTITY.HOST],
  [`${REMOTE_POD_IP}/32`, IDENTITY.REMOTE],
  [CIDR_24, IDENTITY.CIDR_24],
  [CIDR_25, IDENTITY.CIDR_25],
];


function endpointAt(addr: number): Endpoint | undefined {
  return ENDPOINTS.find((e) => ipNum(e.ip) === addr);
}
function podAt(addr: number): Endpoint | undefined {
  const e = endpointAt(addr);
  return e && !(e.flags & EndpointFlag.HOST) ? e : undefined;
}
function ipcacheIdentity(addr: number): number {
  let best = -1;
  let id: number = IDENTITY.WORLD;
  for (const [prefix, identity] of IPCACHE) {
    const [net, len] = prefix.split('/') as [string, string];
    const bits = Number(len);
    const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
    if (((addr & mask) >>> 0) === ((ipNum(net) & mask) >>> 0) && bits > best) {
      best = bits;
      id = identity;
    }
  }
  return id;
}

// ---- the policy: generated per run, written to the map and into MapStates -----------

interface PolicyEntrySpec {
  endpointId: number;
  egress: boolean;
  identity: number;
  proto: number;
  port: number;
  prefixLen: number;
  deny: boolean;
  cookie: number;
}

const IDENTITIES = [0, IDENTITY.A, IDENTITY.B, IDENTITY.C, IDENTITY.HOST, IDENTITY.WORLD, IDENTITY.REMOTE, IDENTITY.CIDR_24, IDENTITY.CIDR_25];
const policyEntryArb: fc.Arbitrary<PolicyEntrySpec> = fc
  .record({
    endpointId: fc.constantFrom(POD_A.endpointId, POD_B.endpointId, POD_C.endpointId),
    egress: fc.boolean(),
    identity: fc.constantFrom(...IDENTITIES),
    proto: fc.constantFrom(0, IpProto.TCP, IpProto.UDP, IpProto.ICMP, IpProto.SCTP, IpProto.TCP, IpProto.UDP),
    ports: fc.constantFrom<[number, number]>([80, 16], [53, 16], [22, 16], [443, 16], [8080, 16], [8080, 13], [8080, 12], [0x1f00, 8], [0, 0], [0, 0]),
    deny: fc.boolean(),
    cookie: fc.integer({ min: 16, max: 0xffff }),
  })
  .map(({ ports, ...e }) => (e.proto === 0 ? { ...e, port: 0, prefixLen: 0 } : { ...e, port: ports[0], prefixLen: ports[1] }));

/** The base every run has (A may reach B on TCP/80, world DNS, a port range; a deny), plus generated entries. */
const BASE_POLICY: PolicyEntrySpec[] = [
  { endpointId: POD_A.endpointId, egress: true, identity: IDENTITY.B, proto: IpProto.TCP, port: 80, prefixLen: 16, deny: false, cookie: 0x1001 },
  { endpointId: POD_B.endpointId, egress: false, identity: IDENTITY.A, proto: IpProto.TCP, port: 80, prefixLen: 16, deny: false, cookie: 0x2002 },
  { endpointId: POD_A.endpointId, egress: true, identity: 0, proto: IpProto.UDP, port: 53, prefixLen: 16, deny: false, cookie: 0x3003 },
  { endpointId: POD_A.endpointId, egress: true, identity: IDENTITY.REMOTE, proto: IpProto.TCP, port: 8080, prefixLen: 13, deny: false, cookie: 0x4004 },
  { endpointId: POD_A.endpointId, egress: true, identity: IDENTITY.WORLD, proto: IpProto.TCP, port: 22, prefixLen: 16, deny: true, cookie: 0x5005 },
  { endpointId: POD_A.endpointId, egress: false, identity: IDENTITY.HOST, proto: 0, port: 0, prefixLen: 0, deny: false, cookie: 0x6006 },
  { endpointId: POD_A.endpointId, egress: true, identity: IDENTITY.B, proto: 0, port: 0, prefixLen: 0, deny: false, cookie: 0x7007 },
  { endpointId: POD_A.endpointId, egress: true, identity: IDENTITY.B, proto: IpProto.TCP, port: 22, prefixLen: 16, deny: true, cookie: 0x8008 },
  { endpointId: POD_B.endpointId, egress: false, identity: 0, proto: IpProto.ICMP, port: 0, prefixLen: 0, deny: false, cookie: 0x9009 },
  { endpointId: POD_B.endpointId, egress: false, identity: IDENTITY.A, proto: IpProto.UDP, port: 0x1f00, prefixLen: 8, deny: false, cookie: 0xa00a },
  { endpointId: POD_B.endpointId, egress: true, identity: IDENTITY.A, proto: 0, port: 0, prefixLen: 0, deny: false, cookie: 0xb00b },
  { endpointId: POD_A.endpointId, egress: false, identity: IDENTITY.B, proto: IpProto.UDP, port: 0, prefixLen: 0, deny: false, cookie: 0xc00c },
  { endpointId: POD_B.endpointId, egress: false, identity: IDENTITY.REMOTE, proto: IpProto.TCP, port: 0, prefixLen: 0, deny: false, cookie: 0xd00d },
  { endpointId: POD_B.endpointId, egress: false, identity: IDENTITY.A, proto: IpProto.TCP, port: 0, prefixLen: 0, deny: false, cookie: 0xe00e },
  { endpointId: POD_A.endpointId, egress: true, identity: IDENTITY.WORLD, proto: IpProto.UDP, port: 0, prefixLen: 0, deny: false, cookie: 0xf00f },
];

type Decision = { allowed: true } | { allowed: false; reason: number };

class ReferencePolicy {
  readonly #states = new Map<number, MapState>();

  constructor(entries: readonly PolicyEntrySpec[]) {
    for (const e of entries) {
      let s = this.#states.get(e.endpointId);
      if (!s) this.#states.set(e.endpointId, (s = new MapState()));
      s.set({ key: { direction: e.egress ? 'egress' : 'ingress', identity: e.identity, proto: e.proto, port: e.port, prefixLen: e.prefixLen }, verdict: e.deny ? 'deny' : 'allow', derivedFrom: [] });
    }
  }

  decide(endpointId: number, direction: Direction, peer: number, proto: number, port: number): Decision {
    const e = this.#states.get(endpointId)?.lookup(direction, peer, proto, port);
    if (e === undefined) return { allowed: false, reason: reason('POLICY') };
    return e.verdict === 'deny' ? { allowed: false, reason: reason('POLICY_DENY') } : { allowed: true };
  }
}

/** Later entries with the same key replace earlier ones (a map holds one value per key). */
function dedupe(entries: readonly PolicyEntrySpec[]): PolicyEntrySpec[] {
  const m = new Map<string, PolicyEntrySpec>();
  for (const e of entries) m.set(`${e.endpointId}/${e.egress}/${e.identity}/${e.proto}/${e.port}/${e.prefixLen}`, e);
  return [...m.values()];
}

// ---- the harness: one loaded object, its maps, its events -------------------------

const TEST_MAP_SIZES = { [MapName.ENDPOINTS]: 64, [MapName.IPCACHE]: 64, [MapName.POLICY]: 256, [MapName.CT_TCP]: 256, [MapName.CT_ANY]: 256, [MapName.FRAG]: 64, [MapName.METRICS]: 256, [MapName.EVENTS]: 1 << 16 };

/** The part of an event record the invariants read (struct tendril_event). */
interface RawEvent {
  type: number;
  subtype: number;
  direction: number;
  srcIdentity: number;
  cookie: number;
  origLen: number;
}

/** A frame whose length no generated frame has: its DROP event marks the end of the previous packet's events. */
const MARKER_LEN = FUZZ_MAX_FRAME + 177;

type Ct = BpfMap<ReturnType<typeof ct4Key.read>, CtEntryValue>;

class FuzzHarness {
  readonly ctTcp: Ct;
  readonly ctAny: Ct;
  readonly ct6Tcp;
  readonly ct6Any;
  readonly frag;
  readonly frag6;
  readonly policy;
  readonly metrics;
  readonly #events: RawEvent[] = [];
  readonly #reader: RingBufferReader;
  #readerError: unknown;

  private constructor(
    readonly object: BpfObject,
    readonly marker: { program: Program; frame: Buffer },
  ) {
    const endpoints = object.map(MapName.ENDPOINTS, endpointKey, endpointInfo);
    for (const e of ENDPOINTS) endpoints.set(parseIp(e.ip), { ifindex: e.ifindex, identity: e.identity, endpointId: e.endpointId, flags: e.flags, lxcMac: e.lxcMac, podMac: e.podMac });
    const ipcache = object.map(MapName.IPCACHE, ipcacheKey, ipcacheValue);
    for (const [prefix, identity] of IPCACHE) ipcache.set(parsePrefix(prefix), { identity, tunnelIp4: 0, flags: 0 });
    this.ctTcp = object.map(MapName.CT_TCP, ct4Key, ctEntry);
    this.ctAny = object.map(MapName.CT_ANY, ct4Key, ctEntry);
    this.frag = object.map(MapName.FRAG, frag4Key, frag4Ports);
    this.ct6Tcp = object.map(MapName.CT6_TCP, ct6Key, ctEntry);
    this.ct6Any = object.map(MapName.CT6_ANY, ct6Key, ctEntry);
    this.frag6 = object.map(MapName.FRAG6, frag6Key, frag4Ports);
    this.policy = object.map(MapName.POLICY, policyKey, policyEntry);
    this.metrics = object.map(MapName.METRICS, metricsKey, perCpuValue(metricsValue));
    this.#reader = RingBufferReader.open(
      object.rawMap(MapName.EVENTS),
      (records) => {
        for (const r of records) this.#events.push({ type: r[0]!, subtype: r[1]!, direction: r[2]!, srcIdentity: r.readUInt32LE(12), cookie: r.readUInt32LE(28), origLen: r.readUInt32LE(32) });
      },
      { onError: (err) => (this.#readerError = err) },
    );
  }

  static async load(path: string, marker: { program: Program; frame: Buffer }): Promise<FuzzHarness> {
    const object = await BpfObject.load(path, { maxEntries: TEST_MAP_SIZES });
    try {
      return new FuzzHarness(object, marker);
    } catch (err) {
      object.close();
      throw err;
    }
  }

  /** Policy, conntrack and fragments as every run starts. */
  async reset(policy: readonly PolicyEntrySpec[]): Promise<void> {
    for (const m of [this.policy, this.ctTcp, this.ctAny, this.frag, this.ct6Tcp, this.ct6Any, this.frag6] as unknown as Array<BpfMap<unknown, unknown>>) {
      const keys: unknown[] = [];
      for await (const k of m.keys()) keys.push(k);
      for (const k of keys) m.delete(k);
    }
    for (const e of policy) {
      this.policy.set({ endpointId: e.endpointId, identity: e.identity, egress: e.egress, proto: e.proto, port: e.port, portPrefixLen: e.prefixLen }, { cookie: e.cookie, deny: e.deny ? 1 : 0, l4PrefixBits: e.proto === 0 ? 0 : 8 + e.prefixLen });
    }
    if (POLICY_KEY_FIXED_BITS !== 72) throw new Error('policy key layout changed: review reset');
    const now = process.hrtime.bigint();
    const entry = (f: (typeof SEED_FLOWS)[number], expiresNs: bigint): CtEntryValue => ({
      expiresNs,
      packets: 1n,
      bytes: 60n,
      srcIdentity: podAt(ipNum(f.saddr))?.identity ?? ipcacheIdentity(ipNum(f.saddr)),
      dstIdentity: podAt(ipNum(f.daddr))?.identity ?? ipcacheIdentity(ipNum(f.daddr)),
      srcEndpoint: podAt(ipNum(f.saddr))?.endpointId ?? 0,
      dstEndpoint: podAt(ipNum(f.daddr))?.endpointId ?? 0,
      revNatIndex: 0,
      tcpFlags: f.proto === IpProto.TCP ? TcpFlag.SYN | TcpFlag.ACK : 0,
      flags: 0,
      backendId: 0,
      natAddr: parseIp('0.0.0.0'),
      natPort: 0,
    });
    const key = (f: (typeof SEED_FLOWS)[number]) => ({ saddr: parseIp(f.saddr), daddr: parseIp(f.daddr), sport: f.sport, dport: f.dport, proto: f.proto, flags: 0 });
    for (const f of SEED_FLOWS) (f.proto === IpProto.TCP ? this.ctTcp : this.ctAny).set(key(f), entry(f, now + 3600n * 1_000_000_000n));
    this.ctTcp.set(key(EXPIRED_FLOW), entry(EXPIRED_FLOW, now - 1n));
    const s = SEED_FRAGMENT;
    this.frag.set({ saddr: ipNum(s.saddr), daddr: ipNum(s.daddr), id: s.id, proto: s.proto }, { sport: s.sport, dport: s.dport });
    // IPv6: the pod's link-local flows, as its device's owner (the world-ipv6 identity on the far side).
    for (const f of SEED_FLOWS6) {
      const e: CtEntryValue = { expiresNs: now + 3600n * 1_000_000_000n, packets: 1n, bytes: 60n, srcIdentity: IDENTITY.WORLD_IPV6, dstIdentity: IDENTITY.WORLD_IPV6, srcEndpoint: 0, dstEndpoint: 0, revNatIndex: 0, tcpFlags: f.proto === IpProto.TCP ? TcpFlag.SYN | TcpFlag.ACK : 0, flags: 0, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 };
      (f.proto === IpProto.TCP ? this.ct6Tcp : this.ct6Any).set(key(f), e);
    }
    const s6 = SEED_FRAGMENT6;
    this.frag6.set({ saddr: parseIp(s6.saddr), daddr: parseIp(s6.daddr), id: s6.id, proto: s6.proto }, { sport: s6.sport, dport: s6.dport });
  }

  async conntrack(): Promise<Map<string, CtEntryValue>> {
    const out = new Map<string, CtEntryValue>();
    for (const m of [this.ctTcp, this.ctAny]) {
      for await (const [k, v] of m.entries()) out.set(ctKeyString(ipNum(formatIp(k.saddr)), ipNum(formatIp(k.daddr)), k.sport, k.dport, k.proto), v);
    }
    for (const m of [this.ct6Tcp, this.ct6Any]) {
      for await (const [k, v] of m.entries()) out.set(tuple6String(formatIp(k.saddr), formatIp(k.daddr), k.sport, k.dport, k.proto), v);
    }
    return out;
  }

  async fragments(): Promise<Map<string, { sport: number; dport: number }>> {
    const out = new Map<string, { sport: number; dport: number }>();
    for await (const [k, v] of this.frag.entries()) out.set(fragKeyString(k.saddr, k.daddr, k.id, k.proto), v);
    for await (const [k, v] of this.frag6.entries()) out.set(frag6KeyString(formatIp(k.saddr), formatIp(k.daddr), k.id, k.proto), v);
    return out;
  }

  async metricTotals(): Promise<Map<string, { packets: bigint; bytes: bigint }>> {
    const out = new Map<string, { packets: bigint; bytes: bigint }>();
    for await (const [k, v] of this.metrics.entries()) {
      const sum = { packets: 0n, bytes: 0n };
      for (const c of v) {
        sum.packets += c.packets;
        sum.bytes += c.bytes;
      }
      out.set(`${k.reason}/${k.direction}`, sum);
    }
    return out;
  }

  /** Runs a frame; its events come from eventsUpToMarker() (read the metrics first: the marker counts too). */
  async run(program: Program, frame: Buffer, ingressIfindex = 0): Promise<{ retval: number; data: Buffer; events: RawEvent[] }> {
    const r = await this.object.program(program).testRun({ data: frame, ...(ingressIfindex ? { ctx: skbContext({ ingressIfindex }) } : {}) });
    return { retval: r.retval, data: r.data, events: [] };
  }

  /** Runs the marker frame and returns the events before its DROP event: the ring buffer keeps order, so those are all of the previous frame's. */
  async eventsUpToMarker(): Promise<RawEvent[]> {
    await this.object.program(this.marker.program).testRun({ data: this.marker.frame });
    const deadline = Date.now() + 3000;
    for (;;) {
      const i = this.#events.findIndex((e) => e.type === 1 && e.origLen === MARKER_LEN);
      if (i >= 0) return this.#events.splice(0, i + 1).slice(0, i);
      if (this.#readerError !== undefined) throw this.#readerError;
      if (Date.now() > deadline) throw new Error('the marker frame\'s DROP event did not arrive in 3 s');
      await new Promise((r) => setTimeout(r, 0));
    }
  }

  async close(): Promise<void> {
    try {
      await this.#reader.stop();
    } finally {
      this.object.close();
    }
  }
}

// ---- the reference model --------------------------------------------------------

type CtStatus = 'new' | 'established' | 'reply' | 'related';

function ctStatus(ip: Ipv4, l4: L4, ct: Map<string, CtEntryValue>, now: bigint): CtStatus {
  const live = (k: string): boolean => {
    const e = ct.get(k);
    return e !== undefined && e.expiresNs > now;
  };
  if (l4.icmpError) {
    const i = l4.inner;
    // Related: the error goes back to the sender of the datagram it carries, and that datagram's flow is tracked.
    if (i && ip.daddr === i.saddr && (live(ctKeyString(i.saddr, i.daddr, i.sport, i.dport, i.proto)) || live(ctKeyString(i.daddr, i.saddr, i.dport, i.sport, i.proto)))) return 'related';
    return 'new';
  }
  if (live(ctKeyString(ip.saddr, ip.daddr, l4.sport, l4.dport, ip.proto))) return 'established';
  if (live(ctKeyString(ip.daddr, ip.saddr, l4.dport, l4.sport, ip.proto))) return 'reply';
  return 'new';
}

interface Expected {
  action: number;
  /** The drop reason (positive code) when action is SHOT. */
  reason?: number;
  /** The conntrack key this packet may create (a new, allowed flow that is no ICMP error). */
  creates?: string;
  /** Where a redirect goes: the pod whose MACs the frame must carry. */
  to?: Endpoint;
  /** A redirect into the overlay, unchanged, with this identity as VNI (its TO_OVERLAY trace's source identity). */
  overlayVni?: number;
  /** Whether a redirect decrements the TTL. */
  decTtl?: boolean;
  /** The decision hinged on an ICMP error's relation to a flow: name it in a violation. */
  icmp?: string;
  /** Well-formed IPv4 from the device's own pod (from_container) or to a pod (the others). */
  wellFormed: boolean;
}

interface ModelState {
  policy: ReferencePolicy;
  ct: Map<string, CtEntryValue>;
  frags: Map<string, { sport: number; dport: number }>;
  now: bigint;
}

const drop = (r: number, wellFormed = false, extra: Partial<Expected> = {}): Expected => ({ action: SHOT, reason: r, wellFormed, ...extra });

// ---- the reference model: a pod's device (IPv6 as ICMPv6 only; to_container's own-endpoint check) ----

/**
 * The endpoint owning the test device as bpf_lxc finds it for IPv6 (the first
 * pod entry on TEST_IFINDEX in tendril_lxc's iteration order, which
 * bpf_for_each_map_elem and a key walk share): A and B both sit on that
 * device here. Set when the lxc object is loaded.
 */
let podDeviceOwner: Endpoint | undefined;

async function findPodDeviceOwner(object: BpfObject): Promise<Endpoint | undefined> {
  const endpoints = object.map(MapName.ENDPOINTS, endpointKey, endpointInfo);
  for await (const [, info] of endpoints.entries()) {
    if (info.ifindex === TEST_IFINDEX && !(info.flags & EndpointFlag.HOST)) return ENDPOINTS.find((e) => e.endpointId === info.endpointId);
  }
  return undefined;
}

/** icmp6_disposition: neighbour discovery (router solicitations both ways) and MLD pass; a pod never advertises or redirects. */
function icmp6Disposition(type: number, fromPod: boolean): 'pass' | 'policy' | 'refuse' {
  if ([130, 131, 132, 143, 133, 135, 136].includes(type)) return 'pass';
  if (type === 134 || type === 137) return fromPod ? 'refuse' : 'pass';
  return 'policy';
}

function ctStatus6(ip: Ipv6, l4: L4v6, ct: Map<string, CtEntryValue>, now: bigint): CtStatus {
  const live = (k: string): boolean => {
    const e = ct.get(k);
    return e !== undefined && e.expiresNs > now;
  };
  if (l4.icmpError) {
    const i = l4.inner;
    if (i && ip.daddr === i.saddr && (live(tuple6String(i.saddr, i.daddr, i.sport, i.dport, i.proto)) || live(tuple6String(i.daddr, i.saddr, i.dport, i.sport, i.proto)))) return 'related';
    return 'new';
  }
  if (live(tuple6String(ip.saddr, ip.daddr, l4.sport, l4.dport, ip.proto))) return 'established';
  if (live(tuple6String(ip.daddr, ip.saddr, l4.dport, l4.sport, ip.proto))) return 'reply';
  return 'new';
}

/** ipv6_load, then the ICMPv6 type (icmp6_load_type) unless a later fragment: the header, or the drop. */
function loadIpv6(f: Buffer): { ip: Ipv6; type?: number } | Expected {
  const ip = parseIpv6(f);
  if (typeof ip === 'number') return drop(ip);
  if (ip.proto !== IpProto.ICMPV6 || isLaterFragment6(ip)) return { ip };
  if (ip.l4Off + 4 > ip.ipEnd) return drop(reason('INVALID_PACKET'));
  return { ip, type: f[ip.l4Off]! };
}

/** nd_respond on a solicitation from the device's pod (`owner`): the answer, a pass to the stack, or a drop. */
function expectNeighborSolicit(f: Buffer, ip: Ipv6, owner: Endpoint): Expected {
  if (ip.l4Off !== 14 + 40) return { action: OK, wellFormed: false };
  const len = ip.ipEnd - ip.l4Off;
  if (len < 24) return drop(reason('INVALID_PACKET'));
  if (len !== 24 && len !== 32) return { action: OK, wellFormed: false };
  const target = f.subarray(ip.l4Off + 8, ip.l4Off + 24);
  if (ip.hopLimit !== 255 || f[ip.l4Off + 1] !== 0 || isMulticast6(target) || isUnspecified6(target)) return drop(reason('INVALID_PACKET'));
  if (len === 32) {
    if (f[ip.l4Off + 24] !== 1 || f[ip.l4Off + 25] !== 1) return { action: OK, wellFormed: false };
    if (f.subarray(ip.l4Off + 26, ip.l4Off + 32).toString('hex') !== macHex(owner.podMac)) return drop(reason('INVALID_SOURCE'));
  }
  if (target.equals(ip.src)) return { action: OK, wellFormed: false };
  return { action: REDIRECT, to: owner, wellFormed: false };
}

/**
 * nd_advert_check on an advertisement from the device's pod (`owner`): a
 * link-local target (the model's endpoints hold no other IPv6 address), no
 * option or one target link-layer address with the pod's MAC; the stack's then.
 */
function expectNeighborAdvert(f: Buffer, ip: Ipv6, owner: Endpoint): Expected {
  const len = ip.ipEnd - ip.l4Off;
  if (len < 24) return drop(reason('INVALID_PACKET'));
  if (len !== 24 && len !== 32) return drop(reason('INVALID_SOURCE'));
  if (!isLinkLocal6(f.subarray(ip.l4Off + 8, ip.l4Off + 24))) return drop(reason('INVALID_SOURCE'));
  if (len === 32 && (f[ip.l4Off + 24] !== 2 || f[ip.l4Off + 25] !== 1 || f.subarray(ip.l4Off + 26, ip.l4Off + 32).toString('hex') !== macHex(owner.podMac))) return drop(reason('INVALID_SOURCE'));
  return { action: OK, wellFormed: false };
}

/**
 * IPv6 from the pod (from_container_ipv6). The model's endpoints hold no
 * IPv6 address: a source is the device owner's only when link-local (or
 * unspecified, for ND and MLD); any other is forged.
 */
function expectFromContainer6(f: Buffer, s: ModelState): Expected {
  const loaded = loadIpv6(f);
  if ('action' in loaded) return loaded;
  const { ip, type } = loaded;
  if (type !== undefined) {
    const disposition = icmp6Disposition(type, true);
    if (disposition === 'refuse') return drop(reason('ICMP6_NOT_ALLOWED'));
    if (disposition === 'pass') {
      if (!isUnspecified6(ip.src) && !isLinkLocal6(ip.src)) return drop(reason('INVALID_SOURCE'));
      if (type === 136 && isUnspecified6(ip.src)) return drop(reason('INVALID_SOURCE'));
      if ((type !== 135 && type !== 136) || isUnspecified6(ip.src)) return { action: OK, wellFormed: false };
      if (!podDeviceOwner) return drop(reason('INVALID_SOURCE'));
      if (type === 136) return expectNeighborAdvert(f, ip, podDeviceOwner);
      if (!podDeviceOwner) return drop(reason('INVALID_SOURCE'));
      return expectNeighborSolicit(f, ip, podDeviceOwner);
    }
  }
  if (!isLinkLocal6(ip.src)) return drop(reason('INVALID_SOURCE'));
  const l4 = parseL4v6(f, ip, s.frags);
  if (typeof l4 === 'number') return drop(l4, true);
  const status = ctStatus6(ip, l4, s.ct, s.now);
  if (status !== 'new') return { action: OK, wellFormed: true };
  if (!podDeviceOwner) return drop(reason('POLICY'), true);
  const d = s.policy.decide(podDeviceOwner.endpointId, 'egress', IDENTITY.WORLD_IPV6, ip.proto, hasPorts(ip.proto) ? l4.dport : 0);
  if (!d.allowed) return drop(d.reason, true);
  return { action: OK, wellFormed: true, ...(l4.icmpError ? {} : { creates: tuple6String(ip.saddr, ip.daddr, l4.sport, l4.dport, ip.proto) }) };
}

/** IPv6 to the pod (to_container_ipv6): ND and the router's messages pass, multicast passes, a link-local destination is the device owner's. */
function expectToContainer6(f: Buffer, s: ModelState): Expected {
  const loaded = loadIpv6(f);
  if ('action' in loaded) return loaded;
  const { ip, type } = loaded;
  if (type !== undefined && icmp6Disposition(type, false) === 'pass') return { action: OK, wellFormed: false };
  if (isMulticast6(ip.dst)) return { action: OK, wellFormed: false };
  if (!isLinkLocal6(ip.dst)) return drop(reason('NOT_FOR_ENDPOINT'));
  const l4 = parseL4v6(f, ip, s.frags);
  if (typeof l4 === 'number') return drop(l4, true);
  const status = ctStatus6(ip, l4, s.ct, s.now);
  if (status !== 'new') return { action: OK, wellFormed: true };
  const d = s.policy.decide(podDeviceOwner?.endpointId ?? 0, 'ingress', IDENTITY.WORLD_IPV6, ip.proto, hasPorts(ip.proto) ? l4.dport : 0);
  if (!d.allowed) return drop(d.reason, true);
  return { action: OK, wellFormed: true, ...(l4.icmpError ? {} : { creates: tuple6String(ip.saddr, ip.daddr, l4.sport, l4.dport, ip.proto) }) };
}

/**
 * to_container delivers only to the endpoint owning its device: a unicast
 * address that is not it is NOT_FOR_ENDPOINT; multicast and broadcast pass.
 * Undefined when the destination is the device's own pod.
 */
function expectToContainerDestination(ip: Ipv4): Expected | undefined {
  if (ip.daddr >>> 28 === 0xe || ip.daddr === 0xffffffff) return { action: OK, wellFormed: false };
  const dst = podAt(ip.daddr);
  if (!dst || dst.ifindex !== TEST_IFINDEX) return drop(reason('NOT_FOR_ENDPOINT'));
  return undefined;
}

function expectArp(f: Buffer): Expected {
  if (f.length < 42) return drop(reason('ARP_INVALID'));
  if (f.readUInt16BE(14) !== 1 || f.readUInt16BE(16) !== EtherType.IPV4 || f[18] !== 6 || f[19] !== 4) return drop(reason('ARP_INVALID'));
  if (f.readUInt16BE(20) !== 1) return { action: OK, wellFormed: false };
  const spa = f.readUInt32BE(28);
  const tpa = f.readUInt32BE(38);
  if (tpa === spa || spa === 0) return { action: OK, wellFormed: false };
  const ep = podAt(spa);
  if (!ep || ep.ifindex !== TEST_IFINDEX) return { action: OK, wellFormed: false };
  return { action: REDIRECT, to: ep, wellFormed: false };
}

/** Names what an ICMP error's verdict hinged on (for a failure's message). */
function describeIcmp(l4: L4, status: CtStatus): string | undefined {
  if (!l4.icmpError) return undefined;
  return `ICMP error, ${status === 'related' ? 'related' : 'not related'} (inner ${l4.inner ? ctKeyString(l4.inner.saddr, l4.inner.daddr, l4.inner.sport, l4.inner.dport, l4.inner.proto) : 'none'})`;
}


/** The ingress half shared by to_container and from_host: conntrack, then the pod's ingress policy (`srcIdentity`: the source's when the caller knows it, else by its address). */
function expectIngress(f: Buffer, ip: Ipv4, dst: Endpoint, s: ModelState, pass: Expected, srcIdentity?: number): Expected {
  const l4 = parseL4(f, ip, s.frags);
  if (typeof l4 === 'number') return drop(l4, true);
  const status = ctStatus(ip, l4, s.ct, s.now);
  const icmp = describeIcmp(l4, status);
  const tag = icmp ? { icmp } : {};
  if (status !== 'new') return { ...pass, ...tag };
  const peer = srcIdentity ?? endpointAt(ip.saddr)?.identity ?? ipcacheIdentity(ip.saddr);
  const d = s.policy.decide(dst.endpointId, 'ingress', peer, ip.proto, hasPorts(ip.proto) ? l4.dport : 0);
  if (!d.allowed) return drop(d.reason, true, tag);
  return { ...pass, ...tag, ...(l4.icmpError ? {} : { creates: ctKeyString(ip.saddr, ip.daddr, l4.sport, l4.dport, ip.proto) }) };
}

function expectFromContainer(f: Buffer, s: ModelState): Expected {
  const type = f.length >= 14 ? f.readUInt16BE(12) : 0;
  if (type === EtherType.ARP) return expectArp(f);
  if (type === EtherType.IPV6) return expectFromContainer6(f, s);
  if (type !== EtherType.IPV4) return drop(reason('UNKNOWN_L3'));
  const ip = parseIpv4(f);
  if (!ip) return drop(reason('INVALID_PACKET'));
  const src = podAt(ip.saddr);
  if (!src || src.ifindex !== TEST_IFINDEX) return drop(reason('INVALID_SOURCE'));
  const l4 = parseL4(f, ip, s.frags);
  if (typeof l4 === 'number') return drop(l4, true);
  const dst = endpointAt(ip.daddr);
  const local = dst && !(dst.flags & EndpointFlag.HOST) ? dst : undefined;
  const status = ctStatus(ip, l4, s.ct, s.now);
  const icmp = describeIcmp(l4, status);
  const tag = icmp ? { icmp } : {};
  let creates: string | undefined;
  if (status === 'new') {
    const port = hasPorts(ip.proto) ? l4.dport : 0;
    const dstIdentity = dst ? dst.identity : ipcacheIdentity(ip.daddr);
    const egress = s.policy.decide(src.endpointId, 'egress', dstIdentity, ip.proto, port);
    if (!egress.allowed) return drop(egress.reason, true, tag);
    if (local) {
      const ingress = s.policy.decide(local.endpointId, 'ingress', src.identity, ip.proto, port);
      if (!ingress.allowed) return drop(ingress.reason, true, tag);
    }
    if (!l4.icmpError) creates = ctKeyString(ip.saddr, ip.daddr, l4.sport, l4.dport, ip.proto);
  }
  const made = creates ? { creates } : {};
  if (local) {
    if (ip.ttl <= 1) return drop(reason('TTL_EXCEEDED'), true, { ...tag, ...made });
    return { action: REDIRECT, to: local, decTtl: true, wellFormed: true, ...tag, ...made };
  }
  return { action: OK, wellFormed: true, ...tag, ...made };
}

function expectToContainer(f: Buffer, s: ModelState): Expected {
  const type = f.length >= 14 ? f.readUInt16BE(12) : 0;
  if (type === EtherType.ARP) return { action: OK, wellFormed: false };
  if (type === EtherType.IPV6) return expectToContainer6(f, s);
  if (type !== EtherType.IPV4) return drop(reason('UNKNOWN_L3'));
  const ip = parseIpv4(f);
  if (!ip) return drop(reason('INVALID_PACKET'));
  const notMine = expectToContainerDestination(ip);
  if (notMine) return notMine;
  return expectIngress(f, ip, podAt(ip.daddr)!, s, { action: OK, wellFormed: true });
}

/** from_host_ipv6: the node's multicast, link-local and ND pass; the model's endpoints hold no IPv6 address, so any other unicast is UNKNOWN_ENDPOINT. */
function expectFromHost6(f: Buffer): Expected {
  const ip = parseIpv6(f);
  if (typeof ip === 'number') return drop(ip);
  if (isMulticast6(ip.dst) || isLinkLocal6(ip.dst)) return { action: OK, wellFormed: false };
  if (ip.proto === IpProto.ICMPV6 && !isLaterFragment6(ip) && ip.l4Off + 4 <= ip.ipEnd && f[ip.l4Off]! >= 133 && f[ip.l4Off]! <= 137) return { action: OK, wellFormed: false };
  return drop(reason('UNKNOWN_ENDPOINT'));
}

function expectFromHost(f: Buffer, s: ModelState, ingress: number): Expected {
  const type = f.length >= 14 ? f.readUInt16BE(12) : 0;
  if (type === EtherType.IPV6) return expectFromHost6(f);
  if (type !== EtherType.IPV4) return { action: OK, wellFormed: false };
  const ip = parseIpv4(f);
  if (!ip) return drop(reason('INVALID_PACKET'));
  // The node's multicast and broadcast on tendril_host: no pod's.
  if (ip.daddr >>> 28 === 0xe || ip.daddr === 0xffffffff) return { action: OK, wellFormed: false };
  const service = expectFromHostClusterIp(f, ip, s, ingress);
  if (service) return service;
  const dst = podAt(ip.daddr);
  if (!dst) {
    if (isTunneled(ip.daddr)) return { action: REDIRECT, overlayVni: fromHostVni(ip.saddr, ingress), wellFormed: false };
    return drop(reason('UNKNOWN_ENDPOINT'));
  }
  const pass: Expected = { action: REDIRECT, to: dst, decTtl: false, wellFormed: true };
  return ingress ? expectIngress(f, ip, dst, s, pass, forwardedSourceIdentity(ip.saddr, ingress)) : expectIngress(f, ip, dst, s, pass);
}

function expected(program: Program, f: Buffer, s: ModelState, ingress = 0): Expected {
  switch (program) {
    case 'tendril_from_container':
      return expectFromContainer(f, s);
    case 'tendril_to_container':
      return expectToContainer(f, s);
    case 'tendril_from_host':
      return expectFromHost(f, s, ingress);
    case 'tendril_to_host':
      return { action: OK, wellFormed: false };
  }
}

// ---- from_host's trust boundary: forwarded sources, the overlay, ClusterIPs (dp-edge) ----

/** A device of the node that is no pod's: what a router sends the node arrives on it. */
const OUTSIDE_IFINDEX = 9;
/** The host harness runs in tunnel mode: REMOTE_POD_IP is reached through the overlay (tendril_vxlan's ifindex only named). */
const FUZZ_TUNNEL_IFINDEX = 42;
const FUZZ_REMOTE_NODE_IP = '192.168.77.6';
/** A ClusterIP without backends: the node's own packet to it is NO_SERVICE, one forwarded from outside CLUSTERIP_FROM_OUTSIDE. */
const FUZZ_CLUSTER_IP = { ip: '10.96.0.10', port: 80 };

const fromHostIngressArb = fc.constantFrom(0, 0, TEST_IFINDEX, POD_C.ifindex, OUTSIDE_IFINDEX);

/** TCP frames to the ClusterIP from the node, pods (theirs or forged) and the outside. */
const clusterIpFrameArb: fc.Arbitrary<FuzzFrame> = fc
  .record({
    src: fc.constantFrom(NODE_IP, ROUTER.ip, POD_A.ip, POD_B.ip, POD_C.ip, REMOTE_POD_IP, '198.51.100.9', '203.0.113.7'),
    sport: fc.integer({ min: 1, max: 65535 }),
    flags: fc.constantFrom(TcpFlag.SYN, TcpFlag.ACK, TcpFlag.SYN | TcpFlag.ACK, TcpFlag.RST),
  })
  .map(({ src, sport, flags }) => ({ label: 'clusterip', frame: tcpFrame({ src, dst: FUZZ_CLUSTER_IP.ip, sport, dport: FUZZ_CLUSTER_IP.port, flags }) }));

/** The host harness's tunnel mode (tracing every packet, for the VNI), REMOTE_POD_IP behind another node, the ClusterIP. */
function installHostTrustBoundary(object: BpfObject): void {
  object.map(MapName.CONFIG, codec.u32, datapathConfig).set(0, { traceLevel: TraceLevel.ALL, flags: ConfigFlag.TUNNEL, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: FUZZ_TUNNEL_IFINDEX, nodeIpv4: 0, ...NO_NAT_CONFIG });
  object.map(MapName.IPCACHE, ipcacheKey, ipcacheValue).set(parsePrefix(`${REMOTE_POD_IP}/32`), { identity: IDENTITY.REMOTE, tunnelIp4: ipNum(FUZZ_REMOTE_NODE_IP), flags: 0 });
  object.map(MapName.LB_SERVICES, lb4Key, lb4Service).set(
    { address: parseIp(FUZZ_CLUSTER_IP.ip), dport: FUZZ_CLUSTER_IP.port, backendSlot: 0, proto: IpProto.TCP, scope: LbScope.EXTERNAL },
    { backendId: 0, affinityTimeout: 0, count: 0, revNatIndex: 1, flags: 0 },
  );
}

const isTunneled = (addr: number): boolean => addr === ipNum(REMOTE_POD_IP);

/**
 * A forwarded packet's source as tendril_from_host knows it: a local pod
 * only from its own device, else the ipcache's identity — never the node's,
 * and (tunnel mode) never an address another node hosts: world.
 */
function forwardedSourceIdentity(saddr: number, ingress: number): number {
  const ep = endpointAt(saddr);
  if (ep) return !(ep.flags & EndpointFlag.HOST) && ep.ifindex === ingress ? ep.identity : IDENTITY.WORLD;
  const id = ipcacheIdentity(saddr);
  if (id === IDENTITY.HOST || isTunneled(saddr) || id === 6) return IDENTITY.WORLD;
  return id;
}

/** The VNI of a packet from_host encapsulates: the node's identity for its own, a forwarded one's portable identity (node-local scope is world). */
function fromHostVni(saddr: number, ingress: number): number {
  if (!ingress) return IDENTITY.HOST;
  const id = forwardedSourceIdentity(saddr, ingress);
  return id & 0xff000000 ? IDENTITY.WORLD : id;
}

/** A TCP packet to the ClusterIP (ports readable): refused when forwarded other than from a local pod's own device; else no backend. */
function expectFromHostClusterIp(f: Buffer, ip: Ipv4, s: ModelState, ingress: number): Expected | undefined {
  if (ip.daddr !== ipNum(FUZZ_CLUSTER_IP.ip) || ip.proto !== IpProto.TCP) return undefined;
  const l4 = parseL4(f, ip, s.frags);
  if (typeof l4 === 'number' || l4.dport !== FUZZ_CLUSTER_IP.port) return undefined;
  if (ingress) {
    const ep = podAt(ip.saddr);
    if (!ep || ep.ifindex !== ingress) return drop(reason('CLUSTERIP_FROM_OUTSIDE'));
  }
  return drop(reason('NO_SERVICE'));
}

/** A redirect into the overlay: the frame unchanged, its TO_OVERLAY trace carrying the VNI's identity. */
function checkOverlayRedirect(input: Buffer, out: { data: Buffer; events: RawEvent[] }, vni: number): string[] {
  const v: string[] = [];
  if (!out.data.equals(input)) v.push('an encapsulated frame was changed');
  const traces = out.events.filter((e) => e.type === EventType.TRACE && e.subtype === TracePoint.TO_OVERLAY);
  if (traces.length !== 1) v.push(`${traces.length} TO_OVERLAY traces, not one`);
  else if (traces[0]!.srcIdentity !== vni) v.push(`encapsulated with identity ${traces[0]!.srcIdentity}, the reference model says ${vni}`);
  return v;
}

// ---- invariants -----------------------------------------------------------------

const macHex = (m: string): string => m.replace(/:/g, '');

/** Checks one packet's run; returns the violations (empty when all hold). */
function checkPacket(
  program: Program,
  input: Buffer,
  out: { retval: number; data: Buffer; events: RawEvent[] },
  want: Expected,
  ctBefore: Map<string, CtEntryValue>,
  ctAfter: Map<string, CtEntryValue>,
  metricsBefore: Map<string, { packets: bigint; bytes: bigint }>,
  metricsAfter: Map<string, { packets: bigint; bytes: bigint }>,
): string[] {
  const v: string[] = [];
  const { retval, data, events } = out;
  if (retval !== OK && retval !== SHOT && retval !== REDIRECT) v.push(`verdict ${retval} is none of OK, SHOT, REDIRECT`);

  // Drops: one DROP event with a known reason, counted under it; passes: no DROP event, counted as forwarded.
  const drops = events.filter((e) => e.type === 1);
  if (retval === SHOT) {
    if (drops.length !== 1) v.push(`a drop emitted ${drops.length} DROP events`);
    else if (!KNOWN_DROP_CODES.has(drops[0]!.subtype)) v.push(`DROP event with unknown reason ${drops[0]!.subtype}`);
  } else if (drops.length !== 0) {
    v.push(`verdict ${retval} with DROP events (reasons ${drops.map((d) => d.subtype).join(', ')})`);
  }
  const changed = [...metricsAfter].filter(([k, a]) => {
    const b = metricsBefore.get(k) ?? { packets: 0n, bytes: 0n };
    return a.packets !== b.packets || a.bytes !== b.bytes;
  });
  const metricWant = retval === SHOT && drops.length === 1 ? `${drops[0]!.subtype}/${drops[0]!.direction}` : undefined;
  if (changed.length !== 1) v.push(`${changed.length} metrics counters changed (${changed.map(([k]) => k).join(', ')}), not one`);
  else {
    const [k, a] = changed[0]!;
    const b = metricsBefore.get(k) ?? { packets: 0n, bytes: 0n };
    if (a.packets - b.packets !== 1n || a.bytes - b.bytes !== BigInt(input.length)) v.push(`metrics ${k} grew by ${a.packets - b.packets} packets / ${a.bytes - b.bytes} bytes, not 1 / ${input.length}`);
    if (metricWant !== undefined && k !== metricWant) v.push(`the drop was counted under ${k}, its event says ${metricWant}`);
    if (retval !== SHOT && !k.startsWith('0/')) v.push(`a pass was counted under ${k}`);
  }

  // Conntrack: only the packet's own new flow, only when it is a well-formed, allowed new flow.
  const created = [...ctAfter.keys()].filter((k) => !ctBefore.has(k));
  for (const k of created) {
    if (!want.wellFormed) v.push(`a packet that is not well-formed IPv4 from/to a pod created conntrack entry ${k}`);
    else if (k !== want.creates) v.push(`created conntrack entry ${k}, expected ${want.creates ?? 'none'}`);
    else if (retval === SHOT && want.reason !== reason('TTL_EXCEEDED')) v.push(`a dropped packet created conntrack entry ${k}`);
  }

  // A policy drop follows its verdict event: DENIED for a deny entry, NO_MATCH without one, with the drop's cookie.
  const drop1 = drops.length === 1 ? drops[0]! : undefined;
  if (drop1 && (drop1.subtype === reason('POLICY') || drop1.subtype === reason('POLICY_DENY'))) {
    const verdicts = events.filter((e) => e.type === 2);
    const last = verdicts[verdicts.length - 1];
    const want = drop1.subtype === reason('POLICY') ? 3 : 2;
    if (!last || last.subtype !== want || last.cookie !== drop1.cookie || last.direction !== drop1.direction) v.push(`policy drop ${drop1.subtype} (cookie ${drop1.cookie}) not preceded by its verdict event (got ${JSON.stringify(last)})`);
  }

  // The reference model.
  if (retval !== want.action) v.push(`verdict ${retval}, the reference model says ${want.action}${want.reason ? ` (drop ${want.reason})` : ''}${want.icmp ? ` [${want.icmp}]` : ''}`);
  else if (retval === SHOT && drops.length === 1 && drops[0]!.subtype !== want.reason) v.push(`drop reason ${drops[0]!.subtype}, the reference model says ${want.reason}${want.icmp ? ` [${want.icmp}]` : ''}`);

  // What a redirect hands on.
  if (retval === REDIRECT && want.overlayVni !== undefined) {
    v.push(...checkOverlayRedirect(input, out, want.overlayVni));
  } else if (retval === REDIRECT && program === 'tendril_from_container' && input.length >= 14 && input.readUInt16BE(12) === EtherType.IPV6) {
    v.push(...checkNeighborAdvert(input, data, want.to));
  } else if (retval === REDIRECT) {
    const type = input.length >= 14 ? input.readUInt16BE(12) : 0;
    if (data.length !== input.length) v.push(`redirected frame is ${data.length} bytes, the input ${input.length}`);
    if (program === 'tendril_from_container' && type === EtherType.ARP) {
      const ep = want.to;
      if (!ep) v.push('an ARP frame was answered that the model would not answer');
      else {
        const sha = input.subarray(22, 28).toString('hex');
        const expectedReply = Buffer.from(input);
        Buffer.from(sha, 'hex').copy(expectedReply, 0);
        Buffer.from(macHex(ep.lxcMac), 'hex').copy(expectedReply, 6);
        expectedReply.writeUInt16BE(2, 20);
        Buffer.from(macHex(ep.lxcMac), 'hex').copy(expectedReply, 22);
        input.copy(expectedReply, 28, 38, 42);
        Buffer.from(sha, 'hex').copy(expectedReply, 32);
        input.copy(expectedReply, 38, 28, 32);
        if (!data.equals(expectedReply)) v.push(`ARP reply ${data.toString('hex')} is not ${expectedReply.toString('hex')}`);
      }
    } else {
      const ip = parseIpv4(input);
      const dst = ip ? podAt(ip.daddr) : undefined;
      if (type !== EtherType.IPV4 || !ip || !dst) v.push('redirected a frame that is not well-formed IPv4 to a local pod');
      else if (program === 'tendril_from_container' && !podAt(ip.saddr)) v.push('redirected a frame whose source is no local pod');
      else if (data.length === input.length) {
        if (data.subarray(0, 6).toString('hex') !== macHex(dst.podMac) || data.subarray(6, 12).toString('hex') !== macHex(dst.lxcMac)) v.push(`redirected with MACs ${data.subarray(0, 12).toString('hex')}, not ${dst.ip}'s`);
        const dec = program === 'tendril_from_container' ? 1 : 0;
        if (data[22] !== ip.ttl - dec) v.push(`redirected with TTL ${data[22]}, the input had ${ip.ttl}`);
        const header = (b: Buffer) => b.subarray(14, 14 + ip.hlen);
        if (internetChecksum(header(input)) === 0 && internetChecksum(header(data)) !== 0) v.push('redirected with a broken IPv4 header checksum');
        const rest = (b: Buffer) => Buffer.concat([b.subarray(12, 22), b.subarray(23, 24), b.subarray(26)]);
        if (!rest(data).equals(rest(input))) v.push('redirect changed bytes other than the MACs, the TTL and the header checksum');
      }
    }
  }
  return v;
}

/** The neighbour advertisement a solicitation became: to the soliciting pod, from and for the lxc MAC, the target as source, a valid checksum. */
function checkNeighborAdvert(input: Buffer, data: Buffer, ep: Endpoint | undefined): string[] {
  if (!ep) return ['an IPv6 frame was answered that the model would not answer'];
  const v: string[] = [];
  const src = formatIp(parseIpv6Bytes(input.subarray(22, 38)));
  const target = formatIp(parseIpv6Bytes(input.subarray(62, 78)));
  if (data.length !== 86) v.push(`advertisement is ${data.length} bytes, not 86`);
  else {
    if (!data.subarray(0, 6).equals(input.subarray(6, 12)) || data.subarray(6, 12).toString('hex') !== macHex(ep.lxcMac)) v.push('advertisement MACs are not the solicitor\'s and the lxc device\'s');
    if (data[54] !== 136 || data[55] !== 0 || data[58] !== 0x60 || data[78] !== 2 || data[79] !== 1 || data.subarray(80, 86).toString('hex') !== macHex(ep.lxcMac)) v.push(`advertisement body ${data.subarray(54).toString('hex')} is wrong`);
    if (formatIp(parseIpv6Bytes(data.subarray(22, 38))) !== target || formatIp(parseIpv6Bytes(data.subarray(38, 54))) !== src || data[21] !== 255) v.push('advertisement addresses or hop limit are wrong');
    if (internetChecksum(Buffer.concat([pseudoHeader6(target, src, IpProto.ICMPV6, 32), data.subarray(54)])) !== 0) v.push('advertisement checksum is wrong');
  }
  return v;
}

const parseIpv6Bytes = (b: Buffer) => ipFromBytes(b, 6);

// ---- the property ---------------------------------------------------------------

interface RunInput {
  policy: PolicyEntrySpec[];
  frames: FuzzFrame[];
  /** Per frame, tendril_from_host's skb->ingress_ifindex (0: the node's own packet); none for the other programs. */
  ingress?: number[];
}

const runArb = (side: FuzzSide): fc.Arbitrary<RunInput> =>
  fc.record({
    policy: fc.array(policyEntryArb, { maxLength: 8 }).map((extra) => dedupe([...BASE_POLICY, ...extra])),
    frames: fc.array(fuzzFrameArb(side), { minLength: 1, maxLength: 3 }),
  });

/** tendril_from_host's runs: the stack's frames and ClusterIP frames, each from the node itself or forwarded from a device. */
const fromHostRunArb: fc.Arbitrary<RunInput> = fc
  .record({
    policy: fc.array(policyEntryArb, { maxLength: 8 }).map((extra) => dedupe([...BASE_POLICY, ...extra])),
    frames: fc.array(fc.tuple(fc.oneof({ weight: 4, arbitrary: fuzzFrameArb('stack') }, { weight: 1, arbitrary: clusterIpFrameArb }), fromHostIngressArb), { minLength: 1, maxLength: 3 }),
  })
  .map(({ policy, frames }) => ({ policy, frames: frames.map(([f]) => f), ingress: frames.map(([, i]) => i) }));

const show = (i: RunInput): string =>
  `policy ${JSON.stringify(i.policy.slice(BASE_POLICY.length))}\n${i.frames.map((f, n) => `  frame ${n} (${f.label}, ${f.frame.length} bytes${i.ingress?.[n] ? `, forwarded from ifindex ${i.ingress[n]}` : ''}): ${f.frame.toString('hex')}`).join('\n')}`;

/** Generated frames BPF_PROG_TEST_RUN refuses (see testRunAccepts), reported with the run counts. */
const refused = { count: 0 };

/** What the reference model expected of the frames run, per program: shows which paths the runs reached. */
const outcomes = new Map<Program, Map<string, number>>();
const ACTION_NAMES: Record<number, string> = { [OK]: 'ok', [SHOT]: 'drop', [REDIRECT]: 'redirect' };

function countOutcome(program: Program, want: Expected): void {
  let m = outcomes.get(program);
  if (!m) outcomes.set(program, (m = new Map()));
  const name = want.action === SHOT ? `drop ${want.reason}` : `${ACTION_NAMES[want.action]}${want.creates ? ' new-flow' : ''}`;
  m.set(name, (m.get(name) ?? 0) + 1);
}

async function runFrames(h: FuzzHarness, program: Program, input: RunInput): Promise<string[]> {
  await h.reset(input.policy);
  const policy = new ReferencePolicy(input.policy);
  const violations: string[] = [];
  let ct = await h.conntrack();
  let metrics = await h.metricTotals();
  for (const [n, { frame }] of input.frames.entries()) {
    if (!testRunAccepts(frame)) {
      refused.count++;
      continue;
    }
    const state: ModelState = { policy, ct, frags: await h.fragments(), now: process.hrtime.bigint() };
    const ingress = input.ingress?.[n] ?? 0;
    const want = expected(program, frame, state, ingress);
    countOutcome(program, want);
    const out = await h.run(program, frame, ingress);
    const metricsAfter = await h.metricTotals();
    out.events = await h.eventsUpToMarker();
    const ctAfter = await h.conntrack();
    for (const v of checkPacket(program, frame, out, want, ct, ctAfter, metrics, metricsAfter)) violations.push(`frame ${n}: ${v}`);
    ct = ctAfter;
    metrics = await h.metricTotals();
  }
  return violations;
}

const MARKERS: Record<'lxc' | 'host', { program: Program; frame: Buffer }> = {
  lxc: { program: 'tendril_from_container', frame: ethernetFrame({ etherType: 0x88b5, payload: Buffer.alloc(MARKER_LEN - 14) }) },
  host: { program: 'tendril_from_host', frame: ipv4Frame({ src: NODE_IP, dst: '10.200.0.99', proto: IpProto.GRE, payload: Buffer.alloc(MARKER_LEN - 34) }) },
};

const harnesses = new Map<string, FuzzHarness>();
async function harness(object: 'lxc' | 'host'): Promise<FuzzHarness> {
  let h = harnesses.get(object);
  if (!h) {
    harnesses.set(object, (h = await FuzzHarness.load(object === 'lxc' ? LXC_OBJECT : HOST_OBJECT, MARKERS[object])));
    if (object === 'host') installHostTrustBoundary(h.object);
    if (object === 'lxc') podDeviceOwner = await findPodDeviceOwner(h.object);
  }
  return h;
}

describe(`datapath packet fuzz (seed ${SEED}, ${RUNS} runs per program; TENDRIL_FUZZ_SEED / TENDRIL_FUZZ_RUNS)`, () => {
  after(async () => {
    for (const h of harnesses.values()) await h.close();
  });

  const programs: Array<[Program, 'lxc' | 'host']> = [
    ['tendril_from_container', 'lxc'],
    ['tendril_to_container', 'lxc'],
    ['tendril_from_host', 'host'],
    ['tendril_to_host', 'host'],
  ];
  for (const [program, object] of programs) {
    it(`${program}: generated packets break no invariant`, async (t) => {
      const h = await harness(object);
      const started = Date.now();
      const result = await fc.check(
        fc.asyncProperty(program === 'tendril_from_host' ? fromHostRunArb : runArb(program === 'tendril_from_container' ? 'pod' : 'stack'), async (input) => {
          const violations = await runFrames(h, program, input);
          if (violations.length > 0) throw new Error(`${violations.join('\n')}\n${show(input)}`);
        }),
        { numRuns: RUNS, seed: SEED },
      );
      t.diagnostic(`${program}: model outcomes ${JSON.stringify(Object.fromEntries([...(outcomes.get(program) ?? new Map<string, number>())].sort()))}`);
      t.diagnostic(`${program}: ${result.numRuns} runs in ${Date.now() - started} ms; frames the kernel refuses to test-run so far: ${refused.count}`);
      if (result.failed) {
        assert.fail(`invariants broken (reproduce with TENDRIL_FUZZ_SEED=${SEED} TENDRIL_FUZZ_RUNS=${RUNS}, counterexample path ${result.counterexamplePath}):\n${result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance)}`);
      }
    });
  }

  /** An ICMP error frame: `inner` (an IPv4 datagram) embedded as routers do, or carried only in the trailer past a total length that ends after the ICMP header. */
  const errorFrame = (src: string, dst: string, type: number, inner: Buffer, innerPastEnd = false, macs: { srcMac?: string; dstMac?: string } = {}): Buffer => {
    const f = ipv4Frame({ ...macs, src, dst, proto: IpProto.ICMP, payload: icmpError(type, type === 3 ? 3 : 0, inner) });
    if (innerPastEnd) {
      f.writeUInt16BE(20 + 8, 16);
      f.writeUInt16BE(0, 24);
      f.writeUInt16BE(internetChecksum(f.subarray(14, 34)), 24);
    }
    return f;
  };
  const seeded = (i: number): Buffer => {
    const s = SEED_FLOWS[i]!;
    const payload = s.proto === IpProto.UDP ? udpDatagram({ src: s.saddr, dst: s.daddr, sport: s.sport, dport: s.dport }) : icmpEcho({ id: s.sport });
    return ipv4Datagram({ src: s.saddr, dst: s.daddr, proto: s.proto, payload });
  };

  // Found by this fuzzer: an ICMP error is related only when it goes back to the sender of the datagram it carries;
  // relating it by the embedded tuple alone let any error naming any tracked flow skip policy.
  it('regression: an ICMP error from pod A to pod B about A\'s own flow to the world is held to policy (no entry allows it)', async (t) => {
    const h = await harness('lxc');
    await h.reset([]);
    const frame = errorFrame(POD_A.ip, POD_B.ip, 3, seeded(0), false, { srcMac: POD_A.podMac, dstMac: POD_A.lxcMac });
    t.diagnostic(`frame ${frame.toString('hex')}`);
    const r = await h.run('tendril_from_container', frame);
    const events = await h.eventsUpToMarker();
    assert.equal(r.retval, SHOT, 'A may not send B anything, yet the error about A→world:53 is redirected into B');
    assert.deepEqual(events.filter((e) => e.type === 1).map((e) => e.subtype), [reason('POLICY')]);
  });

  it('regression: an ICMP error from the world to pod A about pod B\'s flow is held to A\'s ingress policy', async (t) => {
    const h = await harness('lxc');
    await h.reset([]);
    const frame = errorFrame('198.51.100.9', POD_A.ip, 3, seeded(3));
    t.diagnostic(`frame ${frame.toString('hex')}`);
    const r = await h.run('tendril_to_container', frame);
    await h.eventsUpToMarker();
    assert.equal(r.retval, SHOT, 'the error is about B→remote, not about anything A sent');
  });

  // Found by this fuzzer: the embedded header is read within the datagram (IP total length), never from the frame's trailer.
  it('regression: an ICMP error whose datagram ends after the ICMP header is not related by bytes in the frame\'s trailer', async (t) => {
    const h = await harness('lxc');
    await h.reset([]);
    const frame = errorFrame('192.0.2.1', POD_A.ip, 11, seeded(0), true);
    t.diagnostic(`frame ${frame.toString('hex')}`);
    const r = await h.run('tendril_to_container', frame);
    await h.eventsUpToMarker();
    assert.equal(r.retval, SHOT, 'the datagram carries no embedded header, so nothing relates it; no policy entry allows it');
  });

  /** An ICMPv6 error from `src` to `dst` (link-local: the model's pod holds no other IPv6 address) embedding an IPv6 datagram of `flow`. */
  const error6Frame = (src: string, dst: string, flow: { saddr: string; daddr: string; proto: number; sport: number; dport: number }): Buffer => {
    const l4 = udpDatagram({ src: '10.0.0.1', dst: '10.0.0.2', sport: flow.sport, dport: flow.dport }).subarray(0, 8);
    const inner = datagramOf(ipv6Frame({ src: flow.saddr, dst: flow.daddr, nextHeader: flow.proto, payload: l4 }));
    return ipv6Frame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src, dst, nextHeader: IpProto.ICMPV6, payload: Buffer.concat([Buffer.from([1, 4, 0, 0, 0, 0, 0, 0]), inner]) });
  };
  const udpSeed6 = SEED_FLOWS6.find((f) => f.proto === IpProto.UDP)!;

  it('an ICMPv6 error to the pod about a flow it sent is related and delivered; one about a flow it never had, or sent to someone else, meets policy (none allows it)', async () => {
    const h = await harness('lxc');
    const verdicts: Record<string, number> = {};
    const cases: Array<[string, Buffer]> = [
      ['about its own flow, to it', error6Frame('fe80::2', udpSeed6.saddr, udpSeed6)],
      ['about a flow it never had', error6Frame('fe80::2', 'fe80::1', { ...udpSeed6, daddr: 'fe80::5', sport: 4444 })],
      ['about its flow with a forged port', error6Frame('fe80::2', 'fe80::1', { ...udpSeed6, dport: udpSeed6.dport + 1 })],
      ['about its flow, to the flow\'s peer', error6Frame('fe80::1', udpSeed6.daddr, udpSeed6)],
    ];
    for (const [what, frame] of cases) {
      await h.reset([]);
      verdicts[what] = (await h.run('tendril_to_container', frame)).retval;
      await h.eventsUpToMarker();
    }
    assert.deepEqual(verdicts, {
      'about its own flow, to it': OK,
      'about a flow it never had': SHOT,
      'about its flow with a forged port': SHOT,
      'about its flow, to the flow\'s peer': SHOT,
    });
  });

  // Found by this fuzzer: the node's own multicast on tendril_host is no pod's traffic and passes.
  it('regression: tendril_from_host passes the node\'s multicast out of tendril_host (no pod address)', async (t) => {
    const h = await harness('host');
    await h.reset([]);
    const frame = udpFrame({ srcMac: '0a:00:00:00:ff:01', dstMac: '01:00:5e:00:00:fb', src: '10.200.0.1', dst: '224.0.0.251', sport: 5353, dport: 5353, ttl: 255 });
    t.diagnostic(`frame ${frame.toString('hex')}`);
    const r = await h.run('tendril_from_host', frame);
    await h.eventsUpToMarker();
    assert.equal(r.retval, OK, 'mDNS from the router address is no pod\'s traffic');
  });

  it('tendril_from_container and tendril_to_container: a valid packet truncated at every byte offset is dropped and tracks nothing', async () => {
    const h = await harness('lxc');
    const valid = [
      tcpFrame({ srcMac: POD_A.podMac, dstMac: POD_A.lxcMac, src: POD_A.ip, dst: POD_B.ip, sport: 40001, dport: 80, options: Buffer.from([1, 1, 1, 0]) }),
      udpFrame({ src: POD_A.ip, dst: POD_B.ip, sport: 1, dport: 53 }),
      ipv4Frame({ src: POD_B.ip, dst: POD_A.ip, proto: IpProto.ICMP, payload: icmpError(3, 3, ipv4Datagram({ src: POD_A.ip, dst: '198.51.100.9', proto: IpProto.UDP, payload: udpDatagram({ src: POD_A.ip, dst: '198.51.100.9', sport: 5353, dport: 53 }) })) }),
    ];
    const violations: string[] = [];
    for (const program of ['tendril_from_container', 'tendril_to_container'] as const) {
      for (const frame of valid) {
        for (const cut of truncations(frame)) {
          const v = await runFrames(h, program, { policy: BASE_POLICY, frames: [{ label: 'truncated', frame: cut }] });
          violations.push(...v.map((x) => `${program} ${cut.toString('hex')}: ${x}`));
        }
      }
    }
    assert.deepEqual(violations, []);
  });
});
