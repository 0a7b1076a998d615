// Generated from the BTF of bpf_gc.o, bpf_host.o, bpf_lxc.o, bpf_netdev.o, bpf_overlay.o by scripts/gen-layouts.mjs
// (src/datapath/bpf/layoutSource.ts); do not edit. The structs are bpf/lib/*.h's:
// `make build` compiles the objects, then writes this file again.
import { codec } from '../../kernel/bpf/index.js';
import { defineStruct } from '../btfStruct.js';

/** struct ct4_key: 16 bytes. */
export const ct4KeyLayout = defineStruct('ct4_key', 16, 4, {
  saddr: { offset: 0, codec: codec.u32be }, // __be32 saddr
  daddr: { offset: 4, codec: codec.u32be }, // __be32 daddr
  sport: { offset: 8, codec: codec.u16be }, // __be16 sport
  dport: { offset: 10, codec: codec.u16be }, // __be16 dport
  proto: { offset: 12, codec: codec.u8 }, // __u8 proto
  flags: { offset: 13, codec: codec.u8 }, // __u8 flags
  pad: { offset: 14, codec: codec.pad(2) }, // __u16 pad
});

/** struct ct6_key: 40 bytes. */
export const ct6KeyLayout = defineStruct('ct6_key', 40, 4, {
  saddr: { offset: 0, codec: codec.array(codec.u32be, 4) }, // __be32[4] saddr
  daddr: { offset: 16, codec: codec.array(codec.u32be, 4) }, // __be32[4] daddr
  sport: { offset: 32, codec: codec.u16be }, // __be16 sport
  dport: { offset: 34, codec: codec.u16be }, // __be16 dport
  proto: { offset: 36, codec: codec.u8 }, // __u8 proto
  flags: { offset: 37, codec: codec.u8 }, // __u8 flags
  pad: { offset: 38, codec: codec.pad(2) }, // __u16 pad
});

/** struct ct_budget: 8 bytes. */
export const ctBudgetLayout = defineStruct('ct_budget', 8, 4, {
  entries: { offset: 0, codec: codec.u32 }, // __u32 entries
  pad: { offset: 4, codec: codec.pad(4) }, // __u32 pad
});

/** struct ct_entry: 56 bytes. */
export const ctEntryLayout = defineStruct('ct_entry', 56, 8, {
  expiresNs: { offset: 0, codec: codec.u64 }, // __u64 expires_ns
  packets: { offset: 8, codec: codec.u64 }, // __u64 packets
  bytes: { offset: 16, codec: codec.u64 }, // __u64 bytes
  srcIdentity: { offset: 24, codec: codec.u32 }, // __u32 src_identity
  dstIdentity: { offset: 28, codec: codec.u32 }, // __u32 dst_identity
  srcEndpoint: { offset: 32, codec: codec.u32 }, // __u32 src_endpoint
  dstEndpoint: { offset: 36, codec: codec.u32 }, // __u32 dst_endpoint
  revNatIndex: { offset: 40, codec: codec.u16 }, // __u16 rev_nat_index
  tcpFlags: { offset: 42, codec: codec.u8 }, // __u8 tcp_flags
  flags: { offset: 43, codec: codec.u8 }, // __u8 flags
  backendId: { offset: 44, codec: codec.u32 }, // __u32 backend_id
  natAddr: { offset: 48, codec: codec.u32be }, // __be32 nat_addr
  natPort: { offset: 52, codec: codec.u16be }, // __be16 nat_port
  pad: { offset: 54, codec: codec.pad(2) }, // __u16 pad
});

/** struct nat_port_range: 4 bytes. */
export const natPortRangeLayout = defineStruct('nat_port_range', 4, 2, {
  min: { offset: 0, codec: codec.u16 }, // __u16 min
  max: { offset: 2, codec: codec.u16 }, // __u16 max
});

