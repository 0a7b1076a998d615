/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NodePort, externalIPs and LoadBalancer frontends reached from outside the
 * node (on a --devices device), and from the node itself (its own address
 * through lo).
 */
#ifndef __TENDRIL_LIB_NODEPORT_H_
#define __TENDRIL_LIB_NODEPORT_H_

#include "common.h"
#include "conntrack.h"
#include "devices.h"
#include "drop.h"
#include "endpoints.h"
#include "enforce.h"
#include "eth.h"
#include "flow.h"
#include "ipcache.h"
#include "ipv4.h"
#include "lb.h"
#include "nat.h"
#include "nat6.h"
#include "trace.h"
#include "tunnel.h"

/* From linux/socket.h, which a BPF build cannot include. */
#define NODEPORT_AF_INET 2

/* nodeport_lb4/6: translated, for a backend off this node (nodeport_to_remote4/6 next). */
#define NODEPORT_LB_REMOTE 2

/* The FIB's answer for the packet as it is now: 0 with *fib filled in, or DROP_FIB_LOOKUP_FAILED without a route. */
static __always_inline int nodeport_fib_lookup4(struct __sk_buff *skb, const struct flow *f, const struct ipv4_info *ip, struct bpf_fib_lookup *fib)
{
	int ret;

	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = NODEPORT_AF_INET;
	fib->l4_protocol = f->proto;
	fib->sport = f->sport;
	fib->dport = f->dport;
	fib->tot_len = (__u16)(ip->ip_end - IP4_OFF);
	fib->ifindex = skb->ifindex;
	fib->ipv4_src = f->saddr;
	fib->ipv4_dst = f->daddr;
	ret = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
	if (ret != BPF_FIB_LKUP_RET_SUCCESS && ret != BPF_FIB_LKUP_RET_NO_NEIGH)
		return DROP_FIB_LOOKUP_FAILED;
	return 0;
}

/*
 * Sends a translated packet out of the device the FIB chose (`fib`, looked
 * up for its destination): TTL - 1, then the neighbour resolved by the
 * kernel.
 */
__stage int nodeport_redirect4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, const struct bpf_fib_lookup *fib)
{
	struct bpf_redir_neigh nh;
	int ret;

	if (!f || !ip || !fib)
		return TC_ACT_SHOT;
	if (ip->ttl <= 1)
		return drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_NONE, 0);
	ret = ipv4_dec_ttl(skb, ip, f->proto);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	/* The FIB's next hop (the gateway, or the destination itself), so the kernel does not route the packet twice. */
	__builtin_memset(&nh, 0, sizeof(nh));
	nh.nh_family = NODEPORT_AF_INET;
	nh.ipv4_nh = fib->ipv4_dst;
	return pass_packet(skb, f, bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0), TRACE_TO_NETWORK, DIR_NONE);
}

/*
 * Sends a translated packet on towards its destination by the node's
 * routes (nodeport_redirect4). DROP_FIB_LOOKUP_FAILED without a route.
 */
static __always_inline int nodeport_fib_redirect4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip)
{
	struct bpf_fib_lookup fib;
	int ret;

	ret = nodeport_fib_lookup4(skb, f, ip, &fib);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	return nodeport_redirect4(skb, f, ip, &fib);
}

/* From linux/socket.h, as NODEPORT_AF_INET. */
#define NODEPORT_AF_INET6 10

/* nodeport_fib_lookup4 for IPv6. */
static __always_inline int nodeport_fib_lookup6(struct __sk_buff *skb, const struct flow *f, const struct ipv6_info *ip, struct bpf_fib_lookup *fib)
{
	int ret;

	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = NODEPORT_AF_INET6;
	fib->l4_protocol = f->proto;
	fib->sport = f->sport;
	fib->dport = f->dport;
	fib->tot_len = (__u16)(ip->ip_end - IP6_OFF);
	fib->ifindex = skb->ifindex;
	__builtin_memcpy(fib->ipv6_src, f->saddr6, 16);
	__builtin_memcpy(fib->ipv6_dst, f->daddr6, 16);
	ret = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
	if (ret != BPF_FIB_LKUP_RET_SUCCESS && ret != BPF_FIB_LKUP_RET_NO_NEIGH)
		return DROP_FIB_LOOKUP_FAILED;
	return 0;
}

