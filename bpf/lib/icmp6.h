/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Neighbour discovery responder: a pod solicits its gateway (or any address
 * but its own) and gets a neighbour advertisement with the host-side veth's
 * MAC, answered in BPF as arp.h answers ARP, so the node needs no proxy ND
 * for pods.
 */
#ifndef __TENDRIL_LIB_ICMP6_H_
#define __TENDRIL_LIB_ICMP6_H_

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>

#include "common.h"
#include "endpoints.h"
#include "eth.h"
#include "ipv6.h"

/* ND option types (RFC 4861 4.6). */
#define ND_OPT_SOURCE_LL 1
#define ND_OPT_TARGET_LL 2
/* Neighbour advertisement flags (the first byte after the checksum): Solicited, Override. */
#define ND_NA_FLAG_SOLICITED 0x40
#define ND_NA_FLAG_OVERRIDE 0x20
/* ND messages are sent with the hop limit 255 and refused with any other (RFC 4861 7.1.1). */
#define ND_HOP_LIMIT 255

/*
 * A neighbour solicitation or advertisement with one link-layer address
 * option, as on the wire after two bytes of lead: those put the IPv6
 * header, and the addresses read as words, on 4-byte boundaries (the
 * verifier refuses misaligned stack access).
 */
struct nd_frame {
	__u16 lead;
	__u8 eth_dst[ETH_ALEN];
	__u8 eth_src[ETH_ALEN];
	__be16 eth_proto;
	struct ipv6hdr ip6;
	__u8 type;
	__u8 code;
	__sum16 check;
	__u8 flags;
	__u8 reserved[3];
	__be32 target[4];
	__u8 opt_type;
	__u8 opt_len; /* 8-byte units */
	__u8 opt_mac[ETH_ALEN];
};

_Static_assert(__builtin_offsetof(struct nd_frame, ip6) == 16, "nd_frame: the IPv6 header is not word-aligned");
#define ND_WIRE_LEN (sizeof(struct nd_frame) - 2)
#define ND_WIRE(nd) ((__u8 *)(nd) + 2)
#define ND_BODY_LEN (ND_WIRE_LEN - ETH_HLEN_BYTES - sizeof(struct ipv6hdr))
#define ND_BODY_NO_OPT_LEN (ND_BODY_LEN - 8)

/* The MACs of a pod's device pair: what an answer is sent from and to. */
struct nd_macs {
	__u8 lxc_mac[ETH_ALEN];
	__u8 pod_mac[ETH_ALEN];
};

enum nd_action {
	ND_PASS = 0, /* not ours to answer: the stack sees it */
	ND_REPLIED,  /* the frame is now the advertisement, to be sent back out the device */
};

/* A 32-bit ones' complement sum folded to the 16-bit checksum field. */
static __always_inline __sum16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__sum16)~sum;
}

static __always_inline int mac_equal(const __u8 *a, const __u8 *b)
{
	return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) | (a[5] ^ b[5])) == 0;
}

/*
 * Turns a neighbour solicitation from this device's pod (the caller checked
 * its source address) into the advertisement of `target` with the lxc
 * device's MAC, in place. ND_PASS for what the stack answers: duplicate
 * address detection (the unspecified source), the pod's own address as
 * target, a solicitation behind extension headers or with options past a
 * source link-layer address. DROP_INVALID_PACKET for a solicitation RFC
 * 4861 7.1.1 refuses (hop limit not 255, code not 0, shorter than 24 bytes,
 * a multicast or unspecified target); DROP_INVALID_SOURCE when its source link-layer
 * address option is not the pod's MAC (a pod claiming another's link-layer
 * address); DROP_WRITE_ERROR when the rewrite fails. A stage: the frame and
 * the checksum's pseudo-header stay off the caller's stack.
 */
