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
 *     (only the pod's own address, multicast and broadcast; conntrack with
 *     reverse NAT of service replies, then the pod's ingress policy).
 *   Both, for IPv6 (from_container_ipv6, to_container_ipv6): the same
 *     source check, conntrack, policy and local delivery; neighbour
 *     discovery and MLD pass without policy, a pod's neighbour
 *     solicitations are answered here (icmp6.h), its router advertisements
 *     and redirects refused; services (DNAT, reverse NAT of a local
 *     backend's replies, hairpin). No tunnel or masquerade in IPv6 yet.
 * Everything per endpoint lives in maps; this object is built once.
 */
#include <linux/if_ether.h>
#include <linux/in.h>

/* This object parses IPv6: conntrack's dispatch keeps its IPv6 stages (conntrack.h). */
#define TENDRIL_IPV6_FLOWS 1

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
#include "icmp6.h"
#include "ipv6.h"
#include "l4.h"
#include "lb.h"
#include "metrics.h"
#include "nat.h"
#include "policy.h"
#include "trace.h"
#include "tunnel.h"

/* What the search for a device's endpoint looks for and finds. */
struct device_owner {
	__u32 ifindex;
	__u32 endpoint_id; /* 0 = none found */
	__u32 identity;
	__u32 flags; /* its ENDPOINT_F_* */
	struct nd_macs macs;
};

static long device_owner_match(void *map, struct endpoint_key *key, struct endpoint_info *ep, struct device_owner *owner)
{
	if (ep->ifindex != owner->ifindex || (ep->flags & ENDPOINT_F_HOST))
		return 0;
	owner->endpoint_id = ep->endpoint_id;
	owner->identity = ep->identity;
	owner->flags = ep->flags;
	__builtin_memcpy(owner->macs.lxc_mac, ep->lxc_mac, ETH_ALEN);
	__builtin_memcpy(owner->macs.pod_mac, ep->pod_mac, ETH_ALEN);
	return 1;
}

/*
 * The endpoint that owns this device, for a link-local address (the pod's
 * or the lxc device's own), which tendril_lxc does not hold: the map is
 * walked (bpf_for_each_map_elem, stopping at the match), a cost in the
 * number of local endpoints paid only by link-local traffic, never by the
 * pod's own addresses.
 */
static __always_inline void device_owner_find(struct device_owner *owner)
{
	bpf_for_each_map_elem(&tendril_lxc, device_owner_match, owner, 0);
}

/*
 * A neighbour advertisement from this device's pod speaks only for the pod:
 * its target is a link-local address (on the pod's own link, whose only
 * other end is the lxc device) or an address of its endpoint on this
 * device, and it carries no option or one target link-layer address, the
 * pod's MAC (m->pod_mac). DROP_INVALID_SOURCE for any other (a pod claiming another's
 * address or link-layer address to the node's neighbour tables),
 * DROP_INVALID_PACKET for one too short to hold a target. 0: the stack's.
 */
__stage int nd_advert_check(struct __sk_buff *skb, const struct ipv6_info *ip, const struct nd_macs *m)
{
	struct endpoint_info *own;
	/* The body is read into icmp6.h's frame layout (one layout of an ND message), past its headers. */
	struct nd_frame na;
	__u32 len;

	if (!ip || !m)
		return DROP_INVALID_PACKET;
	len = ip->ip_end - ip->l4_off;
	if (len < ND_BODY_NO_OPT_LEN)
		return DROP_INVALID_PACKET;
	if (len != ND_BODY_NO_OPT_LEN && len != ND_BODY_LEN)
		return DROP_INVALID_SOURCE;
	__builtin_memset(&na, 0, sizeof(na));
	if (bpf_skb_load_bytes(skb, ip->l4_off, &na.type, len == ND_BODY_LEN ? ND_BODY_LEN : ND_BODY_NO_OPT_LEN) < 0)
		return DROP_INVALID_PACKET;
	if (!ipv6_is_link_local(na.target)) {
		own = pod_endpoint_lookup6(na.target);
		if (!own || own->ifindex != skb->ifindex)
			return DROP_INVALID_SOURCE;
	}
	if (len == ND_BODY_LEN && (na.opt_type != ND_OPT_TARGET_LL || na.opt_len != 1 || !mac_equal(na.opt_mac, m->pod_mac)))
		return DROP_INVALID_SOURCE;
	return 0;
}

/*
 * Neighbour discovery, router solicitations and MLD from the pod (no
 * policy: without them nothing else works). Their source is the pod's own
 * address on this device, its link-local address, or the unspecified
 * address (duplicate address detection); a solicitation is answered with
 * the lxc device's MAC (nd_respond), an advertisement must speak for the
 * pod only (nd_advert_check; never from the unspecified address), the rest
 * goes to the stack.
 */
static __always_inline int from_container_nd(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip6, __u8 type)
{
	struct device_owner owner = { .ifindex = skb->ifindex };
	struct endpoint_info *src = NULL;
	int ret;

	if (!ipv6_is_unspecified(f->saddr6) && !ipv6_is_link_local(f->saddr6)) {
		src = pod_endpoint_lookup6(f->saddr6);
		if (!src || src->ifindex != skb->ifindex)
			return drop_packet(skb, f, DROP_INVALID_SOURCE, DIR_EGRESS, 0);
		f->src_identity = src->identity;
		f->src_endpoint = src->endpoint_id;
	}
	if (type == ICMP6_T_NEIGH_ADVERT && ipv6_is_unspecified(f->saddr6))
		return drop_packet(skb, f, DROP_INVALID_SOURCE, DIR_EGRESS, 0);
	if ((type != ICMP6_T_NEIGH_SOLICIT && type != ICMP6_T_NEIGH_ADVERT) || ipv6_is_unspecified(f->saddr6))
		return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_STACK, DIR_EGRESS);
	/* The answer's MACs: the source's endpoint, or for a link-local source the device's owner. */
	if (src) {
		owner.endpoint_id = src->endpoint_id;
		__builtin_memcpy(owner.macs.lxc_mac, src->lxc_mac, ETH_ALEN);
		__builtin_memcpy(owner.macs.pod_mac, src->pod_mac, ETH_ALEN);
	} else {
		device_owner_find(&owner);
	}
	if (!owner.endpoint_id)
		return drop_packet(skb, f, DROP_INVALID_SOURCE, DIR_EGRESS, 0);
	if (type == ICMP6_T_NEIGH_ADVERT) {
		ret = nd_advert_check(skb, ip6, &owner.macs);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_EGRESS, 0);
		return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_STACK, DIR_EGRESS);
	}
	ret = nd_respond(skb, ip6, &owner.macs);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);
	if (ret == ND_REPLIED)
		return pass_packet(skb, f, bpf_redirect(skb->ifindex, 0), TRACE_TO_ENDPOINT, DIR_EGRESS);
	return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_STACK, DIR_EGRESS);
}

