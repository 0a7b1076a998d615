/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Service load-balancing, after Cilium's lb4 maps: a frontend (address,
 * port, protocol, scope) and a slot give a backend ID; slot 0 holds the
 * backend count, flags and the reverse NAT index (= the service ID).
 * Backends by ID, the reverse NAT (index → frontend) for replies, ClientIP
 * affinity, optional Maglev tables (an inner array per service), and each
 * service's members: the backends it still has, whose connections it keeps.
 */
#ifndef __TENDRIL_LIB_LB_H_
#define __TENDRIL_LIB_LB_H_

#include <linux/in.h>
#include <linux/ip.h>

#include "common.h"
#include "config.h"
#include "conntrack.h"
#include "endpoints.h"
#include "flow.h"
#include "ipcache.h"
#include "ipv4.h"
#include "ipv6.h"
#include "rewrite.h"
#include "rewrite6.h"

struct lb4_key {
	__be32 address;     /* frontend; 0 with SVC_F_NODEPORT = every node address */
	__be16 dport;       /* frontend port */
	__u16 backend_slot; /* 0: the service entry; 1..count: its backends */
	__u8 proto;         /* IPPROTO_TCP, _UDP or _SCTP */
	__u8 scope;         /* LB_SCOPE_* */
	__u16 pad;
};

struct lb4_service {
	__u32 backend_id;       /* slot > 0: the backend in this slot; slot 0: 0 */
#ifdef TENDRIL_LAYOUT_VARIANT
	__u32 upgrade_probe; /* the layout-variant build's field (see conntrack.h) */
#endif
	__u32 affinity_timeout; /* seconds (SVC_F_AFFINITY) */
	__u16 count;            /* slot 0: backends in slots 1..count (new connections go only to these) */
	__u16 rev_nat_index;    /* the service ID */
	__u8 flags;             /* SVC_F_* */
	__u8 pad[3];
};

struct lb4_backend {
	__be32 address;
#ifdef TENDRIL_LAYOUT_VARIANT
	__u16 upgrade_probe; /* the layout-variant build's field (see conntrack.h) */
	__u16 variant_pad;
#endif
	__be16 port;
	__u8 proto;
	__u8 state; /* BACKEND_STATE_* */
};

struct lb4_reverse_nat {
	__be32 address; /* the frontend replies come from */
	__be16 port;
	__u16 pad;
};

struct lb4_affinity_key {
	__be32 client;
	__u16 rev_nat_index;
	__u16 pad;
};

