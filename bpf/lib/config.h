/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* tendril_config: the agent's runtime settings for the programs (one entry). */
#ifndef __TENDRIL_LIB_CONFIG_H_
#define __TENDRIL_LIB_CONFIG_H_

#include "common.h"

/* A range of SNAT source ports, host order; min 0 = unused. */
struct nat_port_range {
	__u16 min;
	__u16 max;
};

struct datapath_config {
	__u32 trace_level;  /* TRACE_LEVEL_* */
	__u32 flags;
	__u32 host_ifindex; /* tendril_host */
	__u32 maglev_table_size; /* entries of every Maglev table in tendril_lb4_mag */
	__u32 tunnel_ifindex;    /* tendril_vxlan, with CONFIG_F_TUNNEL */
	__be32 node_ipv4;        /* this node's InternalIP (the tunnel endpoint other nodes know it by); 0 = unknown */
	struct nat_port_range nat_ports[NAT_PORT_RANGES]; /* SNAT's source ports; none → NAT_PORT_MIN..NAT_PORT_MAX */
	__u32 ct_endpoint_max;   /* conntrack entries one endpoint may hold; 0 = no budget */
	/*
	 * A build with other map layouts is taking over the node until then
	 * (bpf_ktime_get_ns), 0 = none: see ct_held_for_migration. A deadline,
	 * not a flag, so that a loader that dies half way leaves nothing set.
	 */
	__u64 migration_until_ns;
	/* this node's IPv6 InternalIP (a NodePort flow's source to a backend through the overlay); all 0 = unknown */
	__be32 node_ipv6[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct datapath_config);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tendril_config SEC(".maps");

/* The trace level the agent set; without a config entry tracing is off. */
static __always_inline __u32 config_trace_level(void)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	return cfg ? cfg->trace_level : TRACE_LEVEL_OFF;
}

/* tendril_vxlan's ifindex in tunnel routing mode (CONFIG_F_TUNNEL), else 0: no overlay. */
static __always_inline __u32 config_tunnel_ifindex(void)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	return cfg && (cfg->flags & CONFIG_F_TUNNEL) ? cfg->tunnel_ifindex : 0;
}

/*
 * --bpf-lb-external-clusterip (CONFIG_F_EXTERNAL_CLUSTERIP): ClusterIPs are
 * frontends for traffic from outside the cluster too. Off by default: a
 * ClusterIP answers pods, the node and other nodes' pods only.
 */
static __always_inline int config_external_clusterip(void)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	return cfg && (cfg->flags & CONFIG_F_EXTERNAL_CLUSTERIP);
}

/*
 * This node's InternalIP, network order, or 0: the address other nodes
 * reach it at through the overlay (their ipcache holds it as a remote
 * node's), and so the source a NodePort flow to a backend there takes.
 */
static __always_inline __be32 config_node_ipv4(void)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	return cfg ? cfg->node_ipv4 : 0;
}

/*
 * config_node_ipv4 for IPv6: copies this node's IPv6 InternalIP to out and
 * returns 1, or 0 when it is unknown (out untouched).
 */
static __always_inline int config_node_ipv6(__be32 *out)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	if (!cfg || !(cfg->node_ipv6[0] | cfg->node_ipv6[1] | cfg->node_ipv6[2] | cfg->node_ipv6[3]))
		return 0;
	__builtin_memcpy(out, cfg->node_ipv6, 16);
	return 1;
}

/* Whether a build with other map layouts is taking over the node right now. */
static __always_inline int config_migration_window(__u64 now)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	return cfg && now < cfg->migration_until_ns;
}

/* --policy-audit-mode (CONFIG_F_POLICY_AUDIT): policy refusals are reported, never dropped. */
static __always_inline int config_policy_audit(void)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	return cfg && (cfg->flags & CONFIG_F_POLICY_AUDIT);
}

/* --bpf-ct-endpoint-max: conntrack entries one endpoint may hold; 0 = no budget. */
static __always_inline __u32 config_ct_endpoint_max(void)
{
	__u32 zero = 0;
	struct datapath_config *cfg = bpf_map_lookup_elem(&tendril_config, &zero);

	return cfg ? cfg->ct_endpoint_max : 0;
}

#endif
