/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tendril_events: drops, policy verdicts and traces for `tendril monitor`. */
#ifndef __TENDRIL_LIB_EVENTS_H_
#define __TENDRIL_LIB_EVENTS_H_

#include "common.h"
#include "flow.h"
#include "metrics.h"

struct tendril_event {
	__u8 type;      /* EVENT_* */
	__u8 subtype;   /* DROP: -DROP_*; POLICY_VERDICT: VERDICT_*; TRACE: TRACE_* */
	__u8 direction; /* DIR_* */
	__u8 family;    /* 4 or 6 */
	__u8 proto;
	__u8 tcp_flags;
	__u16 service;  /* the service the flow was translated for (its rev NAT index), 0 when none */
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

/*
 * Fills a reserved record. Not inlined, on purpose: a function taking
 * struct tendril_event puts the record's layout into the object's BTF,
 * which layout.test.ts holds the TypeScript codec to (a type used only
 * inside inlined code leaves no BTF). Events are off the per-packet fast
 * path (drops, verdicts, traces), so the call costs little. `kind` packs
 * type | subtype << 8 | direction << 16. IPv6 records take their
 * addresses straight from the packet's header.
 */
static __attribute__((noinline)) int event_fill(struct tendril_event *e, struct __sk_buff *skb, const struct flow *f, __u32 kind,
						 __u32 cookie)
{
	__builtin_memset(e, 0, sizeof(*e));
	e->type = kind & 0xff;
	e->subtype = (kind >> 8) & 0xff;
	e->direction = (kind >> 16) & 0xff;
	e->family = f->family;
	e->proto = f->proto;
	e->tcp_flags = f->tcp_flags;
	e->service = f->rev_nat_index;
	e->ifindex = f->ifindex;
	e->src_identity = f->src_identity;
	e->dst_identity = f->dst_identity;
	e->src_endpoint = f->src_endpoint;
	e->dst_endpoint = f->dst_endpoint;
	e->cookie = cookie;
	e->orig_len = f->len;
	e->sport = bpf_ntohs(f->sport);
	e->dport = bpf_ntohs(f->dport);
	if (f->family == 6) {
		/* struct ipv6hdr: saddr at 8, daddr at 24, contiguous as in the record. */
		if (bpf_skb_load_bytes(skb, 14 + 8, e->saddr, 32) < 0)
			__builtin_memset(e->saddr, 0, 32);
	} else {
		e->saddr[0] = f->saddr;
		e->daddr[0] = f->daddr;
	}
	e->ts_ns = bpf_ktime_get_ns();
	return 0;
}

/*
 * One record for `tendril monitor`. The ring buffer drops it when full (the
 * reader is behind): the packet's fate never depends on its event, and the
 * loss is counted under METRICS_REASON_EVENTS_LOST.
 */
static __always_inline void event_emit(struct __sk_buff *skb, const struct flow *f, __u8 type, __u8 subtype, __u8 direction,
				       __u32 cookie)
{
	struct tendril_event *e = bpf_ringbuf_reserve(&tendril_events, sizeof(*e), 0);

	if (!e) {
		metrics_update(METRICS_REASON_EVENTS_LOST, direction, f->len);
		return;
	}
	event_fill(e, skb, f, type | ((__u32)subtype << 8) | ((__u32)direction << 16), cookie);
	bpf_ringbuf_submit(e, 0);
}

#endif