struct lb4_affinity_value {
	__u64 last_used_ns; /* bpf_ktime_get_ns() */
	__u32 backend_id;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_key);
	__type(value, struct lb4_service);
	__uint(max_entries, TENDRIL_LB4_SVC_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_svc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb4_backend);
	__uint(max_entries, TENDRIL_LB4_BE_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_be SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16);
	__type(value, struct lb4_reverse_nat);
	__uint(max_entries, TENDRIL_LB4_REV_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb4_affinity_key);
	__type(value, struct lb4_affinity_value);
	__uint(max_entries, TENDRIL_LB4_AFF_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_aff SEC(".maps");

/*
 * (service, backend) pairs: the backends a service has, in any state (a
 * terminating one has no slot but keeps its connections). Backend IDs are
 * shared between services, so a backend's entry in tendril_lb4_be outlives
 * its leaving one service: this map is what tells a connection pinned to it
 * that it left. The agent adds a member before a slot names it and removes
 * it after the slots no longer do.
 */
struct lb4_member_key {
	__u16 rev_nat_index;
	__u16 pad;
	__u32 backend_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_member_key);
	__type(value, __u8);
	__uint(max_entries, TENDRIL_LB4_MEMBER_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_member SEC(".maps");

/* A service's Maglev table: slot → backend ID. The agent creates each with the configured table size (BPF_F_INNER_MAP lets sizes differ from this template). */
struct lb4_maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__type(key, __u32); /* rev_nat_index */
	__uint(max_entries, TENDRIL_LB4_MAG_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct lb4_maglev_inner);
} tendril_lb4_mag SEC(".maps");

/*
 * loadBalancerSourceRanges: (service, client prefix) → 1. A service whose
 * slot 0 carries SVC_F_SOURCE_RANGES takes packets only from a source inside
 * one of its prefixes; every other packet to it is dropped
 * (DROP_NOT_IN_SRC_RANGE), whatever path it came by. One trie for both
 * families, keyed as the ipcache is with the service ID in its first bits.
 */
struct lb_src_range_key {
	__u32 prefixlen; /* LB_SRC_RANGE_KEY_FIXED_BITS + the prefix's length */
	__u16 rev_nat_index;
	__u8 pad;
	__u8 family;
	__u32 ip[4]; /* network order; IPv4 in ip[0] */
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lb_src_range_key);
	__type(value, __u8);
	__uint(max_entries, TENDRIL_LB_SRCRANGE_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb_srcrange SEC(".maps");

/* Whether a service with SVC_F_SOURCE_RANGES takes a packet from this IPv4 source. */
static __always_inline int lb_src_range_ok4(__u16 rev_nat_index, __be32 saddr)
{
	struct lb_src_range_key key = {
		.prefixlen = LB_SRC_RANGE_KEY_FIXED_BITS + 32,
		.rev_nat_index = rev_nat_index,
		.family = 4,
		.ip = { saddr, 0, 0, 0 },
	};

	return bpf_map_lookup_elem(&tendril_lb_srcrange, &key) != NULL;
}

/* The same for an IPv6 source. */
static __always_inline int lb_src_range_ok6(__u16 rev_nat_index, const __be32 *saddr6)
{
	struct lb_src_range_key key = {
		.prefixlen = LB_SRC_RANGE_KEY_FIXED_BITS + 128,
		.rev_nat_index = rev_nat_index,
		.family = 6,
	};

	__builtin_memcpy(key.ip, saddr6, 16);
	return bpf_map_lookup_elem(&tendril_lb_srcrange, &key) != NULL;
}

/*
 * A frontend lb4_lookup found: its key (slot 0, for the backend slots) and
 * a copy of its service entry, on the stack, so that the translation stage
 * (lb4_translate) can take it as an argument.
 */
struct lb4_frontend {
	struct lb4_key key;
	struct lb4_service svc;
};

/* ---- logic below ---------------------------------------------------------- */

/* Services are TCP and UDP only: anything else to a frontend goes on as addressed. */
static __always_inline int lb4_proto_supported(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP;
}

/* lb4_lookup's map walk: the entry found (key left as its key), or NULL. */
static __always_inline struct lb4_service *lb4_lookup_entry(const struct flow *f, struct lb4_key *key, int internal)
{
	struct lb4_service *svc, *scoped;

	if (!lb4_proto_supported(f->proto))
		return NULL;
	key->address = f->daddr;
	key->dport = f->dport;
	key->backend_slot = 0;
	key->proto = f->proto;
	key->scope = LB_SCOPE_EXTERNAL;
	key->pad = 0;
	svc = bpf_map_lookup_elem(&tendril_lb4_svc, key);
	if (!svc) {
		key->address = 0;
		svc = bpf_map_lookup_elem(&tendril_lb4_svc, key);
		/* The ipcache walk only when a NodePort exists on this port. */
		if (!svc || !(svc->flags & SVC_F_NODEPORT) || ipcache_identity4(f->daddr) != IDENTITY_HOST)
			return NULL;
	}
	if (internal && (svc->flags & SVC_F_TWO_SCOPES)) {
		key->scope = LB_SCOPE_INTERNAL;
		scoped = bpf_map_lookup_elem(&tendril_lb4_svc, key);
		if (scoped)
			return scoped;
		key->scope = LB_SCOPE_EXTERNAL;
	}
	return svc;
}

/*
 * The service a packet addresses: the exact frontend; else, when the
 * destination is a node address, a NodePort on every node address (address
 * 0). Traffic from inside the node (`internal`: a pod or the node itself)
 * takes the INTERNAL scope of a TWO_SCOPES frontend (the backends its
 * internalTrafficPolicy allows); traffic from outside never does. 1 with
 * *fe filled in (its key left as the entry found, slot 0, for its backend
 * slots), or 0 when the packet addresses no service.
 */
static __always_inline int lb4_lookup(const struct flow *f, struct lb4_frontend *fe, int internal)
{
	struct lb4_service *svc = lb4_lookup_entry(f, &fe->key, internal);

	if (!svc)
		return 0;
	fe->svc = *svc;
	return 1;
}

static __always_inline __u32 lb_rotl32(__u32 x, __u32 r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 lb_hash_round(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51U;
	k = lb_rotl32(k, 15);
	k *= 0x1b873593U;
	h ^= k;
	h = lb_rotl32(h, 13);
	return h * 5 + 0xe6546b64U;
}

/*
 * The flow hash Maglev indexes with: MurmurHash3 (x86, 32 bits, seed 0) of
 * four host-order words — source address, destination address,
 * sport << 16 | dport, protocol. Deterministic across nodes and restarts;
 * src/datapath/bpf/flowHash.ts is its TypeScript twin.
 */
static __always_inline __u32 lb4_flow_hash(const struct flow *f)
{
	__u32 h = 0;

	h = lb_hash_round(h, bpf_ntohl(f->saddr));
	h = lb_hash_round(h, bpf_ntohl(f->daddr));
	h = lb_hash_round(h, ((__u32)bpf_ntohs(f->sport) << 16) | bpf_ntohs(f->dport));
	h = lb_hash_round(h, f->proto);
	h ^= 16;
	h ^= h >> 16;
	h *= 0x85ebca6bU;
	h ^= h >> 13;
	h *= 0xc2b2ae35U;
	h ^= h >> 16;
	return h;
}

/* The backend the service's Maglev table gives this flow; 0 without a table (or a size in the config). */
static __always_inline __u32 lb4_maglev_backend(const struct flow *f, __u16 rev_nat_index)
{
	__u32 outer = rev_nat_index, zero = 0, idx, *id;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);
	void *table;

	if (!cfg || cfg->maglev_table_size == 0)
		return 0;
	idx = lb4_flow_hash(f) % cfg->maglev_table_size;
	table = bpf_map_lookup_elem(&tendril_lb4_mag, &outer);
	if (!table)
		return 0;
	id = bpf_map_lookup_elem(table, &idx);
	return id ? *id : 0;
}

/* A backend from slots 1..count at random. */
static __always_inline __u32 lb4_random_backend(const struct lb4_key *key, __u16 count)
{
	struct lb4_key slot = *key;
	struct lb4_service *s;

	slot.backend_slot = (__u16)(bpf_get_prandom_u32() % count) + 1;
	s = bpf_map_lookup_elem(&tendril_lb4_svc, &slot);
	return s ? s->backend_id : 0;
}

static __always_inline int lb4_backend_is_local(const struct lb4_backend *be)
{
	return pod_endpoint_lookup4(be->address) != NULL;
}

/* bpf_loop's state while lb4_local_backend walks a service's slots. */
struct lb4_local_walk {
	struct lb4_key slot; /* the service's key; backend_slot set per step */
	__u32 start;         /* the slot index (0-based) the walk starts at */
	__u32 count;
	__u32 found;         /* the backend ID found; 0 = none yet */
};

/* One step of the walk: slot (start + i) % count + 1; stops at the first backend of this node. */
static long lb4_local_walk_step(__u32 i, void *ctx)
{
	struct lb4_local_walk *w = ctx;
	struct lb4_backend *be;
	struct lb4_service *s;
	__u32 id;

	if (w->count == 0)
		return 1;
	w->slot.backend_slot = (__u16)((w->start + i) % w->count) + 1;
	s = bpf_map_lookup_elem(&tendril_lb4_svc, &w->slot);
	if (!s)
		return 0;
	id = s->backend_id;
	be = bpf_map_lookup_elem(&tendril_lb4_be, &id);
	if (!be || !lb4_backend_is_local(be))
		return 0;
	w->found = id;
	return 1;
}

/*
 * A backend of this node from the slots, or 0 when it has none: every slot
 * from a random one on, in order, until one is local (bpf_loop: the
 * verifier checks the step once, whatever the count). With one local
 * backend among many it is always found.
 */
static __always_inline __u32 lb4_local_backend(const struct lb4_key *key, __u16 count)
{
	struct lb4_local_walk w;

	if (count == 0)
		return 0;
	__builtin_memset(&w, 0, sizeof(w));
	w.slot = *key;
	w.count = count;
	w.start = bpf_get_prandom_u32() % count;
	bpf_loop(count, lb4_local_walk_step, &w, 0);
	return w.found;
}

/* Whether backend `id` is still one of service `rev_nat_index`'s. */
static __always_inline int lb4_is_member(__u16 rev_nat_index, __u32 id)
{
	struct lb4_member_key k = { .rev_nat_index = rev_nat_index, .pad = 0, .backend_id = id };

	return bpf_map_lookup_elem(&tendril_lb4_member, &k) != NULL;
}

/*
 * The client's affinity backend while fresh, ACTIVE and still the
 * service's (the agent does not walk the affinity map when a backend
 * leaves); 0 otherwise. A global function, verified once on its own: inlined,
 * its two lookups multiplied the states of every caller (bpf_netdev's
 * processed instructions grew by two thirds).
 */
__attribute__((noinline)) __u32 lb4_affinity_backend(__be32 client, __u16 rev_nat_index, __u32 timeout_s, __u64 now)
{
	struct lb4_affinity_key key = { .client = client, .rev_nat_index = rev_nat_index, .pad = 0 };
	struct lb4_affinity_value *v = bpf_map_lookup_elem(&tendril_lb4_aff, &key);
	struct lb4_backend *be;
	__u32 id;

	if (!v || now - v->last_used_ns > (__u64)timeout_s * NSEC_PER_SEC)
		return 0;
	id = v->backend_id;
	be = bpf_map_lookup_elem(&tendril_lb4_be, &id);
	if (!be || be->state != BACKEND_STATE_ACTIVE)
		return 0;
	return lb4_is_member(rev_nat_index, id) ? id : 0;
}

/* The service conntrack key of a connection: the client's tuple to the frontend, before DNAT. */
static __always_inline void lb4_service_ct_key(struct ct4_key *key, const struct flow *f)
{
	ct_key_init(key, f->saddr, f->daddr, f->sport, f->dport, f->proto);
	key->flags = CT_KEY_F_SERVICE;
}

/*
 * Pins the connection to backend `id` in a fresh service entry, charged to
 * the client endpoint like the flow's own: 0, or why it cannot be tracked.
 */
static __always_inline int lb4_service_ct_create(const struct ct4_key *key, const struct flow *f, __u16 rev_nat_index, __u32 id, __u64 now)
{
	struct ct_entry e;

	__builtin_memset(&e, 0, sizeof(e));
	e.flags = CT_F_SERVICE | ct_packet_flags(f, 0);
	if (f->proto == IPPROTO_TCP)
		e.tcp_flags = f->tcp_flags;
	e.expires_ns = now + ct_lifetime_ns(f->proto, e.flags, e.tcp_flags);
	e.packets = 1;
	e.bytes = f->len;
	e.rev_nat_index = rev_nat_index;
	e.backend_id = id;
	e.nat_addr = f->daddr;
	e.nat_port = f->dport;
	e.src_endpoint = f->src_endpoint;
	return ct_insert(key, &e);
}

/*
 * A TCP SYN on a service entry whose connection is closing, or whose client
 * already sent an ACK (a client sends a lone SYN on a tuple only to open it:
 * after its ACK that is a new connection; before, a retransmitted SYN of the
 * same one): the client reuses its port for a new connection, which is
 * chosen afresh (a backend drained since must not take it). The second case
 * is a connection that ended where this entry never saw it: one moved to
 * another backend whose reset came back through the translated flow's entry
 * only (a service entry sees the client's side alone).
 */
static __always_inline int lb4_port_reused(const struct ct_entry *e, const struct flow *f)
{
	return f->proto == IPPROTO_TCP && (f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN &&
	       ((e->flags & CT_F_CLOSING) || (READ_ONCE(e->tcp_flags) & TCP_FLAG_ACK));
}

/*
 * The backend of this connection: the one its service conntrack entry pins
 * while that backend still exists and is still a member of the service (a
 * terminating backend keeps its connections; one that left the service or
 * vanished does not: its entry is overwritten by a new choice, so the agent
 * never walks conntrack when backends go) and the entry is not a closed
 * connection's whose client port a new one reuses; else a new choice — the
 * client's affinity backend, the Maglev table's (EXTERNAL scope), or a
 * random slot — pinned in a new service entry. NULL
 * with *reason = DROP_NO_SERVICE when the service has no backend for new
 * connections. Sets f's service fields (backend, reverse NAT index, the
 * frontend as addressed).
 */
static __always_inline struct lb4_backend *lb4_select(struct flow *f, const struct lb4_key *key, const struct lb4_service *svc, __u64 now,
						      int *reason)
{
	__u16 rev_nat_index = svc->rev_nat_index, count = svc->count;
	__u32 timeout_s = svc->affinity_timeout, id = 0;
	__u8 flags = svc->flags;
	struct lb4_backend *be = NULL;
	struct ct4_key ckey;
	struct ct_entry *e;
	int ret;

	/* Every packet, not only a new flow's: a range taken away ends the connections from outside it too. */
	if ((flags & SVC_F_SOURCE_RANGES) && !lb_src_range_ok4(rev_nat_index, f->saddr)) {
		*reason = DROP_NOT_IN_SRC_RANGE;
		return NULL;
	}
	lb4_service_ct_key(&ckey, f);
	e = ct_lookup_key(&ckey, now);
	if (e && e->rev_nat_index == rev_nat_index && e->backend_id && !lb4_port_reused(e, f)) {
		id = e->backend_id;
		be = bpf_map_lookup_elem(&tendril_lb4_be, &id);
		if (be && !lb4_is_member(rev_nat_index, id))
			be = NULL;
		if (be && f->lb_local_only && !lb4_backend_is_local(be))
			be = NULL;
		if (be)
			ct_refresh(e, f, 0, now);
	}
	if (!be) {
		id = 0;
		if (flags & SVC_F_AFFINITY)
			id = lb4_affinity_backend(f->saddr, rev_nat_index, timeout_s, now);
		if (!id && count == 0) {
			*reason = DROP_NO_SERVICE;
			return NULL;
		}
		/* A service has one Maglev table, its EXTERNAL scope's backends: the INTERNAL scope (all of them) picks at random. */
		if (!id && (flags & SVC_F_MAGLEV) && key->scope == LB_SCOPE_EXTERNAL)
			id = lb4_maglev_backend(f, rev_nat_index);
		if (!id)
			id = lb4_random_backend(key, count);
		be = id ? bpf_map_lookup_elem(&tendril_lb4_be, &id) : NULL;
		if (be && f->lb_local_only && !lb4_backend_is_local(be)) {
			id = lb4_local_backend(key, count);
			be = id ? bpf_map_lookup_elem(&tendril_lb4_be, &id) : NULL;
		}
		if (!be) {
			*reason = DROP_NO_SERVICE;
			return NULL;
		}
		ret = lb4_service_ct_create(&ckey, f, rev_nat_index, id, now);
		if (ret < 0) {
			*reason = ret;
			return NULL;
		}
	}
	if (flags & SVC_F_AFFINITY) {
		struct lb4_affinity_key ak = { .client = f->saddr, .rev_nat_index = rev_nat_index, .pad = 0 };
		struct lb4_affinity_value av = { .last_used_ns = now, .backend_id = id, .pad = 0 };

		bpf_map_update_elem(&tendril_lb4_aff, &ak, &av, BPF_ANY);
	}
	f->backend_id = id;
	f->rev_nat_index = rev_nat_index;
	f->nat_addr = f->daddr;
	f->nat_port = f->dport;
	return be;
}

/* Destination ← the backend (a later fragment has no port to rewrite); f follows. */
static __always_inline int lb4_dnat(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, const struct lb4_backend *be)
{
	__be32 addr = be->address;
	__be16 port = be->port;
	int ret;

	ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_DST, f->daddr, addr);
	if (ret < 0)
		return ret;
	f->daddr = addr;
	if (!port)
		return 0;
	if (!ipv4_is_later_fragment(ip)) {
		ret = ipv4_rewrite_port(skb, ip, f->proto, REWRITE_DST, f->dport, port);
		if (ret < 0)
			return ret;
	}
	f->dport = port;
	return 0;
}

/* A new or pinned connection to a frontend: backend selected, then DNAT. 0, or the drop reason. */
__stage int lb4_translate(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, const struct lb4_frontend *fe, __u64 now)
{
	struct lb4_backend *be;
	int reason = 0;

	if (!f || !ip || !fe)
		return DROP_NO_SERVICE;
	be = lb4_select(f, &fe->key, &fe->svc, now, &reason);
	if (!be)
		return reason;
	return lb4_dnat(skb, f, ip, be);
}

/*
 * A pod reaching its own service: the backend chosen is the client itself,
 * which would drop a packet from its own address. The source becomes
 * LB_HAIRPIN_IP4 and the flow CT_F_HAIRPIN, so replies get both addresses
 * back.
 */
static __always_inline int lb4_hairpin_snat(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip)
{
	__be32 hairpin = bpf_htonl(LB_HAIRPIN_IP4_HOST_ORDER);
	int ret;

	if (f->daddr != f->saddr)
		return 0;
	ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_SRC, f->saddr, hairpin);
	if (ret < 0)
		return ret;
	f->saddr = hairpin;
	f->ct_flags |= CT_F_HAIRPIN;
	return 0;
}

/* The reverse NAT applies while the service exists (its tendril_lb4_rev entry). */
static __always_inline int lb4_rev_nat_active(const struct flow *f)
{
	__u16 idx = f->rev_nat_index;

	return idx && bpf_map_lookup_elem(&tendril_lb4_rev, &idx) != NULL;
}

/*
 * A reply of a service flow (conntrack REPLY): source ← the frontend as the
 * client addressed it; a hairpin reply also gets destination ← the client
 * (its own source: the client is the backend). f follows.
 */
static __always_inline int lb4_rev_nat(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip)
{
	__be32 client = f->saddr;
	int ret;

	if (!lb4_rev_nat_active(f))
		return 0;
	if (f->ct_flags & CT_F_HAIRPIN) {
		ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_DST, f->daddr, client);
		if (ret < 0)
			return ret;
		f->daddr = client;
	}
	ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_SRC, f->saddr, f->nat_addr);
	if (ret < 0)
		return ret;
	f->saddr = f->nat_addr;
	if (!f->nat_port)
		return 0;
	if (!ipv4_is_later_fragment(ip)) {
		ret = ipv4_rewrite_port(skb, ip, f->proto, REWRITE_SRC, f->sport, f->nat_port);
		if (ret < 0)
			return ret;
	}
	f->sport = f->nat_port;
	return 0;
}

