/**
 * A reference model of SNAT's decisions in bpf_netdev.o (bpf/lib/nat.h), in
 * TypeScript, for the SNAT fuzz test (natFuzz.test.ts). Given the SNAT
 * table, conntrack and fragment records as they are before a packet, it
 * says what may become of the packet — left alone, translated (to what), or
 * dropped (why) — and what the table holds afterwards. The port search is
 * random, so the model answers every outcome a choice of port can give: the
 * source port when it is one of SNAT's and claimable, else any claimable
 * port (free, or held by a flow that is over); NAT_FULL when no port can be
 * claimed and a free one needs room the table lacks — or, in a range wider
 * than NAT_FULL_WALK, whenever the table is full (the search is bounded
 * then) — (or the claimed port's
 * original side finds none); NAT_PORT_EXHAUSTED when every port is held by
 * a live flow. A mapping whose port is outside the ranges (they changed) is
 * stale: its flow gets a new one.
 * Addresses are host-order numbers.
 */
import { CtFlag, CtTimeout, DropReason, NatDirection, NatFlag, NAT_CLOSED_REUSE_MS, NAT_FULL_WALK, NAT_PORT_MAX, NAT_PORT_MIN, NAT_UNTRACKED_GRACE_S } from '../constants.js';
import type { CtEntryValue } from '../layout.js';
import { isLaterFragment, parseIpv4, parseL4, tupleString, type InnerTuple, type Ipv4 } from './packetModel.js';
import { EtherType, IpProto, TcpFlag } from './packets.js';

const reason = (r: keyof typeof DropReason): number => -DropReason[r].code;

const NAT_UNTRACKED_GRACE_NS = BigInt(NAT_UNTRACKED_GRACE_S) * 1_000_000_000n;
const NAT_CLOSED_REUSE_NS = BigInt(NAT_CLOSED_REUSE_MS) * 1_000_000n;
const CT_CLOSING_NS = BigInt(CtTimeout.TCP_CLOSING) * 1_000_000_000n;

export interface NatKeyN {
  saddr: number;
  daddr: number;
  sport: number;
  dport: number;
  proto: number;
  dir: number;
}

export interface NatValN {
  createdNs: bigint;
  toAddr: number;
  toPort: number;
  flags: number;
  /** Written by this packet: its created_ns is the packet's time, unknown to the model. */
  fresh?: boolean;
}

export const natKeyString = (k: NatKeyN): string => `${k.dir === NatDirection.EGRESS ? 'EGRESS' : 'INGRESS'} ${tupleString(k.saddr, k.daddr, k.sport, k.dport, k.proto)}`;

type UpdateResult = 0 | 'EEXIST' | 'ENOENT' | 'E2BIG';

/** tendril_snat4 as a plain hash of `max` entries: BPF_NOEXIST, BPF_EXIST and BPF_ANY as the kernel answers them. */
export class SnatTable {
  readonly entries: Map<string, [NatKeyN, NatValN]>;

  constructor(
    readonly max: number,
    entries: Iterable<[string, [NatKeyN, NatValN]]> = [],
  ) {
    this.entries = new Map(entries);
  }

  clone(): SnatTable {
    return new SnatTable(this.max, [...this.entries].map(([s, [k, v]]) => [s, [k, { ...v }]] as [string, [NatKeyN, NatValN]]));
  }

  get(k: NatKeyN): NatValN | undefined {
    return this.entries.get(natKeyString(k))?.[1];
  }

  update(k: NatKeyN, v: NatValN, mode: 'noexist' | 'exist' | 'any'): UpdateResult {
    const s = natKeyString(k);
    const has = this.entries.has(s);
    if (mode === 'noexist' && has) return 'EEXIST';
    if (mode === 'exist' && !has) return 'ENOENT';
    if (!has && this.entries.size >= this.max) return 'E2BIG';
    this.entries.set(s, [k, { ...v }]);
    return 0;
  }

  delete(k: NatKeyN): void {
    this.entries.delete(natKeyString(k));
  }
}

/** SNAT's source ports: the config's ranges, or NAT_PORT_MIN..NAT_PORT_MAX without one (nat_ports_load). */
export function natPortRanges(config: ReadonlyArray<{ min: number; max: number }>): Array<{ min: number; max: number }> {
  const [r0, r1] = config;
  if (!r0 || !r0.min || r0.max < r0.min) return [{ min: NAT_PORT_MIN, max: NAT_PORT_MAX }];
  return r1 && r1.min && r1.max >= r1.min ? [r0, r1] : [r0];
}

