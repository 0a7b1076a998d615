/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The runner's own test (bpfUnit.test.ts): tests that pass, fail and error
 * on purpose, so that a broken runner or test.h cannot pass every header's
 * tests unseen. Kept out of the objects the runner runs (a folder below
 * them): its failures are expected.
 */
#include <linux/in.h>

#include "test.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} tdl_selftest_count SEC(".maps");

CHECK(passes)
{
	ASSERT(1);
	ASSERT_EQ(2 + 2, 4);
	ASSERT(skb->len >= 14);
	return TEST_PASS;
}

CHECK(fails_assert)
{
	int three = 3;

	ASSERT(three == 3);
	ASSERT(three + 1 == 5);
	return TEST_PASS;
}

CHECK(fails_eq_negative)
{
	ASSERT_EQ(-7, 7);
	return TEST_PASS;
}

CHECK(fails_long_expression)
{
	ASSERT(skb->len == 0 && skb->len == 1 && skb->len == 2 && skb->len == 3 && skb->len == 4 && skb->len == 5 && skb->len == 6);
	return TEST_PASS;
}

CHECK(asserts_nothing)
{
	return TEST_PASS;
}

PKTGEN(pktgen_fails)
{
	return TEST_ERROR;
}

CHECK(pktgen_fails)
{
	ASSERT(1);
	return TEST_PASS;
}

/* A 60-byte frame of bytes 0, 1, 2, ...; SETUP changes the last one and says 42. */
PKTGEN(stages_chain)
{
	__u8 p[60];

	for (int i = 0; i < (int)sizeof(p); i++)
		p[i] = (__u8)i;
	return test_pkt_write(skb, p, sizeof(p));
}

SETUP(stages_chain)
{
	__u8 v = 0xee;

	if (bpf_skb_store_bytes(skb, 59, &v, 1, 0) < 0)
		return -1;
	return 42;
}

CHECK(stages_chain)
{
	__u8 b[2];

	ASSERT_EQ(test_setup_status(skb), 42);
	ASSERT_EQ(skb->len, 60);
	ASSERT(bpf_skb_load_bytes(skb, 58, b, 2) == 0);
	ASSERT_EQ(b[0], 58);
	ASSERT_EQ(b[1], 0xee);
	return TEST_PASS;
}

/* Each test's maps start empty: both of these see 0 and leave 1. */
static __always_inline __u32 *count_slot(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&tdl_selftest_count, &zero);
}

CHECK(fresh_maps_a)
{
	__u32 *c = count_slot();

	ASSERT(c != NULL);
	ASSERT_EQ(*c, 0);
	*c = 1;
	return TEST_PASS;
}

CHECK(fresh_maps_b)
{
	__u32 *c = count_slot();

	ASSERT(c != NULL);
	ASSERT_EQ(*c, 0);
	*c = 1;
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
