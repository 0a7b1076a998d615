import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addOutsideHost, addPod, type DatapathNode, type OutsideHost, type Pod, type PodSpec, startDatapathNode } from './datapathNode.js';
import { FakeKubeApi } from './fakeKubeApi.js';
import { namespaceObject, nodeObject, podObject } from './k8sObjects.js';
import { relayIntoNamespace } from './k8sScene.js';
import type { NetnsPool } from './netns.js';
import type { Peer } from './policyTruthTable.js';
import { NetnsProber } from './reachability.js';

export const OUTSIDE_GATEWAY = '10.199.0.1';

/**
 * The world of a datapath test: one node with the eBPF datapath, pods, the
 * node itself and an outside host as probe peers, each namespace with a
 * probe agent listening on the test's ports. Peers are named
 * `<namespace>/<pod name>`, `host`, and `outside:<address>`.
 */
export interface Scene {
  node: DatapathNode;
  pods: Map<string, Pod>;
  peers: Map<string, Peer>;
  /** Absent when the scene has no outside addresses. */
  outside?: OutsideHost;
  /** Adds a pod (and its probe agent) after the start. */
  addPod(spec: PodSpec): Promise<Pod>;
  /** A pod peer's labels changed: what `policy trace` gets for it. */
  refreshLabels(name: string): Promise<void>;
  cleanup(): Promise<void>;
}

export interface SceneOptions {
  nodeName: string;
  podCidr: string;
  pods: PodSpec[];
  tcpPorts: number[];
  udpPorts: number[];
  /** Addresses of the outside host (in 10.199.0.0/24), and the labels `policy trace` should get for each; none = no outside host. */
  outside: Array<{ address: string; labels: string[] }>;
  extraAgentArgs?: string[];
}

export const peerName = (spec: PodSpec) => `${spec.namespace}/${spec.name}`;

/**
 * Namespace labels come only from the API server (a pod may not name them
 * in CNI_ARGS): when pods carry them, the scene serves their namespaces and
 * Pod objects from the fake API server and points the agent at it, as a
 * kubelet's node would be. Returns the agent's extra flags, the hook that
 * creates a pod's object before its ADD, and the cleanup.
 */
async function kubernetesForNamespaceLabels(opts: SceneOptions, cleanups: Array<() => Promise<void>>) {
  const fake = await FakeKubeApi.start();
  cleanups.push(() => fake.stop());
  const namespaces = new Map<string, Record<string, string>>();
  for (const p of opts.pods) namespaces.set(p.namespace, { ...namespaces.get(p.namespace), ...p.namespaceLabels });
  for (const [name, labels] of namespaces) fake.create('namespaces', namespaceObject(name, labels));
  fake.create('nodes', nodeObject(opts.nodeName, [opts.podCidr], [{ type: 'Hostname', address: opts.nodeName }]));
  return {
    args: ['--k8s-api-server', fake.url],
    relay: async (nodeNetns: string) => {
      const dir = await mkdtemp(join(tmpdir(), 'tdl-kuberelay-'));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      cleanups.push(await relayIntoNamespace(fake, `/var/run/netns/${nodeNetns}`, dir));
    },
    createPod: (spec: PodSpec) => {
      if (!namespaces.has(spec.namespace)) {
        namespaces.set(spec.namespace, spec.namespaceLabels ?? {});
        fake.create('namespaces', namespaceObject(spec.namespace, spec.namespaceLabels ?? {}));
      }
      fake.create('pods', podObject({ namespace: spec.namespace, name: spec.name, nodeName: opts.nodeName, labels: spec.labels }));
    },
  };
}

export async function startScene(pool: NetnsPool, opts: SceneOptions): Promise<Scene> {
  const probers: NetnsProber[] = [];
  const kubeCleanups: Array<() => Promise<void>> = [];
  let node: DatapathNode | undefined;
  const cleanup = async () => {
    for (const p of probers.splice(0)) await p.stop();
    await node?.cleanup();
    for (const c of kubeCleanups.splice(0).reverse()) await c();
    await pool.cleanup();
  };
  try {
    let outside: OutsideHost | undefined;
    const kube = opts.pods.some((p) => p.namespaceLabels) ? await kubernetesForNamespaceLabels(opts, kubeCleanups) : undefined;
    const extraArgs = [...(kube?.args ?? []), ...(opts.extraAgentArgs ?? [])];
    node = await startDatapathNode(pool, {
      nodeName: opts.nodeName,
      podCidr: opts.podCidr,
      ...(extraArgs.length > 0 ? { extraArgs } : {}),
      beforeStart: async (n) => {
        await kube?.relay(n);
        if (opts.outside.length === 0) return;
        outside = await addOutsideHost(pool, n, { gateway: OUTSIDE_GATEWAY, addresses: opts.outside.map((o) => o.address), podCidr: opts.podCidr });
      },
    });
    const config = { tcpPorts: opts.tcpPorts, udpPorts: opts.udpPorts };
    const startProber = async (name: string, path: string, udpBind?: string[]) => {
      const p = await NetnsProber.start(name, path, { ...config, ...(udpBind ? { udpBind } : {}) });
      probers.push(p);
      return p;
    };
    const pods = new Map<string, Pod>();
    const peers = new Map<string, Peer>();
    const n = node;
    const add = async (spec: PodSpec) => {
      kube?.createPod(spec);
      const pod = await addPod(pool, n, spec);
      const name = peerName(spec);
      pods.set(name, pod);
      peers.set(name, { name, labels: pod.endpoint.labels, address: pod.ip, prober: await startProber(name, pod.netnsPath), bindSource: false });
      return pod;
    };
    await Promise.all(opts.pods.map(add));
    peers.set('host', { name: 'host', labels: ['reserved:host'], address: n.routerIp, prober: await startProber('host', n.nodePath, [n.routerIp]), bindSource: true });
    const outsideProber = outside ? await startProber('outside', outside.netnsPath, opts.outside.map((o) => o.address)) : undefined;
    for (const o of opts.outside) if (outsideProber) peers.set(`outside:${o.address}`, { name: `outside:${o.address}`, labels: o.labels, address: o.address, prober: outsideProber, bindSource: true });
    return {
      node: n,
      pods,
      peers,
      ...(outside ? { outside } : {}),
      addPod: add,
      refreshLabels: async (name) => {
        const peer = peers.get(name)!;
        const pod = pods.get(name)!;
        peer.labels = (await n.agent.client.getEndpoint(pod.endpoint.id)).labels;
      },
      cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
