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

#include <linux/in.h>
#include <linux/ip.h>

#include "common.h"
#include "conntrack.h"
#include "devices.h"
#include "ipcache.h"
#include "drop.h"
#include "flow.h"
#include "ipv4.h"
#include "l4.h"
#include "rewrite.h"
#include "trace.h"

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
	__uint(type, BPF_MAP_TYPE_HASH);
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

#define NAT_PORT_SPAN (NAT_PORT_MAX - NAT_PORT_MIN + 1)

static __always_inline void nat4_key_init(struct nat4_key *k, __be32 saddr, __be32 daddr, __be16 sport, __be16 dport, __u8 proto, __u8 dir)
{
	k->saddr = saddr;
	k->daddr = daddr;
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->dir = dir;
	k->pad = 0;
}

/* The ICMP type at the start of the L4 header, or -1 when it cannot be read. */
static __always_inline int nat4_icmp_type(struct __sk_buff *skb, const struct ipv4_info *ip)
{
	__u8 type;

	if (ip->l4_off + 1 > ip->ip_end || bpf_skb_load_bytes(skb, ip->l4_off, &type, 1) < 0)
		return -1;
	return type;
}

/*
 * Whether SNAT translates this packet at all: TCP and UDP, and ICMP echo
 * requests (the identifier plays the source port). Everything else,
 * including ICMP errors and echo replies, leaves untranslated.
 */
static __always_inline int nat4_translatable(struct __sk_buff *skb, const struct flow *f, const struct ipv4_info *ip)
{
	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP)
		return 1;
	if (f->proto != IPPROTO_ICMP || f->icmp_error)
		return 0;
	/* A later fragment carries no ICMP header: its ports from the first fragment say request (identifier as sport). */
	if (ipv4_is_later_fragment(ip))
		return f->dport == 0;
	return nat4_icmp_type(skb, ip) == ICMP_T_ECHO;
}

/*
 * Whether the reply side of a mapping still points back at its tuple. The
 * LRU may evict one side alone: a missing reply side is restored when its
 * port is still free; one another flow holds now means a new port.
 */
static __always_inline int nat4_reverse_holds(const struct nat4_key *rkey, const struct nat4_entry *back)
{
	struct nat4_entry *cur = bpf_map_lookup_elem(&tendril_snat4, rkey);

	if (cur)
		return cur->to_addr == back->to_addr && cur->to_port == back->to_port;
	return bpf_map_update_elem(&tendril_snat4, rkey, back, BPF_NOEXIST) == 0;
}

/*
 * The mapping of the tuple f leaves with, created when there is none: a
 * port claimed at random (the INGRESS key inserted with BPF_NOEXIST, so
 * two flows never share a reply tuple), NAT_PORT_RETRIES tries at most.
 * *created says whether this packet made it. 0 or DROP_NAT_PORT_EXHAUSTED.
 */
static __always_inline int snat4_mapping(const struct flow *f, __be32 nat_addr, __u8 nat_flags, __u64 now, struct nat4_entry *out,
					 int *created)
{
	struct nat4_key okey, rkey;
	struct nat4_entry fwd, back;
	struct nat4_entry *hit;
	__be16 port;
	__u32 i;

	*created = 0;
	nat4_key_init(&okey, f->saddr, f->daddr, f->sport, f->dport, f->proto, NAT_DIR_EGRESS);
	__builtin_memset(&back, 0, sizeof(back));
	back.to_addr = f->saddr;
	back.to_port = f->sport;
	back.flags = nat_flags;

	hit = bpf_map_lookup_elem(&tendril_snat4, &okey);
	if (hit && hit->to_addr == nat_addr) {
		nat4_key_init(&rkey, f->daddr, hit->to_addr, f->dport, hit->to_port, f->proto, NAT_DIR_INGRESS);
		back.created_ns = hit->created_ns;
		if (nat4_reverse_holds(&rkey, &back)) {
			*out = *hit;
			return 0;
		}
	}

	__builtin_memset(&fwd, 0, sizeof(fwd));
	fwd.created_ns = now;
	fwd.to_addr = nat_addr;
	fwd.flags = nat_flags;
	back.created_ns = now;
	for (i = 0; i < NAT_PORT_RETRIES; i++) {
		port = bpf_htons(NAT_PORT_MIN + bpf_get_prandom_u32() % NAT_PORT_SPAN);
		nat4_key_init(&rkey, f->daddr, nat_addr, f->dport, port, f->proto, NAT_DIR_INGRESS);
		if (bpf_map_update_elem(&tendril_snat4, &rkey, &back, BPF_NOEXIST) < 0)
			continue;
		fwd.to_port = port;
		/*
		 * A stale mapping (another node address, or its port lost) is
		 * replaced; against a CPU that mapped the same new tuple at the
		 * same time, the first one in wins and this port is given back.
		 */
		if (hit) {
			bpf_map_update_elem(&tendril_snat4, &okey, &fwd, BPF_ANY);
		} else if (bpf_map_update_elem(&tendril_snat4, &okey, &fwd, BPF_NOEXIST) < 0) {
			struct nat4_entry *won = bpf_map_lookup_elem(&tendril_snat4, &okey);

			bpf_map_delete_elem(&tendril_snat4, &rkey);
			if (!won)
				return DROP_NAT_PORT_EXHAUSTED;
			*out = *won;
			return 0;
		}
		*out = fwd;
		*created = 1;
		return 0;
	}
	return DROP_NAT_PORT_EXHAUSTED;
}

