/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The VXLAN overlay (--routing-mode tunnel). A packet for an address that
 * another node hosts (its ipcache entry names that node as tunnel
 * endpoint) leaves through tendril_vxlan, a collect_md device, with the
 * tunnel key set: the endpoint as outer destination and the source's
 * security identity as VNI. The receiving node takes the source identity
 * from the key, never from the inner source address, which any sender can
 * write, and only from a sender that is a registered node (an IPv4 or an
 * IPv6 outer source alike). Pods of either family are carried; the sending
 * side's tunnel endpoint is the node's IPv4 address (ipcache tunnel_ip4).
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
	__be32 endpoint; /* the hosting node's address, network order */
	__u32 ifindex;   /* tendril_vxlan */
	__u32 identity;  /* the destination's (ipcache) */
};

/*
 * Whether daddr is reached through the overlay: tunnel routing mode, and an
 * ipcache entry naming a tunnel endpoint. The node's own addresses never
 * are, whatever their entry says. Fills *r when it is. An ipcache lookup,
 * for every packet that is not for this node (established flows too: the
 * endpoint can change under a flow).
 */
static __always_inline int tunnel_route4(__be32 daddr, struct tunnel_route *r)
{
	struct remote_endpoint_info *info;
	__u32 ifindex = config_tunnel_ifindex();

	if (!ifindex)
		return 0;
	info = ipcache_lookup4(daddr);
	if (!info || !info->tunnel_ip4 || info->identity == IDENTITY_HOST)
		return 0;
	r->endpoint = info->tunnel_ip4;
	r->ifindex = ifindex;
	r->identity = info->identity;
	return 1;
}

/*
 * tunnel_route4 for an IPv6 destination: a remote pod's IPv6 address whose
 * ipcache entry names the hosting node's IPv4 address as tunnel endpoint
 * (the overlay runs on an IPv4 underlay; the inner packet is IPv6).
 */
static __always_inline int tunnel_route6(const __u32 *daddr, struct tunnel_route *r)
{
	struct remote_endpoint_info *info;
	__u32 ifindex = config_tunnel_ifindex();

	if (!ifindex)
		return 0;
	info = ipcache_lookup6(daddr);
	if (!info || !info->tunnel_ip4 || info->identity == IDENTITY_HOST)
		return 0;
	r->endpoint = info->tunnel_ip4;
	r->ifindex = ifindex;
	r->identity = info->identity;
	return 1;
}

/*
 * Encapsulates towards r's endpoint with src_identity as VNI and sends the
 * packet to tendril_vxlan (TRACE_TO_OVERLAY). DROP_ENCAP_FAILED when the
 * kernel refuses the key or the identity does not fit a VNI.
 */
__stage int tunnel_encap4(struct __sk_buff *skb, struct flow *f, const struct tunnel_route *r, __u32 src_identity, __u8 direction)
{
	struct bpf_tunnel_key key;

	if (!f || !r)
		return TC_ACT_SHOT;
	if (src_identity > TUNNEL_VNI_MAX)
		return drop_packet(skb, f, DROP_ENCAP_FAILED, direction, 0);
	__builtin_memset(&key, 0, sizeof(key));
	key.tunnel_id = src_identity;
	/* The helper takes the address in host order. */
	key.remote_ipv4 = bpf_ntohl(r->endpoint);
	key.tunnel_ttl = TUNNEL_TTL;
	/* No outer UDP checksum: the inner packet carries its own, as Linux's VXLAN does by default over IPv4. */
	if (bpf_skb_set_tunnel_key(skb, &key, sizeof(key), BPF_F_ZERO_CSUM_TX) < 0)
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
