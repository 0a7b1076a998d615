/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * L4: the ports (or ICMP identifier) conntrack and policy key on, TCP flags,
 * the ports of later fragments from their first one (tendril_frag4,
 * tendril_frag6), and the tuple inside an ICMP error, for either family
 * (l4_load after ipv4_load, l4_load6 after ipv6_load).
 */
#ifndef __TENDRIL_LIB_L4_H_
#define __TENDRIL_LIB_L4_H_

#include <linux/in.h>
#include <linux/ip.h>

#include "common.h"
#include "conntrack.h"
#include "flow.h"
#include "ipv4.h"
#include "ipv6.h"

/* ICMP types conntrack knows. */
#define ICMP_T_ECHOREPLY 0
#define ICMP_T_DEST_UNREACH 3
#define ICMP_T_ECHO 8
#define ICMP_T_TIME_EXCEEDED 11
#define ICMP_T_PARAMETERPROB 12

static __always_inline int l4_has_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

/* The smallest header conntrack accepts per protocol (0: no L4 header read). */
static __always_inline __u32 l4_min_len(__u8 proto)
{
	switch (proto) {
	case IPPROTO_TCP:
		return 20;
	case IPPROTO_UDP:
		return 8;
	case IPPROTO_SCTP:
		return 12;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		return 8;
	default:
		return 0;
	}
}

static __always_inline int icmp_is_error(__u8 type)
{
	return type == ICMP_T_DEST_UNREACH || type == ICMP_T_TIME_EXCEEDED || type == ICMP_T_PARAMETERPROB;
}

/* ICMPv6 errors (RFC 4443): each carries as much of the datagram that caused it as fits. */
static __always_inline int icmp6_is_error(__u8 type)
{
	return type == ICMP6_T_DEST_UNREACH || type == ICMP6_T_PACKET_TOO_BIG || type == ICMP6_T_TIME_EXCEEDED ||
	       type == ICMP6_T_PARAMETERPROB;
}

/*
 * The ports conntrack keys an ICMP echo on: the identifier as the source
 * port of a request and as the destination port of a reply, so a reply
 * finds its request's entry reversed, and a request the other way (same
 * identifier) does not: it is a new flow and meets policy.
 */
static __always_inline void icmp_echo_ports(struct flow_ports *p, int request, const __u8 *id)
{
	__be16 ident;

	__builtin_memcpy(&ident, id, 2);
	p->sport = request ? ident : 0;
	p->dport = request ? 0 : ident;
}

/*
 * The tuple an ICMP error carries (the header of the datagram that caused
 * it and at least 8 bytes of its payload), read only within the error's own
 * datagram (`ip_end`), never from bytes trailing it in the frame. Leaves
 * f->has_inner 0 when the embedded header is too short for a tuple: then
 * the error is not related.
 */
static __always_inline void icmp_load_inner(struct __sk_buff *skb, struct flow *f, __u32 inner_off, __u32 ip_end)
{
	struct flow_ports ports;
	struct iphdr ip;
	__u8 l4[8];
	__u32 off;

	if (ipv4_load_embedded(skb, inner_off, ip_end, &ip) < 0)
		return;
	off = inner_off + ip.ihl * 4;
	f->inner_saddr = ip.saddr;
	f->inner_daddr = ip.daddr;
	f->inner_proto = ip.protocol;
	if (l4_has_ports(ip.protocol)) {
		if (off + 4 > ip_end || bpf_skb_load_bytes(skb, off, l4, 4) < 0)
			return;
		__builtin_memcpy(&f->inner_sport, &l4[0], 2);
		__builtin_memcpy(&f->inner_dport, &l4[2], 2);
	} else if (ip.protocol == IPPROTO_ICMP) {
		if (off + 8 > ip_end || bpf_skb_load_bytes(skb, off, l4, 8) < 0)
			return;
		if (l4[0] != ICMP_T_ECHO && l4[0] != ICMP_T_ECHOREPLY)
			return;
		icmp_echo_ports(&ports, l4[0] == ICMP_T_ECHO, &l4[4]);
		f->inner_sport = ports.sport;
		f->inner_dport = ports.dport;
	} else {
		f->inner_sport = 0;
		f->inner_dport = 0;
	}
	f->has_inner = 1;
}

