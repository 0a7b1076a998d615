/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/conntrack.h: a flow's entry created, found in both directions,
 * its flags and lifetime as TCP closes, a SYN reopening a closed tuple, an
 * expired entry opening nothing, and a full table refusing a new flow. The
 * flows are built here (no packet): conntrack reads only struct flow, and
 * the clock is an argument, so expiry is tested by passing a later time.
 */
#include "common.h"
#include "conntrack.h"
#include "test.h"

/* ---- the functions under test: every call to conntrack.h is in this block ---- */

static __always_inline int ut_ct_create(const struct flow *f, __u64 now)
{
	return ct_create(f, now);
}

static __always_inline enum ct_status ut_ct_lookup(struct flow *f, __u64 now)
{
	return ct_lookup(f, now);
}

/* The entry stored under the flow's tuple as given (no expiry check: the map's state). */
static __always_inline struct ct_entry *ut_ct_entry(const struct flow *f)
{
	struct ct4_key key;

	ct_key_init(&key, f->saddr, f->daddr, f->sport, f->dport, f->proto);
	return ct_map_lookup(&key);
}

static __always_inline int ut_ct_closed(const struct ct_entry *e)
{
	return ct_entry_closed(e);
}

/* Entries charged to endpoint `ep` (--bpf-ct-endpoint-max), or -1 without a counter. */
static __always_inline __s64 ut_ct_charged(__u32 ep)
{
	struct ct_budget *b = bpf_map_lookup_elem(&tendril_ct_budget, &ep);

	return b ? b->entries : -1;
}

/* SETUP: the agent's --bpf-ct-endpoint-max in tendril_config. */
static __always_inline int ut_seed_endpoint_max(__u32 max)
{
	struct datapath_config cfg;
	__u32 zero = 0;

	__builtin_memset(&cfg, 0, sizeof(cfg));
	cfg.ct_endpoint_max = max;
	return bpf_map_update_elem(&tendril_config, &zero, &cfg, BPF_ANY) == 0 ? TEST_PASS : TEST_ERROR;
}

/* ---- fixtures ---- */

#define CLIENT bpf_htonl(0x0a000105) /* 10.0.1.5 */
#define SERVER bpf_htonl(0x0a000207) /* 10.0.2.7 */
#define CLIENT_ID 1001
#define SERVER_ID 1002
#define CLIENT_EP 17
#define T0 (1000 * NSEC_PER_SEC)

/* A packet of the flow client:sport → server:dport (reply = the other way), as parsing leaves it. */
static __always_inline void flow_of(struct flow *f, __u8 proto, __u16 sport, __u16 dport, __u8 tcp_flags, int reply)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = 4;
	f->proto = proto;
	f->tcp_flags = tcp_flags;
	f->len = 60;
	f->saddr = reply ? SERVER : CLIENT;
	f->daddr = reply ? CLIENT : SERVER;
	f->sport = bpf_htons(reply ? dport : sport);
	f->dport = bpf_htons(reply ? sport : dport);
	f->src_identity = reply ? SERVER_ID : CLIENT_ID;
	f->dst_identity = reply ? CLIENT_ID : SERVER_ID;
	f->src_endpoint = reply ? 0 : CLIENT_EP;
}

/* A new TCP flow: one lookup finds nothing, the entry is created, then found as the original direction and as the reply. */
CHECK(ct_create_and_lookup_both_ways)
{
	struct flow f, r;
	struct ct_entry *e;

	flow_of(&f, IPPROTO_TCP, 40000, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0), CT_NEW);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	e = ut_ct_entry(&f);
	ASSERT(e != NULL);
	ASSERT_EQ(e->expires_ns, T0 + CT_TIMEOUT_TCP_SYN * NSEC_PER_SEC);
	ASSERT_EQ(e->packets, 1);
	ASSERT_EQ(e->tcp_flags, TCP_FLAG_SYN);
	ASSERT_EQ(e->flags, 0);
	ASSERT_EQ(e->src_identity, CLIENT_ID);
	ASSERT_EQ(e->src_endpoint, CLIENT_EP);

	/* The SYN retransmitted: the original direction, the lifetime still the SYN's. */
	flow_of(&f, IPPROTO_TCP, 40000, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_ESTABLISHED);
	ASSERT_EQ(f.src_endpoint, CLIENT_EP);
	ASSERT_EQ(e->packets, 2);
	ASSERT_EQ(e->expires_ns, T0 + 1 + CT_TIMEOUT_TCP_SYN * NSEC_PER_SEC);

	/* The SYN-ACK finds the entry reversed: identities and endpoints as the reply sees them, the flow established. */
	flow_of(&r, IPPROTO_TCP, 40000, 80, TCP_FLAG_SYN | TCP_FLAG_ACK, 1);
	r.src_identity = 0;
	r.dst_identity = 0;
	ASSERT_EQ(ut_ct_lookup(&r, T0 + 2), CT_REPLY);
	ASSERT_EQ(r.src_identity, SERVER_ID);
	ASSERT_EQ(r.dst_identity, CLIENT_ID);
	ASSERT_EQ(r.dst_endpoint, CLIENT_EP);
	ASSERT_EQ(e->packets, 3);
	ASSERT_EQ(e->flags, CT_F_REPLY_SEEN);
	ASSERT_EQ(e->expires_ns, T0 + 2 + CT_TIMEOUT_TCP_ESTABLISHED * NSEC_PER_SEC);
	/* Only one entry: the reply made none under its own tuple. */
	ASSERT(ut_ct_entry(&r) == NULL);

	/* The same ports from the server's side are another flow. */
	flow_of(&f, IPPROTO_TCP, 80, 40000, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 3), CT_NEW);
	return TEST_PASS;
}

