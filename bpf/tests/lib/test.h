/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Unit tests of the datapath's headers, run in the kernel by
 * BPF_PROG_TEST_RUN (src/datapath/bpf/bpfUnit.test.ts runs every object of
 * build/bpf/tests/). A test NAME is up to three tc programs, run in this
 * order on one packet, each on the frame the one before left:
 *
 *   PKTGEN(NAME)  builds the packet (test_pkt_write) from an empty Ethernet
 *                 header and returns TEST_PASS; optional.
 *   SETUP(NAME)   seeds maps; its return value reaches CHECK as
 *                 test_setup_status(skb); optional.
 *   CHECK(NAME)   calls the functions under test and asserts (ASSERT,
 *                 ASSERT_EQ); ends with `return TEST_PASS;`. Required.
 *
 * Every test runs on a fresh load of its object: its maps start empty.
 * The first failed assertion ends CHECK and leaves its line, its
 * expression and (ASSERT_EQ) both values in tdl_test_result for the runner.
 *
 * The programs are SEC("tc") and carry their stage in their name
 * (test__NAME__check): libbpf 1.1 knows sched_cls programs by the bare
 * "tc" section only, not by a longer section name.
 */
#ifndef __TENDRIL_TESTS_LIB_TEST_H_
#define __TENDRIL_TESTS_LIB_TEST_H_

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* CHECK's return values (and tdl_test_result.status); the runner's TestStatus. */
#define TEST_PASS 1
#define TEST_FAIL 2
#define TEST_ERROR 3 /* the test could not run: its result slot, or the packet, could not be had */

#define TEST_EXPR_LEN 96

struct test_result {
	__u32 status;     /* TEST_*; 0 = CHECK never ran */
	__u32 line;       /* of the failed assertion */
	__u32 checks;     /* assertions evaluated */
	__u32 has_values; /* ASSERT_EQ: got and want say what differed */
	__s64 got;
	__s64 want;
	char expr[TEST_EXPR_LEN]; /* the failed assertion's text, cut to fit, NUL-terminated */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct test_result);
	__uint(max_entries, 1);
} tdl_test_result SEC(".maps");

static __always_inline struct test_result *test_result_slot(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&tdl_test_result, &zero);
}

#define PKTGEN(name) SEC("tc") int test__##name##__pktgen(struct __sk_buff *skb)
#define SETUP(name) SEC("tc") int test__##name##__setup(struct __sk_buff *skb)

/* The CHECK program clears the result slot, runs the body and records how it ended. */
#define CHECK(name)                                                                                             \
	static __always_inline int test__##name##__body(struct __sk_buff *skb, struct test_result *test__r);     \
	SEC("tc") int test__##name##__check(struct __sk_buff *skb)                                              \
	{                                                                                                       \
		struct test_result *r = test_result_slot();                                                     \
		int status;                                                                                     \
                                                                                                                \
		if (!r)                                                                                         \
			return TEST_ERROR;                                                                      \
		__builtin_memset(r, 0, sizeof(*r));                                                             \
		status = test__##name##__body(skb, r);                                                          \
		r->status = status;                                                                             \
		return status;                                                                                  \
	}                                                                                                       \
	static __always_inline int test__##name##__body(struct __sk_buff *skb __attribute__((unused)),          \
						       struct test_result *test__r)

/*
 * The expression's text, whole or cut to fit. A bare literal (clang puts it
 * in .rodata.str1.1, which libbpf loads as read-only data): a static const
 * array is declared in BTF's .rodata but emitted into the string section by
 * clang 14, and libbpf 1.1 refuses that object.
 */
#define TEST__RECORD(text)                                                                                      \
	do {                                                                                                    \
		test__r->line = __LINE__;                                                                       \
		__builtin_memcpy(test__r->expr, text, sizeof(text) < TEST_EXPR_LEN ? sizeof(text) : TEST_EXPR_LEN - 1); \
	} while (0)

/* Inside CHECK: the condition must hold, or the test fails here. */
#define ASSERT(cond)                                                                                            \
	do {                                                                                                    \
		test__r->checks++;                                                                              \
		if (!(cond)) {                                                                                  \
			TEST__RECORD(#cond);                                                                    \
			return TEST_FAIL;                                                                       \
		}                                                                                               \
	} while (0)

/* Inside CHECK: two integers must be equal (each evaluated once), or the test fails here with both. */
#define ASSERT_EQ(got_expr, want_expr)                                                                          \
	do {                                                                                                    \
		__s64 test__got = (__s64)(got_expr), test__want = (__s64)(want_expr);                           \
		test__r->checks++;                                                                              \
		if (test__got != test__want) {                                                                  \
			TEST__RECORD(#got_expr " == " #want_expr);                                              \
			test__r->has_values = 1;                                                                \
			test__r->got = test__got;                                                               \
			test__r->want = test__want;                                                             \
			return TEST_FAIL;                                                                       \
		}                                                                                               \
	} while (0)

/* What SETUP returned, as the runner hands it to CHECK (the skb's cb[0]). */
static __always_inline __s32 test_setup_status(const struct __sk_buff *skb)
{
	return (__s32)skb->cb[0];
}

/* PKTGEN: the frame becomes exactly `len` bytes, those of `pkt`. TEST_PASS, or TEST_ERROR when the skb would not take them. */
static __always_inline int test_pkt_write(struct __sk_buff *skb, const void *pkt, __u32 len)
{
	if (bpf_skb_change_tail(skb, len, 0) < 0)
		return TEST_ERROR;
	if (bpf_skb_store_bytes(skb, 0, pkt, len, 0) < 0)
		return TEST_ERROR;
	return TEST_PASS;
}

#endif
