/*
 * Numbers the domain code (services, nodes, Kubernetes) and the eBPF
 * datapath share, defined apart from the eBPF implementation's constants so
 * that the domain does not depend on it; bpf/constants.ts re-exports them and
 * generates them into C with the rest.
 */

/** Bytes VXLAN adds to an IPv4 packet: outer IPv4 (20) + UDP (8) + VXLAN (8) + inner Ethernet (14). */
export const TUNNEL_OVERHEAD = 50;
/** Maglev's default table size (Cilium's): a prime; --lb-maglev-table-size takes another prime. */
export const MAGLEV_DEFAULT_TABLE_SIZE = 16381;
/** The largest service ID, and so reverse NAT index (a __u16 in the maps). */
export const MAX_SERVICE_ID = 65535;
