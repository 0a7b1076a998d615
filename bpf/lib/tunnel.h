/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The VXLAN overlay (--routing-mode tunnel). A packet for an address that
 * another node hosts (its ipcache entry names that node as tunnel
 * endpoint) leaves through tendril_vxlan, a collect_md device, with the
 * tunnel key set: the endpoint as outer destination and the source's
 * security identity as VNI. The receiving node takes the source identity
 * from the key, never from the inner source address, which any sender can
 * write, and only from a sender that is a registered node (an IPv4 or an
 * IPv6 outer source alike). Pods of either family are carried, over an
 * underlay of either family: the sending side's tunnel endpoint is the
 * hosting node's IPv4 address (ipcache tunnel_ip4) or, for a node on an
 * IPv6 underlay, its IPv6 address (tunnel_ip6).
 */
#ifndef __TENDRIL_LIB_TUNNEL_H_
#define __TENDRIL_LIB_TUNNEL_H_

#include "common.h"
#include "config.h"
#include "drop.h"
#include "flow.h"
#include "ipcache.h"
#include "trace.h"

#define TUNNEL_TTL 64
/* A VXLAN network identifier has 24 bits: every global identity fits. */
#define TUNNEL_VNI_MAX 0xffffff

/* Where a destination is reached through the overlay. */
struct tunnel_route {
	__u32 endpoint6[4]; /* the hosting node's IPv6 address, network order (family 6) */
	__be32 endpoint;    /* the hosting node's IPv4 address, network order (family 4) */
	__u32 ifindex;      /* tendril_vxlan */
	__u32 identity;     /* the destination's (ipcache) */
	__u8 family;        /* the outer header's: 4 or 6, the hosting node's underlay */
	__u8 pad[3];
};

/*
 * The tunnel endpoint an ipcache entry names, whatever the inner packet's
 * family: the hosting node's IPv4 address, or its IPv6 address when it is
 * reached over an IPv6 underlay (the agent writes one of the two, by that
 * node's address family). An entry of this node's own addresses never
 * tunnels, whatever it says.
 */
static __always_inline int tunnel_route_of(const struct remote_endpoint_info *info, __u32 ifindex, struct tunnel_route *r)
{
	if (!info || info->identity == IDENTITY_HOST)
		return 0;
	if (info->tunnel_ip4) {
		r->family = 4;
		r->endpoint = info->tunnel_ip4;
	} else if (ipcache_has_tunnel(info)) {
		r->family = 6;
		__builtin_memcpy(r->endpoint6, info->tunnel_ip6, sizeof(r->endpoint6));
	} else {
		return 0;
	}
	r->ifindex = ifindex;
	r->identity = info->identity;
	return 1;
}

/*
 * Whether daddr is reached through the overlay: tunnel routing mode, and an
 * ipcache entry naming a tunnel endpoint. Fills *r when it is. An ipcache
 * lookup, for every packet that is not for this node (established flows
 * too: the endpoint can change under a flow).
 */
static __always_inline int tunnel_route4(__be32 daddr, struct tunnel_route *r)
{
	__u32 ifindex = config_tunnel_ifindex();

	if (!ifindex)
		return 0;
	return tunnel_route_of(ipcache_lookup4(daddr), ifindex, r);
}

/* tunnel_route4 for an IPv6 destination: a remote pod's IPv6 address, over either underlay family. */
static __always_inline int tunnel_route6(const __u32 *daddr, struct tunnel_route *r)
{
	__u32 ifindex = config_tunnel_ifindex();

	if (!ifindex)
		return 0;
	return tunnel_route_of(ipcache_lookup6(daddr), ifindex, r);
}

/*
 * Encapsulates towards r's endpoint with src_identity as VNI and sends the
 * packet to tendril_vxlan (TRACE_TO_OVERLAY); the outer header is the
 * endpoint's family (the name's 4 is the older IPv4-only history: an
 * inner packet of either family, an outer header of either family).
 * DROP_ENCAP_FAILED when the kernel refuses the key or the identity does
 * not fit a VNI.
 */
