/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * nat.h for IPv6 (--ipv6-masquerade): pod traffic leaving the cluster is
 * SNATed to the device's IPv6 address, with IPv4's rules and guarantees.
 * One hash map, tendril_snat6, holds both sides of every mapping (EGRESS:
 * the original tuple → the node address and port; INGRESS: the translated
 * tuple → the original source); a port is claimed by inserting the reply
 * side with BPF_NOEXIST, from the flow's own port, then random ones, then
 * every port of the ranges in turn (nat_claim_port); a port whose flow is
 * over is taken over (nat_holder_flow_over); a full table refuses a new
 * flow (NAT_FULL) and never evicts a live one. ICMPv6 echo requests are
 * translated by their identifier, ICMPv6 errors with the flow they are
 * about. The port ranges, the masquerade CIDRs (tendril_ipmasq4, family 6)
 * and the decisions' shared steps are nat.h's.
 */
#ifndef __TENDRIL_LIB_NAT6_H_
#define __TENDRIL_LIB_NAT6_H_

#include <linux/in.h>
#include <linux/ipv6.h>

#include "common.h"
#include "conntrack.h"
#include "devices.h"
#include "ipcache.h"
#include "ipv6.h"
#include "nat.h"
#include "rewrite6.h"

static __always_inline void nat6_key_init(struct nat6_key *k, const __be32 *saddr, const __be32 *daddr, __be16 sport, __be16 dport,
					  __u8 proto, __u8 dir)
{
	__builtin_memcpy(k->saddr, saddr, 16);
	__builtin_memcpy(k->daddr, daddr, 16);
	k->sport = sport;
	k->dport = dport;
	k->proto = proto;
	k->dir = dir;
	k->pad = 0;
}

/* Whether a mapping's side translates to addr and port. */
static __always_inline int nat6_entry_is(const struct nat6_entry *e, const __be32 *addr, __be16 port)
{
	return ipv6_addr_equal(e->to_addr, addr) && e->to_port == port;
}

/* Whether SNAT translates this packet: TCP, UDP and ICMPv6 echo requests (the identifier plays the source port). */
static __always_inline int nat6_translatable(struct __sk_buff *skb, const struct flow *f, const struct ipv6_info *ip)
{
	__u8 type = 0;

	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP)
		return 1;
	if (f->proto != IPPROTO_ICMPV6 || f->icmp_error)
		return 0;
	/* A later fragment: its first fragment's ports say request (identifier as sport, dport 0), as in IPv4. */
	if (ipv6_is_later_fragment(ip))
		return f->dport == 0 && f->sport != 0;
	return icmp6_load_type(skb, ip, &type) == 0 && type == ICMP6_T_ECHO_REQUEST;
}

