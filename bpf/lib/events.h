/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tendril_events: drops, policy verdicts and traces for `tendril monitor`. */
#ifndef __TENDRIL_LIB_EVENTS_H_
#define __TENDRIL_LIB_EVENTS_H_

#include "common.h"

struct tendril_event {
	__u8 type;      /* EVENT_* */
	__u8 subtype;   /* DROP: -DROP_*; POLICY_VERDICT: VERDICT_*; TRACE: TRACE_* */
	__u8 direction; /* DIR_* */
	__u8 family;    /* 4 or 6 */
	__u8 proto;
	__u8 tcp_flags;
	__u16 pad;
	__u32 ifindex;
	__u32 src_identity;
	__u32 dst_identity;
	__u32 src_endpoint;
	__u32 dst_endpoint;
	__u32 cookie;   /* the deciding policy entry's rule cookie */
	__u32 orig_len;
	__u16 sport;    /* host order */
	__u16 dport;
	__u32 saddr[4]; /* network order */
	__u32 daddr[4];
	__u64 ts_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, TENDRIL_EVENTS_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_events SEC(".maps");

#endif