/* nodeport_redirect4 for IPv6: out of the device the FIB chose, hop limit - 1, the neighbour resolved by the kernel. */
__stage int nodeport_redirect6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, const struct bpf_fib_lookup *fib)
{
	struct bpf_redir_neigh nh;
	int ret;

	if (!f || !ip || !fib)
		return TC_ACT_SHOT;
	if (ip->hop_limit <= 1)
		return drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_NONE, 0);
	ret = ipv6_dec_hop_limit(skb, ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	__builtin_memset(&nh, 0, sizeof(nh));
	nh.nh_family = NODEPORT_AF_INET6;
	__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
	return pass_packet(skb, f, bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0), TRACE_TO_NETWORK, DIR_NONE);
}

/*
 * nodeport_fib_redirect4 for IPv6: a translated packet sent on by the
 * node's routes (nodeport_redirect6). DROP_FIB_LOOKUP_FAILED without a route.
 */
__stage int nodeport_fib_redirect6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip)
{
	struct bpf_fib_lookup fib;
	int ret;

	if (!f || !ip)
		return TC_ACT_SHOT;
	ret = nodeport_fib_lookup6(skb, f, ip, &fib);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	return nodeport_redirect6(skb, f, ip, &fib);
}

/*
 * The reply of a NodePort flow SNATed to a backend off the node (or an ICMP
 * error about it), its destination already the client again
 * (snat4_rev_netdev): source ← the frontend the client addressed, then on
 * to the client.
 */
__stage int nodeport_snat_reply4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip)
{
	enum ct_status status;
	int ret;

	if (!f || !ip)
		return TC_ACT_SHOT;
	status = ct_lookup(f, bpf_ktime_get_ns());

	/* A reply, or an ICMP error about the flow (the backend's port unreachable): both go back to the client translated. */
	if ((status != CT_REPLY && status != CT_RELATED) || !f->rev_nat_index)
		return drop_packet(skb, f, DROP_NAT_NO_MAPPING, DIR_NONE, 0);
	ret = lb4_rev_nat_ct(skb, f, ip, status);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	return nodeport_fib_redirect4(skb, f, ip);
}

/*
 * A NodePort/externalIP/LoadBalancer flow to a backend off this node
 * (Cluster policy): conntrack keyed by the translated tuple before SNAT,
 * then source ← the address of the device the FIB sends it out of (this
 * device's when that one is none of ours; the node's InternalIP when the
 * backend is reached through the overlay) and a NAT port, then out (or
 * encapsulated with the client's identity, f->src_identity, as VNI).
 * `dev_ipv4` is the address of the device the flow arrived on.
 */
__stage int nodeport_to_remote4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, __be32 dev_ipv4, __u64 now)
{
	__u32 client_identity;
	struct tunnel_route route;
	struct device_info *out;
	struct bpf_fib_lookup fib;
	__be32 nat_addr;
	int ret, tunneled;

	if (!f || !ip)
		return TC_ACT_SHOT;
	client_identity = tunnel_portable_identity(f->src_identity);
	/*
	 * In tunnel mode a backend on another node is reached through the
	 * overlay: the source becomes this node's InternalIP, which the
	 * backend's node knows as this node's and sends back through the
	 * overlay (a device address of some other network it would not know).
	 */
	tunneled = tunnel_route4(f->daddr, &route);
	if (tunneled) {
		nat_addr = config_node_ipv4();
		if (!nat_addr)
			nat_addr = dev_ipv4;
	} else {
		/* The source becomes the address of the device the backend is reached by (the backend's way back), as Cilium does. */
		ret = nodeport_fib_lookup4(skb, f, ip, &fib);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_NONE, 0);
		out = device_lookup(fib.ifindex);
		nat_addr = out && out->ipv4 ? out->ipv4 : dev_ipv4;
	}
	if (ct_lookup(f, now) == CT_NEW) {
		f->dst_identity = tunneled ? route.identity : ipcache_identity4(f->daddr);
		ret = ct_create(f, now);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_NONE, 0);
		trace_new_flow(skb, f, tunneled ? TRACE_TO_OVERLAY : TRACE_TO_NETWORK, DIR_NONE);
	}
	ret = snat4_apply(skb, f, ip, nat_addr, NAT_F_NODEPORT, now);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	/*
	 * The source is the node's address now, but the flow is the client's:
	 * the VNI carries the client's identity as it arrived (world, a CIDR's
	 * is node-local), never the node's, which the backend's node would take
	 * for a remote node's own traffic.
	 */
	if (tunneled)
		return tunnel_encap4(skb, f, &route, client_identity, DIR_NONE);
	return nodeport_redirect4(skb, f, ip, &fib);
}