/* An ICMPv6 echo's identifier (SNAT's port for it): outside the pseudo-header, so the checksum takes the 2-byte change alone. */
static __always_inline int nat6_rewrite_port(struct __sk_buff *skb, const struct ipv6_info *ip, __u8 proto, int src, __be16 old_port,
					     __be16 new_port)
{
	if (proto != IPPROTO_ICMPV6)
		return ipv6_rewrite_port(skb, ip, proto, src, old_port, new_port);
	if (old_port == new_port)
		return 0;
	if (ipv6_is_later_fragment(ip) || ip->l4_off + 6 > ip->ip_end)
		return DROP_WRITE_ERROR;
	if (bpf_l4_csum_replace(skb, ip->l4_off + 2, old_port, new_port, sizeof(new_port)) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, ip->l4_off + 4, &new_port, sizeof(new_port), 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

/* The reply side of a mapping still points back at its tuple (restored when missing and its port is free): snat4's rule. */
static __always_inline int nat6_reverse_holds(const struct nat6_key *rkey, const struct nat6_entry *back)
{
	struct nat6_entry *cur = bpf_map_lookup_elem(&tendril_snat6, rkey);

	if (cur)
		return nat6_entry_is(cur, back->to_addr, back->to_port);
	return bpf_map_update_elem(&tendril_snat6, rkey, back, BPF_NOEXIST) == 0;
}


/*
 * snat4_claim_ctx for IPv6, in a per-CPU slot of its own, with the keys and
 * entries the mapping and the ICMPv6 error steps build: IPv6's 40-byte keys
 * on the stack would take the masquerade stage past the 512 bytes the
 * chain from tendril_to_netdev shares.
 */
struct snat6_claim_ctx {
	struct nat6_key okey; /* the mapping's EGRESS key; an ICMPv6 error's lookup key */
	struct nat6_key rkey; /* its INGRESS key */
	struct nat6_entry fwd; /* the mapping's EGRESS side, as the packet takes it */
	struct nat6_key claim_rkey; /* snat6_claim's: the reply tuple of the port it tries */
	struct nat6_key claim_okey; /* and the original side of a flow that is over */
	struct ct6_key claim_ct; /* and that flow's conntrack key */
	struct nat_ports ports;
	struct nat6_entry back;
	__u64 now;
	__be32 daddr[4];
	__be32 nat_addr[4];
	__be16 dport;
	__be16 port;
	__u32 start;
	__u8 proto;
	__u8 pad[3];
	int ret;
	int full;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct snat6_claim_ctx);
	__uint(max_entries, 1);
} tendril_nat6_claim SEC(".maps");

static __always_inline struct snat6_claim_ctx *snat6_claim_slot(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&tendril_nat6_claim, &zero);
}

/* snat4_holder_over: the flow holding c->claim_rkey's reply tuple is over (its IPv6 conntrack entry says so). */
static __always_inline int snat6_holder_over(struct snat6_claim_ctx *c, const struct nat6_entry *cur)
{
	const struct nat6_key *rkey = &c->claim_rkey;
	struct ct_entry *e;

	if (rkey->proto == IPPROTO_ICMPV6)
		return 0;
	ct6_key_init(&c->claim_ct, cur->to_addr, rkey->saddr, cur->to_port, rkey->sport, rkey->proto);
	if (rkey->proto == IPPROTO_TCP)
		e = bpf_map_lookup_elem(&tendril_ct6_tcp, &c->claim_ct);
	else
		e = bpf_map_lookup_elem(&tendril_ct6_any, &c->claim_ct);
	return nat_holder_flow_over(e, rkey->proto, cur->created_ns, c->now);
}

/* snat4_claim for IPv6 (its keys in the slot): 1 claimed, 0 not (c->full when a free port found no room). */
static __always_inline int snat6_claim(struct snat6_claim_ctx *c, __u16 port)
{
	struct nat6_entry *cur, *old;
	int ret;

	nat6_key_init(&c->claim_rkey, c->daddr, c->nat_addr, c->dport, bpf_htons(port), c->proto, NAT_DIR_INGRESS);
	ret = bpf_map_update_elem(&tendril_snat6, &c->claim_rkey, &c->back, BPF_NOEXIST);
	if (ret == 0)
		return 1;
	if (ret != -EEXIST) {
		c->full = 1;
		return 0;
	}
	cur = bpf_map_lookup_elem(&tendril_snat6, &c->claim_rkey);
	if (!cur || !snat6_holder_over(c, cur))
		return 0;
	/* The old flow's own side, keyed by its source: built before the takeover overwrites it. */
	nat6_key_init(&c->claim_okey, cur->to_addr, c->daddr, cur->to_port, c->dport, c->proto, NAT_DIR_EGRESS);
	if (bpf_map_update_elem(&tendril_snat6, &c->claim_rkey, &c->back, BPF_EXIST) < 0)
		return 0;
	cur = bpf_map_lookup_elem(&tendril_snat6, &c->claim_rkey);
	if (!cur || !nat6_entry_is(cur, c->back.to_addr, c->back.to_port))
		return 0;
	old = bpf_map_lookup_elem(&tendril_snat6, &c->claim_okey);
	if (old && nat6_entry_is(old, c->nat_addr, c->claim_rkey.dport))
		bpf_map_delete_elem(&tendril_snat6, &c->claim_okey);
	return 1;
}