__stage int tunnel_encap4(struct __sk_buff *skb, struct flow *f, const struct tunnel_route *r, __u32 src_identity, __u8 direction)
{
	struct bpf_tunnel_key key;
	__u64 flags;

	if (!f || !r)
		return TC_ACT_SHOT;
	if (src_identity > TUNNEL_VNI_MAX)
		return drop_packet(skb, f, DROP_ENCAP_FAILED, direction, 0);
	__builtin_memset(&key, 0, sizeof(key));
	key.tunnel_id = src_identity;
	key.tunnel_ttl = TUNNEL_TTL;
	if (r->family == 6) {
		/*
		 * The helper takes an IPv6 address in network order. The outer
		 * UDP checksum stays on: IPv6 has no header checksum, and a
		 * receiver drops a zero UDP checksum over IPv6 unless told to
		 * accept it (RFC 6935), which tendril_vxlan is not.
		 */
		__builtin_memcpy(key.remote_ipv6, r->endpoint6, sizeof(key.remote_ipv6));
		flags = BPF_F_TUNINFO_IPV6;
	} else {
		/* The helper takes the address in host order. */
		key.remote_ipv4 = bpf_ntohl(r->endpoint);
		/* No outer UDP checksum: the inner packet carries its own, as Linux's VXLAN does by default over IPv4. */
		flags = BPF_F_ZERO_CSUM_TX;
	}
	if (bpf_skb_set_tunnel_key(skb, &key, sizeof(key), flags) < 0)
		return drop_packet(skb, f, DROP_ENCAP_FAILED, direction, 0);
	return pass_packet(skb, f, bpf_redirect(r->ifindex, 0), TRACE_TO_OVERLAY, direction);
}

/*
 * What another node can know a source as: a node-local identity (a CIDR's,
 * LOCAL_IDENTITY_SCOPE) means nothing there, and does not fit a VNI: world.
 */
static __always_inline __u32 tunnel_portable_identity(__u32 identity)
{
	return identity & IDENTITY_SCOPE_MASK ? IDENTITY_WORLD : identity;
}

/*
 * tunnel_portable_identity for an IPv6 source: a node-local identity
 * travels as world-ipv6, never as world, which is IPv4's: a policy
 * admitting 0.0.0.0/0 (world) must not admit an IPv6 source on the node
 * that receives it, nor one admitting ::/0 refuse it.
 */
static __always_inline __u32 tunnel_portable_identity6(__u32 identity)
{
	return identity & IDENTITY_SCOPE_MASK ? IDENTITY_WORLD_IPV6 : identity;
}

/*
 * The sender's identity as a VNI carries it, seen from this node: a node
 * sends its own traffic as IDENTITY_HOST, which here is a remote node.
 */
static __always_inline __u32 tunnel_source_identity(__u32 vni)
{
	return vni == IDENTITY_HOST ? IDENTITY_REMOTE_NODE : vni;
}

/*
 * Whether the outer source of a VXLAN packet is a node of the cluster: the
 * ipcache holds every remote node's addresses as IDENTITY_REMOTE_NODE (the
 * kvstore's node records). Any other host on the underlay can send VXLAN
 * to this node's port, with any VNI: only nodes may claim an identity.
 */
static __always_inline int tunnel_sender_is_node(__u32 outer_src_host_order)
{
	return ipcache_identity4(bpf_htonl(outer_src_host_order)) == IDENTITY_REMOTE_NODE;
}

/*
 * The source identity of a decapsulated packet from its tunnel key:
 * DROP_NO_TUNNEL_KEY when it has none, DROP_OVERLAY_NOT_NODE when the outer
 * source is no registered node (the VNI is then no one's word).
 */
static __always_inline int tunnel_key_identity(struct __sk_buff *skb, __u32 *identity)
{
	struct bpf_tunnel_key key;
	int ret;

	__builtin_memset(&key, 0, sizeof(key));
	ret = bpf_skb_get_tunnel_key(skb, &key, sizeof(key), 0);
	if (ret == -EPROTO) {
		/*
		 * An IPv6 outer header (the helper refuses to read it as IPv4):
		 * the same rule, the outer source must be a remote node's IPv6
		 * address. The helper gives it in network order.
		 */
		__builtin_memset(&key, 0, sizeof(key));
		if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), BPF_F_TUNINFO_IPV6) < 0)
			return DROP_NO_TUNNEL_KEY;
		if (ipcache_identity6(key.remote_ipv6) != IDENTITY_REMOTE_NODE)
			return DROP_OVERLAY_NOT_NODE;
		*identity = tunnel_source_identity(key.tunnel_id);
		return 0;
	}
	if (ret < 0)
		return DROP_NO_TUNNEL_KEY;
	/* For a received packet the helper gives the outer source as remote_ipv4, in host order. */
	if (!tunnel_sender_is_node(key.remote_ipv4))
		return DROP_OVERLAY_NOT_NODE;
	*identity = tunnel_source_identity(key.tunnel_id);
	return 0;
}

#endif
