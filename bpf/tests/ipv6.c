/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/ipv6.h and l4_load6 on real packets: the extension header walk
 * (none to five of mixed kinds with AH's own length unit, the bound of
 * IPV6_MAX_EXT_HEADERS and one past it), a first fragment recording its
 * ports in tendril_frag6 and a later one taking them, a later fragment with
 * no record, and headers cut short (the payload length past the frame, an
 * extension header ending past the payload, a UDP header too short). PKTGEN writes each packet; CHECK parses
 * it as the programs do (ipv6_load, then l4_load6).
 */
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ipv6.h>

#include "common.h"
#include "ipv6.h"
#include "l4.h"
#include "test.h"

/* ---- the functions under test: every call to ipv6.h and l4.h is in this block ---- */

static __always_inline int ut_ipv6_load(struct __sk_buff *skb, struct flow *f, struct ipv6_info *ip)
{
	__builtin_memset(f, 0, sizeof(*f));
	__builtin_memset(ip, 0, sizeof(*ip));
	return ipv6_load(skb, f, ip);
}

static __always_inline int ut_l4_load6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip)
{
	return l4_load6(skb, f, ip);
}

/* ---- packets ---- */

#define MAX_CHAIN 8
#define SPORT 5353
#define DPORT 53
#define FRAG_ID 0x11223344

/* Ethernet, IPv6, then up to MAX_CHAIN 8-byte extension headers and a UDP header right after the last. */
struct v6_frame {
	struct ethhdr eth;
	struct ipv6hdr ip6;
	__u8 rest[(MAX_CHAIN + 1) * 8];
} __attribute__((packed));

/*
 * A UDP datagram behind the `n` extension headers `kinds` names, each 8
 * bytes (length 0: (0 + 1) * 8, or AH's (0 + 2) * 4). A fragment header
 * gets `frag_word` (offset | M) and FRAG_ID. `payload_extra` is added to the
 * payload length (positive: it claims more than the frame holds); `cut`
 * bytes are left off the frame's end.
 */
static __always_inline int write_chain(struct __sk_buff *skb, const __u8 *kinds, int n, __u16 frag_word, int payload_extra, int cut)
{
	struct v6_frame p;
	__u32 len;
	int i;

	__builtin_memset(&p, 0, sizeof(p));
	p.eth.h_proto = bpf_htons(ETH_P_IPV6);
	p.ip6.version = 6;
	p.ip6.hop_limit = 64;
	p.ip6.saddr.in6_u.u6_addr8[0] = 0xfd;
	p.ip6.saddr.in6_u.u6_addr8[15] = 0x0a;
	p.ip6.daddr.in6_u.u6_addr8[0] = 0xfd;
	p.ip6.daddr.in6_u.u6_addr8[15] = 0x0b;
	p.ip6.nexthdr = n > 0 ? kinds[0] : IPPROTO_UDP;
#pragma unroll
	for (i = 0; i < MAX_CHAIN; i++) {
		if (i >= n)
			break;
		p.rest[i * 8] = i + 1 < n ? kinds[i + 1] : IPPROTO_UDP;
		if (kinds[i] == IP6_NH_FRAGMENT) {
			p.rest[i * 8 + 2] = frag_word >> 8;
			p.rest[i * 8 + 3] = frag_word & 0xff;
			p.rest[i * 8 + 4] = FRAG_ID >> 24;
			p.rest[i * 8 + 5] = (FRAG_ID >> 16) & 0xff;
			p.rest[i * 8 + 6] = (FRAG_ID >> 8) & 0xff;
			p.rest[i * 8 + 7] = FRAG_ID & 0xff;
		}
	}
	/* The UDP header after the last extension header (a later fragment's test reads it as the datagram's middle). */
	p.rest[n * 8] = SPORT >> 8;
	p.rest[n * 8 + 1] = SPORT & 0xff;
	p.rest[n * 8 + 3] = DPORT;
	p.rest[n * 8 + 5] = 8;
	p.ip6.payload_len = bpf_htons(n * 8 + 8 + payload_extra);
	len = sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + n * 8 + 8 - cut;
	return test_pkt_write(skb, &p, len);
}

