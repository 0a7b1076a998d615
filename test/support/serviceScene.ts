import { addOutsideHost, addPod, type DatapathNode, type OutsideHost, type Pod, type PodSpec, startDatapathNode } from './datapathNode.js';
import { addressIn, type Family, type IpFamily, ipIn, podCidrsOf, versionsOf } from './family.js';
import type { NetnsPool } from './netns.js';
import { runOk } from './run.js';
import { ServiceAgentProcess } from './serviceProcess.js';

/** The node's address toward the outside host (on `tdlout0`), and the outside host's: IPv4 templates (family.ts ipIn mirrors them on IPv6). */
export const OUTSIDE_NODE_IP = '10.199.0.1';
export const OUTSIDE_CLIENT_IP = '10.199.0.10';
/** The node's address toward the remote host (on `tdlrem0`), and the remote host's: a server off the node. */
export const REMOTE_NODE_IP = '10.198.0.1';
export const REMOTE_HOST_IP = '10.198.0.10';

/**
 * The world of a service test: one node with the eBPF datapath, pods each
 * running a service agent (backend and client, named after the pod), a
 * service agent in the node's own namespace, and optionally an outside host
 * (a client of NodePorts and externalIPs, and a server for masquerading)
 * and a remote host (a host off the node the node routes to; no route to
 * the pod CIDR, so only what the node translated can reach it and come back).
 */
export interface ServiceScene {
  family: Family;
  /** The IP versions the pods have and the backends listen on: IPv4 first. */
  versions: IpFamily[];
  node: DatapathNode;
  pods: Map<string, Pod>;
  /** Service agents by pod name, plus `node`, `outside`, `remote` when present. */
  agents: Map<string, ServiceAgentProcess>;
  outside?: OutsideHost;
  remote?: { netns: string; netnsPath: string };
  agent(name: string): ServiceAgentProcess;
  pod(name: string): Pod;
  /** A pod's address of IP version `v`. */
  podIp(name: string, v: IpFamily): string;
  cleanup(): Promise<void>;
}

export interface ServiceSceneOptions {
  nodeName: string;
  /** A /24: the IPv4 template of the pod CIDRs (family.ts podCidrsOf). */
  podCidr: string;
  /** What the pods carry and the backends listen on (default IPv4). */
  family?: Family;
  /** Pods of one Kubernetes namespace; the name is also the backend's answer. */
  pods: Array<{ name: string; labels?: Record<string, string> }>;
  namespace: string;
  tcpPorts: number[];
  udpPorts: number[];
  outside?: boolean;
  remote?: boolean;
  extraAgentArgs?: string[];
  /** The agent's default map sizes (AgentProcessOptions.defaultMapSizes). */
  defaultMapSizes?: boolean;
}

/**
 * A host off the node: veth `tdlrem0` on the node, its default route through
 * the node; an address of each IP version (nodad: a tentative IPv6 address
 * would drop the first packets).
 */
