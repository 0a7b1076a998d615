/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * SNAT in BPF: masquerade of pod traffic leaving the cluster CIDRs, and the
 * source rewrite of NodePort flows sent on to a backend off this node. One
 * hash map holds both sides of every mapping: the original tuple as it
 * leaves (NAT_DIR_EGRESS → the node address and port it got) and the
 * translated tuple as replies arrive (NAT_DIR_INGRESS → the original
 * source). Not an LRU: a full table refuses a new flow (NAT_FULL) and never
 * evicts a live one. Ports come from the config's ranges (natPorts.ts).
 */
#ifndef __TENDRIL_LIB_NAT_H_
#define __TENDRIL_LIB_NAT_H_

#include <linux/in.h>
#include <linux/ip.h>

#include "common.h"
#include "config.h"
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

/*
 * IPv6 SNAT (nat6.h, --ipv6-masquerade): nat4_key with 16-byte addresses, 40
 * bytes as a ct6_key (the GC hands both in gc_run.keys6). Declared here so
 * every object that declares tendril_snat4 declares it too (one set of pins).
 */
struct nat6_key {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 dir; /* NAT_DIR_* */
	__u16 pad;
};

struct nat6_entry {
	__u64 created_ns;
	__be32 to_addr[4]; /* EGRESS: the new source; INGRESS: the original source (the new destination) */
	__be16 to_port;
	__u8 flags; /* NAT_F_* */
	__u8 pad[5];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct nat6_key);
	__type(value, struct nat6_entry);
	__uint(max_entries, TENDRIL_SNAT6_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_snat6 SEC(".maps");

/*
 * Masquerade CIDRs (--masquerade-cidr): pod traffic from them to outside them
 * is masqueraded. Both families in one trie (the key names the family, as
 * the ipcache's): IPv6 prefixes are written only with --ipv6-masquerade.
 */
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

#define NAT_UNTRACKED_GRACE_NS ((__u64)NAT_UNTRACKED_GRACE_S * NSEC_PER_SEC)
#define NAT_CLOSED_REUSE_NS ((__u64)NAT_CLOSED_REUSE_MS * 1000000ULL)

/* SNAT's source ports: up to NAT_PORT_RANGES ranges of the config, as one index space 0..total-1. */
struct nat_ports {
	__u32 min0, span0, min1, span1, total;
};

static __always_inline void nat_ports_load(struct nat_ports *p)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	p->min1 = 0;
	p->span1 = 0;
	if (cfg && cfg->nat_ports[0].min && cfg->nat_ports[0].max >= cfg->nat_ports[0].min) {
		p->min0 = cfg->nat_ports[0].min;
		p->span0 = cfg->nat_ports[0].max - cfg->nat_ports[0].min + 1;
		if (cfg->nat_ports[1].min && cfg->nat_ports[1].max >= cfg->nat_ports[1].min) {
			p->min1 = cfg->nat_ports[1].min;
			p->span1 = cfg->nat_ports[1].max - cfg->nat_ports[1].min + 1;
		}
	} else {
		p->min0 = NAT_PORT_MIN;
		p->span0 = NAT_PORT_MAX - NAT_PORT_MIN + 1;
	}
	p->total = p->span0 + p->span1;
}

/* The port at index i (host order). */
static __always_inline __u16 nat_port_at(const struct nat_ports *p, __u32 i)
{
	return (__u16)(i < p->span0 ? p->min0 + i : p->min1 + (i - p->span0));
}

/* Whether a port (host order) is one SNAT gives out: a reply to any other is none of SNAT's. */
static __always_inline int nat_port_in_ranges(const struct nat_ports *p, __u16 port)
{
	return (port >= p->min0 && port - p->min0 < p->span0) || (p->span1 && port >= p->min1 && port - p->min1 < p->span1);
}

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
 * requests (the identifier plays the source port). ICMP errors are
 * translated with the flow they are about (snat4_icmp_error_out); anything
 * else is not SNAT's to translate.
 */
static __always_inline int nat4_translatable(struct __sk_buff *skb, const struct flow *f, const struct ipv4_info *ip)
{
	if (f->proto == IPPROTO_TCP || f->proto == IPPROTO_UDP)
		return 1;
	if (f->proto != IPPROTO_ICMP || f->icmp_error)
		return 0;
	/*
	 * A later fragment carries no ICMP header: its ports from the first
	 * fragment say request (identifier as sport, dport 0). Other ICMP
	 * records 0 → 0, as a request with identifier 0 would: both are
	 * refused rather than one taken for the other.
	 */
	if (ipv4_is_later_fragment(ip))
		return f->dport == 0 && f->sport != 0;
	return nat4_icmp_type(skb, ip) == ICMP_T_ECHO;
}