/* Hands an IPv6 packet to local endpoint dst: its MACs, hop limit - 1, then straight into the pod's namespace. */
static __always_inline int deliver_local6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip6,
					  const struct endpoint_info *dst)
{
	int ret;

	if (ip6->hop_limit <= 1)
		return drop_packet(skb, f, DROP_TTL_EXCEEDED, DIR_EGRESS, 0);
	if (eth_store_macs(skb, dst->pod_mac, dst->lxc_mac) < 0)
		return drop_packet(skb, f, DROP_WRITE_ERROR, DIR_EGRESS, 0);
	ret = ipv6_dec_hop_limit(skb, ip6);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);
	return pass_packet(skb, f, bpf_redirect_peer(dst->ifindex, 0), TRACE_TO_ENDPOINT, DIR_EGRESS);
}

/* from_container_service4 for IPv6: DNAT, and the hairpin source when the pod reaches itself. */
static __always_inline int from_container_service6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip6, __u64 now)
{
	struct lb6_frontend fe;
	int ret;

	f->lb_checked = 1;
	if (!lb6_lookup(f, &fe, 1))
		return 0;
	ret = lb6_translate(skb, f, ip6, &fe, now);
	if (ret < 0)
		return ret;
	return lb6_hairpin_snat(skb, f, ip6);
}

