/**
 * Numbers shared by the eBPF programs (bpf/) and TypeScript. This file is the
 * one definition: `renderDatapathHeader()` writes build/bpf/include/
 * tendril_constants.h at build time (scripts/gen-bpf-headers.mjs), and the C
 * side includes that, never a hand-typed copy.
 */

/**
 * Why a packet was dropped, as the negative codes the programs return to
 * their callers and put in drop events and metrics (as the positive number).
 *
 * Two kinds of code, never mixed:
 * - A reason Cilium has too takes Cilium's number, and `cilium` names its
 *   DROP_* (Cilium's bpf/lib/drop_reasons.h), so a code reads the same in
 *   both. Cilium assigns 130..205 and grows upward.
 * - A reason of tendril's own is numbered in DROP_OWN_RANGE (230..254, far
 *   past Cilium's numbers, below EVENTS_LOST's 255) and has no `cilium`.
 * A code is never given to a second meaning: 231, 232 and 236 were
 * CLUSTERIP_FROM_OUTSIDE, ICMP6_NOT_ALLOWED and NAT_UNSUPPORTED_PROTO before
 * those took Cilium's numbers, and stay unused.
 */
export const DropReason = {
  INVALID_SOURCE: { code: -132, cilium: 'DROP_INVALID_SIP', text: 'source address is not the endpoint\'s own' },
  POLICY: { code: -133, cilium: 'DROP_POLICY', text: 'policy denied: no rule allows this flow' },
  INVALID_PACKET: { code: -134, cilium: 'DROP_INVALID', text: 'malformed or truncated packet' },
  CT_INVALID_HEADER: { code: -135, cilium: 'DROP_CT_INVALID_HDR', text: 'L4 header too short for connection tracking' },
  UNKNOWN_L3: { code: -139, cilium: 'DROP_UNKNOWN_L3', text: 'unsupported L3 protocol' },
  WRITE_ERROR: { code: -141, cilium: 'DROP_WRITE_ERROR', text: 'failed to rewrite the packet' },
  NO_TUNNEL_KEY: { code: -147, cilium: 'DROP_NO_TUNNEL_KEY', text: 'overlay packet without tunnel metadata' },
  UNKNOWN_ENDPOINT: { code: -150, cilium: 'DROP_UNKNOWN_TARGET', text: 'destination is a pod address with no local endpoint' },
  NOT_FOR_NODE: { code: -151, cilium: 'DROP_UNROUTABLE', text: 'overlay packet for an address that is neither a local pod nor this node' },
  // Full tables refuse new flows (an established flow is never evicted to make room).
  CT_FULL: { code: -155, cilium: 'DROP_CT_CREATE_FAILED', text: 'conntrack table full: no entry for a new flow' },
  // More IPv6 extension headers than the datapath walks (IPV6_MAX_EXT_HEADERS) before the upper layer.
  INVALID_EXTHDR: { code: -156, cilium: 'DROP_INVALID_EXTHDR', text: 'IPv6 extension header chain too long' },
  NO_SERVICE: { code: -158, cilium: 'DROP_NO_SERVICE', text: 'service has no backend for this traffic' },
  NOT_IN_SRC_RANGE: { code: -177, cilium: 'DROP_NOT_IN_SRC_RANGE', text: 'source is outside the LoadBalancer\'s loadBalancerSourceRanges' },
  NO_CONFIG: { code: -165, cilium: 'DROP_NO_CONFIG', text: 'datapath configuration missing' },
  NAT_NO_MAPPING: { code: -167, cilium: 'DROP_NAT_NO_MAPPING', text: 'no NAT mapping for a translated reply' },
  NAT_UNSUPPORTED_PROTO: { code: -168, cilium: 'DROP_NAT_UNSUPP_PROTO', text: 'SNAT cannot translate this protocol: not sent with the pod\'s address' },
  FIB_LOOKUP_FAILED: { code: -169, cilium: 'DROP_NO_FIB', text: 'no route for a translated packet' },
  CLUSTERIP_FROM_OUTSIDE: { code: -174, cilium: 'DROP_IS_CLUSTER_IP', text: 'ClusterIP from outside' },
  FRAG_NOT_FOUND: { code: -175, cilium: 'DROP_FRAG_NOT_FOUND', text: 'IP fragment whose first fragment was not seen' },
  ICMP6_NOT_ALLOWED: { code: -176, cilium: 'DROP_FORBIDDEN_ICMP6', text: 'ICMPv6 type not allowed' },
  POLICY_DENY: { code: -181, cilium: 'DROP_POLICY_DENY', text: 'policy denied by a deny rule' },
  TTL_EXCEEDED: { code: -196, cilium: 'DROP_TTL_EXCEEDED', text: 'TTL exceeded on local delivery' },
  // tendril's own (DROP_OWN_RANGE). Trust boundaries: each refusal at a door has a reason of its own.
  OVERLAY_NOT_NODE: { code: -230, text: 'overlay packet from a non-node' },
  NOT_FOR_ENDPOINT: { code: -233, text: 'packet at a pod\'s device not addressed to that pod' },
  NAT_FULL: { code: -234, text: 'SNAT table full: no mapping for a new flow' },
  CT_ENDPOINT_BUDGET: { code: -235, text: 'the endpoint used up its conntrack budget (--bpf-ct-endpoint-max)' },
  ARP_INVALID: { code: -237, text: 'malformed ARP packet' },
  NAT_PORT_EXHAUSTED: { code: -238, text: 'SNAT found no free port for this destination' },
  ENCAP_FAILED: { code: -239, text: 'failed to set the tunnel key' },
  CT_MIGRATION: { code: -240, text: 'TCP segment of a flow not carried over yet while a build with other map layouts takes over (sent again by TCP)' },
} as const satisfies Record<string, { code: number; text: string; cilium?: `DROP_${string}` }>;