/*
 * Whether the reply side of a mapping still points back at its tuple. A
 * missing reply side (a table refused it once) is restored when its port is
 * still free; one another flow holds now means a new port.
 */
static __always_inline int nat4_reverse_holds(const struct nat4_key *rkey, const struct nat4_entry *back)
{
	struct nat4_entry *cur = bpf_map_lookup_elem(&tendril_snat4, rkey);

	if (cur)
		return cur->to_addr == back->to_addr && cur->to_port == back->to_port;
	return bpf_map_update_elem(&tendril_snat4, rkey, back, BPF_NOEXIST) == 0;
}

/*
 * Whether the flow holding a reply tuple is over, so a new flow may take
 * its port (as Linux reuses a closed connection's tuple): its conntrack
 * entry expired, or a TCP connection reset or closed both ways whose last
 * packet is NAT_CLOSED_REUSE_NS old (a closed entry's deadline is its last
 * packet plus the closing lifetime). A mapping with no entry at all is over
 * once it is older than NAT_UNTRACKED_GRACE_NS. ICMP echo mappings wait
 * for the GC.
 */
/* snat4_holder_over's judgement, either family: e is the holder's conntrack entry (NULL: none), created_ns its mapping's age. */
static __always_inline int nat_holder_flow_over(const struct ct_entry *e, __u8 proto, __u64 created_ns, __u64 now)
{
	__u64 expires;

	if (!e)
		return now - created_ns > NAT_UNTRACKED_GRACE_NS;
	expires = READ_ONCE(e->expires_ns);
	if (expires <= now)
		return 1;
	return proto == IPPROTO_TCP && ct_entry_closed(e) && expires + NAT_CLOSED_REUSE_NS <= now + CT_TIMEOUT_TCP_CLOSING * NSEC_PER_SEC;
}

static __always_inline int snat4_holder_over(const struct nat4_key *rkey, const struct nat4_entry *cur, __u64 now)
{
	struct ct4_key key;

	if (rkey->proto == IPPROTO_ICMP)
		return 0;
	/* The holder's original tuple: its source, the same destination. */
	ct_key_init(&key, cur->to_addr, rkey->saddr, cur->to_port, rkey->sport, rkey->proto);
	return nat_holder_flow_over(ct_map_lookup(&key), rkey->proto, cur->created_ns, now);
}

/* What one port claim needs, shared with the bpf_loop walk of the ranges. */
struct snat4_claim_ctx {
	struct nat_ports ports;
	struct nat4_entry back; /* the reply side to write: the original source */
	__u64 now;
	__be32 daddr;
	__be32 nat_addr;
	__be16 dport;
	__be16 port;   /* out: the port claimed (network order) */
	__u32 start;   /* the walk's first index */
	__u8 proto;
	__u8 pad[3];
	int ret;       /* out: 1 claimed, 0 none, < 0 a drop reason */
	int full;      /* a free port was refused for want of room: the table is full */
};

/*
 * The claim's state lives in a per-CPU slot, not on the stack: the program
 * and the bpf_loop callback share 512 bytes of stack, and the NodePort path
 * that reaches SNAT uses most of it. A program runs to its end on its CPU
 * (softirq or bh disabled), so one slot per CPU is enough. Not pinned: it
 * holds nothing between packets.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct snat4_claim_ctx);
	__uint(max_entries, 1);
} tendril_nat_claim SEC(".maps");

static __always_inline struct snat4_claim_ctx *snat4_claim_slot(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&tendril_nat_claim, &zero);
}

/*
 * Tries to make `port` (host order) this flow's: the reply tuple's key is
 * inserted when free, or taken over from a flow that is over (whose own
 * side then goes, so a late packet of it maps afresh). 1 claimed, 0 not
 * (taken, or free but the table has no room: c->full says so; a port of a
 * flow that is over needs no room, so the search goes on for one).
 */