/*
 * Fills f's ports, TCP flags and ICMP error tuple. A later fragment takes
 * its ports from the first fragment's record (DROP_FRAG_NOT_FOUND without
 * one); a first fragment leaves that record. DROP_CT_INVALID_HEADER when the
 * datagram is too short for the protocol's header.
 */
__stage int l4_load(struct __sk_buff *skb, struct flow *f, const struct ipv4_info *ip)
{
	struct frag4_key fk;
	__u8 hdr[20];
	__u32 need;

	if (!f || !ip)
		return DROP_CT_INVALID_HEADER;
	fk.saddr = f->saddr;
	fk.daddr = f->daddr;
	fk.id = ip->id;
	fk.proto = f->proto;
	fk.pad = 0;
	if (ipv4_is_later_fragment(ip)) {
		struct frag4_ports *ports = bpf_map_lookup_elem(&tendril_frag4, &fk);

		if (!ports)
			return DROP_FRAG_NOT_FOUND;
		f->sport = ports->sport;
		f->dport = ports->dport;
		return 0;
	}

	need = l4_min_len(f->proto);
	if (need == 0)
		return 0;
	if (ip->l4_off + need > ip->ip_end)
		return DROP_CT_INVALID_HEADER;
	/* The longest minimum (TCP's) is read whenever the datagram holds it. */
	if (ip->l4_off + sizeof(hdr) <= ip->ip_end) {
		if (bpf_skb_load_bytes(skb, ip->l4_off, hdr, sizeof(hdr)) < 0)
			return DROP_CT_INVALID_HEADER;
	} else if (bpf_skb_load_bytes(skb, ip->l4_off, hdr, 8) < 0) {
		return DROP_CT_INVALID_HEADER;
	}

	if (f->proto == IPPROTO_ICMP) {
		__u8 type = hdr[0];

		if (type == ICMP_T_ECHO || type == ICMP_T_ECHOREPLY) {
			struct flow_ports ports;

			icmp_echo_ports(&ports, type == ICMP_T_ECHO, &hdr[4]);
			f->sport = ports.sport;
			f->dport = ports.dport;
		} else if (icmp_is_error(type)) {
			f->icmp_error = 1;
			icmp_load_inner(skb, f, ip->l4_off + 8, ip->ip_end);
		}
	} else {
		__builtin_memcpy(&f->sport, &hdr[0], 2);
		__builtin_memcpy(&f->dport, &hdr[2], 2);
		if (f->proto == IPPROTO_TCP)
			f->tcp_flags = hdr[13];
	}

	if (ipv4_is_first_fragment(ip)) {
		struct frag4_ports ports = { .sport = f->sport, .dport = f->dport };

		/*
		 * Unrecorded, the later fragments could not be matched: the
		 * datagram is lost either way, so its first fragment goes now,
		 * with the reason the others would get.
		 */
		if (bpf_map_update_elem(&tendril_frag4, &fk, &ports, BPF_ANY) < 0)
			return DROP_FRAG_NOT_FOUND;
	}
	return 0;
}

/*
 * The tuple an ICMPv6 error carries (the IPv6 header of the datagram that
 * caused it, then its first bytes), read only within the error's own
 * datagram, as icmp_load_inner for IPv4. Extension headers in the embedded
 * datagram are not walked: the tuple is then not found (has_inner 0) and
 * the error is not related, which fails closed.
 */
