/**
 * A many-node cluster in real namespaces for end-to-end tests: the
 * ClusterInABox (node namespaces on a hub bridge, etcd in the hub), an agent
 * with the eBPF datapath in every node namespace on that etcd — or, with
 * store 'kubernetes', on the fake API server and no etcd (crd mode: every
 * agent follows it through a relay in its node namespace, tendril-operator
 * hands out the cluster-pool CIDRs, pods have Pod objects) — pods added
 * through the CNI runtime of their node, each pod running a service agent
 * (a TCP/UDP backend that reports the client address it saw, and a client),
 * a service agent in every node namespace (the node as a client), and waits
 * for the cluster to agree on its nodes and pods.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { CniRuntime, confListFromBytes } from '../../src/libcni/index.js';
import type { RoutingMode } from '../../src/datapath/types.js';
import { prefixContainsIp, tryParseIp, tryParsePrefix } from '../../src/netip/index.js';
import type { NodeStatus } from '../../src/node/types.js';
import { AgentProcess, tendrilPluginDir } from './agentHarness.js';
import { ClusterInABox, type UnderlayFamily } from './clusterInABox.js';
import { FakeKubeApi } from './fakeKubeApi.js';
import { relayIntoNamespace } from './k8sScene.js';
import { namespaceObject, nodeObject, podObject } from './k8sObjects.js';
import { killOperator, type OperatorProcess, spawnOperator } from './operatorProcess.js';
import { addPod, type DatapathNode, delPod, type Pod, type PodSpec } from './datapathNode.js';
import { type Family, hostCidr, type IpFamily, versionsOf } from './family.js';
import { run, runOk } from './run.js';
import { ServiceAgentProcess } from './serviceProcess.js';
import { REFERENCE_PLUGIN_DIR, TENDRIL_BIN } from './tendrilBin.js';

export type { RoutingMode };
/** kubernetes: the Node objects' spec.podCIDRs (crd mode only). */
export type ClusterIpam = 'block' | 'cluster-pool' | 'kubernetes';

/** The pods' address space (block pool or cluster-pool CIDR). */
export const CLUSTER_POD_POOL = '10.249.0.0/16';
/** The pods' IPv6 address space (a second block pool: IPv6 and dual-stack pods). */
export const CLUSTER_POD_POOL6 = 'fd00:249::/48';
/** The rtm_protocol of the routes the agent installs toward other nodes' pod CIDRs. */
export const NODE_ROUTE_PROTOCOL = 212;
/** The TCP and UDP port every pod's service agent answers on. */
export const POD_TCP_PORT = 8080;
export const POD_UDP_PORT = 5353;
/** The VXLAN port and overhead of tunnel mode. */
export { TUNNEL_DEFAULT_PORT as VXLAN_PORT, TUNNEL_OVERHEAD } from '../../src/datapath/bpf/constants.js';

/** One node of the scene; a DatapathNode, so the single-node helpers (policy import, bpf lists) work on it. */
export interface SceneNode extends DatapathNode {
  index: number;
  name: string;
  /** The node's address on the cluster network (eth0), its node IP: IPv6 on an IPv6 underlay. */
  ip: string;
  /** Its IPv6 address on a dual-stack cluster network (its second InternalIP). */
  ip6?: string;
}

export interface ClusterPod extends Pod {
  node: SceneNode;
  /** Backend (answers on POD_TCP_PORT/POD_UDP_PORT with its name and the client address it saw) and client. */
  agent: ServiceAgentProcess;
}

