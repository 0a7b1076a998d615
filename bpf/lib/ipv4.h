/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* IPv4: header validation, fragment fields, and the TTL decrement of local delivery. */
#ifndef __TENDRIL_LIB_IPV4_H_
#define __TENDRIL_LIB_IPV4_H_

#include <linux/ip.h>

#include "common.h"
#include "eth.h"
#include "flow.h"

#define IP4_OFF ETH_HLEN_BYTES
#define IP4_MF 0x2000
#define IP4_OFFSET_MASK 0x1fff

/* The parts of an IPv4 header the programs use, validated. */
struct ipv4_info {
	__u32 l4_off;  /* from the start of the frame */
	__u32 ip_end;  /* end of the datagram (from the start of the frame) */
	__u16 frag_off; /* host order: flags and offset */
	__be16 id;
	__u8 ttl;
	__u8 pad[3];
};

/*
 * Loads the header at IP4_OFF into f (addresses, protocol) and info, or
 * returns DROP_INVALID_PACKET: not version 4, ihl < 5, or a total length
 * shorter than the header or longer than the frame. A stage: the header it
 * reads lives in its own stack frame, not in the program's, under the
 * chain of stages a packet goes through.
 */
__stage int ipv4_load(struct __sk_buff *skb, struct flow *f, struct ipv4_info *info)
{
	struct iphdr ip;
	__u32 hlen, tot;

	if (!f || !info)
		return DROP_INVALID_PACKET;
	if (bpf_skb_load_bytes(skb, IP4_OFF, &ip, sizeof(ip)) < 0)
		return DROP_INVALID_PACKET;
	f->family = 4;
	f->saddr = ip.saddr;
	f->daddr = ip.daddr;
	f->proto = ip.protocol;
	if (ip.version != 4 || ip.ihl < 5)
		return DROP_INVALID_PACKET;
	hlen = ip.ihl * 4;
	tot = bpf_ntohs(ip.tot_len);
	if (tot < hlen || IP4_OFF + tot > skb->len)
		return DROP_INVALID_PACKET;
	info->l4_off = IP4_OFF + hlen;
	info->ip_end = IP4_OFF + tot;
	info->frag_off = bpf_ntohs(ip.frag_off);
	info->id = ip.id;
	info->ttl = ip.ttl;
	return 0;
}

/*
 * The IP header an ICMP error carries (the datagram that caused it), at
 * `off`, read only within the error's own datagram (`ip_end`): 0 with *iph
 * filled in, or DROP_INVALID_PACKET when it does not fit or is no IPv4
 * header (not version 4, ihl < 5). The one parser of that header: conntrack's
 * tuple (l4.h) and the rewrites of the error (rewrite.h) both read it here,
 * so neither can take a header the other refused.
 */
static __always_inline int ipv4_load_embedded(struct __sk_buff *skb, __u32 off, __u32 ip_end, struct iphdr *iph)
{
	if (off + sizeof(*iph) > ip_end || bpf_skb_load_bytes(skb, off, iph, sizeof(*iph)) < 0)
		return DROP_INVALID_PACKET;
	if (iph->version != 4 || iph->ihl < 5)
		return DROP_INVALID_PACKET;
	return 0;
}

/* 224.0.0.0/4 or the limited broadcast address. */
static __always_inline int ipv4_is_multicast_or_broadcast(__be32 daddr)
{
	return (bpf_ntohl(daddr) & 0xf0000000) == 0xe0000000 || daddr == 0xffffffff;
}

static __always_inline int ipv4_is_later_fragment(const struct ipv4_info *info)
{
	return (info->frag_off & IP4_OFFSET_MASK) != 0;
}

static __always_inline int ipv4_is_first_fragment(const struct ipv4_info *info)
{
	return (info->frag_off & IP4_OFFSET_MASK) == 0 && (info->frag_off & IP4_MF) != 0;
}

/*
 * TTL - 1 with the header checksum updated incrementally (the TTL shares a
 * 16-bit word with the protocol). The caller has checked TTL > 1.
 */
static __always_inline int ipv4_dec_ttl(struct __sk_buff *skb, const struct ipv4_info *info, __u8 proto)
{
	__u8 ttl = info->ttl - 1;
	__be16 old_word = bpf_htons(((__u16)info->ttl << 8) | proto);
	__be16 new_word = bpf_htons(((__u16)ttl << 8) | proto);

	if (bpf_l3_csum_replace(skb, IP4_OFF + offsetof(struct iphdr, check), old_word, new_word, sizeof(new_word)) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, IP4_OFF + offsetof(struct iphdr, ttl), &ttl, sizeof(ttl), 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

#endif