/** The drop codes of tendril's own reasons (absolute values): clear of Cilium's, below MetricsReason.EVENTS_LOST. */
export const DROP_OWN_RANGE = { first: 230, last: 254 } as const;

export type DropReasonName = keyof typeof DropReason;

const dropByCode = new Map<number, DropReasonName>(Object.entries(DropReason).map(([name, r]) => [Math.abs(r.code), name as DropReasonName]));

/** The reason behind a drop code as events and metrics carry it (positive, or the negative return value). */
export function dropReasonName(code: number): DropReasonName | undefined {
  return dropByCode.get(Math.abs(code));
}

/**
 * Metrics reasons besides 0 (forwarded) and the drop codes: events the ring
 * buffer could not take (the reader was behind), counted per packet whose
 * event was lost, so `tendril bpf metrics` shows what the monitor missed.
 */
export const MetricsReason = {
  FORWARDED: 0,
  EVENTS_LOST: 255,
} as const;

/** Event record types in the `tendril_events` ring buffer. */
export const EventType = {
  DROP: 1,
  POLICY_VERDICT: 2,
  TRACE: 3,
} as const;

/** Where a trace event was observed (the `subtype` of a TRACE event). */
export const TracePoint = {
  /** Delivered straight into a local pod (bpf_redirect_peer). */
  TO_ENDPOINT: 1,
  /** Handed to the node's stack (to the node itself, or routed onwards). */
  TO_STACK: 2,
  /** Arrived at a pod's interface from the node's stack. */
  FROM_STACK: 3,
  /** Seen on the host device pair (tendril_host / tendril_net). */
  FROM_HOST: 4,
  TO_HOST: 5,
  /** Arrived on a node device (--devices) from the network. */
  FROM_NETWORK: 6,
  /** Leaving by a node device. */
  TO_NETWORK: 7,
  /** Encapsulated to another node (tendril_vxlan, the tunnel key holding the source identity). */
  TO_OVERLAY: 8,
  /** Arrived from another node through tendril_vxlan. */
  FROM_OVERLAY: 9,
} as const;

/** Direction of traffic relative to the endpoint in events and metrics (0 = not endpoint-relative). */
export const TrafficDirection = {
  NONE: 0,
  INGRESS: 1,
  EGRESS: 2,
} as const;