export interface ClusterSceneOptions {
  /** Short tag for namespace names. */
  tag: string;
  nodeCount?: number;
  routingMode: RoutingMode;
  ipam: ClusterIpam;
  /** The kvstore lease TTL in seconds: a dead node vanishes from the others this long after it. */
  leaseTtl?: number;
  /** Extra agent arguments per node (index). */
  nodeArgs?: (index: number) => string[];
  /** Devices of a node's agent (default: eth0). */
  devices?: (index: number) => string[];
  /**
   * The cluster network's family: 6 gives every node only an IPv6 address,
   * its node IP, and etcd an IPv6 one; 'dual' an IPv6 address beside the
   * IPv4 node IP. Default: 4, or 'dual' for IPv6 and dual-stack pods
   * (native routing reaches their IPv6 pod CIDRs via IPv6 InternalIPs).
   */
  underlay?: UnderlayFamily;
  /** The pods' addresses: IPv4 (default), IPv6, or one of each (block IPAM only). */
  family?: Family;
  /** Runs after the nodes' namespaces exist, before any agent starts (links the agent should find). */
  beforeAgents?: (cluster: ClusterInABox) => Promise<void>;
  /**
   * Where the cluster's state lives: etcd (the kvstore mode, default) or the
   * Kubernetes API (crd mode, the fake API server): then IPAM is cluster-pool
   * from tendril-operator whatever `ipam` says (a pool per family of the pods).
   */
  store?: 'etcd' | 'kubernetes';
}

/** The namespace of the scene's pods (and of their Pod objects in crd mode). */
export const CLUSTER_POD_NAMESPACE = 'tdl-cluster';

export class ClusterScene {
  readonly nodes: SceneNode[] = [];
  readonly pods: ClusterPod[] = [];
  private readonly nodeAgents = new Map<number, ServiceAgentProcess>();
  private readonly extraAgents: ServiceAgentProcess[] = [];
  private readonly cleanups: Array<() => Promise<void>> = [];
  private readonly cniCleanups: Array<() => Promise<void>> = [];
  /** crd mode: the API server every agent and the operator follow, its kubeconfig, the running operator. */
  fake: FakeKubeApi | undefined;
  private kubeconfig = '';
  operator: OperatorProcess | undefined;
  private operatorRuns = 0;

  private constructor(
    readonly cluster: ClusterInABox,
    readonly opts: ClusterSceneOptions,
  ) {}

  get leaseTtl(): number {
    return this.opts.leaseTtl ?? 3;
  }

  get routingMode(): RoutingMode {
    return this.opts.routingMode;
  }

  get family(): Family {
    return this.opts.family ?? 4;
  }

  static async create(opts: ClusterSceneOptions): Promise<ClusterScene> {
    if (opts.ipam === 'kubernetes' && opts.store !== 'kubernetes') throw new Error('kubernetes IPAM: the scene serves Node objects in crd mode only');
    if (opts.ipam !== 'block' && opts.store !== 'kubernetes' && (opts.family ?? 4) !== 4) throw new Error(`${opts.ipam} IPAM: the scene gives IPv6 pools in block IPAM only`);
    const cluster = await ClusterInABox.create(opts.tag, opts.nodeCount ?? 3, opts.underlay ?? ((opts.family ?? 4) === 4 ? 4 : 'dual'));
    const scene = new ClusterScene(cluster, opts);
    try {
      await scene.start();
    } catch (err) {
      await scene.cleanup();
      throw err;
    }
    return scene;
  }

  get store(): 'etcd' | 'kubernetes' {
    return this.opts.store ?? 'etcd';
  }

  private agentArgs(index: number, ip: string, bpffsRoot: string): string[] {
    const pools = versionsOf(this.family).flatMap((v) => ['--pool-cidr', v === 4 ? CLUSTER_POD_POOL : CLUSTER_POD_POOL6]);
    const ipam = this.opts.ipam === 'block' ? ['--ipam', 'block', ...pools] : ['--ipam', 'cluster-pool', '--cluster-pool-cidr', CLUSTER_POD_POOL, '--cluster-pool-mask-size', '24'];
    const store =
      this.store === 'etcd'
        ? ['--kvstore', 'etcd', '--kvstore-opt', `etcd.endpoints=${this.cluster.etcdEndpoint}`, ...ipam]
        : ['--k8s-kubeconfig', this.kubeconfig, '--identity-allocation-mode', 'crd', '--ipam', this.opts.ipam === 'kubernetes' ? 'kubernetes' : 'cluster-pool', '--k8s-namespace', 'kube-system', '--k8s-sync-timeout', '20'];
    return [
      ...store,
      '--node-ip', ip,
      '--routing-mode', this.opts.routingMode,
      '--lease-ttl', String(this.leaseTtl),
      '--datapath', 'bpf', '--bpffs-root', bpffsRoot,
      '--devices', (this.opts.devices?.(index) ?? ['eth0']).join(','),
      // IPv6 pods leave the cluster as their node, as IPv4 ones do (IPv6 masquerade is off by default).
      ...(this.family === 4 ? [] : ['--ipv6-masquerade']),
      ...(this.opts.nodeArgs?.(index) ?? []),
    ];
  }

