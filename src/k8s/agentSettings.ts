/**
 * What the agent's configuration and this node's Node object mean for
 * Kubernetes, without the client library: whether and how to reach the API
 * server, whether the configuration needs it, and the configuration once
 * the Node is known. The agent decides these before it loads the watchers.
 */
import { ConfigError } from '../errors/configError.js';
import { formatIp, formatPrefix, tryParseIp, tryParsePrefix } from '../netip/index.js';
import type { NodeAddress } from '../node/index.js';
import { k8sEnabled } from './inCluster.js';
import type { OwnNode } from './types.js';

/** The agent settings the watchers and the Node's facts depend on (the agent's configuration has them). */
export interface K8sAgentConfig {
  nodeName: string;
  ipam: string;
  datapath: string;
  routingMode?: string | undefined;
  nodeIp?: string | undefined;
  podCidrs: string[];
  k8sKubeconfig?: string | undefined;
  k8sApiServer?: string | undefined;
  k8sSyncTimeoutSeconds: number;
}

/** How the agent reaches the Kubernetes API server, from its configuration (src/k8s's K8sConnectionOptions). */
export function k8sConnection(config: Pick<K8sAgentConfig, 'k8sKubeconfig' | 'k8sApiServer'>): { kubeconfig?: string; apiServer?: string } {
  return { ...(config.k8sKubeconfig !== undefined ? { kubeconfig: config.k8sKubeconfig } : {}), ...(config.k8sApiServer !== undefined ? { apiServer: config.k8sApiServer } : {}) };
}

/** --ipam kubernetes reads the Node's pod CIDRs: Kubernetes must be on (a flag, or in a pod with a service account). */
export function requireKubernetesForIpam(config: Pick<K8sAgentConfig, 'ipam' | 'k8sKubeconfig' | 'k8sApiServer'>, env: NodeJS.ProcessEnv = process.env): void {
  if (config.ipam !== 'kubernetes' || k8sEnabled(k8sConnection(config), env)) return;
  throw new ConfigError('--ipam kubernetes needs Kubernetes: give --k8s-kubeconfig or --k8s-api-server, or run the agent in a pod with a service account');
}

/** The Node facts the agent takes at start: pod CIDRs (canonical) and addresses by type. */
export interface NodeFacts {
  name: string;
  podCidrs: string[];
  internalIps: string[];
  externalIps: string[];
}

function addressesOfType(node: OwnNode, type: string): string[] {
  const out: string[] = [];
  for (const a of node.addresses) {
    if (a.type !== type) continue;
    const ip = tryParseIp(a.address);
    if (ip !== undefined) out.push(formatIp(ip));
  }
  return out;
}

export function nodeFacts(node: OwnNode): NodeFacts {
  const podCidrs = node.podCidrs.map((c) => {
    const p = tryParsePrefix(c);
    if (p === undefined) throw new ConfigError(`Node ${node.name}: spec.podCIDRs holds ${JSON.stringify(c)}, which is not a CIDR (addr/len without host bits)`);
    return formatPrefix(p);
  });
  return { name: node.name, podCidrs, internalIps: addressesOfType(node, 'InternalIP'), externalIps: addressesOfType(node, 'ExternalIP') };
}

/**
 * The configuration in effect once the Node is known: with `--ipam
 * kubernetes` its pod CIDRs are the node's (none is a start error, there
 * would be nothing to number pods from); without --node-ip its first
 * InternalIP (IPv4 first) is the node IP, as the kubelet registered it.
 */
export function configWithNode<C extends K8sAgentConfig>(config: C, node: NodeFacts | undefined): C {
  let out = config;
  if (config.ipam === 'kubernetes') {
    if (!node) throw new ConfigError(`--ipam kubernetes: no Node ${config.nodeName} in the Kubernetes API (is --node-name the Node's name?)`);
    if (node.podCidrs.length === 0) {
      throw new ConfigError(`--ipam kubernetes: Node ${node.name} has no spec.podCIDRs (the controller manager allocates them with --allocate-node-cidrs; or give the Node spec.podCIDRs)`);
    }
    out = { ...out, podCidrs: node.podCidrs };
  }
  if (config.nodeIp === undefined && node) {
    const internal = [...node.internalIps].sort((a, b) => (tryParseIp(a)!.family - tryParseIp(b)!.family));
    if (internal[0] !== undefined) out = { ...out, nodeIp: internal[0] };
  }
  return out;
}

/**
 * The Node's addresses for the own registry record, after the node IP's
 * InternalIP: its other InternalIPs (an IPv4 one only when the node IP is
 * IPv4 too, since the first IPv4 InternalIP is the tunnel endpoint) and its
 * ExternalIPs.
 */
export function registryAddresses(node: NodeFacts | undefined, nodeIp: string): NodeAddress[] {
  if (!node) return [];
  const nodeIpV4 = tryParseIp(nodeIp)?.family === 4;
  const internal = node.internalIps.filter((ip) => ip !== nodeIp && (nodeIpV4 || tryParseIp(ip)?.family !== 4));
  return [...internal.map((ip) => ({ type: 'InternalIP' as const, ip })), ...node.externalIps.map((ip) => ({ type: 'ExternalIP' as const, ip }))];
}
