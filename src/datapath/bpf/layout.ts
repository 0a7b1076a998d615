/**
 * The byte layouts of the datapath's map keys, values and event records, as
 * codecs over src/datapath/kernel/bpf. They mirror the structs in bpf/lib/*.h;
 * layout.test.ts holds each codec to its struct in the objects' BTF (sizes
 * and field offsets), so neither side can drift alone.
 *
 * Addresses travel as IpAddress (src/netip) in 16-byte slots: an IPv4
 * address in the first 4 bytes, network order, the rest zero.
 */
import { byteLength, familyBits, ipFromBytes, ipToBytes, type IpAddress, type IpFamily, type IpPrefix, maskBits } from '../../netip/index.js';
import { codec, type Codec } from '../kernel/bpf/index.js';
import { GC_BATCH, GC_SAMPLE_MAX, IPCACHE_KEY_FIXED_BITS, NAT_PORT_RANGES, POLICY_KEY_FIXED_BITS, POLICY_KEY_L4_BITS } from './constants.js';

const { struct, u8, u16, u16be, u32, u32be, u64, pad, bytes } = codec;

function checkFamily(f: number): IpFamily {
  if (f !== 4 && f !== 6) throw new RangeError(`address family ${f} is neither 4 nor 6`);
  return f;
}