/*
 * An ICMP error about a service flow's original direction, on its way to
 * the client: the datagram it carries (client → backend) becomes client →
 * frontend, the outer source becomes the frontend when the backend sent the
 * error, and every checksum follows (rewrite.h). A hairpin's error also gets
 * the client back in place of LB_HAIRPIN_IP4, outside and inside.
 */
static __always_inline int lb4_rev_nat_icmp(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip)
{
	__be32 front = f->nat_addr, backend = f->inner_daddr, hairpin = 0;
	__be16 fport = f->nat_port, bport = f->inner_dport;
	struct icmp_inner in;
	int ret;

	if (!f->related_orig || !lb4_rev_nat_active(f))
		return 0;
	if (f->ct_flags & CT_F_HAIRPIN)
		hairpin = f->inner_saddr;
	ret = icmp_inner_load(skb, ip, &in);
	if (ret == 0)
		ret = icmp_inner_rewrite_addr(skb, &in, REWRITE_DST, backend, front);
	if (ret == 0 && fport)
		ret = icmp_inner_rewrite_port(skb, ip, &in, REWRITE_DST, bport, fport);
	if (ret == 0 && hairpin)
		ret = icmp_inner_rewrite_addr(skb, &in, REWRITE_SRC, hairpin, backend);
	if (ret < 0)
		return ret;
	f->inner_daddr = front;
	if (fport)
		f->inner_dport = fport;

	/* The ICMP checksum covers no pseudo-header: the outer rewrites touch the IP header checksum only. */
	if (hairpin) {
		ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_DST, f->daddr, backend);
		if (ret < 0)
			return ret;
		f->daddr = backend;
		f->inner_saddr = backend;
	}
	if (f->saddr == backend) {
		ret = ipv4_rewrite_addr(skb, ip, f->proto, REWRITE_SRC, f->saddr, front);
		if (ret < 0)
			return ret;
		f->saddr = front;
	}
	return 0;
}

