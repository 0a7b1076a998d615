/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/tunnel.h: which tunnel endpoint an ipcache entry names, and over
 * which underlay family: a hosting node's IPv4 address (tunnel_ip4) or,
 * for a node on an IPv6 underlay, its IPv6 one (tunnel_ip6), for an inner
 * destination of either family; never for this node's own addresses, for
 * an entry without endpoint, or outside tunnel mode; and what identity a
 * source travels with (a node-local one as its family's world). SETUP
 * writes the entries as the agent's ipcache mirror lays them out.
 */
#include <linux/in.h>

#include "common.h"
#include "tunnel.h"
#include "test.h"

#define TUNNEL_IFINDEX 42
#define ENDPOINT4 bpf_htonl(0xc0a80001) /* 192.168.0.1 */
/* fd00::2, network order word by word. */
#define ENDPOINT6 { bpf_htonl(0xfd000000), 0, 0, bpf_htonl(2) }
#define POD4_OVER4 bpf_htonl(0x0a010001) /* 10.1.0.1 */
#define POD4_OVER6 bpf_htonl(0x0a010002) /* 10.1.0.2 */
#define HOST4 bpf_htonl(0x0a010005)      /* 10.1.0.5 */
#define NATIVE4 bpf_htonl(0x0a010006)    /* 10.1.0.6 */
/* fd00:1::3 and fd00:1::4. */
#define POD6_OVER6 { bpf_htonl(0xfd000001), 0, 0, bpf_htonl(3) }
#define POD6_OVER4 { bpf_htonl(0xfd000001), 0, 0, bpf_htonl(4) }

/* ---- the functions under test: every call to tunnel.h is in this block ---- */

static __always_inline int ut_route4(__be32 daddr, struct tunnel_route *r)
{
	__builtin_memset(r, 0, sizeof(*r));
	return tunnel_route4(daddr, r);
}

static __always_inline int ut_route6(const __u32 *daddr, struct tunnel_route *r)
{
	__builtin_memset(r, 0, sizeof(*r));
	return tunnel_route6(daddr, r);
}

/* ---- seeding ---- */

static __always_inline int ut_config(__u32 flags)
{
	struct datapath_config cfg;
	__u32 zero = 0;

	__builtin_memset(&cfg, 0, sizeof(cfg));
	cfg.flags = flags;
	cfg.tunnel_ifindex = TUNNEL_IFINDEX;
	return bpf_map_update_elem(&tendril_config, &zero, &cfg, BPF_ANY);
}

/* An ipcache host entry (/32 or /128) with an IPv4 or IPv6 endpoint (either may be zero). */
static __always_inline int ut_entry(__u8 family, const __u32 *addr, __u32 identity, __be32 ip4, const __u32 *ip6)
{
	struct ipcache_key k = { .prefixlen = IPCACHE_KEY_FIXED_BITS + (family == 4 ? 32 : 128), .family = family };
	struct remote_endpoint_info v;

	__builtin_memset(&v, 0, sizeof(v));
	__builtin_memcpy(k.ip, addr, family == 4 ? 4 : 16);
	v.identity = identity;
	v.tunnel_ip4 = ip4;
	if (ip6)
		__builtin_memcpy(v.tunnel_ip6, ip6, 16);
	return bpf_map_update_elem(&tendril_ipcache, &k, &v, BPF_ANY);
}

/* ---- tests ---- */

SETUP(tunnel_route_family)
{
	const __u32 endpoint6[4] = ENDPOINT6, pod6_over6[4] = POD6_OVER6, pod6_over4[4] = POD6_OVER4;
	__u32 pod4_over4[4] = { POD4_OVER4 }, pod4_over6[4] = { POD4_OVER6 }, host4[4] = { HOST4 }, native4[4] = { NATIVE4 };
	int err = 0;

	err |= ut_config(CONFIG_F_TUNNEL);
	err |= ut_entry(4, pod4_over4, 1000, ENDPOINT4, 0);
	err |= ut_entry(4, pod4_over6, 1001, 0, endpoint6);
	err |= ut_entry(6, pod6_over6, 1002, 0, endpoint6);
	err |= ut_entry(6, pod6_over4, 1003, ENDPOINT4, 0);
	/* This node's own address names itself: never tunnelled. */
	err |= ut_entry(4, host4, IDENTITY_HOST, 0, endpoint6);
	/* Known, no endpoint (native routing, or the world). */
	err |= ut_entry(4, native4, 1004, 0, 0);
	return err ? TEST_ERROR : TEST_PASS;
}

CHECK(tunnel_route_family)
{
	const __u32 pod6_over6[4] = POD6_OVER6, pod6_over4[4] = POD6_OVER4;
	struct tunnel_route r;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	/* IPv4 pod, IPv4 underlay. */
	ASSERT_EQ(ut_route4(POD4_OVER4, &r), 1);
	ASSERT_EQ(r.family, 4);
	ASSERT_EQ(r.endpoint, ENDPOINT4);
	ASSERT_EQ(r.ifindex, TUNNEL_IFINDEX);
	ASSERT_EQ(r.identity, 1000);
	/* IPv4 pod, IPv6 underlay: the outer header is IPv6. */
	ASSERT_EQ(ut_route4(POD4_OVER6, &r), 1);
	ASSERT_EQ(r.family, 6);
	ASSERT_EQ(r.endpoint6[0], bpf_htonl(0xfd000000));
	ASSERT_EQ(r.endpoint6[1] | r.endpoint6[2], 0);
	ASSERT_EQ(r.endpoint6[3], bpf_htonl(2));
	ASSERT_EQ(r.identity, 1001);
	/* IPv6 pod, IPv6 underlay. */
	ASSERT_EQ(ut_route6(pod6_over6, &r), 1);
	ASSERT_EQ(r.family, 6);
	ASSERT_EQ(r.endpoint6[3], bpf_htonl(2));
	ASSERT_EQ(r.identity, 1002);
	/* IPv6 pod, IPv4 underlay. */
	ASSERT_EQ(ut_route6(pod6_over4, &r), 1);
	ASSERT_EQ(r.family, 4);
	ASSERT_EQ(r.endpoint, ENDPOINT4);
	ASSERT_EQ(r.identity, 1003);
	/* Not through the overlay: the node's own address, an entry without endpoint, no entry. */
	ASSERT_EQ(ut_route4(HOST4, &r), 0);
	ASSERT_EQ(ut_route4(NATIVE4, &r), 0);
	ASSERT_EQ(ut_route4(bpf_htonl(0x0a010009), &r), 0);
	return TEST_PASS;
}

SETUP(tunnel_route_native_mode)
{
	const __u32 endpoint6[4] = ENDPOINT6;
	__u32 pod4_over6[4] = { POD4_OVER6 };
	int err = 0;

	/* The overlay device known, the mode native: no entry routes into it. */
	err |= ut_config(0);
	err |= ut_entry(4, pod4_over6, 1001, 0, endpoint6);
	return err ? TEST_ERROR : TEST_PASS;
}

CHECK(tunnel_route_native_mode)
{
	struct tunnel_route r;

	ASSERT_EQ(test_setup_status(skb), TEST_PASS);
	ASSERT_EQ(ut_route4(POD4_OVER6, &r), 0);
	return TEST_PASS;
}

CHECK(tunnel_portable_identity)
{
	/* A CIDR identity (local scope) means nothing on another node: the world of the source's family. */
	ASSERT_EQ(tunnel_portable_identity(IDENTITY_SCOPE_MASK | 5), IDENTITY_WORLD);
	ASSERT_EQ(tunnel_portable_identity6(IDENTITY_SCOPE_MASK | 5), IDENTITY_WORLD_IPV6);
	/* Cluster-wide and reserved identities travel as they are. */
	ASSERT_EQ(tunnel_portable_identity(1000), 1000);
	ASSERT_EQ(tunnel_portable_identity6(1000), 1000);
	ASSERT_EQ(tunnel_portable_identity6(IDENTITY_WORLD_IPV6), IDENTITY_WORLD_IPV6);
	ASSERT_EQ(tunnel_portable_identity(IDENTITY_WORLD), IDENTITY_WORLD);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
