// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The program on the overlay device (tendril_vxlan, --routing-mode tunnel):
 *   tendril_from_overlay — tc ingress: what other nodes sent through the
 *     tunnel, decapsulated. Only a node may send: a packet whose outer
 *     source is no remote node in the ipcache is DROP_OVERLAY_NOT_NODE,
 *     whatever its VNI. The source's identity is the VNI of the tunnel
 *     key (a remote node's own traffic, IDENTITY_HOST there, is
 *     IDENTITY_REMOTE_NODE here), never the one of the inner source
 *     address. A packet for a local pod gets conntrack and the pod's
 *     ingress policy against that identity (service replies their reverse
 *     NAT) and is delivered straight into the pod, IPv4 or IPv6 alike;
 *     one for an address of this node gets the reverse translations of
 *     the node's NodePort and service flows to backends on other nodes
 *     (IPv6: the node's service flows only), else goes to the stack;
 *     anything else is no business of this node: DROP_NOT_FOR_NODE.
 */
#include <linux/if_ether.h>
#include <linux/if_packet.h>

/* This object parses IPv6 (from_overlay_ipv6): conntrack's dispatch keeps its IPv6 stages (conntrack.h). */
#define TENDRIL_IPV6_FLOWS 1

#include "common.h"
#include "config.h"
#include "conntrack.h"
#include "devices.h"
#include "drop.h"
#include "endpoints.h"
#include "enforce.h"
#include "eth.h"
#include "events.h"
#include "flow.h"
#include "ipcache.h"
#include "ipv4.h"
#include "ipv6.h"
#include "l4.h"
#include "lb.h"
#include "metrics.h"
#include "nat.h"
#include "nat6.h"
#include "nodeport.h"
#include "policy.h"
#include "trace.h"
#include "tunnel.h"

/*
 * The frame's destination MAC is the sending node's choice, not this
 * device's: the kernel marked it PACKET_OTHERHOST, which the IP stack
 * would drop. It is for this node.
 */
static __always_inline int overlay_to_host_type(struct __sk_buff *skb, struct flow *f)
{
	if (skb->pkt_type != PACKET_HOST && bpf_skb_change_type(skb, PACKET_HOST) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_INGRESS, 0);
	return 0;
}

/* A local pod's packet from another node: conntrack, its ingress policy against the VNI's identity, its MACs, TTL - 1, into the pod. */
static __always_inline int overlay_to_endpoint4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, const struct endpoint_info *dst)
{
	int ret;

	f->dst_identity = dst->identity;
	f->dst_endpoint = dst->endpoint_id;
	/* Another node's packet for the pod itself: a NodePort translation this node made on the tuple is stale. */
	f->lb_direct = 1;
	ret = l4_load(skb, f, ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	ret = ingress_ct_policy4_source(skb, f, ip, dst, TRACE_FROM_OVERLAY, bpf_ktime_get_ns(), 1);
	if (ret)
		return ret;
	/* Reverse NAT rewrote the source only: the destination is still dst. */
	if (ip->ttl <= 1)
		return drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_INGRESS, 0);
	ret = overlay_to_host_type(skb, f);
	if (ret)
		return ret;
	if (eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_INGRESS, 0);
	ret = ipv4_dec_ttl(skb, ip, f->proto);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	return pass_packet(skb, f, bpf_redirect_peer(dst->ifindex, 0), TRACE_FROM_OVERLAY, DIR_INGRESS);
}

/*
 * A packet for an address of this node: a reply of a flow this node
 * translated towards another node gets its translation undone, as on the
 * node's devices — a NodePort flow SNATed to a backend there goes back to
 * its client, the node's own connection to a service gets the frontend
 * back — and everything else goes to the node's stack.
 */
static __always_inline int overlay_to_host4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip)
{
	int action = TC_ACT_OK;
	__u8 nat_flags = 0;
	int ret;

	ret = overlay_to_host_type(skb, f);
	if (ret)
		return ret;
	/* What the node's own stack receives is the stack's to judge when malformed, as on the node's devices. */
	if (l4_load(skb, f, ip) == 0) {
		if (snat4_rev_netdev(skb, f, ip, &nat_flags, &action))
			return action == TC_ACT_SHOT ? action : pass_packet(skb, f, action, TRACE_FROM_OVERLAY, DIR_INGRESS);
		if (nat_flags & NAT_F_NODEPORT)
			return nodeport_snat_reply4(skb, f, ip);
		if (nodeport_host_reply4(skb, f, ip, &action))
			return action;
	}
	return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_OVERLAY, DIR_INGRESS);
}