/* The reverse NAT conntrack asks for (a REPLY, or an error RELATED to a service flow); 0 when none applies. */
__stage int lb4_rev_nat_ct(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, enum ct_status status)
{
	if (!f || !ip || !f->rev_nat_index)
		return 0;
	if (status == CT_REPLY)
		return lb4_rev_nat(skb, f, ip);
	if (status == CT_RELATED)
		return lb4_rev_nat_icmp(skb, f, ip);
	return 0;
}

/* ---- IPv6 ------------------------------------------------------------------ */
/*
 * IPv6 services, as IPv4's with 16-byte addresses: a service is one family
 * (a dual-stack Kubernetes Service is one service per family). The
 * service entries (struct lb4_service) and affinity values are the same
 * structs. Service IDs and backend IDs are one number space across both
 * families (the agent allocates them once), so the tables keyed by IDs
 * only, Maglev (tendril_lb4_mag) and members (tendril_lb4_member), are
 * shared: an IPv6 service's table and members sit beside IPv4's under IDs
 * no IPv4 service has, and no IPv6 copy of them has to be kept in step.
 * The conntrack entry's nat_addr holds 4 bytes: an IPv6 reply takes the
 * frontend from tendril_lb6_rev (a service's one address), so NodePort on
 * "every node address" is not served in IPv6 here.
 */