__stage int nd_respond(struct __sk_buff *skb, const struct ipv6_info *ip, const struct nd_macs *m)
{
	struct nd_frame nd;
	__u32 len, sum;
	__be32 pseudo[2];
	struct endpoint_info *own;

	if (!ip || !m)
		return DROP_INVALID_PACKET;
	/* Linux sends no extension headers with ND: behind them the stack judges it. */
	if (ip->l4_off != IP6_OFF + sizeof(struct ipv6hdr))
		return ND_PASS;
	len = ip->ip_end - ip->l4_off;
	if (len < ND_BODY_NO_OPT_LEN)
		return DROP_INVALID_PACKET;
	if (len != ND_BODY_NO_OPT_LEN && len != ND_BODY_LEN)
		return ND_PASS;
	__builtin_memset(&nd, 0, sizeof(nd));
	if (bpf_skb_load_bytes(skb, 0, ND_WIRE(&nd), len == ND_BODY_LEN ? ND_WIRE_LEN : ND_WIRE_LEN - 8) < 0)
		return DROP_INVALID_PACKET;
	if (nd.ip6.hop_limit != ND_HOP_LIMIT || nd.code != 0 || ipv6_is_multicast(nd.target) || ipv6_is_unspecified(nd.target))
		return DROP_INVALID_PACKET;
	if (ipv6_is_unspecified((const __be32 *)&nd.ip6.saddr))
		return ND_PASS;
	if (len == ND_BODY_LEN) {
		if (nd.opt_type != ND_OPT_SOURCE_LL || nd.opt_len != 1)
			return ND_PASS;
		if (!mac_equal(nd.opt_mac, m->pod_mac))
			return DROP_INVALID_SOURCE;
	}
	/* The pod's own address (its source, or an address of its endpoint here) is for the stack, as ARP's. */
	if (ipv6_addr_equal(nd.target, (const __be32 *)&nd.ip6.saddr))
		return ND_PASS;
	own = pod_endpoint_lookup6(nd.target);
	if (own && own->ifindex == skb->ifindex)
		return ND_PASS;

	__builtin_memcpy(nd.eth_dst, nd.eth_src, ETH_ALEN);
	__builtin_memcpy(nd.eth_src, m->lxc_mac, ETH_ALEN);
	nd.ip6.priority = 0;
	nd.ip6.flow_lbl[0] = 0;
	nd.ip6.flow_lbl[1] = 0;
	nd.ip6.flow_lbl[2] = 0;
	nd.ip6.payload_len = bpf_htons(ND_BODY_LEN);
	nd.ip6.nexthdr = IPPROTO_ICMPV6;
	nd.ip6.hop_limit = ND_HOP_LIMIT;
	__builtin_memcpy(&nd.ip6.daddr, &nd.ip6.saddr, 16);
	__builtin_memcpy(&nd.ip6.saddr, nd.target, 16);
	nd.type = ICMP6_T_NEIGH_ADVERT;
	nd.code = 0;
	nd.check = 0;
	nd.flags = ND_NA_FLAG_SOLICITED | ND_NA_FLAG_OVERRIDE;
	nd.opt_type = ND_OPT_TARGET_LL;
	nd.opt_len = 1;
	__builtin_memcpy(nd.opt_mac, m->lxc_mac, ETH_ALEN);

	/* The checksum covers the pseudo-header (addresses, upper-layer length, next header) and the message. */
	pseudo[0] = bpf_htonl(ND_BODY_LEN);
	pseudo[1] = bpf_htonl(IPPROTO_ICMPV6);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&nd.ip6.saddr, 32, 0);
	sum = bpf_csum_diff(NULL, 0, pseudo, sizeof(pseudo), sum);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&nd.type, ND_BODY_LEN, sum);
	nd.check = csum_fold32(sum);

	if (bpf_skb_change_tail(skb, ND_WIRE_LEN, 0) < 0)
		return DROP_WRITE_ERROR;
	if (bpf_skb_store_bytes(skb, 0, ND_WIRE(&nd), ND_WIRE_LEN, 0) < 0)
		return DROP_WRITE_ERROR;
	return ND_REPLIED;
}

#endif