export interface SnatWorld {
  /** The device's address (the node's). */
  nodeAddr: number;
  ranges: ReadonlyArray<{ min: number; max: number }>;
  /** Inside the masquerade CIDRs. */
  masquerade(addr: number): boolean;
  /** An address of the cluster's nodes or reached through one (ipcache_is_cluster4). */
  cluster(addr: number): boolean;
  /** Both conntrack maps, by tupleString of the original direction. */
  ct: ReadonlyMap<string, CtEntryValue>;
  frags: Map<string, { sport: number; dport: number }>;
  now: bigint;
}

/** A field's new value; `port` is the TCP/UDP port or the ICMP echo identifier. */
export interface Endpoint {
  addr: number;
  port?: number;
}

export interface Rewrite {
  src?: Endpoint;
  dst?: Endpoint;
  /** An ICMP error's embedded datagram. */
  inner?: { tuple: InnerTuple; src?: Endpoint; dst?: Endpoint };
}

export interface Outcome {
  action: 'leave' | 'translate' | 'drop';
  /** A drop's reason (positive code). */
  reason?: number;
  rewrite?: Rewrite;
  /** The port a translated packet of a mapped flow leaves with (source) or comes back to (its reply: the pod's). */
  port?: number;
  /** The table after the packet. */
  table: SnatTable;
  /** Why, for a failure's message. */
  why: string;
}

export interface Packet {
  ip: Ipv4;
  sport: number;
  dport: number;
  /** ICMP: the type (a later fragment: undefined). */
  icmpType?: number;
  icmpError: boolean;
  inner?: InnerTuple;
}

/** What ipv4_load and l4_load make of an Ethernet frame; undefined where the programs leave it alone. */
export function readPacket(frame: Buffer, frags: Map<string, { sport: number; dport: number }>): Packet | undefined {
  if (frame.length < 14 || frame.readUInt16BE(12) !== EtherType.IPV4) return undefined;
  const ip = parseIpv4(frame);
  if (!ip) return undefined;
  const l4 = parseL4(frame, ip, frags);
  if (typeof l4 === 'number') return undefined;
  const icmpType = ip.proto === IpProto.ICMP && !isLaterFragment(ip) ? frame[ip.l4Off]! : undefined;
  return { ip, sport: l4.sport, dport: l4.dport, icmpError: l4.icmpError, ...(icmpType !== undefined ? { icmpType } : {}), ...(l4.inner ? { inner: l4.inner } : {}) };
}

const leave = (table: SnatTable, why: string): Outcome[] => [{ action: 'leave', table, why }];
const dropped = (table: SnatTable, r: number, why: string): Outcome => ({ action: 'drop', reason: r, table, why });

function inRanges(ranges: SnatWorld['ranges'], port: number): boolean {
  return ranges.some((r) => port >= r.min && port <= r.max);
}

function rangePorts(ranges: SnatWorld['ranges']): number[] {
  const out = new Set<number>();
  for (const r of ranges) for (let p = r.min; p <= r.max; p++) out.add(p);
  return [...out];
}

function ctLive(w: SnatWorld, saddr: number, daddr: number, sport: number, dport: number, proto: number): boolean {
  const e = w.ct.get(tupleString(saddr, daddr, sport, dport, proto));
  return e !== undefined && e.expiresNs > w.now;
}

/**
 * snat4_holder_over: the flow holding a reply tuple is over (expired; reset or closed both ways, its last packet
 * NAT_CLOSED_REUSE_MS old; untracked past the grace).
 */
function holderOver(w: SnatWorld, rkey: NatKeyN, cur: NatValN): boolean {
  if (rkey.proto === IpProto.ICMP) return false;
  const e = w.ct.get(tupleString(cur.toAddr, rkey.saddr, cur.toPort, rkey.sport, rkey.proto));
  if (!e) return !cur.fresh && w.now - cur.createdNs > NAT_UNTRACKED_GRACE_NS;
  if (e.expiresNs <= w.now) return true;
  const closed = (e.tcpFlags & TcpFlag.RST) !== 0 || (e.flags & (CtFlag.FIN_ORIGINAL | CtFlag.FIN_REPLY)) === (CtFlag.FIN_ORIGINAL | CtFlag.FIN_REPLY);
  return rkey.proto === IpProto.TCP && closed && e.expiresNs + NAT_CLOSED_REUSE_NS <= w.now + CT_CLOSING_NS;
}

interface Flow {
  saddr: number;
  daddr: number;
  sport: number;
  dport: number;
  proto: number;
}