/* snat4_claim_step for IPv6. */
static long snat6_claim_step(__u32 i, void *data)
{
	struct snat6_claim_ctx *c = snat6_claim_slot();
	__u16 port;

	if (!c || c->ports.total == 0)
		return 1;
	if (c->full && i >= NAT_PORT_RETRIES + NAT_FULL_WALK)
		return 1;
	port = nat_claim_port(&c->ports, c->start, i);
	c->ret = snat6_claim(c, port);
	if (c->ret == 0)
		return 0;
	if (c->ret > 0)
		c->port = bpf_htons(port);
	return 1;
}

/*
 * snat4_mapping for IPv6: the mapping of the tuple f leaves with, made when
 * there is none (the flow's own port when it is SNAT's and free, else the
 * search). 0, DROP_NAT_PORT_EXHAUSTED or DROP_NAT_FULL; the slot's `fwd`
 * holds the EGRESS side, *created whether this packet made it.
 */
static __always_inline int snat6_mapping(const struct flow *f, const __be32 *nat_addr, __u8 nat_flags, __u64 now, int *created)
{
	struct snat6_claim_ctx *c = snat6_claim_slot();
	struct nat6_entry *hit, *won;
	__be16 port;
	int ret;

	*created = 0;
	if (!c)
		return DROP_NAT_FULL;
	__builtin_memset(c, 0, sizeof(*c));
	nat6_key_init(&c->okey, f->saddr6, f->daddr6, f->sport, f->dport, f->proto, NAT_DIR_EGRESS);
	__builtin_memcpy(c->back.to_addr, f->saddr6, 16);
	c->back.to_port = f->sport;
	c->back.flags = nat_flags;

	nat_ports_load(&c->ports);
	hit = bpf_map_lookup_elem(&tendril_snat6, &c->okey);
	if (hit) {
		nat6_key_init(&c->rkey, f->daddr6, hit->to_addr, f->dport, hit->to_port, f->proto, NAT_DIR_INGRESS);
		if (ipv6_addr_equal(hit->to_addr, nat_addr) && nat_port_in_ranges(&c->ports, bpf_ntohs(hit->to_port))) {
			c->back.created_ns = hit->created_ns;
			if (nat6_reverse_holds(&c->rkey, &c->back)) {
				c->fwd = *hit;
				return 0;
			}
		} else {
			/* The node address or the ranges changed: the old reply side, while still this flow's, goes with it. */
			struct nat6_entry *back = bpf_map_lookup_elem(&tendril_snat6, &c->rkey);

			if (back && nat6_entry_is(back, f->saddr6, f->sport))
				bpf_map_delete_elem(&tendril_snat6, &c->rkey);
		}
	}

	c->back.created_ns = now;
	c->now = now;
	__builtin_memcpy(c->daddr, f->daddr6, 16);
	__builtin_memcpy(c->nat_addr, nat_addr, 16);
	c->dport = f->dport;
	c->proto = f->proto;
	c->ret = 0;
	if (nat_port_in_ranges(&c->ports, bpf_ntohs(f->sport))) {
		c->ret = snat6_claim(c, bpf_ntohs(f->sport));
		if (c->ret > 0)
			c->port = f->sport;
	}
	if (c->ret == 0 && c->ports.total) {
		c->start = bpf_get_prandom_u32() % c->ports.total;
		bpf_loop(NAT_PORT_RETRIES + c->ports.total, snat6_claim_step, NULL, 0);
	}
	c = snat6_claim_slot();
	if (!c)
		return DROP_NAT_FULL;
	if (c->ret < 0)
		return c->ret;
	if (c->ret == 0)
		return c->full ? DROP_NAT_FULL : DROP_NAT_PORT_EXHAUSTED;
	port = c->port;

	c->fwd.created_ns = now;
	__builtin_memcpy(c->fwd.to_addr, nat_addr, 16);
	c->fwd.to_port = port;
	c->fwd.flags = nat_flags;
	nat6_key_init(&c->rkey, f->daddr6, nat_addr, f->dport, port, f->proto, NAT_DIR_INGRESS);
	/* A stale mapping is replaced; against a CPU that mapped the same tuple at once, the first one in wins and this port goes back. */
	ret = bpf_map_update_elem(&tendril_snat6, &c->okey, &c->fwd, hit ? BPF_ANY : BPF_NOEXIST);
	if (ret == -EEXIST) {
		won = bpf_map_lookup_elem(&tendril_snat6, &c->okey);
		bpf_map_delete_elem(&tendril_snat6, &c->rkey);
		if (!won)
			return DROP_NAT_PORT_EXHAUSTED;
		c->fwd = *won;
		return 0;
	}
	if (ret < 0) {
		bpf_map_delete_elem(&tendril_snat6, &c->rkey);
		return DROP_NAT_FULL;
	}
	*created = 1;
	return 0;
}