struct lb6_key {
	__be32 address[4]; /* frontend */
	__be16 dport;
	__u16 backend_slot; /* 0: the service entry; 1..count: its backends */
	__u8 proto;
	__u8 scope; /* LB_SCOPE_* */
	__u16 pad;
};

struct lb6_backend {
	__be32 address[4];
	__be16 port;
	__u8 proto;
	__u8 state; /* BACKEND_STATE_* */
};

struct lb6_reverse_nat {
	__be32 address[4]; /* the frontend replies come from */
	__be16 port;
	__u16 pad;
};

struct lb6_affinity_key {
	__be32 client[4];
	__u16 rev_nat_index;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb6_key);
	__type(value, struct lb4_service);
	__uint(max_entries, TENDRIL_LB6_SVC_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb6_svc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb6_backend);
	__uint(max_entries, TENDRIL_LB6_BE_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb6_be SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16);
	__type(value, struct lb6_reverse_nat);
	__uint(max_entries, TENDRIL_LB6_REV_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb6_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb6_affinity_key);
	__type(value, struct lb4_affinity_value);
	__uint(max_entries, TENDRIL_LB6_AFF_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb6_aff SEC(".maps");

/* lb4_frontend for IPv6. */
struct lb6_frontend {
	struct lb6_key key;
	struct lb4_service svc;
};

/*
 * The service an IPv6 packet addresses (its exact frontend), with the
 * INTERNAL scope of a TWO_SCOPES frontend for traffic from inside the
 * node, as lb4_lookup: 1 with *fe filled in, or 0.
 */
static __always_inline int lb6_lookup(const struct flow *f, struct lb6_frontend *fe, int internal)
{
	struct lb6_key *key = &fe->key;
	struct lb4_service *svc, *scoped;

	if (!lb4_proto_supported(f->proto))
		return 0;
	__builtin_memcpy(key->address, f->daddr6, 16);
	key->dport = f->dport;
	key->backend_slot = 0;
	key->proto = f->proto;
	key->scope = LB_SCOPE_EXTERNAL;
	key->pad = 0;
	svc = bpf_map_lookup_elem(&tendril_lb6_svc, key);
	if (!svc)
		return 0;
	if (internal && (svc->flags & SVC_F_TWO_SCOPES)) {
		key->scope = LB_SCOPE_INTERNAL;
		scoped = bpf_map_lookup_elem(&tendril_lb6_svc, key);
		if (scoped)
			svc = scoped;
		else
			key->scope = LB_SCOPE_EXTERNAL;
	}
	fe->svc = *svc;
	return 1;
}

/*
 * lb4_flow_hash for IPv6: MurmurHash3 (x86, 32 bits, seed 0) of ten
 * host-order words — the source address's four, the destination's four,
 * sport << 16 | dport, protocol. src/datapath/bpf/flowHash.ts flowHash6
 * is its twin.
 */
static __always_inline __u32 lb6_flow_hash(const struct flow *f)
{
	__u32 h = 0;
	int i;

	/* Rolled: unrolled, the eight rounds' temporaries spill onto the translation stage's stack. */
#pragma clang loop unroll(disable)
	for (i = 0; i < 4; i++)
		h = lb_hash_round(h, bpf_ntohl(f->saddr6[i]));
#pragma clang loop unroll(disable)
	for (i = 0; i < 4; i++)
		h = lb_hash_round(h, bpf_ntohl(f->daddr6[i]));
	h = lb_hash_round(h, ((__u32)bpf_ntohs(f->sport) << 16) | bpf_ntohs(f->dport));
	h = lb_hash_round(h, f->proto);
	h ^= 40;
	h ^= h >> 16;
	h *= 0x85ebca6bU;
	h ^= h >> 13;
	h *= 0xc2b2ae35U;
	h ^= h >> 16;
	return h;
}

/*
 * The backend the service's Maglev table (shared with IPv4, by service ID)
 * gives this flow; 0 without one. A global function: the hash's frame is
 * its own.
 */
__attribute__((noinline)) __u32 lb6_maglev_backend(const struct flow *f, __u16 rev_nat_index)
{
	__u32 outer = rev_nat_index, zero = 0, idx, *id;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);
	void *table;

	if (!f || !cfg || cfg->maglev_table_size == 0)
		return 0;
	idx = lb6_flow_hash(f) % cfg->maglev_table_size;
	table = bpf_map_lookup_elem(&tendril_lb4_mag, &outer);
	if (!table)
		return 0;
	id = bpf_map_lookup_elem(table, &idx);
	return id ? *id : 0;
}

