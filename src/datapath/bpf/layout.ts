/**
 * The codecs of the datapath's map keys, values and event records over
 * src/datapath/kernel/bpf. Their layouts are not written here: every
 * member's offset and size comes from the structs in bpf/lib/*.h through
 * the objects' BTF (generated/layouts.ts, written by `make build`). This
 * file only says what a member means where its C type does not (an address,
 * a MAC, a prefix), and what the member comments in the C headers say holds.
 *
 * Addresses travel as IpAddress (src/netip) in 16-byte slots: an IPv4
 * address in the first 4 bytes, network order, the rest zero.
 */
import { byteLength, familyBits, ipFromBytes, ipToBytes, type IpAddress, type IpFamily, type IpPrefix, maskBits } from '../../netip/index.js';
import { codec, type Codec } from '../kernel/bpf/index.js';
import { structCodec } from './btfStruct.js';
import { GC_BATCH, GC_SAMPLE_MAX, IPCACHE_KEY_FIXED_BITS, LB_SRC_RANGE_KEY_FIXED_BITS, NAT_PORT_RANGES, POLICY_KEY_FIXED_BITS, POLICY_KEY_L4_BITS, POLICY_KEY_STAGED } from './constants.js';
import * as btf from './generated/layouts.js';

const { bytes } = codec;
/** An IPv4 address over a __be32 member. */
const ipv4 = codec.ipAddress(4);
/** An IPv6 address over a `__be32 [4]` member. */
const ipv6 = codec.ipAddress(6);

function checkFamily(f: number): IpFamily {
  if (f !== 4 && f !== 6) throw new RangeError(`address family ${f} is neither 4 nor 6`);
  return f;
}

/** A 16-byte address slot (`__u32 ip[4]`) as raw bytes: IPv4 in the first 4, the rest zero. */
const addressSlot = bytes(16);

function slotBytes(v: IpAddress): Uint8Array {
  const b = Buffer.alloc(16);
  ipToBytes(v, b, 0);
  return b;
}

function slotAddress(slot: Uint8Array, family: number): IpAddress {
  const f = checkFamily(family);
  return ipFromBytes(slot.subarray(0, byteLength(f)), f);
}

/** A MAC address as `aa:bb:cc:dd:ee:ff`. */
export const macAddress: Codec<string> = codec.mapped(
  bytes(6),
  (b) => [...b].map((x) => x.toString(16).padStart(2, '0')).join(':'),
  (s) => {
    const parts = s.split(':');
    if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) throw new RangeError(`${JSON.stringify(s)} is not a MAC address`);
    return Uint8Array.from(parts.map((p) => parseInt(p, 16)));
  },
);

// ---- tendril_lxc: local endpoints (bpf/lib/endpoints.h) ----------------------

/** struct endpoint_key: the address and its family. */
export const endpointKey: Codec<IpAddress> = codec.mapped(
  structCodec(btf.endpointKeyLayout, { ip: addressSlot }),
  (k) => slotAddress(k.ip, k.family),
  (v) => ({ ip: slotBytes(v), family: v.family }),
);

/** struct endpoint_info */
export const endpointInfo = structCodec(btf.endpointInfoLayout, { lxcMac: macAddress, podMac: macAddress });
export type EndpointInfoValue = codec.CodecValue<typeof endpointInfo>;

// ---- tendril_ipcache: prefix → identity (bpf/lib/ipcache.h) --------------------

/**
 * struct ipcache_key and struct ipmasq_key, LPM trie keys: prefixlen counts
 * the 32 bits of padding and family (IPCACHE_KEY_FIXED_BITS), then the prefix.
 */
function prefixKey(layout: typeof btf.ipcacheKeyLayout | typeof btf.ipmasqKeyLayout, what: string): Codec<IpPrefix> {
  return codec.mapped(
    structCodec(layout, { ip: addressSlot }),
    (k) => {
      const family = checkFamily(k.family);
      const length = k.prefixlen - IPCACHE_KEY_FIXED_BITS;
      if (length < 0 || length > familyBits(family)) throw new RangeError(`${what} prefix length ${length} is outside 0..${familyBits(family)}`);
      const addr = slotAddress(k.ip, family);
      return { family, bits: maskBits(family, addr.bits, length), length };
    },
    (p) => ({ prefixlen: IPCACHE_KEY_FIXED_BITS + p.length, family: p.family, ip: slotBytes(p) }),
  );
}