/*
 * snat4_apply_new for IPv6: 1 when this packet made the mapping, 0 when it
 * reused one (or is not SNAT's to translate), or the drop reason.
 */
static __always_inline int snat6_apply_new(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, const __be32 *nat_addr,
					   __u8 nat_flags, __u64 now)
{
	struct snat6_claim_ctx *c;
	int created = 0, ret;
	__be16 to_port;

	if (!nat6_translatable(skb, f, ip))
		return 0;
	ret = snat6_mapping(f, nat_addr, nat_flags, now, &created);
	if (ret < 0)
		return ret;
	c = snat6_claim_slot();
	if (!c)
		return DROP_NAT_FULL;
	to_port = c->fwd.to_port;
	ret = ipv6_rewrite_addr(skb, ip, f->proto, REWRITE_SRC, f->saddr6, c->fwd.to_addr);
	if (ret < 0)
		return ret;
	__builtin_memcpy(f->saddr6, c->fwd.to_addr, 16);
	if (!ipv6_is_later_fragment(ip)) {
		ret = nat6_rewrite_port(skb, ip, f->proto, REWRITE_SRC, f->sport, to_port);
		if (ret < 0)
			return ret;
	}
	f->sport = to_port;
	return created;
}

/* snat4_apply for IPv6 (NodePort's SNAT to a backend off the node uses it too): 0 or the drop reason. */
static __always_inline int snat6_apply(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, const __be32 *nat_addr,
				       __u8 nat_flags, __u64 now)
{
	int ret = snat6_apply_new(skb, f, ip, nat_addr, nat_flags, now);

	return ret < 0 ? ret : 0;
}

/*
 * The datagram an ICMPv6 error carries: its source (src) or destination
 * address and port become new_addr/new_port. Its own L4 checksum follows
 * when the error quotes it (TCP, UDP unless 0, an ICMPv6 echo: all three
 * cover the addresses through the pseudo-header), and the error's ICMPv6
 * checksum takes every byte changed inside it. The embedded header is
 * l4_load6's: no extension headers (has_inner says so).
 */