static __always_inline __u32 lb6_random_backend(const struct lb6_key *key, __u16 count)
{
	struct lb6_key slot = *key;
	struct lb4_service *s;

	slot.backend_slot = (__u16)(bpf_get_prandom_u32() % count) + 1;
	s = bpf_map_lookup_elem(&tendril_lb6_svc, &slot);
	return s ? s->backend_id : 0;
}

/* bpf_loop's state while lb6_local_backend walks a service's slots. */
struct lb6_local_walk {
	struct lb6_key slot;
	__u32 start;
	__u32 count;
	__u32 found;
};

/* lb4_local_walk_step for IPv6. */
static long lb6_local_walk_step(__u32 i, void *ctx)
{
	struct lb6_local_walk *w = ctx;
	struct lb6_backend *be;
	struct lb4_service *s;
	__u32 id;

	if (w->count == 0)
		return 1;
	w->slot.backend_slot = (__u16)((w->start + i) % w->count) + 1;
	s = bpf_map_lookup_elem(&tendril_lb6_svc, &w->slot);
	if (!s)
		return 0;
	id = s->backend_id;
	be = bpf_map_lookup_elem(&tendril_lb6_be, &id);
	if (!be || !pod_endpoint_lookup6(be->address))
		return 0;
	w->found = id;
	return 1;
}

/*
 * lb4_local_backend for IPv6: a backend of this node from the slots, from
 * a random one on, or 0. A global function: the walk's state is in its
 * own frame.
 */
__attribute__((noinline)) __u32 lb6_local_backend(const struct lb6_key *key, __u16 count)
{
	struct lb6_local_walk w;

	if (!key || count == 0)
		return 0;
	__builtin_memset(&w, 0, sizeof(w));
	w.slot = *key;
	w.count = count;
	w.start = bpf_get_prandom_u32() % count;
	bpf_loop(count, lb6_local_walk_step, &w, 0);
	return w.found;
}

/*
 * lb4_affinity_backend for an IPv6 client, f's source (a global function
 * for the same reason; its key lives in its own frame, not in the
 * translation stage's, which holds a conntrack key already).
 */
__attribute__((noinline)) __u32 lb6_affinity_backend(const struct flow *f, __u16 rev_nat_index, __u32 timeout_s, __u64 now)
{
	struct lb6_affinity_key key = { .rev_nat_index = rev_nat_index, .pad = 0 };
	struct lb4_affinity_value *v;
	struct lb6_backend *be;
	__u32 id;

	if (!f)
		return 0;
	__builtin_memcpy(key.client, f->saddr6, 16);
	v = bpf_map_lookup_elem(&tendril_lb6_aff, &key);
	if (!v || now - v->last_used_ns > (__u64)timeout_s * NSEC_PER_SEC)
		return 0;
	id = v->backend_id;
	be = bpf_map_lookup_elem(&tendril_lb6_be, &id);
	if (!be || be->state != BACKEND_STATE_ACTIVE)
		return 0;
	return lb4_is_member(rev_nat_index, id) ? id : 0;
}

/* Records f's client's affinity to backend `id` (a global function: its key off the translation stage's frame). */
__attribute__((noinline)) int lb6_affinity_update(const struct flow *f, __u16 rev_nat_index, __u32 id, __u64 now)
{
	struct lb6_affinity_key key = { .rev_nat_index = rev_nat_index, .pad = 0 };
	struct lb4_affinity_value v = { .last_used_ns = now, .backend_id = id, .pad = 0 };

	if (!f)
		return 0;
	__builtin_memcpy(key.client, f->saddr6, 16);
	return bpf_map_update_elem(&tendril_lb6_aff, &key, &v, BPF_ANY) < 0 ? -1 : 0;
}

/*
 * lb4_service_ct_create for IPv6: the service entry in tendril_ct6_*,
 * under the client's tuple to the frontend (f's, before DNAT). A global
 * function: its key and entry sit in its own frame, not on top of the
 * translation stage's (the chain's 512 bytes).
 */
__attribute__((noinline)) int lb6_service_ct_create(const struct flow *f, __u16 rev_nat_index, __u32 id, __u64 now)
{
	union ct_key key;
	struct ct_entry e;

	if (!f)
		return DROP_CT_FULL;
	ct6_key_init(&key.k6, f->saddr6, f->daddr6, f->sport, f->dport, f->proto);
	key.k6.flags = CT_KEY_F_SERVICE;
	__builtin_memset(&e, 0, sizeof(e));
	e.flags = CT_F_SERVICE | ct_packet_flags(f, 0);
	if (f->proto == IPPROTO_TCP)
		e.tcp_flags = f->tcp_flags;
	e.expires_ns = now + ct_lifetime_ns(f->proto, e.flags, e.tcp_flags);
	e.packets = 1;
	e.bytes = f->len;
	e.rev_nat_index = rev_nat_index;
	e.backend_id = id;
	e.nat_port = f->dport;
	e.src_endpoint = f->src_endpoint;
	return ct_insert_family(&key, 1, &e);
}

/*
 * lb4_select for IPv6: the backend the service conntrack entry pins while
 * it exists and is still a member, else the affinity backend, the Maglev
 * table's (EXTERNAL scope) or a random slot, pinned in a new entry.
 */
