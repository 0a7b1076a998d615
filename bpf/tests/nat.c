/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/nat.h, SNAT's port allocation (snat4_mapping): a flow's own
 * source port kept when it is free, a port held by a flow that is over
 * taken (a closed TCP connection's only NAT_CLOSED_REUSE_MS after its last
 * packet, a half-closed one's only when its entry expires, an untracked
 * mapping's after NAT_UNTRACKED_GRACE_S), exhaustion of the ports towards
 * one destination, and a full table refusing a new flow without evicting a
 * live one. The holders' conntrack entries are made by conntrack.h itself.
 */
#include "common.h"
#include "conntrack.h"
#include "nat.h"
#include "test.h"

#define NAT_ADDR bpf_htonl(0xc0a8000a) /* 192.168.0.10, the node's address */
#define PEER bpf_htonl(0x01010101)     /* 1.1.1.1 */
#define PEER2 bpf_htonl(0x08080808)    /* 8.8.8.8 */
#define POD(n) bpf_htonl(0x0a000100 + (n)) /* 10.0.1.n */
#define PORT_MIN 40000
#define PORT_MAX 40003 /* four ports: exhaustion is four flows away */
#define T0 (1000 * NSEC_PER_SEC)

/* ---- the functions under test: every call to nat.h and conntrack.h is in this block ---- */

static __always_inline int ut_snat(const struct flow *f, __u64 now, struct nat4_entry *out, int *created)
{
	return snat4_mapping(f, NAT_ADDR, NAT_F_MASQUERADE, now, out, created);
}

/* The mapping's original side: the tuple as it left the pod. */
static __always_inline struct nat4_entry *ut_nat_egress(const struct flow *f)
{
	struct nat4_key k;

	nat4_key_init(&k, f->saddr, f->daddr, f->sport, f->dport, f->proto, NAT_DIR_EGRESS);
	return bpf_map_lookup_elem(&tendril_snat4, &k);
}

/* The mapping's reply side: a reply from f's destination to the node's address and `port`. */
static __always_inline struct nat4_entry *ut_nat_ingress(const struct flow *f, __u16 port)
{
	struct nat4_key k;

	nat4_key_init(&k, f->daddr, NAT_ADDR, f->dport, bpf_htons(port), f->proto, NAT_DIR_INGRESS);
	return bpf_map_lookup_elem(&tendril_snat4, &k);
}

static __always_inline int ut_ct_create(const struct flow *f, __u64 now)
{
	return ct_create(f, now);
}

static __always_inline enum ct_status ut_ct_lookup(struct flow *f, __u64 now)
{
	return ct_lookup(f, now);
}

/* SETUP: SNAT's ports are PORT_MIN..PORT_MAX (the agent's --bpf-nat-ports in tendril_config). */
static __always_inline int ut_seed_ports(void)
{
	struct datapath_config cfg;
	__u32 zero = 0;

	__builtin_memset(&cfg, 0, sizeof(cfg));
	cfg.nat_ports[0].min = PORT_MIN;
	cfg.nat_ports[0].max = PORT_MAX;
	return bpf_map_update_elem(&tendril_config, &zero, &cfg, BPF_ANY) == 0 ? TEST_PASS : TEST_ERROR;
}

/* ---- fixtures ---- */

/* A packet from pod n's sport to dst:dport (reply: the other way), before SNAT. */
static __always_inline void flow_of(struct flow *f, __u8 pod, __u16 sport, __be32 dst, __u16 dport, __u8 tcp_flags, int reply)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = 4;
	f->proto = IPPROTO_TCP;
	f->tcp_flags = tcp_flags;
	f->len = 60;
	f->saddr = reply ? dst : POD(pod);
	f->daddr = reply ? POD(pod) : dst;
	f->sport = bpf_htons(reply ? dport : sport);
	f->dport = bpf_htons(reply ? sport : dport);
}

static __always_inline int port_in_range(__be16 port)
{
	return bpf_ntohs(port) >= PORT_MIN && bpf_ntohs(port) <= PORT_MAX;
}

SETUP(snat_keeps_free_port)
{
	return ut_seed_ports();
}

