/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ARP responder: a pod asks for its gateway (or any address but its own)
 * and gets the host-side veth's MAC, answered in BPF, so the node needs no
 * proxy ARP for pods.
 */
#ifndef __TENDRIL_LIB_ARP_H_
#define __TENDRIL_LIB_ARP_H_

#include <linux/if_ether.h>

#include "common.h"
#include "endpoints.h"
#include "eth.h"

/* From linux/if_arp.h, which pulls in libc headers a BPF build cannot use. */
#define ARP_HW_ETHER 1
#define ARP_OP_REQUEST 1
#define ARP_OP_REPLY 2

/* Ethernet header + an Ethernet/IPv4 ARP body, as on the wire. */
struct arp_frame {
	__u8 eth_dst[ETH_ALEN];
	__u8 eth_src[ETH_ALEN];
	__be16 eth_proto;
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 oper;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

enum arp_action {
	ARP_PASS = 0,  /* not ours to answer: the stack sees it */
	ARP_REPLIED,   /* the frame is now the reply, to be sent back out the device */
};

/*
 * Turns a request from the endpoint on this device into its reply in place,
 * or says to pass it (a reply, the pod's own address, a sender that is not
 * this device's endpoint); DROP_ARP_INVALID for a frame that is not
 * Ethernet/IPv4 ARP or is cut short; DROP_WRITE_ERROR if the rewrite fails.
 */
static __always_inline int arp_respond(struct __sk_buff *skb)
{
	struct arp_frame a;
	struct endpoint_info *ep;
	__be32 spa, tpa;
	__u8 lxc_mac[ETH_ALEN];

	if (bpf_skb_load_bytes(skb, 0, &a, sizeof(a)) < 0)
		return DROP_ARP_INVALID;
	if (a.htype != bpf_htons(ARP_HW_ETHER) || a.ptype != bpf_htons(ETH_P_IP) || a.hlen != ETH_ALEN || a.plen != 4)
		return DROP_ARP_INVALID;
	if (a.oper != bpf_htons(ARP_OP_REQUEST))
		return ARP_PASS;
	__builtin_memcpy(&spa, a.spa, 4);
	__builtin_memcpy(&tpa, a.tpa, 4);
	/* Duplicate address detection and gratuitous ARP are for the stack. */
	if (tpa == spa || spa == 0)
		return ARP_PASS;
	ep = pod_endpoint_lookup4(spa);
	if (!ep || ep->ifindex != skb->ifindex)
		return ARP_PASS;
	__builtin_memcpy(lxc_mac, ep->lxc_mac, ETH_ALEN);

	__builtin_memcpy(a.eth_dst, a.sha, ETH_ALEN);
	__builtin_memcpy(a.eth_src, lxc_mac, ETH_ALEN);
	a.oper = bpf_htons(ARP_OP_REPLY);
	__builtin_memcpy(a.tha, a.sha, ETH_ALEN);
	__builtin_memcpy(a.sha, lxc_mac, ETH_ALEN);
	__builtin_memcpy(a.tpa, &spa, 4);
	__builtin_memcpy(a.spa, &tpa, 4);
	if (bpf_skb_store_bytes(skb, 0, &a, sizeof(a), 0) < 0)
		return DROP_WRITE_ERROR;
	return ARP_REPLIED;
}

#endif
