/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tendril_lxc: the node's local endpoints by address (Cilium's cilium_lxc). */
#ifndef __TENDRIL_LIB_ENDPOINTS_H_
#define __TENDRIL_LIB_ENDPOINTS_H_

#include "common.h"

struct endpoint_key {
	__u32 ip[4]; /* network order; IPv4 in ip[0] */
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
};

struct endpoint_info {
	__u32 ifindex;     /* host-side veth (lxc…) */
	__u32 identity;    /* security identity */
	__u32 endpoint_id; /* key of the endpoint's policy entries */
	__u32 flags;       /* ENDPOINT_F_* */
	__u8 lxc_mac[6];   /* host-side veth's MAC: the pod's gateway MAC */
	__u8 pod_mac[6];   /* the pod's interface MAC */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct endpoint_key);
	__type(value, struct endpoint_info);
	__uint(max_entries, TENDRIL_LXC_DEFAULT_SIZE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_lxc SEC(".maps");

/* The local endpoint (or node address, ENDPOINT_F_HOST) holding an IPv4 address. */
static __always_inline struct endpoint_info *endpoint_lookup4(__be32 addr)
{
	struct endpoint_key key = { .ip = { addr, 0, 0, 0 }, .family = 4 };

	return bpf_map_lookup_elem(&tendril_lxc, &key);
}

/* A pod's endpoint, not an address of the node's own. */
static __always_inline struct endpoint_info *pod_endpoint_lookup4(__be32 addr)
{
	struct endpoint_info *ep = endpoint_lookup4(addr);

	if (ep && (ep->flags & ENDPOINT_F_HOST))
		return NULL;
	return ep;
}

/* The local endpoint (or node address, ENDPOINT_F_HOST) holding an IPv6 address (16 bytes, network order). */
static __always_inline struct endpoint_info *endpoint_lookup6(const __be32 *addr)
{
	struct endpoint_key key = { .family = 6 };

	__builtin_memcpy(key.ip, addr, 16);
	return bpf_map_lookup_elem(&tendril_lxc, &key);
}

/* A pod's endpoint by its IPv6 address, not an address of the node's own. */
static __always_inline struct endpoint_info *pod_endpoint_lookup6(const __be32 *addr)
{
	struct endpoint_info *ep = endpoint_lookup6(addr);

	if (ep && (ep->flags & ENDPOINT_F_HOST))
		return NULL;
	return ep;
}

#endif