static __always_inline void icmp6_load_inner(struct __sk_buff *skb, struct flow *f, __u32 inner_off, __u32 ip_end)
{
	struct flow_ports ports;
	struct ipv6hdr ip6;
	__u8 l4[8];
	__u32 off;

	if (ipv6_load_embedded(skb, inner_off, ip_end, &ip6) < 0)
		return;
	off = inner_off + sizeof(ip6);
	__builtin_memcpy(f->inner_saddr6, &ip6.saddr, 16);
	__builtin_memcpy(f->inner_daddr6, &ip6.daddr, 16);
	f->inner_proto = ip6.nexthdr;
	if (l4_has_ports(ip6.nexthdr)) {
		if (off + 4 > ip_end || bpf_skb_load_bytes(skb, off, l4, 4) < 0)
			return;
		__builtin_memcpy(&f->inner_sport, &l4[0], 2);
		__builtin_memcpy(&f->inner_dport, &l4[2], 2);
	} else if (ip6.nexthdr == IPPROTO_ICMPV6) {
		if (off + 8 > ip_end || bpf_skb_load_bytes(skb, off, l4, 8) < 0)
			return;
		if (l4[0] != ICMP6_T_ECHO_REQUEST && l4[0] != ICMP6_T_ECHO_REPLY)
			return;
		icmp_echo_ports(&ports, l4[0] == ICMP6_T_ECHO_REQUEST, &l4[4]);
		f->inner_sport = ports.sport;
		f->inner_dport = ports.dport;
	} else if (ipv6_is_ext_header(ip6.nexthdr)) {
		return;
	} else {
		f->inner_sport = 0;
		f->inner_dport = 0;
	}
	f->has_inner = 1;
}

/*
 * l4_load for IPv6 (after ipv6_load): ports, TCP flags, an ICMPv6 echo's
 * identifier, an ICMPv6 error's tuple. A later fragment takes its ports
 * from its first fragment's record in tendril_frag6 (keyed by addresses,
 * the fragment header's identification and protocol; DROP_FRAG_NOT_FOUND
 * without one); a first fragment leaves that record.
 */
__stage int l4_load6(struct __sk_buff *skb, struct flow *f, const struct ipv6_info *ip)
{
	struct frag6_key fk;
	__u8 hdr[20];
	__u32 need;

	if (!f || !ip)
		return DROP_CT_INVALID_HEADER;
	__builtin_memcpy(fk.saddr, f->saddr6, 16);
	__builtin_memcpy(fk.daddr, f->daddr6, 16);
	fk.id = ip->frag_id;
	fk.proto = f->proto;
	fk.pad[0] = 0;
	fk.pad[1] = 0;
	fk.pad[2] = 0;
	if (ipv6_is_later_fragment(ip)) {
		struct frag4_ports *ports = bpf_map_lookup_elem(&tendril_frag6, &fk);

		if (!ports)
			return DROP_FRAG_NOT_FOUND;
		f->sport = ports->sport;
		f->dport = ports->dport;
		return 0;
	}

	need = l4_min_len(f->proto);
	if (need == 0)
		return 0;
	if (ip->l4_off + need > ip->ip_end)
		return DROP_CT_INVALID_HEADER;
	if (ip->l4_off + sizeof(hdr) <= ip->ip_end) {
		if (bpf_skb_load_bytes(skb, ip->l4_off, hdr, sizeof(hdr)) < 0)
			return DROP_CT_INVALID_HEADER;
	} else if (bpf_skb_load_bytes(skb, ip->l4_off, hdr, 8) < 0) {
		return DROP_CT_INVALID_HEADER;
	}

	if (f->proto == IPPROTO_ICMPV6) {
		__u8 type = hdr[0];

		if (type == ICMP6_T_ECHO_REQUEST || type == ICMP6_T_ECHO_REPLY) {
			struct flow_ports ports;

			icmp_echo_ports(&ports, type == ICMP6_T_ECHO_REQUEST, &hdr[4]);
			f->sport = ports.sport;
			f->dport = ports.dport;
		} else if (icmp6_is_error(type)) {
			f->icmp_error = 1;
			icmp6_load_inner(skb, f, ip->l4_off + 8, ip->ip_end);
		}
	} else if (f->proto != IPPROTO_ICMP) {
		__builtin_memcpy(&f->sport, &hdr[0], 2);
		__builtin_memcpy(&f->dport, &hdr[2], 2);
		if (f->proto == IPPROTO_TCP)
			f->tcp_flags = hdr[13];
	}

	if (ipv6_is_first_fragment(ip)) {
		struct frag4_ports ports = { .sport = f->sport, .dport = f->dport };

		if (bpf_map_update_elem(&tendril_frag6, &fk, &ports, BPF_ANY) < 0)
			return DROP_FRAG_NOT_FOUND;
	}
	return 0;
}

/* The port a policy key carries: the destination port for protocols with ports, else 0. */
static __always_inline __be16 l4_policy_port(const struct flow *f)
{
	return l4_has_ports(f->proto) ? f->dport : 0;
}

#endif