/** An address in a 16-byte slot whose family is given by `familyAt` (an offset relative to the slot). */
function addressSlot(familyAt: number): Codec<IpAddress> {
  return {
    size: 16,
    align: 4,
    write(v, b, o) {
      b.fill(0, o, o + 16);
      ipToBytes(v, b, o);
    },
    read(b, o) {
      const family = checkFamily(b.readUInt8(o + familyAt));
      return ipFromBytes(b.subarray(o, o + byteLength(family)), family);
    },
  };
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

/** struct endpoint_key { __u32 ip[4]; __u8 family; __u8 pad[3]; } */
export const endpointKey: Codec<IpAddress> = {
  size: 20,
  align: 4,
  write(v, b, o) {
    b.fill(0, o, o + 20);
    ipToBytes(v, b, o);
    b.writeUInt8(v.family, o + 16);
  },
  read: (b, o) => addressSlot(16).read(b, o),
};

/** struct endpoint_info */
export const endpointInfo = struct({
  ifindex: u32,
  identity: u32,
  endpointId: u32,
  flags: u32,
  lxcMac: macAddress,
  podMac: macAddress,
});
export type EndpointInfoValue = codec.CodecValue<typeof endpointInfo>;

// ---- tendril_ipcache: prefix → identity (bpf/lib/ipcache.h) --------------------

/**
 * struct ipcache_key { __u32 prefixlen; __u16 pad1; __u8 pad2; __u8 family; __u32 ip[4]; }
 * prefixlen counts the 32 bits of padding and family, then the prefix.
 */
export const ipcacheKey: Codec<IpPrefix> = {
  size: 24,
  align: 4,
  write(p, b, o) {
    b.fill(0, o, o + 24);
    u32.write(IPCACHE_KEY_FIXED_BITS + p.length, b, o);
    b.writeUInt8(p.family, o + 7);
    ipToBytes(p, b, o + 8);
  },
  read(b, o) {
    const family = checkFamily(b.readUInt8(o + 7));
    const length = u32.read(b, o) - IPCACHE_KEY_FIXED_BITS;
    if (length < 0 || length > familyBits(family)) throw new RangeError(`ipcache key prefix length ${length} is outside 0..${familyBits(family)}`);
    const addr = ipFromBytes(b.subarray(o + 8, o + 8 + byteLength(family)), family);
    return { family, bits: maskBits(family, addr.bits, length), length };
  },
};

/** struct remote_endpoint_info { __u32 identity; __u32 tunnel_ip4; __u8 flags; __u8 pad[3]; } */
export const ipcacheValue = struct({
  identity: u32,
  /** Node to tunnel to, network order; 0 = none (local, or reached through the stack). */
  tunnelIp4: u32be,
  flags: u8,
  pad: pad(3),
});
export type IpcacheValue = codec.CodecValue<typeof ipcacheValue>;

// ---- tendril_policy: per-endpoint policy entries (bpf/lib/policy.h) ------------

export interface PolicyKey {
  endpointId: number;
  /** Peer identity; 0 = any. */
  identity: number;
  egress: boolean;
  /** IANA protocol; 0 = any (then port and portPrefixLen are 0). */
  proto: number;
  port: number;
  /** Significant leading bits of `port` (0..16); only with a protocol. */
  portPrefixLen: number;
}

/**
 * struct policy_key { __u32 prefixlen; __u32 endpoint_id; __u32 sec_identity; __u8 egress; __u8 protocol; __be16 dport; }
 * prefixlen = POLICY_KEY_FIXED_BITS, + 8 with a protocol, + the port's prefix length.
 */
export const policyKey: Codec<PolicyKey> = {
  size: 16,
  align: 4,
  write(k, b, o) {
    if (k.proto === 0 && (k.port !== 0 || k.portPrefixLen !== 0)) throw new RangeError('a policy key without a protocol cannot name a port');
    if (!Number.isInteger(k.portPrefixLen) || k.portPrefixLen < 0 || k.portPrefixLen > 16) throw new RangeError(`port prefix length ${k.portPrefixLen} is outside 0..16`);
    b.fill(0, o, o + 16);
    u32.write(POLICY_KEY_FIXED_BITS + (k.proto === 0 ? 0 : 8 + k.portPrefixLen), b, o);
    u32.write(k.endpointId, b, o + 4);
    u32.write(k.identity, b, o + 8);
    b.writeUInt8(k.egress ? 1 : 0, o + 12);
    b.writeUInt8(k.proto, o + 13);
    u16be.write(k.port, b, o + 14);
  },
  read(b, o) {
    const l4 = u32.read(b, o) - POLICY_KEY_FIXED_BITS;
    if (l4 < 0 || l4 > POLICY_KEY_L4_BITS) throw new RangeError(`policy key prefix length ${l4 + POLICY_KEY_FIXED_BITS} is outside ${POLICY_KEY_FIXED_BITS}..${POLICY_KEY_FIXED_BITS + POLICY_KEY_L4_BITS}`);
    return {
      endpointId: u32.read(b, o + 4),
      identity: u32.read(b, o + 8),
      egress: b.readUInt8(o + 12) !== 0,
      proto: l4 === 0 ? 0 : b.readUInt8(o + 13),
      port: l4 <= 8 ? 0 : u16be.read(b, o + 14),
      portPrefixLen: l4 <= 8 ? 0 : l4 - 8,
    };
  },
};

/** struct policy_entry { __u32 cookie; __u8 deny; __u8 l4_prefix_bits; __u16 pad; } */
export const policyEntry = struct({
  cookie: u32,
  deny: u8,
  /** Bits of (protocol, port) the key matched on, 0..24: the datapath compares an identity's match with the wildcard's by this. */
  l4PrefixBits: u8,
  pad: pad(2),
});
export type PolicyEntryValue = codec.CodecValue<typeof policyEntry>;

// ---- tendril_ct4_tcp / tendril_ct4_any (bpf/lib/conntrack.h) -------------------

/** struct ct4_key { __be32 saddr; __be32 daddr; __be16 sport; __be16 dport; __u8 proto; __u8 flags; __u16 pad; } — the flow's original direction. */
export const ct4Key = struct({
  saddr: codec.ipAddress(4),
  daddr: codec.ipAddress(4),
  sport: u16be,
  dport: u16be,
  proto: u8,
  flags: u8,
  pad: pad(2),
});
export type Ct4Key = codec.CodecValue<typeof ct4Key>;

/** struct ct_entry */
export const ctEntry = struct({
  /** bpf_ktime_get_ns() deadline: CLOCK_MONOTONIC, as process.hrtime.bigint(). */
  expiresNs: u64,
  packets: u64,
  bytes: u64,
  srcIdentity: u32,
  dstIdentity: u32,
  /** Local endpoint that opened the flow; 0 when the node or the outside did. */
  srcEndpoint: u32,
  /** Local endpoint the flow was opened to; 0 when it leaves the node. */
  dstEndpoint: u32,
  revNatIndex: u16,
  /** Union of the TCP flags seen. */
  tcpFlags: u8,
  /** CT_F_* */
  flags: u8,
  /** The backend a service flow is pinned to (its service entry's, and the translated flow's); 0 = none. */
  backendId: u32,
  /** A service flow: the frontend as the client addressed it (a NodePort's node address, not 0.0.0.0); replies get it as their source. */
  natAddr: codec.ipAddress(4),
  natPort: u16be,
  pad: pad(2),
});
export type CtEntryValue = codec.CodecValue<typeof ctEntry>;

/** struct ct_budget { __u32 entries; __u32 pad; }: tendril_ct_budget's value, keyed by endpoint ID (__u32). */
export const ctBudget = struct({ entries: u32, pad: pad(4) });

/** struct frag4_key { __be32 saddr; __be32 daddr; __be16 id; __u8 proto; __u8 pad; } */
export const frag4Key = struct({ saddr: u32be, daddr: u32be, id: u16be, proto: u8, pad: pad(1) });
/** struct frag4_ports { __be16 sport; __be16 dport; } */
export const frag4Ports = struct({ sport: u16be, dport: u16be });

// ---- the GC program's run (bpf/bpf_gc.c, its global data) -----------------------

/** struct gc_sample { struct ct4_key key; struct ct_entry entry; __u8 map; __u8 pad[7]; }: one removed conntrack flow. */
export const gcSample = struct({ key: ct4Key, entry: ctEntry, map: u8, pad: pad(7) });

/** struct gc_run: one run's input (now, grace period, map, flags) and what it did. */
export const gcRun = struct({
  /** CLOCK_MONOTONIC; 0 = the program reads bpf_ktime_get_ns(). */
  nowNs: u64,
  graceNs: u64,
  /** GcMap */
  map: u32,
  /** GcFlag */
  flags: u32,
  scanned: u32,
  removed: u32,
  mappings: u32,
  orphans: u32,
  givenBack: u32,
  samples: u32,
  /** The map's entries when the run ended (the kernel's count). */
  entries: u64,
  sample: codec.array(gcSample, GC_SAMPLE_MAX),
  /** How many of `keys` the run judges. */
  nkeys: u32,
  pad: pad(4),
  /** The keys (conntrack or SNAT, 16 bytes each) of this run, as the map walk gave them. */
  keys: bytes(GC_BATCH * 16),
});
export type GcRunValue = codec.CodecValue<typeof gcRun>;

// ---- services: tendril_lb4_* (bpf/lib/lb.h) -----------------------------------

/** struct lb4_key { __be32 address; __be16 dport; __u16 backend_slot; __u8 proto; __u8 scope; __u16 pad; } */
export const lb4Key = struct({
  /** The frontend; 0.0.0.0 with ServiceFlag.NODEPORT = every node address. */
  address: codec.ipAddress(4),
  dport: u16be,
  /** 0: the service entry; 1..count: its backends. */
  backendSlot: u16,
  proto: u8,
  /** LbScope */
  scope: u8,
  pad: pad(2),
});
export type Lb4Key = codec.CodecValue<typeof lb4Key>;

/** struct lb4_service { __u32 backend_id; __u32 affinity_timeout; __u16 count; __u16 rev_nat_index; __u8 flags; __u8 pad[3]; } */
export const lb4Service = struct({
  /** Slot > 0: the backend in the slot; slot 0: 0. */
  backendId: u32,
  /** Seconds (ServiceFlag.AFFINITY). */
  affinityTimeout: u32,
  /** Slot 0: backends in slots 1..count. */
  count: u16,
  /** The service ID. */
  revNatIndex: u16,
  /** ServiceFlag */
  flags: u8,
  pad: pad(3),
});
export type Lb4ServiceValue = codec.CodecValue<typeof lb4Service>;

/** struct lb4_backend { __be32 address; __be16 port; __u8 proto; __u8 state; } keyed by __u32 backend ID */
export const lb4Backend = struct({
  address: codec.ipAddress(4),
  port: u16be,
  proto: u8,
  /** BackendState */
  state: u8,
});
export type Lb4BackendValue = codec.CodecValue<typeof lb4Backend>;

/** struct lb4_reverse_nat { __be32 address; __be16 port; __u16 pad; } keyed by __u16 reverse NAT index */
export const lb4ReverseNat = struct({ address: codec.ipAddress(4), port: u16be, pad: pad(2) });
export type Lb4ReverseNatValue = codec.CodecValue<typeof lb4ReverseNat>;

/** struct lb4_affinity_key { __be32 client; __u16 rev_nat_index; __u16 pad; } */
export const lb4AffinityKey = struct({ client: codec.ipAddress(4), revNatIndex: u16, pad: pad(2) });
/** struct lb4_affinity_value { __u64 last_used_ns; __u32 backend_id; __u32 pad; } */
export const lb4AffinityValue = struct({ lastUsedNs: u64, backendId: u32, pad: pad(4) });

/** struct lb4_member_key { __u16 rev_nat_index; __u16 pad; __u32 backend_id; } → __u8 */
export const lb4MemberKey = struct({ revNatIndex: u16, pad: pad(2), backendId: u32 });
export type Lb4MemberKey = codec.CodecValue<typeof lb4MemberKey>;

// ---- SNAT: tendril_snat4, tendril_ipmasq4 (bpf/lib/nat.h) ---------------------

/** struct nat4_key { __be32 saddr; __be32 daddr; __be16 sport; __be16 dport; __u8 proto; __u8 dir; __u16 pad; } */
export const nat4Key = struct({
  saddr: codec.ipAddress(4),
  daddr: codec.ipAddress(4),
  sport: u16be,
  dport: u16be,
  proto: u8,
  /** NatDirection */
  dir: u8,
  pad: pad(2),
});
export type Nat4Key = codec.CodecValue<typeof nat4Key>;

/** struct nat4_entry { __u64 created_ns; __be32 to_addr; __be16 to_port; __u8 flags; __u8 pad; } */
export const nat4Entry = struct({
  createdNs: u64,
  toAddr: codec.ipAddress(4),
  toPort: u16be,
  /** NatFlag */
  flags: u8,
  pad: pad(1),
});
export type Nat4EntryValue = codec.CodecValue<typeof nat4Entry>;

/** struct ipmasq_key: laid out as the ipcache key (prefixlen counts the 32 bits of padding and family first). */
export const ipmasqKey: Codec<IpPrefix> = ipcacheKey;

// ---- tendril_devices (bpf/lib/devices.h) ---------------------------------------

/** struct device_info { __be32 ipv4; __u32 flags; __u8 mac[6]; __u8 pad[2]; } keyed by __u32 ifindex */
export const deviceInfo = struct({ ipv4: codec.ipAddress(4), flags: u32, mac: macAddress, pad: pad(2) });
export type DeviceInfoValue = codec.CodecValue<typeof deviceInfo>;

// ---- tendril_metrics (bpf/lib/metrics.h) --------------------------------------

/** struct metrics_key { __u8 reason; __u8 direction; __u16 pad; } — reason 0 = forwarded, else the drop code's absolute value. */
export const metricsKey = struct({ reason: u8, direction: u8, pad: pad(2) });
/** struct metrics_value { __u64 packets; __u64 bytes; } (one per CPU) */
export const metricsValue = struct({ packets: u64, bytes: u64 });

// ---- tendril_config (bpf/lib/config.h) -----------------------------------------

/** struct nat_port_range { __u16 min; __u16 max; } — host order; min 0 = no range. */
export const natPortRange = struct({ min: u16, max: u16 });
export type NatPortRangeValue = codec.CodecValue<typeof natPortRange>;

/**
 * struct datapath_config { __u32 trace_level; __u32 flags; __u32 host_ifindex; __u32 maglev_table_size; __u32 tunnel_ifindex;
 * __be32 node_ipv4; struct nat_port_range nat_ports[NAT_PORT_RANGES]; __u32 ct_endpoint_max; }
 */
export const datapathConfig = struct({
  traceLevel: u32,
  flags: u32,
  hostIfindex: u32,
  maglevTableSize: u32,
  tunnelIfindex: u32,
  nodeIpv4: u32be,
  /** SNAT's source ports, one or two ranges (the second { min: 0 } when unused); none at all → NAT_PORT_MIN..NAT_PORT_MAX. */
  natPorts: codec.array(natPortRange, NAT_PORT_RANGES),
  /** Conntrack entries one endpoint may hold (--bpf-ct-endpoint-max); 0 = no budget. */
  ctEndpointMax: u32,
});
export type DatapathConfigValue = codec.CodecValue<typeof datapathConfig>;

/** The config fields of SNAT and the endpoint budget left at "none": the programs' built-in port range, no budget. */
export const NO_NAT_CONFIG: Readonly<Pick<DatapathConfigValue, 'natPorts' | 'ctEndpointMax'>> = {
  natPorts: [
    { min: 0, max: 0 },
    { min: 0, max: 0 },
  ],
  ctEndpointMax: 0,
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

/** sizeof(struct tendril_event): ts_ns ends at 80 (daddr ends at 72, already 8-aligned). */
export const EVENT_SIZE = 80;

export const datapathEvent: Codec<DatapathEvent> = {
  size: EVENT_SIZE,
  align: 8,
  write(e, b, o) {
    b.fill(0, o, o + EVENT_SIZE);
    u8.write(e.type, b, o);
    u8.write(e.subtype, b, o + 1);
    u8.write(e.direction, b, o + 2);
    u8.write(e.saddr.family, b, o + 3);
    u8.write(e.proto, b, o + 4);
    u8.write(e.tcpFlags, b, o + 5);
    const words = [e.ifindex, e.srcIdentity, e.dstIdentity, e.srcEndpoint, e.dstEndpoint, e.cookie, e.origLen];
    words.forEach((w, i) => u32.write(w, b, o + 8 + 4 * i));
    u16.write(e.sport, b, o + 36);
    u16.write(e.dport, b, o + 38);
    ipToBytes(e.saddr, b, o + 40);
    ipToBytes(e.daddr, b, o + 56);
    u64.write(e.tsNs, b, o + 72);
  },
  read(b, o) {
    const family = checkFamily(b.readUInt8(o + 3));
    const n = byteLength(family);
    return {
      type: u8.read(b, o),
      subtype: u8.read(b, o + 1),
      direction: u8.read(b, o + 2),
      proto: u8.read(b, o + 4),
      tcpFlags: u8.read(b, o + 5),
      ifindex: u32.read(b, o + 8),
      srcIdentity: u32.read(b, o + 12),
      dstIdentity: u32.read(b, o + 16),
      srcEndpoint: u32.read(b, o + 20),
      dstEndpoint: u32.read(b, o + 24),
      cookie: u32.read(b, o + 28),
      origLen: u32.read(b, o + 32),
      sport: u16.read(b, o + 36),
      dport: u16.read(b, o + 38),
      saddr: ipFromBytes(b.subarray(o + 40, o + 40 + n), family),
      daddr: ipFromBytes(b.subarray(o + 56, o + 56 + n), family),
      tsNs: u64.read(b, o + 72),
    };
  },
};
