/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * tendril_policy: every local endpoint's policy entries in one LPM trie,
 * keyed (endpoint, peer identity, direction, protocol, port prefix). The
 * prefix always covers endpoint, identity and direction; then protocol
 * (8 bits, or not at all for "any"), then the port's prefix length.
 */
#ifndef __TENDRIL_LIB_POLICY_H_
#define __TENDRIL_LIB_POLICY_H_

#include "common.h"

struct policy_key {
	__u32 prefixlen;   /* POLICY_KEY_FIXED_BITS [+ 8 + port prefix length] */
	__u32 endpoint_id;
	__u32 sec_identity; /* peer identity; 0 = any */
	__u8 egress;       /* 0 ingress, 1 egress */
	__u8 protocol;
	__be16 dport;
};

struct policy_entry {
	__u32 cookie;        /* the rule that made the entry (COOKIE_* or a rule's cookie) */
	__u8 deny;
	__u8 l4_prefix_bits; /* prefixlen - POLICY_KEY_FIXED_BITS */
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct policy_key);
	__type(value, struct policy_entry);
	__uint(max_entries, TENDRIL_POLICY_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_policy SEC(".maps");

#endif
