/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/policy.h: policy_lookup's choice between the entry for the
 * peer's identity and the wildcard one (more L4 bits wins, a tie goes to
 * the identity's), port prefixes, protocols without ports, and direction.
 * SETUP writes the entries as the agent's policy map writer lays them out.
 */
#include <linux/in.h>

#include "common.h"
#include "policy.h"
#include "test.h"

#define EP 7
#define PEER_ID 1000
#define OTHER_ID 2000
#define ANY_ID 0
#define INGRESS 0
#define EGRESS 1

/* ---- the functions under test: every call to policy.h is in this block ---- */

static __always_inline struct policy_decision ut_lookup(__u32 peer, __u8 egress, __u8 proto, __u16 port)
{
	return policy_lookup(EP, peer, egress, proto, bpf_htons(port));
}

/* An entry: `proto` 0 = any protocol (no L4 bits); else the protocol and `port_bits` of the port. */
static __always_inline int ut_seed(__u32 peer, __u8 egress, __u8 proto, __u16 port, __u8 port_bits, __u32 cookie, __u8 deny)
{
	__u8 l4_bits = proto ? 8 + port_bits : 0;
	struct policy_key k = {
		.prefixlen = POLICY_KEY_FIXED_BITS + l4_bits,
		.endpoint_id = EP,
		.sec_identity = peer,
		.egress = egress,
		.protocol = proto,
		.dport = bpf_htons(port),
	};
	struct policy_entry v = { .cookie = cookie, .deny = deny, .l4_prefix_bits = l4_bits, .pad = 0 };

	return bpf_map_update_elem(&tendril_policy, &k, &v, BPF_ANY);
}

/* ---- tests ---- */

#define ASSERT_DECISION(d, want_verdict, want_cookie)  \
	do {                                           \
		struct policy_decision _d = (d);       \
		ASSERT_EQ(_d.verdict, want_verdict);   \
		ASSERT_EQ(_d.cookie, want_cookie);     \
	} while (0)

SETUP(policy_precedence)
{
	int err = 0;

	err |= ut_seed(PEER_ID, INGRESS, 0, 0, 0, 11, 0);                       /* PEER_ID may send anything */
	err |= ut_seed(ANY_ID, INGRESS, IPPROTO_TCP, 80, 16, 12, 1);            /* nobody to TCP/80 */
	err |= ut_seed(PEER_ID, INGRESS, IPPROTO_TCP, 443, 16, 13, 0);          /* PEER_ID to TCP/443 ... */
	err |= ut_seed(ANY_ID, INGRESS, IPPROTO_TCP, 443, 16, 14, 1);           /* ... though nobody else */
	err |= ut_seed(ANY_ID, INGRESS, IPPROTO_TCP, 8080, 13, 15, 0);          /* anyone to TCP/8080-8087 */
	err |= ut_seed(ANY_ID, INGRESS, IPPROTO_ICMP, 0, 0, 16, 0);             /* anyone, ICMP */
	err |= ut_seed(OTHER_ID, EGRESS, IPPROTO_UDP, 53, 16, 17, 0);           /* to OTHER_ID, UDP/53 */
	return err ? TEST_ERROR : TEST_PASS;
}

CHECK(policy_precedence)
{
	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	/* The identity's L3 entry. */
	ASSERT_DECISION(ut_lookup(PEER_ID, INGRESS, IPPROTO_UDP, 9999), VERDICT_ALLOWED, 11);
	/* A wildcard entry with more L4 bits beats it: the deny on TCP/80. */
	ASSERT_DECISION(ut_lookup(PEER_ID, INGRESS, IPPROTO_TCP, 80), VERDICT_DENIED, 12);
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_TCP, 80), VERDICT_DENIED, 12);
	/* The same L4 bits: the identity's entry wins. */
	ASSERT_DECISION(ut_lookup(PEER_ID, INGRESS, IPPROTO_TCP, 443), VERDICT_ALLOWED, 13);
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_TCP, 443), VERDICT_DENIED, 14);
	/* A port prefix covers its range and nothing past it. */
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_TCP, 8080), VERDICT_ALLOWED, 15);
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_TCP, 8087), VERDICT_ALLOWED, 15);
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_TCP, 8088), VERDICT_NO_MATCH, COOKIE_NONE);
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_TCP, 8079), VERDICT_NO_MATCH, COOKIE_NONE);
	/* ICMP looks up port 0 under its protocol. */
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_ICMP, 0), VERDICT_ALLOWED, 16);
	/* Directions do not mix, nor do endpoints' peers. */
	ASSERT_DECISION(ut_lookup(OTHER_ID, EGRESS, IPPROTO_UDP, 53), VERDICT_ALLOWED, 17);
	ASSERT_DECISION(ut_lookup(OTHER_ID, INGRESS, IPPROTO_UDP, 53), VERDICT_NO_MATCH, COOKIE_NONE);
	ASSERT_DECISION(ut_lookup(PEER_ID, EGRESS, IPPROTO_UDP, 53), VERDICT_NO_MATCH, COOKIE_NONE);
	return TEST_PASS;
}

/* An empty map decides nothing. */
CHECK(policy_empty_map_no_match)
{
	ASSERT_DECISION(ut_lookup(PEER_ID, INGRESS, IPPROTO_TCP, 80), VERDICT_NO_MATCH, COOKIE_NONE);
	ASSERT_DECISION(ut_lookup(ANY_ID, EGRESS, IPPROTO_ICMP, 0), VERDICT_NO_MATCH, COOKIE_NONE);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
