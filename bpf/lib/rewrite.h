/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Rewriting an IPv4 address or an L4 port in place with the checksums
 * kept right: the IP header checksum, and the TCP/UDP checksum (whose
 * pseudo-header covers the addresses). DNAT, reverse NAT and SNAT are all
 * made of these. A UDP checksum of 0 (none) stays 0; a later fragment has
 * no L4 header and only its IP header changes. For ICMP echo the "port" is
 * the identifier, covered by the ICMP checksum alone.
 */
#ifndef __TENDRIL_LIB_REWRITE_H_
#define __TENDRIL_LIB_REWRITE_H_

#include <linux/in.h>
#include <linux/ip.h>

#include "common.h"
#include "flow.h"
#include "ipv4.h"

#define REWRITE_SRC 1
#define REWRITE_DST 0

/* Where the L4 checksum is, from the start of the L4 header; 0 when the protocol has none we keep. */
static __always_inline __u32 l4_csum_offset(__u8 proto)
{
	switch (proto) {
	case IPPROTO_TCP:
		return 16;
	case IPPROTO_UDP:
		return 6;
	case IPPROTO_ICMP:
		return 2;
	default:
		return 0;
	}
}

/* The L4 checksum replace flags: UDP's 0 means "no checksum" and must stay so. */
static __always_inline __u64 l4_csum_flags(__u8 proto, int pseudo)
{
	__u64 flags = pseudo ? BPF_F_PSEUDO_HDR : 0;

	if (proto == IPPROTO_UDP)
		flags |= BPF_F_MARK_MANGLED_0;
	return flags;
}

/* Replaces the source (src != 0) or destination address. */
static __always_inline int ipv4_rewrite_addr(struct __sk_buff *skb, const struct ipv4_info *ip, __u8 proto, int src, __be32 old_addr,
					     __be32 new_addr)
{
	__u32 addr_off = IP4_OFF + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));
	__u32 csum_off;

	if (old_addr == new_addr)
		return 0;
	/* TCP and UDP checksums cover the addresses through the pseudo-header; ICMP's does not. */
	if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) && !ipv4_is_later_fragment(ip)) {
		csum_off = l4_csum_offset(proto);
		if (ip->l4_off + csum_off + 2 > ip->ip_end)
			return DROP_WRITE_ERROR;
		if (bpf_l4_csum_replace(skb, ip->l4_off + csum_off, old_addr, new_addr, l4_csum_flags(proto, 1) | sizeof(new_addr)) < 0)
			return DROP_WRITE_ERROR;
	}
	if (bpf_l3_csum_replace(skb, IP4_OFF + offsetof(struct iphdr, check), old_addr, new_addr, sizeof(new_addr)) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, addr_off, &new_addr, sizeof(new_addr), 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

/*
 * Replaces the source (src != 0) or destination port of TCP or UDP,
 * or the identifier of an ICMP echo (whichever of src/dst: there is one).
 * SCTP is refused (DROP_WRITE_ERROR): its CRC32c cannot be updated
 * incrementally.
 */
static __always_inline int ipv4_rewrite_port(struct __sk_buff *skb, const struct ipv4_info *ip, __u8 proto, int src, __be16 old_port,
					     __be16 new_port)
{
	__u32 port_off, csum_off;

	if (old_port == new_port)
		return 0;
	if (ipv4_is_later_fragment(ip))
		return DROP_WRITE_ERROR;
	if (proto == IPPROTO_ICMP)
		port_off = 4; /* echo identifier */
	else if (proto == IPPROTO_TCP || proto == IPPROTO_UDP)
		port_off = src ? 0 : 2;
	else
		return DROP_WRITE_ERROR;
	csum_off = l4_csum_offset(proto);
	if (ip->l4_off + port_off + 2 > ip->ip_end || ip->l4_off + csum_off + 2 > ip->ip_end)
		return DROP_WRITE_ERROR;
	if (bpf_l4_csum_replace(skb, ip->l4_off + csum_off, old_port, new_port, l4_csum_flags(proto, 0) | sizeof(new_port)) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, ip->l4_off + port_off, &new_port, sizeof(new_port), 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

#endif