/** struct datapath_config: 64 bytes. */
export const datapathConfigLayout = defineStruct('datapath_config', 64, 8, {
  traceLevel: { offset: 0, codec: codec.u32 }, // __u32 trace_level
  flags: { offset: 4, codec: codec.u32 }, // __u32 flags
  hostIfindex: { offset: 8, codec: codec.u32 }, // __u32 host_ifindex
  maglevTableSize: { offset: 12, codec: codec.u32 }, // __u32 maglev_table_size
  tunnelIfindex: { offset: 16, codec: codec.u32 }, // __u32 tunnel_ifindex
  nodeIpv4: { offset: 20, codec: codec.u32be }, // __be32 node_ipv4
  natPorts: { offset: 24, codec: codec.array(natPortRangeLayout, 2) }, // struct nat_port_range[2] nat_ports
  ctEndpointMax: { offset: 32, codec: codec.u32 }, // __u32 ct_endpoint_max
  migrationUntilNs: { offset: 40, codec: codec.u64 }, // __u64 migration_until_ns
  nodeIpv6: { offset: 48, codec: codec.array(codec.u32be, 4) }, // __be32[4] node_ipv6
});

/** struct device_info: 32 bytes. */
export const deviceInfoLayout = defineStruct('device_info', 32, 4, {
  ipv4: { offset: 0, codec: codec.u32be }, // __be32 ipv4
  flags: { offset: 4, codec: codec.u32 }, // __u32 flags
  mac: { offset: 8, codec: codec.bytes(6) }, // __u8[6] mac
  pad: { offset: 14, codec: codec.pad(2) }, // __u8[2] pad
  ipv6: { offset: 16, codec: codec.array(codec.u32be, 4) }, // __be32[4] ipv6
});

/** struct endpoint_info: 28 bytes. */
export const endpointInfoLayout = defineStruct('endpoint_info', 28, 4, {
  ifindex: { offset: 0, codec: codec.u32 }, // __u32 ifindex
  identity: { offset: 4, codec: codec.u32 }, // __u32 identity
  endpointId: { offset: 8, codec: codec.u32 }, // __u32 endpoint_id
  flags: { offset: 12, codec: codec.u32 }, // __u32 flags
  lxcMac: { offset: 16, codec: codec.bytes(6) }, // __u8[6] lxc_mac
  podMac: { offset: 22, codec: codec.bytes(6) }, // __u8[6] pod_mac
});

/** struct endpoint_key: 20 bytes. */
export const endpointKeyLayout = defineStruct('endpoint_key', 20, 4, {
  ip: { offset: 0, codec: codec.array(codec.u32, 4) }, // __u32[4] ip
  family: { offset: 16, codec: codec.u8 }, // __u8 family
  pad: { offset: 17, codec: codec.pad(3) }, // __u8[3] pad
});

/** struct frag4_key: 12 bytes. */
export const frag4KeyLayout = defineStruct('frag4_key', 12, 4, {
  saddr: { offset: 0, codec: codec.u32be }, // __be32 saddr
  daddr: { offset: 4, codec: codec.u32be }, // __be32 daddr
  id: { offset: 8, codec: codec.u16be }, // __be16 id
  proto: { offset: 10, codec: codec.u8 }, // __u8 proto
  pad: { offset: 11, codec: codec.pad(1) }, // __u8 pad
});

/** struct frag4_ports: 4 bytes. */
export const frag4PortsLayout = defineStruct('frag4_ports', 4, 2, {
  sport: { offset: 0, codec: codec.u16be }, // __be16 sport
  dport: { offset: 2, codec: codec.u16be }, // __be16 dport
});

/** struct frag6_key: 40 bytes. */
export const frag6KeyLayout = defineStruct('frag6_key', 40, 4, {
  saddr: { offset: 0, codec: codec.array(codec.u32be, 4) }, // __be32[4] saddr
  daddr: { offset: 16, codec: codec.array(codec.u32be, 4) }, // __be32[4] daddr
  id: { offset: 32, codec: codec.u32be }, // __be32 id
  proto: { offset: 36, codec: codec.u8 }, // __u8 proto
  pad: { offset: 37, codec: codec.pad(3) }, // __u8[3] pad
});

/** struct gc_sample: 120 bytes. */
export const gcSampleLayout = defineStruct('gc_sample', 120, 8, {
  key: { offset: 0, codec: ct4KeyLayout }, // struct ct4_key key
  key6: { offset: 16, codec: ct6KeyLayout }, // struct ct6_key key6
  entry: { offset: 56, codec: ctEntryLayout }, // struct ct_entry entry
  map: { offset: 112, codec: codec.u8 }, // __u8 map
  pad: { offset: 113, codec: codec.pad(7) }, // __u8[7] pad
});