/** The `subtype` of a POLICY_VERDICT event. */
export const PolicyVerdict = {
  ALLOWED: 1,
  /** An entry with the deny flag matched. */
  DENIED: 2,
  /** No entry matched: default deny. */
  NO_MATCH: 3,
  /**
   * Staged policies: the enforced policy allows this new flow, the staged
   * view (enforced and staged policies together) would drop it. The cookie is
   * the staged view's deciding entry's; the packet passes.
   */
  WOULD_DROP: 4,
  /** Staged policies: the enforced policy drops this new flow, the staged view would allow it (the packet is dropped). */
  WOULD_ALLOW: 5,
  /**
   * --policy-audit-mode: the policy refused this new flow (a deny entry, or no
   * entry: the cookie tells which) and audit mode let it pass.
   */
  AUDIT: 6,
} as const;

/** Rule cookies with a meaning of their own; every other cookie is a rule's (ruleCookie()). */
export const ReservedCookie = {
  /** No rule decided (no entry matched). */
  NONE: 0,
  /** The direction is not enforced on the endpoint: allow-all. */
  NOT_ENFORCED: 1,
  /** The host may always reach its endpoints. */
  ALLOW_LOCALHOST: 2,
} as const;
/** Cookies below this are reserved. */
export const MIN_RULE_COOKIE = 16;

/** Trace levels of the datapath config. */
export const TraceLevel = {
  OFF: 0,
  /** A trace for the first packet of each new connection. */
  NEW_FLOWS: 1,
  /** A trace for every packet (debugging; costs throughput). */
  ALL: 2,
} as const;

/** Conntrack lifetimes, Cilium's defaults, in seconds. */
export const CtTimeout = {
  TCP_SYN: 60,
  TCP_ESTABLISHED: 21600,
  TCP_CLOSING: 10,
  ANY: 60,
} as const;

/** Flags of a conntrack entry. */
export const CtFlag = {
  /** A packet in the reply direction was seen. */
  REPLY_SEEN: 1 << 0,
  /** FIN or RST seen: the short closing lifetime applies. */
  CLOSING: 1 << 1,
  /**
   * A pod reaching its own service (hairpin): the flow's source was
   * rewritten to LB_HAIRPIN_IP4, so replies get their destination back
   * (the backend's own address) as well as the frontend as source.
   */
  HAIRPIN: 1 << 2,
  /** The flow came from outside the node to a NodePort/externalIP/LoadBalancer frontend. */
  NODEPORT: 1 << 3,
  /**
   * A service entry (key flag SERVICE): it pins the backend and sees only
   * the client's side, so the client's ACK makes it established; a flow's
   * own entry is established only once a reply is seen.
   */
  SERVICE: 1 << 4,
  /**
   * The entry counts against its endpoint's budget in tendril_ct_budget
   * (--bpf-ct-endpoint-max): the source endpoint's, else the destination's.
   * Whoever deletes the entry gives the count back.
   */
  CHARGED: 1 << 5,
  /** A FIN was seen in the original direction. */
  FIN_ORIGINAL: 1 << 6,
  /** A FIN was seen in the reply direction. With FIN_ORIGINAL, or an RST, the connection is closed: its tuple and SNAT port may be taken again. */
  FIN_REPLY: 1 << 7,
} as const;

/**
 * Flags of a conntrack key (ct4_key.flags). A service entry is keyed by the
 * client's tuple to the frontend (before DNAT) and holds the backend the
 * connection is pinned to; the translated flow has a normal entry.
 */
export const CtKeyFlag = {
  SERVICE: 1 << 0,
} as const;

/** Flags of a service map entry (lb4_service.flags). */
export const ServiceFlag = {
  NODEPORT: 1 << 0,
  EXTERNAL_IP: 1 << 1,
  LOADBALANCER: 1 << 2,
  /** externalTrafficPolicy Local: traffic from outside the node only goes to this node's backends (the entry's slots list only those). */
  LOCAL_TRAFFIC: 1 << 3,
  /** ClientIP session affinity: tendril_lb4_aff pins a client to a backend for affinity_timeout seconds. */
  AFFINITY: 1 << 4,
  /** Backends are chosen through the service's Maglev table in tendril_lb4_mag instead of at random. */
  MAGLEV: 1 << 5,
  /** The frontend also has an internal-scope entry (scope LbScope.INTERNAL) with every backend, for traffic from inside the node. */
  TWO_SCOPES: 1 << 6,
  /** loadBalancerSourceRanges: only sources inside the service's prefixes in tendril_lb_srcrange are taken. */
  SOURCE_RANGES: 1 << 7,
} as const;