export const ipcacheKey: Codec<IpPrefix> = prefixKey(btf.ipcacheKeyLayout, 'ipcache key');

/** struct remote_endpoint_info, its members as they are in C. */
const ipcacheValueRaw = structCodec(btf.remoteEndpointInfoLayout, {
  /** Node to tunnel to, network order (a __u32 in C); 0 = none (local, or reached through the stack). */
  tunnelIp4: codec.u32be,
  tunnelIp6: bytes(16),
});

/** An ipcache entry's value: its identity, and the node hosting it over an IPv4 (tunnelIp4) or an IPv6 (tunnelIp6) underlay. */
export interface IpcacheValue {
  identity: number;
  /** The hosting node's IPv4 address as a number; 0 = none. */
  tunnelIp4: number;
  flags: number;
  /** The hosting node's IPv6 address, when the overlay reaches it over IPv6; absent = none (all zero in the map). */
  tunnelIp6?: IpAddress;
}

/** struct remote_endpoint_info; an all-zero tunnel_ip6 reads as no tunnelIp6, so IPv4-only values read back as written. */
export const ipcacheValue: Codec<IpcacheValue> = codec.mapped(
  ipcacheValueRaw,
  (r) => ({ identity: r.identity, tunnelIp4: r.tunnelIp4, flags: r.flags, ...(r.tunnelIp6.some((b) => b !== 0) ? { tunnelIp6: ipFromBytes(r.tunnelIp6, 6) } : {}) }),
  (v) => {
    if (v.tunnelIp6 !== undefined && v.tunnelIp6.family !== 6) throw new RangeError('tunnelIp6 must be an IPv6 address');
    return { identity: v.identity, tunnelIp4: v.tunnelIp4, flags: v.flags, tunnelIp6: v.tunnelIp6 === undefined ? new Uint8Array(16) : slotBytes(v.tunnelIp6) };
  },
);

// ---- tendril_policy: per-endpoint policy entries (bpf/lib/policy.h) ------------

export interface PolicyKey {
  endpointId: number;
  /** Peer identity; 0 = any. */
  identity: number;
  egress: boolean;
  /** An entry of the endpoint's staged view (POLICY_KEY_STAGED); absent = the enforced policy's. */
  staged?: true;
  /** IANA protocol; 0 = any (then port and portPrefixLen are 0). */
  proto: number;
  port: number;
  /** Significant leading bits of `port` (0..16); only with a protocol. */
  portPrefixLen: number;
}

/** struct policy_key: prefixlen = POLICY_KEY_FIXED_BITS, + 8 with a protocol, + the port's prefix length. */
export const policyKey: Codec<PolicyKey> = codec.mapped(
  structCodec(btf.policyKeyLayout, {}),
  (k) => {
    const l4 = k.prefixlen - POLICY_KEY_FIXED_BITS;
    if (l4 < 0 || l4 > POLICY_KEY_L4_BITS) throw new RangeError(`policy key prefix length ${k.prefixlen} is outside ${POLICY_KEY_FIXED_BITS}..${POLICY_KEY_FIXED_BITS + POLICY_KEY_L4_BITS}`);
    return {
      endpointId: k.endpointId,
      identity: k.secIdentity,
      egress: (k.egress & 1) !== 0,
      ...((k.egress & POLICY_KEY_STAGED) !== 0 ? { staged: true as const } : {}),
      proto: l4 === 0 ? 0 : k.protocol,
      port: l4 <= 8 ? 0 : k.dport,
      portPrefixLen: l4 <= 8 ? 0 : l4 - 8,
    };
  },
  (k) => {
    if (k.proto === 0 && (k.port !== 0 || k.portPrefixLen !== 0)) throw new RangeError('a policy key without a protocol cannot name a port');
    if (!Number.isInteger(k.portPrefixLen) || k.portPrefixLen < 0 || k.portPrefixLen > 16) throw new RangeError(`port prefix length ${k.portPrefixLen} is outside 0..16`);
    return {
      prefixlen: POLICY_KEY_FIXED_BITS + (k.proto === 0 ? 0 : 8 + k.portPrefixLen),
      endpointId: k.endpointId,
      secIdentity: k.identity,
      egress: (k.egress ? 1 : 0) | (k.staged === true ? POLICY_KEY_STAGED : 0),
      protocol: k.proto,
      dport: k.port,
    };
  },
);