/*
 * IPv6 from the pod, as from_container_ipv4 without tunnel:
 * neighbour discovery and MLD first (from_container_nd), router
 * advertisements and redirects refused; then the source must be this
 * device's endpoint (its address in tendril_lxc, family 6), or a link-local
 * address on its device: link-local traffic only goes to the node's stack,
 * never into another pod. Conntrack, egress policy against the ipcache's
 * IPv6 identity, the destination pod's ingress policy, delivery.
 */
static __always_inline int from_container_ipv6(struct __sk_buff *skb, struct flow *f)
{
	struct device_owner owner = { .ifindex = skb->ifindex };
	struct endpoint_info *src, *dst = NULL;
	struct tunnel_route route;
	struct ipv6_info ip6;
	enum ct_status status;
	__u32 src_endpoint_id, src_how = 0;
	int local = 0, ret;
	__u8 type = 0;
	__u64 now;

	ret = ipv6_load(skb, f, &ip6);
	if (ret == 0 && f->proto == IPPROTO_ICMPV6 && !ipv6_is_later_fragment(&ip6))
		ret = icmp6_load_type(skb, &ip6, &type);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);
	if (f->proto == IPPROTO_ICMPV6 && !ipv6_is_later_fragment(&ip6)) {
		switch (icmp6_disposition(type, 1)) {
		case ICMP6_PASS:
			return from_container_nd(skb, f, &ip6, type);
		case ICMP6_REFUSE:
			return drop_packet(skb, f, DROP_ICMP6_NOT_ALLOWED, DIR_EGRESS, 0);
		default:
			break;
		}
	}

	src = pod_endpoint_lookup6(f->saddr6);
	if (src) {
		if (src->ifindex != skb->ifindex)
			return drop_packet(skb, f, DROP_INVALID_SOURCE, DIR_EGRESS, 0);
		src_endpoint_id = src->endpoint_id;
		src_how = endpoint_policy_how(src);
		f->src_identity = src->identity;
	} else if (ipv6_is_link_local(f->saddr6)) {
		/* A device with no endpoint finds none: endpoint 0 matches no policy entry, so it is dropped there. */
		device_owner_find(&owner);
		src_endpoint_id = owner.endpoint_id;
		src_how = owner.flags & ENDPOINT_F_STAGED ? POLICY_STAGED : 0;
		f->src_identity = owner.identity;
	} else {
		return drop_packet(skb, f, DROP_INVALID_SOURCE, DIR_EGRESS, 0);
	}
	f->src_endpoint = src_endpoint_id;

	ret = l4_load6(skb, f, &ip6);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_EGRESS, 0);

	now = bpf_ktime_get_ns();
	/* A pod's own address (not link-local) may address a service: the flow goes on as translated. */
	if (src) {
		ret = from_container_service6(skb, f, &ip6, now);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_EGRESS, 0);
		dst = endpoint_lookup6(f->daddr6);
	}
	local = dst && !(dst->flags & ENDPOINT_F_HOST);
	if (dst) {
		f->dst_identity = dst->identity;
		if (local)
			f->dst_endpoint = dst->endpoint_id;
	}

	status = ct_lookup(f, now);
	if (status == CT_NEW) {
		if (!dst)
			f->dst_identity = ipcache_identity6(f->daddr6);
		ret = policy_enforce_or_drop(skb, f, src_endpoint_id, f->dst_identity, POLICY_EGRESS | src_how);
		if (ret)
			return ret;
		if (local && dst) {
			ret = policy_enforce_or_drop(skb, f, dst->endpoint_id, f->src_identity, endpoint_policy_how(dst));
			if (ret)
				return ret;
		}
		if (!f->icmp_error) {
			ret = ct_create(f, now);
			if (ret < 0)
				return drop_packet(skb, f, ret, DIR_EGRESS, 0);
		}
		trace_new_flow(skb, f, local ? TRACE_TO_ENDPOINT : TRACE_TO_STACK, DIR_EGRESS);
	} else if (f->rev_nat_index && src) {
		/* A service's backend answering: its client sees the frontend. */
		ret = lb6_rev_nat_ct(skb, f, &ip6, status);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_EGRESS, 0);
		dst = endpoint_lookup6(f->daddr6);
		local = dst && !(dst->flags & ENDPOINT_F_HOST);
	}

	if (local && dst)
		return deliver_local6(skb, f, &ip6, dst);
	/* Another node's pod, in tunnel mode: through the overlay with the pod's identity as VNI, as for IPv4. */
	if (!dst && src && tunnel_route6(f->daddr6, &route)) {
		f->dst_identity = route.identity;
		return tunnel_encap4(skb, f, &route, f->src_identity, DIR_EGRESS);
	}
	return pass_packet(skb, f, TC_ACT_OK, TRACE_TO_STACK, DIR_EGRESS);
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
	struct lb4_frontend fe;
	int ret;

	f->lb_checked = 1;
	if (!lb4_lookup(f, &fe, 1))
		return 0;
	ret = lb4_translate(skb, f, ip, &fe, now);
	if (ret < 0)
		return ret;
	return lb4_hairpin_snat(skb, f, ip);
}

