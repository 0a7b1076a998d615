/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The decisions of a new flow: one direction's policy with its verdict
 * event, and the whole ingress check of a packet the node's stack hands to
 * a local endpoint (to_container, tendril_host's fallback delivery, and
 * service traffic the node's devices deliver), with the reverse NAT of
 * service replies.
 */
#ifndef __TENDRIL_LIB_ENFORCE_H_
#define __TENDRIL_LIB_ENFORCE_H_

#include "common.h"
#include "config.h"
#include "conntrack.h"
#include "drop.h"
#include "endpoints.h"
#include "events.h"
#include "flow.h"
#include "ipcache.h"
#include "ipv4.h"
#include "ipv6.h"
#include "l4.h"
#include "lb.h"
#include "policy.h"
#include "trace.h"

/*
 * policy_enforce_or_drop's `how`: the direction, and whether the endpoint
 * has a staged view (ENDPOINT_F_STAGED). The ingress stages' `how` carries
 * POLICY_STAGED too, beside the trace point and INGRESS_SOURCE_KNOWN.
 */
#define POLICY_EGRESS 0x1
#define POLICY_STAGED 0x200

/* POLICY_STAGED for an endpoint that staged policies select, else 0. */
static __always_inline __u32 endpoint_policy_how(const struct endpoint_info *ep)
{
	return ep && (ep->flags & ENDPOINT_F_STAGED) ? POLICY_STAGED : 0;
}

/* policy_staged_report's `how`: POLICY_EGRESS, and whether the enforced policy allowed the flow. */
#define STAGED_ENFORCED_ALLOWED 0x2

/*
 * A new flow of an endpoint with a staged view: its staged entries decide
 * the flow as the policy would once the staged policies are promoted. When
 * that differs from the enforced decision, a POLICY_VERDICT event says so
 * (VERDICT_WOULD_DROP, VERDICT_WOULD_ALLOW) with the staged view's deciding
 * cookie. What passes never depends on it. A stage: the second lookup is
 * verified once, not on every path that enforces policy.
 */
__stage int policy_staged_report(struct __sk_buff *skb, const struct flow *f, __u32 endpoint_id, __u32 peer_identity, __u32 how)
{
	__u8 egress = how & POLICY_EGRESS;
	struct policy_decision s;
	int enforced_allowed = (how & STAGED_ENFORCED_ALLOWED) != 0;

	if (!f)
		return 0;
	s = policy_lookup(endpoint_id, peer_identity, egress | POLICY_KEY_STAGED, f->proto, l4_policy_port(f));
	if ((s.verdict == VERDICT_ALLOWED) == enforced_allowed)
		return 0;
	event_emit(skb, f, EVENT_POLICY_VERDICT, enforced_allowed ? VERDICT_WOULD_DROP : VERDICT_WOULD_ALLOW, egress ? DIR_EGRESS : DIR_INGRESS,
		   s.cookie);
	return 0;
}

/*
 * The policy of `endpoint_id` for this flow in one direction (`how`:
 * POLICY_EGRESS, POLICY_STAGED). Emits the POLICY_VERDICT event (not for
 * an allow that only says the direction is not enforced), and for an
 * endpoint with a staged view the staged one where it differs. Returns 0
 * when allowed, else the drop reason (DROP_POLICY_DENY for a deny entry,
 * DROP_POLICY for no match); *cookie is the deciding entry's. In audit
 * mode a refusal is reported as VERDICT_AUDIT and returns 0.
 */
static __always_inline int policy_enforce(struct __sk_buff *skb, const struct flow *f, __u32 endpoint_id, __u32 peer_identity,
					  __u32 how, __u32 *cookie)
{
	__u8 egress = how & POLICY_EGRESS;
	struct policy_decision d = policy_lookup(endpoint_id, peer_identity, egress, f->proto, l4_policy_port(f));
	__u8 direction = egress ? DIR_EGRESS : DIR_INGRESS;
	int allowed = d.verdict == VERDICT_ALLOWED;
	__u32 verdict = d.verdict;

	*cookie = d.cookie;
	if (!allowed && config_policy_audit())
		verdict = VERDICT_AUDIT;
	if (!allowed || d.cookie != COOKIE_NOT_ENFORCED)
		event_emit(skb, f, EVENT_POLICY_VERDICT, (__u8)verdict, direction, d.cookie);
	if (how & POLICY_STAGED)
		policy_staged_report(skb, f, endpoint_id, peer_identity, egress | (allowed ? STAGED_ENFORCED_ALLOWED : 0));
	if (allowed || verdict == VERDICT_AUDIT)
		return 0;
	return d.verdict == VERDICT_DENIED ? DROP_POLICY_DENY : DROP_POLICY;
}

/*
 * policy_enforce, and a refusal dropped (reported in the policy's direction
 * with the deciding entry's cookie): 0 when allowed, else TC_ACT_SHOT.
 */
__stage int policy_enforce_or_drop(struct __sk_buff *skb, const struct flow *f, __u32 endpoint_id, __u32 peer_identity, __u32 how)
{
	__u32 cookie = 0;
	int ret;

	if (!f)
		return TC_ACT_SHOT;
	ret = policy_enforce(skb, f, endpoint_id, peer_identity, how, &cookie);
	if (ret < 0)
		return drop_packet(skb, f, ret, (how & POLICY_EGRESS) ? DIR_EGRESS : DIR_INGRESS, cookie);
	return 0;
}

/* The identity of a packet's source seen from the node: a local endpoint's, else the ipcache's (world when absent). */
static __always_inline void flow_set_source4(struct flow *f)
{
	struct endpoint_info *src = endpoint_lookup4(f->saddr);

	if (src) {
		f->src_identity = src->identity;
		if (!(src->flags & ENDPOINT_F_HOST))
			f->src_endpoint = src->endpoint_id;
		return;
	}
	f->src_identity = ipcache_identity4(f->saddr);
}

/*
 * The identity of a packet that arrived on a device, `device` (its
 * skb->ingress_ifindex; 0 for a device no pod owns): only what its address
 * is known as here. A local pod when it came from that pod's own device,
 * else the ipcache's identity (a CIDR's, else world); never the node's own
 * (the node's packets have no ingress device and are judged by
 * flow_set_source4), a local pod's from any other device, and in tunnel
 * mode never another node's or a pod another node hosts: between nodes
 * those travel inside the overlay, so such a source on a device is forged.
 */
static __always_inline void flow_set_arrived_source4(struct flow *f, __u32 device)
{
	struct remote_endpoint_info *info;
	struct endpoint_info *ep;
	__u32 id;

	f->src_identity = IDENTITY_WORLD;
	ep = endpoint_lookup4(f->saddr);
	if (ep) {
		if (device && !(ep->flags & ENDPOINT_F_HOST) && ep->ifindex == device) {
			f->src_identity = ep->identity;
			f->src_endpoint = ep->endpoint_id;
		}
		return;
	}
	info = ipcache_lookup4(f->saddr);
	if (!info)
		return;
	id = info->identity;
	if (id == IDENTITY_HOST)
		return;
	if (config_tunnel_ifindex() && (ipcache_has_tunnel(info) || id == IDENTITY_REMOTE_NODE))
		return;
	f->src_identity = id;
}

/*
 * A packet conntrack does not know, while a build with other map layouts
 * takes over (the agent's loader copies the old maps' entries into the new
 * ones, swaps the programs, then carries over what the old programs added
 * until the swap): a TCP segment that is not a connection's first (SYN
 * without ACK) belongs to a flow only the old maps know yet. Taken for a
 * new flow it would leave without its reverse NAT, and the peer's reset
 * would end the connection; dropped (DROP_CT_MIGRATION, counted), it is
 * sent again by TCP once the entry is carried over, a few milliseconds
 * later. Returns the drop's action, or 0 to go on as a new flow.
 */
static __always_inline int ct_held_for_migration(struct __sk_buff *skb, const struct flow *f, __u64 now, __u8 direction)
{
	if (f->proto != IPPROTO_TCP || (f->tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN)
		return 0;
	if (!config_migration_window(now))
		return 0;
	return drop_packet(skb, f, DROP_CT_MIGRATION, direction, 0);
}

/* ingress_ct_policy4_stage's `how`: the trace point in the low byte, and whether the source is known. */
#define INGRESS_SOURCE_KNOWN 0x100

/*
 * ingress_ct_policy4_source's stage, for a flow whose destination identity
 * and endpoint are set: conntrack, then for a new flow the source's
 * identity unless known, the endpoint's ingress policy and its entry.
 */
__stage int ingress_ct_policy4_stage(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip, __u64 now, __u32 how)
{
	enum ct_status status;
	int ret;

	if (!f || !ip)
		return TC_ACT_SHOT;
	status = ct_lookup(f, now);
	if (status != CT_NEW) {
		ret = lb4_rev_nat_ct(skb, f, ip, status);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_INGRESS, 0);
		return 0;
	}
	ret = ct_held_for_migration(skb, f, now, DIR_INGRESS);
	if (ret)
		return ret;
	/* The source's identity (an LPM walk) only for new flows: a hit carries it. */
	if (!(how & INGRESS_SOURCE_KNOWN))
		flow_set_source4(f);
	ret = policy_enforce_or_drop(skb, f, f->dst_endpoint, f->src_identity, how & POLICY_STAGED);
	if (ret)
		return ret;
	if (!f->icmp_error) {
		ret = ct_create(f, now);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	}
	trace_new_flow(skb, f, (__u8)how, DIR_INGRESS);
	return 0;
}

/*
 * ingress_to_endpoint4 after l4_load: conntrack (a reply or related error
 * of a service flow gets its reverse NAT), and for a new flow the
 * endpoint's ingress policy against the source's identity, then a
 * conntrack entry. The source's identity is f->src_identity as the caller
 * set it when `source_known` (the overlay's, from the tunnel key), else the
 * one its address has here (flow_set_source4). Returns 0 when the packet
 * may go on, else TC_ACT_SHOT after reporting the drop.
 */
static __always_inline int ingress_ct_policy4_source(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip,
						     const struct endpoint_info *dst, __u8 trace_point, __u64 now, int source_known)
{
	f->dst_identity = dst->identity;
	f->dst_endpoint = dst->endpoint_id;
	return ingress_ct_policy4_stage(skb, f, ip, now, trace_point | (source_known ? INGRESS_SOURCE_KNOWN : 0) | endpoint_policy_how(dst));
}

/* ingress_ct_policy4_source for a packet whose source is judged by its address. */
static __always_inline int ingress_ct_policy4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip,
					      const struct endpoint_info *dst, __u8 trace_point, __u64 now)
{
	return ingress_ct_policy4_source(skb, f, ip, dst, trace_point, now, 0);
}