/** struct gc_run: 58608 bytes. */
export const gcRunLayout = defineStruct('gc_run', 58608, 8, {
  nowNs: { offset: 0, codec: codec.u64 }, // __u64 now_ns
  graceNs: { offset: 8, codec: codec.u64 }, // __u64 grace_ns
  map: { offset: 16, codec: codec.u32 }, // __u32 map
  flags: { offset: 20, codec: codec.u32 }, // __u32 flags
  scanned: { offset: 24, codec: codec.u32 }, // __u32 scanned
  removed: { offset: 28, codec: codec.u32 }, // __u32 removed
  mappings: { offset: 32, codec: codec.u32 }, // __u32 mappings
  orphans: { offset: 36, codec: codec.u32 }, // __u32 orphans
  givenBack: { offset: 40, codec: codec.u32 }, // __u32 given_back
  samples: { offset: 44, codec: codec.u32 }, // __u32 samples
  entries: { offset: 48, codec: codec.u64 }, // __u64 entries
  sample: { offset: 56, codec: codec.array(gcSampleLayout, 10) }, // struct gc_sample[10] sample
  nkeys: { offset: 1256, codec: codec.u32 }, // __u32 nkeys
  pad: { offset: 1260, codec: codec.pad(4) }, // __u32 pad
  keys: { offset: 1264, codec: codec.array(ct4KeyLayout, 1024) }, // struct ct4_key[1024] keys
  keys6: { offset: 17648, codec: codec.array(ct6KeyLayout, 1024) }, // struct ct6_key[1024] keys6
});

/** struct ipcache_key: 24 bytes. */
export const ipcacheKeyLayout = defineStruct('ipcache_key', 24, 4, {
  prefixlen: { offset: 0, codec: codec.u32 }, // __u32 prefixlen
  pad1: { offset: 4, codec: codec.pad(2) }, // __u16 pad1
  pad2: { offset: 6, codec: codec.pad(1) }, // __u8 pad2
  family: { offset: 7, codec: codec.u8 }, // __u8 family
  ip: { offset: 8, codec: codec.array(codec.u32, 4) }, // __u32[4] ip
});

/** struct ipmasq_key: 24 bytes. */
export const ipmasqKeyLayout = defineStruct('ipmasq_key', 24, 4, {
  prefixlen: { offset: 0, codec: codec.u32 }, // __u32 prefixlen
  pad1: { offset: 4, codec: codec.pad(2) }, // __u16 pad1
  pad2: { offset: 6, codec: codec.pad(1) }, // __u8 pad2
  family: { offset: 7, codec: codec.u8 }, // __u8 family
  ip: { offset: 8, codec: codec.array(codec.u32, 4) }, // __u32[4] ip
});

/** struct lb4_affinity_key: 8 bytes. */
export const lb4AffinityKeyLayout = defineStruct('lb4_affinity_key', 8, 4, {
  client: { offset: 0, codec: codec.u32be }, // __be32 client
  revNatIndex: { offset: 4, codec: codec.u16 }, // __u16 rev_nat_index
  pad: { offset: 6, codec: codec.pad(2) }, // __u16 pad
});

/** struct lb4_affinity_value: 16 bytes. */
export const lb4AffinityValueLayout = defineStruct('lb4_affinity_value', 16, 8, {
  lastUsedNs: { offset: 0, codec: codec.u64 }, // __u64 last_used_ns
  backendId: { offset: 8, codec: codec.u32 }, // __u32 backend_id
  pad: { offset: 12, codec: codec.pad(4) }, // __u32 pad
});

/** struct lb4_backend: 8 bytes. */
export const lb4BackendLayout = defineStruct('lb4_backend', 8, 4, {
  address: { offset: 0, codec: codec.u32be }, // __be32 address
  port: { offset: 4, codec: codec.u16be }, // __be16 port
  proto: { offset: 6, codec: codec.u8 }, // __u8 proto
  state: { offset: 7, codec: codec.u8 }, // __u8 state
});

/** struct lb4_key: 12 bytes. */
export const lb4KeyLayout = defineStruct('lb4_key', 12, 4, {
  address: { offset: 0, codec: codec.u32be }, // __be32 address
  dport: { offset: 4, codec: codec.u16be }, // __be16 dport
  backendSlot: { offset: 6, codec: codec.u16 }, // __u16 backend_slot
  proto: { offset: 8, codec: codec.u8 }, // __u8 proto
  scope: { offset: 9, codec: codec.u8 }, // __u8 scope
  pad: { offset: 10, codec: codec.pad(2) }, // __u16 pad
});