static __always_inline int snat4_claim(struct snat4_claim_ctx *c, __u16 port)
{
	struct nat4_key rkey, okey;
	struct nat4_entry *cur, *old;
	__be32 old_addr;
	__be16 old_port;
	int ret;

	nat4_key_init(&rkey, c->daddr, c->nat_addr, c->dport, bpf_htons(port), c->proto, NAT_DIR_INGRESS);
	ret = bpf_map_update_elem(&tendril_snat4, &rkey, &c->back, BPF_NOEXIST);
	if (ret == 0)
		return 1;
	if (ret != -EEXIST) {
		c->full = 1;
		return 0;
	}
	cur = bpf_map_lookup_elem(&tendril_snat4, &rkey);
	if (!cur || !snat4_holder_over(&rkey, cur, c->now))
		return 0;
	old_addr = cur->to_addr;
	old_port = cur->to_port;
	if (bpf_map_update_elem(&tendril_snat4, &rkey, &c->back, BPF_EXIST) < 0)
		return 0;
	/* Another CPU taking the same port at once: the last write won, the others look on. */
	cur = bpf_map_lookup_elem(&tendril_snat4, &rkey);
	if (!cur || cur->to_addr != c->back.to_addr || cur->to_port != c->back.to_port)
		return 0;
	nat4_key_init(&okey, old_addr, c->daddr, old_port, c->dport, c->proto, NAT_DIR_EGRESS);
	old = bpf_map_lookup_elem(&tendril_snat4, &okey);
	if (old && old->to_addr == c->nat_addr && old->to_port == rkey.dport)
		bpf_map_delete_elem(&tendril_snat4, &okey);
	return 1;
}

/* The port the search's step i looks at (either family): a random one for the first NAT_PORT_RETRIES, then each in turn from `start`. */
static __always_inline __u16 nat_claim_port(const struct nat_ports *p, __u32 start, __u32 i)
{
	__u32 idx;

	if (i < NAT_PORT_RETRIES)
		idx = bpf_get_prandom_u32() % p->total;
	else
		idx = (start + i - NAT_PORT_RETRIES) % p->total;
	return nat_port_at(p, idx);
}

/*
 * One step of the search: NAT_PORT_RETRIES random ports first (a table
 * with room answers in one or two), then every port in turn from a random
 * one, so allocation fails only when no port of the ranges is free. In a
 * full table only a port of a flow that is over can be had: the walk looks
 * at NAT_FULL_WALK ports more, not at every one, so a table kept full costs
 * each refused flow a bounded search.
 */
static long snat4_claim_step(__u32 i, void *data)
{
	struct snat4_claim_ctx *c = snat4_claim_slot();
	__u16 port;

	if (!c || c->ports.total == 0)
		return 1;
	if (c->full && i >= NAT_PORT_RETRIES + NAT_FULL_WALK)
		return 1;
	port = nat_claim_port(&c->ports, c->start, i);
	c->ret = snat4_claim(c, port);
	if (c->ret == 0)
		return 0;
	if (c->ret > 0)
		c->port = bpf_htons(port);
	return 1;
}

/*
 * The mapping of the tuple f leaves with, created when there is none. The
 * flow's own source port is kept when it is one of SNAT's and free (as
 * Linux keeps it); else a port is searched for (snat4_claim_step). The
 * reply side is inserted first (BPF_NOEXIST: two flows never share a reply
 * tuple), then the original side. *created says whether this packet made
 * it. 0, DROP_NAT_PORT_EXHAUSTED or DROP_NAT_FULL.
 */
