// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The programs on the host device pair:
 *   tendril_from_host — tendril_host egress: what the node routes into
 *     tendril_host, which is the pod CIDRs' fallback route behind every
 *     pod's /32. A local endpoint's address (its /32 not in place yet) is
 *     delivered after its ingress policy; in tunnel mode an address another
 *     node hosts goes through the overlay; any other unicast address is a
 *     pod address with no endpoint here: DROP_UNKNOWN_ENDPOINT. Multicast
 *     and broadcast the node sends on tendril_host are no pod's: passed.
 *     The source's identity (the VNI through the overlay) is the node's
 *     for what the node itself sends, and for what it forwards (a router
 *     sent it here from a device) only what its address is known as here,
 *     never the node's or, in tunnel mode, another node's
 *     (flow_set_arrived_source4).
 *     The agent also routes each ClusterIP here: the node's connections to
 *     a service are load-balanced (DNAT, the backend's ingress policy,
 *     delivery to a local backend, through the overlay to a backend on
 *     another node in tunnel mode, else out by the FIB's route); a
 *     ClusterIP packet forwarded from outside is dropped
 *     (DROP_CLUSTERIP_FROM_OUTSIDE) unless --bpf-lb-external-clusterip.
 *     IPv6 (from_host_ipv6) the same: the node's connections to IPv6
 *     service frontends load-balanced, a local endpoint's address delivered
 *     after its ingress policy with conntrack, another node's pod through
 *     the overlay in tunnel mode; multicast, link-local addresses and
 *     neighbour discovery are the node's own and pass; any other unicast
 *     address is DROP_UNKNOWN_ENDPOINT.
 *   tendril_to_host — tendril_host ingress: counted and traced, passed.
 */
#include <linux/if_ether.h>

/* This object parses IPv6 (from_host_ipv6): conntrack's dispatch keeps its IPv6 stages (conntrack.h). */
#define TENDRIL_IPV6_FLOWS 1

#include "common.h"
#include "config.h"
#include "devices.h"
#include "drop.h"
#include "endpoints.h"
#include "enforce.h"
#include "eth.h"
#include "flow.h"
#include "ipcache.h"
#include "ipv4.h"
#include "ipv6.h"
#include "l4.h"
#include "lb.h"
#include "nat.h"
#include "nodeport.h"
#include "trace.h"
#include "tunnel.h"

/* The stack addressed the frame to tendril_net: the pod needs its own MAC (either family). */
static __always_inline int from_host_deliver4(struct __sk_buff *skb, struct flow *f, const struct endpoint_info *dst)
{
	if (eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_INGRESS, 0);
	return pass_packet(skb, f, bpf_redirect(dst->ifindex, 0), TRACE_TO_ENDPOINT, DIR_INGRESS);
}

/*
 * A ClusterIP (a frontend with none of NodePort, externalIP, LoadBalancer)
 * answers pods, the node and other nodes' pods only, unless
 * --bpf-lb-external-clusterip. Pods and other nodes translate it before it
 * leaves them, so a packet to one that the node forwards into tendril_host
 * came from outside (a router sent it here), whatever device it arrived on
 * (one in --devices drops it already); only a local pod's packet from its
 * own device (flow_set_arrived_source4 named its endpoint) is let through.
 */
static __always_inline int from_host_clusterip_allowed(const struct flow *f, const struct lb4_service *svc)
{
	if (svc->flags & (SVC_F_NODEPORT | SVC_F_EXTERNAL_IP | SVC_F_LOADBALANCER))
		return 1;
	return f->src_endpoint != 0 || config_external_clusterip();
}

/*
 * The node reaching a ClusterIP (the agent routes each to tendril_host):
 * backend chosen and DNAT, then the backend's ingress policy and delivery
 * when it is local; a backend elsewhere goes back to the stack with its
 * conntrack entry (the node's identity as source, a forwarded packet's own
 * when forwarded). Returns 0 when the packet addresses no service, else 1
 * with the TC action in *action: "no service" is never a value a TC action
 * could also take.
 */
static __always_inline int from_host_service4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, int *action)
{
	__u32 forwarded = skb->ingress_ifindex, src_identity = IDENTITY_HOST;
	struct endpoint_info *dst;
	struct tunnel_route route;
	struct lb4_frontend fe;
	int ret, tunneled;
	__u64 now;

	if (!lb4_lookup(f, &fe, 1))
		return 0;
	if (forwarded) {
		flow_set_arrived_source4(f, skb->ingress_ifindex);
		src_identity = tunnel_portable_identity(f->src_identity);
		if (!from_host_clusterip_allowed(f, &fe.svc)) {
			*action = drop_packet(skb, f, DROP_CLUSTERIP_FROM_OUTSIDE, DIR_NONE, 0);
			return 1;
		}
	}
	now = bpf_ktime_get_ns();
	ret = lb4_translate(skb, f, ip, &fe, now);
	if (ret < 0) {
		if (!forwarded)
			flow_set_source4(f);
		*action = drop_packet(skb, f, ret, DIR_NONE, 0);
		return 1;
	}
	dst = pod_endpoint_lookup4(f->daddr);
	if (dst) {
		ret = ingress_ct_policy4_source(skb, f, ip, dst, TRACE_TO_ENDPOINT, now, forwarded != 0);
		*action = ret ? ret : from_host_deliver4(skb, f, dst);
		return 1;
	}
	tunneled = tunnel_route4(f->daddr, &route);
	if (ct_lookup(f, now) == CT_NEW) {
		if (forwarded)
			f->src_identity = src_identity;
		else
			flow_set_source4(f);
		f->dst_identity = tunneled ? route.identity : ipcache_identity4(f->daddr);
		ret = ct_create(f, now);
		if (ret < 0) {
			*action = drop_packet(skb, f, ret, DIR_NONE, 0);
			return 1;
		}
		trace_new_flow(skb, f, tunneled ? TRACE_TO_OVERLAY : TRACE_TO_NETWORK, DIR_NONE);
	}
	/*
	 * A backend on another node in tunnel mode: the overlay, with the node's
	 * identity as VNI for its own packets and a forwarded packet's own
	 * (never the conntrack entry's: a forged tuple could match the node's).
	 */
	if (tunneled)
		*action = tunnel_encap4(skb, f, &route, src_identity, DIR_NONE);
	else
		/* Not back through tendril_net: the stack would take the router address as source for a martian. */
		*action = nodeport_fib_redirect4(skb, f, ip);
	return 1;
}