/*
 * nodeport_snat_reply4 for IPv6: the reply of a NodePort flow SNATed to a
 * backend off the node (or an ICMPv6 error about it), its destination the
 * client again (snat6_rev_netdev, NAT_F_NODEPORT): source <- the frontend
 * the client addressed, then out by the FIB to the client.
 */
__stage int nodeport_snat_reply6(struct __sk_buff *skb, struct flow *f, struct ipv6_info *ip)
{
	enum ct_status status;
	int ret;

	if (!f || !ip)
		return TC_ACT_SHOT;
	status = ct_lookup(f, bpf_ktime_get_ns());
	if ((status != CT_REPLY && status != CT_RELATED) || !f->rev_nat_index)
		return drop_packet(skb, f, DROP_NAT_NO_MAPPING, DIR_NONE, 0);
	ret = lb6_rev_nat_ct(skb, f, ip, status);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	return nodeport_fib_redirect6(skb, f, ip);
}

/*
 * nodeport_to_remote4 for IPv6: a NodePort/externalIP/LoadBalancer flow to
 * a backend off this node (Cluster policy). Conntrack keyed by the
 * translated tuple before SNAT; source <- this node's IPv6 InternalIP when
 * the backend is reached through the overlay (its node knows that address
 * as this node's and tunnels the reply back), else the IPv6 address of the
 * device the FIB sends it out of (the arrival device's when that one is
 * none of ours), and a NAT port; then encapsulated with the client's
 * identity as VNI, or out by the FIB. `arrival` is the device the flow
 * arrived on. DROP_NO_CONFIG when the node has no IPv6 address to SNAT to.
 */
__stage int nodeport_to_remote6(struct __sk_buff *skb, struct flow *f, struct ipv6_info *ip, const struct device_info *arrival, __u64 now)
{
	struct tunnel_route route;
	struct device_info *out;
	struct bpf_fib_lookup fib;
	__be32 nat_addr[4];
	__u32 client_identity;
	int ret, tunneled;

	if (!f || !ip || !arrival)
		return TC_ACT_SHOT;
	/* A CIDR's identity is node-local: the backend's node knows the client as IPv6's world. */
	client_identity = f->src_identity & IDENTITY_SCOPE_MASK ? IDENTITY_WORLD_IPV6 : f->src_identity;
	__builtin_memcpy(nat_addr, arrival->ipv6, 16);
	tunneled = tunnel_route6(f->daddr6, &route);
	if (tunneled) {
		config_node_ipv6(nat_addr);
	} else {
		ret = nodeport_fib_lookup6(skb, f, ip, &fib);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_NONE, 0);
		out = device_lookup(fib.ifindex);
		if (out && !ipv6_is_unspecified(out->ipv6))
			__builtin_memcpy(nat_addr, out->ipv6, 16);
	}
	if (ipv6_is_unspecified(nat_addr))
		return drop_packet(skb, f, DROP_NO_CONFIG, DIR_NONE, 0);
	if (ct_lookup(f, now) == CT_NEW) {
		f->dst_identity = tunneled ? route.identity : ipcache_identity6(f->daddr6);
		ret = ct_create(f, now);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_NONE, 0);
		trace_new_flow(skb, f, tunneled ? TRACE_TO_OVERLAY : TRACE_TO_NETWORK, DIR_NONE);
	}
	ret = snat6_apply(skb, f, ip, nat_addr, NAT_F_NODEPORT, now);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_NONE, 0);
	/* The flow is the client's, never the node's (GO-2023-1643): the VNI carries the client's identity as it arrived. */
	if (tunneled)
		return tunnel_encap4(skb, f, &route, client_identity, DIR_NONE);
	return nodeport_redirect6(skb, f, ip, &fib);
}