/* FIN one way makes the flow closing (short lifetime) but not closed; FIN the other way closes it. */
CHECK(ct_fin_both_ways_closes)
{
	struct flow f;
	struct ct_entry *e;

	flow_of(&f, IPPROTO_TCP, 40001, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	flow_of(&f, IPPROTO_TCP, 40001, 80, TCP_FLAG_SYN | TCP_FLAG_ACK, 1);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_REPLY);
	e = ut_ct_entry(&(struct flow){ .saddr = CLIENT, .daddr = SERVER, .sport = bpf_htons(40001), .dport = bpf_htons(80), .proto = IPPROTO_TCP });
	ASSERT(e != NULL);
	ASSERT(!ut_ct_closed(e));

	flow_of(&f, IPPROTO_TCP, 40001, 80, TCP_FLAG_FIN | TCP_FLAG_ACK, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 2), CT_ESTABLISHED);
	ASSERT_EQ(e->flags, CT_F_REPLY_SEEN | CT_F_FIN_ORIGINAL | CT_F_CLOSING);
	ASSERT_EQ(e->expires_ns, T0 + 2 + CT_TIMEOUT_TCP_CLOSING * NSEC_PER_SEC);
	ASSERT(!ut_ct_closed(e));

	/* The peer's ACK alone neither closes it nor lengthens its life again. */
	flow_of(&f, IPPROTO_TCP, 40001, 80, TCP_FLAG_ACK, 1);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 3), CT_REPLY);
	ASSERT_EQ(e->expires_ns, T0 + 3 + CT_TIMEOUT_TCP_CLOSING * NSEC_PER_SEC);
	ASSERT(!ut_ct_closed(e));

	flow_of(&f, IPPROTO_TCP, 40001, 80, TCP_FLAG_FIN | TCP_FLAG_ACK, 1);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 4), CT_REPLY);
	ASSERT_EQ(e->flags, CT_F_REPLY_SEEN | CT_F_FIN_ORIGINAL | CT_F_FIN_REPLY | CT_F_CLOSING);
	ASSERT(ut_ct_closed(e));
	return TEST_PASS;
}

/* An RST from either side closes the flow at once. */
CHECK(ct_rst_closes)
{
	struct flow f;
	struct ct_entry *e;

	flow_of(&f, IPPROTO_TCP, 40002, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	e = ut_ct_entry(&f);
	ASSERT(e != NULL);
	flow_of(&f, IPPROTO_TCP, 40002, 443, TCP_FLAG_RST | TCP_FLAG_ACK, 1);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 5), CT_REPLY);
	ASSERT(e->flags & CT_F_CLOSING);
	ASSERT(e->tcp_flags & TCP_FLAG_RST);
	ASSERT(ut_ct_closed(e));
	ASSERT_EQ(e->expires_ns, T0 + 5 + CT_TIMEOUT_TCP_CLOSING * NSEC_PER_SEC);
	return TEST_PASS;
}

/*
 * A lone SYN on a closed tuple (a client port reused) is a new flow: the
 * lookup leaves the old entry as it was, and the new flow's creation
 * replaces it with a fresh one. A segment with ACK on it is still the old
 * connection's.
 */