/** The scope byte of a service key: which traffic an entry serves. */
export const LbScope = {
  /** Traffic from outside the node, and every frontend without TWO_SCOPES. */
  EXTERNAL: 0,
  /** Traffic from this node's pods and the node itself, when the frontend has TWO_SCOPES. */
  INTERNAL: 1,
} as const;

/** A backend's state (lb4_backend.state, and the API's backend "state"). Only ACTIVE backends take new connections; the others keep the ones they have. */
export const BackendState = {
  ACTIVE: 0,
  TERMINATING: 1,
  QUARANTINED: 2,
  MAINTENANCE: 3,
} as const;

/** The `dir` byte of a SNAT key: which side of the mapping the key is. */
export const NatDirection = {
  /** The original tuple as it leaves (pod or client → destination) → the translated source. */
  EGRESS: 0,
  /** The translated tuple as the reply arrives (destination → node address:port) → the original source. */
  INGRESS: 1,
} as const;

/** Flags of a SNAT entry. */
export const NatFlag = {
  /** Pod traffic leaving the cluster CIDRs. */
  MASQUERADE: 1 << 0,
  /** A NodePort/externalIP flow sent on to a backend off this node. */
  NODEPORT: 1 << 1,
} as const;

/**
 * The maps the GC program (bpf/bpf_gc.c) walks, by the number a run names
 * one with (gc_run.map).
 */
export const GcMap = {
  CT_TCP: 0,
  CT_ANY: 1,
  SNAT: 2,
  CT6_TCP: 3,
  CT6_ANY: 4,
  /** tendril_snat6: its keys are 40 bytes, as IPv6 conntrack's (gc_run.keys6). */
  SNAT6: 5,
} as const;

/** Flags of a GC run (gc_run.flags). */
export const GcFlag = {
  /** Count the map's entries only: nothing is deleted (map pressure between passes). */
  COUNT_ONLY: 1 << 0,
} as const;

/** Removed conntrack flows one GC run reports (gc_run.sample), for the log and `tendril bpf ct gc`. */
export const GC_SAMPLE_MAX = 10;
/** Keys one GC run judges (gc_run.keys): a short read-side critical section, a quarter of a millisecond or so. */
export const GC_BATCH = 1024;

/** Flags of the datapath config (datapath_config.flags). */
export const ConfigFlag = {
  /**
   * --routing-mode tunnel: a packet for an address whose ipcache entry names
   * a tunnel endpoint (another node) is encapsulated on tendril_vxlan
   * (datapath_config.tunnel_ifindex) with the source identity as VNI.
   * Without it (native routing) such packets go to the node's stack.
   */
  TUNNEL: 1 << 0,
  /**
   * --bpf-lb-external-clusterip: a ClusterIP is a frontend for traffic from
   * outside the cluster too (on a device, load-balanced and SNATed like a
   * NodePort). Without it such traffic is dropped (CLUSTERIP_FROM_OUTSIDE).
   */
  EXTERNAL_CLUSTERIP: 1 << 1,
  /**
   * --policy-audit-mode: a policy refusal is reported (VERDICT_AUDIT) and the
   * flow passes with its conntrack entry; drops for other reasons stay.
   */
  POLICY_AUDIT: 1 << 2,
} as const;

/** VXLAN's default UDP port for the overlay (Linux's and Cilium's choice, not IANA's 4789). */
export const TUNNEL_DEFAULT_PORT = 8472;
// The domain code's numbers (the overlay's overhead, service IDs, Maglev's table) live in ../limits.ts,
// apart from this implementation; re-exported here and generated into C with the rest.
import { MAGLEV_DEFAULT_TABLE_SIZE, MAX_SERVICE_ID, TUNNEL_OVERHEAD } from '../limits.js';
export { MAGLEV_DEFAULT_TABLE_SIZE, MAX_SERVICE_ID, TUNNEL_OVERHEAD };