/* The decapsulated packet, its source's identity from the tunnel key. */
static __always_inline int from_overlay_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct endpoint_info *dst;
	struct ipv4_info ip;
	int ret;

	ret = ipv4_load(skb, f, &ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	dst = endpoint_lookup4(f->daddr);
	if (dst && !(dst->flags & ENDPOINT_F_HOST))
		return overlay_to_endpoint4(skb, f, &ip, dst);
	f->dst_identity = dst ? dst->identity : ipcache_identity4(f->daddr);
	if (f->dst_identity == IDENTITY_HOST)
		return overlay_to_host4(skb, f, &ip);
	return drop_packet(skb, f, DROP_NOT_FOR_NODE, DIR_INGRESS, 0);
}

/* overlay_to_endpoint4 for an IPv6 pod: conntrack and its ingress policy against the VNI's identity, its MACs, hop limit - 1, into the pod. */
static __always_inline int overlay_to_endpoint6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip6, const struct endpoint_info *dst)
{
	int ret;

	f->dst_identity = dst->identity;
	f->dst_endpoint = dst->endpoint_id;
	ret = l4_load6(skb, f, ip6);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	ret = ingress_ct_policy6_stage(skb, f, ip6, bpf_ktime_get_ns(), TRACE_FROM_OVERLAY | INGRESS_SOURCE_KNOWN | endpoint_policy_how(dst));
	if (ret)
		return ret;
	if (ip6->hop_limit <= 1)
		return drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_INGRESS, 0);
	ret = overlay_to_host_type(skb, f);
	if (ret)
		return ret;
	if (eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_INGRESS, 0);
	ret = ipv6_dec_hop_limit(skb, ip6);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	return pass_packet(skb, f, bpf_redirect_peer(dst->ifindex, 0), TRACE_FROM_OVERLAY, DIR_INGRESS);
}

/*
 * The decapsulated IPv6 packet: a local pod's is delivered; one for an
 * address of this node goes to the stack, a NodePort flow's reply on to
 * its client (nodeport_snat_reply6), a backend's reply to the node's own
 * service connection with the frontend back (nodeport_host_reply6);
 * anything else is DROP_NOT_FOR_NODE.
 */
static __always_inline int from_overlay_ipv6(struct __sk_buff *skb, struct flow *f)
{
	struct endpoint_info *dst;
	struct ipv6_info ip6;
	int ret, action = TC_ACT_OK;
	__u8 nat_flags = 0;

	ret = ipv6_load(skb, f, &ip6);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	dst = endpoint_lookup6(f->daddr6);
	if (dst && !(dst->flags & ENDPOINT_F_HOST))
		return overlay_to_endpoint6(skb, f, &ip6, dst);
	f->dst_identity = dst ? dst->identity : ipcache_identity6(f->daddr6);
	if (f->dst_identity == IDENTITY_HOST) {
		ret = overlay_to_host_type(skb, f);
		if (ret)
			return ret;
		/* A NodePort flow's reply goes back to its client, the node's own service connection gets the frontend back (as overlay_to_host4). */
		if (l4_load6(skb, f, &ip6) == 0) {
			if (snat6_rev_netdev(skb, f, &ip6, &nat_flags, &action))
				return action == TC_ACT_SHOT ? action : pass_packet(skb, f, action, TRACE_FROM_OVERLAY, DIR_INGRESS);
			if (nat_flags & NAT_F_NODEPORT)
				return nodeport_snat_reply6(skb, f, &ip6);
			if (nodeport_host_reply6(skb, f, &ip6, &action))
				return action;
		}
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_OVERLAY, DIR_INGRESS);
	}
	return drop_packet(skb, f, DROP_NOT_FOR_NODE, DIR_INGRESS, 0);
}

SEC("tc")
int tendril_from_overlay(struct __sk_buff *skb)
{
	struct ipv6_info ip6;
	struct ipv4_info ip;
	struct flow *f;
	__be16 proto;
	int ret;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_SHOT;
	proto = eth_load_proto(skb);
	ret = tunnel_key_identity(skb, &f->src_identity);
	if (ret < 0) {
		/* The addresses for the drop event, when there are any. */
		if (proto == bpf_htons(ETH_P_IP))
			ipv4_load(skb, f, &ip);
		else if (proto == bpf_htons(ETH_P_IPV6))
			ipv6_load(skb, f, &ip6);
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	}
	if (proto == bpf_htons(ETH_P_IP))
		return from_overlay_ipv4(skb, f);
	if (proto == bpf_htons(ETH_P_IPV6))
		return from_overlay_ipv6(skb, f);
	/* Nodes send each other IPv4 and IPv6 only; nothing else is routed through the overlay. */
	return drop_packet(skb, f, DROP_UNKNOWN_L3, DIR_INGRESS, 0);
}

char _license[] SEC("license") = "Dual BSD/GPL";
