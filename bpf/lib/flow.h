/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * struct flow: what a program learned about the packet in hand, filled in
 * as parsing goes, so that a drop at any step can still say what it knew.
 */
#ifndef __TENDRIL_LIB_FLOW_H_
#define __TENDRIL_LIB_FLOW_H_

#include "common.h"
#include "config.h"

/* TCP header flag bits (the 14th byte of the header). */
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

/* A pair of ports as conntrack keys them. */
struct flow_ports {
	__be16 sport;
	__be16 dport;
};

/*
 * Addresses hold either family: IPv4 in the first word (saddr, daddr, as
 * every IPv4 path reads them), IPv6 in all four (saddr6, daddr6). One
 * struct for both, so that policy, drops, traces and events take a flow
 * whatever its family; the family-specific steps (parsing, conntrack keys,
 * translation) read the member of theirs.
 */
struct flow {
	union {
		__be32 saddr;
		__be32 saddr6[4];
	};
	union {
		__be32 daddr;
		__be32 daddr6[4];
	};
	__be16 sport; /* ICMP echo request: the identifier (reply: dport); other ICMP: 0 */
	__be16 dport;
	__u8 proto;
	__u8 tcp_flags;
	__u8 family;     /* 4 or 6 */
	__u8 icmp_error; /* an ICMP error: its embedded tuple is in `inner` */
	__u8 has_inner;  /* the error's embedded header was complete enough for a tuple */
	__u8 pad[3];
	__u32 len;     /* skb->len */
	__u32 ifindex; /* skb->ifindex */
	__u32 src_identity;
	__u32 dst_identity;
	__u32 src_endpoint;
	__u32 dst_endpoint;
	__u32 trace_level;
	/* The tuple an ICMP error is about, as the packet that caused it carried it. */
	union {
		__be32 inner_saddr;
		__be32 inner_saddr6[4];
	};
	union {
		__be32 inner_daddr;
		__be32 inner_daddr6[4];
	};
	__be16 inner_sport;
	__be16 inner_dport;
	__u8 inner_proto;
	__u8 inner_pad[3];
	/*
	 * Service translation: what lb4_select chose for a new flow (written into
	 * its conntrack entry), or what the conntrack entry found says.
	 */
	__u32 backend_id;  /* 0 = no service flow */
	union {
		__be32 nat_addr; /* the frontend as the client addressed it */
		__be32 nat_addr6[4];
	};
	__be16 nat_port;
	__u16 rev_nat_index;
	__u8 ct_flags;     /* CT_F_* of the entry found; for a new flow, the CT_F_HAIRPIN/NODEPORT to record */
	__u8 related_orig; /* an ICMP error about a packet of the flow's original direction (it travels to the client) */
	/*
	 * This program looked the packet up as a service (a pod's packet): its
	 * translation, or the lack of one, is what the flow's original direction
	 * means now, and an entry recorded for another frontend on the same
	 * translated tuple (a client port reused) takes it.
	 */
	__u8 lb_checked;
	/* Only a backend on this node will do (the node's own connection to its NodePort, over lo). */
	__u8 lb_local_only;
	/*
	 * The stack hands the packet to the pod: a NodePort never does (it
	 * delivers straight into the pod), so an entry a NodePort translation
	 * left on this tuple is stale — the client now talks to the pod itself.
	 */
	__u8 lb_direct;
	__u8 svc_pad[3];
};

/*
 * The flow of the packet in hand, one per CPU. Not on the stack: the
 * verifier allows a chain of stages 512 bytes of stack together, and a
 * flow that holds IPv6 addresses would take a third of them at the root
 * of every chain. A program runs to its end on its CPU before the next
 * one there starts (tc programs run with bottom halves off; a redirect
 * takes effect after the program returns), so each program's flow_init
 * has the slot to itself until it returns.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flow);
} tendril_flow_scratch SEC(".maps");

/*
 * Every program's start: the packet's size and device, and the trace level
 * the agent set. NULL never happens (the one slot of a per-CPU array
 * always exists); callers still decide what it means for their hook.
 */
static __always_inline struct flow *flow_init(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct flow *f = bpf_map_lookup_elem(&tendril_flow_scratch, &zero);

	if (!f)
		return NULL;
	__builtin_memset(f, 0, sizeof(*f));
	f->family = 4;
	f->len = skb->len;
	f->ifindex = skb->ifindex;
	f->trace_level = config_trace_level();
	return f;
}

#endif