CHECK(ct_syn_reopens_closed_entry)
{
	struct flow f;
	struct ct_entry *e;

	flow_of(&f, IPPROTO_TCP, 40003, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	flow_of(&f, IPPROTO_TCP, 40003, 80, TCP_FLAG_SYN | TCP_FLAG_ACK, 1);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_REPLY);
	flow_of(&f, IPPROTO_TCP, 40003, 80, TCP_FLAG_RST, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 2), CT_ESTABLISHED);
	e = ut_ct_entry(&f);
	ASSERT(e != NULL);
	ASSERT(ut_ct_closed(e));
	ASSERT_EQ(e->packets, 3);

	/* A late ACK of the old connection: still its flow, counted. */
	flow_of(&f, IPPROTO_TCP, 40003, 80, TCP_FLAG_ACK, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 3), CT_ESTABLISHED);
	ASSERT_EQ(e->packets, 4);

	/* The new SYN: new, and the closed entry untouched until the flow is created. */
	flow_of(&f, IPPROTO_TCP, 40003, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 4), CT_NEW);
	ASSERT_EQ(e->packets, 4);
	ASSERT(ut_ct_closed(e));
	ASSERT_EQ(ut_ct_create(&f, T0 + 4), 0);
	e = ut_ct_entry(&f);
	ASSERT(e != NULL);
	ASSERT_EQ(e->packets, 1);
	ASSERT_EQ(e->flags, 0);
	ASSERT_EQ(e->tcp_flags, TCP_FLAG_SYN);
	ASSERT(!ut_ct_closed(e));
	ASSERT_EQ(e->expires_ns, T0 + 4 + CT_TIMEOUT_TCP_SYN * NSEC_PER_SEC);
	return TEST_PASS;
}

/* An entry opens nothing from its deadline on: neither direction finds it, and a new flow replaces it. */
CHECK(ct_expired_entry_opens_nothing)
{
	__u64 deadline = T0 + CT_TIMEOUT_ANY * NSEC_PER_SEC;
	struct flow f;
	struct ct_entry *e;

	flow_of(&f, IPPROTO_UDP, 5353, 53, 0, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	e = ut_ct_entry(&f);
	ASSERT(e != NULL);
	ASSERT_EQ(e->expires_ns, deadline);

	flow_of(&f, IPPROTO_UDP, 5353, 53, 0, 1);
	ASSERT_EQ(ut_ct_lookup(&f, deadline), CT_NEW);
	flow_of(&f, IPPROTO_UDP, 5353, 53, 0, 0);
	ASSERT_EQ(ut_ct_lookup(&f, deadline), CT_NEW);
	/* Nothing refreshed it: still the old deadline, one packet. */
	ASSERT_EQ(e->expires_ns, deadline);
	ASSERT_EQ(e->packets, 1);

	/* One nanosecond before it, the reply finds it and extends it. */
	flow_of(&f, IPPROTO_UDP, 5353, 53, 0, 1);
	ASSERT_EQ(ut_ct_lookup(&f, deadline - 1), CT_REPLY);
	ASSERT_EQ(e->expires_ns, deadline - 1 + CT_TIMEOUT_ANY * NSEC_PER_SEC);

	/* Expired again: the flow's next packet creates it anew over the stale entry. */
	flow_of(&f, IPPROTO_UDP, 5353, 53, 0, 0);
	ASSERT_EQ(ut_ct_lookup(&f, deadline + CT_TIMEOUT_ANY * NSEC_PER_SEC), CT_NEW);
	ASSERT_EQ(ut_ct_create(&f, deadline + CT_TIMEOUT_ANY * NSEC_PER_SEC), 0);
	e = ut_ct_entry(&f);
	ASSERT(e != NULL);
	ASSERT_EQ(e->packets, 1);
	ASSERT_EQ(e->flags, 0);
	return TEST_PASS;
}

/* A TCP flow that only ever sent SYNs lives CT_TIMEOUT_TCP_SYN, not the established lifetime. */
CHECK(ct_unanswered_syn_expires)
{
	struct flow f;

	flow_of(&f, IPPROTO_TCP, 40004, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	flow_of(&f, IPPROTO_TCP, 40004, 80, TCP_FLAG_ACK, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_ESTABLISHED);
	flow_of(&f, IPPROTO_TCP, 40004, 80, TCP_FLAG_ACK, 1);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1 + CT_TIMEOUT_TCP_SYN * NSEC_PER_SEC), CT_NEW);
	return TEST_PASS;
}

#define ROUTER bpf_htonl(0x0a090909) /* 10.9.9.9 */

