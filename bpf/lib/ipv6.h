/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv6: the header and its extension headers (a bounded walk to the
 * upper layer, fragments keyed through tendril_frag6 by l4.h), the ICMPv6
 * types the pod programs tell apart, the header an ICMPv6 error embeds,
 * and the hop-limit decrement of local delivery.
 */
#ifndef __TENDRIL_LIB_IPV6_H_
#define __TENDRIL_LIB_IPV6_H_

#include <linux/in.h>
#include <linux/ipv6.h>

#include "common.h"
#include "eth.h"
#include "flow.h"

#define IP6_OFF ETH_HLEN_BYTES

/* ICMPv6 types (RFC 4443, 4861, 2710, 3810). */
#define ICMP6_T_DEST_UNREACH 1
#define ICMP6_T_PACKET_TOO_BIG 2
#define ICMP6_T_TIME_EXCEEDED 3
#define ICMP6_T_PARAMETERPROB 4
#define ICMP6_T_ECHO_REQUEST 128
#define ICMP6_T_ECHO_REPLY 129
#define ICMP6_T_MLD_QUERY 130
#define ICMP6_T_MLD_REPORT 131
#define ICMP6_T_MLD_DONE 132
#define ICMP6_T_ROUTER_SOLICIT 133
#define ICMP6_T_ROUTER_ADVERT 134
#define ICMP6_T_NEIGH_SOLICIT 135
#define ICMP6_T_NEIGH_ADVERT 136
#define ICMP6_T_REDIRECT 137
#define ICMP6_T_MLD2_REPORT 143

/* Next-header numbers of the extension headers and the walk's ends. */
#define IP6_NH_HOPOPTS 0
#define IP6_NH_ROUTING 43
#define IP6_NH_FRAGMENT 44
#define IP6_NH_ESP 50
#define IP6_NH_AH 51
#define IP6_NH_NONE 59
#define IP6_NH_DSTOPTS 60

/* The fragment header's offset-and-flags word (host order): the offset in bytes (a multiple of 8), M in bit 0. */
#define IP6_FRAG_OFFSET_MASK 0xfff8
#define IP6_FRAG_MF 0x0001

/* The parts of an IPv6 packet the programs use, validated; the addresses go to f->saddr6/daddr6. */
struct ipv6_info {
	__u32 l4_off;   /* the header after the extension headers, from the start of the frame */
	__u32 ip_end;   /* end of the payload (from the start of the frame) */
	__be32 frag_id; /* the fragment header's identification (`fragment` set) */
	__u16 frag_off; /* host order: the fragment header's offset and M bit (`fragment` set) */
	__u8 fragment;  /* the packet carries a fragment header */
	__u8 hop_limit;
};

static __always_inline int ipv6_is_ext_header(__u8 nh)
{
	return nh == IP6_NH_HOPOPTS || nh == IP6_NH_ROUTING || nh == IP6_NH_DSTOPTS || nh == IP6_NH_FRAGMENT || nh == IP6_NH_AH;
}

/*
 * Loads the fixed header (addresses into f) and walks the extension
 * headers to the upper-layer protocol, which goes to f->proto: hop-by-hop,
 * routing and destination options ((len + 1) * 8 bytes), AH ((len + 2) * 4)
 * and the fragment header (8 bytes; its identification and offset go to
 * info). NONE, ESP and every other protocol end the walk. A later fragment
 * (offset > 0) ends it at its fragment header: what follows is the middle
 * of a datagram, its protocol the fragment header's next header.
 * DROP_INVALID_PACKET when a header is cut short, the version is not 6 or
 * the payload length passes the frame; DROP_INVALID_EXTHDR when more than
 * IPV6_MAX_EXT_HEADERS extension headers come before the upper layer (a
 * chain the program cannot see the end of is never let through on a
 * guess). A stage: the bounded walk is verified once, not on every path
 * into it.
 */
__stage int ipv6_load(struct __sk_buff *skb, struct flow *f, struct ipv6_info *info)
{
	struct ipv6hdr ip6;
	__u32 off = IP6_OFF + sizeof(ip6), end;
	__u8 nexthdr, ext[8];
	int i;

	if (!f || !info)
		return DROP_INVALID_PACKET;
	f->family = 6;
	if (bpf_skb_load_bytes(skb, IP6_OFF, &ip6, sizeof(ip6)) < 0 || ip6.version != 6)
		return DROP_INVALID_PACKET;
	__builtin_memcpy(f->saddr6, &ip6.saddr, 16);
	__builtin_memcpy(f->daddr6, &ip6.daddr, 16);
	f->proto = ip6.nexthdr;
	end = off + bpf_ntohs(ip6.payload_len);
	if (end > skb->len)
		return DROP_INVALID_PACKET;
	info->ip_end = end;
	info->fragment = 0;
	info->frag_off = 0;
	info->frag_id = 0;
	info->hop_limit = ip6.hop_limit;
	nexthdr = ip6.nexthdr;
	for (i = 0; i < IPV6_MAX_EXT_HEADERS; i++) {
		__u32 len;

		if (!ipv6_is_ext_header(nexthdr))
			break;
		/* Every extension header is at least 8 bytes; the fragment header is exactly that. */
		if (off + 8 > end || bpf_skb_load_bytes(skb, off, ext, sizeof(ext)) < 0)
			return DROP_INVALID_PACKET;
		if (nexthdr == IP6_NH_FRAGMENT) {
			__be16 fo;

			__builtin_memcpy(&fo, &ext[2], 2);
			info->fragment = 1;
			info->frag_off = bpf_ntohs(fo);
			__builtin_memcpy(&info->frag_id, &ext[4], 4);
			nexthdr = ext[0];
			off += 8;
			if (info->frag_off & IP6_FRAG_OFFSET_MASK)
				goto done;
			continue;
		}
		len = nexthdr == IP6_NH_AH ? ((__u32)ext[1] + 2) * 4 : ((__u32)ext[1] + 1) * 8;
		if (off + len > end)
			return DROP_INVALID_PACKET;
		nexthdr = ext[0];
		off += len;
	}
	f->proto = nexthdr;
	if (ipv6_is_ext_header(nexthdr))
		return DROP_INVALID_EXTHDR;
done:
	f->proto = nexthdr;
	info->l4_off = off;
	return 0;
}

