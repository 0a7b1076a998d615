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

#endif
