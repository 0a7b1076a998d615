/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/conntrack.h for IPv6 flows (an object that parses IPv6, as
 * bpf_lxc: TENDRIL_IPV6_FLOWS): an entry created in tendril_ct6_tcp under
 * the 16-byte addresses and found as the original direction and as the
 * reply, none in the IPv4 table; an ICMPv6 error related only when the
 * tuple it carries is tracked and was sent by the error's destination.
 */
#define TENDRIL_IPV6_FLOWS 1

#include <linux/in.h>
#include <linux/in6.h>

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

/* The IPv6 entry stored under the flow's tuple as given. */
static __always_inline struct ct_entry *ut_ct6_entry(const struct flow *f)
{
	struct ct6_key key;

	ct6_key_init(&key, f->saddr6, f->daddr6, f->sport, f->dport, f->proto);
	return f->proto == IPPROTO_TCP ? bpf_map_lookup_elem(&tendril_ct6_tcp, &key) : bpf_map_lookup_elem(&tendril_ct6_any, &key);
}

/* The IPv4 entry the flow's first address words would name: IPv6 must never land there. */
static __always_inline struct ct_entry *ut_ct4_entry(const struct flow *f)
{
	struct ct4_key key;

	ct_key_init(&key, f->saddr, f->daddr, f->sport, f->dport, f->proto);
	return ct_map_lookup(&key);
}

/* ---- fixtures ---- */

#define CLIENT_ID 1001
#define SERVER_ID 1002
#define CLIENT_EP 17
#define T0 (1000 * NSEC_PER_SEC)

/* fd00::5 and fd00::7: the same first word, so only the full 16 bytes tell them apart. */
static __always_inline void addr6(__be32 *a, __u8 last)
{
	a[0] = bpf_htonl(0xfd000000);
	a[1] = 0;
	a[2] = 0;
	a[3] = bpf_htonl(last);
}

static __always_inline void flow6_of(struct flow *f, __u8 proto, __u16 sport, __u16 dport, __u8 tcp_flags, int reply)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = 6;
	f->proto = proto;
	f->tcp_flags = tcp_flags;
	f->len = 80;
	addr6(f->saddr6, reply ? 7 : 5);
	addr6(f->daddr6, reply ? 5 : 7);
	f->sport = bpf_htons(reply ? dport : sport);
	f->dport = bpf_htons(reply ? sport : dport);
	f->src_identity = reply ? SERVER_ID : CLIENT_ID;
	f->dst_identity = reply ? CLIENT_ID : SERVER_ID;
	f->src_endpoint = reply ? 0 : CLIENT_EP;
}

CHECK(ct6_create_and_lookup_both_ways)
{
	struct flow f;
	struct ct_entry *e;

	flow6_of(&f, IPPROTO_TCP, 40000, 80, TCP_FLAG_SYN, 0);
	ASSERT_EQ(ut_ct_lookup(&f, T0), CT_NEW);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);
	e = ut_ct6_entry(&f);
	ASSERT(e != NULL);
	ASSERT(ut_ct4_entry(&f) == NULL);
	ASSERT_EQ(e->expires_ns, T0 + CT_TIMEOUT_TCP_SYN * NSEC_PER_SEC);
	ASSERT_EQ(e->src_identity, CLIENT_ID);
	ASSERT_EQ(e->src_endpoint, CLIENT_EP);

	flow6_of(&f, IPPROTO_TCP, 40000, 80, TCP_FLAG_SYN | TCP_FLAG_ACK, 1);
	f.src_identity = 0;
	f.dst_identity = 0;
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_REPLY);
	ASSERT_EQ(f.src_identity, SERVER_ID);
	ASSERT_EQ(f.dst_endpoint, CLIENT_EP);
	ASSERT_EQ(e->flags, CT_F_REPLY_SEEN);
	ASSERT_EQ(e->expires_ns, T0 + 1 + CT_TIMEOUT_TCP_ESTABLISHED * NSEC_PER_SEC);

	/* Another client address with the same first word and ports is another flow. */
	flow6_of(&f, IPPROTO_TCP, 40000, 80, TCP_FLAG_ACK, 0);
	f.saddr6[3] = bpf_htonl(6);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 2), CT_NEW);
	return TEST_PASS;
}

CHECK(ct6_icmp_error_related_to_sender_only)
{
	struct flow f;

	flow6_of(&f, IPPROTO_UDP, 5353, 53, 0, 0);
	ASSERT_EQ(ut_ct_create(&f, T0), 0);

	/* The server's port unreachable to the client about the client's datagram: related. */
	flow6_of(&f, IPPROTO_ICMPV6, 0, 0, 0, 1);
	f.icmp_error = 1;
	f.has_inner = 1;
	addr6(f.inner_saddr6, 5);
	addr6(f.inner_daddr6, 7);
	f.inner_sport = bpf_htons(5353);
	f.inner_dport = bpf_htons(53);
	f.inner_proto = IPPROTO_UDP;
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_RELATED);

	/* The same error addressed to someone who did not send the datagram: not related. */
	addr6(f.daddr6, 9);
	f.related_orig = 0;
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_NEW);

	/* Back to the client, but about a tuple nobody sent: not related. */
	addr6(f.daddr6, 5);
	f.inner_dport = bpf_htons(54);
	ASSERT_EQ(ut_ct_lookup(&f, T0 + 1), CT_NEW);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
