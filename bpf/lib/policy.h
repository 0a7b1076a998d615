/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * tendril_policy: every local endpoint's policy entries in one LPM trie,
 * keyed (endpoint, peer identity, direction, protocol, port prefix). The
 * prefix always covers endpoint, identity and direction; then protocol
 * (8 bits, or not at all for "any"), then the port's prefix length.
 * An endpoint that staged policies select (ENDPOINT_F_STAGED) also has its
 * staged view here: the same keys with POLICY_KEY_STAGED in the direction
 * byte.
 */
#ifndef __TENDRIL_LIB_POLICY_H_
#define __TENDRIL_LIB_POLICY_H_

#include "common.h"

struct policy_key {
	__u32 prefixlen;   /* POLICY_KEY_FIXED_BITS [+ 8 + port prefix length] */
	__u32 endpoint_id;
	__u32 sec_identity; /* peer identity; 0 = any */
	__u8 egress;       /* 0 ingress, 1 egress; | POLICY_KEY_STAGED for the staged view */
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

/* What the policy map decided for one direction of one flow. */
struct policy_decision {
	__u32 verdict; /* VERDICT_* */
	__u32 cookie;  /* the deciding entry's cookie, COOKIE_NONE without one */
};

/*
 * Two lookups, the peer's identity and the wildcard (0), each the longest
 * (protocol, port prefix) match; the one matching more L4 bits wins and a
 * tie goes to the identity-specific entry — MapState.lookup's order, so the
 * engine's deny precedence holds. The port is only part of the key for
 * protocols with ports; ICMP and the rest look up port 0.
 */
static __always_inline struct policy_decision policy_lookup(__u32 endpoint_id, __u32 peer_identity, __u8 egress, __u8 proto,
							    __be16 dport)
{
	struct policy_key key = {
		.prefixlen = POLICY_KEY_FIXED_BITS + POLICY_KEY_L4_BITS,
		.endpoint_id = endpoint_id,
		.sec_identity = peer_identity,
		.egress = egress,
		.protocol = proto,
		.dport = dport,
	};
	struct policy_decision d = { .verdict = VERDICT_NO_MATCH, .cookie = COOKIE_NONE };
	struct policy_entry *e;
	int bits = -1;
	__u8 deny = 0;

	e = bpf_map_lookup_elem(&tendril_policy, &key);
	if (e) {
		bits = e->l4_prefix_bits;
		deny = e->deny;
		d.cookie = e->cookie;
	}
	key.sec_identity = 0;
	e = bpf_map_lookup_elem(&tendril_policy, &key);
	if (e && (int)e->l4_prefix_bits > bits) {
		bits = e->l4_prefix_bits;
		deny = e->deny;
		d.cookie = e->cookie;
	}
	if (bits < 0)
		return d;
	d.verdict = deny ? VERDICT_DENIED : VERDICT_ALLOWED;
	return d;
}

#endif