/** Flags of a node device entry (tendril_devices). */
export const DeviceFlag = {
  /** Pod traffic leaving by this device is SNATed to the device's address. */
  MASQUERADE: 1 << 0,
} as const;

/** Flags of a local endpoint map entry. */
export const EndpointFlag = {
  /** An address of the node itself (router address), not a pod. */
  HOST: 1 << 0,
  /**
   * Staged policies select the endpoint: its staged view is in tendril_policy
   * too (POLICY_KEY_STAGED keys) and new flows are looked up in both.
   * Endpoints without it never look the staged view up.
   */
  STAGED: 1 << 1,
} as const;

/** The pinned maps, by name (pinned at <bpffs root>/tendril/<name>). */
export const MapName = {
  ENDPOINTS: 'tendril_lxc',
  IPCACHE: 'tendril_ipcache',
  POLICY: 'tendril_policy',
  CT_TCP: 'tendril_ct4_tcp',
  CT_ANY: 'tendril_ct4_any',
  FRAG: 'tendril_frag4',
  /** IPv6 conntrack, as CT_TCP and CT_ANY with 16-byte addresses in the key. */
  CT6_TCP: 'tendril_ct6_tcp',
  CT6_ANY: 'tendril_ct6_any',
  /** (source, destination, identification, protocol) of a fragmented IPv6 datagram → the ports from its first fragment. */
  FRAG6: 'tendril_frag6',
  METRICS: 'tendril_metrics',
  EVENTS: 'tendril_events',
  CONFIG: 'tendril_config',
  /** Frontend (address, port, protocol, scope) + slot → backend ID; slot 0 holds the count and flags. */
  LB_SERVICES: 'tendril_lb4_svc',
  /** Backend ID → address, port, state. */
  LB_BACKENDS: 'tendril_lb4_be',
  /** Reverse NAT index (= service ID) → frontend address and port. */
  LB_REVNAT: 'tendril_lb4_rev',
  /** (client address, reverse NAT index) → backend, last used: ClientIP session affinity. */
  LB_AFFINITY: 'tendril_lb4_aff',
  /** Reverse NAT index → the service's Maglev table (an inner array of backend IDs). */
  LB_MAGLEV: 'tendril_lb4_mag',
  /** (reverse NAT index, backend ID) → 1: the backends a service has; a connection pinned to a non-member chooses again. */
  LB_MEMBERS: 'tendril_lb4_member',
  /** (reverse NAT index, client prefix) → 1: loadBalancerSourceRanges, both families (an LPM trie keyed as the ipcache). */
  LB_SOURCE_RANGES: 'tendril_lb_srcrange',
  /**
   * IPv6 services, as LB_SERVICES/LB_BACKENDS/LB_REVNAT/LB_AFFINITY with
   * 16-byte addresses. Maglev tables and members are keyed by IDs only
   * (one ID space for both families): LB_MAGLEV and LB_MEMBERS serve both.
   */
  LB6_SERVICES: 'tendril_lb6_svc',
  LB6_BACKENDS: 'tendril_lb6_be',
  LB6_REVNAT: 'tendril_lb6_rev',
  LB6_AFFINITY: 'tendril_lb6_aff',
  /** SNAT mappings, both directions (masquerade, and NodePort to a backend off the node). */
  SNAT: 'tendril_snat4',
  /** IPv6 SNAT mappings (--ipv6-masquerade), as SNAT with 16-byte addresses. */
  SNAT6: 'tendril_snat6',
  /** Node devices with programs (--devices): ifindex → the device's IPv4 address and flags. */
  DEVICES: 'tendril_devices',
  /** Prefixes that pod traffic is not masqueraded to (and masquerade sources): the masquerade CIDRs, both families (IPv6 with --ipv6-masquerade). */
  NO_MASQUERADE: 'tendril_ipmasq4',
  /** Endpoint ID → conntrack entries charged to it (CtFlag.CHARGED), for --bpf-ct-endpoint-max. */
  CT_BUDGET: 'tendril_ct_budget',
} as const;
export type MapNameValue = (typeof MapName)[keyof typeof MapName];