/** struct lb4_member_key: 8 bytes. */
export const lb4MemberKeyLayout = defineStruct('lb4_member_key', 8, 4, {
  revNatIndex: { offset: 0, codec: codec.u16 }, // __u16 rev_nat_index
  pad: { offset: 2, codec: codec.pad(2) }, // __u16 pad
  backendId: { offset: 4, codec: codec.u32 }, // __u32 backend_id
});

/** struct lb4_reverse_nat: 8 bytes. */
export const lb4ReverseNatLayout = defineStruct('lb4_reverse_nat', 8, 4, {
  address: { offset: 0, codec: codec.u32be }, // __be32 address
  port: { offset: 4, codec: codec.u16be }, // __be16 port
  pad: { offset: 6, codec: codec.pad(2) }, // __u16 pad
});

/** struct lb4_service: 16 bytes. */
export const lb4ServiceLayout = defineStruct('lb4_service', 16, 4, {
  backendId: { offset: 0, codec: codec.u32 }, // __u32 backend_id
  affinityTimeout: { offset: 4, codec: codec.u32 }, // __u32 affinity_timeout
  count: { offset: 8, codec: codec.u16 }, // __u16 count
  revNatIndex: { offset: 10, codec: codec.u16 }, // __u16 rev_nat_index
  flags: { offset: 12, codec: codec.u8 }, // __u8 flags
  pad: { offset: 13, codec: codec.pad(3) }, // __u8[3] pad
});

/** struct lb6_affinity_key: 20 bytes. */
export const lb6AffinityKeyLayout = defineStruct('lb6_affinity_key', 20, 4, {
  client: { offset: 0, codec: codec.array(codec.u32be, 4) }, // __be32[4] client
  revNatIndex: { offset: 16, codec: codec.u16 }, // __u16 rev_nat_index
  pad: { offset: 18, codec: codec.pad(2) }, // __u16 pad
});

/** struct lb6_backend: 20 bytes. */
export const lb6BackendLayout = defineStruct('lb6_backend', 20, 4, {
  address: { offset: 0, codec: codec.array(codec.u32be, 4) }, // __be32[4] address
  port: { offset: 16, codec: codec.u16be }, // __be16 port
  proto: { offset: 18, codec: codec.u8 }, // __u8 proto
  state: { offset: 19, codec: codec.u8 }, // __u8 state
});

/** struct lb6_key: 24 bytes. */
export const lb6KeyLayout = defineStruct('lb6_key', 24, 4, {
  address: { offset: 0, codec: codec.array(codec.u32be, 4) }, // __be32[4] address
  dport: { offset: 16, codec: codec.u16be }, // __be16 dport
  backendSlot: { offset: 18, codec: codec.u16 }, // __u16 backend_slot
  proto: { offset: 20, codec: codec.u8 }, // __u8 proto
  scope: { offset: 21, codec: codec.u8 }, // __u8 scope
  pad: { offset: 22, codec: codec.pad(2) }, // __u16 pad
});

/** struct lb6_reverse_nat: 20 bytes. */
export const lb6ReverseNatLayout = defineStruct('lb6_reverse_nat', 20, 4, {
  address: { offset: 0, codec: codec.array(codec.u32be, 4) }, // __be32[4] address
  port: { offset: 16, codec: codec.u16be }, // __be16 port
  pad: { offset: 18, codec: codec.pad(2) }, // __u16 pad
});

/** struct lb_src_range_key: 24 bytes. */
export const lbSrcRangeKeyLayout = defineStruct('lb_src_range_key', 24, 4, {
  prefixlen: { offset: 0, codec: codec.u32 }, // __u32 prefixlen
  revNatIndex: { offset: 4, codec: codec.u16 }, // __u16 rev_nat_index
  pad: { offset: 6, codec: codec.pad(1) }, // __u8 pad
  family: { offset: 7, codec: codec.u8 }, // __u8 family
  ip: { offset: 8, codec: codec.array(codec.u32, 4) }, // __u32[4] ip
});

/** struct metrics_key: 4 bytes. */
export const metricsKeyLayout = defineStruct('metrics_key', 4, 2, {
  reason: { offset: 0, codec: codec.u8 }, // __u8 reason
  direction: { offset: 1, codec: codec.u8 }, // __u8 direction
  pad: { offset: 2, codec: codec.pad(2) }, // __u16 pad
});