static __always_inline int nat6_icmp_inner_rewrite(struct __sk_buff *skb, const struct ipv6_info *ip, const struct flow *f, int src,
						   const __be32 *new_addr, __be16 new_port)
{
	const __be32 *old_addr = src ? f->inner_saddr6 : f->inner_daddr6;
	__be16 old_port = src ? f->inner_sport : f->inner_dport;
	__u32 icmp_csum = ip->l4_off + 2, inner = ip->l4_off + 8, l4 = inner + 40, l4_csum = 0, port_off;
	__be16 old_sum = 0, new_sum = 0;
	__s64 diff;

	if (inner + 40 > ip->ip_end)
		return DROP_WRITE_ERROR;
	diff = bpf_csum_diff((__be32 *)old_addr, 16, (__be32 *)new_addr, 16, 0);
	if (diff < 0)
		return DROP_WRITE_ERROR;
	if (f->inner_proto == IPPROTO_ICMPV6)
		port_off = l4 + 4; /* the echo identifier, source or reply side alike */
	else
		port_off = l4 + (src ? 0 : 2);
	if (f->inner_proto == IPPROTO_TCP || f->inner_proto == IPPROTO_UDP || f->inner_proto == IPPROTO_ICMPV6) {
		l4_csum = l4 + (f->inner_proto == IPPROTO_ICMPV6 ? 2 : l4_csum_offset(f->inner_proto));
		if (l4_csum + 2 > ip->ip_end || bpf_skb_load_bytes(skb, l4_csum, &old_sum, 2) < 0 || (f->inner_proto == IPPROTO_UDP && old_sum == 0))
			l4_csum = 0;
	}
	if (l4_csum) {
		if (bpf_l4_csum_replace(skb, l4_csum, 0, (__u32)diff, 0) < 0)
			return DROP_WRITE_ERROR;
		if (old_port != new_port && bpf_l4_csum_replace(skb, l4_csum, old_port, new_port, 2) < 0)
			return DROP_WRITE_ERROR;
		if (bpf_skb_load_bytes(skb, l4_csum, &new_sum, 2) < 0 || bpf_l4_csum_replace(skb, icmp_csum, old_sum, new_sum, 2) < 0)
			return DROP_WRITE_ERROR;
	}
	if (bpf_l4_csum_replace(skb, icmp_csum, 0, (__u32)diff, 0) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, inner + (src ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr)), new_addr, 16, 0) < 0)
		return DROP_WRITE_ERROR;
	if (old_port != new_port && port_off + 2 <= ip->ip_end) {
		if (bpf_l4_csum_replace(skb, icmp_csum, old_port, new_port, 2) < 0)
			return DROP_WRITE_ERROR;
		if (bpf_skb_store_bytes(skb, port_off, &new_port, 2, 0) < 0)
			return DROP_WRITE_ERROR;
	}
	return 0;
}

/*
 * snat4_rev_icmp_error for IPv6: an ICMPv6 error from outside about a
 * datagram the node sent for a pod (its source the node address and a
 * mapped port) goes back to that pod alone: the outer destination and the
 * embedded source address and port become the original source's. 1 when
 * translated (*nat_flags set), 0 when no mapping holds it, or a drop reason.
 */
static __always_inline int snat6_rev_icmp_error(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, __u8 *nat_flags)
{
	struct nat6_entry *m;
	struct nat6_key key;
	__be32 to_addr[4];
	__be16 to_port;
	__u8 flags;
	int ret;

	if (!f->has_inner || !ipv6_addr_equal(f->inner_saddr6, f->daddr6) || ipv6_is_later_fragment(ip))
		return 0;
	nat6_key_init(&key, f->inner_daddr6, f->inner_saddr6, f->inner_dport, f->inner_sport, f->inner_proto, NAT_DIR_INGRESS);
	m = bpf_map_lookup_elem(&tendril_snat6, &key);
	if (!m)
		return 0;
	__builtin_memcpy(to_addr, m->to_addr, 16);
	to_port = m->to_port;
	flags = m->flags;
	ret = nat6_icmp_inner_rewrite(skb, ip, f, REWRITE_SRC, to_addr, to_port);
	if (ret == 0)
		ret = ipv6_rewrite_addr(skb, ip, IPPROTO_ICMPV6, REWRITE_DST, f->daddr6, to_addr);
	if (ret < 0)
		return ret;
	*nat_flags = flags;
	__builtin_memcpy(f->daddr6, to_addr, 16);
	__builtin_memcpy(f->inner_saddr6, to_addr, 16);
	f->inner_sport = to_port;
	return 1;
}