const egressKey = (f: Flow): NatKeyN => ({ saddr: f.saddr, daddr: f.daddr, sport: f.sport, dport: f.dport, proto: f.proto, dir: NatDirection.EGRESS });
const ingressKey = (f: Flow, natAddr: number, natPort: number): NatKeyN => ({ saddr: f.daddr, daddr: natAddr, sport: f.dport, dport: natPort, proto: f.proto, dir: NatDirection.INGRESS });

/** snat4_claim on table t (changed in place): 1 claimed, 0 held by a live flow, 'full'. */
function claim(w: SnatWorld, t: SnatTable, f: Flow, back: NatValN, port: number): 1 | 0 | 'full' {
  const rkey = ingressKey(f, w.nodeAddr, port);
  const r = t.update(rkey, back, 'noexist');
  if (r === 0) return 1;
  if (r !== 'EEXIST') return 'full';
  const cur = t.get(rkey)!;
  if (!holderOver(w, rkey, cur)) return 0;
  const old = { ...cur };
  t.update(rkey, back, 'exist');
  const okey: NatKeyN = { saddr: old.toAddr, daddr: f.daddr, sport: old.toPort, dport: f.dport, proto: f.proto, dir: NatDirection.EGRESS };
  const o = t.get(okey);
  if (o && o.toAddr === w.nodeAddr && o.toPort === port) t.delete(okey);
  return 1;
}

/** snat4_mapping and what follows: every outcome of the packet of flow f that SNAT translates. */
function mapping(w: SnatWorld, before: SnatTable, f: Flow, rewrite: (port: number) => Rewrite): Outcome[] {
  const t = before.clone();
  const okey = egressKey(f);
  const hit = t.get(okey);
  const back: NatValN = { createdNs: w.now, toAddr: f.saddr, toPort: f.sport, flags: NatFlag.MASQUERADE, fresh: true };
  if (hit) {
    const rkey = ingressKey(f, hit.toAddr, hit.toPort);
    // A port outside the ranges (they changed since the mapping was made) is none of SNAT's: its replies would not come back (snat4_rev_netdev).
    if (hit.toAddr === w.nodeAddr && inRanges(w.ranges, hit.toPort)) {
      const cur = t.get(rkey);
      if (cur ? cur.toAddr === f.saddr && cur.toPort === f.sport : t.update(rkey, { ...back, createdNs: hit.createdNs, fresh: hit.fresh ?? false }, 'noexist') === 0) {
        return [{ action: 'translate', rewrite: rewrite(hit.toPort), port: hit.toPort, table: t, why: `the flow's mapping to port ${hit.toPort}` }];
      }
    } else {
      const b = t.get(rkey);
      if (b && b.toAddr === f.saddr && b.toPort === f.sport) t.delete(rkey);
    }
  }

  /** The rest of snat4_mapping once `port` is claimed on table c. */
  const finish = (c: SnatTable, port: number, why: string): Outcome => {
    const hadHit = hit !== undefined;
    const r = c.update(okey, { createdNs: w.now, toAddr: w.nodeAddr, toPort: port, flags: NatFlag.MASQUERADE, fresh: true }, hadHit ? 'any' : 'noexist');
    if (r !== 0) {
      c.delete(ingressKey(f, w.nodeAddr, port));
      return dropped(c, reason('NAT_FULL'), `port ${port} claimed, no room for the original side`);
    }
    return { action: 'translate', rewrite: rewrite(port), port, table: c, why };
  };

  // A free port the full table has no room for ends nothing: a port of a flow that is over needs none (its entry is
  // replaced, its flow's own side freed). NAT_FULL only when no port can be claimed and some could with room.
  let full = false;
  if (inRanges(w.ranges, f.sport)) {
    const c = t.clone();
    const r = claim(w, c, f, back, f.sport);
    if (r === 1) return [finish(c, f.sport, `source port ${f.sport} kept`)];
    full = r === 'full';
  }
  const outcomes: Outcome[] = [];
  for (const port of rangePorts(w.ranges)) {
    const c = t.clone();
    const r = claim(w, c, f, back, port);
    if (r === 'full') full = true;
    else if (r === 1) outcomes.push(finish(c, port, `port ${port} claimed`));
  }
  // In a full table the search stops NAT_FULL_WALK ports after its random probes: a range wider than that may hide
  // the one port of a flow that is over, and NAT_FULL is an answer too.
  if (full && rangePorts(w.ranges).length > NAT_FULL_WALK) outcomes.push(dropped(t, reason('NAT_FULL'), 'the table full, the bounded search found no port of a flow that is over'));
  if (outcomes.length > 0) return outcomes;
  return [full ? dropped(t, reason('NAT_FULL'), 'the table full, no port of a flow that is over') : dropped(t, reason('NAT_PORT_EXHAUSTED'), 'every port held by a live flow')];
}

