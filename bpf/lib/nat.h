/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * SNAT in BPF: masquerade of pod traffic leaving the cluster CIDRs, and the
 * source rewrite of NodePort flows sent on to a backend off this node. One
 * LRU map holds both sides of every mapping: the original tuple as it
 * leaves (NAT_DIR_EGRESS → the node address and port it got) and the
 * translated tuple as replies arrive (NAT_DIR_INGRESS → the original
 * source). Ports come from NAT_PORT_MIN..NAT_PORT_MAX.
 */
#ifndef __TENDRIL_LIB_NAT_H_
#define __TENDRIL_LIB_NAT_H_

#include "common.h"
#include "devices.h"
#include "flow.h"
#include "ipv4.h"
#include "rewrite.h"

struct nat4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 dir; /* NAT_DIR_* */
	__u16 pad;
};

struct nat4_entry {
	__u64 created_ns;
	__be32 to_addr; /* EGRESS: the new source; INGRESS: the original source (the new destination) */
	__be16 to_port;
	__u8 flags;     /* NAT_F_* */
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct nat4_key);
	__type(value, struct nat4_entry);
	__uint(max_entries, TENDRIL_SNAT4_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_snat4 SEC(".maps");

/* Masquerade CIDRs (--masquerade-cidr): pod traffic from them to outside them is masqueraded. */
struct ipmasq_key {
	__u32 prefixlen; /* IPCACHE_KEY_FIXED_BITS + the prefix's length (laid out as the ipcache key) */
	__u16 pad1;
	__u8 pad2;
	__u8 family;
	__u32 ip[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct ipmasq_key);
	__type(value, __u8);
	__uint(max_entries, TENDRIL_IPMASQ4_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ipmasq4 SEC(".maps");

/* ---- logic below ---------------------------------------------------------- */

/*
 * SNATs the packet's source to nat_addr with a port from the allocator
 * (a mapping that exists for the tuple is reused), recording both sides
 * with `nat_flags`; updates f->saddr/sport. 0, or the drop reason
 * (DROP_NAT_PORT_EXHAUSTED when no port is free for this destination).
 */
static __always_inline int snat4_apply(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, __be32 nat_addr, __u8 nat_flags,
				       __u64 now)
{
	return 0; /* filled in below by the SNAT work */
}

/*
 * netdev ingress: a reply to a SNAT mapping (destination = a node address
 * and a mapped port) gets its original destination back (f->daddr/dport
 * updated). Returns 1 and sets *action when the packet's fate is decided
 * here (a masquerade reply, passed on to the stack for the pod), 0 when it
 * goes on (not a reply; or a NodePort SNAT reply, which the NodePort code
 * reverse-translates next: *nat_flags says which).
 */
static __always_inline int snat4_rev_netdev(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, __u8 *nat_flags, int *action)
{
	*nat_flags = 0;
	return 0;
}

/*
 * netdev egress: pod traffic from the masquerade CIDRs to outside them
 * leaving by a device with DEVICE_F_MASQUERADE is SNATed to the device's
 * address. Returns 1 and sets *action when it decided (a drop), 0 when the
 * packet goes on (translated or not).
 */
static __always_inline int snat4_masquerade(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, const struct device_info *dev,
					    int *action)
{
	return 0;
}

#endif
