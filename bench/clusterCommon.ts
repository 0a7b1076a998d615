// What the cluster benchmarks (cluster-throughput, cluster-latency,
// cluster-propagation, k8s-propagation) share: a cluster in a box built for a
// bench — node namespaces on one bridge in a hub namespace, optionally an etcd
// in the hub — tendril agents on that etcd in one routing mode (or, store
// 'kubernetes', in crd mode on the fake API server and no etcd: the fake in a
// process of its own in the hub, on the hub's bridge address as etcd is, and
// tendril-operator handing out cluster-pool CIDRs), pods
// made through each agent's CNI API, and the cleanup of all of it (also on a
// failure or a signal).
// A box without etcd and agents is the underlay reference: the same veths and
// bridge with nothing of tendril on them.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '../src/client/agentClient.js';
import { ETCD_BIN } from '../test/support/etcdHarness.js';
import { HUB_BRIDGE_MAC } from '../test/support/clusterInABox.js';
import { namespaceObject, nodeObject, podObject } from '../test/support/k8sObjects.js';
import { killOperator, spawnOperator } from '../test/support/operatorProcess.js';
import { exec, stopBenchAgent } from './benchProcess.js';
import { FakeApiProcess } from './k8sCommon.js';
import { BenchNamespaces, cniAddPod, cniDelPod, netnsPath } from './policyDatapath.js';
import { cleanupOnSignal, once } from './serviceCommon.js';

const AGENT = fileURLToPath(new URL('../../bin/tendril-agent', import.meta.url));

export type BenchRoutingMode = 'tunnel' | 'native';
/** Where the cluster's state lives: etcd (kvstore mode) or the Kubernetes API (crd mode, the fake API server). */
export type BenchStore = 'etcd' | 'kubernetes';
/** The Kubernetes namespace of the bench pods' Pod objects (cniAddPod's K8S_POD_NAMESPACE). */
const POD_NAMESPACE = 'bench';
/** crd mode: the namespace of tendril's Leases. */
const TENDRIL_NAMESPACE = 'kube-system';

/**
 * The underlay of every box: 10.248.0.0/24 on the hub's bridge (each box is
 * its own set of namespaces), or fd00:248::/64 alone on an IPv6 box (no IPv4
 * address on any node: the overlay runs on IPv6, etcd is on IPv6).
 */
const UNDERLAY = {
  4: { hub: '10.248.0.1', node: (i: number) => `10.248.0.${11 + i}`, length: 24 },
  6: { hub: 'fd00:248::1', node: (i: number) => `fd00:248::${11 + i}`, length: 64 },
} as const;
export type BenchUnderlay = 4 | 6;
/** Block IPAM's pool of every box's pods. */
export const CLUSTER_POOL = '10.249.0.0/16';

export interface BoxNode {
  /** The node's network namespace. */
  ns: string;
  /** Its address on the underlay (eth0, on the hub's bridge). */
  ip: string;
}

/**
 * Namespaces of one box: a hub with a bridge (and etcd when asked), `nodes`
 * node namespaces each wired to the bridge by a veth pair. Everything it made is
 * removed by `cleanup` (namespaces take their links and routes with them).
 */
export class BenchBox {
  readonly nodes: BoxNode[] = [];
  readonly hub: string;
  #etcd: ChildProcess | undefined;
  #etcdDir = '';

  private constructor(
    readonly tag: string,
    readonly namespaces: BenchNamespaces,
    readonly underlay: BenchUnderlay,
  ) {
    this.hub = `${tag}h`;
  }

  /** The hub's address on the bridge (etcd's, the fake API server's). */
  get hubIp(): string {
    return UNDERLAY[this.underlay].hub;
  }

  get etcdEndpoint(): string {
    const hub = UNDERLAY[this.underlay].hub;
    return `http://${this.underlay === 6 ? `[${hub}]` : hub}:2379`;
  }

