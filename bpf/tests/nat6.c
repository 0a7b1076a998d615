/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/nat6.h, IPv6 SNAT's port allocation (snat6_mapping): a flow's
 * own source port kept when it is free (the 16 bytes of both addresses
 * telling flows apart), a reset connection's port taken by a new flow only
 * NAT_CLOSED_REUSE_MS after its last packet (its IPv6 conntrack entry,
 * made by conntrack.h itself, says so) with the old flow's own side gone,
 * and exhaustion of the ports towards one destination.
 */
#define TENDRIL_IPV6_FLOWS 1

#include <linux/in.h>
#include <linux/in6.h>

#include "common.h"
#include "conntrack.h"
#include "nat6.h"
#include "test.h"

#define PORT_MIN 40000
#define PORT_MAX 40003 /* four ports: exhaustion is four flows away */
#define T0 (1000 * NSEC_PER_SEC)

/* fd00::<n> for pods, 2001:db8::<n> for peers, fd77::a the node: one first word per kind, the rest tells them apart. */
static __always_inline void addr6(__be32 *a, __u32 top, __u8 last)
{
	a[0] = bpf_htonl(top);
	a[1] = 0;
	a[2] = 0;
	a[3] = bpf_htonl(last);
}

#define POD_TOP 0xfd000000
#define PEER_TOP 0x20010db8
#define NODE_TOP 0xfd770000

/* ---- the functions under test: every call to nat6.h and conntrack.h is in this block ---- */

static __always_inline int ut_snat6(const struct flow *f, __u64 now, int *created)
{
	__be32 node[4];

	addr6(node, NODE_TOP, 0xa);
	return snat6_mapping(f, node, NAT_F_MASQUERADE, now, created);
}

/* The EGRESS side the last ut_snat6 left in the slot: the port the flow got (host order), or 0. */
static __always_inline __u16 ut_mapped_port(void)
{
	struct snat6_claim_ctx *c = snat6_claim_slot();

	return c ? bpf_ntohs(c->fwd.to_port) : 0;
}

static __always_inline struct nat6_entry *ut_nat6_egress(const struct flow *f)
{
	struct nat6_key k;

	nat6_key_init(&k, f->saddr6, f->daddr6, f->sport, f->dport, f->proto, NAT_DIR_EGRESS);
	return bpf_map_lookup_elem(&tendril_snat6, &k);
}

/* The reply side: from f's destination to the node's address and `port`. */
static __always_inline struct nat6_entry *ut_nat6_ingress(const struct flow *f, __u16 port)
{
	struct nat6_key k;
	__be32 node[4];

	addr6(node, NODE_TOP, 0xa);
	nat6_key_init(&k, f->daddr6, node, f->dport, bpf_htons(port), f->proto, NAT_DIR_INGRESS);
	return bpf_map_lookup_elem(&tendril_snat6, &k);
}

static __always_inline int ut_ct_create(const struct flow *f, __u64 now)
{
	return ct_create(f, now);
}

static __always_inline enum ct_status ut_ct_lookup(struct flow *f, __u64 now)
{
	return ct_lookup(f, now);
}

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

/* A TCP packet from pod n's sport to peer p's dport (reply: the other way), before SNAT. */
static __always_inline void flow_of(struct flow *f, __u8 pod, __u16 sport, __u8 peer, __u16 dport, __u8 tcp_flags, int reply)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = 6;
	f->proto = IPPROTO_TCP;
	f->tcp_flags = tcp_flags;
	f->len = 80;
	addr6(reply ? f->saddr6 : f->daddr6, PEER_TOP, peer);
	addr6(reply ? f->daddr6 : f->saddr6, POD_TOP, pod);
	f->sport = bpf_htons(reply ? dport : sport);
	f->dport = bpf_htons(reply ? sport : dport);
}

SETUP(snat6_keeps_free_port)
{
	return ut_seed_ports();
}

