/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Service load-balancing, after Cilium's lb4 maps: a frontend (address,
 * port, protocol, scope) and a slot give a backend ID; slot 0 holds the
 * backend count, flags and the reverse NAT index (= the service ID).
 * Backends by ID, the reverse NAT (index → frontend) for replies, ClientIP
 * affinity, and optional Maglev tables (an inner array per service).
 */
#ifndef __TENDRIL_LIB_LB_H_
#define __TENDRIL_LIB_LB_H_

#include "common.h"

struct lb4_key {
	__be32 address;     /* frontend; 0 with SVC_F_NODEPORT = every node address */
	__be16 dport;       /* frontend port */
	__u16 backend_slot; /* 0: the service entry; 1..count: its backends */
	__u8 proto;         /* IPPROTO_TCP, _UDP or _SCTP */
	__u8 scope;         /* LB_SCOPE_* */
	__u16 pad;
};

struct lb4_service {
	__u32 backend_id;       /* slot > 0: the backend in this slot; slot 0: 0 */
	__u32 affinity_timeout; /* seconds (SVC_F_AFFINITY) */
	__u16 count;            /* slot 0: backends in slots 1..count (new connections go only to these) */
	__u16 rev_nat_index;    /* the service ID */
	__u8 flags;             /* SVC_F_* */
	__u8 pad[3];
};

struct lb4_backend {
	__be32 address;
	__be16 port;
	__u8 proto;
	__u8 state; /* BACKEND_STATE_* */
};

struct lb4_reverse_nat {
	__be32 address; /* the frontend replies come from */
	__be16 port;
	__u16 pad;
};

struct lb4_affinity_key {
	__be32 client;
	__u16 rev_nat_index;
	__u16 pad;
};

struct lb4_affinity_value {
	__u64 last_used_ns; /* bpf_ktime_get_ns() */
	__u32 backend_id;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb4_key);
	__type(value, struct lb4_service);
	__uint(max_entries, TENDRIL_LB4_SVC_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_svc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct lb4_backend);
	__uint(max_entries, TENDRIL_LB4_BE_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_be SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u16);
	__type(value, struct lb4_reverse_nat);
	__uint(max_entries, TENDRIL_LB4_REV_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb4_affinity_key);
	__type(value, struct lb4_affinity_value);
	__uint(max_entries, TENDRIL_LB4_AFF_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lb4_aff SEC(".maps");

/* A service's Maglev table: slot → backend ID. The agent creates each with the configured table size (BPF_F_INNER_MAP lets sizes differ from this template). */
struct lb4_maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__type(key, __u32); /* rev_nat_index */
	__uint(max_entries, TENDRIL_LB4_MAG_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct lb4_maglev_inner);
} tendril_lb4_mag SEC(".maps");

/* ---- logic below ---------------------------------------------------------- */

#endif