static __always_inline struct lb6_backend *lb6_select(struct flow *f, const struct lb6_key *key, const struct lb4_service *svc, __u64 now,
						      int *reason)
{
	__u16 rev_nat_index = svc->rev_nat_index, count = svc->count;
	__u32 timeout_s = svc->affinity_timeout, id = 0;
	__u8 flags = svc->flags;
	struct lb6_backend *be = NULL;
	union ct_key ckey;
	struct ct_entry *e;
	int ret;

	if ((flags & SVC_F_SOURCE_RANGES) && !lb_src_range_ok6(rev_nat_index, f->saddr6)) {
		*reason = DROP_NOT_IN_SRC_RANGE;
		return NULL;
	}
	ct6_key_init(&ckey.k6, f->saddr6, f->daddr6, f->sport, f->dport, f->proto);
	ckey.k6.flags = CT_KEY_F_SERVICE;
	e = ct_key_find(&ckey, 1, now);
	if (e && e->rev_nat_index == rev_nat_index && e->backend_id && !lb4_port_reused(e, f)) {
		id = e->backend_id;
		be = bpf_map_lookup_elem(&tendril_lb6_be, &id);
		if (be && !lb4_is_member(rev_nat_index, id))
			be = NULL;
		if (be && f->lb_local_only && !pod_endpoint_lookup6(be->address))
			be = NULL;
		if (be)
			ct_refresh(e, f, 0, now);
	}
	if (!be) {
		id = 0;
		if (flags & SVC_F_AFFINITY)
			id = lb6_affinity_backend(f, rev_nat_index, timeout_s, now);
		if (!id && count == 0) {
			*reason = DROP_NO_SERVICE;
			return NULL;
		}
		if (!id && (flags & SVC_F_MAGLEV) && key->scope == LB_SCOPE_EXTERNAL)
			id = lb6_maglev_backend(f, rev_nat_index);
		if (!id)
			id = lb6_random_backend(key, count);
		be = id ? bpf_map_lookup_elem(&tendril_lb6_be, &id) : NULL;
		if (be && f->lb_local_only && !pod_endpoint_lookup6(be->address)) {
			id = lb6_local_backend(key, count);
			be = id ? bpf_map_lookup_elem(&tendril_lb6_be, &id) : NULL;
		}
		if (!be) {
			*reason = DROP_NO_SERVICE;
			return NULL;
		}
		ret = lb6_service_ct_create(f, rev_nat_index, id, now);
		if (ret < 0) {
			*reason = ret;
			return NULL;
		}
	}
	/* Best effort, as IPv4's: a full LRU map evicts, it does not refuse. */
	if (flags & SVC_F_AFFINITY)
		lb6_affinity_update(f, rev_nat_index, id, now);
	f->backend_id = id;
	f->rev_nat_index = rev_nat_index;
	__builtin_memcpy(f->nat_addr6, f->daddr6, 16);
	f->nat_port = f->dport;
	return be;
}

/*
 * Destination ← backend `id` (a later fragment keeps its ports); f
 * follows. A global function: the rewrite's frame is not stacked on the
 * selection's.
 */
__attribute__((noinline)) int lb6_dnat(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, __u32 id)
{
	struct lb6_backend *be;
	__be16 port;
	int ret;

	if (!f || !ip)
		return DROP_NO_SERVICE;
	be = bpf_map_lookup_elem(&tendril_lb6_be, &id);
	if (!be)
		return DROP_NO_SERVICE;
	port = be->port;
	ret = ipv6_rewrite_addr(skb, ip, f->proto, REWRITE_DST, f->daddr6, be->address);
	if (ret < 0)
		return ret;
	__builtin_memcpy(f->daddr6, be->address, 16);
	if (!port)
		return 0;
	if (!ipv6_is_later_fragment(ip)) {
		ret = ipv6_rewrite_port(skb, ip, f->proto, REWRITE_DST, f->dport, port);
		if (ret < 0)
			return ret;
	}
	f->dport = port;
	return 0;
}

/* lb4_translate for IPv6: backend selected, then DNAT. 0, or the drop reason. */
__stage int lb6_translate(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, const struct lb6_frontend *fe, __u64 now)
{
	struct lb6_backend *be;
	int reason = 0;

	if (!f || !ip || !fe)
		return DROP_NO_SERVICE;
	be = lb6_select(f, &fe->key, &fe->svc, now, &reason);
	if (!be)
		return reason;
	return lb6_dnat(skb, f, ip, f->backend_id);
}

/*
 * lb4_hairpin_snat for IPv6: a pod whose service chose itself gets the
 * source LB_HAIRPIN_IP6 and the flow CT_F_HAIRPIN, so replies get both
 * addresses back (lb6_rev_nat_ct).
 */
static __always_inline int lb6_hairpin_snat(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip)
{
	__be32 hairpin[4] = { bpf_htonl(LB_HAIRPIN_IP6_W0), bpf_htonl(LB_HAIRPIN_IP6_W1), bpf_htonl(LB_HAIRPIN_IP6_W2),
			      bpf_htonl(LB_HAIRPIN_IP6_W3) };
	int ret;

	if (!ipv6_addr_equal(f->daddr6, f->saddr6))
		return 0;
	ret = ipv6_rewrite_addr(skb, ip, f->proto, REWRITE_SRC, f->saddr6, hairpin);
	if (ret < 0)
		return ret;
	__builtin_memcpy(f->saddr6, hairpin, 16);
	f->ct_flags |= CT_F_HAIRPIN;
	return 0;
}

/* Adds `diff` (or old → new, 2 bytes) to the 16-bit checksum at `off`; 0, or DROP_WRITE_ERROR. */
static __always_inline int lb6_csum_add(struct __sk_buff *skb, __u32 off, __be32 from, __be32 to, __u64 flags)
{
	return bpf_l4_csum_replace(skb, off, from, to, flags) < 0 ? DROP_WRITE_ERROR : 0;
}