  /**
   * `tag`: the namespaces' prefix (tdl…, short: node names are `<tag>n<i>`).
   * `register` gets the box's cleanup before anything is made, so a signal
   * during the build removes what was made so far.
   */
  static async create(tag: string, nodes: number, withEtcd: boolean, register?: (cleanup: () => Promise<void>) => void, underlay: BenchUnderlay = 4): Promise<BenchBox> {
    const box = new BenchBox(tag, new BenchNamespaces(), underlay);
    register?.(() => box.cleanup());
    try {
      await box.#build(nodes, withEtcd);
    } catch (err) {
      await box.cleanup();
      throw err;
    }
    return box;
  }

  async #build(nodes: number, withEtcd: boolean): Promise<void> {
    const names = [this.hub, ...Array.from({ length: nodes }, (_, i) => `${this.tag}n${i}`)];
    await this.namespaces.add(...names);
    await exec(['ip', '-n', this.hub, 'link', 'add', 'tdlhub0', 'address', HUB_BRIDGE_MAC, 'type', 'bridge']);
    const net = UNDERLAY[this.underlay];
    // IPv6 without DAD: usable at once (etcd binds the hub's address right away).
    const dad = this.underlay === 6 ? ['nodad'] : [];
    await exec(['ip', '-n', this.hub, 'addr', 'add', `${net.hub}/${net.length}`, 'dev', 'tdlhub0', ...dad]);
    await exec(['ip', '-n', this.hub, 'link', 'set', 'tdlhub0', 'up']);
    for (let i = 0; i < nodes; i++) {
      const ns = names[i + 1]!;
      await exec(['ip', '-n', this.hub, 'link', 'add', `tdlport${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netnsPath(ns)]);
      await exec(['ip', '-n', this.hub, 'link', 'set', `tdlport${i}`, 'master', 'tdlhub0', 'up']);
      await exec(['ip', '-n', ns, 'addr', 'add', `${net.node(i)}/${net.length}`, 'dev', 'eth0', ...dad]);
      await exec(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
      this.nodes.push({ ns, ip: net.node(i) });
    }
    if (withEtcd) await this.#startEtcd();
  }

  async #startEtcd(): Promise<void> {
    this.#etcdDir = await mkdtemp(join(tmpdir(), 'tdl-bench-etcd-'));
    const peer = 'http://127.0.0.1:2380';
    const ep = this.etcdEndpoint;
    const argv = [`--net=${netnsPath(this.hub)}`, '--', ETCD_BIN, '--name', 'tdl-hub', '--data-dir', this.#etcdDir, '--listen-client-urls', ep, '--advertise-client-urls', ep];
    argv.push('--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer, '--initial-cluster', `tdl-hub=${peer}`);
    const etcd = spawn('nsenter', argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#etcd = etcd;
    // Ready when it says so (its client URL is on the hub's bridge, out of this process's reach).
    await new Promise<void>((resolve, reject) => {
      let log = '';
      let ready = false;
      const timer = setTimeout(() => reject(new Error(`etcd did not become ready in 20 s:\n${log.slice(-2000)}`)), 20_000);
      const onData = (c: Buffer) => {
        log = (log + c.toString()).slice(-8000);
        if (!ready && log.includes('ready to serve client requests')) {
          ready = true;
          clearTimeout(timer);
          resolve();
        }
      };
      etcd.stdout!.on('data', onData);
      etcd.stderr!.on('data', onData);
      etcd.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`etcd exited ${code}:\n${log.slice(-2000)}`));
      });
    });
  }

  async cleanup(): Promise<void> {
    const etcd = this.#etcd;
    if (etcd && etcd.exitCode === null && etcd.signalCode === null) {
      const exited = new Promise((r) => etcd.once('exit', r));
      etcd.kill('SIGKILL');
      await exited;
    }
    await this.namespaces.cleanup();
    if (this.#etcdDir) await rm(this.#etcdDir, { recursive: true, force: true });
  }
}

export interface ClusterPod {
  name: string;
  ns: string;
  ip: string;
  containerId: string;
}

/** A tendril agent of a box's node, on the box's etcd, block IPAM, in one routing mode. */
export class ClusterAgent {
  #log = '';
  private constructor(
    readonly node: BoxNode,
    readonly name: string,
    readonly process: ChildProcess,
    readonly client: AgentClient,
    readonly socket: string,
    readonly bpffsRoot: string,
  ) {
    process.stderr!.on('data', (c: Buffer) => (this.#log = (this.#log + c.toString()).slice(-6000)));
  }

  /** The node name of the agent of a box's node `index`. */
  static nodeName(box: BenchBox, index: number): string {
    return `${box.tag}-n${index}`;
  }

  /** The tail of the agent's stderr (its warnings and errors), for failure messages. */
  get log(): string {
    return this.#log;
  }

  /** The pinned ipcache map of this agent (what its programs look up). */
  get ipcacheMapPath(): string {
    return join(this.bpffsRoot, 'tendril', 'tendril_ipcache');
  }

  /** crd mode: the fake API server, where a pod's Pod object is made before its ADD (the agent takes labels and uid from it). */
  api: FakeApiProcess | undefined;

  /**
   * `onSpawn` gets the agent as soon as its process exists, so a cleanup
   * during its start-up stops it too. `kubeconfig`: crd mode on that API
   * server (cluster-pool IPAM from tendril-operator) instead of the box's etcd.
   */
  static async start(box: BenchBox, index: number, mode: BenchRoutingMode, stateRoot: string, extraArgs: string[] = [], onSpawn?: (agent: ClusterAgent) => void, kubeconfig?: string): Promise<ClusterAgent> {
    const node = box.nodes[index]!;
    const name = ClusterAgent.nodeName(box, index);
    const stateDir = join(stateRoot, name);
    const socket = join(stateDir, 'tendril.sock');
    // Never the node's /sys/fs/bpf/tendril: each agent's pins live in a directory of their own on bpffs.
    const bpffsRoot = `/sys/fs/bpf/tdl-bench-${randomBytes(4).toString('hex')}`;
    await mkdir(bpffsRoot, { recursive: true });
    const args = [
      '--state-dir', stateDir, '--lib-dir', join(stateDir, 'lib'), '--node-name', name, '--bpffs-root', bpffsRoot,
      ...(kubeconfig === undefined
        ? ['--kvstore', 'etcd', '--kvstore-opt', `etcd.endpoints=${box.etcdEndpoint}`, '--ipam', 'block', '--pool-cidr', CLUSTER_POOL]
        : ['--k8s-kubeconfig', kubeconfig, '--identity-allocation-mode', 'crd', '--ipam', 'cluster-pool', '--k8s-namespace', TENDRIL_NAMESPACE]),
      '--node-ip', node.ip, '--routing-mode', mode,
      '--datapath', 'bpf', '--log-level', 'warn',
      ...extraArgs,
      ...(process.env.TENDRIL_BENCH_AGENT_ARGS ?? '').split(' ').filter((a) => a !== ''),
    ];
    const proc = spawn('nsenter', [`--net=${netnsPath(node.ns)}`, '--', AGENT, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    const client = new AgentClient({ socketPath: socket, timeoutMs: 30_000 });
    const agent = new ClusterAgent(node, name, proc, client, socket, bpffsRoot);
    onSpawn?.(agent);
    // Generous: several agents loading their BPF objects at once on a busy two-core machine take tens of seconds.
    const deadline = Date.now() + 120_000;
    for (;;) {
      try {
        if ((await client.health()).status === 'ok') return agent;
      } catch {
        // not listening yet
      }
      if (proc.exitCode !== null || proc.signalCode !== null || Date.now() > deadline) {
        await agent.stop();
        throw new Error(`agent ${name} (${mode}) did not become ready (exit ${proc.exitCode ?? proc.signalCode ?? 'none'}): ${lastLines(agent.log)}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * ADD of a pod whose namespace exists, through the agent's CNI API (what
   * tendril-cni relays); ready when it returns. crd mode: its Pod object
   * (on this node, `labels` as its labels) is made first unless `podObject`
   * is false (the caller made it: createPodObject).
   */
  async addPod(name: string, ns: string, labels: string, o: { podObject?: boolean } = {}): Promise<ClusterPod> {
    if (this.api !== undefined && o.podObject !== false) await this.createPodObject(name, labels);
    const { containerId, ip } = await cniAddPod(this.client, { name, ns, labels, network: 'tdlbenchcluster' });
    return { name, ns, ip, containerId };
  }

  /** crd mode: the Pod object of a pod on this node, as the scheduler leaves it before the kubelet's ADD. */
  async createPodObject(name: string, labels: string): Promise<void> {
    if (this.api === undefined) throw new Error('no API server: the cluster is on etcd');
    const record = Object.fromEntries(labels.split(',').map((kv) => kv.split('=') as [string, string]));
    await this.api.create('pods', [podObject({ namespace: POD_NAMESPACE, name, nodeName: this.name, labels: record })]);
  }

  /** DEL of a pod through the agent's CNI API (crd mode: its Pod object is the caller's to delete). */
  async delPod(pod: ClusterPod): Promise<void> {
    await cniDelPod(this.client, { name: pod.name, ns: pod.ns, network: 'tdlbenchcluster' });
  }

  /** SIGTERM, SIGKILL after 10 s; then its bpffs root goes (pins of links whose devices went with the namespaces). */
  async stop(): Promise<void> {
    await stopBenchAgent(this.process);
    await rm(this.bpffsRoot, { recursive: true, force: true });
  }
}

/**
 * crd mode's API side, in the hub as etcd is: the fake API server in a
 * process of its own on the hub's bridge address (every node's agent reaches
 * it over the bridge: the same path as to etcd), a Node object per node, and
 * one tendril-operator replica handing out CLUSTER_POOL in /24s.
 */
class BenchApiServer {
  private constructor(
    readonly fake: FakeApiProcess,
    readonly kubeconfig: string,
  ) {}

  /** `register` gets the cleanup before anything is made. */
  static async start(box: BenchBox, nodeNames: string[], register: (cleanup: () => Promise<void>) => void): Promise<BenchApiServer> {
    if (box.underlay !== 4) throw new Error('the bench API server is on an IPv4 underlay only');
    const cleanups: Array<() => Promise<void>> = [];
    register(async () => {
      for (const c of cleanups.splice(0).reverse()) await c().catch((err: Error) => console.error(`bench cleanup (API server): ${err.message}`));
    });
    const fake = await FakeApiProcess.start(box.hub, box.hubIp);
    cleanups.push(() => fake.stop());
    const api = new BenchApiServer(fake, await fake.kubeconfig());
    await fake.create('namespaces', [namespaceObject(TENDRIL_NAMESPACE), namespaceObject(POD_NAMESPACE)]);
    await fake.create('nodes', box.nodes.map((n, i) => nodeObject(nodeNames[i]!, undefined, [{ type: 'InternalIP', address: n.ip }])));
    const op = await spawnOperator(api.kubeconfig, `${box.tag}-op`, ['--cluster-pool-cidr', CLUSTER_POOL, '--cluster-pool-mask-size', '24'], { netnsPath: netnsPath(box.hub) });
    cleanups.push(() => killOperator(op));
    return api;
  }
}

/** A box with etcd (or the fake API server) and an agent on every node in `mode` (agents[i] on nodes[i]). */
export class BenchCluster {
  readonly agents: ClusterAgent[] = [];
  /** crd mode: the API server the agents follow. */
  api: FakeApiProcess | undefined;
  /** crd mode: stops the operator and the fake. */
  apiCleanup: (() => Promise<void>) | undefined;
  private constructor(
    readonly box: BenchBox,
    readonly mode: BenchRoutingMode,
    readonly stateRoot: string,
    readonly store: BenchStore,
  ) {}

  /** `register` as for BenchBox.create: gets the cluster's cleanup (agents, API server, box, state) before anything is made. */
  static async create(
    tag: string,
    nodes: number,
    mode: BenchRoutingMode,
    register?: (cleanup: () => Promise<void>) => void,
    extraArgs: string[] = [],
    underlay: BenchUnderlay = 4,
    store: BenchStore = 'etcd',
  ): Promise<BenchCluster> {
    let c: BenchCluster | undefined;
    let boxCleanup: (() => Promise<void>) | undefined;
    let apiCleanup: (() => Promise<void>) | undefined;
    const stateRoot = await mkdtemp(join(tmpdir(), 'tdl-bench-cluster-'));
    const cleanup = once(async () => {
      if (c) await c.cleanup();
      else {
        await apiCleanup?.();
        await boxCleanup?.();
        await rm(stateRoot, { recursive: true, force: true });
      }
    });
    register?.(cleanup);
    try {
      const box = await BenchBox.create(tag, nodes, store === 'etcd', (fn) => (boxCleanup = fn), underlay);
      const cluster = new BenchCluster(box, mode, stateRoot, store);
      const names = box.nodes.map((_, i) => ClusterAgent.nodeName(box, i));
      c = cluster;
      const api = store === 'kubernetes' ? await BenchApiServer.start(box, names, (fn) => (apiCleanup = cluster.apiCleanup = fn)) : undefined;
      cluster.api = api?.fake;
      // In parallel: an agent's start (loading the BPF objects) takes seconds on a busy machine.
      const started = await Promise.allSettled(
        Array.from({ length: nodes }, (_, i) =>
          ClusterAgent.start(box, i, mode, stateRoot, extraArgs, (agent) => {
            agent.api = api?.fake;
            cluster.agents[i] = agent;
          }, api?.kubeconfig),
        ),
      );
      const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    } catch (err) {
      await cleanup();
      throw err;
    }
    return c;
  }

  /** Pod namespaces (loopback up), removed with the box. */
  async addNamespaces(...names: string[]): Promise<void> {
    await this.box.namespaces.add(...names);
  }

  /** Agents first (while etcd or the API server still answers their shutdown), then the API server, etcd and the namespaces, then state. */
  async cleanup(): Promise<void> {
    await Promise.all(this.agents.filter((a) => a !== undefined).map((a) => a.stop().catch(() => undefined)));
    await this.apiCleanup?.();
    await this.box.cleanup();
    await rm(this.stateRoot, { recursive: true, force: true });
  }
}

/**
 * A tendril cluster of two nodes in `mode` with a client pod on node 0 and a
 * server pod on node 1 (labels app=<name>-client, app=<name>-server); on an
 * IPv6-only underlay with `underlay` 6 (the pods keep their IPv4 addresses).
 */
export async function crossNodePodPair(
  mode: BenchRoutingMode,
  name: string,
  register: (fn: () => Promise<void>) => void,
  underlay: BenchUnderlay = 4,
): Promise<{ cluster: BenchCluster; clientNs: string; serverNs: string; serverIp: string }> {
  const tag = boxTag(`${name.slice(0, 3)}${mode === 'native' ? 'n' : 't'}${underlay === 6 ? '6' : ''}`);
  const cluster = await BenchCluster.create(tag, 2, mode, register, [], underlay);
  const [clientNs, serverNs] = [`${tag}pc`, `${tag}ps`];
  await cluster.addNamespaces(clientNs, serverNs);
  await cluster.agents[0]!.addPod(`${name}-client`, clientNs, `app=${name}-client`);
  const server = await cluster.agents[1]!.addPod(`${name}-server`, serverNs, `app=${name}-server`);
  return { cluster, clientNs, serverNs, serverIp: server.ip };
}

/**
 * The paths the cross-node benches compare: the underlay (node → node, no
 * tendril), pod → pod in each routing mode, and pod → pod in tunnel mode over
 * an IPv6-only underlay (`tunnel6`: the same IPv4 pods, an outer IPv6 header).
 */
export type ClusterPath = 'underlay' | BenchRoutingMode | 'tunnel6';
export const CLUSTER_PATHS: readonly ClusterPath[] = ['underlay', 'native', 'tunnel', 'tunnel6'];

/** Where a path's client runs and its server listens; `error` when it could not be set up. */
export interface PathEnds {
  clientNs: string;
  serverNs: string;
  serverIp: string;
  /** A cluster's own node namespaces as a path (node 0 → node 1's address, tendril's programs on their devices). */
  nodes?: { clientNs: string; serverNs: string; serverIp: string };
  error?: string;
}

/**
 * The paths, built at once (agents take seconds to start): an underlay
 * box of two node namespaces (client in node 0, server on node 1's own
 * address), and a two-node cluster per routing mode (`crossNodePodPair`). A mode
 * that cannot be set up is reported in its `error`, not thrown: the others are
 * still measured.
 */
export async function crossNodePaths(name: string, register: (fn: () => Promise<void>) => void): Promise<Record<ClusterPath, PathEnds>> {
  const underlay = (async (): Promise<PathEnds> => {
    const box = await BenchBox.create(boxTag(`${name.slice(0, 3)}u`), 2, false, register);
    return { clientNs: box.nodes[0]!.ns, serverNs: box.nodes[1]!.ns, serverIp: box.nodes[1]!.ip };
  })();
  const pair = (mode: BenchRoutingMode, underlay: BenchUnderlay = 4) =>
    crossNodePodPair(mode, name, register, underlay).then(
      (p): PathEnds => {
        const [n0, n1] = [p.cluster.box.nodes[0]!, p.cluster.box.nodes[1]!];
        return { clientNs: p.clientNs, serverNs: p.serverNs, serverIp: p.serverIp, nodes: { clientNs: n0.ns, serverNs: n1.ns, serverIp: n1.ip } };
      },
      (err: unknown): PathEnds => ({ clientNs: '', serverNs: '', serverIp: '', error: `set-up: ${errorLine(err)}` }),
    );
  // Settled all, so nothing is still being built when a failure starts the cleanup.
  const [u, native, tunnel, tunnel6] = await Promise.allSettled([underlay, pair('native'), pair('tunnel'), pair('tunnel', 6)]);
  if (u.status === 'rejected') throw u.reason;
  const value = (r: PromiseSettledResult<PathEnds>) => (r as PromiseFulfilledResult<PathEnds>).value;
  return { underlay: u.value, native: value(native), tunnel: value(tunnel), tunnel6: value(tunnel6) };
}

/**
 * Runs `body` with cleanups registered as it goes, all run (last first) when it
 * ends, fails or the process gets SIGINT/SIGTERM.
 */
export async function withCleanup<T>(body: (onCleanup: (fn: () => Promise<void>) => void) => Promise<T>): Promise<T> {
  const fns: Array<() => Promise<void>> = [];
  const cleanup = once(async () => {
    for (const fn of fns.splice(0).reverse()) await fn().catch((err: Error) => console.error(`bench cleanup: ${err.message}`));
  });
  const unhook = cleanupOnSignal(cleanup);
  try {
    return await body((fn) => fns.push(fn));
  } finally {
    await cleanup();
    unhook();
  }
}

/** A short tag unique to this process for a box's namespaces: tdl<kind><pid>. */
export const boxTag = (kind: string): string => `tdl${kind}${process.pid % 10000}`;

/** The last lines of a log as one line (an agent's reason to exit, for a one-line failure). */
const lastLines = (log: string, n = 3): string =>
  log
    .split('\n')
    .filter((l) => l.trim() !== '')
    .slice(-n)
    .join(' | ')
    .slice(-1500);

/** `fn`'s error message as one line (for a row that could not be measured). */
export const errorLine = (err: unknown): string => ((err as Error).message ?? String(err)).split('\n')[0]!.slice(0, 1500);