/** tendril_to_netdev on a device with DEVICE_F_MASQUERADE and the node address. */
export function expectEgress(frame: Buffer, w: SnatWorld, table: SnatTable): Outcome[] {
  const p = readPacket(frame, w.frags);
  if (!p) return leave(table, 'not IPv4 the programs can read');
  const { ip } = p;
  if (ip.saddr === w.nodeAddr) return leave(table, 'the node\'s own address');
  if (!w.masquerade(ip.saddr) || w.masquerade(ip.daddr)) return leave(table, 'not from the masquerade CIDRs to outside them');
  if (w.cluster(ip.daddr)) return leave(table, 'to the cluster');
  if (ip.proto === IpProto.ICMP && p.icmpError) {
    const i = p.inner;
    if (!i || i.daddr !== ip.saddr) return leave(table, 'an ICMP error about no datagram the pod received');
    const m = table.get({ saddr: i.daddr, daddr: i.saddr, sport: i.dport, dport: i.sport, proto: i.proto, dir: NatDirection.EGRESS });
    if (!m) return leave(table, 'an ICMP error about an unmapped flow');
    return [{ action: 'translate', rewrite: { src: { addr: m.toAddr }, inner: { tuple: i, dst: { addr: m.toAddr, port: m.toPort } } }, port: m.toPort, table, why: 'an ICMP error about a mapped flow' }];
  }
  const later = isLaterFragment(ip);
  const translatable = ip.proto === IpProto.TCP || ip.proto === IpProto.UDP || (ip.proto === IpProto.ICMP && (later ? p.dport === 0 : p.icmpType === 8));
  const inboundReply = ctLive(w, ip.daddr, ip.saddr, p.dport, p.sport, ip.proto);
  if (!translatable) return inboundReply ? leave(table, 'an answer to a flow opened towards the pod') : [dropped(table, reason('NAT_UNSUPPORTED_PROTO'), 'SNAT cannot translate it')];
  if (ip.proto !== IpProto.ICMP && inboundReply) return leave(table, 'a reply of a flow opened towards the pod');
  const f: Flow = { saddr: ip.saddr, daddr: ip.daddr, sport: p.sport, dport: p.dport, proto: ip.proto };
  return mapping(w, table, f, (port) => ({ src: later ? { addr: w.nodeAddr } : { addr: w.nodeAddr, port } }));
}

/** tendril_from_netdev with no services: replies to masquerade mappings (and ICMP errors about them) go back to the pod. */
export function expectIngress(frame: Buffer, w: SnatWorld, table: SnatTable): Outcome[] {
  const p = readPacket(frame, w.frags);
  if (!p) return leave(table, 'not IPv4 the programs can read');
  const { ip } = p;
  if (ip.proto === IpProto.ICMP && p.icmpError) {
    const i = p.inner;
    if (!i || i.saddr !== ip.daddr) return leave(table, 'an ICMP error about no datagram the node sent');
    const m = table.get({ saddr: i.daddr, daddr: i.saddr, sport: i.dport, dport: i.sport, proto: i.proto, dir: NatDirection.INGRESS });
    if (!m) return leave(table, 'an ICMP error about no mapping');
    return [{ action: 'translate', rewrite: { dst: { addr: m.toAddr }, inner: { tuple: i, src: { addr: m.toAddr, port: m.toPort } } }, port: m.toPort, table, why: 'an ICMP error about a mapped flow' }];
  }
  if (!inRanges(w.ranges, p.dport)) return leave(table, 'to a port outside SNAT\'s ranges');
  const later = isLaterFragment(ip);
  if (ip.proto !== IpProto.TCP && ip.proto !== IpProto.UDP) {
    if (ip.proto !== IpProto.ICMP) return leave(table, 'a protocol SNAT does not translate');
    if (later ? p.sport !== 0 : p.icmpType !== 0) return leave(table, 'no echo reply');
  }
  const m = table.get({ saddr: ip.saddr, daddr: ip.daddr, sport: p.sport, dport: p.dport, proto: ip.proto, dir: NatDirection.INGRESS });
  if (!m) return leave(table, 'no mapping holds the port');
  return [{ action: 'translate', rewrite: { dst: later ? { addr: m.toAddr } : { addr: m.toAddr, port: m.toPort } }, port: m.toPort, table, why: `the reply side of port ${p.dport}` }];
}