/** struct metrics_value: 16 bytes. */
export const metricsValueLayout = defineStruct('metrics_value', 16, 8, {
  packets: { offset: 0, codec: codec.u64 }, // __u64 packets
  bytes: { offset: 8, codec: codec.u64 }, // __u64 bytes
});

/** struct nat4_entry: 16 bytes. */
export const nat4EntryLayout = defineStruct('nat4_entry', 16, 8, {
  createdNs: { offset: 0, codec: codec.u64 }, // __u64 created_ns
  toAddr: { offset: 8, codec: codec.u32be }, // __be32 to_addr
  toPort: { offset: 12, codec: codec.u16be }, // __be16 to_port
  flags: { offset: 14, codec: codec.u8 }, // __u8 flags
  pad: { offset: 15, codec: codec.pad(1) }, // __u8 pad
});

/** struct nat4_key: 16 bytes. */
export const nat4KeyLayout = defineStruct('nat4_key', 16, 4, {
  saddr: { offset: 0, codec: codec.u32be }, // __be32 saddr
  daddr: { offset: 4, codec: codec.u32be }, // __be32 daddr
  sport: { offset: 8, codec: codec.u16be }, // __be16 sport
  dport: { offset: 10, codec: codec.u16be }, // __be16 dport
  proto: { offset: 12, codec: codec.u8 }, // __u8 proto
  dir: { offset: 13, codec: codec.u8 }, // __u8 dir
  pad: { offset: 14, codec: codec.pad(2) }, // __u16 pad
});

/** struct nat6_entry: 32 bytes. */
export const nat6EntryLayout = defineStruct('nat6_entry', 32, 8, {
  createdNs: { offset: 0, codec: codec.u64 }, // __u64 created_ns
  toAddr: { offset: 8, codec: codec.array(codec.u32be, 4) }, // __be32[4] to_addr
  toPort: { offset: 24, codec: codec.u16be }, // __be16 to_port
  flags: { offset: 26, codec: codec.u8 }, // __u8 flags
  pad: { offset: 27, codec: codec.pad(5) }, // __u8[5] pad
});

/** struct nat6_key: 40 bytes. */
export const nat6KeyLayout = defineStruct('nat6_key', 40, 4, {
  saddr: { offset: 0, codec: codec.array(codec.u32be, 4) }, // __be32[4] saddr
  daddr: { offset: 16, codec: codec.array(codec.u32be, 4) }, // __be32[4] daddr
  sport: { offset: 32, codec: codec.u16be }, // __be16 sport
  dport: { offset: 34, codec: codec.u16be }, // __be16 dport
  proto: { offset: 36, codec: codec.u8 }, // __u8 proto
  dir: { offset: 37, codec: codec.u8 }, // __u8 dir
  pad: { offset: 38, codec: codec.pad(2) }, // __u16 pad
});

/** struct policy_entry: 8 bytes. */
export const policyEntryLayout = defineStruct('policy_entry', 8, 4, {
  cookie: { offset: 0, codec: codec.u32 }, // __u32 cookie
  deny: { offset: 4, codec: codec.u8 }, // __u8 deny
  l4PrefixBits: { offset: 5, codec: codec.u8 }, // __u8 l4_prefix_bits
  pad: { offset: 6, codec: codec.pad(2) }, // __u16 pad
});

/** struct policy_key: 16 bytes. */
export const policyKeyLayout = defineStruct('policy_key', 16, 4, {
  prefixlen: { offset: 0, codec: codec.u32 }, // __u32 prefixlen
  endpointId: { offset: 4, codec: codec.u32 }, // __u32 endpoint_id
  secIdentity: { offset: 8, codec: codec.u32 }, // __u32 sec_identity
  egress: { offset: 12, codec: codec.u8 }, // __u8 egress
  protocol: { offset: 13, codec: codec.u8 }, // __u8 protocol
  dport: { offset: 14, codec: codec.u16be }, // __be16 dport
});

