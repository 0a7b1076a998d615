/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Connection tracking: one entry per flow, keyed by its original direction
 * (the packet that opened it); a reply finds it under the reversed tuple.
 * TCP and other protocols in separate LRU maps, as Cilium.
 */
#ifndef __TENDRIL_LIB_CONNTRACK_H_
#define __TENDRIL_LIB_CONNTRACK_H_

#include "common.h"

struct ct4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport; /* ICMP echo: the identifier in both ports */
	__be16 dport;
	__u8 proto;
	__u8 flags;
	__u16 pad;
};

struct ct_entry {
	__u64 expires_ns; /* bpf_ktime_get_ns() deadline */
	__u64 packets;
	__u64 bytes;
	__u32 src_identity;
	__u32 dst_identity;
	__u32 src_endpoint; /* 0 = not a local endpoint */
	__u32 dst_endpoint;
	__u16 rev_nat_index; /* services issue */
	__u8 tcp_flags;      /* union of TCP flags seen */
	__u8 flags;          /* CT_F_* */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct4_key);
	__type(value, struct ct_entry);
	__uint(max_entries, TENDRIL_CT4_TCP_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ct4_tcp SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct4_key);
	__type(value, struct ct_entry);
	__uint(max_entries, TENDRIL_CT4_ANY_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ct4_any SEC(".maps");

/* Ports of a fragmented datagram, recorded from its first fragment. */
struct frag4_key {
	__be32 saddr;
	__be32 daddr;
	__be16 id;
	__u8 proto;
	__u8 pad;
};

struct frag4_ports {
	__be16 sport;
	__be16 dport;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct frag4_key);
	__type(value, struct frag4_ports);
	__uint(max_entries, TENDRIL_FRAG4_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_frag4 SEC(".maps");

#endif
