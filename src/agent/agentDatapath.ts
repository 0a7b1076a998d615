/**
 * The datapath the agent's configuration asks for: the eBPF datapath (maps
 * sized and trace level set from the config, the IPCache mirrored into it),
 * or the routing datapath for nodes without BPF.
 */
import { BpfDatapath } from '../datapath/bpf/bpfDatapath.js';
import { MapName, TraceLevel, type MapNameValue } from '../datapath/bpf/constants.js';
import { nodeNatPortRanges } from '../datapath/bpf/natPorts.js';
import type { MapSizes } from '../datapath/bpf/objects.js';
import { bpffsOrigin, type BpffsOrigin, PRIVATE_BPFFS_FIX } from '../datapath/kernel/bpf/index.js';
import { LinuxDatapath } from '../datapath/linux/linuxDatapath.js';
import type { Datapath } from '../datapath/types.js';
import type { IPCache } from '../ipcache/index.js';
import type { Logger } from '../logging/logger.js';
import type { AgentConfig, BpfMapSizeKey } from './config.js';

/**
 * The maps each --bpf-*-max flag sizes. A flag of a table keyed by address
 * sizes both families' tables (IPv4's and IPv6's), as Cilium's do: an
 * operator sizes conntrack or services for the node's load, whichever
 * family carries it; without the flag each keeps its own default (the IPv6
 * conntrack tables half the IPv4 ones, DefaultMapSize).
 */
const MAPS_OF_SIZE_KEY: Record<BpfMapSizeKey, readonly MapNameValue[]> = {
  lxc: [MapName.ENDPOINTS],
  ipcache: [MapName.IPCACHE],
  policy: [MapName.POLICY],
  ctTcp: [MapName.CT_TCP, MapName.CT6_TCP],
  ctAny: [MapName.CT_ANY, MapName.CT6_ANY],
  frag: [MapName.FRAG, MapName.FRAG6],
  events: [MapName.EVENTS],
  lbServices: [MapName.LB_SERVICES, MapName.LB6_SERVICES],
  lbBackends: [MapName.LB_BACKENDS, MapName.LB6_BACKENDS],
  lbRevnat: [MapName.LB_REVNAT, MapName.LB6_REVNAT],
  lbAffinity: [MapName.LB_AFFINITY, MapName.LB6_AFFINITY],
  // Maglev tables and members are keyed by service and backend IDs, one number space for both families: one map serves both.
  lbMaglev: [MapName.LB_MAGLEV],
  lbMembers: [MapName.LB_MEMBERS],
  // As Cilium's --bpf-nat-global-max: both families' SNAT tables.
  snat: [MapName.SNAT, MapName.SNAT6],
};

const TRACE_LEVEL_OF: Record<AgentConfig['traceLevel'], number> = { off: TraceLevel.OFF, 'new-flows': TraceLevel.NEW_FLOWS, all: TraceLevel.ALL };

export function bpfMapSizes(config: Pick<AgentConfig, 'bpfMapSizes'>): MapSizes {
  const out: MapSizes = {};
  for (const [key, n] of Object.entries(config.bpfMapSizes ?? {})) {
    if (n === undefined) continue;
    for (const map of MAPS_OF_SIZE_KEY[key as BpfMapSizeKey]) out[map] = n;
  }
  return out;
}

export interface AgentDatapath {
  datapath: Datapath;
  /** Lets go of the datapath's handles at agent stop (programs and maps stay in force). */
  close(): Promise<void>;
  /** Where the eBPF datapath's pins live and whether that bpffs is the node's (absent with the routing datapath). */
  bpffs?: BpffsOrigin;
  /** SNAT source ports, `min-max` (absent with the routing datapath). */
  natPortRanges?: string[];
}

/** What the agent settled on before the datapath opens. */
export interface AgentDatapathNode {
  /** The pods' MTU (tendril_host's too in tunnel mode). */
  podMtu: number;
  /** The node's IP, the hostIP of the ipcache entries it publishes. */
  nodeIp: string;
  /** Its IPv6 InternalIP next to an IPv4 node IP: an IPv6 NodePort flow's source to a backend through the overlay. */
  nodeIp6?: string;
}

export async function openAgentDatapath(config: AgentConfig, ipcache: IPCache, log: Logger, node: AgentDatapathNode): Promise<AgentDatapath> {
  if (config.datapath === 'routing') {
    // Native routing only (config validation refuses tunnel mode here): the datapath routes other nodes' pod CIDRs via their IPs.
    const linux = new LinuxDatapath({ nodeRouting: { mode: 'native', log: log.child({ subsys: 'datapath' }) } });
    return { datapath: linux, close: () => linux.close() };
  }
  const snatPorts = nodeNatPortRanges(config.bpfNatPortRange);
  log.info({ natPorts: snatPorts.map((r) => `${r.min}-${r.max}`), ctEndpointMax: config.bpfCtEndpointMax }, 'SNAT source ports (less the node\'s ephemeral range and the NodePort range)');
  const bpf = await BpfDatapath.open({
    bpffsRoot: config.bpffsRoot,
    log: log.child({ subsys: 'datapath' }),
    mapSizes: bpfMapSizes(config),
    traceLevel: TRACE_LEVEL_OF[config.traceLevel],
    lxcAttach: config.bpfLxcAttach,
    maglevTableSize: config.lbMaglevTableSize,
    externalClusterIp: config.bpfLbExternalClusterip,
    policyAudit: config.policyAuditMode,
    natPortRanges: snatPorts,
    ctEndpointMax: config.bpfCtEndpointMax,
    masquerade: config.masquerade,
    routing: { mode: config.routingMode, tunnelPort: config.tunnelPort, podMtu: node.podMtu, nodeIp: node.nodeIp, ...(node.nodeIp6 === undefined ? {} : { nodeIp6: node.nodeIp6 }) },
    ...(config.devices ? { devices: config.devices } : {}),
    // Only host-scope CIDRs are this node's alone: a cluster-wide CIDR routed to tendril_host would drop other nodes' pods.
    ...(config.ipam === 'host-scope' || config.ipam === 'kubernetes' ? { fallbackRouteCidrs: config.podCidrs } : {}),
  });
  bpf.attachIpcache(ipcache);
  const bpffs = await bpffsOrigin(config.bpffsRoot);
  warnIfPrivateBpffs(bpffs, log);
  return { datapath: bpf, close: () => bpf.close(), bpffs, natPortRanges: snatPorts.map((r) => `${r.min}-${r.max}`) };
}

/**
 * Pins on a bpffs private to the agent's mount namespace die with it: after a
 * stop the devices lose their programs (NodePort refuses) and a restart has
 * fresh maps (no conntrack, no endpoints' state). Said loudly, since nothing
 * fails at start.
 */
export function warnIfPrivateBpffs(origin: BpffsOrigin, log: Logger): void {
  if (origin.sharing === 'private') {
    log.warn(
      { bpffsRoot: origin.root, bpffsDevice: origin.device, ownMountNamespace: origin.ownMountNamespace },
      `PRIVATE BPFFS: ${origin.root} is a bpf filesystem of the agent's own mount namespace, not the node's: the programs on the devices and every map (conntrack, services, endpoints) are lost when the agent stops, and a restart starts from nothing. Fix: ${PRIVATE_BPFFS_FIX}`,
    );
  } else if (origin.sharing === 'unknown') {
    log.warn({ bpffsRoot: origin.root, detail: origin.detail }, 'cannot tell whether the bpf filesystem is the node\'s (its pins outlive the agent only if it is)');
  }
}