/** Maps an object keeps to itself: not pinned, holding nothing from one packet to the next (scratch space off the stack). */
export const PrivateMapName = {
  /** SNAT's port search state, one slot per CPU (bpf/lib/nat.h). */
  NAT_CLAIM: 'tendril_nat_claim',
  /** The same for IPv6 SNAT (bpf/lib/nat6.h). */
  NAT6_CLAIM: 'tendril_nat6_claim',
  /** The flow of the packet in hand, one slot per CPU (bpf/lib/flow.h): off the stack the stages share. */
  FLOW_SCRATCH: 'tendril_flow_scratch',
} as const;

/** Default map sizes (Cilium's where it has one); the agent's --bpf-*-max flags override them. */
export const DefaultMapSize = {
  [MapName.ENDPOINTS]: 65535,
  [MapName.IPCACHE]: 512000,
  /** One trie for every endpoint's entries (LPM, allocated on use); each endpoint is capped by the engine. */
  [MapName.POLICY]: 1 << 22,
  [MapName.CT_TCP]: 1 << 19,
  [MapName.CT_ANY]: 1 << 18,
  [MapName.FRAG]: 8192,
  /** Half the IPv4 tables' entries: an entry's key is 40 bytes, not 16. */
  [MapName.CT6_TCP]: 1 << 18,
  [MapName.CT6_ANY]: 1 << 17,
  [MapName.FRAG6]: 8192,
  [MapName.METRICS]: 1024,
  /** Bytes, a power of two. */
  [MapName.EVENTS]: 1 << 22,
  [MapName.CONFIG]: 1,
  [MapName.LB_SERVICES]: 65536,
  [MapName.LB_BACKENDS]: 65536,
  [MapName.LB_REVNAT]: 65536,
  [MapName.LB_AFFINITY]: 65536,
  /** Services with a Maglev table (outer map entries). */
  [MapName.LB_MAGLEV]: 65536,
  /** One entry per (service, backend) pair: as many as slots, plus the backends that have none (terminating). */
  [MapName.LB_MEMBERS]: 65536,
  /** Prefixes of every service's loadBalancerSourceRanges (LPM, allocated on use). */
  [MapName.LB_SOURCE_RANGES]: 16384,
  [MapName.LB6_SERVICES]: 65536,
  [MapName.LB6_BACKENDS]: 65536,
  [MapName.LB6_REVNAT]: 65536,
  [MapName.LB6_AFFINITY]: 65536,
  [MapName.SNAT]: 1 << 19,
  /** Half the IPv4 table's entries: a key is 40 bytes, not 16 (as conntrack's). */
  [MapName.SNAT6]: 1 << 18,
  [MapName.DEVICES]: 64,
  [MapName.NO_MASQUERADE]: 16384,
  /** One counter per endpoint: as many as endpoints. */
  [MapName.CT_BUDGET]: 65535,
} as const satisfies Record<MapNameValue, number>;

/**
 * IPv6 extension headers the datapath walks before the upper-layer header
 * (bpf/lib/ipv6.h): hop-by-hop, routing, destination options (twice),
 * fragment and AH in one packet are 6; a longer chain is dropped
 * (DropReason.INVALID_EXTHDR) rather than guessed at.
 */
export const IPV6_MAX_EXT_HEADERS = 6;

/** Bits of a policy key before (protocol, port): endpoint ID, peer identity, direction. */
export const POLICY_KEY_FIXED_BITS = 72;
/** Bits of (protocol, port) in a policy key. */
export const POLICY_KEY_L4_BITS = 24;
/**
 * The bit of a policy key's direction byte that marks an entry of the
 * endpoint's staged view (EndpointFlag.STAGED): within the fixed bits, so a
 * lookup of the enforced policy never matches it.
 */