static __always_inline int ipv6_is_later_fragment(const struct ipv6_info *info)
{
	return info->fragment && (info->frag_off & IP6_FRAG_OFFSET_MASK) != 0;
}

static __always_inline int ipv6_is_first_fragment(const struct ipv6_info *info)
{
	return info->fragment && (info->frag_off & IP6_FRAG_OFFSET_MASK) == 0 && (info->frag_off & IP6_FRAG_MF) != 0;
}

/* ff00::/8 */
static __always_inline int ipv6_is_multicast(const __be32 *addr)
{
	return (bpf_ntohl(addr[0]) >> 24) == 0xff;
}

/* fe80::/10 */
static __always_inline int ipv6_is_link_local(const __be32 *addr)
{
	return (bpf_ntohl(addr[0]) & 0xffc00000) == 0xfe800000;
}

/* :: */
static __always_inline int ipv6_is_unspecified(const __be32 *addr)
{
	return (addr[0] | addr[1] | addr[2] | addr[3]) == 0;
}

static __always_inline int ipv6_addr_equal(const __be32 *a, const __be32 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3])) == 0;
}

/*
 * The IPv6 header an ICMPv6 error carries (the datagram that caused it),
 * at `off`, read only within the error's own datagram (`ip_end`): 0 with
 * *ip6 filled in, or DROP_INVALID_PACKET when it does not fit or is no IPv6
 * header. The one parser of that header, as ipv4_load_embedded is IPv4's.
 */
static __always_inline int ipv6_load_embedded(struct __sk_buff *skb, __u32 off, __u32 ip_end, struct ipv6hdr *ip6)
{
	if (off + sizeof(*ip6) > ip_end || bpf_skb_load_bytes(skb, off, ip6, sizeof(*ip6)) < 0)
		return DROP_INVALID_PACKET;
	if (ip6->version != 6)
		return DROP_INVALID_PACKET;
	return 0;
}

/* Hop limit - 1 (IPv6 has no header checksum). The caller has checked the hop limit > 1. */
static __always_inline int ipv6_dec_hop_limit(struct __sk_buff *skb, const struct ipv6_info *info)
{
	__u8 hl = info->hop_limit - 1;

	if (bpf_skb_store_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, hop_limit), &hl, sizeof(hl), 0) < 0)
		return DROP_WRITE_ERROR;
	return 0;
}

/* What a pod's device does with an ICMPv6 type. */
enum icmp6_disposition {
	ICMP6_PASS = 0,   /* neighbour discovery or MLD in its direction */
	ICMP6_POLICY,     /* the endpoint's policy decides (protocol 58) */
	ICMP6_REFUSE,     /* a pod sending what only a router may send */
};

/*
 * `from_pod`: the pod sends it (from_container), else the node delivers it
 * (to_container). A pod never advertises a router or redirects; both
 * directions resolve neighbours, solicit routers and report multicast
 * listeners. Router solicitations pass towards the pod too: the node's lxc
 * device sends them on its own (at link-up, then with back-off), a pod
 * that is no router ignores them, and holding them to policy would count a
 * POLICY drop at every pod with an ingress policy for nothing anyone sent.
 */
static __always_inline enum icmp6_disposition icmp6_disposition(__u8 type, int from_pod)
{
	switch (type) {
	case ICMP6_T_MLD_QUERY:
	case ICMP6_T_MLD_REPORT:
	case ICMP6_T_MLD_DONE:
	case ICMP6_T_MLD2_REPORT:
	case ICMP6_T_NEIGH_SOLICIT:
	case ICMP6_T_NEIGH_ADVERT:
	case ICMP6_T_ROUTER_SOLICIT:
		return ICMP6_PASS;
	case ICMP6_T_ROUTER_ADVERT:
	case ICMP6_T_REDIRECT:
		return from_pod ? ICMP6_REFUSE : ICMP6_PASS;
	default:
		return ICMP6_POLICY;
	}
}

/*
 * The ICMPv6 type of a loaded packet (f->proto ICMPv6), or
 * DROP_INVALID_PACKET when the datagram is too short for the 4-byte
 * ICMPv6 header.
 */
static __always_inline int icmp6_load_type(struct __sk_buff *skb, const struct ipv6_info *info, __u8 *type)
{
	if (info->l4_off + 4 > info->ip_end || bpf_skb_load_bytes(skb, info->l4_off, type, 1) < 0)
		return DROP_INVALID_PACKET;
	return 0;
}

#endif
