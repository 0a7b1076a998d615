// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The programs on a pod's host-side veth (lxc…):
 *   tendril_from_container — tc ingress: what the pod sends (ARP responder,
 *     anti-spoofing, service load-balancing (DNAT, hairpin), conntrack,
 *     egress and local-ingress policy, reverse NAT of a backend's replies,
 *     delivery straight into a local destination pod with
 *     bpf_redirect_peer, or in tunnel mode through the overlay to the
 *     node hosting the destination);
 *   tendril_to_container — tc egress: what the node's stack sends the pod
 *     (conntrack with reverse NAT of service replies, then the pod's
 *     ingress policy).
 * Everything per endpoint lives in maps; this object is built once.
 */
#include <linux/if_ether.h>
#include <linux/in.h>

#include "common.h"
#include "arp.h"
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
#include "policy.h"
#include "trace.h"
#include "tunnel.h"

/* Neither IPv4 nor ARP: ICMPv6 passes (neighbour discovery) until IPv6 is enforced; all else is dropped. */
static __always_inline int other_l3(struct __sk_buff *skb, struct flow *f, __be16 proto, __u8 trace_point, __u8 direction)
{
	int ret = DROP_UNKNOWN_L3;

	if (proto == bpf_htons(ETH_P_IPV6))
		ret = ipv6_check(skb, f);
	if (ret < 0)
		return drop_packet(skb, f, ret, direction, 0);
	return pass_packet(skb, f, TC_ACT_OK, trace_point, direction);
}

static __always_inline int from_container_arp(struct __sk_buff *skb, struct flow *f)
{
	int ret = arp_respond(skb);

	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);
	if (ret == ARP_REPLIED)
		return pass_packet(skb, f, bpf_redirect(skb->ifindex, 0), TRACE_TO_ENDPOINT, DIR_EGRESS);
	return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_STACK, DIR_EGRESS);
}

/* Hands the packet to local endpoint dst: its MACs, TTL - 1, then straight into the pod's namespace. */
static __always_inline int deliver_local4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip,
					  const struct endpoint_info *dst)
{
	int ret;

	if (ip->ttl <= 1)
		return drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_EGRESS, 0);
	if (eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_EGRESS, 0);
	ret = ipv4_dec_ttl(skb, ip, f->proto);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);
	return pass_packet(skb, f, bpf_redirect_peer(dst->ifindex, 0), TRACE_TO_ENDPOINT, DIR_EGRESS);
}

/*
 * A pod addressing a service frontend: backend chosen (pinned by the
 * service conntrack entry), DNAT, and the hairpin source when the pod
 * reaches itself. The packet then goes on as the translated flow.
 */
static __always_inline int from_container_service4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, __u64 now)
{
	struct lb4_service *svc;
	struct lb4_key key;
	int ret;

	f->lb_checked = 1;
	svc = lb4_lookup(f, &key, 1);
	if (!svc)
		return 0;
	ret = lb4_translate(skb, f, ip, &key, svc, now);
	if (ret < 0)
		return ret;
	return lb4_hairpin_snat(skb, f, ip);
}

static __always_inline int from_container_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct endpoint_info *src, *dst;
	struct tunnel_route route;
	struct ipv4_info ip;
	__u32 src_endpoint_id, cookie = 0;
	enum ct_status status;
	int local, ret;
	__u64 now;

	ret = ipv4_load(skb, f, &ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);

	/* The source must be the endpoint that owns this very device. */
	src = pod_endpoint_lookup4(f->saddr);
	if (!src || src->ifindex != skb->ifindex)
		return drop_packet(skb, f, DROP_INVALID_SOURCE, DIR_EGRESS, 0);
	src_endpoint_id = src->endpoint_id;
	f->src_identity = src->identity;
	f->src_endpoint = src_endpoint_id;

	ret = l4_load(skb, f, &ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);

	now = bpf_ktime_get_ns();
	ret = from_container_service4(skb, f, &ip, now);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);

	dst = endpoint_lookup4(f->daddr);
	local = dst && !(dst->flags & ENDPOINT_F_HOST);
	if (dst) {
		f->dst_identity = dst->identity;
		if (local)
			f->dst_endpoint = dst->endpoint_id;
	}

	status = ct_lookup(f, now);
	if (status == CT_NEW) {
		/* The ipcache (an LPM walk) only for new flows: a hit carries the identities. */
		if (!dst)
			f->dst_identity = ipcache_identity4(f->daddr);
		ret = policy_enforce(skb, f, src_endpoint_id, f->dst_identity, 1, &cookie);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_EGRESS, cookie);
		if (local && dst) {
			ret = policy_enforce(skb, f, dst->endpoint_id, f->src_identity, 0, &cookie);
			if (ret < 0)
				return drop_packet(skb, f, ret, DIR_INGRESS, cookie);
		}
		/* An ICMP error is no flow of its own: no entry for it. */
		if (!f->icmp_error)
			ct_create(f, now);
		trace_new_flow(skb, f, local ? TRACE_TO_ENDPOINT : TRACE_TO_STACK, DIR_EGRESS);
	} else if (f->rev_nat_index) {
		/* A service's backend answering: its client sees the frontend (a hairpin client, its own address). */
		ret = lb4_rev_nat_ct(skb, f, &ip, status);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_EGRESS, 0);
		dst = endpoint_lookup4(f->daddr);
		local = dst && !(dst->flags & ENDPOINT_F_HOST);
	}

	if (local && dst)
		return deliver_local4(skb, f, &ip, dst);
	/* Another node's address or pod, in tunnel mode: through the overlay with the pod's identity as VNI. */
	if (!dst && tunnel_route4(f->daddr, &route)) {
		f->dst_identity = route.identity;
		return tunnel_encap4(skb, f, &route, f->src_identity, DIR_EGRESS);
	}
	return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_STACK, DIR_EGRESS);
}

SEC("tc")
int tendril_from_container(struct __sk_buff *skb)
{
	struct flow f;
	__be16 proto;

	flow_init(&f, skb);
	proto = eth_load_proto(skb);
	if (proto == bpf_htons(ETH_P_IP))
		return from_container_ipv4(skb, &f);
	if (proto == bpf_htons(ETH_P_ARP))
		return from_container_arp(skb, &f);
	return other_l3(skb, &f, proto, TRACE_TO_STACK, DIR_EGRESS);
}

static __always_inline int to_container_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct endpoint_info *dst;
	struct ipv4_info ip;
	int ret;

	ret = ipv4_load(skb, f, &ip);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	dst = pod_endpoint_lookup4(f->daddr);
	if (!dst)
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
	f->lb_direct = 1;
	ret = ingress_to_endpoint4(skb, f, &ip, dst, TRACE_FROM_STACK);
	if (ret)
		return ret;
	return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
}

SEC("tc")
int tendril_to_container(struct __sk_buff *skb)
{
	struct flow f;
	__be16 proto;

	flow_init(&f, skb);
	proto = eth_load_proto(skb);
	if (proto == bpf_htons(ETH_P_IP))
		return to_container_ipv4(skb, &f);
	if (proto == bpf_htons(ETH_P_ARP))
		return pass_packet(skb, &f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
	return other_l3(skb, &f, proto, TRACE_FROM_STACK, DIR_INGRESS);
}

char _license[] SEC("license") = "Dual BSD/GPL";