/*
 * The reply of a backend off this node to the node's own connection to a
 * service (from_host made it with the router address as source; the
 * masquerade on the way out has given that back already): the frontend
 * back as its source before the stack sees it. Only packets to an address
 * of the node cost a conntrack lookup. Returns 1 with *action set when
 * translated.
 */
__stage int nodeport_host_reply4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, int *action)
{
	int ret;

	if (!f || !ip || !action)
		return 0;
	if (!lb4_proto_supported(f->proto) || ipcache_identity4(f->daddr) != IDENTITY_HOST)
		return 0;
	if (ct_lookup(f, bpf_ktime_get_ns()) != CT_REPLY || !f->rev_nat_index)
		return 0;
	ret = lb4_rev_nat(skb, f, ip);
	if (ret < 0)
		*action = drop_packet(skb, f, ret, DIR_NONE, 0);
	else
		*action = pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_NETWORK, DIR_NONE);
	return 1;
}

/*
 * nodeport_host_reply4 for IPv6: a backend's reply, from another node, to
 * the node's own connection to an IPv6 service (bpf_host's
 * from_host_service6 chose a backend off the node) gets the frontend back
 * as its source before the node's stack takes it. 1 with *action set when
 * it was such a reply, else 0.
 */
__stage int nodeport_host_reply6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, int *action)
{
	int ret;

	if (!f || !ip || !action)
		return 0;
	if (!lb4_proto_supported(f->proto) || ipcache_identity6(f->daddr6) != IDENTITY_HOST)
		return 0;
	if (ct_lookup(f, bpf_ktime_get_ns()) != CT_REPLY || !f->rev_nat_index)
		return 0;
	ret = lb6_rev_nat_ct(skb, f, ip, CT_REPLY);
	if (ret < 0)
		*action = drop_packet(skb, f, ret, DIR_NONE, 0);
	else
		*action = pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_NETWORK, DIR_NONE);
	return 1;
}

/*
 * netdev ingress, after reverse SNAT: a packet to a service frontend from
 * outside is load-balanced (DNAT, conntrack, the backend's ingress policy,
 * delivery; SNAT to the arrival device's address when the
 * backend is off this node and the service is not Local); a reply of a
 * NodePort flow that was SNATed (nat_flags & NAT_F_NODEPORT) gets the
 * frontend back as its source and is sent to the client (the caller sends
 * it to nodeport_snat_reply4); a backend's reply to the node's own ClusterIP
 * connection gets the frontend back (nodeport_host_reply4); a packet to a
 * ClusterIP is dropped (DROP_CLUSTERIP_FROM_OUTSIDE) unless
 * --bpf-lb-external-clusterip makes it a frontend like a NodePort. Returns
 * 1 with *action set when decided here, 0 when the packet is no service's,
 * NODEPORT_LB_REMOTE when it is translated for a backend off this node
 * (Cluster policy): the caller sends it on with nodeport_to_remote4, one
 * stage after this one rather than inside it (the stack the verifier
 * allows the chain of stages is 512 bytes).
 */