static __always_inline int from_host_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct endpoint_info *dst;
	struct tunnel_route route;
	struct ipv4_info ip;
	int l4_ret, ret, action = TC_ACT_SHOT;

	ret = ipv4_load(skb, f, &ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	if (ipv4_is_multicast_or_broadcast(f->daddr))
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_HOST, DIR_NONE);
	/* Ports for the service lookup; a header too short for them is judged below, as before services. */
	l4_ret = l4_load(skb, f, &ip);
	if (l4_ret == 0 && from_host_service4(skb, f, &ip, &action))
		return action;
	dst = pod_endpoint_lookup4(f->daddr);
	if (!dst) {
		/* A pod on another node in tunnel mode (the agent routes remote pod CIDRs here): the overlay, the source's identity as VNI. */
		if (tunnel_route4(f->daddr, &route)) {
			f->src_identity = IDENTITY_HOST;
			if (skb->ingress_ifindex) {
				flow_set_arrived_source4(f, skb->ingress_ifindex);
				f->src_identity = tunnel_portable_identity(f->src_identity);
			}
			f->dst_identity = route.identity;
			return tunnel_encap4(skb, f, &route, f->src_identity, DIR_NONE);
		}
		f->src_identity = IDENTITY_HOST;
		f->dst_identity = ipcache_identity4(f->daddr);
		return drop_packet(skb, f, DROP_UNKNOWN_ENDPOINT, DIR_NONE, 0);
	}
	/* A forwarded packet's source is judged now; the node's own by its address, for new flows only (a conntrack hit carries it). */
	if (skb->ingress_ifindex)
		flow_set_arrived_source4(f, skb->ingress_ifindex);
	if (l4_ret < 0) {
		f->dst_identity = dst->identity;
		f->dst_endpoint = dst->endpoint_id;
		if (!skb->ingress_ifindex)
			flow_set_source4(f);
		return drop_packet(skb, f, l4_ret, DIR_INGRESS, 0);
	}
	ret = ingress_ct_policy4_source(skb, f, &ip, dst, TRACE_TO_ENDPOINT, bpf_ktime_get_ns(), skb->ingress_ifindex != 0);
	if (ret)
		return ret;
	return from_host_deliver4(skb, f, dst);
}

