// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The programs on the host device pair:
 *   tendril_from_host — tendril_host egress: what the node routes into
 *     tendril_host, which is the pod CIDRs' fallback route behind every
 *     pod's /32. A local endpoint's address (its /32 not in place yet) is
 *     delivered after its ingress policy; in tunnel mode an address another
 *     node hosts goes through the overlay (the node's identity as VNI); any
 *     other unicast address is a pod address with no endpoint here:
 *     DROP_UNKNOWN_ENDPOINT. Multicast
 *     and broadcast the node sends on tendril_host are no pod's: passed.
 *     The agent also routes each ClusterIP here: the node's connections to
 *     a service are load-balanced (DNAT, the backend's ingress policy,
 *     delivery to a local backend, through the overlay to a backend on
 *     another node in tunnel mode, else out by the FIB's route).
 *   tendril_to_host — tendril_host ingress: counted and traced, passed.
 */
#include <linux/if_ether.h>

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
#include "l4.h"
#include "lb.h"
#include "nat.h"
#include "nodeport.h"
#include "trace.h"
#include "tunnel.h"

/* The stack addressed the frame to tendril_net: the pod needs its own MAC. */
static __always_inline int from_host_deliver4(struct __sk_buff *skb, struct flow *f, const struct endpoint_info *dst)
{
	if (eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_INGRESS, 0);
	return pass_packet(skb, f, bpf_redirect(dst->ifindex, 0), TRACE_TO_ENDPOINT, DIR_INGRESS);
}

/*
 * The node reaching a ClusterIP (the agent routes each to tendril_host):
 * backend chosen and DNAT, then the backend's ingress policy and delivery
 * when it is local; a backend elsewhere goes back to the stack with its
 * conntrack entry (the node's identity as source). Returns -1 when the
 * packet addresses no service.
 */
static __always_inline int from_host_service4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip)
{
	struct lb4_service *svc;
	struct endpoint_info *dst;
	struct tunnel_route route;
	struct lb4_key key;
	int ret, tunneled;
	__u64 now;

	svc = lb4_lookup(f, &key, 1);
	if (!svc)
		return -1;
	now = bpf_ktime_get_ns();
	ret = lb4_translate(skb, f, ip, &key, svc, now);
	if (ret < 0) {
		flow_set_source4(f);
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	}
	dst = pod_endpoint_lookup4(f->daddr);
	if (dst) {
		ret = ingress_ct_policy4(skb, f, ip, dst, TRACE_TO_ENDPOINT, now);
		if (ret)
			return ret;
		return from_host_deliver4(skb, f, dst);
	}
	tunneled = tunnel_route4(f->daddr, &route);
	if (ct_lookup(f, now) == CT_NEW) {
		flow_set_source4(f);
		f->dst_identity = tunneled ? route.identity : ipcache_identity4(f->daddr);
		ct_create(f, now);
		trace_new_flow(skb, f, tunneled ? TRACE_TO_OVERLAY : TRACE_TO_NETWORK, DIR_NONE);
	}
	/* A backend on another node in tunnel mode: the overlay, the node's own identity as VNI. */
	if (tunneled)
		return tunnel_encap4(skb, f, &route, IDENTITY_HOST, DIR_NONE);
	/* Not back through tendril_net: the stack would take the router address as source for a martian. */
	return nodeport_fib_redirect4(skb, f, ip);
}

static __always_inline int from_host_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct endpoint_info *dst;
	struct tunnel_route route;
	struct ipv4_info ip;
	int l4_ret, ret;

	ret = ipv4_load(skb, f, &ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	if (ipv4_is_multicast_or_broadcast(f->daddr))
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_HOST, DIR_NONE);
	/* Ports for the service lookup; a header too short for them is judged below, as before services. */
	l4_ret = l4_load(skb, f, &ip);
	if (l4_ret == 0) {
		ret = from_host_service4(skb, f, &ip);
		if (ret >= 0)
			return ret;
	}
	dst = pod_endpoint_lookup4(f->daddr);
	if (!dst) {
		f->src_identity = IDENTITY_HOST;
		/* A pod on another node in tunnel mode (the agent routes remote pod CIDRs here): the overlay. */
		if (tunnel_route4(f->daddr, &route)) {
			f->dst_identity = route.identity;
			return tunnel_encap4(skb, f, &route, IDENTITY_HOST, DIR_NONE);
		}
		f->dst_identity = ipcache_identity4(f->daddr);
		return drop_packet(skb, f, DROP_UNKNOWN_ENDPOINT, DIR_NONE, 0);
	}
	if (l4_ret < 0) {
		f->dst_identity = dst->identity;
		f->dst_endpoint = dst->endpoint_id;
		flow_set_source4(f);
		return drop_packet(skb, f, l4_ret, DIR_INGRESS, 0);
	}
	ret = ingress_ct_policy4(skb, f, &ip, dst, TRACE_TO_ENDPOINT, bpf_ktime_get_ns());
	if (ret)
		return ret;
	return from_host_deliver4(skb, f, dst);
}

SEC("tc")
int tendril_from_host(struct __sk_buff *skb)
{
	struct flow f;

	flow_init(&f, skb);
	if (eth_load_proto(skb) == bpf_htons(ETH_P_IP))
		return from_host_ipv4(skb, &f);
	return pass_packet(skb, &f, TC_ACT_OK, TRACE_FROM_HOST, DIR_NONE);
}

SEC("tc")
int tendril_to_host(struct __sk_buff *skb)
{
	struct ipv4_info ip;
	struct flow f;

	flow_init(&f, skb);
	/* Addresses for the trace only: nothing here is dropped. */
	if (eth_load_proto(skb) == bpf_htons(ETH_P_IP))
		ipv4_load(skb, &f, &ip);
	return pass_packet(skb, &f, TC_ACT_OK, TRACE_TO_HOST, DIR_NONE);
}

char _license[] SEC("license") = "Dual BSD/GPL";
