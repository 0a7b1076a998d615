/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Ethernet: the header every program starts from, and the MAC rewrite of local delivery. */
#ifndef __TENDRIL_LIB_ETH_H_
#define __TENDRIL_LIB_ETH_H_

#include <linux/if_ether.h>

#include "common.h"

#define ETH_HLEN_BYTES 14

/* The ethertype (network order), or 0 when the frame is shorter than a header. */
static __always_inline __be16 eth_load_proto(struct __sk_buff *skb)
{
	__be16 proto = 0;

	if (bpf_skb_load_bytes(skb, offsetof(struct ethhdr, h_proto), &proto, sizeof(proto)) < 0)
		return 0;
	return proto;
}

/* Destination and source MAC in one write (the first 12 bytes of the frame). */
static __always_inline int eth_store_macs(struct __sk_buff *skb, const __u8 *dst, const __u8 *src)
{
	__u8 macs[2 * ETH_ALEN];

	__builtin_memcpy(macs, dst, ETH_ALEN);
	__builtin_memcpy(macs + ETH_ALEN, src, ETH_ALEN);
	return bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0);
}

#endif