/* A pod's own source port is kept while no other flow to the same destination holds it. */
CHECK(snat_keeps_free_port)
{
	struct nat4_entry m, *e;
	struct flow f;
	int created;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	flow_of(&f, 5, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0, &m, &created), 0);
	ASSERT_EQ(created, 1);
	ASSERT_EQ(m.to_addr, NAT_ADDR);
	ASSERT_EQ(bpf_ntohs(m.to_port), 40001);
	/* Both sides recorded: the original tuple → node:40001, the reply tuple → the pod. */
	e = ut_nat_egress(&f);
	ASSERT(e != NULL);
	ASSERT_EQ(bpf_ntohs(e->to_port), 40001);
	e = ut_nat_ingress(&f, 40001);
	ASSERT(e != NULL);
	ASSERT_EQ(e->to_addr, POD(5));
	ASSERT_EQ(bpf_ntohs(e->to_port), 40001);
	ASSERT_EQ(e->flags, NAT_F_MASQUERADE);

	/* The flow's next packet finds its mapping. */
	ASSERT_EQ(ut_snat(&f, T0 + 1, &m, &created), 0);
	ASSERT_EQ(created, 0);
	ASSERT_EQ(bpf_ntohs(m.to_port), 40001);

	/* Another pod, same port and destination: another port of the range. */
	flow_of(&f, 6, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0 + 2, &m, &created), 0);
	ASSERT_EQ(created, 1);
	ASSERT(bpf_ntohs(m.to_port) != 40001);
	ASSERT(port_in_range(m.to_port));

	/* Towards another destination the port is free again. */
	flow_of(&f, 7, 40001, PEER2, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0 + 3, &m, &created), 0);
	ASSERT_EQ(bpf_ntohs(m.to_port), 40001);

	/* A source port outside SNAT's ranges is never kept. */
	flow_of(&f, 8, 1234, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0 + 4, &m, &created), 0);
	ASSERT(port_in_range(m.to_port));
	return TEST_PASS;
}

/* Pod 5's connection from port 40001 to PEER:80 mapped to node:40001, then reset by the peer at `last`. */
static __always_inline int reset_flow_holding_40001(__u64 last)
{
	struct nat4_entry m;
	struct flow f;
	int created;

	flow_of(&f, 5, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	if (ut_ct_create(&f, T0) != 0 || ut_snat(&f, T0, &m, &created) != 0 || bpf_ntohs(m.to_port) != 40001)
		return -1;
	flow_of(&f, 5, 40001, PEER, 80, TCP_FLAG_RST | TCP_FLAG_ACK, 1);
	return ut_ct_lookup(&f, last) == CT_REPLY ? 0 : -1;
}

SETUP(snat_closed_port_reused_after_delay)
{
	return ut_seed_ports();
}

/*
 * A reset connection's port goes to another flow NAT_CLOSED_REUSE_MS after
 * its last packet, not before (a new SYN could overtake the RST); the old
 * flow's own side of the mapping goes with it.
 */
CHECK(snat_closed_port_reused_after_delay)
{
	__u64 last = T0 + NSEC_PER_SEC, reuse = last + NAT_CLOSED_REUSE_MS * 1000000ULL;
	struct nat4_entry m, *e;
	struct flow f, old;
	int created;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	ASSERT_EQ(reset_flow_holding_40001(last), 0);
	flow_of(&old, 5, 40001, PEER, 80, 0, 0);

	/* One nanosecond early: the port stays the reset flow's. */
	flow_of(&f, 6, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, reuse - 1, &m, &created), 0);
	ASSERT(bpf_ntohs(m.to_port) != 40001);
	e = ut_nat_ingress(&f, 40001);
	ASSERT(e != NULL);
	ASSERT_EQ(e->to_addr, POD(5));
	ASSERT(ut_nat_egress(&old) != NULL);

	/* From then on, a new flow asking for it gets it. */
	flow_of(&f, 7, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, reuse, &m, &created), 0);
	ASSERT_EQ(created, 1);
	ASSERT_EQ(bpf_ntohs(m.to_port), 40001);
	e = ut_nat_ingress(&f, 40001);
	ASSERT(e != NULL);
	ASSERT_EQ(e->to_addr, POD(7));
	ASSERT(ut_nat_egress(&old) == NULL);
	return TEST_PASS;
}

SETUP(snat_half_closed_port_kept_until_expiry)
{
	return ut_seed_ports();
}