__stage int nodeport_lb4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, int *action)
{
	struct endpoint_info *dst;
	struct lb4_frontend fe;
	__u8 svc_flags;
	__u64 now;
	int ret;

	if (!f || !ip || !action)
		return 0;
	/* From outside the node: the EXTERNAL scope only (a Local service's lists this node's backends). */
	if (!lb4_lookup(f, &fe, 0))
		/*
		 * The node's own connection to a service whose backend is elsewhere:
		 * the reply comes to the router address straight (no masquerade on
		 * the device, or a backend inside the cluster, which is never
		 * masqueraded) or after snat4_rev_netdev.
		 */
		return nodeport_host_reply4(skb, f, ip, action);
	svc_flags = fe.svc.flags;
	/* From the wire: never the node, a local pod, or (tunnel mode) another node's; a --devices device is no pod's. */
	flow_set_arrived_source4(f, 0);
	/*
	 * A ClusterIP is no frontend for the outside, even when a router sends
	 * its traffic here (the stack would route it into tendril_host, which
	 * load-balances the node's own): dropped, unless
	 * --bpf-lb-external-clusterip makes it one like a NodePort.
	 */
	if (!(svc_flags & (SVC_F_NODEPORT | SVC_F_EXTERNAL_IP | SVC_F_LOADBALANCER)) && !config_external_clusterip()) {
		*action = drop_packet(skb, f, DROP_CLUSTERIP_FROM_OUTSIDE, DIR_INGRESS, 0);
		return 1;
	}
	now = bpf_ktime_get_ns();
	/* This client's packet says what its flow is now (its port may have gone to another frontend before). */
	f->lb_checked = 1;
	ret = lb4_translate(skb, f, ip, &fe, now);
	if (ret < 0) {
		*action = drop_packet(skb, f, ret, DIR_INGRESS, 0);
		return 1;
	}
	f->ct_flags |= CT_F_NODEPORT;
	dst = pod_endpoint_lookup4(f->daddr);
	if (!dst) {
		if (!(svc_flags & SVC_F_LOCAL_TRAFFIC))
			return NODEPORT_LB_REMOTE;
		*action = drop_packet(skb, f, DROP_NO_SERVICE, DIR_INGRESS, 0);
		return 1;
	}
	/* A local backend sees the client's own address (Local and Cluster alike), judged as it arrived. */
	ret = ingress_ct_policy4_source(skb, f, ip, dst, TRACE_TO_ENDPOINT, now, 1);
	if (ret) {
		*action = ret;
		return 1;
	}
	if (ip->ttl <= 1) {
		*action = drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_INGRESS, 0);
		return 1;
	}
	ret = ipv4_dec_ttl(skb, ip, f->proto);
	if (ret == 0 && eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		ret = DROP_WRITE_ERROR;
	if (ret < 0) {
		*action = drop_packet(skb, f, ret, DIR_INGRESS, 0);
		return 1;
	}
	*action = pass_packet(skb, f, bpf_redirect_peer(dst->ifindex, 0), TRACE_TO_ENDPOINT, DIR_INGRESS);
	return 1;
}

/*
 * nodeport_lb4 for IPv6: a NodePort on a named node address, an external
 * or LoadBalancer IP, from outside. The client's identity is what its
 * address is known as here, or world, never the node's
 * (flow_set_arrived_source6 without a device: Cilium's GO-2023-1643 took
 * IPv6 NodePort clients for the host). A ClusterIP is no frontend for the
 * outside (DROP_CLUSTERIP_FROM_OUTSIDE, as IPv4's). A Local service's
 * backends are this node's (its EXTERNAL scope; none here:
 * DROP_NO_SERVICE); a Cluster service's backend off this node is
 * NODEPORT_LB_REMOTE, for the caller's nodeport_to_remote6. Returns 1
 * with *action set when decided here, 0 when no frontend was addressed.
 */
__stage int nodeport_lb6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, int *action)
{
	struct endpoint_info *dst;
	struct lb6_frontend fe;
	__u8 hl;
	__u64 now;
	int ret;

	if (!f || !ip || !action)
		return 0;
	if (!lb6_lookup(f, &fe, 0))
		/* The node's own connection to an IPv6 service whose backend is on another node: the reply comes to the router address. */
		return nodeport_host_reply6(skb, f, ip, action);
	flow_set_arrived_source6(f, 0);
	if (!(fe.svc.flags & (SVC_F_NODEPORT | SVC_F_EXTERNAL_IP | SVC_F_LOADBALANCER)) && !config_external_clusterip()) {
		*action = drop_packet(skb, f, DROP_CLUSTERIP_FROM_OUTSIDE, DIR_INGRESS, 0);
		return 1;
	}
	now = bpf_ktime_get_ns();
	f->lb_checked = 1;
	ret = lb6_translate(skb, f, ip, &fe, now);
	if (ret < 0) {
		*action = drop_packet(skb, f, ret, DIR_INGRESS, 0);
		return 1;
	}
	f->ct_flags |= CT_F_NODEPORT;
	dst = pod_endpoint_lookup6(f->daddr6);
	if (!dst) {
		if (!(fe.svc.flags & SVC_F_LOCAL_TRAFFIC))
			return NODEPORT_LB_REMOTE;
		*action = drop_packet(skb, f, DROP_NO_SERVICE, DIR_INGRESS, 0);
		return 1;
	}
	f->dst_identity = dst->identity;
	f->dst_endpoint = dst->endpoint_id;
	/* A local backend sees the client's own address, judged as it arrived. */
	ret = ingress_ct_policy6_stage(skb, f, ip, now, TRACE_TO_ENDPOINT | INGRESS_SOURCE_KNOWN | endpoint_policy_how(dst));
	if (ret) {
		*action = ret;
		return 1;
	}
	hl = ip->hop_limit;
	if (hl <= 1) {
		*action = drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_INGRESS, 0);
		return 1;
	}
	ret = ipv6_dec_hop_limit(skb, ip);
	if (ret == 0 && eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		ret = DROP_WRITE_ERROR;
	if (ret < 0) {
		*action = drop_packet(skb, f, ret, DIR_INGRESS, 0);
		return 1;
	}
	*action = pass_packet(skb, f, bpf_redirect_peer(dst->ifindex, 0), TRACE_TO_ENDPOINT, DIR_INGRESS);
	return 1;
}