  /** crd mode: the fake API server (nodes and namespaces in it) and the operator, before any agent. */
  private async startApiServer(): Promise<void> {
    const fake = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 500 });
    this.fake = fake;
    this.cleanups.push(() => fake.stop());
    this.kubeconfig = await fake.kubeconfig();
    for (const ns of ['kube-system', CLUSTER_POD_NAMESPACE]) fake.create('namespaces', namespaceObject(ns));
    for (const [index, cn] of this.cluster.nodes.entries()) {
      // kubernetes IPAM: the controller manager's allocation, a /24 (and a /112) per node.
      const podCidrs = this.opts.ipam === 'kubernetes' ? versionsOf(this.family).map((v) => (v === 4 ? `10.249.${index}.0/24` : `fd00:249::${index}:0/112`)) : undefined;
      fake.create('nodes', nodeObject(this.nodeName(index), podCidrs, [{ type: 'InternalIP', address: cn.ip }]));
      const relayDir = await mkdtemp(join(tmpdir(), 'tdl-kuberelay-'));
      this.cleanups.push(() => rm(relayDir, { recursive: true, force: true }));
      this.cleanups.push(await relayIntoNamespace(fake, `/var/run/netns/${cn.netns}`, relayDir));
    }
    await this.startOperator();
  }

  /** crd mode: a tendril-operator replica (a new one after killOperator), handing out CLUSTER_POD_POOL in /24s with cluster-pool IPAM. */
  async startOperator(): Promise<OperatorProcess> {
    const op = await spawnOperator(this.kubeconfig, `${this.opts.tag}-op${this.operatorRuns++}`, [
      ...(this.opts.ipam === 'kubernetes' ? [] : versionsOf(this.family)).flatMap((v) => (v === 4 ? ['--cluster-pool-cidr', CLUSTER_POD_POOL, '--cluster-pool-mask-size', '24'] : ['--cluster-pool-cidr', CLUSTER_POD_POOL6, '--cluster-pool-mask-size-v6', '112'])),
      '--leader-election-lease-duration', '3s', '--gc-interval', '2s',
    ]);
    this.operator = op;
    this.cleanups.push(() => killOperator(op));
    return op;
  }

  /** crd mode: SIGKILL of the operator (its Lease runs out; the next one takes over). */
  async killOperator(): Promise<void> {
    if (this.operator) await killOperator(this.operator);
    this.operator = undefined;
  }

  private nodeName(index: number): string {
    return `tdl-${this.opts.tag}-n${index}`;
  }

  private async start(): Promise<void> {
    if (this.opts.beforeAgents) await this.opts.beforeAgents(this.cluster);
    if (this.store === 'kubernetes') await this.startApiServer();
    const bin = await tendrilPluginDir();
    this.cniCleanups.push(bin.cleanup);
    for (const [index, cn] of this.cluster.nodes.entries()) {
      const name = this.nodeName(index);
      const bpffsRoot = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
      // Pins go after the agent is dead (cleanups run in reverse).
      this.cleanups.push(() => rm(bpffsRoot, { recursive: true, force: true }));
      const agent = await AgentProcess.create({ nodeNetns: cn.netns, nodeName: name, args: this.agentArgs(index, cn.ip, bpffsRoot), startTimeoutMs: 90_000 });
      this.cleanups.push(() => agent.cleanup());
      const cache = await mkdtemp(join(tmpdir(), 'tdl-cache-'));
      this.cniCleanups.push(() => rm(cache, { recursive: true, force: true }));
      const runtime = new CniRuntime({ pluginDirs: [bin.dir, REFERENCE_PLUGIN_DIR], cacheDir: cache });
      const conflist = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlcluster', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
      this.nodes.push({
        index,
        name,
        ip: cn.ip,
        ...(cn.ip6 !== undefined ? { ip6: cn.ip6 } : {}),
        node: cn.netns,
        nodePath: `/var/run/netns/${cn.netns}`,
        agent,
        runtime,
        bpffsRoot,
        // Block and cluster-pool IPAM: the node's CIDRs come from IPAM (GET /node), not from a flag.
        podCidr: '',
        podCidrs: [],
        routerIp: '',
        routerIps: {},
        conflist,
        cli: (args, input) => run([TENDRIL_BIN, ...args, '--socket', agent.socket], input === undefined ? {} : { input }),
        cleanup: () => agent.cleanup(),
      });
    }
    await Promise.all(this.nodes.map((n) => n.agent.start()));
  }

  /**
   * An agent configured as the scene's nodes are, for another namespace
   * (say, one on the hub bridge): created, not started; killed and removed
   * with the scene.
   */
  async extraAgent(o: { netns: string; nodeName: string; ip: string; extraArgs?: string[] }): Promise<AgentProcess> {
    const bpffsRoot = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    this.cleanups.push(() => rm(bpffsRoot, { recursive: true, force: true }));
    const agent = await AgentProcess.create({ nodeNetns: o.netns, nodeName: o.nodeName, args: [...this.agentArgs(-1, o.ip, bpffsRoot), ...(o.extraArgs ?? [])], startTimeoutMs: 90_000 });
    this.cleanups.push(() => agent.cleanup());
    return agent;
  }

  node(index: number): SceneNode {
    const n = this.nodes[index];
    if (!n) throw new Error(`no node ${index}`);
    return n;
  }

  /** A pod on a node through the CNI runtime, its service agent listening. */
  async addPod(nodeIndex: number, spec: { name: string; labels: Record<string, string>; namespace?: string }): Promise<ClusterPod> {
    const node = this.node(nodeIndex);
    // crd mode: the kubelet's Pod object comes before the runtime's ADD (the agent takes its labels and uid from it).
    const pod = await this.addBarePod(nodeIndex, spec);
    // The backend listens on every IP version the pod has an address of.
    const versions = ([4, 6] as const).filter((v) => pod.addresses[v] !== undefined);
    const agent = await ServiceAgentProcess.start(pod.netnsPath, { name: spec.name, tcpPorts: [POD_TCP_PORT], udpPorts: [POD_UDP_PORT], versions });
    const cp: ClusterPod = { ...pod, node, agent };
    this.pods.push(cp);
    return cp;
  }

  /** A pod with no service agent in it (many pods at once: its namespace goes with the scene). */
  async addBarePod(nodeIndex: number, spec: { name: string; labels: Record<string, string>; namespace?: string }): Promise<Pod> {
    const node = this.node(nodeIndex);
    const podSpec: PodSpec = { name: spec.name, namespace: spec.namespace ?? CLUSTER_POD_NAMESPACE, labels: spec.labels };
    this.fake?.create('pods', podObject({ namespace: podSpec.namespace, name: podSpec.name, nodeName: node.name, labels: podSpec.labels }));
    return addPod(this.cluster.pool, node, podSpec);
  }

  /** CNI DEL of a pod (its namespace goes with the scene). */
  async delPod(pod: ClusterPod): Promise<void> {
    await pod.agent.stop();
    await delPod(pod.node, pod);
    if (this.fake?.get('pods', pod.spec.namespace, pod.spec.name) !== undefined) this.fake.delete('pods', pod.spec.namespace, pod.spec.name);
    this.pods.splice(this.pods.indexOf(pod), 1);
  }

  /** The endpoint as its node's agent holds it now (identity after a label change too). */
  async endpointOf(pod: ClusterPod): Promise<Endpoint> {
    return (await pod.node.agent.client.getEndpoint(pod.endpoint.id)) as Endpoint;
  }

  /** A service agent in a node's own namespace: the node as a client, and a server on the pods' ports. */
  async nodeAgent(index: number): Promise<ServiceAgentProcess> {
    let a = this.nodeAgents.get(index);
    if (!a) {
      a = await ServiceAgentProcess.start(this.node(index).nodePath, { name: `node${index}`, tcpPorts: [POD_TCP_PORT], udpPorts: [POD_UDP_PORT], versions: [4, 6] });
      this.nodeAgents.set(index, a);
    }
    return a;
  }

  /** A service agent in any namespace the scene made (an outside host), stopped with the scene. */
  async agentIn(netnsPath: string, name: string, ports: { tcp?: number[]; udp?: number[] } = {}): Promise<ServiceAgentProcess> {
    const a = await ServiceAgentProcess.start(netnsPath, { name, tcpPorts: ports.tcp ?? [], udpPorts: ports.udp ?? [], versions: [4, 6] });
    this.extraAgents.push(a);
    return a;
  }

  /** Runs a command in a namespace of the scene. */
  exec(netns: string, argv: readonly string[]): ReturnType<typeof run> {
    return this.cluster.pool.exec(netns, argv);
  }

  /** ICMP echo from a namespace: whether `count` requests got a reply (ping's exit status). */
  async ping(netns: string, ip: string, opts: { count?: number; waitSeconds?: number } = {}): Promise<{ ok: boolean; output: string }> {
    const r = await this.exec(netns, ['ping', '-n', '-q', '-c', String(opts.count ?? 1), '-i', '0.2', '-W', String(opts.waitSeconds ?? 1), ip]);
    return { ok: r.code === 0, output: `${r.stdout}${r.stderr}`.trim() };
  }

  async nodeStatus(index: number): Promise<NodeStatus[]> {
    return this.node(index).agent.client.request<NodeStatus[]>('GET', '/node');
  }

  async ipcache(index: number): Promise<Array<{ prefix: string; identity: number; hostIP?: string; source: string }>> {
    return this.node(index).agent.client.request('GET', '/ip');
  }

  /** The node-route protocol's routes of an IP version (IPv4 unless given) in a node namespace (every table). */
  async nodeRoutes(index: number, version: IpFamily = 4): Promise<Array<{ dst: string; gateway?: string; dev?: string; prefsrc?: string; table?: string }>> {
    const out = await runOk(['ip', '-n', this.node(index).node, '-j', `-${version}`, 'route', 'show', 'table', 'all', 'proto', String(NODE_ROUTE_PROTOCOL)]);
    return out.trim() === '' ? [] : (JSON.parse(out) as Array<{ dst: string; gateway?: string; dev?: string; prefsrc?: string; table?: string }>);
  }

  /** An interface's MTU in a namespace. */
  async mtuOf(netns: string, ifName: string): Promise<number | undefined> {
    const r = await this.exec(netns, ['ip', '-j', 'link', 'show', 'dev', ifName]);
    if (r.code !== 0) return undefined;
    return (JSON.parse(r.stdout) as Array<{ mtu: number }>)[0]?.mtu;
  }

  /**
   * Why `nodes` (indexes; default every node) do not yet agree, or '' when
   * they do: each lists exactly those nodes, has installed the routes of the
   * remote ones, and every pod of those nodes is in its ipcache with its
   * node as host.
   */
  async convergenceGap(nodes: readonly number[] = this.nodes.map((n) => n.index)): Promise<string> {
    const names = nodes.map((i) => this.node(i).name).sort();
    const pods = this.pods.filter((p) => nodes.includes(p.node.index));
    for (const i of nodes) {
      const status = await this.nodeStatus(i);
      const listed = status.map((s) => s.name).sort();
      if (JSON.stringify(listed) !== JSON.stringify(names)) return `node ${i} lists ${JSON.stringify(listed)}, want ${JSON.stringify(names)}`;
      const pending = status.filter((s) => !s.local && s.routesInstalled !== true).map((s) => s.name);
      if (pending.length > 0) return `node ${i} has not installed the routes of ${pending.join(', ')}`;
      // IPv4 pod CIDRs are routed in both modes; IPv6 ones natively (tunnel mode's are not this scene's to require).
      const routed = [...(await this.nodeRoutes(i, 4)), ...(this.routingMode === 'native' ? await this.nodeRoutes(i, 6) : [])].map((r) => r.dst);
      const wanted = (c: string) => this.routingMode === 'native' || !c.includes(':');
      const unrouted = status.filter((s) => !s.local).flatMap((s) => s.podCidrs.filter((c) => wanted(c) && !routed.includes(c)).map((c) => `${s.name} ${c}`));
      if (unrouted.length > 0) return `node ${i} has no proto ${NODE_ROUTE_PROTOCOL} route for ${unrouted.join(', ')} (routes: ${routed.join(' ')})`;
      const ipc = await this.ipcache(i);
      for (const p of pods) {
        for (const ip of Object.values(p.addresses)) {
          const e = ipc.find((x) => x.prefix === hostCidr(ip));
          if (!e) return `node ${i} has no ipcache entry for pod ${p.spec.name} (${ip})`;
          if (p.node.index !== i && e.hostIP !== p.node.ip) return `node ${i}: pod ${p.spec.name} (${ip}) has host ${e.hostIP}, want ${p.node.ip}`;
          if (p.node.index !== i && !status.find((s) => s.name === p.node.name)?.podCidrs.some((c) => cidrHolds(c, ip))) {
            return `node ${i}: node ${p.node.name}'s pod CIDRs do not hold pod ${p.spec.name} (${ip})`;
          }
        }
      }
    }
    return '';
  }

  /** Waits until `nodes` agree (convergenceGap); answers how long it took. */
  async waitConverged(timeoutMs = 15_000, nodes?: readonly number[]): Promise<number> {
    const t0 = performance.now();
    let gap = '';
    for (;;) {
      gap = await this.convergenceGap(nodes);
      if (gap === '') return performance.now() - t0;
      if (performance.now() - t0 > timeoutMs) {
        const logs = this.nodes.map((n) => `${n.name}: ${n.agent.output.split('\n').filter((l) => /route|remote node|prune/i.test(l)).slice(-12).join('\n  ')}`);
        throw new Error(`the cluster did not converge in ${timeoutMs} ms: ${gap}\n${await this.diagnostics()}\nagents' route log lines:\n${logs.join('\n')}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** What every node holds toward the others (its proto-212 routes, the pod CIDRs it knows), for failure messages. */
  async diagnostics(): Promise<string> {
    const lines: string[] = [];
    for (const n of this.nodes) {
      try {
        const routes = (await this.nodeRoutes(n.index)).map((r) => `${r.dst}${r.gateway ? ` via ${r.gateway}` : ''}${r.dev ? ` dev ${r.dev}` : ''}`);
        const status = (await this.nodeStatus(n.index)).map((x) => `${x.name}${x.local ? '*' : ''} ${x.podCidrs.join(',')} installed=${x.routesInstalled ?? '-'}`);
        lines.push(`${n.name} (${n.ip}): routes [${routes.join('; ')}] nodes [${status.join('; ')}]`);
      } catch (err) {
        lines.push(`${n.name}: ${(err as Error).message}`);
      }
    }
    return lines.join('\n');
  }

  /** SIGKILL of a node's agent: no clean shutdown, its pods and pinned programs stay. */
  async killAgent(index: number): Promise<void> {
    await this.node(index).agent.kill();
  }

  /** Starts a killed or stopped agent again on the same node, state dir and pins. */
  async restartAgent(index: number): Promise<void> {
    await this.node(index).agent.start();
  }

  /** What an agent logged (for failure messages). */
  agentLog(index: number, tail = 3000): string {
    return this.node(index).agent.output.slice(-tail);
  }

  async cleanup(): Promise<void> {
    const step = async (what: string, fn: () => Promise<void>) => {
      try {
        await fn();
      } catch (err) {
        process.stderr.write(`cluster scene cleanup (${what}): ${(err as Error).message}\n`);
      }
    };
    for (const p of this.pods.splice(0)) await step(`pod agent ${p.spec.name}`, () => p.agent.stop());
    for (const a of [...this.nodeAgents.values(), ...this.extraAgents.splice(0)]) await step(`agent ${a.name}`, () => a.stop());
    this.nodeAgents.clear();
    for (const c of this.cleanups.splice(0).reverse()) await step('node', c);
    await step('cluster', () => this.cluster.cleanup());
    for (const c of this.cniCleanups.splice(0).reverse()) await step('cni', c);
  }
}

/** Whether a CIDR holds an address (of its family). */
export function cidrHolds(cidr: string, ip: string): boolean {
  const p = tryParsePrefix(cidr, { hostBits: 'mask' });
  const a = tryParseIp(ip);
  return p !== undefined && a !== undefined && prefixContainsIp(p, a);
}

/** The distinct values of a list, sorted, for assertion messages. */
export function distinct<T>(items: readonly T[]): T[] {
  return [...new Set(items)].sort();
}
