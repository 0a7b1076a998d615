import { detectUnderlay, loopbackUp, type Underlay } from '../datapath/linux/underlay.js';
import { tryParseInterfaceAddress, tryParseIp } from '../netip/index.js';
import { NodeConfigError, resolvePodMtu } from '../node/index.js';
import type { AgentDeps } from './agent.js';
import type { AgentConfig } from './config.js';

/** What the agent settled on for its node before anything is touched: its IP and the pods' MTU. */
export interface NodeBasics {
  /** The node IP given or found on the underlay; undefined: the router address stands in once IPAM has one. */
  ip: string | undefined;
  /** With an IPv4 node IP, the underlay's IPv6 address (the node's second InternalIP), if it has one. */
  ip6: string | undefined;
  podMtu: number;
  /** What the MTU and the IP were taken from (logged once the agent is ready). */
  underlay: Underlay | undefined;
}

/**
 * The underlay, the node IP and the pod MTU, before anything is touched: an
 * MTU the underlay cannot carry is a start-up error with one clear message,
 * never silent fragmentation later.
 */
export async function nodeBasics(config: AgentConfig, deps: AgentDeps): Promise<NodeBasics> {
  if (deps.underlay === undefined && !deps.datapath && !(await loopbackUp())) {
    throw new NodeConfigError('the loopback interface lo is down in the network namespace the agent runs in (a namespace just created has it down, and with it no routing table): bring it up with `ip link set lo up` there and start the agent again');
  }
  const underlay = deps.underlay ?? (deps.datapath ? undefined : await detectUnderlay({ ...(config.nodeIp !== undefined ? { nodeIp: config.nodeIp } : {}), ...(config.devices ? { devices: config.devices } : {}) }));
  const nodeIpFamily = tryParseIp(config.nodeIp ?? underlay?.ip ?? '')?.family;
  let podMtu: number;
  try {
    // The outer header's family is the node IP's (the tunnel endpoint); pods with an IPv6 pool need IPv6's minimum MTU.
    const ipv6Pods = [...config.podCidrs, ...config.poolCidrs, ...config.clusterPoolCidrs].some((c) => tryParseInterfaceAddress(c, { leadingZeros: true })?.address.family === 6);
    podMtu = resolvePodMtu({
      mode: config.routingMode,
      ...(underlay ? { underlayMtu: underlay.mtu } : {}),
      ...(config.mtu !== undefined ? { configured: config.mtu } : {}),
      ...(nodeIpFamily !== undefined ? { underlayFamily: nodeIpFamily } : {}),
      ipv6Pods,
    });
  } catch (err) {
    if (!(err instanceof NodeConfigError)) throw err;
    const where = underlay ? ` (underlay ${underlay.device}, MTU ${underlay.mtu})` : '';
    throw new NodeConfigError(`${err.message}${where}; lower --mtu or leave it out to use the largest that fits`, { cause: err });
  }
  const ip = config.nodeIp ?? underlay?.ip;
  // The underlay's IPv6 address goes with its own IPv4 address only, not with a node IP given for another device.
  const ip6 = underlay?.ip6 !== undefined && ip === underlay.ip ? underlay.ip6 : undefined;
  return { ip, ip6, podMtu, underlay };
}