/*
 * snat4_rev_netdev for IPv6, on the device's ingress: a reply to a SNAT
 * mapping gets its original destination back. 1 and *action when decided
 * here (a masquerade reply, on to the stack for the pod; or a drop), 0 when
 * it goes on (no reply of ours; a NodePort SNAT reply, *nat_flags says so;
 * the node's own flow).
 */
__stage int snat6_rev_netdev(struct __sk_buff *skb, struct flow *f, struct ipv6_info *ip, __u8 *nat_flags, int *action)
{
	struct nat_ports ports;
	struct nat6_entry *m;
	struct nat6_key key;
	__be32 to_addr[4];
	__be16 to_port;
	__u8 flags, type = 0;
	int ret;

	if (!f || !ip || !nat_flags || !action)
		return 0;
	*nat_flags = 0;
	if (f->proto == IPPROTO_ICMPV6 && f->icmp_error) {
		ret = snat6_rev_icmp_error(skb, f, ip, nat_flags);
		if (ret < 0)
			goto drop;
		if (ret == 0 || (*nat_flags & NAT_F_NODEPORT))
			return 0;
		*action = TC_ACT_OK;
		return 1;
	}
	nat_ports_load(&ports);
	if (!nat_port_in_ranges(&ports, bpf_ntohs(f->dport)))
		return 0;
	if (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP) {
		if (f->proto != IPPROTO_ICMPV6)
			return 0;
		if (ipv6_is_later_fragment(ip) ? f->sport != 0 : (icmp6_load_type(skb, ip, &type) < 0 || type != ICMP6_T_ECHO_REPLY))
			return 0;
	}
	nat6_key_init(&key, f->saddr6, f->daddr6, f->sport, f->dport, f->proto, NAT_DIR_INGRESS);
	m = bpf_map_lookup_elem(&tendril_snat6, &key);
	if (!m)
		return 0;
	__builtin_memcpy(to_addr, m->to_addr, 16);
	to_port = m->to_port;
	flags = m->flags;
	ret = ipv6_rewrite_addr(skb, ip, f->proto, REWRITE_DST, f->daddr6, to_addr);
	if (ret < 0)
		goto drop;
	__builtin_memcpy(f->daddr6, to_addr, 16);
	if (!ipv6_is_later_fragment(ip)) {
		ret = nat6_rewrite_port(skb, ip, f->proto, REWRITE_DST, f->dport, to_port);
		if (ret < 0)
			goto drop;
	}
	f->dport = to_port;
	*nat_flags = flags;
	if (flags & NAT_F_NODEPORT)
		return 0;
	/* The node's own flow masqueraded (as snat4_rev_netdev): what follows on the device undoes the rest. */
	if (ipcache_identity6(to_addr) == IDENTITY_HOST)
		return 0;
	*action = TC_ACT_OK;
	return 1;
drop:
	*action = drop_packet(skb, f, ret, DIR_INGRESS, 0);
	return 1;
}

/*
 * snat4_icmp_error_out for IPv6: a pod's ICMPv6 error about a datagram that
 * reached it through a mapping leaves as the node's (outer source, embedded
 * destination address and port). 1 translated, 0 no mapping, or a drop reason.
 */
static __always_inline int snat6_icmp_error_out(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip)
{
	struct snat6_claim_ctx *c = snat6_claim_slot();
	struct nat6_entry *m;
	__be16 to_port;
	int ret;

	if (!c || !f->has_inner || !ipv6_addr_equal(f->inner_daddr6, f->saddr6) || ipv6_is_later_fragment(ip))
		return 0;
	nat6_key_init(&c->okey, f->inner_daddr6, f->inner_saddr6, f->inner_dport, f->inner_sport, f->inner_proto, NAT_DIR_EGRESS);
	m = bpf_map_lookup_elem(&tendril_snat6, &c->okey);
	if (!m)
		return 0;
	/* A copy the rewrites read: the entry may change under them. */
	c->fwd = *m;
	to_port = c->fwd.to_port;
	ret = nat6_icmp_inner_rewrite(skb, ip, f, REWRITE_DST, c->fwd.to_addr, to_port);
	if (ret == 0)
		ret = ipv6_rewrite_addr(skb, ip, IPPROTO_ICMPV6, REWRITE_SRC, f->saddr6, c->fwd.to_addr);
	if (ret < 0)
		return ret;
	__builtin_memcpy(f->saddr6, c->fwd.to_addr, 16);
	__builtin_memcpy(f->inner_daddr6, c->fwd.to_addr, 16);
	f->inner_dport = to_port;
	return 1;
}