/* The last step of nodeport_local4/6: the backend's MACs, then straight into its device. */
static __always_inline int nodeport_local_deliver(struct __sk_buff *skb, struct flow *f, const struct endpoint_info *dst)
{
	if (eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_INGRESS, 0);
	return pass_packet(skb, f, bpf_redirect(dst->ifindex, 0), TRACE_TO_ENDPOINT, DIR_INGRESS);
}

/*
 * lo egress: the node connecting to a NodePort on one of its own addresses.
 * Only a backend on this node can be reached this way: one is chosen among
 * the service's (DROP_NO_SERVICE when it has none here); DNAT, the
 * backend's ingress policy (the node's identity), then straight into the
 * backend's device. Returns 1 with *action set when decided here, 0
 * otherwise.
 */
static __always_inline int nodeport_local4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, int *action)
{
	struct endpoint_info *dst;
	struct lb4_frontend fe;
	__u64 now;
	int ret;

	if (!lb4_lookup(f, &fe, 1))
		return 0;
	now = bpf_ktime_get_ns();
	f->lb_local_only = 1;
	ret = lb4_translate(skb, f, ip, &fe, now);
	dst = ret < 0 ? NULL : pod_endpoint_lookup4(f->daddr);
	if (!dst) {
		flow_set_source4(f);
		*action = drop_packet(skb, f, ret < 0 ? ret : DROP_NO_SERVICE, DIR_INGRESS, 0);
		return 1;
	}
	ret = ingress_ct_policy4(skb, f, ip, dst, TRACE_TO_ENDPOINT, now);
	if (ret) {
		*action = ret;
		return 1;
	}
	*action = nodeport_local_deliver(skb, f, dst);
	return 1;
}


/* nodeport_local4 for IPv6: the node connecting to an IPv6 NodePort on one of its own addresses. */
static __always_inline int nodeport_local6(struct __sk_buff *skb, struct flow *f, struct ipv6_info *ip6, int *action)
{
	struct endpoint_info *dst;
	struct lb6_frontend fe;
	__u64 now;
	int ret;

	if (!lb6_lookup(f, &fe, 1))
		return 0;
	now = bpf_ktime_get_ns();
	f->lb_local_only = 1;
	ret = lb6_translate(skb, f, ip6, &fe, now);
	dst = ret < 0 ? NULL : pod_endpoint_lookup6(f->daddr6);
	if (!dst) {
		flow_set_source6(f);
		*action = drop_packet(skb, f, ret < 0 ? ret : DROP_NO_SERVICE, DIR_INGRESS, 0);
		return 1;
	}
	f->dst_identity = dst->identity;
	f->dst_endpoint = dst->endpoint_id;
	ret = ingress_ct_policy6_stage(skb, f, ip6, now, TRACE_TO_ENDPOINT | endpoint_policy_how(dst));
	if (ret) {
		*action = ret;
		return 1;
	}
	*action = nodeport_local_deliver(skb, f, dst);
	return 1;
}

#endif