/** struct policy_entry: l4PrefixBits are the bits of (protocol, port) the key matched on, 0..24. */
export const policyEntry = structCodec(btf.policyEntryLayout, {});
export type PolicyEntryValue = codec.CodecValue<typeof policyEntry>;

// ---- tendril_ct4_tcp / tendril_ct4_any (bpf/lib/conntrack.h) -------------------

/** struct ct4_key: the flow's original direction. */
export const ct4Key = structCodec(btf.ct4KeyLayout, { saddr: ipv4, daddr: ipv4 });
export type Ct4Key = codec.CodecValue<typeof ct4Key>;

/**
 * struct ct_entry. expiresNs is a bpf_ktime_get_ns() deadline
 * (CLOCK_MONOTONIC, as process.hrtime.bigint()); natAddr is a service
 * flow's frontend as the client addressed it.
 */
export const ctEntry = structCodec(btf.ctEntryLayout, { natAddr: ipv4 });
export type CtEntryValue = codec.CodecValue<typeof ctEntry>;

/** struct ct6_key: an IPv6 flow's original direction (tendril_ct6_tcp / tendril_ct6_any, values ctEntry). */
export const ct6Key = structCodec(btf.ct6KeyLayout, { saddr: ipv6, daddr: ipv6 });
export type Ct6Key = codec.CodecValue<typeof ct6Key>;

/** struct ct_budget: tendril_ct_budget's value, keyed by endpoint ID (__u32). */
export const ctBudget = structCodec(btf.ctBudgetLayout, {});

/** struct frag4_key (addresses as network-order numbers). */
export const frag4Key = structCodec(btf.frag4KeyLayout, {});
/** struct frag6_key: tendril_frag6's key (its value is struct frag4_ports). */
export const frag6Key = structCodec(btf.frag6KeyLayout, { saddr: ipv6, daddr: ipv6 });
/** struct frag4_ports */
export const frag4Ports = structCodec(btf.frag4PortsLayout, {});

// ---- the GC program's run (bpf/bpf_gc.c, its global data) -----------------------

/** struct gc_sample: one removed conntrack flow. */
export const gcSample = structCodec(btf.gcSampleLayout, { key: ct4Key, key6: ct6Key, entry: ctEntry });

/** The size of a key the GC program judges: struct ct4_key's (bpf_gc.c asserts struct nat4_key's is the same). */
export const GC_KEY_SIZE = btf.ct4KeyLayout.size;
/** The size of a key of an IPv6 conntrack table (gc_run.keys6). */
export const GC_KEY6_SIZE = btf.ct6KeyLayout.size;

/** struct gc_run: one run's input (now, grace period, map, flags) and what it did. */
export const gcRun = structCodec(btf.gcRunLayout, {
  sample: codec.array(gcSample, GC_SAMPLE_MAX),
  /** The keys (conntrack or SNAT) of this run, as the map walk gave them. */
  keys: bytes(GC_BATCH * GC_KEY_SIZE),
  /** The keys of a run over an IPv6 conntrack table. */
  keys6: bytes(GC_BATCH * GC_KEY6_SIZE),
});
export type GcRunValue = codec.CodecValue<typeof gcRun>;

// ---- services: tendril_lb4_* (bpf/lib/lb.h) -----------------------------------

/** struct lb4_key: backendSlot 0 is the service entry, 1..count its backends. */
export const lb4Key = structCodec(btf.lb4KeyLayout, { address: ipv4 });
export type Lb4Key = codec.CodecValue<typeof lb4Key>;

/** struct lb4_service */
export const lb4Service = structCodec(btf.lb4ServiceLayout, {});
export type Lb4ServiceValue = codec.CodecValue<typeof lb4Service>;

/** struct lb4_backend, keyed by __u32 backend ID */
export const lb4Backend = structCodec(btf.lb4BackendLayout, { address: ipv4 });
export type Lb4BackendValue = codec.CodecValue<typeof lb4Backend>;

/** struct lb4_reverse_nat, keyed by __u16 reverse NAT index */
export const lb4ReverseNat = structCodec(btf.lb4ReverseNatLayout, { address: ipv4 });
export type Lb4ReverseNatValue = codec.CodecValue<typeof lb4ReverseNat>;

/** struct lb4_affinity_key */
export const lb4AffinityKey = structCodec(btf.lb4AffinityKeyLayout, { client: ipv4 });
/** struct lb4_affinity_value */
export const lb4AffinityValue = structCodec(btf.lb4AffinityValueLayout, {});

