/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * bpf/lib/l4.h on real packets: the tuple inside an ICMP error (after IP
 * options, an echo's identifier), and an embedded header that gives no
 * tuple (truncated within the error's datagram even when the frame goes on,
 * not IPv4, a header length under 5 words), and an L4 header too short for
 * conntrack. PKTGEN writes each packet; CHECK parses it as the programs do
 * (ipv4_load, then l4_load).
 */
#include <linux/if_ether.h>
#include <linux/ip.h>

#include "common.h"
#include "ipv4.h"
#include "l4.h"
#include "test.h"

/* ---- the functions under test: every call to ipv4.h and l4.h is in this block ---- */

/* The packet's IPv4 header, then its L4 header and any ICMP error's inner tuple, into f. */
static __always_inline int ut_parse(struct __sk_buff *skb, struct flow *f)
{
	struct ipv4_info ip;
	int ret;

	__builtin_memset(f, 0, sizeof(*f));
	ret = ipv4_load(skb, f, &ip);
	if (ret < 0)
		return ret;
	return l4_load(skb, f, &ip);
}

/* ---- packets ---- */

#define ROUTER bpf_htonl(0x0a090909) /* 10.9.9.9: sends the error */
#define POD bpf_htonl(0x0a000105)    /* 10.0.1.5: sent the datagram, gets the error */
#define PEER bpf_htonl(0x01010101)   /* 1.1.1.1 */
#define ECHO_ID 0x4242

/* An ICMP error's frame: outer headers, the embedded header (room for one word of options) and 8 bytes of its payload. */
struct icmp_error_frame {
	struct ethhdr eth;
	struct iphdr ip;
	struct {
		__u8 type;
		__u8 code;
		__be16 check;
		__be32 unused;
	} icmp;
	__u8 inner[20 + 4 + 8];
} __attribute__((packed));

/* What varies between the errors below. */
struct inner_shape {
	__u8 version;
	__u8 ihl;
	__u8 proto;
	/* Bytes of the embedded datagram inside the outer one (the frame always carries all of `inner`). */
	__u16 carried;
};

static __always_inline int write_icmp_error(struct __sk_buff *skb, struct inner_shape s)
{
	struct icmp_error_frame p;
	struct iphdr in;
	__u32 l4 = s.ihl == 6 ? 24 : 20;

	__builtin_memset(&p, 0, sizeof(p));
	p.eth.h_proto = bpf_htons(ETH_P_IP);
	p.ip.version = 4;
	p.ip.ihl = 5;
	p.ip.ttl = 64;
	p.ip.protocol = IPPROTO_ICMP;
	p.ip.saddr = ROUTER;
	p.ip.daddr = POD;
	p.ip.tot_len = bpf_htons(sizeof(struct iphdr) + sizeof(p.icmp) + s.carried);
	p.icmp.type = ICMP_T_DEST_UNREACH;
	p.icmp.code = 3; /* port unreachable */

	__builtin_memset(&in, 0, sizeof(in));
	in.version = s.version;
	in.ihl = s.ihl;
	in.ttl = 63;
	in.protocol = s.proto;
	in.saddr = POD;
	in.daddr = PEER;
	in.tot_len = bpf_htons(l4 + 8);
	__builtin_memcpy(p.inner, &in, sizeof(in));
	if (s.proto == IPPROTO_ICMP) {
		p.inner[l4] = ICMP_T_ECHO;
		p.inner[l4 + 4] = ECHO_ID >> 8;
		p.inner[l4 + 5] = ECHO_ID & 0xff;
	} else {
		/* sport 5353, dport 53 */
		p.inner[l4] = 5353 >> 8;
		p.inner[l4 + 1] = 5353 & 0xff;
		p.inner[l4 + 3] = 53;
	}
	return test_pkt_write(skb, &p, sizeof(p));
}

/* The outer headers parse and say ICMP error whatever the embedded header holds. */
#define ASSERT_OUTER_ERROR(f, ret)                    \
	do {                                          \
		ASSERT_EQ(ret, 0);                    \
		ASSERT_EQ((f).proto, IPPROTO_ICMP);   \
		ASSERT_EQ((f).icmp_error, 1);         \
		ASSERT_EQ((f).saddr, ROUTER);         \
		ASSERT_EQ((f).daddr, POD);            \
	} while (0)

PKTGEN(icmp_error_udp_tuple)
{
	return write_icmp_error(skb, (struct inner_shape){ .version = 4, .ihl = 5, .proto = IPPROTO_UDP, .carried = 28 });
}

/* The embedded UDP datagram's tuple, as the pod sent it. */
CHECK(icmp_error_udp_tuple)
{
	struct flow f;
	int ret = ut_parse(skb, &f);

	ASSERT_OUTER_ERROR(f, ret);
	ASSERT_EQ(f.has_inner, 1);
	ASSERT_EQ(f.inner_saddr, POD);
	ASSERT_EQ(f.inner_daddr, PEER);
	ASSERT_EQ(f.inner_proto, IPPROTO_UDP);
	ASSERT_EQ(bpf_ntohs(f.inner_sport), 5353);
	ASSERT_EQ(bpf_ntohs(f.inner_dport), 53);
	/* An error has no ports of its own. */
	ASSERT_EQ(f.sport, 0);
	ASSERT_EQ(f.dport, 0);
	return TEST_PASS;
}

PKTGEN(icmp_error_inner_options)
{
	return write_icmp_error(skb, (struct inner_shape){ .version = 4, .ihl = 6, .proto = IPPROTO_UDP, .carried = 32 });
}

/* Embedded IP options: the ports are read after them. */
CHECK(icmp_error_inner_options)
{
	struct flow f;
	int ret = ut_parse(skb, &f);

	ASSERT_OUTER_ERROR(f, ret);
	ASSERT_EQ(f.has_inner, 1);
	ASSERT_EQ(bpf_ntohs(f.inner_sport), 5353);
	ASSERT_EQ(bpf_ntohs(f.inner_dport), 53);
	return TEST_PASS;
}

PKTGEN(icmp_error_inner_echo)
{
	return write_icmp_error(skb, (struct inner_shape){ .version = 4, .ihl = 5, .proto = IPPROTO_ICMP, .carried = 28 });
}

/* An error about an echo request: its identifier as the source port, as conntrack keyed the request. */
CHECK(icmp_error_inner_echo)
{
	struct flow f;
	int ret = ut_parse(skb, &f);

	ASSERT_OUTER_ERROR(f, ret);
	ASSERT_EQ(f.has_inner, 1);
	ASSERT_EQ(f.inner_proto, IPPROTO_ICMP);
	ASSERT_EQ(bpf_ntohs(f.inner_sport), ECHO_ID);
	ASSERT_EQ(f.inner_dport, 0);
	return TEST_PASS;
}

PKTGEN(icmp_error_truncated_header)
{
	return write_icmp_error(skb, (struct inner_shape){ .version = 4, .ihl = 5, .proto = IPPROTO_UDP, .carried = 19 });
}

/* The error's datagram ends inside the embedded header: no tuple, though the frame holds the rest. */
CHECK(icmp_error_truncated_header)
{
	struct flow f;
	int ret = ut_parse(skb, &f);

	ASSERT_OUTER_ERROR(f, ret);
	ASSERT_EQ(f.has_inner, 0);
	return TEST_PASS;
}

PKTGEN(icmp_error_truncated_ports)
{
	return write_icmp_error(skb, (struct inner_shape){ .version = 4, .ihl = 5, .proto = IPPROTO_UDP, .carried = 22 });
}

/* The embedded header whole but its ports cut off: no tuple. */
CHECK(icmp_error_truncated_ports)
{
	struct flow f;
	int ret = ut_parse(skb, &f);

	ASSERT_OUTER_ERROR(f, ret);
	ASSERT_EQ(f.has_inner, 0);
	return TEST_PASS;
}

PKTGEN(icmp_error_bad_version)
{
	return write_icmp_error(skb, (struct inner_shape){ .version = 6, .ihl = 5, .proto = IPPROTO_UDP, .carried = 28 });
}

/* An embedded header that is not IPv4: no tuple. */
CHECK(icmp_error_bad_version)
{
	struct flow f;
	int ret = ut_parse(skb, &f);

	ASSERT_OUTER_ERROR(f, ret);
	ASSERT_EQ(f.has_inner, 0);
	return TEST_PASS;
}

PKTGEN(icmp_error_bad_ihl)
{
	return write_icmp_error(skb, (struct inner_shape){ .version = 4, .ihl = 4, .proto = IPPROTO_UDP, .carried = 28 });
}

/* An embedded header length under five words: no tuple. */
CHECK(icmp_error_bad_ihl)
{
	struct flow f;
	int ret = ut_parse(skb, &f);

	ASSERT_OUTER_ERROR(f, ret);
	ASSERT_EQ(f.has_inner, 0);
	return TEST_PASS;
}

/* A TCP segment whose datagram holds 12 bytes of its 20-byte header. */
PKTGEN(tcp_header_too_short)
{
	struct {
		struct ethhdr eth;
		struct iphdr ip;
		__u8 tcp[20];
	} __attribute__((packed)) p;

	__builtin_memset(&p, 0, sizeof(p));
	p.eth.h_proto = bpf_htons(ETH_P_IP);
	p.ip.version = 4;
	p.ip.ihl = 5;
	p.ip.ttl = 64;
	p.ip.protocol = IPPROTO_TCP;
	p.ip.saddr = POD;
	p.ip.daddr = PEER;
	p.ip.tot_len = bpf_htons(sizeof(struct iphdr) + 12);
	p.tcp[13] = TCP_FLAG_SYN;
	return test_pkt_write(skb, &p, sizeof(p));
}

/* Too short for conntrack: refused (DROP_CT_INVALID_HEADER), not parsed from the bytes after the datagram. */
CHECK(tcp_header_too_short)
{
	struct flow f;

	ASSERT_EQ(ut_parse(skb, &f), DROP_CT_INVALID_HEADER);
	ASSERT_EQ(f.tcp_flags, 0);
	return TEST_PASS;
}

char _license[] SEC("license") = "Dual BSD/GPL";
