import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addOutsideHost, addPod, type DatapathNode, type OutsideHost, type Pod, type PodSpec, startDatapathNode } from './datapathNode.js';
import { FakeKubeApi } from './fakeKubeApi.js';
import { addressIn, cidrIn, cidrLabelOf, type Family, ipIn, type IpFamily, podCidrsOf, versionsOf } from './family.js';
import { namespaceObject, nodeObject, podObject } from './k8sObjects.js';
import { relayIntoNamespace } from './k8sScene.js';
import type { NetnsPool } from './netns.js';
import type { Peer } from './policyTruthTable.js';
import { NetnsProber } from './reachability.js';

/**
 * The world of a datapath test: one node with the eBPF datapath, pods, the
 * node itself and an outside host as probe peers, each namespace with a
 * probe agent listening on the test's ports. Peers are named
 * `<namespace>/<pod name>`, `host`, and `outside:<IPv4 template address>`
 * on every family: the same name stands for the peer's address of the IP
 * version probed (family.ts).
 */
export interface Scene {
  family: Family;
  /** The IP versions probed: [4], [6] or [4, 6]. */
  versions: IpFamily[];
  node: DatapathNode;
  pods: Map<string, Pod>;
  /** The peers at their address of the first IP version (IPv4 unless the family is 6). */
  peers: Map<string, Peer>;
  /** The peers at their address of IP version `v`. */
  peersIn(v: IpFamily): Map<string, Peer>;
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
  /** The IPv4 template pod CIDR (a /24); the family gives the node its pod CIDRs from it. */
  podCidr: string;
  /** Default 4: IPv4 only, as every scene was before families. */
  family?: Family;
  pods: PodSpec[];
  tcpPorts: number[];
  udpPorts: number[];
  /**
   * IPv4 template addresses of the outside host (each in a /24 whose .1 is
   * the node's side), and the labels `policy trace` should get for each;
   * none = no outside host. On IPv6 the address and its `cidr:` labels are
   * mirrored (family.ts); `labels6` replaces the mirrored labels where the
   * families differ (an address no IPv6 CIDR identity holds is the world).
   */
  outside: Array<{ address: string; labels: string[]; labels6?: string[] }>;
  extraAgentArgs?: string[];
}

/** A label in IP version `v`: `cidr:` prefixes mirrored (in the label's own spelling, `cidr:fd74-10-199--0/120`), the rest as they are. */
function labelIn(v: IpFamily, label: string): string {
  return label.startsWith('cidr:') ? cidrLabelOf(cidrIn(v, label.slice('cidr:'.length))) : label;
}

/** The labels `policy trace` gets for an outside address in IP version `v`. */
function outsideLabels(v: IpFamily, o: SceneOptions['outside'][number]): string[] {
  return v === 6 && o.labels6 ? o.labels6 : o.labels.map((l) => labelIn(v, l));
}

/** The node's side of each outside /24 (its .1), in every IP version. */
function outsideGateways(opts: SceneOptions, versions: readonly IpFamily[]): string[] {
  const nets = [...new Set(opts.outside.map((o) => o.address.replace(/\.\d+$/, '.1')))];
  return versions.flatMap((v) => nets.map((g) => ipIn(v, g)));
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
  const fake = await FakeKubeApi.start({ crds: 'tendril' });
  cleanups.push(() => fake.stop());
  const namespaces = new Map<string, Record<string, string>>();
  for (const p of opts.pods) namespaces.set(p.namespace, { ...namespaces.get(p.namespace), ...p.namespaceLabels });
  // kube-system as in every cluster: the agent's node Lease (crd mode) lives there.
  if (!namespaces.has('kube-system')) fake.create('namespaces', namespaceObject('kube-system'));
  for (const [name, labels] of namespaces) fake.create('namespaces', namespaceObject(name, labels));
  fake.create('nodes', nodeObject(opts.nodeName, podCidrsOf(opts.family ?? 4, opts.podCidr), [{ type: 'Hostname', address: opts.nodeName }]));
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
  const family = opts.family ?? 4;
  const versions = versionsOf(family);
  const podCidrs = podCidrsOf(family, opts.podCidr);
  try {
    let outside: OutsideHost | undefined;
    const kube = opts.pods.some((p) => p.namespaceLabels) ? await kubernetesForNamespaceLabels(opts, kubeCleanups) : undefined;
    const extraArgs = [...(kube?.args ?? []), ...(opts.extraAgentArgs ?? [])];
    node = await startDatapathNode(pool, {
      nodeName: opts.nodeName,
      podCidr: podCidrs[0]!,
      podCidrs,
      ...(extraArgs.length > 0 ? { extraArgs } : {}),
      beforeStart: async (n) => {
        await kube?.relay(n);
        if (opts.outside.length === 0) return;
        const addresses = versions.flatMap((v) => opts.outside.map((o) => ipIn(v, o.address)));
        outside = await addOutsideHost(pool, n, { gateway: outsideGateways(opts, versions), addresses, podCidr: podCidrs });
      },
    });
    const config = { tcpPorts: opts.tcpPorts, udpPorts: opts.udpPorts, ...(family === 4 ? {} : { versions }) };
    const startProber = async (name: string, path: string, udpBind?: string[]) => {
      const p = await NetnsProber.start(name, path, { ...config, ...(udpBind ? { udpBind } : {}) });
      probers.push(p);
      return p;
    };
    const pods = new Map<string, Pod>();
    const peersByVersion = new Map<IpFamily, Map<string, Peer>>(versions.map((v) => [v, new Map()]));
    const setPeer = (v: IpFamily, peer: Omit<Peer, 'version'>) => peersByVersion.get(v)!.set(peer.name, { ...peer, version: v });
    const n = node;
    const add = async (spec: PodSpec) => {
      kube?.createPod(spec);
      const pod = await addPod(pool, n, spec);
      const name = peerName(spec);
      pods.set(name, pod);
      const prober = await startProber(name, pod.netnsPath);
      for (const v of versions) setPeer(v, { name, labels: pod.endpoint.labels, address: addressIn(name, pod.addresses, v), prober, bindSource: false });
      return pod;
    };
    await Promise.all(opts.pods.map(add));
    // The pods' gateway of each version is the node's address they reach it at (the CNI result says which).
    const firstPod = [...pods.values()][0];
    const hostAddresses = versions.map((v) => firstPod?.gateways[v] ?? addressIn('the node', n.routerIps, v));
    const hostProber = await startProber('host', n.nodePath, hostAddresses);
    versions.forEach((v, i) => setPeer(v, { name: 'host', labels: ['reserved:host'], address: hostAddresses[i]!, prober: hostProber, bindSource: true }));
    const outsideProber = outside ? await startProber('outside', outside.netnsPath, outside.addresses) : undefined;
    for (const o of opts.outside) {
      for (const v of versions) {
        if (outsideProber) setPeer(v, { name: `outside:${o.address}`, labels: outsideLabels(v, o), address: ipIn(v, o.address), prober: outsideProber, bindSource: true });
      }
    }
    const peersIn = (v: IpFamily) => {
      const m = peersByVersion.get(v);
      if (!m) throw new Error(`the ${family} scene has no IPv${v} peers`);
      return m;
    };
    return {
      family,
      versions,
      node: n,
      pods,
      peers: peersIn(versions[0]!),
      peersIn,
      ...(outside ? { outside } : {}),
      addPod: add,
      refreshLabels: async (name) => {
        const pod = pods.get(name)!;
        const labels = (await n.agent.client.getEndpoint(pod.endpoint.id)).labels;
        for (const m of peersByVersion.values()) m.get(name)!.labels = labels;
      },
      cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