/*
 * A packet from the node's stack to local endpoint `dst`: its ports, then
 * ingress_ct_policy4_source. Its source is the node's own when the node
 * sent it (no ingress device), else what flow_set_arrived_source4 says:
 * the stack routes a pod's /32 to its device whatever device the packet
 * came in on. Returns 0 when the packet may go on, else TC_ACT_SHOT after
 * reporting the drop.
 */
static __always_inline int ingress_to_endpoint4(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip,
						const struct endpoint_info *dst, __u8 trace_point)
{
	__u32 arrived_on = skb->ingress_ifindex;
	int ret;

	f->dst_identity = dst->identity;
	f->dst_endpoint = dst->endpoint_id;
	if (arrived_on)
		flow_set_arrived_source4(f, arrived_on);
	ret = l4_load(skb, f, ip);
	if (ret < 0) {
		if (!arrived_on)
			flow_set_source4(f);
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	}
	return ingress_ct_policy4_source(skb, f, ip, dst, trace_point, bpf_ktime_get_ns(), arrived_on != 0);
}

/* flow_set_source4 for an IPv6 source. */
static __always_inline void flow_set_source6(struct flow *f)
{
	struct endpoint_info *src = endpoint_lookup6(f->saddr6);

	if (src) {
		f->src_identity = src->identity;
		if (!(src->flags & ENDPOINT_F_HOST))
			f->src_endpoint = src->endpoint_id;
		return;
	}
	f->src_identity = ipcache_identity6(f->saddr6);
}