static __always_inline int snat4_mapping(const struct flow *f, __be32 nat_addr, __u8 nat_flags, __u64 now, struct nat4_entry *out,
					 int *created)
{
	struct snat4_claim_ctx *c = snat4_claim_slot();
	struct nat4_key okey, rkey;
	struct nat4_entry fwd;
	struct nat4_entry *hit;
	__u16 sport = bpf_ntohs(f->sport);
	__be16 port;
	int ret;

	*created = 0;
	if (!c)
		return DROP_NAT_FULL;
	__builtin_memset(c, 0, sizeof(*c));
	nat4_key_init(&okey, f->saddr, f->daddr, f->sport, f->dport, f->proto, NAT_DIR_EGRESS);
	c->back.to_addr = f->saddr;
	c->back.to_port = f->sport;
	c->back.flags = nat_flags;

	nat_ports_load(&c->ports);
	hit = bpf_map_lookup_elem(&tendril_snat4, &okey);
	if (hit) {
		nat4_key_init(&rkey, f->daddr, hit->to_addr, f->dport, hit->to_port, f->proto, NAT_DIR_INGRESS);
		/* A port outside today's ranges (they changed across a restart) gets no reply back: such a mapping is stale too. */
		if (hit->to_addr == nat_addr && nat_port_in_ranges(&c->ports, bpf_ntohs(hit->to_port))) {
			c->back.created_ns = hit->created_ns;
			if (nat4_reverse_holds(&rkey, &c->back)) {
				*out = *hit;
				return 0;
			}
		} else {
			/* The node address or the ranges changed: the old reply side, while it is still this flow's, goes with the stale mapping. */
			struct nat4_entry *back = bpf_map_lookup_elem(&tendril_snat4, &rkey);

			if (back && back->to_addr == f->saddr && back->to_port == f->sport)
				bpf_map_delete_elem(&tendril_snat4, &rkey);
		}
	}

	c->back.created_ns = now;
	c->now = now;
	c->daddr = f->daddr;
	c->nat_addr = nat_addr;
	c->dport = f->dport;
	c->proto = f->proto;
	c->ret = 0;
	if (nat_port_in_ranges(&c->ports, sport)) {
		c->ret = snat4_claim(c, sport);
		if (c->ret > 0)
			c->port = f->sport;
	}
	if (c->ret == 0 && c->ports.total) {
		c->start = bpf_get_prandom_u32() % c->ports.total;
		bpf_loop(NAT_PORT_RETRIES + c->ports.total, snat4_claim_step, NULL, 0);
	}
	/* The loop's callback wrote the slot: read it again. */
	c = snat4_claim_slot();
	if (!c)
		return DROP_NAT_FULL;
	if (c->ret < 0)
		return c->ret;
	if (c->ret == 0)
		return c->full ? DROP_NAT_FULL : DROP_NAT_PORT_EXHAUSTED;
	port = c->port;

	__builtin_memset(&fwd, 0, sizeof(fwd));
	fwd.created_ns = now;
	fwd.to_addr = nat_addr;
	fwd.to_port = port;
	fwd.flags = nat_flags;
	nat4_key_init(&rkey, f->daddr, nat_addr, f->dport, port, f->proto, NAT_DIR_INGRESS);
	/*
	 * A stale mapping (another node address, or its port lost) is
	 * replaced; against a CPU that mapped the same new tuple at the same
	 * time, the first one in wins and this port is given back.
	 */
	ret = bpf_map_update_elem(&tendril_snat4, &okey, &fwd, hit ? BPF_ANY : BPF_NOEXIST);
	if (ret == -EEXIST) {
		struct nat4_entry *won = bpf_map_lookup_elem(&tendril_snat4, &okey);

		bpf_map_delete_elem(&tendril_snat4, &rkey);
		if (!won)
			return DROP_NAT_PORT_EXHAUSTED;
		*out = *won;
		return 0;
	}
	if (ret < 0) {
		bpf_map_delete_elem(&tendril_snat4, &rkey);
		return DROP_NAT_FULL;
	}
	*out = fwd;
	*created = 1;
	return 0;
}

/* Where SNAT takes a source: the address, and the NAT_F_* its mapping records. */
struct nat4_target {
	__be32 addr;
	__u8 flags;
	__u8 pad[3];
};

/*
 * snat4_apply, saying whether the mapping is new: 1 when this packet
 * created it, 0 when it reused one (or the packet is not SNAT's to
 * translate), or the drop reason.
 */
static __always_inline int snat4_apply_new(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, const struct nat4_target *to, __u64 now)
{
	struct nat4_entry m;
	int created = 0, ret;

	if (!nat4_translatable(skb, f, ip))
		return 0;
	ret = snat4_mapping(f, to->addr, to->flags, now, &m, &created);
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
	return created;
}

/*
 * SNATs the packet's source to nat_addr with a port from the allocator
 * (a mapping that exists for the tuple is reused), recording both sides
 * with `nat_flags`; updates f->saddr/sport. 0, or the drop reason
 * (DROP_NAT_PORT_EXHAUSTED when no port is free for this destination,
 * DROP_NAT_FULL when the table is full). TCP, UDP and ICMP echo requests
 * only; other packets are left as they are.
 */