export const POLICY_KEY_STAGED = 2;
/** Bits of an ipcache (and tendril_ipmasq4) key before the address: padding and family. */
export const IPCACHE_KEY_FIXED_BITS = 32;
/** Bits of a source range key before the prefix: the service ID, padding and family (as the ipcache's 32). */
export const LB_SRC_RANGE_KEY_FIXED_BITS = 32;

/** The source a pod's own connection to its own service (hairpin) gets (Cilium's IPV4_LOOPBACK), network order in C. */
export const LB_HAIRPIN_IP4 = '169.254.42.1';
/**
 * LB_HAIRPIN_IP4 for IPv6: an address of the discard-only prefix 100::/64
 * (RFC 6666), never a pod's, node's or service's (validation refuses the
 * prefix), routed out of the pod by its default route. Not link-local: a
 * pod's UDP socket bound to `::` answers a link-local source from its own
 * link-local address (source selection prefers the destination's scope),
 * a tuple the hairpin flow's conntrack entry does not hold, so UDP hairpin
 * replies were lost; a global-scope source gets the reply from the pod's
 * own address, as TCP's accepted socket does anyway.
 */
export const LB_HAIRPIN_IP6 = '100::a9fe:2a01';

/** An IPv6 address's four 32-bit words in host order (the C side takes each through bpf_htonl). */
function ipv6HostWords(ip: string): number[] {
  const halves = ip.split('::');
  const head = halves[0] ? halves[0].split(':') : [];
  const tail = halves.length > 1 && halves[1] ? halves[1].split(':') : [];
  const groups = [...head, ...Array<string>(8 - head.length - tail.length).fill('0'), ...tail].map((g) => parseInt(g, 16));
  if (groups.length !== 8 || groups.some((g) => !Number.isInteger(g) || g < 0 || g > 0xffff)) throw new RangeError(`${ip} is not an IPv6 address`);
  return [0, 2, 4, 6].map((i) => ((groups[i]! << 16) | groups[i + 1]!) >>> 0);
}
/**
 * SNAT source ports when the datapath config names none (a program run
 * without an agent): above Linux's default ephemeral range (32768-60999), so
 * the node's own connections never collide with a mapping, and outside the
 * NodePort range. The agent writes its own ranges (--bpf-nat-port-range, less
 * the node's ephemeral range and the NodePort range) into the config.
 */
export const NAT_PORT_MIN = 61000;
export const NAT_PORT_MAX = 65535;
/** Random ports SNAT tries before it walks the whole range for a free one. */
export const NAT_PORT_RETRIES = 16;
/**
 * Ports a search still looks at (from a random one on) once the SNAT table
 * turned out full: only a port of a flow that is over can be had then, and
 * a table kept full must not cost every refused flow a walk of the range.
 */
export const NAT_FULL_WALK = 256;
/**
 * How long a SNAT mapping without any conntrack entry is left alone: its
 * flow may be an untracked one the node routes on.
 */
export const NAT_UNTRACKED_GRACE_S = 10;
/**
 * How long after a closed TCP flow's last packet its SNAT port may go to
 * another flow. The old flow's RST or last ACK and a new flow's SYN can
 * leave on different CPUs: taken at once, the port's new SYN may reach the
 * peer before the old RST does, find a connection still open there, and be
 * answered with a challenge ACK the client refuses (its SYN then waits a
 * second to be sent again). Far longer than any reordering on one path,
 * far shorter than the 10 s a closed flow's entry lives.
 */
export const NAT_CLOSED_REUSE_MS = 100;
/** Port ranges the datapath config holds for SNAT (datapath_config.nat_ports). */
export const NAT_PORT_RANGES = 2;

/** A dotted IPv4 address as a host-order number (C turns it to network order with bpf_htonl). */
function ipv4HostOrder(ip: string): number {
  const parts = ip.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) throw new RangeError(`${ip} is not an IPv4 address`);
  return ((parts[0]! << 24) | (parts[1]! << 16) | (parts[2]! << 8) | parts[3]!) >>> 0;
}

function macro(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase();
}

function define(name: string, value: number | string): string {
  return `#define ${name.padEnd(36)} ${value}`;
}