/*
 * from_host_service4 for IPv6: the node's own connection to an IPv6
 * ClusterIP (the agent routes each IPv6 frontend to tendril_host too),
 * load-balanced the same way: DNAT, then a local backend's ingress policy
 * and delivery, a backend on another node through the overlay in tunnel
 * mode (the node's identity as VNI), else out by the FIB's route. A
 * forwarded packet is judged by its own source (flow_set_arrived_source6),
 * never as the node, and a ClusterIP is no frontend for it
 * (DROP_CLUSTERIP_FROM_OUTSIDE) unless it came from a local pod's own
 * device or --bpf-lb-external-clusterip. 0 when no service is addressed.
 */
static __always_inline int from_host_service6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip6, int *action)
{
	__u32 forwarded = skb->ingress_ifindex, src_identity = IDENTITY_HOST;
	struct endpoint_info *dst;
	struct tunnel_route route;
	struct lb6_frontend fe;
	int ret, tunneled;
	__u64 now;

	if (!lb6_lookup(f, &fe, 1))
		return 0;
	if (forwarded) {
		flow_set_arrived_source6(f, skb->ingress_ifindex);
		src_identity = tunnel_portable_identity6(f->src_identity);
		if (!from_host_clusterip_allowed(f, &fe.svc)) {
			*action = drop_packet(skb, f, DROP_CLUSTERIP_FROM_OUTSIDE, DIR_NONE, 0);
			return 1;
		}
	}
	now = bpf_ktime_get_ns();
	ret = lb6_translate(skb, f, ip6, &fe, now);
	if (ret < 0) {
		if (!forwarded)
			flow_set_source6(f);
		*action = drop_packet(skb, f, ret, DIR_NONE, 0);
		return 1;
	}
	dst = pod_endpoint_lookup6(f->daddr6);
	if (dst) {
		f->dst_identity = dst->identity;
		f->dst_endpoint = dst->endpoint_id;
		ret = ingress_ct_policy6_stage(skb, f, ip6, now, TRACE_TO_ENDPOINT | (forwarded ? INGRESS_SOURCE_KNOWN : 0) | endpoint_policy_how(dst));
		*action = ret ? ret : from_host_deliver4(skb, f, dst);
		return 1;
	}
	tunneled = tunnel_route6(f->daddr6, &route);
	if (ct_lookup(f, now) == CT_NEW) {
		if (forwarded)
			f->src_identity = src_identity;
		else
			flow_set_source6(f);
		f->dst_identity = tunneled ? route.identity : ipcache_identity6(f->daddr6);
		ret = ct_create(f, now);
		if (ret < 0) {
			*action = drop_packet(skb, f, ret, DIR_NONE, 0);
			return 1;
		}
		trace_new_flow(skb, f, tunneled ? TRACE_TO_OVERLAY : TRACE_TO_NETWORK, DIR_NONE);
	}
	/* As IPv4: the VNI is the node's for its own packets, a forwarded packet's own, never the conntrack entry's. */
	if (tunneled)
		*action = tunnel_encap4(skb, f, &route, src_identity, DIR_NONE);
	else
		*action = nodeport_fib_redirect6(skb, f, ip6);
	return 1;
}