static __always_inline int snat4_apply(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, __be32 nat_addr, __u8 nat_flags,
				       __u64 now)
{
	struct nat4_target to = { .addr = nat_addr, .flags = nat_flags };
	int ret = snat4_apply_new(skb, f, ip, &to, now);

	return ret < 0 ? ret : 0;
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
__stage int snat4_rev_netdev(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, __u8 *nat_flags, int *action)
{
	struct nat_ports ports;
	struct nat4_entry *m;
	struct nat4_key key;
	__be32 to_addr;
	__be16 to_port;
	__u8 flags;
	int ret;

	if (!f || !ip || !nat_flags || !action)
		return 0;
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
	/* Mapped ports are all in the allocator's ranges: anything else is no reply of ours, without a lookup. */
	nat_ports_load(&ports);
	if (!nat_port_in_ranges(&ports, bpf_ntohs(f->dport)))
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

/*
 * A pod's ICMP error about a datagram that reached it through a mapping
 * (the datagram inside is a reply of the pod's flow: its destination the
 * pod's address and port) leaves as the node's: the outer source and the
 * embedded datagram's destination address and port become the mapping's,
 * with every checksum kept right. 1 translated; 0 when no mapping holds the
 * flow (an error about a flow addressed to the pod itself, whose peer knows
 * the pod's address); or a drop reason.
 */
static __always_inline int snat4_icmp_error_out(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip)
{
	struct icmp_inner in;
	struct nat4_entry *m;
	struct nat4_key key;
	__be32 to_addr;
	__be16 to_port;
	int ret;

	if (!f->has_inner || f->inner_daddr != f->saddr || ipv4_is_later_fragment(ip))
		return 0;
	nat4_key_init(&key, f->inner_daddr, f->inner_saddr, f->inner_dport, f->inner_sport, f->inner_proto, NAT_DIR_EGRESS);
	m = bpf_map_lookup_elem(&tendril_snat4, &key);
	if (!m)
		return 0;
	to_addr = m->to_addr;
	to_port = m->to_port;
	ret = icmp_inner_load(skb, ip, &in);
	if (ret == 0)
		ret = icmp_inner_rewrite_port(skb, ip, &in, REWRITE_DST, f->inner_dport, to_port);
	if (ret == 0)
		ret = icmp_inner_rewrite_addr(skb, &in, REWRITE_DST, f->inner_daddr, to_addr);
	/* The outer source: ICMP's checksum has no pseudo-header, the IP header's alone changes. */
	if (ret == 0)
		ret = ipv4_rewrite_addr(skb, ip, IPPROTO_ICMP, REWRITE_SRC, f->saddr, to_addr);
	if (ret < 0)
		return ret;
	f->saddr = to_addr;
	f->inner_daddr = to_addr;
	f->inner_dport = to_port;
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
 * A reply of a flow opened from outside towards a pod (conntrack holds it
 * under the reversed tuple) keeps the pod's address: the peer talks to the
 * pod, not to the node.
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
 * node hosts (ipcache_is_cluster4): only traffic leaving the cluster is.
 * ICMP errors go with the flow they are about. A packet SNAT cannot
 * translate (a protocol other than TCP, UDP and ICMP echo) that answers no
 * flow opened towards the pod is dropped (NAT_UNSUPPORTED_PROTO): it would
 * leave with the pod's address. Returns 1 and sets *action when it decided
 * (a drop), 0 when the packet goes on (translated or not). Not a stage:
 * tendril_to_netdev is little else, and as a stage its port search made
 * the port exhaustion test (servicesNodePort.test.ts) lose replies.
 */
static __always_inline int snat4_masquerade(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, const struct device_info *dev,
					    int *action)
{
	struct nat4_target to = {};
	__u64 now;
	int ret;

	if (!(dev->flags & DEVICE_F_MASQUERADE) || !dev->ipv4 || f->saddr == dev->ipv4)
		return 0;
	if (!ipmasq_contains4(f->saddr) || ipmasq_contains4(f->daddr))
		return 0;
	/* Another node's pod or a node itself is inside the cluster: it sees the pod's own address. */
	if (ipcache_is_cluster4(f->daddr))
		return 0;
	now = bpf_ktime_get_ns();
	if (f->proto == IPPROTO_ICMP && f->icmp_error) {
		ret = snat4_icmp_error_out(skb, f, ip);
		goto done;
	}
	if (!nat4_translatable(skb, f, ip)) {
		ret = snat4_is_inbound_reply(f, now) ? 0 : DROP_NAT_UNSUPPORTED_PROTO;
		goto done;
	}
	if (f->proto != IPPROTO_ICMP && snat4_is_inbound_reply(f, now))
		return 0;
	to.addr = dev->ipv4;
	to.flags = NAT_F_MASQUERADE;
	ret = snat4_apply_new(skb, f, ip, &to, now);
	if (ret > 0) {
		trace_new_flow(skb, f, TRACE_TO_NETWORK, DIR_EGRESS);
		ret = 0;
	}
done:
	if (ret < 0) {
		*action = drop_packet(skb, f, ret, DIR_EGRESS, 0);
		return 1;
	}
	return 0;
}

#endif
