/**
 * Numbers from the kernel's uapi headers (linux/netlink.h, rtnetlink.h,
 * if_link.h, if_addr.h, neighbour.h, pkt_sched.h, pkt_cls.h), only those
 * tendril uses. They are ABI: they never change once released.
 */

export const NETLINK_ROUTE = 0;

// nlmsghdr.nlmsg_type: control messages
export const NLMSG_NOOP = 1;
export const NLMSG_ERROR = 2;
export const NLMSG_DONE = 3;

// nlmsghdr.nlmsg_flags
export const NLM_F_REQUEST = 0x1;
export const NLM_F_MULTI = 0x2;
export const NLM_F_ACK = 0x4;
export const NLM_F_DUMP_INTR = 0x10;
export const NLM_F_DUMP = 0x300;
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
// ...on NLMSG_ERROR replies
export const NLM_F_CAPPED = 0x100;
export const NLM_F_ACK_TLVS = 0x200;

// Extended ack attributes after struct nlmsgerr
export const NLMSGERR_ATTR_MSG = 1;
export const NLMSGERR_ATTR_OFFS = 2;

// Attribute header flags
export const NLA_F_NESTED = 0x8000;
export const NLA_F_NET_BYTEORDER = 0x4000;
export const NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xffff;

export const RTM = {
  NEWLINK: 16,
  DELLINK: 17,
  GETLINK: 18,
  SETLINK: 19,
  NEWADDR: 20,
  DELADDR: 21,
  GETADDR: 22,
  NEWROUTE: 24,
  DELROUTE: 25,
  GETROUTE: 26,
  NEWNEIGH: 28,
  DELNEIGH: 29,
  GETNEIGH: 30,
  NEWQDISC: 36,
  DELQDISC: 37,
  GETQDISC: 38,
  NEWTFILTER: 44,
  DELTFILTER: 45,
  GETTFILTER: 46,
} as const;

/** The message type's name, for operations in errors ("RTM_NEWLINK"). */
export function messageTypeName(type: number): string {
  for (const [name, value] of Object.entries(RTM)) if (value === type) return `RTM_${name}`;
  return `netlink type ${type}`;
}

// Address families
export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_BRIDGE = 7;
export const AF_INET6 = 10;

// struct ifinfomsg
export const IFF_UP = 0x1;
export const IFF_LOOPBACK = 0x8;
export const IFF_RUNNING = 0x40;
export const IFF_LOWER_UP = 0x10000;

export const IFLA = {
  ADDRESS: 1,
  BROADCAST: 2,
  IFNAME: 3,
  MTU: 4,
  LINK: 5,
  MASTER: 10,
  TXQLEN: 13,
  OPERSTATE: 16,
  LINKINFO: 18,
  NET_NS_PID: 19,
  NET_NS_FD: 28,
  EXT_MASK: 29,
  LINK_NETNSID: 37,
  ALT_IFNAME: 53,
} as const;

export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;
export const VETH_INFO_PEER = 1;

export const IFLA_VXLAN = {
  ID: 1,
  LINK: 3,
  LOCAL: 4,
  TTL: 5,
  LEARNING: 7,
  PORT: 15,
  LOCAL6: 17,
  COLLECT_METADATA: 25,
} as const;

/** IFLA_EXT_MASK bit: leave the statistics out of link replies (most of their bytes). */
export const RTEXT_FILTER_SKIP_STATS = 8;

/** IFLA_OPERSTATE values (RFC 2863). */
export const OPER_STATES = ['unknown', 'notpresent', 'down', 'lowerlayerdown', 'testing', 'dormant', 'up'] as const;

// struct ifaddrmsg
export const IFA = {
  ADDRESS: 1,
  LOCAL: 2,
  LABEL: 3,
  BROADCAST: 4,
  FLAGS: 8,
} as const;
export const IFA_F_NODAD = 0x02;
export const IFA_F_TENTATIVE = 0x40;
export const IFA_F_PERMANENT = 0x80;

// struct rtmsg
export const RTA = {
  DST: 1,
  SRC: 2,
  OIF: 4,
  GATEWAY: 5,
  PRIORITY: 6,
  PREFSRC: 7,
  TABLE: 15,
} as const;
export const RTNH_F_ONLINK = 0x4;
export const RT_TABLE_UNSPEC = 0;
export const RT_TABLE_MAIN = 254;
export const RT_TABLE_LOCAL = 255;
export const RTPROT_BOOT = 3;
export const RTN_UNICAST = 1;
export const RTN_LOCAL = 2;

export const RT_SCOPE = {
  universe: 0,
  site: 200,
  link: 253,
  host: 254,
  nowhere: 255,
} as const;
export type RouteScopeName = keyof typeof RT_SCOPE;

// struct ndmsg
export const NDA = {
  DST: 1,
  LLADDR: 2,
  IFINDEX: 8,
} as const;
export const NUD = {
  incomplete: 0x01,
  reachable: 0x02,
  stale: 0x04,
  delay: 0x08,
  probe: 0x10,
  failed: 0x20,
  noarp: 0x40,
  permanent: 0x80,
} as const;
export type NeighbourStateName = keyof typeof NUD;
export const NTF_PROXY = 0x08;

// struct tcmsg
export const TCA = {
  KIND: 1,
  OPTIONS: 2,
  CHAIN: 11,
} as const;
export const TCA_BPF = {
  CLASSID: 3,
  FD: 6,
  NAME: 7,
  FLAGS: 8,
  FLAGS_GEN: 9,
  TAG: 10,
  ID: 11,
} as const;
export const TCA_BPF_FLAG_ACT_DIRECT = 1;

/** The clsact qdisc's parent and handle (ffff:fff1, ffff:0000). */
export const TC_H_CLSACT = 0xfffffff1;
export const TC_H_CLSACT_HANDLE = 0xffff0000;
/** Filter parents of clsact's two hooks. */
export const TC_H_INGRESS_PARENT = 0xfffffff2;
export const TC_H_EGRESS_PARENT = 0xfffffff3;
/** ETH_P_ALL (host order); tcm_info's low 16 bits carry it in network order. */
export const ETH_P_ALL = 0x0003;