static const __u8 MIXED[MAX_CHAIN] = { IP6_NH_HOPOPTS, IP6_NH_DSTOPTS, IP6_NH_ROUTING, IP6_NH_AH, IP6_NH_DSTOPTS,
				      IP6_NH_DSTOPTS, IP6_NH_DSTOPTS, IP6_NH_DSTOPTS };

/* The walk reached UDP after n headers: its offset, the datagram's end, the ports. */
#define ASSERT_UDP_AFTER(skb, f, ip, ret, n)                                         \
	do {                                                                         \
		ASSERT_EQ(ret, 0);                                                   \
		ASSERT_EQ((f).family, 6);                                            \
		ASSERT_EQ((f).proto, IPPROTO_UDP);                                   \
		ASSERT_EQ((ip).l4_off, 14 + 40 + (n) * 8);                           \
		ASSERT_EQ((ip).ip_end, 14 + 40 + (n) * 8 + 8);                       \
		ASSERT_EQ((ip).fragment, 0);                                         \
		ASSERT_EQ(ut_l4_load6(skb, &(f), &(ip)), 0);                         \
		ASSERT_EQ(bpf_ntohs((f).sport), SPORT);                              \
		ASSERT_EQ(bpf_ntohs((f).dport), DPORT);                              \
	} while (0)

#define CHAIN_TEST(name, n)                                                          \
	PKTGEN(name)                                                                 \
	{                                                                            \
		return write_chain(skb, MIXED, n, 0, 0, 0);                          \
	}                                                                            \
	CHECK(name)                                                                  \
	{                                                                            \
		struct ipv6_info ip;                                                 \
		struct flow f;                                                       \
		int ret = ut_ipv6_load(skb, &f, &ip);                                \
                                                                                     \
		ASSERT_UDP_AFTER(skb, f, ip, ret, n);                                \
		ASSERT_EQ(f.saddr6[3], bpf_htonl(0x0a));                             \
		ASSERT_EQ(f.daddr6[3], bpf_htonl(0x0b));                             \
		return TEST_PASS;                                                    \
	}

/* No extension header; then one to five of them, hop-by-hop first, AH fourth. */
CHAIN_TEST(ext_headers_0, 0)
CHAIN_TEST(ext_headers_1, 1)
CHAIN_TEST(ext_headers_2, 2)
CHAIN_TEST(ext_headers_3, 3)
CHAIN_TEST(ext_headers_4, 4)
CHAIN_TEST(ext_headers_5, 5)
/* The bound itself still passes. */
CHAIN_TEST(ext_headers_at_bound, IPV6_MAX_EXT_HEADERS)

PKTGEN(ext_headers_past_bound)
{
	return write_chain(skb, MIXED, IPV6_MAX_EXT_HEADERS + 1, 0, 0, 0);
}

/* One header more than the walk takes: refused, not guessed at. */
CHECK(ext_headers_past_bound)
{
	struct ipv6_info ip;
	struct flow f;

	ASSERT_EQ(ut_ipv6_load(skb, &f, &ip), DROP_INVALID_EXTHDR);
	return TEST_PASS;
}

static const __u8 FRAG_CHAIN[MAX_CHAIN] = { IP6_NH_HOPOPTS, IP6_NH_FRAGMENT };

PKTGEN(fragment_first_then_later)
{
	return write_chain(skb, FRAG_CHAIN, 2, IP6_FRAG_MF, 0, 0);
}

/*
 * A first fragment (offset 0, M set) is walked through to UDP and records
 * its ports under (addresses, identification, protocol); a later fragment
 * of the same datagram takes them from there.
 */