/** struct remote_endpoint_info: 28 bytes. */
export const remoteEndpointInfoLayout = defineStruct('remote_endpoint_info', 28, 4, {
  identity: { offset: 0, codec: codec.u32 }, // __u32 identity
  tunnelIp4: { offset: 4, codec: codec.u32 }, // __u32 tunnel_ip4
  flags: { offset: 8, codec: codec.u8 }, // __u8 flags
  pad: { offset: 9, codec: codec.pad(3) }, // __u8[3] pad
  tunnelIp6: { offset: 12, codec: codec.array(codec.u32, 4) }, // __u32[4] tunnel_ip6
});

/** struct tendril_event: 80 bytes. */
export const tendrilEventLayout = defineStruct('tendril_event', 80, 8, {
  type: { offset: 0, codec: codec.u8 }, // __u8 type
  subtype: { offset: 1, codec: codec.u8 }, // __u8 subtype
  direction: { offset: 2, codec: codec.u8 }, // __u8 direction
  family: { offset: 3, codec: codec.u8 }, // __u8 family
  proto: { offset: 4, codec: codec.u8 }, // __u8 proto
  tcpFlags: { offset: 5, codec: codec.u8 }, // __u8 tcp_flags
  service: { offset: 6, codec: codec.u16 }, // __u16 service
  ifindex: { offset: 8, codec: codec.u32 }, // __u32 ifindex
  srcIdentity: { offset: 12, codec: codec.u32 }, // __u32 src_identity
  dstIdentity: { offset: 16, codec: codec.u32 }, // __u32 dst_identity
  srcEndpoint: { offset: 20, codec: codec.u32 }, // __u32 src_endpoint
  dstEndpoint: { offset: 24, codec: codec.u32 }, // __u32 dst_endpoint
  cookie: { offset: 28, codec: codec.u32 }, // __u32 cookie
  origLen: { offset: 32, codec: codec.u32 }, // __u32 orig_len
  sport: { offset: 36, codec: codec.u16 }, // __u16 sport
  dport: { offset: 38, codec: codec.u16 }, // __u16 dport
  saddr: { offset: 40, codec: codec.array(codec.u32, 4) }, // __u32[4] saddr
  daddr: { offset: 56, codec: codec.array(codec.u32, 4) }, // __u32[4] daddr
  tsNs: { offset: 72, codec: codec.u64 }, // __u64 ts_ns
});

/** Every struct above by its C name. */
export const structLayouts = {
  ct_budget: ctBudgetLayout,
  ct_entry: ctEntryLayout,
  ct4_key: ct4KeyLayout,
  ct6_key: ct6KeyLayout,
  datapath_config: datapathConfigLayout,
  device_info: deviceInfoLayout,
  endpoint_info: endpointInfoLayout,
  endpoint_key: endpointKeyLayout,
  frag4_key: frag4KeyLayout,
  frag4_ports: frag4PortsLayout,
  frag6_key: frag6KeyLayout,
  gc_run: gcRunLayout,
  gc_sample: gcSampleLayout,
  ipcache_key: ipcacheKeyLayout,
  ipmasq_key: ipmasqKeyLayout,
  lb_src_range_key: lbSrcRangeKeyLayout,
  lb4_affinity_key: lb4AffinityKeyLayout,
  lb4_affinity_value: lb4AffinityValueLayout,
  lb4_backend: lb4BackendLayout,
  lb4_key: lb4KeyLayout,
  lb4_member_key: lb4MemberKeyLayout,
  lb4_reverse_nat: lb4ReverseNatLayout,
  lb4_service: lb4ServiceLayout,
  lb6_affinity_key: lb6AffinityKeyLayout,
  lb6_backend: lb6BackendLayout,
  lb6_key: lb6KeyLayout,
  lb6_reverse_nat: lb6ReverseNatLayout,
  metrics_key: metricsKeyLayout,
  metrics_value: metricsValueLayout,
  nat_port_range: natPortRangeLayout,
  nat4_entry: nat4EntryLayout,
  nat4_key: nat4KeyLayout,
  nat6_entry: nat6EntryLayout,
  nat6_key: nat6KeyLayout,
  policy_entry: policyEntryLayout,
  policy_key: policyKeyLayout,
  remote_endpoint_info: remoteEndpointInfoLayout,
  tendril_event: tendrilEventLayout,
} as const;