/** struct lb6_key: lb4Key with a 16-byte frontend (values lb4Service). */
export const lb6Key = structCodec(btf.lb6KeyLayout, { address: ipv6 });
export type Lb6Key = codec.CodecValue<typeof lb6Key>;
/** struct lb6_backend, keyed by __u32 backend ID (one ID space with IPv4's) */
export const lb6Backend = structCodec(btf.lb6BackendLayout, { address: ipv6 });
export type Lb6BackendValue = codec.CodecValue<typeof lb6Backend>;
/** struct lb6_reverse_nat, keyed by __u16 reverse NAT index */
export const lb6ReverseNat = structCodec(btf.lb6ReverseNatLayout, { address: ipv6 });
/** struct lb6_affinity_key (values lb4AffinityValue) */
export const lb6AffinityKey = structCodec(btf.lb6AffinityKeyLayout, { client: ipv6 });

/** struct lb4_member_key → __u8 */
export const lb4MemberKey = structCodec(btf.lb4MemberKeyLayout, {});
export type Lb4MemberKey = codec.CodecValue<typeof lb4MemberKey>;

/** A key of tendril_lb_srcrange: one prefix of a service's loadBalancerSourceRanges. */
export interface LbSourceRangeKey {
  serviceId: number;
  prefix: IpPrefix;
}

/** struct lb_src_range_key: prefixlen counts the service ID, padding and family (LB_SRC_RANGE_KEY_FIXED_BITS), then the prefix. */
export const lbSourceRangeKey: Codec<LbSourceRangeKey> = codec.mapped(
  structCodec(btf.lbSrcRangeKeyLayout, { ip: addressSlot }),
  (k) => {
    const family = checkFamily(k.family);
    const length = k.prefixlen - LB_SRC_RANGE_KEY_FIXED_BITS;
    if (length < 0 || length > familyBits(family)) throw new RangeError(`source range key prefix length ${length} is outside 0..${familyBits(family)}`);
    const addr = slotAddress(k.ip, family);
    return { serviceId: k.revNatIndex, prefix: { family, bits: maskBits(family, addr.bits, length), length } };
  },
  (k) => ({ prefixlen: LB_SRC_RANGE_KEY_FIXED_BITS + k.prefix.length, revNatIndex: k.serviceId, family: k.prefix.family, ip: slotBytes(k.prefix) }),
);

// ---- SNAT: tendril_snat4, tendril_ipmasq4 (bpf/lib/nat.h) ---------------------

/** struct nat4_key */
export const nat4Key = structCodec(btf.nat4KeyLayout, { saddr: ipv4, daddr: ipv4 });
export type Nat4Key = codec.CodecValue<typeof nat4Key>;

/** struct nat4_entry */
export const nat4Entry = structCodec(btf.nat4EntryLayout, { toAddr: ipv4 });
export type Nat4EntryValue = codec.CodecValue<typeof nat4Entry>;

/** struct nat6_key (bpf/lib/nat6.h) */
export const nat6Key = structCodec(btf.nat6KeyLayout, { saddr: ipv6, daddr: ipv6 });
export type Nat6Key = codec.CodecValue<typeof nat6Key>;

/** struct nat6_entry */
export const nat6Entry = structCodec(btf.nat6EntryLayout, { toAddr: ipv6 });
export type Nat6EntryValue = codec.CodecValue<typeof nat6Entry>;

/** struct ipmasq_key: laid out as the ipcache key. */
export const ipmasqKey: Codec<IpPrefix> = prefixKey(btf.ipmasqKeyLayout, 'ipmasq key');

// ---- tendril_devices (bpf/lib/devices.h) ---------------------------------------

const deviceInfoStruct = structCodec(btf.deviceInfoLayout, { ipv4, mac: macAddress, ipv6 });
/** struct device_info; ipv6 absent (all zero in the map) when the device has no global IPv6 address. */
export type DeviceInfoValue = Omit<codec.CodecValue<typeof deviceInfoStruct>, 'ipv6'> & { ipv6?: IpAddress };
const NO_IPV6 = ipFromBytes(new Uint8Array(16));

