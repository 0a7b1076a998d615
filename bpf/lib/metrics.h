/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tendril_metrics: packets and bytes per (reason, direction), per CPU. */
#ifndef __TENDRIL_LIB_METRICS_H_
#define __TENDRIL_LIB_METRICS_H_

#include "common.h"

struct metrics_key {
	__u8 reason;    /* 0 = forwarded, else -DROP_* */
	__u8 direction; /* DIR_* */
	__u16 pad;
};

struct metrics_value {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct metrics_key);
	__type(value, struct metrics_value);
	__uint(max_entries, TENDRIL_METRICS_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_metrics SEC(".maps");

_Static_assert(256 * (DIR_EGRESS + 1) <= TENDRIL_METRICS_DEFAULT_SIZE, "tendril_metrics must hold every (reason, direction) pair");

/* Counts one packet under (reason, direction); reason 0 = forwarded, else a drop code. */
static __always_inline void metrics_update(int reason, __u8 direction, __u32 bytes)
{
	struct metrics_key key = {
		.reason = (__u8)(reason < 0 ? -reason : reason),
		.direction = direction,
		.pad = 0,
	};
	struct metrics_value *v = bpf_map_lookup_elem(&tendril_metrics, &key);

	if (v) {
		/* Per-CPU slot: no other CPU writes it. */
		v->packets += 1;
		v->bytes += bytes;
		return;
	}
	struct metrics_value first = { .packets = 1, .bytes = bytes };

	if (bpf_map_update_elem(&tendril_metrics, &key, &first, BPF_NOEXIST) == 0)
		return;
	/*
	 * Another CPU created the key first: count in this CPU's slot. The map
	 * has room for every (reason, direction) pair (256 reasons × the DIR_*
	 * values ≤ TENDRIL_METRICS_DEFAULT_SIZE), so the insert never fails for
	 * room and the lookup finds the other CPU's key.
	 */
	v = bpf_map_lookup_elem(&tendril_metrics, &key);
	if (v) {
		v->packets += 1;
		v->bytes += bytes;
	}
}

#endif