static __always_inline int snat4_apply_new(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, __be32 nat_addr, __u8 nat_flags,
					   __u64 now, int *created)
{
	struct nat4_entry m;
	int ret;

	*created = 0;
	if (!nat4_translatable(skb, f, ip))
		return 0;
	ret = snat4_mapping(f, nat_addr, nat_flags, now, &m, created);
	if (ret < 0)
		return ret;
	ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_SRC, f->saddr, m.to_addr);
	if (ret < 0)
		return ret;
	f->saddr = m.to_addr;
	/* A later fragment has no L4 header: its address alone changes, its ports came with the first. */
	if (!ipv4_is_later_fragment(ip)) {
		ret = ipv4_rewrite_port(skb, ip, f->proto, REWRITE_SRC, f->sport, m.to_port);
		if (ret < 0)
			return ret;
	}
	f->sport = m.to_port;
	return 0;
}

/*
 * SNATs the packet's source to nat_addr with a port from the allocator
 * (a mapping that exists for the tuple is reused), recording both sides
 * with `nat_flags`; updates f->saddr/sport. 0, or the drop reason
 * (DROP_NAT_PORT_EXHAUSTED when no port is free for this destination).
 * TCP, UDP and ICMP echo requests only; other packets are left as they are.
 */
static __always_inline int snat4_apply(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, __be32 nat_addr, __u8 nat_flags,
				       __u64 now)
{
	int created;

	return snat4_apply_new(skb, f, ip, nat_addr, nat_flags, now, &created);
}

/*
 * An ICMP error from outside about a translated flow (the datagram inside
 * is one the node sent: source node address and mapped port) goes back to
 * the original source: the outer destination, and the embedded datagram's
 * source address and port, with the embedded IP checksum, the embedded L4
 * checksum when the error carries it (UDP's 0 stays 0), and the ICMP
 * checksum kept right. 1 when translated (*nat_flags set), 0 when no
 * mapping, or a drop reason.
 */
static __always_inline int snat4_rev_icmp_error(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, __u8 *nat_flags)
{
	struct icmp_inner in;
	struct nat4_entry *m;
	struct nat4_key key;
	__be32 to_addr;
	__be16 to_port;
	__u8 flags;
	int ret;

	if (!f->has_inner || f->inner_saddr != f->daddr || ipv4_is_later_fragment(ip))
		return 0;
	nat4_key_init(&key, f->inner_daddr, f->inner_saddr, f->inner_dport, f->inner_sport, f->inner_proto, NAT_DIR_INGRESS);
	m = bpf_map_lookup_elem(&tendril_snat4, &key);
	if (!m)
		return 0;
	to_addr = m->to_addr;
	to_port = m->to_port;
	flags = m->flags;
	ret = icmp_inner_load(skb, ip, &in);
	if (ret == 0)
		ret = icmp_inner_rewrite_port(skb, ip, &in, REWRITE_SRC, f->inner_sport, to_port);
	if (ret == 0)
		ret = icmp_inner_rewrite_addr(skb, &in, REWRITE_SRC, f->inner_saddr, to_addr);
	/* The outer destination: ICMP's checksum has no pseudo-header, the IP header's alone changes. */
	if (ret == 0)
		ret = ipv4_rewrite_addr(skb, ip, IPPROTO_ICMP, REWRITE_DST, f->daddr, to_addr);
	if (ret < 0)
		return ret;
	*nat_flags = flags;
	f->daddr = to_addr;
	f->inner_saddr = to_addr;
	f->inner_sport = to_port;
	return 1;
}