/** struct device_info, keyed by __u32 ifindex */
export const deviceInfo: Codec<DeviceInfoValue> = {
  size: deviceInfoStruct.size,
  align: deviceInfoStruct.align,
  write: (v, buf, offset) => deviceInfoStruct.write({ ...v, ipv6: v.ipv6 ?? NO_IPV6 }, buf, offset),
  read: (buf, offset) => {
    const { ipv6: v6, ...rest } = deviceInfoStruct.read(buf, offset);
    return v6.bits === 0n ? rest : { ...rest, ipv6: v6 };
  },
};

// ---- tendril_metrics (bpf/lib/metrics.h) --------------------------------------

/** struct metrics_key: reason 0 = forwarded, else the drop code's absolute value. */
export const metricsKey = structCodec(btf.metricsKeyLayout, {});
/** struct metrics_value (one per CPU) */
export const metricsValue = structCodec(btf.metricsValueLayout, {});

// ---- tendril_config (bpf/lib/config.h) -----------------------------------------

/** struct nat_port_range: host order; min 0 = no range. */
export const natPortRange = structCodec(btf.natPortRangeLayout, {});
export type NatPortRangeValue = codec.CodecValue<typeof natPortRange>;

/**
 * struct datapath_config. natPorts: SNAT's source ports, one or two ranges
 * (the second { min: 0 } when unused; none at all → NAT_PORT_MIN..NAT_PORT_MAX);
 * nodeIpv6: the node's IPv6 InternalIP, `::` when it has none.
 */
export const datapathConfig = structCodec(btf.datapathConfigLayout, { natPorts: codec.array(natPortRange, NAT_PORT_RANGES), nodeIpv6: ipv6 });
export type DatapathConfigValue = codec.CodecValue<typeof datapathConfig>;

/**
 * The config fields of SNAT, the endpoint budget and the migration window
 * left at "none": the programs' built-in port range, no budget, no build
 * taking over, no IPv6 node address (NodePort's IPv6 SNAT source in tunnel mode).
 */
export const NO_NAT_CONFIG: Readonly<Pick<DatapathConfigValue, 'natPorts' | 'ctEndpointMax' | 'migrationUntilNs' | 'nodeIpv6'>> = {
  natPorts: [
    { min: 0, max: 0 },
    { min: 0, max: 0 },
  ],
  ctEndpointMax: 0,
  migrationUntilNs: 0n,
  nodeIpv6: NO_IPV6,
};

// ---- tendril_events records (bpf/lib/events.h) --------------------------------

/** struct tendril_event: one ring buffer record. */
export interface DatapathEvent {
  type: number;
  /** DROP: the reason's absolute code; POLICY_VERDICT: the verdict; TRACE: the trace point. */
  subtype: number;
  direction: number;
  proto: number;
  tcpFlags: number;
  /** The service the flow was translated for (its ID, the rev NAT index); 0 when none. */
  service: number;
  ifindex: number;
  srcIdentity: number;
  dstIdentity: number;
  srcEndpoint: number;
  dstEndpoint: number;
  cookie: number;
  origLen: number;
  sport: number;
  dport: number;
  saddr: IpAddress;
  daddr: IpAddress;
  tsNs: bigint;
}

const rawEvent = structCodec(btf.tendrilEventLayout, { saddr: addressSlot, daddr: addressSlot });

/** sizeof(struct tendril_event). */
export const EVENT_SIZE = rawEvent.size;

/**
 * The record's members as placed in it (offset and codec), for readers that
 * take a few numbers from a record in place instead of decoding it whole
 * (the flow history, on every event).
 */
export const eventFields = btf.tendrilEventLayout.fields;

export const datapathEvent: Codec<DatapathEvent> = codec.mapped(
  rawEvent,
  (r) => ({
    type: r.type,
    subtype: r.subtype,
    direction: r.direction,
    proto: r.proto,
    tcpFlags: r.tcpFlags,
    service: r.service,
    ifindex: r.ifindex,
    srcIdentity: r.srcIdentity,
    dstIdentity: r.dstIdentity,
    srcEndpoint: r.srcEndpoint,
    dstEndpoint: r.dstEndpoint,
    cookie: r.cookie,
    origLen: r.origLen,
    sport: r.sport,
    dport: r.dport,
    saddr: slotAddress(r.saddr, r.family),
    daddr: slotAddress(r.daddr, r.family),
    tsNs: r.tsNs,
  }),
  (e) => ({ ...e, family: e.saddr.family, saddr: slotBytes(e.saddr), daddr: slotBytes(e.daddr) }),
);
