// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Conntrack and SNAT garbage collection, run by the agent with
 * BPF_PROG_TEST_RUN (never attached): the walk happens in the kernel on a
 * libuv pool thread, so its cost, which grows with the tables, is never
 * paid on the agent's event loop.
 *
 *   tendril_ct_gc — one run walks one map (gc_run.map) with
 *     bpf_for_each_map_elem, deleting in the callback (a hash map lets the
 *     callback delete elements, the current one included):
 *     - conntrack (IPv4 and IPv6 tables): entries whose deadline passed (expires_ns <= now, what
 *       ct_lookup_key already ignores); a CT_F_CHARGED entry gives its
 *       count back to its endpoint's tendril_ct_budget entry.
 *     - SNAT (tendril_snat4, tendril_snat6): a mapping whose flow is gone (no conntrack entry for the
 *       EGRESS key's tuple, or an expired one) goes, both sides; an INGRESS
 *       side whose EGRESS side is gone is an orphan and goes alone. Both
 *       only once older than gc_run.grace_ns: a mapping is made just before
 *       its flow's conntrack entry.
 *     With GC_F_COUNT_ONLY it counts the entries and deletes nothing.
 *
 * The agent hands a run GC_BATCH keys at a time (gc_run.keys, fetched
 * with the map's own key walk): each run looks up and judges just those.
 * A whole-table bpf_for_each_map_elem would be one read-side critical
 * section as long as the table (a quarter second for a million entries),
 * and every synchronize_rcu on the machine — an ADD attaching a pod's
 * programs, a netns going — would wait for it. The walk is not a snapshot:
 * an entry moved by concurrent inserts and deletes may be seen twice or not
 * at all, and is then handled by the next pass.
 *
 * Entry counts (map pressure) come from the kernel's own per-CPU element
 * counters (bpf_map_sum_elem_count, Linux 6.6): a GC_F_COUNT_ONLY run costs
 * the same for an empty table and a full one, and every run ends with the
 * count of what it left.
 *
 * The run's input and results are the object's global data (gc_run, in its
 * .bss map, never pinned): each loaded object has its own, and the agent
 * runs one at a time. The object declares every pinned map, as the others
 * do, so the loader gives it the same sizes and it shares their pins.
 */
#include <linux/in.h>

#include "common.h"
#include "config.h"
#include "conntrack.h"
#include "devices.h"
#include "endpoints.h"
#include "events.h"
#include "ipcache.h"
#include "lb.h"
#include "metrics.h"
#include "nat.h"
#include "nat6.h"
#include "policy.h"

struct gc_sample {
	struct ct4_key key;   /* map GC_MAP_CT_TCP or GC_MAP_CT_ANY */
	struct ct6_key key6;  /* map GC_MAP_CT6_TCP or GC_MAP_CT6_ANY */
	struct ct_entry entry;
	__u8 map; /* GC_MAP_* */
	__u8 pad[7];
};

struct gc_run {
	/* input */
	__u64 now_ns;   /* CLOCK_MONOTONIC; 0 = bpf_ktime_get_ns() */
	__u64 grace_ns; /* SNAT mappings younger than this are left alone */
	__u32 map;      /* GC_MAP_* */
	__u32 flags;    /* GC_F_* */
	/* output */
	__u32 scanned;   /* entries looked at (SNAT: with reply sides removed with their mapping before the walk reached them) */
	__u32 removed;   /* entries deleted */
	__u32 mappings;  /* SNAT: mappings removed (EGRESS sides, their INGRESS side with them) */
	__u32 orphans;   /* SNAT: INGRESS sides removed without an EGRESS side */
	__u32 given_back; /* charged conntrack entries given back to their endpoint's budget */
	__u32 samples;   /* entries of sample[] filled */
	__u64 entries;   /* the map's entries when the run ended (the kernel's count) */
	struct gc_sample sample[GC_SAMPLE_MAX];
	/* input: the keys this run judges (ct4_key and nat4_key are both 16 bytes) */
	__u32 nkeys;
	__u32 pad;
	struct ct4_key keys[GC_BATCH];
	/* input: the keys of a run over an IPv6 table, conntrack or SNAT (40 bytes each) */
	struct ct6_key keys6[GC_BATCH];
};

_Static_assert(sizeof(struct ct4_key) == sizeof(struct nat4_key), "gc_run.keys holds both key kinds");
_Static_assert(sizeof(struct ct6_key) == sizeof(struct nat6_key), "gc_run.keys6 holds both IPv6 key kinds");

struct gc_run gc_run;

/* What the callbacks share with the program (on its stack). */
struct gc_walk {
	__u64 now;
	__u64 grace;
	__u32 scanned;
	__u32 removed;
	__u32 mappings;
	__u32 orphans;
	__u32 given_back;
	__u8 map;
};

/* Compare-and-swap attempts before a budget decrement is given up (another CPU changing the count each time). */
#define GC_BUDGET_TRIES 8

/* One entry less for the endpoint a charged conntrack entry counted against, never below 0. */
static __always_inline int gc_give_back(const struct ct_entry *e)
{
	__u32 endpoint = e->src_endpoint ? e->src_endpoint : e->dst_endpoint;
	struct ct_budget *b;
	__u32 i, old;

	b = bpf_map_lookup_elem(&tendril_ct_budget, &endpoint);
	if (!b)
		return 0;
	for (i = 0; i < GC_BUDGET_TRIES; i++) {
		old = b->entries;
		if (old == 0)
			return 0;
		if (__sync_val_compare_and_swap(&b->entries, old, old - 1) == old)
			return 1;
	}
	return 0;
}

/* A removed flow for the run's sample: `key` is a struct ct6_key when v6, else a struct ct4_key. */
static __always_inline void gc_sample_flow(__u8 map, const void *key, int v6, const struct ct_entry *e)
{
	__u32 n = gc_run.samples;

	if (n >= GC_SAMPLE_MAX)
		return;
	if (v6)
		gc_run.sample[n].key6 = *(const struct ct6_key *)key;
	else
		gc_run.sample[n].key = *(const struct ct4_key *)key;
	gc_run.sample[n].entry = *e;
	gc_run.sample[n].map = map;
	gc_run.samples = n + 1;
}

/* Removes a conntrack entry whose deadline passed (either family's table: `key` as gc_sample_flow's). */
static __always_inline void gc_ct_judge(void *map, const void *key, int v6, struct ct_entry *e, struct gc_walk *w)
{
	struct ct_entry seen;

	w->scanned++;
	if (e->expires_ns > w->now)
		return;
	/* The value as it was: the element is back on the free list once deleted. */
	seen = *e;
	if (bpf_map_delete_elem(map, key) < 0)
		return;
	w->removed++;
	if ((seen.flags & CT_F_CHARGED) && gc_give_back(&seen))
		w->given_back++;
	gc_sample_flow(w->map, key, v6, &seen);
}

/* Whether the flow a mapping's EGRESS key names (conntrack keys it the same way) has a live conntrack entry. */
static __always_inline int gc_flow_alive(const struct nat4_key *k, __u64 now)
{
	struct ct4_key ck;
	struct ct_entry *e;

	__builtin_memset(&ck, 0, sizeof(ck));
	ck.saddr = k->saddr;
	ck.daddr = k->daddr;
	ck.sport = k->sport;
	ck.dport = k->dport;
	ck.proto = k->proto;
	if (k->proto == IPPROTO_TCP)
		e = bpf_map_lookup_elem(&tendril_ct4_tcp, &ck);
	else
		e = bpf_map_lookup_elem(&tendril_ct4_any, &ck);
	return e && e->expires_ns > now;
}

/* A mapping made less than the grace period ago (or, with a "now" from the caller, after it). */
static __always_inline int gc_young(const struct nat4_entry *v, const struct gc_walk *w)
{
	return v->created_ns + w->grace > w->now;
}

/* The INGRESS key snat4_mapping pairs with an EGRESS key and the translation it gave. */
static __always_inline void gc_ingress_of(struct nat4_key *rkey, const struct nat4_key *k, const struct nat4_entry *v)
{
	nat4_key_init(rkey, k->daddr, v->to_addr, k->dport, v->to_port, k->proto, NAT_DIR_INGRESS);
}

/* The EGRESS key an INGRESS key and its original source came from. */
static __always_inline void gc_egress_of(struct nat4_key *okey, const struct nat4_key *k, const struct nat4_entry *v)
{
	nat4_key_init(okey, v->to_addr, k->saddr, v->to_port, k->sport, k->proto, NAT_DIR_EGRESS);
}

static long gc_snat_entry(void *map, struct nat4_key *key, struct nat4_entry *v, struct gc_walk *w)
{
	struct nat4_key other;
	struct nat4_entry *peer, *back;

	w->scanned++;
	if (gc_young(v, w))
		return 0;
	if (key->dir == NAT_DIR_EGRESS) {
		if (gc_flow_alive(key, w->now))
			return 0;
		/* The reply side first: a late reply then finds no mapping rather than half of one. */
		gc_ingress_of(&other, key, v);
		back = bpf_map_lookup_elem(&tendril_snat4, &other);
		if (back && back->to_addr == key->saddr && back->to_port == key->sport && bpf_map_delete_elem(&tendril_snat4, &other) == 0) {
			/* Removed before the walk reached it (or after it kept it): counted as looked at. */
			w->scanned++;
			w->removed++;
		}
		if (bpf_map_delete_elem(map, key) < 0)
			return 0;
		w->removed++;
		w->mappings++;
		return 0;
	}
	gc_egress_of(&other, key, v);
	peer = bpf_map_lookup_elem(&tendril_snat4, &other);
	if (peer && peer->to_addr == key->daddr && peer->to_port == key->dport) {
		/* A whole mapping: it goes (or stays) with its EGRESS side, by that side's flow and age. */
		if (gc_young(peer, w) || gc_flow_alive(&other, w->now))
			return 0;
		if (bpf_map_delete_elem(map, key) == 0)
			w->removed++;
		return 0;
	}
	if (bpf_map_delete_elem(map, key) == 0) {
		w->removed++;
		w->orphans++;
	}
	return 0;
}

/* gc_flow_alive for an IPv6 mapping's EGRESS key. */
static __always_inline int gc_flow6_alive(const struct nat6_key *k, __u64 now)
{
	struct ct6_key ck;
	struct ct_entry *e;

	ct6_key_init(&ck, k->saddr, k->daddr, k->sport, k->dport, k->proto);
	if (k->proto == IPPROTO_TCP)
		e = bpf_map_lookup_elem(&tendril_ct6_tcp, &ck);
	else
		e = bpf_map_lookup_elem(&tendril_ct6_any, &ck);
	return e && e->expires_ns > now;
}

static __always_inline int gc_young6(const struct nat6_entry *v, const struct gc_walk *w)
{
	return v->created_ns + w->grace > w->now;
}

/* gc_snat_entry for tendril_snat6: the same rules (a mapping goes with its flow, an orphaned reply side alone). */
static long gc_snat6_entry(struct nat6_key *key, struct nat6_entry *v, struct gc_walk *w)
{
	struct nat6_key other;
	struct nat6_entry *peer, *back;

	w->scanned++;
	if (gc_young6(v, w))
		return 0;
	if (key->dir == NAT_DIR_EGRESS) {
		if (gc_flow6_alive(key, w->now))
			return 0;
		nat6_key_init(&other, key->daddr, v->to_addr, key->dport, v->to_port, key->proto, NAT_DIR_INGRESS);
		back = bpf_map_lookup_elem(&tendril_snat6, &other);
		if (back && nat6_entry_is(back, key->saddr, key->sport) && bpf_map_delete_elem(&tendril_snat6, &other) == 0) {
			w->scanned++;
			w->removed++;
		}
		if (bpf_map_delete_elem(&tendril_snat6, key) < 0)
			return 0;
		w->removed++;
		w->mappings++;
		return 0;
	}
	nat6_key_init(&other, v->to_addr, key->saddr, v->to_port, key->sport, key->proto, NAT_DIR_EGRESS);
	peer = bpf_map_lookup_elem(&tendril_snat6, &other);
	if (peer && nat6_entry_is(peer, key->daddr, key->dport)) {
		if (gc_young6(peer, w) || gc_flow6_alive(&other, w->now))
			return 0;
		if (bpf_map_delete_elem(&tendril_snat6, key) == 0)
			w->removed++;
		return 0;
	}
	if (bpf_map_delete_elem(&tendril_snat6, key) == 0) {
		w->removed++;
		w->orphans++;
	}
	return 0;
}

/* The kernel's count of a hash map's elements (per-CPU counters summed). */
struct bpf_map {
	int id;
} __attribute__((preserve_access_index));
extern __s64 bpf_map_sum_elem_count(const struct bpf_map *map) __ksym;

/* One key of the run's batch: looked up in its map, then judged as the map's entries are. */
static long gc_key(__u32 i, struct gc_walk *w)
{
	struct ct4_key *key;
	void *value;

	if (i >= GC_BATCH)
		return 1;
	key = &gc_run.keys[i];
	switch (w->map) {
	case GC_MAP_CT_TCP:
		value = bpf_map_lookup_elem(&tendril_ct4_tcp, key);
		if (value)
			gc_ct_judge(&tendril_ct4_tcp, key, 0, value, w);
		break;
	case GC_MAP_CT_ANY:
		value = bpf_map_lookup_elem(&tendril_ct4_any, key);
		if (value)
			gc_ct_judge(&tendril_ct4_any, key, 0, value, w);
		break;
	case GC_MAP_SNAT:
		value = bpf_map_lookup_elem(&tendril_snat4, key);
		if (value)
			gc_snat_entry(&tendril_snat4, (struct nat4_key *)key, value, w);
		break;
	default:
		return 1;
	}
	return 0;
}

/* gc_key for a run over an IPv6 table (conntrack or SNAT): its keys are gc_run.keys6. A callback of its own, verified apart from gc_key's. */
static long gc_key6(__u32 i, struct gc_walk *w)
{
	struct ct6_key *key;
	void *map, *value;

	if (i >= GC_BATCH)
		return 1;
	key = &gc_run.keys6[i];
	if (w->map == GC_MAP_SNAT6) {
		value = bpf_map_lookup_elem(&tendril_snat6, key);
		if (value)
			gc_snat6_entry((struct nat6_key *)key, value, w);
		return 0;
	}
	map = w->map == GC_MAP_CT6_TCP ? (void *)&tendril_ct6_tcp : (void *)&tendril_ct6_any;
	value = bpf_map_lookup_elem(map, key);
	if (value)
		gc_ct_judge(map, key, 1, value, w);
	return 0;
}

SEC("tc")
int tendril_ct_gc(struct __sk_buff *skb)
{
	struct gc_run *run = &gc_run;
	int count_only = run->flags & GC_F_COUNT_ONLY;
	__u32 nkeys = run->nkeys;
	struct gc_walk w;
	void *map;

	__builtin_memset(&w, 0, sizeof(w));
	w.now = run->now_ns ? run->now_ns : bpf_ktime_get_ns();
	w.grace = run->grace_ns;
	w.map = run->map;
	run->samples = 0;

	switch (run->map) {
	case GC_MAP_CT_TCP:
		map = &tendril_ct4_tcp;
		break;
	case GC_MAP_CT_ANY:
		map = &tendril_ct4_any;
		break;
	case GC_MAP_CT6_TCP:
		map = &tendril_ct6_tcp;
		break;
	case GC_MAP_CT6_ANY:
		map = &tendril_ct6_any;
		break;
	case GC_MAP_SNAT:
		map = &tendril_snat4;
		break;
	case GC_MAP_SNAT6:
		map = &tendril_snat6;
		break;
	default:
		return TC_ACT_SHOT;
	}
	if (!count_only && nkeys > 0) {
		if (run->map == GC_MAP_CT6_TCP || run->map == GC_MAP_CT6_ANY || run->map == GC_MAP_SNAT6)
			bpf_loop(nkeys < GC_BATCH ? nkeys : GC_BATCH, gc_key6, &w, 0);
		else
			bpf_loop(nkeys < GC_BATCH ? nkeys : GC_BATCH, gc_key, &w, 0);
	}

	run->scanned = w.scanned;
	run->removed = w.removed;
	run->mappings = w.mappings;
	run->orphans = w.orphans;
	run->given_back = w.given_back;
	run->entries = bpf_map_sum_elem_count(map);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual BSD/GPL";
