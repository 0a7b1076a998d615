/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Rewriting an IPv4 address or an L4 port in place with the checksums
 * kept right: the IP header checksum, and the TCP/UDP checksum (whose
 * pseudo-header covers the addresses). DNAT, reverse NAT and SNAT are all
 * made of these, and so are their translations of an ICMP error's embedded
 * datagram (its checksums and the ICMP checksum kept right). A UDP checksum
 * of 0 (none) stays 0; a later fragment has
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

/* ---- inside an ICMP error ---------------------------------------------------- */

/*
 * Where an ICMP error's embedded datagram is, as a rewrite of it needs: its
 * IP header, its L4 header, and the embedded L4 checksum when the error
 * carries it (not a UDP checksum of 0: none). The embedded IP header is
 * read by ipv4_load_embedded, as for conntrack's tuple (l4.h).
 */
struct icmp_inner {
	__u32 icmp_csum_off; /* the error's own checksum */
	__u32 ip_off;
	__u32 l4_off;
	__u32 l4_csum_off; /* 0: not carried */
	__u8 proto;
	__u8 pad[3];
};

static __always_inline int icmp_inner_load(struct __sk_buff *skb, const struct ipv4_info *ip, struct icmp_inner *in)
{
	struct iphdr iph;
	__u32 off;
	__be16 csum;

	in->icmp_csum_off = ip->l4_off + 2;
	in->ip_off = ip->l4_off + 8;
	if (ipv4_load_embedded(skb, in->ip_off, ip->ip_end, &iph) < 0)
		return DROP_INVALID_PACKET;
	in->l4_off = in->ip_off + iph.ihl * 4;
	in->proto = iph.protocol;
	in->l4_csum_off = 0;
	off = l4_csum_offset(iph.protocol);
	if (off && in->l4_off + off + 2 <= ip->ip_end && bpf_skb_load_bytes(skb, in->l4_off + off, &csum, sizeof(csum)) == 0 &&
	    !(iph.protocol == IPPROTO_UDP && csum == 0))
		in->l4_csum_off = in->l4_off + off;
	return 0;
}

/* Writes `size` (2 or 4) bytes at `off` inside the error and carries the change into the ICMP checksum, which covers them. */
static __always_inline int icmp_inner_store(struct __sk_buff *skb, const struct icmp_inner *in, __u32 off, __be32 old_val, __be32 new_val, __u32 size)
{
	if (bpf_l3_csum_replace(skb, in->icmp_csum_off, old_val, new_val, size) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, off, &new_val, size, 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

/* Updates an embedded checksum at `csum_off` for a change of `size` bytes it covers, and the ICMP checksum for that field's own change. */
static __always_inline int icmp_inner_fix_csum(struct __sk_buff *skb, const struct icmp_inner *in, __u32 csum_off, __be32 from, __be32 to, __u32 size)
{
	__be16 before, after;

	if (bpf_skb_load_bytes(skb, csum_off, &before, sizeof(before)) < 0)
		return DROP_INVALID_PACKET;
	if (bpf_l3_csum_replace(skb, csum_off, from, to, size) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_load_bytes(skb, csum_off, &after, sizeof(after)) < 0)
		return DROP_INVALID_PACKET;
	if (bpf_l3_csum_replace(skb, in->icmp_csum_off, before, after, sizeof(after)) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

/* The embedded datagram's source (src != 0) or destination address, with every checksum that covers it. */
static __always_inline int icmp_inner_rewrite_addr(struct __sk_buff *skb, const struct icmp_inner *in, int src, __be32 old_addr, __be32 new_addr)
{
	__u32 off = in->ip_off + (src ? offsetof(struct iphdr, saddr) : offsetof(struct iphdr, daddr));
	int ret;

	if (old_addr == new_addr)
		return 0;
	ret = icmp_inner_fix_csum(skb, in, in->ip_off + offsetof(struct iphdr, check), old_addr, new_addr, sizeof(new_addr));
	/* TCP and UDP checksums cover the addresses (pseudo-header); ICMP's does not. */
	if (ret == 0 && in->l4_csum_off && in->proto != IPPROTO_ICMP)
		ret = icmp_inner_fix_csum(skb, in, in->l4_csum_off, old_addr, new_addr, sizeof(new_addr));
	if (ret == 0)
		ret = icmp_inner_store(skb, in, off, old_addr, new_addr, sizeof(new_addr));
	return ret;
}

/* The embedded datagram's source (src != 0) or destination port; for an echo, its identifier. */
static __always_inline int icmp_inner_rewrite_port(struct __sk_buff *skb, const struct ipv4_info *ip, const struct icmp_inner *in, int src,
						   __be16 old_port, __be16 new_port)
{
	__u32 off = in->proto == IPPROTO_ICMP ? in->l4_off + 4 : in->l4_off + (src ? 0 : 2);
	int ret = 0;

	if (old_port == new_port)
		return 0;
	if (off + 2 > ip->ip_end)
		return DROP_INVALID_PACKET;
	if (in->l4_csum_off)
		ret = icmp_inner_fix_csum(skb, in, in->l4_csum_off, old_port, new_port, sizeof(new_port));
	if (ret == 0)
		ret = icmp_inner_store(skb, in, off, old_port, new_port, sizeof(new_port));
	return ret;
}

#endif