/* flow_set_arrived_source4 for an IPv6 source: what its address is known as here, never the node's own. */
static __always_inline void flow_set_arrived_source6(struct flow *f, __u32 device)
{
	struct remote_endpoint_info *info;
	struct endpoint_info *ep;
	__u32 id;

	f->src_identity = IDENTITY_WORLD_IPV6;
	ep = endpoint_lookup6(f->saddr6);
	if (ep) {
		if (device && !(ep->flags & ENDPOINT_F_HOST) && ep->ifindex == device) {
			f->src_identity = ep->identity;
			f->src_endpoint = ep->endpoint_id;
		}
		return;
	}
	info = ipcache_lookup6(f->saddr6);
	if (!info)
		return;
	id = info->identity;
	if (id == IDENTITY_HOST)
		return;
	if (config_tunnel_ifindex() && (ipcache_has_tunnel(info) || id == IDENTITY_REMOTE_NODE))
		return;
	f->src_identity = id;
}

/*
 * ingress_ct_policy4_stage for IPv6: conntrack (a service reply gets its
 * reverse NAT, lb6_rev_nat_ct), then for a new flow the source's identity unless known
 * (INGRESS_SOURCE_KNOWN in `how`), the endpoint's ingress policy and its
 * entry. f's destination identity and endpoint are set. 0 when the packet
 * may go on, else TC_ACT_SHOT after reporting the drop.
 */