async function addRemoteHost(pool: NetnsPool, node: string, versions: readonly IpFamily[]): Promise<{ netns: string; netnsPath: string }> {
  const ns = await pool.add('rem');
  await runOk(['ip', '-n', node, 'link', 'add', 'tdlrem0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.path]);
  const length = (v: IpFamily) => (v === 4 ? 24 : 120);
  const nodad = (v: IpFamily) => (v === 6 ? ['nodad'] : []);
  for (const v of versions) await runOk(['ip', '-n', node, 'addr', 'add', `${ipIn(v, REMOTE_NODE_IP)}/${length(v)}`, 'dev', 'tdlrem0', ...nodad(v)]);
  await runOk(['ip', '-n', node, 'link', 'set', 'tdlrem0', 'up']);
  for (const v of versions) await runOk(['ip', '-n', ns.name, 'addr', 'add', `${ipIn(v, REMOTE_HOST_IP)}/${length(v)}`, 'dev', 'eth0', ...nodad(v)]);
  await runOk(['ip', '-n', ns.name, 'link', 'set', 'eth0', 'up']);
  for (const v of versions) await runOk(['ip', '-n', ns.name, `-${v}`, 'route', 'add', 'default', 'via', ipIn(v, REMOTE_NODE_IP)]);
  return { netns: ns.name, netnsPath: ns.path };
}

export async function startServiceScene(pool: NetnsPool, opts: ServiceSceneOptions): Promise<ServiceScene> {
  const agents = new Map<string, ServiceAgentProcess>();
  let node: DatapathNode | undefined;
  const cleanup = async () => {
    for (const a of [...agents.values()]) await a.stop();
    agents.clear();
    await node?.cleanup();
    await pool.cleanup();
  };
  const family = opts.family ?? 4;
  const versions = versionsOf(family);
  try {
    let outside: OutsideHost | undefined;
    let remote: { netns: string; netnsPath: string } | undefined;
    node = await startDatapathNode(pool, {
      nodeName: opts.nodeName,
      podCidr: opts.podCidr,
      podCidrs: podCidrsOf(family, opts.podCidr),
      // IPv6 pods leave the node as the node, as IPv4 ones do (IPv6 masquerade is off by default).
      extraArgs: [...(opts.extraAgentArgs ?? []), ...(family === 4 ? [] : ['--ipv6-masquerade'])],
      ...(opts.defaultMapSizes === true ? { defaultMapSizes: true } : {}),
      // Before the agent starts: it takes the node's devices (and their addresses) from what is there.
      beforeStart: async (n) => {
        if (opts.outside) {
          outside = await addOutsideHost(pool, n, {
            gateway: versions.map((v) => ipIn(v, OUTSIDE_NODE_IP)),
            addresses: versions.map((v) => ipIn(v, OUTSIDE_CLIENT_IP)),
            podCidr: podCidrsOf(family, opts.podCidr),
          });
        }
        if (opts.remote) remote = await addRemoteHost(pool, n, versions);
      },
    });
    const ports = { tcpPorts: opts.tcpPorts, udpPorts: opts.udpPorts, versions };
    const pods = new Map<string, Pod>();
    const n = node;
    await Promise.all(
      opts.pods.map(async (p) => {
        const spec: PodSpec = { name: p.name, namespace: opts.namespace, labels: p.labels ?? { app: p.name } };
        const pod = await addPod(pool, n, spec);
        pods.set(p.name, pod);
        agents.set(p.name, await ServiceAgentProcess.start(pod.netnsPath, { name: p.name, ...ports }));
      }),
    );
    agents.set('node', await ServiceAgentProcess.start(n.nodePath, { name: 'node', tcpPorts: [], udpPorts: [] }));
    if (outside) agents.set('outside', await ServiceAgentProcess.start(outside.netnsPath, { name: 'outside', ...ports }));
    if (remote) agents.set('remote', await ServiceAgentProcess.start(remote.netnsPath, { name: 'remote', ...ports }));
    const pod = (name: string) => {
      const p = pods.get(name);
      if (!p) throw new Error(`no pod ${name}`);
      return p;
    };
    return {
      family,
      versions,
      node: n,
      pods,
      agents,
      ...(outside ? { outside } : {}),
      ...(remote ? { remote } : {}),
      agent: (name) => {
        const a = agents.get(name);
        if (!a) throw new Error(`no service agent ${name}`);
        return a;
      },
      pod,
      podIp: (name, v) => addressIn(`pod ${name}`, pod(name).addresses, v),
      cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/**
 * The rows of a service suite on one family: every row runs on each IP
 * version the family's pods carry (both on dual-stack, with IPv4 and IPv6
 * services side by side), its title marked with the version on dual-stack
 * only, so an IPv4 run keeps its titles.
 */
export function rowTitle(family: Family, v: IpFamily, title: string): string {
  return family === 'dual' ? `${title} [IPv${v}]` : title;
}

/** A service's ID on IP version `v`: IDs are one number space across families, so IPv6's sit 1000 above. */
export function serviceId(v: IpFamily, id: number): number {
  return v === 6 ? id + 1000 : id;
}