CHECK(fragment_first_then_later)
{
	struct frag6_key fk;
	struct frag4_ports *rec;
	struct ipv6_info ip;
	struct flow f;
	int ret = ut_ipv6_load(skb, &f, &ip);

	ASSERT_EQ(ret, 0);
	ASSERT_EQ(ip.fragment, 1);
	ASSERT_EQ(ip.frag_off, IP6_FRAG_MF);
	ASSERT_EQ(ip.frag_id, bpf_htonl(FRAG_ID));
	ASSERT_EQ(f.proto, IPPROTO_UDP);
	ASSERT_EQ(ip.l4_off, 14 + 40 + 16);
	ASSERT_EQ(ut_l4_load6(skb, &f, &ip), 0);
	__builtin_memset(&fk, 0, sizeof(fk));
	__builtin_memcpy(fk.saddr, f.saddr6, 16);
	__builtin_memcpy(fk.daddr, f.daddr6, 16);
	fk.id = bpf_htonl(FRAG_ID);
	fk.proto = IPPROTO_UDP;
	rec = bpf_map_lookup_elem(&tendril_frag6, &fk);
	ASSERT(rec != NULL);
	ASSERT_EQ(bpf_ntohs(rec->sport), SPORT);
	ASSERT_EQ(bpf_ntohs(rec->dport), DPORT);

	/* The same datagram's later fragment: what follows its header is no UDP header, the ports come from the record. */
	ip.frag_off = 16;
	f.sport = 0;
	f.dport = 0;
	ASSERT_EQ(ut_l4_load6(skb, &f, &ip), 0);
	ASSERT_EQ(bpf_ntohs(f.sport), SPORT);
	ASSERT_EQ(bpf_ntohs(f.dport), DPORT);
	bpf_map_delete_elem(&tendril_frag6, &fk);
	return TEST_PASS;
}

PKTGEN(fragment_later_unknown)
{
	return write_chain(skb, FRAG_CHAIN, 2, 16, 0, 0);
}

/* A later fragment ends the walk at its fragment header; with no first fragment seen it has no ports. */
CHECK(fragment_later_unknown)
{
	struct ipv6_info ip;
	struct flow f;
	int ret = ut_ipv6_load(skb, &f, &ip);

	ASSERT_EQ(ret, 0);
	ASSERT_EQ(ip.fragment, 1);
	ASSERT_EQ(ip.frag_off, 16);
	ASSERT_EQ(f.proto, IPPROTO_UDP);
	ASSERT_EQ(ip.l4_off, 14 + 40 + 16);
	ASSERT_EQ(ut_l4_load6(skb, &f, &ip), DROP_FRAG_NOT_FOUND);
	return TEST_PASS;
}

PKTGEN(truncated_payload_length)
{
	return write_chain(skb, MIXED, 2, 0, 8, 0);
}

/* A payload length past the frame. */
CHECK(truncated_payload_length)
{
	struct ipv6_info ip;
	struct flow f;

	ASSERT_EQ(ut_ipv6_load(skb, &f, &ip), DROP_INVALID_PACKET);
	return TEST_PASS;
}

PKTGEN(truncated_ext_header)
{
	/* Three headers, the payload ending 4 bytes into the third. */
	return write_chain(skb, MIXED, 3, 0, -12, 12);
}

/* An extension header cut short within the datagram. */
CHECK(truncated_ext_header)
{
	struct ipv6_info ip;
	struct flow f;

	ASSERT_EQ(ut_ipv6_load(skb, &f, &ip), DROP_INVALID_PACKET);
	return TEST_PASS;
}

PKTGEN(truncated_udp)
{
	return write_chain(skb, MIXED, 1, 0, -4, 4);
}

/* The walk ends at UDP but the datagram is too short for its header: conntrack refuses it. */
CHECK(truncated_udp)
{
	struct ipv6_info ip;
	struct flow f;
	int ret = ut_ipv6_load(skb, &f, &ip);

	ASSERT_EQ(ret, 0);
	ASSERT_EQ(ut_l4_load6(skb, &f, &ip), DROP_CT_INVALID_HEADER);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