__stage int ingress_ct_policy6_stage(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, __u64 now, __u32 how)
{
	enum ct_status status;
	int ret;

	if (!f || !ip)
		return TC_ACT_SHOT;
	status = ct_lookup(f, now);
	if (status != CT_NEW) {
		/* A service's reply from a backend elsewhere: the client sees the frontend. */
		ret = lb6_rev_nat_ct(skb, f, ip, status);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_INGRESS, 0);
		return 0;
	}
	if (!(how & INGRESS_SOURCE_KNOWN))
		flow_set_source6(f);
	ret = policy_enforce_or_drop(skb, f, f->dst_endpoint, f->src_identity, how & POLICY_STAGED);
	if (ret)
		return ret;
	if (!f->icmp_error) {
		ret = ct_create(f, now);
		if (ret < 0)
			return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	}
	trace_new_flow(skb, f, (__u8)how, DIR_INGRESS);
	return 0;
}

/*
 * ingress_to_endpoint4 for IPv6: a packet from the node's stack to the
 * local endpoint whose identity and ID f carries as destination. Its ports,
 * its source as the node's own when the node sent it (no ingress device),
 * else what flow_set_arrived_source6 says, then ingress_ct_policy6_stage.
 * `how`: the trace point, and POLICY_STAGED for an endpoint with a staged view.
 */
static __always_inline int ingress_to_endpoint6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip, __u32 how)
{
	__u32 arrived_on = skb->ingress_ifindex;
	int ret;

	if (arrived_on)
		flow_set_arrived_source6(f, arrived_on);
	ret = l4_load6(skb, f, ip);
	if (ret < 0) {
		if (!arrived_on)
			flow_set_source6(f);
		return drop_packet(skb, f, ret, DIR_INGRESS, 0);
	}
	return ingress_ct_policy6_stage(skb, f, ip, bpf_ktime_get_ns(), how | (arrived_on ? INGRESS_SOURCE_KNOWN : 0));
}

#endif