/* An ICMP error from ROUTER to `to` about the datagram client:sport → server:dport (reply: the other way). */
static __always_inline void icmp_error_of(struct flow *f, __be32 to, __u16 sport, __u16 dport, int reply)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = 4;
	f->proto = IPPROTO_ICMP;
	f->len = 70;
	f->saddr = ROUTER;
	f->daddr = to;
	f->icmp_error = 1;
	f->has_inner = 1;
	f->inner_proto = IPPROTO_TCP;
	f->inner_saddr = reply ? SERVER : CLIENT;
	f->inner_daddr = reply ? CLIENT : SERVER;
	f->inner_sport = bpf_htons(reply ? dport : sport);
	f->inner_dport = bpf_htons(reply ? sport : dport);
}

/*
 * An ICMP error is related to a tracked flow when the datagram it carries
 * is one its destination sent, in either direction of the flow; about the
 * original direction it takes the flow's translation back to the client.
 */
CHECK(ct_icmp_error_related)
{
	struct flow f;

	flow_of(&f, IPPROTO_TCP, 40005, 80, TCP_FLAG_SYN, 0);
	f.rev_nat_index = 9;
	ASSERT_EQ(ut_ct_create(&f, T0), 0);

	icmp_error_of(&f, CLIENT, 40005, 80, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_RELATED);
	ASSERT_EQ(f.related_orig, 1);
	ASSERT_EQ(f.rev_nat_index, 9);

	icmp_error_of(&f, SERVER, 40005, 80, 1);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_RELATED);
	ASSERT_EQ(f.related_orig, 0);

	/* Sent to someone who did not send the datagram inside: no reply to our flow. */
	icmp_error_of(&f, SERVER, 40005, 80, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_NEW);
	/* No tuple read from the error, or an untracked one. */
	icmp_error_of(&f, CLIENT, 40005, 80, 0);
	f.has_inner = 0;
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_NEW);
	icmp_error_of(&f, CLIENT, 40006, 80, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_NEW);
	/* Nor about an expired flow. */
	icmp_error_of(&f, CLIENT, 40005, 80, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + CT_TIMEOUT_TCP_SYN * NSEC_PER_SEC), CT_NEW);
	return TEST_PASS;
}

SETUP(ct_endpoint_budget)
{
	return ut_seed_endpoint_max(2);
}

/* An endpoint holds at most --bpf-ct-endpoint-max entries; a refused flow is charged nothing, other endpoints are not limited. */
CHECK(ct_endpoint_budget)
{
	struct flow f;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	flow_of(&f, IPPROTO_TCP, 41000, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	flow_of(&f, IPPROTO_UDP, 41001, 53, 0, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	ASSERT_EQ(ut_ct_charged(CLIENT_EP), 2);
	flow_of(&f, IPPROTO_TCP, 41002, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), DROP_CT_ENDPOINT_BUDGET);
	ASSERT(ut_ct_entry(&f) == NULL);
	ASSERT_EQ(ut_ct_charged(CLIENT_EP), 2);
	/* Opened by a peer that is no local endpoint, to another endpoint: charged to that one. */
	flow_of(&f, IPPROTO_TCP, 41003, 80, TCP_FLAG_SYN, 0);
	f.src_endpoint = 0;
	f.dst_endpoint = CLIENT_EP + 1;
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	ASSERT_EQ(ut_ct_charged(CLIENT_EP + 1), 1);
	return TEST_PASS;
}

/* Fills the TCP table with flows from distinct client ports until it refuses one. */
struct fill_ctx {
	__u32 created;
	int last;
};

static long ct_fill_step(__u32 i, void *data)
{
	struct fill_ctx *c = data;
	struct flow f;

	flow_of(&f, IPPROTO_TCP, (__u16)(1024 + i), 8080, TCP_FLAG_SYN, 0);
	c->last = ut_ct_create(&f, T0);
	if (c->last != 0)
		return 1;
	c->created++;
	return 0;
}

/* A full table refuses a new flow (DROP_CT_FULL) and evicts none of the flows it holds. */
CHECK(ct_full_table_refuses)
{
	struct fill_ctx c = { .created = 0, .last = 0 };
	struct flow f;

	bpf_loop(1 << 16, ct_fill_step, &c, 0);
	ASSERT_EQ(c.last, DROP_CT_FULL);
	ASSERT(c.created > 0);
	/* The first flow is still tracked. */
	flow_of(&f, IPPROTO_TCP, 1024, 8080, TCP_FLAG_ACK, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_ESTABLISHED);
	/* A flow of another protocol has its own table. */
	flow_of(&f, IPPROTO_UDP, 1024, 8080, 0, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
