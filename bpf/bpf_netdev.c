// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The programs on the node's own devices:
 *   tendril_from_netdev — ingress of each --devices device: replies to SNAT
 *     mappings get their original destination back; NodePort, externalIP
 *     and LoadBalancer frontends are load-balanced; a ClusterIP is no
 *     frontend for the outside: DROP_CLUSTERIP_FROM_OUTSIDE (unless
 *     --bpf-lb-external-clusterip); IPv6 alike (from_netdev_ipv6);
 *     everything else goes to the stack untouched.
 *   tendril_to_netdev — egress of each --devices device: pod traffic
 *     leaving the masquerade CIDRs is SNATed to the device's address.
 *   tendril_to_lo — lo egress: the node's own connections to a NodePort on
 *     one of its addresses (IPv4 and IPv6).
 * Nothing here drops traffic that is not tendril's, and only what tendril
 * translates is counted in tendril_metrics and traced (TRACE_FROM_NETWORK,
 * TRACE_TO_NETWORK): the node's own traffic on these devices is not.
 */
#include <linux/if_ether.h>

/* This object parses IPv6 (nodeport_lb6): conntrack's dispatch keeps its IPv6 stages (conntrack.h). */
#define TENDRIL_IPV6_FLOWS 1

#include "common.h"
#include "config.h"
#include "devices.h"
#include "drop.h"
#include "enforce.h"
#include "eth.h"
#include "flow.h"
#include "ipv4.h"
#include "ipv6.h"
#include "l4.h"
#include "nat.h"
#include "nat6.h"
#include "nodeport.h"
#include "trace.h"

static __always_inline int from_netdev_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct device_info *dev = device_lookup(skb->ifindex);
	struct ipv4_info ip;
	__u8 nat_flags = 0;
	int action = TC_ACT_OK, ret;

	/* Malformed traffic from the network is the stack's to judge, not ours. */
	if (!dev || ipv4_load(skb, f, &ip) < 0 || l4_load(skb, f, &ip) < 0)
		return TC_ACT_OK;
	/* A masquerade reply, now addressed to its pod: counted and traced as tendril's; a drop is already counted. */
	if (snat4_rev_netdev(skb, f, &ip, &nat_flags, &action))
		return action == TC_ACT_SHOT ? action : pass_packet(skb, f, action, TRACE_FROM_NETWORK, DIR_INGRESS);
	if (nat_flags & NAT_F_NODEPORT)
		return nodeport_snat_reply4(skb, f, &ip);
	ret = nodeport_lb4(skb, f, &ip, &action);
	/* Its own clock reading: microseconds after the translation's, as any later packet's would be. */
	if (ret == NODEPORT_LB_REMOTE)
		return nodeport_to_remote4(skb, f, &ip, dev->ipv4, bpf_ktime_get_ns());
	if (ret)
		return action;
	return TC_ACT_OK;
}

/*
 * IPv6 from the network, as from_netdev_ipv4: a reply to an IPv6 SNAT
 * mapping (masquerade, or a NodePort flow to a backend off the node); an
 * IPv6 service frontend (NodePort on a named node address, external or
 * LoadBalancer IP) load-balanced to a backend here or elsewhere;
 * everything else, neighbour discovery included, goes to the stack
 * untouched.
 */
static __always_inline int from_netdev_ipv6(struct __sk_buff *skb, struct flow *f)
{
	struct device_info *dev = device_lookup(skb->ifindex);
	struct ipv6_info ip6;
	int action = TC_ACT_OK, ret;
	__u8 nat_flags = 0;

	if (!dev || ipv6_load(skb, f, &ip6) < 0 || l4_load6(skb, f, &ip6) < 0)
		return TC_ACT_OK;
	/* An IPv6 masquerade reply, now addressed to its pod (as IPv4's). */
	if (snat6_rev_netdev(skb, f, &ip6, &nat_flags, &action))
		return action == TC_ACT_SHOT ? action : pass_packet(skb, f, action, TRACE_FROM_NETWORK, DIR_INGRESS);
	if (nat_flags & NAT_F_NODEPORT)
		return nodeport_snat_reply6(skb, f, &ip6);
	ret = nodeport_lb6(skb, f, &ip6, &action);
	if (ret == NODEPORT_LB_REMOTE)
		return nodeport_to_remote6(skb, f, &ip6, dev, bpf_ktime_get_ns());
	if (ret)
		return action;
	return TC_ACT_OK;
}

