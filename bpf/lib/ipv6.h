/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv6 is not enforced yet: only ICMPv6 passes (neighbour discovery and
 * MLD keep working), everything else is dropped as DROP_UNKNOWN_L3.
 */
#ifndef __TENDRIL_LIB_IPV6_H_
#define __TENDRIL_LIB_IPV6_H_

#include <linux/in.h>
#include <linux/ipv6.h>

#include "common.h"
#include "eth.h"
#include "flow.h"

#define IP6_OFF ETH_HLEN_BYTES

/*
 * 0 when the packet is ICMPv6, directly after the fixed header (neighbour
 * and router discovery) or after a hop-by-hop header (MLD), else
 * DROP_UNKNOWN_L3 (DROP_INVALID_PACKET when the header is cut short).
 * Fills in f for the drop event.
 */
static __always_inline int ipv6_check(struct __sk_buff *skb, struct flow *f)
{
	__u8 nexthdr;

	f->family = 6;
	if (bpf_skb_load_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, nexthdr), &nexthdr, sizeof(nexthdr)) < 0 ||
	    skb->len < IP6_OFF + sizeof(struct ipv6hdr))
		return DROP_INVALID_PACKET;
	if (nexthdr == IPPROTO_HOPOPTS) {
		/* MLD reports are ICMPv6 behind a hop-by-hop Router Alert option. */
		if (bpf_skb_load_bytes(skb, IP6_OFF + sizeof(struct ipv6hdr), &nexthdr, sizeof(nexthdr)) < 0)
			return DROP_INVALID_PACKET;
	}
	f->proto = nexthdr;
	if (nexthdr == IPPROTO_ICMPV6)
		return 0;
	return DROP_UNKNOWN_L3;
}

#endif
