/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Connection tracking: one entry per flow, keyed by its original direction
 * (the packet that opened it); a reply finds it under the reversed tuple.
 * TCP and other protocols in separate maps, as Cilium. They are plain
 * hashes, not LRU: a full table refuses the new flow (CT_FULL) instead of
 * evicting a live one, and the agent's GC removes what expired.
 */
#ifndef __TENDRIL_LIB_CONNTRACK_H_
#define __TENDRIL_LIB_CONNTRACK_H_

#include <linux/in.h>

#include "common.h"
#include "config.h"
#include "flow.h"

struct ct4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport; /* ICMP echo: the identifier in both ports */
	__be16 dport;
	__u8 proto;
	__u8 flags;
	__u16 pad;
};

/* IPv6's key: ct4_key's members with 16-byte addresses. */
struct ct6_key {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport; /* ICMPv6 echo: the identifier, as ct4_key */
	__be16 dport;
	__u8 proto;
	__u8 flags;
	__u16 pad;
};

/* Either family's key, on the stack of the stages that build one. */
union ct_key {
	struct ct4_key k4;
	struct ct6_key k6;
};

struct ct_entry {
	__u64 expires_ns; /* bpf_ktime_get_ns() deadline */
	__u64 packets;
	__u64 bytes;
#ifdef TENDRIL_LAYOUT_VARIANT
	/* Only in the layout-variant build (make bpf-variant): another build's layout for the upgrade test. */
	__u64 upgrade_probe;
#endif
	__u32 src_identity;
	__u32 dst_identity;
	__u32 src_endpoint; /* 0 = not a local endpoint */
	__u32 dst_endpoint;
	__u16 rev_nat_index; /* the service the flow was translated for; 0 = none */
	__u8 tcp_flags;      /* union of TCP flags seen */
	__u8 flags;          /* CT_F_* */
	__u32 backend_id;    /* the backend a service flow is pinned to; 0 = none */
	__be32 nat_addr;     /* a service flow: the frontend as the client addressed it (replies' new source) */
	__be16 nat_port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ct4_key);
	__type(value, struct ct_entry);
	__uint(max_entries, TENDRIL_CT4_TCP_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ct4_tcp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ct4_key);
	__type(value, struct ct_entry);
	__uint(max_entries, TENDRIL_CT4_ANY_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ct4_any SEC(".maps");

/* IPv6: the same entries under ct6_key, in tables sized apart (a key is 40 bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ct6_key);
	__type(value, struct ct_entry);
	__uint(max_entries, TENDRIL_CT6_TCP_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ct6_tcp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ct6_key);
	__type(value, struct ct_entry);
	__uint(max_entries, TENDRIL_CT6_ANY_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ct6_any SEC(".maps");

/* Conntrack entries charged to each endpoint (CT_F_CHARGED), for --bpf-ct-endpoint-max. */
struct ct_budget {
	__u32 entries;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32); /* endpoint ID */
	__type(value, struct ct_budget);
	__uint(max_entries, TENDRIL_CT_BUDGET_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ct_budget SEC(".maps");

/* Ports of a fragmented datagram, recorded from its first fragment. */
struct frag4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 id;
	__u8 proto;
	__u8 pad;
};

struct frag4_ports {
	__be16 sport;
	__be16 dport;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag4_key);
	__type(value, struct frag4_ports);
	__uint(max_entries, TENDRIL_FRAG4_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_frag4 SEC(".maps");

/* IPv6 fragments: the fragment header's 32-bit identification, 16-byte addresses. */
struct frag6_key {
	__be32 saddr[4];
	__be32 daddr[4];
	__be32 id;
	__u8 proto;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag6_key);
	__type(value, struct frag4_ports);
	__uint(max_entries, TENDRIL_FRAG6_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_frag6 SEC(".maps");

#define NSEC_PER_SEC 1000000000ULL

/* Flags of a flow that only its creation sets (from the service translation the flow carries then). */
#define CT_F_STICKY (CT_F_HAIRPIN | CT_F_NODEPORT)

/* What conntrack knows about a packet. */
enum ct_status {
	CT_NEW = 0,
	CT_ESTABLISHED, /* the flow's original direction */
	CT_REPLY,       /* the reverse direction */
	CT_RELATED,     /* an ICMP error about a tracked flow */
};

static __always_inline struct ct_entry *ct_lookup_key(const struct ct4_key *key, __u64 now)
{
	struct ct_entry *e;

	if (key->proto == IPPROTO_TCP)
		e = bpf_map_lookup_elem(&tendril_ct4_tcp, key);
	else
		e = bpf_map_lookup_elem(&tendril_ct4_any, key);
	/* An expired entry the GC has not removed yet opens nothing. */
	if (e && e->expires_ns <= now)
		return NULL;
	return e;
}

static __always_inline void ct_key_init(struct ct4_key *key, __be32 saddr, __be32 daddr, __be16 sport, __be16 dport, __u8 proto)
{
	key->saddr = saddr;
	key->daddr = daddr;
	key->sport = sport;
	key->dport = dport;
	key->proto = proto;
	key->flags = 0;
	key->pad = 0;
}

static __always_inline int ct_map_update(const struct ct4_key *key, const struct ct_entry *e, __u64 flags)
{
	if (key->proto == IPPROTO_TCP)
		return bpf_map_update_elem(&tendril_ct4_tcp, key, e, flags);
	return bpf_map_update_elem(&tendril_ct4_any, key, e, flags);
}

static __always_inline struct ct_entry *ct_map_lookup(const struct ct4_key *key)
{
	if (key->proto == IPPROTO_TCP)
		return bpf_map_lookup_elem(&tendril_ct4_tcp, key);
	return bpf_map_lookup_elem(&tendril_ct4_any, key);
}

/*
 * The generic key steps below take `v6` as a constant of the stage they are
 * inlined into (ct_lookup or ct6_lookup, ct_create or ct6_create): each
 * stage keeps only its family's branch, so the IPv4 stages verify as
 * before and the IPv6 ones are verified once, on their own.
 */
static __always_inline void ct6_key_init(struct ct6_key *key, const __be32 *saddr, const __be32 *daddr, __be16 sport, __be16 dport,
					 __u8 proto)
{
	__builtin_memcpy(key->saddr, saddr, 16);
	__builtin_memcpy(key->daddr, daddr, 16);
	key->sport = sport;
	key->dport = dport;
	key->proto = proto;
	key->flags = 0;
	key->pad = 0;
}

static __always_inline int ct_addr6_equal(const __be32 *a, const __be32 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0;
}

/* f's own tuple, as it is or reversed. */
static __always_inline void ct_key_of_flow(union ct_key *k, int v6, const struct flow *f, int reverse)
{
	if (v6) {
		if (reverse)
			ct6_key_init(&k->k6, f->daddr6, f->saddr6, f->dport, f->sport, f->proto);
		else
			ct6_key_init(&k->k6, f->saddr6, f->daddr6, f->sport, f->dport, f->proto);
	} else if (reverse) {
		ct_key_init(&k->k4, f->daddr, f->saddr, f->dport, f->sport, f->proto);
	} else {
		ct_key_init(&k->k4, f->saddr, f->daddr, f->sport, f->dport, f->proto);
	}
}

/* The tuple an ICMP error carries, as it is or reversed. */
static __always_inline void ct_key_of_inner(union ct_key *k, int v6, const struct flow *f, int reverse)
{
	if (v6) {
		if (reverse)
			ct6_key_init(&k->k6, f->inner_daddr6, f->inner_saddr6, f->inner_dport, f->inner_sport, f->inner_proto);
		else
			ct6_key_init(&k->k6, f->inner_saddr6, f->inner_daddr6, f->inner_sport, f->inner_dport, f->inner_proto);
	} else if (reverse) {
		ct_key_init(&k->k4, f->inner_daddr, f->inner_saddr, f->inner_dport, f->inner_sport, f->inner_proto);
	} else {
		ct_key_init(&k->k4, f->inner_saddr, f->inner_daddr, f->inner_sport, f->inner_dport, f->inner_proto);
	}
}

/* The entry under k in its family's table for its protocol (expired or not). */
static __always_inline struct ct_entry *ct_key_get(const union ct_key *k, int v6)
{
	if (v6) {
		if (k->k6.proto == IPPROTO_TCP)
			return bpf_map_lookup_elem(&tendril_ct6_tcp, &k->k6);
		return bpf_map_lookup_elem(&tendril_ct6_any, &k->k6);
	}
	return ct_map_lookup(&k->k4);
}

static __always_inline int ct_key_update(const union ct_key *k, int v6, const struct ct_entry *e, __u64 flags)
{
	if (v6) {
		if (k->k6.proto == IPPROTO_TCP)
			return bpf_map_update_elem(&tendril_ct6_tcp, &k->k6, e, flags);
		return bpf_map_update_elem(&tendril_ct6_any, &k->k6, e, flags);
	}
	if (k->k4.proto == IPPROTO_TCP)
		return bpf_map_update_elem(&tendril_ct4_tcp, &k->k4, e, flags);
	return bpf_map_update_elem(&tendril_ct4_any, &k->k4, e, flags);
}

/* A live entry under k (an expired one the GC has not removed yet opens nothing). */
static __always_inline struct ct_entry *ct_key_find(const union ct_key *k, int v6, __u64 now)
{
	struct ct_entry *e;

	if (!v6)
		return ct_lookup_key(&k->k4, now);
	if (k->k6.proto == IPPROTO_TCP)
		e = bpf_map_lookup_elem(&tendril_ct6_tcp, &k->k6);
	else
		e = bpf_map_lookup_elem(&tendril_ct6_any, &k->k6);
	if (e && e->expires_ns <= now)
		return NULL;
	return e;
}

/*
 * Lifetime from the flags: FIN or RST seen → closing; a reply seen →
 * established; until then the SYN timeout, whatever the original direction
 * sent. A lone ACK (a segment of a connection this node never saw open)
 * proves nothing about the other end, only its answer does: a stray ACK
 * that policy lets through holds its entry 60 s, not 6 h. A service entry
 * (CT_F_SERVICE) only pins the backend and sees the client's side alone:
 * the client's ACK makes it established (what passes is decided by the
 * translated flow's own entry). Other protocols: CT_TIMEOUT_ANY.
 */
static __always_inline __u64 ct_lifetime_ns(__u8 proto, __u8 flags, __u8 tcp_flags)
{
	if (proto != IPPROTO_TCP)
		return CT_TIMEOUT_ANY * NSEC_PER_SEC;
	if (flags & CT_F_CLOSING)
		return CT_TIMEOUT_TCP_CLOSING * NSEC_PER_SEC;
	if ((flags & CT_F_REPLY_SEEN) || ((flags & CT_F_SERVICE) && (tcp_flags & TCP_FLAG_ACK)))
		return CT_TIMEOUT_TCP_ESTABLISHED * NSEC_PER_SEC;
	return CT_TIMEOUT_TCP_SYN * NSEC_PER_SEC;
}

/* A lone SYN (no ACK) on a TCP entry that saw FIN or RST. */
static __always_inline int ct_syn_reopens(const struct ct_entry *e, const struct flow *f)
{
	return f->proto == IPPROTO_TCP && (e->flags & CT_F_CLOSING) && (f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
}

/*
 * A TCP connection that is over: reset, or a FIN seen both ways. Its tuple
 * (and the SNAT port it holds) may be taken by a new connection at once,
 * as Linux's NAT reuses the tuple of a closed connection.
 */
static __always_inline int ct_entry_closed(const struct ct_entry *e)
{
	__u8 flags = READ_ONCE(e->flags);

	return (READ_ONCE(e->tcp_flags) & TCP_FLAG_RST) || (flags & (CT_F_FIN_ORIGINAL | CT_F_FIN_REPLY)) == (CT_F_FIN_ORIGINAL | CT_F_FIN_REPLY);
}

/*
 * rev_nat_index, tcp_flags, flags and backend_id share one aligned 64-bit
 * word: flags are set with one atomic OR on it (BPF has atomic OR on 64-bit
 * words only), so CPUs refreshing one entry never lose each other's bits.
 */
_Static_assert(__builtin_offsetof(struct ct_entry, rev_nat_index) % 8 == 0, "ct_entry flag word is not 8-byte aligned");
_Static_assert(__builtin_offsetof(struct ct_entry, tcp_flags) == __builtin_offsetof(struct ct_entry, rev_nat_index) + 2, "ct_entry.tcp_flags moved");
_Static_assert(__builtin_offsetof(struct ct_entry, flags) == __builtin_offsetof(struct ct_entry, rev_nat_index) + 3, "ct_entry.flags moved");
#define CT_WORD_TCP_FLAGS_SHIFT 16
#define CT_WORD_FLAGS_SHIFT 24

static __always_inline void ct_set_flags(struct ct_entry *e, __u8 tcp_flags, __u8 flags)
{
	__u64 bits = ((__u64)tcp_flags << CT_WORD_TCP_FLAGS_SHIFT) | ((__u64)flags << CT_WORD_FLAGS_SHIFT);
	__u64 *word = (__u64 *)&e->rev_nat_index;

	/* Most packets add nothing new: no locked instruction for them. */
	if ((READ_ONCE(*word) & bits) != bits)
		__sync_fetch_and_or(word, bits);
}

/* The flags a packet adds to its flow's entry: its TCP flags' meaning, by direction. */
static __always_inline __u8 ct_packet_flags(const struct flow *f, int reply)
{
	__u8 flags = reply ? CT_F_REPLY_SEEN : 0;

	if (f->proto == IPPROTO_TCP) {
		if (f->tcp_flags & TCP_FLAG_FIN)
			flags |= reply ? CT_F_FIN_REPLY : CT_F_FIN_ORIGINAL;
		if (f->tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST))
			flags |= CT_F_CLOSING;
	}
	return flags;
}

/*
 * Counts the packet in the entry and refreshes its lifetime. The deadline
 * follows the flags as they are after this packet's; a CPU that made the
 * flow closing meanwhile is seen by the check after the write, so a
 * closing flow never keeps a longer deadline.
 */
static __always_inline void ct_refresh(struct ct_entry *e, const struct flow *f, int reply, __u64 now)
{
	__u8 flags;

	ct_set_flags(e, f->proto == IPPROTO_TCP ? f->tcp_flags : 0, ct_packet_flags(f, reply));
	flags = READ_ONCE(e->flags);
	WRITE_ONCE(e->expires_ns, now + ct_lifetime_ns(f->proto, flags, READ_ONCE(e->tcp_flags)));
	if (!(flags & CT_F_CLOSING) && (READ_ONCE(e->flags) & CT_F_CLOSING))
		WRITE_ONCE(e->expires_ns, now + ct_lifetime_ns(f->proto, CT_F_CLOSING, 0));
	__sync_fetch_and_add(&e->packets, 1);
	__sync_fetch_and_add(&e->bytes, f->len);
}

/* What a flow learns from the entry it belongs to: the service translation, if any, and the entry's flags. */
static __always_inline void ct_entry_to_flow(struct flow *f, const struct ct_entry *e)
{
	f->rev_nat_index = e->rev_nat_index;
	f->backend_id = e->backend_id;
	f->nat_addr = e->nat_addr;
	f->nat_port = e->nat_port;
	f->ct_flags = e->flags;
}

/*
 * The original direction's packet, looked up as a service here, says what
 * the flow is now: an entry left by another frontend on the same translated
 * tuple (a client port reused for a second service with the same backend,
 * or for the backend directly) takes the packet's translation, so replies
 * come from the address this client is talking to.
 */
static __always_inline void ct_take_translation(struct ct_entry *e, const struct flow *f)
{
	__u8 flags = (e->flags & ~CT_F_STICKY) | (f->ct_flags & CT_F_STICKY);

	if (e->rev_nat_index == f->rev_nat_index && e->backend_id == f->backend_id && e->nat_addr == f->nat_addr &&
	    e->nat_port == f->nat_port && e->flags == flags)
		return;
	e->rev_nat_index = f->rev_nat_index;
	e->backend_id = f->backend_id;
	e->nat_addr = f->nat_addr;
	e->nat_port = f->nat_port;
	e->flags = flags;
}

/*
 * An ICMP error is related when the tuple it carries is tracked, in either
 * orientation (the error may be about a packet of the original direction or
 * of the reply). An error about the original direction travels to the
 * flow's client: f gets the entry's service translation (related_orig) so
 * the error can be translated back like a reply.
 */
static __always_inline int ct_is_related(struct flow *f, __u64 now, int v6)
{
	union ct_key key;
	struct ct_entry *e;

	/* The datagram inside the error is one the error's destination sent: anything else is no reply to a flow of ours. */
	if (!f->has_inner)
		return 0;
	if (v6 ? !ct_addr6_equal(f->inner_saddr6, f->daddr6) : f->inner_saddr != f->daddr)
		return 0;
	ct_key_of_inner(&key, v6, f, 0);
	e = ct_key_find(&key, v6, now);
	if (e) {
		ct_entry_to_flow(f, e);
		f->related_orig = 1;
		return 1;
	}
	ct_key_of_inner(&key, v6, f, 1);
	return ct_key_find(&key, v6, now) != NULL;
}

/*
 * ct_lookup's steps for one family: the packet as it is (established),
 * then reversed (reply), counted in the entry found; ICMP errors are
 * checked for a related flow. On a hit, f's identities and endpoints come
 * from the entry (as the flow's original direction saw them).
 */
static __always_inline enum ct_status ct_lookup_family(struct flow *f, __u64 now, int v6)
{
	union ct_key key;
	struct ct_entry *e;

	if (f->icmp_error)
		return ct_is_related(f, now, v6) ? CT_RELATED : CT_NEW;

	ct_key_of_flow(&key, v6, f, 0);
	e = ct_key_find(&key, v6, now);
	/*
	 * A new SYN on a closing tuple is a new connection (a client port
	 * reused): it is judged by the policy in force now, as a new flow, and
	 * its ct_create replaces the entry. Until a SYN is allowed the closing
	 * entry stays as it was, so a denied SYN's retransmit is denied again.
	 */
	if (e && ct_syn_reopens(e, f))
		return CT_NEW;
	if (e) {
		ct_refresh(e, f, 0, now);
		if (f->lb_checked || (f->lb_direct && (e->flags & CT_F_NODEPORT)))
			ct_take_translation(e, f);
		ct_entry_to_flow(f, e);
		f->src_identity = e->src_identity;
		f->dst_identity = e->dst_identity;
		f->src_endpoint = e->src_endpoint;
		f->dst_endpoint = e->dst_endpoint;
		return CT_ESTABLISHED;
	}
	ct_key_of_flow(&key, v6, f, 1);
	e = ct_key_find(&key, v6, now);
	if (e) {
		ct_refresh(e, f, 1, now);
		ct_entry_to_flow(f, e);
		f->src_identity = e->dst_identity;
		f->dst_identity = e->src_identity;
		f->src_endpoint = e->dst_endpoint;
		f->dst_endpoint = e->src_endpoint;
		return CT_REPLY;
	}
	return CT_NEW;
}

/* ct_lookup of an IPv4 flow: each family's key lives in its own stage's frame. */
__stage enum ct_status ct4_lookup(struct flow *f, __u64 now)
{
	if (!f)
		return CT_NEW;
	return ct_lookup_family(f, now, 0);
}

/* ct_lookup of an IPv6 flow. */
__stage enum ct_status ct6_lookup(struct flow *f, __u64 now)
{
	if (!f)
		return CT_NEW;
	return ct_lookup_family(f, now, 1);
}

/*
 * What conntrack knows about f's packet (ct_lookup_family), for a flow of
 * either family. Only dispatches: a stage with no frame to speak of, so a
 * chain of stages through it holds one family's key, not both. The IPv6
 * branch exists in objects that parse IPv6 (TENDRIL_IPV6_FLOWS, defined by
 * each program file that does): an IPv4-only object never verifies the IPv6 stages
 * (each would cost them some 1900 instructions), and no flow of theirs is
 * ever of family 6.
 */
__stage enum ct_status ct_lookup(struct flow *f, __u64 now)
{
	if (!f)
		return CT_NEW;
#ifdef TENDRIL_IPV6_FLOWS
	if (f->family == 6)
		return ct6_lookup(f, now);
#else
	/* Never keyed as IPv4 by its first address word: a new flow, judged by policy. */
	if (f->family == 6)
		return CT_NEW;
#endif
	return ct4_lookup(f, now);
}

/* The endpoint an entry is charged to: the one that opened the flow, else the one it was opened to (0 = none). */
static __always_inline __u32 ct_charged_endpoint(const struct ct_entry *e)
{
	return e->src_endpoint ? e->src_endpoint : e->dst_endpoint;
}

/*
 * One entry more for endpoint `ep`, within `max`: 0, or
 * DROP_CT_ENDPOINT_BUDGET when the endpoint holds `max` already (or its
 * counter cannot be made: fail closed).
 */
static __always_inline int ct_budget_take(__u32 ep, __u32 max)
{
	struct ct_budget *b = bpf_map_lookup_elem(&tendril_ct_budget, &ep);
	struct ct_budget first = { .entries = 1, .pad = 0 };

	if (!b) {
		if (bpf_map_update_elem(&tendril_ct_budget, &ep, &first, BPF_NOEXIST) == 0)
			return 0;
		b = bpf_map_lookup_elem(&tendril_ct_budget, &ep);
		if (!b)
			return DROP_CT_ENDPOINT_BUDGET;
	}
	if (READ_ONCE(b->entries) >= max)
		return DROP_CT_ENDPOINT_BUDGET;
	__sync_fetch_and_add(&b->entries, 1);
	return 0;
}

/* Gives one entry back to endpoint `ep` (never below 0). */
static __always_inline void ct_budget_give(__u32 ep)
{
	struct ct_budget *b = bpf_map_lookup_elem(&tendril_ct_budget, &ep);

	if (b && READ_ONCE(b->entries) > 0)
		__sync_fetch_and_add(&b->entries, -1);
}

/*
 * Writes a new flow's entry under k: 0, DROP_CT_ENDPOINT_BUDGET when its
 * endpoint holds all the entries --bpf-ct-endpoint-max allows, or
 * DROP_CT_FULL when the table has no room (a full table refuses; no live
 * flow is evicted). An entry already under the key (a closed connection's
 * tuple reused) is replaced, its charge given back.
 */
static __always_inline int ct_insert_family(const union ct_key *k, int v6, struct ct_entry *e)
{
	__u32 max = config_ct_endpoint_max(), ep = ct_charged_endpoint(e);
	struct ct_entry *old;
	int ret;

	e->flags &= ~CT_F_CHARGED;
	if (max && ep) {
		ret = ct_budget_take(ep, max);
		if (ret < 0)
			return ret;
		e->flags |= CT_F_CHARGED;
	}
	ret = ct_key_update(k, v6, e, BPF_NOEXIST);
	if (ret == -EEXIST) {
		old = ct_key_get(k, v6);
		if (old && (READ_ONCE(old->flags) & CT_F_CHARGED))
			ct_budget_give(ct_charged_endpoint(old));
		ret = ct_key_update(k, v6, e, BPF_ANY);
	}
	if (ret == 0)
		return 0;
	if (e->flags & CT_F_CHARGED)
		ct_budget_give(ep);
	return DROP_CT_FULL;
}

/* ct_insert_family for an IPv4 key (service entries, lb.h). */
static __always_inline int ct_insert(const struct ct4_key *key, struct ct_entry *e)
{
	return ct_insert_family((const union ct_key *)key, 0, e);
}

/*
 * The entry of a new flow, opened by this packet in its original direction,
 * with the service translation f carries (reply reverse NAT reads it).
 * 0, or why the flow cannot be tracked (ct_insert_family).
 */
static __always_inline int ct_create_family(const struct flow *f, __u64 now, int v6)
{
	union ct_key key;
	struct ct_entry e;

	__builtin_memset(&e, 0, sizeof(e));
	ct_key_of_flow(&key, v6, f, 0);
	e.flags = (f->ct_flags & CT_F_STICKY) | ct_packet_flags(f, 0);
	if (f->proto == IPPROTO_TCP)
		e.tcp_flags = f->tcp_flags;
	e.expires_ns = now + ct_lifetime_ns(f->proto, e.flags, e.tcp_flags);
	e.packets = 1;
	e.bytes = f->len;
	e.src_identity = f->src_identity;
	e.dst_identity = f->dst_identity;
	e.src_endpoint = f->src_endpoint;
	e.dst_endpoint = f->dst_endpoint;
	e.rev_nat_index = f->rev_nat_index;
	e.backend_id = f->backend_id;
	e.nat_addr = f->nat_addr;
	e.nat_port = f->nat_port;
	return ct_insert_family(&key, v6, &e);
}

/* ct_create of an IPv4 flow, a stage of its own as ct4_lookup. */
__stage int ct4_create(const struct flow *f, __u64 now)
{
	if (!f)
		return DROP_CT_FULL;
	return ct_create_family(f, now, 0);
}

/* ct_create of an IPv6 flow. */
__stage int ct6_create(const struct flow *f, __u64 now)
{
	if (!f)
		return DROP_CT_FULL;
	return ct_create_family(f, now, 1);
}

/*
 * The entry of f's new flow (ct_create_family), for a flow of either
 * family; only dispatches, as ct_lookup (a family-6 flow in an object
 * without TENDRIL_IPV6_FLOWS is refused, never keyed as IPv4).
 */
__stage int ct_create(const struct flow *f, __u64 now)
{
	if (!f)
		return DROP_CT_FULL;
#ifdef TENDRIL_IPV6_FLOWS
	if (f->family == 6)
		return ct6_create(f, now);
#else
	if (f->family == 6)
		return DROP_CT_FULL;
#endif
	return ct4_create(f, now);
}

#endif
