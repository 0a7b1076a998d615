/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * NodePort, externalIPs and LoadBalancer frontends reached from outside the
 * node (on a --devices device), and from the node itself (its own address
 * through lo).
 */
#ifndef __TENDRIL_LIB_NODEPORT_H_
#define __TENDRIL_LIB_NODEPORT_H_

#include "common.h"
#include "devices.h"
#include "flow.h"
#include "ipv4.h"
#include "lb.h"
#include "nat.h"

/*
 * netdev ingress, after reverse SNAT: a packet to a service frontend from
 * outside is load-balanced (DNAT, conntrack, the backend's ingress policy,
 * delivery; SNAT to dev's address when the backend is off this node and
 * the service is not Local); a reply of a NodePort flow that was SNATed
 * (nat_flags & NAT_F_NODEPORT) gets the frontend back as its source and is
 * sent to the client. Returns 1 with *action set when decided here, 0 when
 * the packet is no service's.
 */
static __always_inline int nodeport_lb4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, const struct device_info *dev,
					__u8 nat_flags, int *action)
{
	return 0;
}

/*
 * lo egress: the node connecting to a NodePort on one of its own addresses.
 * Returns 1 with *action set when decided here, 0 otherwise.
 */
static __always_inline int nodeport_local4(struct __sk_buff *skb, struct flow *f, struct ipv4_info *ip, int *action)
{
	return 0;
}

#endif