/* Whether addr is inside the IPv6 masquerade CIDRs (family 6 of tendril_ipmasq4). */
static __always_inline int ipmasq_contains6(const __be32 *addr)
{
	struct ipmasq_key key = {
		.prefixlen = IPCACHE_KEY_FIXED_BITS + 128,
		.family = 6,
	};

	__builtin_memcpy(key.ip, addr, 16);
	return bpf_map_lookup_elem(&tendril_ipmasq4, &key) != NULL;
}

/* ipcache_is_cluster4 for IPv6: a tunnel endpoint hosts it, or it is a node's own address. */
static __always_inline int ipcache_is_cluster6(const __be32 *addr)
{
	struct remote_endpoint_info *info = ipcache_lookup6(addr);

	if (!info)
		return 0;
	return info->tunnel_ip4 != 0 || info->identity == IDENTITY_REMOTE_NODE || info->identity == IDENTITY_HOST;
}

/* snat4_is_inbound_reply for IPv6: conntrack holds the flow reversed (opened from outside towards the pod). */
static __always_inline int snat6_is_inbound_reply(const struct flow *f, __u64 now)
{
	union ct_key key;

	ct6_key_init(&key.k6, f->daddr6, f->saddr6, f->dport, f->sport, f->proto);
	return ct_key_find(&key, 1, now) != NULL;
}

/*
 * snat4_masquerade for IPv6, on the device's egress: pod traffic from the
 * IPv6 masquerade CIDRs to outside them, leaving by a device with
 * DEVICE_F_MASQUERADE and an IPv6 address, to no node of the cluster nor an
 * address another node hosts, is SNATed to the device's IPv6 address.
 * ICMPv6 errors go with their flow; what SNAT cannot translate and answers
 * no flow opened towards the pod is refused NAT_UNSUPPORTED_PROTO. 1 when
 * this packet made a mapping (a new flow, for the trace), 0 when it goes on
 * (translated or not), or the drop reason, which the caller drops with: a
 * stage whose frame does not sit under drop_packet's, so the IPv4 path of
 * tendril_to_netdev verifies as before.
 */
__stage int snat6_masquerade(struct __sk_buff *skb, struct flow *f, struct ipv6_info *ip, const struct device_info *dev)
{
	__u64 now;

	if (!f || !ip || !dev)
		return 0;
	if (!(dev->flags & DEVICE_F_MASQUERADE) || ipv6_is_unspecified(dev->ipv6) || ipv6_addr_equal(f->saddr6, dev->ipv6))
		return 0;
	if (!ipmasq_contains6(f->saddr6) || ipmasq_contains6(f->daddr6))
		return 0;
	if (ipcache_is_cluster6(f->daddr6))
		return 0;
	now = bpf_ktime_get_ns();
	if (f->proto == IPPROTO_ICMPV6 && f->icmp_error) {
		int ret = snat6_icmp_error_out(skb, f, ip);

		return ret < 0 ? ret : 0;
	}
	if (!nat6_translatable(skb, f, ip))
		return snat6_is_inbound_reply(f, now) ? 0 : DROP_NAT_UNSUPPORTED_PROTO;
	if (f->proto != IPPROTO_ICMPV6 && snat6_is_inbound_reply(f, now))
		return 0;
	return snat6_apply_new(skb, f, ip, dev->ipv6, NAT_F_MASQUERADE, now);
}

#endif