/* An address of the node's own (its router address): no pod's. */
static __always_inline int nat4_to_node_address(__be32 addr)
{
	return ipcache_identity4(addr) == IDENTITY_HOST;
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
	struct nat4_entry *m;
	struct nat4_key key;
	__be32 to_addr;
	__be16 to_port;
	__u8 flags;
	int ret;

	*nat_flags = 0;
	if (f->proto == IPPROTO_ICMP && f->icmp_error) {
		ret = snat4_rev_icmp_error(skb, f, ip, nat_flags);
		if (ret < 0)
			goto drop;
		if (ret == 0 || (*nat_flags & NAT_F_NODEPORT))
			return 0;
		*action = TC_ACT_OK;
		return 1;
	}
	/* Mapped ports are all in the allocator's range: anything else is no reply of ours, without a lookup. */
	if (bpf_ntohs(f->dport) < NAT_PORT_MIN)
		return 0;
	if (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP) {
		if (f->proto != IPPROTO_ICMP)
			return 0;
		if (ipv4_is_later_fragment(ip) ? f->sport != 0 : nat4_icmp_type(skb, ip) != ICMP_T_ECHOREPLY)
			return 0;
	}
	nat4_key_init(&key, f->saddr, f->daddr, f->sport, f->dport, f->proto, NAT_DIR_INGRESS);
	m = bpf_map_lookup_elem(&tendril_snat4, &key);
	if (!m)
		return 0;
	to_addr = m->to_addr;
	to_port = m->to_port;
	flags = m->flags;
	ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_DST, f->daddr, to_addr);
	if (ret < 0)
		goto drop;
	f->daddr = to_addr;
	if (!ipv4_is_later_fragment(ip)) {
		ret = ipv4_rewrite_port(skb, ip, f->proto, REWRITE_DST, f->dport, to_port);
		if (ret < 0)
			goto drop;
	}
	f->dport = to_port;
	*nat_flags = flags;
	if (flags & NAT_F_NODEPORT)
		return 0;
	/*
	 * The node's own connection to a service backend off the node left with
	 * the router address masqueraded: the reply goes on to the service's
	 * reverse NAT (nodeport_host_reply4) before the stack takes it.
	 */
	if (nat4_to_node_address(to_addr))
		return 0;
	*action = TC_ACT_OK;
	return 1;
drop:
	*action = drop_packet(skb, f, ret, DIR_INGRESS, 0);
	return 1;
}

/* Whether addr is inside the masquerade CIDRs. */
static __always_inline int ipmasq_contains4(__be32 addr)
{
	struct ipmasq_key key = {
		.prefixlen = IPCACHE_KEY_FIXED_BITS + 32,
		.family = 4,
		.ip = { addr, 0, 0, 0 },
	};

	return bpf_map_lookup_elem(&tendril_ipmasq4, &key) != NULL;
}

/*
 * A reply of a connection opened from outside towards a pod (conntrack
 * holds it under the reversed tuple) keeps the pod's address: the peer
 * talks to the pod, not to the node.
 */
static __always_inline int snat4_is_inbound_reply(const struct flow *f, __u64 now)
{
	struct ct4_key key;

	ct_key_init(&key, f->daddr, f->saddr, f->dport, f->sport, f->proto);
	return ct_lookup_key(&key, now) != NULL;
}

/*
 * netdev egress: pod traffic from the masquerade CIDRs to outside them
 * leaving by a device with DEVICE_F_MASQUERADE is SNATed to the device's
 * address, unless it goes to a node of the cluster or to an address another
 * node hosts (ipcache_is_cluster4): only traffic leaving the cluster is. Returns 1 and sets *action when it decided (a drop), 0 when the
 * packet goes on (translated or not).
 */
static __always_inline int snat4_masquerade(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, const struct device_info *dev,
					    int *action)
{
	__u64 now;
	int created, ret;

	if (!(dev->flags & DEVICE_F_MASQUERADE) || !dev->ipv4 || f->saddr == dev->ipv4)
		return 0;
	if (!nat4_translatable(skb, f, ip))
		return 0;
	if (!ipmasq_contains4(f->saddr) || ipmasq_contains4(f->daddr))
		return 0;
	/* Another node's pod or a node itself is inside the cluster: it sees the pod's own address. */
	if (ipcache_is_cluster4(f->daddr))
		return 0;
	now = bpf_ktime_get_ns();
	if (f->proto != IPPROTO_ICMP && snat4_is_inbound_reply(f, now))
		return 0;
	ret = snat4_apply_new(skb, f, ip, dev->ipv4, NAT_F_MASQUERADE, now, &created);
	if (ret < 0) {
		*action = drop_packet(skb, f, ret, DIR_EGRESS, 0);
		return 1;
	}
	if (created)
		trace_new_flow(skb, f, TRACE_TO_NETWORK, DIR_EGRESS);
	return 0;
}

#endif