static __always_inline int from_container_ipv4(struct __sk_buff *skb, struct flow *f)
{
	struct endpoint_info *src, *dst;
	struct tunnel_route route;
	struct ipv4_info ip;
	__u32 src_endpoint_id, src_how;
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
	src_how = endpoint_policy_how(src);
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
		ret = ct_held_for_migration(skb, f, now, DIR_EGRESS);
		if (ret)
			return ret;
		/* The ipcache (an LPM walk) only for new flows: a hit carries the identities. */
		if (!dst)
			f->dst_identity = ipcache_identity4(f->daddr);
		ret = policy_enforce_or_drop(skb, f, src_endpoint_id, f->dst_identity, POLICY_EGRESS | src_how);
		if (ret)
			return ret;
		if (local && dst) {
			ret = policy_enforce_or_drop(skb, f, dst->endpoint_id, f->src_identity, endpoint_policy_how(dst));
			if (ret)
				return ret;
		}
		/* An ICMP error is no flow of its own: no entry for it. */
		if (!f->icmp_error) {
			ret = ct_create(f, now);
			if (ret < 0)
				return drop_packet(skb, f, ret, DIR_EGRESS, 0);
		}
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
	struct flow *f;
	__be16 proto;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_SHOT;
	proto = eth_load_proto(skb);
	if (proto == bpf_htons(ETH_P_IP))
		return from_container_ipv4(skb, f);
	if (proto == bpf_htons(ETH_P_ARP))
		return from_container_arp(skb, f);
	if (proto == bpf_htons(ETH_P_IPV6))
		return from_container_ipv6(skb, f);
	return drop_packet(skb, f, DROP_UNKNOWN_L3, DIR_EGRESS, 0);
}

