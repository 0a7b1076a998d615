/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tendril_devices: the node's devices with programs (--devices), by ifindex. */
#ifndef __TENDRIL_LIB_DEVICES_H_
#define __TENDRIL_LIB_DEVICES_H_

#include "common.h"

struct device_info {
	__be32 ipv4;  /* the device's node address: NodePort frontend and SNAT source */
	__u32 flags;  /* DEVICE_F_* */
	__u8 mac[6];
	__u8 pad[2];
	__be32 ipv6[4]; /* its global IPv6 address: the IPv6 SNAT source (--ipv6-masquerade); all 0 = none */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct device_info);
	__uint(max_entries, TENDRIL_DEVICES_DEFAULT_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_devices SEC(".maps");

static __always_inline struct device_info *device_lookup(__u32 ifindex)
{
	return bpf_map_lookup_elem(&tendril_devices, &ifindex);
}

#endif