/** The pinned maps (MapName) as the objects define them: type, key and value. */
export const mapLayouts = {
  tendril_lxc: { type: 'hash', key: { cType: 'struct endpoint_key', size: 20 }, value: { cType: 'struct endpoint_info', size: 28 } },
  tendril_ipcache: { type: 'LPM trie', key: { cType: 'struct ipcache_key', size: 24 }, value: { cType: 'struct remote_endpoint_info', size: 28 } },
  tendril_policy: { type: 'LPM trie', key: { cType: 'struct policy_key', size: 16 }, value: { cType: 'struct policy_entry', size: 8 } },
  tendril_ct4_tcp: { type: 'hash', key: { cType: 'struct ct4_key', size: 16 }, value: { cType: 'struct ct_entry', size: 56 } },
  tendril_ct4_any: { type: 'hash', key: { cType: 'struct ct4_key', size: 16 }, value: { cType: 'struct ct_entry', size: 56 } },
  tendril_frag4: { type: 'LRU hash', key: { cType: 'struct frag4_key', size: 12 }, value: { cType: 'struct frag4_ports', size: 4 } },
  tendril_ct6_tcp: { type: 'hash', key: { cType: 'struct ct6_key', size: 40 }, value: { cType: 'struct ct_entry', size: 56 } },
  tendril_ct6_any: { type: 'hash', key: { cType: 'struct ct6_key', size: 40 }, value: { cType: 'struct ct_entry', size: 56 } },
  tendril_frag6: { type: 'LRU hash', key: { cType: 'struct frag6_key', size: 40 }, value: { cType: 'struct frag4_ports', size: 4 } },
  tendril_metrics: { type: 'per-CPU hash', key: { cType: 'struct metrics_key', size: 4 }, value: { cType: 'struct metrics_value', size: 16 } },
  tendril_events: { type: 'ring buffer', key: undefined, value: undefined },
  tendril_config: { type: 'array', key: { cType: '__u32', size: 4 }, value: { cType: 'struct datapath_config', size: 64 } },
  tendril_lb4_svc: { type: 'hash', key: { cType: 'struct lb4_key', size: 12 }, value: { cType: 'struct lb4_service', size: 16 } },
  tendril_lb4_be: { type: 'hash', key: { cType: '__u32', size: 4 }, value: { cType: 'struct lb4_backend', size: 8 } },
  tendril_lb4_rev: { type: 'hash', key: { cType: '__u16', size: 2 }, value: { cType: 'struct lb4_reverse_nat', size: 8 } },
  tendril_lb4_aff: { type: 'LRU hash', key: { cType: 'struct lb4_affinity_key', size: 8 }, value: { cType: 'struct lb4_affinity_value', size: 16 } },
  tendril_lb4_mag: { type: 'hash of maps', key: { cType: '__u32', size: 4 }, value: undefined },
  tendril_lb4_member: { type: 'hash', key: { cType: 'struct lb4_member_key', size: 8 }, value: { cType: '__u8', size: 1 } },
  tendril_lb_srcrange: { type: 'LPM trie', key: { cType: 'struct lb_src_range_key', size: 24 }, value: { cType: '__u8', size: 1 } },
  tendril_lb6_svc: { type: 'hash', key: { cType: 'struct lb6_key', size: 24 }, value: { cType: 'struct lb4_service', size: 16 } },
  tendril_lb6_be: { type: 'hash', key: { cType: '__u32', size: 4 }, value: { cType: 'struct lb6_backend', size: 20 } },
  tendril_lb6_rev: { type: 'hash', key: { cType: '__u16', size: 2 }, value: { cType: 'struct lb6_reverse_nat', size: 20 } },
  tendril_lb6_aff: { type: 'LRU hash', key: { cType: 'struct lb6_affinity_key', size: 20 }, value: { cType: 'struct lb4_affinity_value', size: 16 } },
  tendril_snat4: { type: 'hash', key: { cType: 'struct nat4_key', size: 16 }, value: { cType: 'struct nat4_entry', size: 16 } },
  tendril_snat6: { type: 'hash', key: { cType: 'struct nat6_key', size: 40 }, value: { cType: 'struct nat6_entry', size: 32 } },
  tendril_devices: { type: 'hash', key: { cType: '__u32', size: 4 }, value: { cType: 'struct device_info', size: 32 } },
  tendril_ipmasq4: { type: 'LPM trie', key: { cType: 'struct ipmasq_key', size: 24 }, value: { cType: '__u8', size: 1 } },
  tendril_ct_budget: { type: 'hash', key: { cType: '__u32', size: 4 }, value: { cType: 'struct ct_budget', size: 8 } },
} as const;
