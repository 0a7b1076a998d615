/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv6 until the IPv6 datapath exists: pods have only link-local IPv6
 * (an IPv6 pod CIDR is refused at agent start), and only ICMPv6 gets
 * through a pod's device. Neighbour discovery and MLD pass (router
 * advertisements and redirects only towards the pod: one a pod sends is
 * refused, a pod is no router); every other ICMPv6 type (echo
 * included) meets the endpoint's policy as protocol 58. Everything that is
 * not ICMPv6 is dropped as DROP_UNKNOWN_L3.
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
 * Extension headers walked before giving up on finding ICMPv6: MLD needs
 * one (hop-by-hop with Router Alert); a longer chain is not ICMPv6 that
 * neighbour discovery or MLD ever send.
 */
#define IPV6_MAX_EXT_HEADERS 4

/* ICMPv6 types (RFC 4443, 4861, 2710, 3810). */
#define ICMP6_T_MLD_QUERY 130
#define ICMP6_T_MLD_REPORT 131
#define ICMP6_T_MLD_DONE 132
#define ICMP6_T_ROUTER_SOLICIT 133
#define ICMP6_T_ROUTER_ADVERT 134
#define ICMP6_T_NEIGH_SOLICIT 135
#define ICMP6_T_NEIGH_ADVERT 136
#define ICMP6_T_REDIRECT 137
#define ICMP6_T_MLD2_REPORT 143

/* The parts of an IPv6 packet the programs use, validated. */
struct ipv6_info {
	__u32 saddr[4]; /* network order */
	__u32 daddr[4];
	__u32 l4_off; /* the header after the extension headers, from the start of the frame */
	__u32 ip_end; /* end of the payload (from the start of the frame) */
};

/*
 * Loads the fixed header and walks hop-by-hop, routing and destination
 * options headers (at most IPV6_MAX_EXT_HEADERS) to the upper-layer
 * protocol, which goes to f->proto. DROP_INVALID_PACKET when a header is
 * cut short, the version is not 6 or the payload length passes the frame.
 */
static __always_inline int ipv6_load(struct __sk_buff *skb, struct flow *f, struct ipv6_info *info)
{
	struct ipv6hdr ip6;
	__u32 off = IP6_OFF + sizeof(ip6), end;
	__u8 nexthdr, ext[2];
	int i;

	f->family = 6;
	if (bpf_skb_load_bytes(skb, IP6_OFF, &ip6, sizeof(ip6)) < 0 || ip6.version != 6)
		return DROP_INVALID_PACKET;
	end = off + bpf_ntohs(ip6.payload_len);
	if (end > skb->len)
		return DROP_INVALID_PACKET;
	__builtin_memcpy(info->saddr, &ip6.saddr, 16);
	__builtin_memcpy(info->daddr, &ip6.daddr, 16);
	nexthdr = ip6.nexthdr;
#pragma unroll
	for (i = 0; i < IPV6_MAX_EXT_HEADERS; i++) {
		if (nexthdr != IPPROTO_HOPOPTS && nexthdr != IPPROTO_ROUTING && nexthdr != IPPROTO_DSTOPTS)
			break;
		/* Every one of these is at least 8 bytes; its length counts 8-byte units past the first. */
		if (off + 8 > end || bpf_skb_load_bytes(skb, off, ext, sizeof(ext)) < 0)
			return DROP_INVALID_PACKET;
		nexthdr = ext[0];
		off += ((__u32)ext[1] + 1) * 8;
	}
	f->proto = nexthdr;
	info->l4_off = off;
	info->ip_end = end;
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
