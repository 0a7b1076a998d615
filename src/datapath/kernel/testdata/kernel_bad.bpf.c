// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A program the verifier must reject (it reads packet data without a bounds
 * check), so tests can see the verifier's log in the load error.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int tdl_unchecked(struct __sk_buff *skb)
{
	__u8 *data = (__u8 *)(long)skb->data;

	return data[64] == 1 ? TC_ACT_SHOT : TC_ACT_OK;
}

char _license[] SEC("license") = "Dual BSD/GPL";
