import { addOutsideHost, addPod, type DatapathNode, type OutsideHost, type Pod, type PodSpec, startDatapathNode } from './datapathNode.js';
import type { NetnsPool } from './netns.js';
import { runOk } from './run.js';
import { ServiceAgentProcess } from './serviceProcess.js';

/** The node's address toward the outside host (on `tdlout0`), and the outside host's. */
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
  node: DatapathNode;
  pods: Map<string, Pod>;
  /** Service agents by pod name, plus `node`, `outside`, `remote` when present. */
  agents: Map<string, ServiceAgentProcess>;
  outside?: OutsideHost;
  remote?: { netns: string; netnsPath: string };
  agent(name: string): ServiceAgentProcess;
  pod(name: string): Pod;
  cleanup(): Promise<void>;
}

export interface ServiceSceneOptions {
  nodeName: string;
  /** A /24. */
  podCidr: string;
  /** Pods of one Kubernetes namespace; the name is also the backend's answer. */
  pods: Array<{ name: string; labels?: Record<string, string> }>;
  namespace: string;
  tcpPorts: number[];
  udpPorts: number[];
  outside?: boolean;
  remote?: boolean;
  extraAgentArgs?: string[];
}

/** A host off the node: veth `tdlrem0` on the node, its default route through the node. */
async function addRemoteHost(pool: NetnsPool, node: string): Promise<{ netns: string; netnsPath: string }> {
  const ns = await pool.add('rem');
  await runOk(['ip', '-n', node, 'link', 'add', 'tdlrem0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.path]);
  await runOk(['ip', '-n', node, 'addr', 'add', `${REMOTE_NODE_IP}/24`, 'dev', 'tdlrem0']);
  await runOk(['ip', '-n', node, 'link', 'set', 'tdlrem0', 'up']);
  await runOk(['ip', '-n', ns.name, 'addr', 'add', `${REMOTE_HOST_IP}/24`, 'dev', 'eth0']);
  await runOk(['ip', '-n', ns.name, 'link', 'set', 'eth0', 'up']);
  await runOk(['ip', '-n', ns.name, 'route', 'add', 'default', 'via', REMOTE_NODE_IP]);
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
  try {
    let outside: OutsideHost | undefined;
    let remote: { netns: string; netnsPath: string } | undefined;
    node = await startDatapathNode(pool, {
      nodeName: opts.nodeName,
      podCidr: opts.podCidr,
      ...(opts.extraAgentArgs ? { extraArgs: opts.extraAgentArgs } : {}),
      // Before the agent starts: it takes the node's devices (and their addresses) from what is there.
      beforeStart: async (n) => {
        if (opts.outside) outside = await addOutsideHost(pool, n, { gateway: OUTSIDE_NODE_IP, addresses: [OUTSIDE_CLIENT_IP], podCidr: opts.podCidr });
        if (opts.remote) remote = await addRemoteHost(pool, n);
      },
    });
    const ports = { tcpPorts: opts.tcpPorts, udpPorts: opts.udpPorts };
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
    return {
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
      pod: (name) => {
        const p = pods.get(name);
        if (!p) throw new Error(`no pod ${name}`);
        return p;
      },
      cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
