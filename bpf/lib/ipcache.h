/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tendril_ipcache: prefix → security identity (+ tunnel endpoint), longest prefix wins. */
#ifndef __TENDRIL_LIB_IPCACHE_H_
#define __TENDRIL_LIB_IPCACHE_H_

#include "common.h"

struct ipcache_key {
	__u32 prefixlen; /* IPCACHE_KEY_FIXED_BITS + the prefix's length */
	__u16 pad1;
	__u8 pad2;
	__u8 family;
	__u32 ip[4]; /* network order; IPv4 in ip[0] */
};

struct remote_endpoint_info {
	__u32 identity;
	__u32 tunnel_ip4; /* network order: the node hosting the address (overlay endpoint); 0 = none */
	__u8 flags;
	__u8 pad[3];
	/*
	 * Network order: the hosting node's IPv6 address when the overlay
	 * reaches it over an IPv6 underlay (then tunnel_ip4 is 0); all zero =
	 * none. One entry names at most one endpoint, of one family.
	 */
	__u32 tunnel_ip6[4];
};

/* Whether an entry names a tunnel endpoint (another node hosts the address), of either underlay family. */
static __always_inline int ipcache_has_tunnel(const struct remote_endpoint_info *info)
{
	return (info->tunnel_ip4 | info->tunnel_ip6[0] | info->tunnel_ip6[1] | info->tunnel_ip6[2] | info->tunnel_ip6[3]) != 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct ipcache_key);
	__type(value, struct remote_endpoint_info);
	__uint(max_entries, TENDRIL_IPCACHE_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_ipcache SEC(".maps");

/* The entry of the longest prefix holding addr, or NULL when none does. */
static __always_inline struct remote_endpoint_info *ipcache_lookup4(__be32 addr)
{
	struct ipcache_key key = {
		.prefixlen = IPCACHE_KEY_FIXED_BITS + 32,
		.family = 4,
		.ip = { addr, 0, 0, 0 },
	};

	return bpf_map_lookup_elem(&tendril_ipcache, &key);
}

/* The identity an ipcache entry gives an address: IDENTITY_WORLD without one. */
static __always_inline __u32 ipcache_entry_identity(const struct remote_endpoint_info *info)
{
	return info ? info->identity : IDENTITY_WORLD;
}

/* The identity of the longest prefix holding addr, or IDENTITY_WORLD when none does. */
static __always_inline __u32 ipcache_identity4(__be32 addr)
{
	return ipcache_entry_identity(ipcache_lookup4(addr));
}

/* The entry of the longest IPv6 prefix holding addr (16 bytes, network order), or NULL when none does. */
static __always_inline struct remote_endpoint_info *ipcache_lookup6(const __u32 *addr)
{
	struct ipcache_key key = {
		.prefixlen = IPCACHE_KEY_FIXED_BITS + 128,
		.family = 6,
	};

	__builtin_memcpy(key.ip, addr, 16);
	return bpf_map_lookup_elem(&tendril_ipcache, &key);
}

/*
 * The identity of the longest IPv6 prefix holding addr, or
 * IDENTITY_WORLD_IPV6 when none does (the agent mirrors whatever IPv6
 * prefixes its IPCache holds: pods, nodes, the CIDR identities of IPv6
 * ipBlocks; a link-local peer has none and is the world). Not the
 * family-free IDENTITY_WORLD, which IPv4's misses are: a policy's
 * 0.0.0.0/0 admits that one, and must admit no IPv6 peer (nor ::/0 an
 * IPv4 one; src/policy/selector.ts).
 */
static __always_inline __u32 ipcache_identity6(const __u32 *addr)
{
	struct remote_endpoint_info *info = ipcache_lookup6(addr);

	return info ? info->identity : IDENTITY_WORLD_IPV6;
}

/*
 * Whether an address belongs to the cluster's nodes or is reached through
 * one: a tunnel endpoint (another node hosts it), or a node's own address
 * (this node's or a remote one's). Traffic to these keeps its source
 * address: the peer's policy judges the pod, not the node.
 */
static __always_inline int ipcache_is_cluster4(__be32 addr)
{
	struct remote_endpoint_info *info = ipcache_lookup4(addr);

	if (!info)
		return 0;
	return ipcache_has_tunnel(info) || info->identity == IDENTITY_REMOTE_NODE || info->identity == IDENTITY_HOST;
}

#endif