/* A FIN one way is no closed connection: its port waits for its conntrack entry to expire. */
CHECK(snat_half_closed_port_kept_until_expiry)
{
	__u64 last = T0 + NSEC_PER_SEC, expiry = last + CT_TIMEOUT_TCP_CLOSING * NSEC_PER_SEC;
	struct nat4_entry m;
	struct flow f;
	int created;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	flow_of(&f, 5, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	ASSERT_EQ(ut_snat(&f, T0, &m, &created), 0);
	ASSERT_EQ(bpf_ntohs(m.to_port), 40001);
	flow_of(&f, 5, 40001, PEER, 80, TCP_FLAG_FIN | TCP_FLAG_ACK, 0);
	ASSERT_EQ(ut_ct_lookup(&f, last), CT_ESTABLISHED);

	flow_of(&f, 6, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, expiry - 1, &m, &created), 0);
	ASSERT(bpf_ntohs(m.to_port) != 40001);

	flow_of(&f, 7, 40001, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, expiry, &m, &created), 0);
	ASSERT_EQ(bpf_ntohs(m.to_port), 40001);
	return TEST_PASS;
}

SETUP(snat_ports_exhausted)
{
	return ut_seed_ports();
}

/*
 * Four ports, four flows to one destination: each its own port, and the
 * fifth refused (DROP_NAT_PORT_EXHAUSTED) with nothing recorded for it,
 * until the untracked mappings' grace is over.
 */
CHECK(snat_ports_exhausted)
{
	struct nat4_entry m;
	struct flow f;
	__u32 seen = 0;
	int created;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	for (__u8 pod = 1; pod <= 4; pod++) {
		flow_of(&f, pod, 1000, PEER, 443, TCP_FLAG_SYN, 0);
		ASSERT_EQ(ut_snat(&f, T0, &m, &created), 0);
		ASSERT_EQ(created, 1);
		ASSERT(port_in_range(m.to_port));
		seen |= 1u << (bpf_ntohs(m.to_port) - PORT_MIN);
	}
	ASSERT_EQ(seen, 0xf);

	flow_of(&f, 5, 1000, PEER, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0 + 1, &m, &created), DROP_NAT_PORT_EXHAUSTED);
	ASSERT_EQ(created, 0);
	ASSERT(ut_nat_egress(&f) == NULL);

	/* Another destination has all its ports. */
	flow_of(&f, 5, 1000, PEER2, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0 + 1, &m, &created), 0);

	/* The mappings have no conntrack entry: past the grace, their ports are for the taking. */
	flow_of(&f, 5, 1000, PEER, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0 + NAT_UNTRACKED_GRACE_S * NSEC_PER_SEC, &m, &created), DROP_NAT_PORT_EXHAUSTED);
	ASSERT_EQ(ut_snat(&f, T0 + NAT_UNTRACKED_GRACE_S * NSEC_PER_SEC + 1, &m, &created), 0);
	ASSERT(port_in_range(m.to_port));
	return TEST_PASS;
}

/* Fills the SNAT table with reply-side entries of made-up peers until it refuses one. */
struct fill_ctx {
	__u32 inserted;
	int last;
};

static long nat_fill_step(__u32 i, void *data)
{
	struct nat4_entry v = { .created_ns = T0, .to_addr = POD(200), .to_port = bpf_htons(9), .flags = 0, .pad = 0 };
	struct fill_ctx *c = data;
	struct nat4_key k;

	nat4_key_init(&k, bpf_htonl(0x0b000000 + i), NAT_ADDR, bpf_htons(53), bpf_htons(50000), IPPROTO_UDP, NAT_DIR_INGRESS);
	c->last = bpf_map_update_elem(&tendril_snat4, &k, &v, BPF_NOEXIST);
	if (c->last != 0)
		return 1;
	c->inserted++;
	return 0;
}

/* A full table refuses a new flow (DROP_NAT_FULL) and keeps serving the mappings it holds. */
CHECK(snat_full_table_refuses)
{
	struct fill_ctx c = { .inserted = 0, .last = 0 };
	struct nat4_entry m, first;
	struct flow f;
	int created;

	flow_of(&f, 5, 33333, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0, &m, &created), 0);
	first = m;

	bpf_loop(1 << 20, nat_fill_step, &c, 0);
	ASSERT_EQ(c.last, -E2BIG);
	ASSERT(c.inserted > 0);

	ASSERT_EQ(ut_snat(&f, T0 + 1, &m, &created), 0);
	ASSERT_EQ(created, 0);
	ASSERT_EQ(m.to_port, first.to_port);

	flow_of(&f, 6, 33333, PEER, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat(&f, T0 + 2, &m, &created), DROP_NAT_FULL);
	ASSERT(ut_nat_egress(&f) == NULL);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