SEC("tc")
int tendril_from_netdev(struct __sk_buff *skb)
{
	struct flow *f;
	__be16 proto;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_OK;
	proto = eth_load_proto(skb);
	if (proto == bpf_htons(ETH_P_IP))
		return from_netdev_ipv4(skb, f);
	if (proto == bpf_htons(ETH_P_IPV6))
		return from_netdev_ipv6(skb, f);
	return TC_ACT_OK;
}

static __always_inline int to_netdev_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct device_info *dev = device_lookup(skb->ifindex);
	struct ipv4_info ip;
	int action = TC_ACT_OK;
	__be32 saddr;

	if (!dev || !(dev->flags & DEVICE_F_MASQUERADE) || ipv4_load(skb, f, &ip) < 0 || l4_load(skb, f, &ip) < 0)
		return TC_ACT_OK;
	saddr = f->saddr;
	if (snat4_masquerade(skb, f, &ip, dev, &action))
		return action;
	/* Only what was masqueraded is tendril's to count and trace; the node's own traffic is not. */
	if (f->saddr != saddr)
		return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_NETWORK, DIR_EGRESS);
	return TC_ACT_OK;
}

/* to_netdev_ipv4 for IPv6: pod traffic leaving the IPv6 masquerade CIDRs (--ipv6-masquerade) is SNATed to the device's IPv6 address. */
static __always_inline int to_netdev_ipv6(struct __sk_buff *skb, struct flow *f)
{
	struct device_info *dev = device_lookup(skb->ifindex);
	struct ipv6_info ip6;
	int node_own, ret;

	if (!dev || !(dev->flags & DEVICE_F_MASQUERADE) || ipv6_is_unspecified(dev->ipv6) || ipv6_load(skb, f, &ip6) < 0 ||
	    l4_load6(skb, f, &ip6) < 0)
		return TC_ACT_OK;
	node_own = ipv6_addr_equal(f->saddr6, dev->ipv6);
	ret = snat6_masquerade(skb, f, &ip6, dev);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);
	if (ret > 0)
		trace_new_flow(skb, f, TRACE_TO_NETWORK, DIR_EGRESS);
	/* Only what was masqueraded (its source the device's now) is tendril's to count and trace. */
	if (!node_own && ipv6_addr_equal(f->saddr6, dev->ipv6))
		return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_NETWORK, DIR_EGRESS);
	return TC_ACT_OK;
}

SEC("tc")
int tendril_to_netdev(struct __sk_buff *skb)
{
	struct flow *f;
	__be16 proto;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_OK;
	proto = eth_load_proto(skb);
	if (proto == bpf_htons(ETH_P_IP))
		return to_netdev_ipv4(skb, f);
	if (proto == bpf_htons(ETH_P_IPV6))
		return to_netdev_ipv6(skb, f);
	return TC_ACT_OK;
}

SEC("tc")
int tendril_to_lo(struct __sk_buff *skb)
{
	struct ipv6_info ip6;
	struct ipv4_info ip;
	struct flow *f;
	int action = TC_ACT_OK;
	__be16 proto;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_OK;
	proto = eth_load_proto(skb);
	if (proto == bpf_htons(ETH_P_IPV6)) {
		if (ipv6_load(skb, f, &ip6) < 0 || l4_load6(skb, f, &ip6) < 0)
			return TC_ACT_OK;
		if (nodeport_local6(skb, f, &ip6, &action))
			return action;
		return TC_ACT_OK;
	}
	if (proto != bpf_htons(ETH_P_IP) || ipv4_load(skb, f, &ip) < 0 || l4_load(skb, f, &ip) < 0)
		return TC_ACT_OK;
	if (nodeport_local4(skb, f, &ip, &action))
		return action;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "Dual BSD/GPL";