/** C source for tendril_constants.h, generated from the constants above. */
export function renderDatapathHeader(): string {
  const lines = [
    '/* SPDX-License-Identifier: Apache-2.0 */',
    '/* Generated from src/datapath/bpf/constants.ts by renderDatapathHeader(); do not edit. */',
    '#ifndef __TENDRIL_CONSTANTS_H_',
    '#define __TENDRIL_CONSTANTS_H_',
    '',
  ];
  for (const [name, r] of Object.entries(DropReason)) lines.push(`/* ${r.text} */`, define(`DROP_${name}`, `(${r.code})`));
  lines.push('');
  const groups: Array<[string, Record<string, number>]> = [
    ['METRICS_REASON', MetricsReason],
    ['EVENT', EventType],
    ['TRACE', TracePoint],
    ['DIR', TrafficDirection],
    ['VERDICT', PolicyVerdict],
    ['COOKIE', ReservedCookie],
    ['TRACE_LEVEL', TraceLevel],
    ['CT_TIMEOUT', CtTimeout],
    ['CT_F', CtFlag],
    ['ENDPOINT_F', EndpointFlag],
    ['CT_KEY_F', CtKeyFlag],
    ['SVC_F', ServiceFlag],
    ['LB_SCOPE', LbScope],
    ['BACKEND_STATE', BackendState],
    ['DEVICE_F', DeviceFlag],
    ['CONFIG_F', ConfigFlag],
    ['NAT_DIR', NatDirection],
    ['NAT_F', NatFlag],
    ['GC_MAP', GcMap],
    ['GC_F', GcFlag],
  ];
  for (const [prefix, table] of groups) {
    for (const [name, value] of Object.entries(table)) lines.push(define(`${prefix}_${macro(name)}`, value));
    lines.push('');
  }
  for (const [name, value] of Object.entries(DefaultMapSize)) lines.push(define(`${name.toUpperCase()}_DEFAULT_SIZE`, value));
  lines.push(
    define('MIN_RULE_COOKIE', MIN_RULE_COOKIE),
    define('POLICY_KEY_FIXED_BITS', POLICY_KEY_FIXED_BITS),
    define('POLICY_KEY_L4_BITS', POLICY_KEY_L4_BITS),
    define('POLICY_KEY_STAGED', POLICY_KEY_STAGED),
    define('IPCACHE_KEY_FIXED_BITS', IPCACHE_KEY_FIXED_BITS),
    define('LB_SRC_RANGE_KEY_FIXED_BITS', LB_SRC_RANGE_KEY_FIXED_BITS),
    define('IPV6_MAX_EXT_HEADERS', IPV6_MAX_EXT_HEADERS),
    define('MAX_SERVICE_ID', MAX_SERVICE_ID),
    `/* ${LB_HAIRPIN_IP4} */`,
    define('LB_HAIRPIN_IP4_HOST_ORDER', `0x${ipv4HostOrder(LB_HAIRPIN_IP4).toString(16).padStart(8, '0')}U`),
    `/* ${LB_HAIRPIN_IP6} */`,
    ...ipv6HostWords(LB_HAIRPIN_IP6).map((w, i) => define(`LB_HAIRPIN_IP6_W${i}`, `0x${w.toString(16).padStart(8, '0')}U`)),
    define('NAT_PORT_MIN', NAT_PORT_MIN),
    define('NAT_PORT_MAX', NAT_PORT_MAX),
    define('NAT_PORT_RETRIES', NAT_PORT_RETRIES),
    define('NAT_PORT_RANGES', NAT_PORT_RANGES),
    define('NAT_FULL_WALK', NAT_FULL_WALK),
    define('NAT_UNTRACKED_GRACE_S', NAT_UNTRACKED_GRACE_S),
    define('NAT_CLOSED_REUSE_MS', NAT_CLOSED_REUSE_MS),
    define('TUNNEL_OVERHEAD', TUNNEL_OVERHEAD),
    define('GC_SAMPLE_MAX', GC_SAMPLE_MAX),
    define('GC_BATCH', GC_BATCH),
    '',
    '#endif',
    '',
  );
  return lines.join('\n');
}
