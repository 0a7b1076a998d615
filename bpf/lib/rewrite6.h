/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * rewrite.h for IPv6: an address or an L4 port rewritten in place. IPv6 has
 * no header checksum; TCP's, UDP's and ICMPv6's checksums all cover the
 * addresses through the pseudo-header, so an address change is folded into
 * the L4 checksum (a 16-byte difference, bpf_csum_diff). A later fragment
 * has no L4 header: only the address changes. A UDP checksum of 0 is
 * invalid in IPv6 but is still left alone (BPF_F_MARK_MANGLED_0), as IPv4.
 */
#ifndef __TENDRIL_LIB_REWRITE6_H_
#define __TENDRIL_LIB_REWRITE6_H_

#include <linux/in.h>
#include <linux/ipv6.h>

#include "common.h"
#include "ipv6.h"
#include "rewrite.h"

/* Where the L4 checksum is (TCP, UDP, ICMPv6), from the start of the L4 header; 0 when none is kept. */
static __always_inline __u32 l4_csum_offset6(__u8 proto)
{
	if (proto == IPPROTO_ICMPV6)
		return 2;
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP ? l4_csum_offset(proto) : 0;
}

/* Replaces the source (src != 0) or destination address; old and new are 16 bytes. */
static __always_inline int ipv6_rewrite_addr(struct __sk_buff *skb, const struct ipv6_info *ip, __u8 proto, int src, const __be32 *old_addr,
					     const __be32 *new_addr)
{
	__u32 addr_off = IP6_OFF + (src ? offsetof(struct ipv6hdr, saddr) : offsetof(struct ipv6hdr, daddr));
	__u32 csum_off = l4_csum_offset6(proto);
	__s64 diff;

	if (ipv6_addr_equal(old_addr, new_addr))
		return 0;
	/* Straight from where the addresses are (the flow, a map entry): no 32-byte copy on a stage's stack. */
	if (csum_off && !ipv6_is_later_fragment(ip)) {
		if (ip->l4_off + csum_off + 2 > ip->ip_end)
			return DROP_WRITE_ERROR;
		diff = bpf_csum_diff((__be32 *)old_addr, 16, (__be32 *)new_addr, 16, 0);
		if (diff < 0)
			return DROP_WRITE_ERROR;
		if (bpf_l4_csum_replace(skb, ip->l4_off + csum_off, 0, (__u32)diff, l4_csum_flags(proto, 1)) < 0)
			return DROP_WRITE_ERROR;
	}
	if (bpf_skb_store_bytes(skb, addr_off, new_addr, 16, 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

/* Replaces the source (src != 0) or destination port of TCP or UDP; anything else is refused (DROP_WRITE_ERROR). */
static __always_inline int ipv6_rewrite_port(struct __sk_buff *skb, const struct ipv6_info *ip, __u8 proto, int src, __be16 old_port,
					     __be16 new_port)
{
	__u32 port_off = src ? 0 : 2, csum_off;

	if (old_port == new_port)
		return 0;
	if (ipv6_is_later_fragment(ip) || (proto != IPPROTO_TCP && proto != IPPROTO_UDP))
		return DROP_WRITE_ERROR;
	csum_off = l4_csum_offset6(proto);
	if (ip->l4_off + port_off + 2 > ip->ip_end || ip->l4_off + csum_off + 2 > ip->ip_end)
		return DROP_WRITE_ERROR;
	if (bpf_l4_csum_replace(skb, ip->l4_off + csum_off, old_port, new_port, l4_csum_flags(proto, 0) | sizeof(new_port)) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, ip->l4_off + port_off, &new_port, sizeof(new_port), 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

#endif