/*
 * IPv6 the node routes into tendril_host: an IPv6 service frontend is
 * load-balanced (from_host_service6); a local endpoint's address gets its
 * ingress policy (the source judged as ingress_to_endpoint6 does) and is
 * delivered; in tunnel mode an address another node hosts goes through
 * the overlay (the agent routes remote IPv6 pod CIDRs here), with the
 * node's identity as VNI for its own packets and a forwarded packet's own.
 * The node's own multicast, link-local traffic and neighbour discovery
 * pass: a node's ND must never be dropped here.
 */
static __always_inline int from_host_ipv6(struct __sk_buff *skb, struct flow *f)
{
	__u32 arrived_on = skb->ingress_ifindex;
	struct endpoint_info *dst;
	struct tunnel_route route;
	struct ipv6_info ip6;
	int l4_ret, ret, action = TC_ACT_SHOT;
	__u8 type = 0;

	ret = ipv6_load(skb, f, &ip6);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	if (ipv6_is_multicast(f->daddr6) || ipv6_is_link_local(f->daddr6))
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_HOST, DIR_NONE);
	if (f->proto == IPPROTO_ICMPV6 && !ipv6_is_later_fragment(&ip6) && icmp6_load_type(skb, &ip6, &type) == 0 &&
	    type >= ICMP6_T_ROUTER_SOLICIT && type <= ICMP6_T_REDIRECT)
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_HOST, DIR_NONE);
	/* Ports for the service lookup; a header too short for them is judged below, as IPv4's. */
	l4_ret = l4_load6(skb, f, &ip6);
	if (l4_ret == 0 && from_host_service6(skb, f, &ip6, &action))
		return action;
	dst = pod_endpoint_lookup6(f->daddr6);
	if (!dst) {
		if (tunnel_route6(f->daddr6, &route)) {
			f->src_identity = IDENTITY_HOST;
			if (arrived_on) {
				flow_set_arrived_source6(f, arrived_on);
				f->src_identity = tunnel_portable_identity6(f->src_identity);
			}
			f->dst_identity = route.identity;
			return tunnel_encap4(skb, f, &route, f->src_identity, DIR_NONE);
		}
		f->src_identity = IDENTITY_HOST;
		f->dst_identity = ipcache_identity6(f->daddr6);
		return drop_packet(skb, f, DROP_UNKNOWN_ENDPOINT, DIR_NONE, 0);
	}
	f->dst_identity = dst->identity;
	f->dst_endpoint = dst->endpoint_id;
	if (arrived_on)
		flow_set_arrived_source6(f, arrived_on);
	if (l4_ret < 0) {
		if (!arrived_on)
			flow_set_source6(f);
		return drop_packet(skb, f, l4_ret, DIR_INGRESS, 0);
	}
	ret = ingress_ct_policy6_stage(skb, f, &ip6, bpf_ktime_get_ns(), TRACE_TO_ENDPOINT | (arrived_on ? INGRESS_SOURCE_KNOWN : 0) | endpoint_policy_how(dst));
	if (ret)
		return ret;
	return from_host_deliver4(skb, f, dst);
}

SEC("tc")
int tendril_from_host(struct __sk_buff *skb)
{
	struct flow *f;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_SHOT;
	if (eth_load_proto(skb) == bpf_htons(ETH_P_IP))
		return from_host_ipv4(skb, f);
	if (eth_load_proto(skb) == bpf_htons(ETH_P_IPV6))
		return from_host_ipv6(skb, f);
	return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_HOST, DIR_NONE);
}

SEC("tc")
int tendril_to_host(struct __sk_buff *skb)
{
	struct ipv4_info ip;
	struct flow *f;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_OK;
	/* Addresses for the trace only: nothing here is dropped. */
	if (eth_load_proto(skb) == bpf_htons(ETH_P_IP))
		ipv4_load(skb, f, &ip);
	return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_HOST, DIR_NONE);
}

char _license[] SEC("license") = "Dual BSD/GPL";