/* A pod's own source port is kept while no other flow to the same destination holds it; both sides recorded. */
CHECK(snat6_keeps_free_port)
{
	struct nat6_entry *e;
	struct flow f;
	int created;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	flow_of(&f, 5, 40001, 1, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat6(&f, T0, &created), 0);
	ASSERT_EQ(created, 1);
	ASSERT_EQ(ut_mapped_port(), 40001);
	e = ut_nat6_egress(&f);
	ASSERT(e != NULL);
	ASSERT_EQ(bpf_ntohs(e->to_port), 40001);
	ASSERT_EQ(e->to_addr[3], bpf_htonl(0xa));
	e = ut_nat6_ingress(&f, 40001);
	ASSERT(e != NULL);
	ASSERT_EQ(e->to_addr[0], bpf_htonl(POD_TOP));
	ASSERT_EQ(e->to_addr[3], bpf_htonl(5));
	ASSERT_EQ(e->flags, NAT_F_MASQUERADE);

	/* Its next packet finds the mapping. */
	ASSERT_EQ(ut_snat6(&f, T0 + 1, &created), 0);
	ASSERT_EQ(created, 0);
	ASSERT_EQ(ut_mapped_port(), 40001);

	/* Another pod (the last word alone differs), same port and peer: another port of the range. */
	flow_of(&f, 6, 40001, 1, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat6(&f, T0 + 2, &created), 0);
	ASSERT_EQ(created, 1);
	ASSERT(ut_mapped_port() != 40001);
	ASSERT(ut_mapped_port() >= PORT_MIN && ut_mapped_port() <= PORT_MAX);

	/* Towards another peer the port is free again. */
	flow_of(&f, 7, 40001, 2, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat6(&f, T0 + 3, &created), 0);
	ASSERT_EQ(ut_mapped_port(), 40001);
	return TEST_PASS;
}

SETUP(snat6_closed_port_reused_after_delay)
{
	return ut_seed_ports();
}

/* A reset IPv6 connection's port goes to a new flow NAT_CLOSED_REUSE_MS after its last packet, not before. */
CHECK(snat6_closed_port_reused_after_delay)
{
	__u64 last = T0 + NSEC_PER_SEC, reuse = last + NAT_CLOSED_REUSE_MS * 1000000ULL;
	struct nat6_entry *e;
	struct flow f, old;
	int created;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	flow_of(&f, 5, 40001, 1, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	ASSERT_EQ(ut_snat6(&f, T0, &created), 0);
	ASSERT_EQ(ut_mapped_port(), 40001);
	flow_of(&f, 5, 40001, 1, 443, TCP_FLAG_RST | TCP_FLAG_ACK, 1);
	ASSERT_EQ(ut_ct_lookup(&f, last), CT_REPLY);
	flow_of(&old, 5, 40001, 1, 443, 0, 0);

	flow_of(&f, 6, 40001, 1, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat6(&f, reuse - 1, &created), 0);
	ASSERT(ut_mapped_port() != 40001);
	ASSERT(ut_nat6_egress(&old) != NULL);

	flow_of(&f, 7, 40001, 1, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat6(&f, reuse, &created), 0);
	ASSERT_EQ(created, 1);
	ASSERT_EQ(ut_mapped_port(), 40001);
	e = ut_nat6_ingress(&f, 40001);
	ASSERT(e != NULL);
	ASSERT_EQ(e->to_addr[3], bpf_htonl(7));
	ASSERT(ut_nat6_egress(&old) == NULL);
	return TEST_PASS;
}

SETUP(snat6_ports_exhausted)
{
	return ut_seed_ports();
}

/* Four ports, four flows to one peer: the fifth is refused (DROP_NAT_PORT_EXHAUSTED) with nothing recorded. */
CHECK(snat6_ports_exhausted)
{
	struct flow f;
	__u32 seen = 0;
	int created;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	for (__u8 pod = 1; pod <= 4; pod++) {
		flow_of(&f, pod, 1000, 1, 443, TCP_FLAG_SYN, 0);
		ASSERT_EQ(ut_snat6(&f, T0, &created), 0);
		ASSERT_EQ(created, 1);
		ASSERT(ut_mapped_port() >= PORT_MIN && ut_mapped_port() <= PORT_MAX);
		seen |= 1u << (ut_mapped_port() - PORT_MIN);
	}
	ASSERT_EQ(seen, 0xf);
	flow_of(&f, 5, 1000, 1, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat6(&f, T0 + 1, &created), DROP_NAT_PORT_EXHAUSTED);
	ASSERT_EQ(created, 0);
	ASSERT(ut_nat6_egress(&f) == NULL);
	flow_of(&f, 5, 1000, 2, 443, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_snat6(&f, T0 + 1, &created), 0);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