/*
 * An ICMPv6 error about a service flow's original direction, on its way to
 * the client (lb4_rev_nat_icmp for IPv6): the datagram it carries (client
 * → backend) becomes client → frontend, its L4 checksum following when the
 * error carries it, and the outer source becomes the frontend when the
 * backend sent the error. The ICMPv6 checksum covers the embedded bytes
 * and the outer pseudo-header: every change is added to it. A hairpin's
 * error is left as it is (its client is the backend). A global function:
 * its frame is not stacked on the reverse NAT stage's.
 */
__attribute__((noinline)) int lb6_rev_nat_icmp(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, const struct lb6_reverse_nat *rev)
{
	__u32 icmp_csum, inner = 0, l4 = 0, l4_csum = 0;
	__be16 fport, bport, old_sum = 0, new_sum = 0;
	__s64 diff;
	int ret;

	if (!f || !ip || !rev || !f->has_inner || (f->ct_flags & CT_F_HAIRPIN))
		return 0;
	icmp_csum = ip->l4_off + 2;
	inner = ip->l4_off + 8;
	l4 = inner + 40;
	fport = f->nat_port ? f->nat_port : rev->port;
	bport = f->inner_dport;
	if (inner + 40 > ip->ip_end || icmp_csum + 2 > ip->ip_end)
		return DROP_WRITE_ERROR;
	diff = bpf_csum_diff(f->inner_daddr6, 16, (__be32 *)rev->address, 16, 0);
	if (diff < 0)
		return DROP_WRITE_ERROR;
	/* The embedded datagram's own checksum (pseudo-header: its destination; its port), when it is there and not UDP's "none". */
	if (f->inner_proto == IPPROTO_TCP || f->inner_proto == IPPROTO_UDP) {
		l4_csum = l4 + (f->inner_proto == IPPROTO_TCP ? 16 : 6);
		if (l4_csum + 2 > ip->ip_end || bpf_skb_load_bytes(skb, l4_csum, &old_sum, 2) < 0 || (f->inner_proto == IPPROTO_UDP && old_sum == 0))
			l4_csum = 0;
	}
	if (l4_csum) {
		ret = lb6_csum_add(skb, l4_csum, 0, (__u32)diff, 0);
		if (ret == 0 && fport && fport != bport)
			ret = lb6_csum_add(skb, l4_csum, bport, fport, 2);
		if (ret == 0 && bpf_skb_load_bytes(skb, l4_csum, &new_sum, 2) < 0)
			ret = DROP_WRITE_ERROR;
		if (ret == 0)
			ret = lb6_csum_add(skb, icmp_csum, old_sum, new_sum, 2);
		if (ret < 0)
			return ret;
	}
	ret = lb6_csum_add(skb, icmp_csum, 0, (__u32)diff, 0);
	if (ret == 0 && bpf_skb_store_bytes(skb, inner + offsetof(struct ipv6hdr, daddr), rev->address, 16, 0) < 0)
		ret = DROP_WRITE_ERROR;
	if (ret < 0)
		return ret;
	if (fport && fport != bport && l4 + 4 <= ip->ip_end && (f->inner_proto == IPPROTO_TCP || f->inner_proto == IPPROTO_UDP)) {
		ret = lb6_csum_add(skb, icmp_csum, bport, fport, 2);
		if (ret == 0 && bpf_skb_store_bytes(skb, l4 + 2, &fport, 2, 0) < 0)
			ret = DROP_WRITE_ERROR;
		if (ret < 0)
			return ret;
		f->inner_dport = fport;
	}
	/* The outer source when the backend itself sent the error (a router on the way keeps its own). */
	if (ipv6_addr_equal(f->saddr6, f->inner_daddr6)) {
		ret = ipv6_rewrite_addr(skb, ip, IPPROTO_ICMPV6, REWRITE_SRC, f->saddr6, rev->address);
		if (ret < 0)
			return ret;
		__builtin_memcpy(f->saddr6, rev->address, 16);
	}
	__builtin_memcpy(f->inner_daddr6, rev->address, 16);
	return 0;
}

/*
 * A reply of an IPv6 service flow (conntrack REPLY): source ← the frontend,
 * from the service's reverse NAT entry (none: the service is gone, nothing
 * to undo), and the port the client addressed; a hairpin reply also gets
 * destination ← the client (its own source). An ICMPv6 error about the
 * flow's original direction (RELATED) is translated by lb6_rev_nat_icmp.
 * f follows.
 */
__stage int lb6_rev_nat_ct(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, enum ct_status status)
{
	struct lb6_reverse_nat *rev;
	__u16 idx;
	__be32 front[4];
	__be16 port;
	int ret;

	if (!f || !ip || !f->rev_nat_index || (status != CT_REPLY && status != CT_RELATED))
		return 0;
	idx = f->rev_nat_index;
	rev = bpf_map_lookup_elem(&tendril_lb6_rev, &idx);
	if (!rev)
		return 0;
	if (status == CT_RELATED)
		return f->related_orig ? lb6_rev_nat_icmp(skb, f, ip, rev) : 0;
	__builtin_memcpy(front, rev->address, 16);
	port = f->nat_port ? f->nat_port : rev->port;
	/* A hairpin's client is the backend itself: its own address back as destination. */
	if (f->ct_flags & CT_F_HAIRPIN) {
		ret = ipv6_rewrite_addr(skb, ip, f->proto, REWRITE_DST, f->daddr6, f->saddr6);
		if (ret < 0)
			return ret;
		__builtin_memcpy(f->daddr6, f->saddr6, 16);
	}
	ret = ipv6_rewrite_addr(skb, ip, f->proto, REWRITE_SRC, f->saddr6, front);
	if (ret < 0)
		return ret;
	__builtin_memcpy(f->saddr6, front, 16);
	__builtin_memcpy(f->nat_addr6, front, 16);
	if (!port || ipv6_is_later_fragment(ip)) {
		if (port)
			f->sport = port;
		return 0;
	}
	ret = ipv6_rewrite_port(skb, ip, f->proto, REWRITE_SRC, f->sport, port);
	if (ret < 0)
		return ret;
	f->sport = port;
	return 0;
}

#endif