/* A unicast packet at this device for an address that is not its endpoint's: DROP_NOT_FOR_ENDPOINT. */
static __always_inline int to_container_not_mine(struct __sk_buff *skb, struct flow *f, const struct endpoint_info *dst)
{
	flow_set_source4(f);
	if (dst) {
		f->dst_identity = dst->identity;
		f->dst_endpoint = dst->endpoint_id;
	} else {
		f->dst_identity = ipcache_identity4(f->daddr);
	}
	return drop_packet(skb, f, DROP_NOT_FOR_ENDPOINT, DIR_INGRESS, 0);
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
	/*
	 * Only this device's own endpoint is delivered to here: the stack routes
	 * each pod's /32 to its own device, so anything else (another pod's or an
	 * unknown address) reached this pod by a wrong route or a forged
	 * neighbour entry. Multicast and broadcast are no one pod's: passed.
	 */
	if (!dst || dst->ifindex != skb->ifindex) {
		if (ipv4_is_multicast_or_broadcast(f->daddr))
			return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
		return to_container_not_mine(skb, f, dst);
	}
	f->lb_direct = 1;
	ret = ingress_to_endpoint4(skb, f, &ip, dst, TRACE_FROM_STACK);
	if (ret)
		return ret;
	return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
}

/*
 * IPv6 from the node's stack to the pod, as to_container_ipv4: neighbour
 * discovery, MLD, router advertisements and redirects pass (the node is the
 * pod's router); unicast only for this device's endpoint (its address, or
 * a link-local address on its device), multicast (ff00::/8) passes;
 * conntrack and the pod's ingress policy.
 */
static __always_inline int to_container_ipv6(struct __sk_buff *skb, struct flow *f)
{
	__u32 how = TRACE_FROM_STACK;
	struct endpoint_info *dst;
	struct ipv6_info ip6;
	__u8 type = 0;
	int ret;

	ret = ipv6_load(skb, f, &ip6);
	if (ret == 0 && f->proto == IPPROTO_ICMPV6 && !ipv6_is_later_fragment(&ip6))
		ret = icmp6_load_type(skb, &ip6, &type);
	if (ret < 0)
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	if (f->proto == IPPROTO_ICMPV6 && !ipv6_is_later_fragment(&ip6) && icmp6_disposition(type, 0) == ICMP6_PASS)
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
	dst = pod_endpoint_lookup6(f->daddr6);
	if (dst && dst->ifindex == skb->ifindex) {
		f->dst_identity = dst->identity;
		f->dst_endpoint = dst->endpoint_id;
		how |= endpoint_policy_how(dst);
	} else if (ipv6_is_multicast(f->daddr6)) {
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
	} else if (!dst && ipv6_is_link_local(f->daddr6)) {
		struct device_owner owner = { .ifindex = skb->ifindex };

		/* A device with no endpoint finds none: endpoint 0 matches no policy entry. */
		device_owner_find(&owner);
		f->dst_identity = owner.identity;
		f->dst_endpoint = owner.endpoint_id;
		how |= owner.flags & ENDPOINT_F_STAGED ? POLICY_STAGED : 0;
	} else {
		flow_set_source6(f);
		if (dst) {
			f->dst_identity = dst->identity;
			f->dst_endpoint = dst->endpoint_id;
		} else {
			f->dst_identity = ipcache_identity6(f->daddr6);
		}
		return drop_packet(skb, f, DROP_NOT_FOR_ENDPOINT, DIR_INGRESS, 0);
	}
	/* As to_container_ipv4: the stack hands it to the pod, so a NodePort translation left on the tuple is stale. */
	f->lb_direct = 1;
	ret = ingress_to_endpoint6(skb, f, &ip6, how);
	if (ret)
		return ret;
	return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
}

SEC("tc")
int tendril_to_container(struct __sk_buff *skb)
{
	struct flow *f;
	__be16 proto;

	f = flow_init(skb);
	if (!f)
		return TC_ACT_SHOT;
	proto = eth_load_proto(skb);
	if (proto == bpf_htons(ETH_P_IP))
		return to_container_ipv4(skb, f);
	if (proto == bpf_htons(ETH_P_ARP))
		return pass_packet(skb, f, TC_ACT_OK, TRACE_FROM_STACK, DIR_INGRESS);
	if (proto == bpf_htons(ETH_P_IPV6))
		return to_container_ipv6(skb, f);
	return drop_packet(skb, f, DROP_UNKNOWN_L3, DIR_INGRESS, 0);
}

char _license[] SEC("license") = "Dual BSD/GPL";
