/**
 * The world of a Kubernetes e2e test: the fake API server on loopback, one
 * node running the eBPF datapath whose agent follows it (`--k8s-kubeconfig`),
 * and pods as a kubelet makes them: the Pod object exists in the API first
 * (labels, `spec.nodeName` = this node), then the runtime calls CNI ADD with
 * the CNI_ARGS kubelet passes (IgnoreUnknown, K8S_POD_NAMESPACE, K8S_POD_NAME,
 * K8S_POD_INFRA_CONTAINER_ID, K8S_POD_UID) and no labels: the agent reads them
 * from the API. After ADD the scene writes the pod's status (podIP, Running)
 * as kubelet does. Each pod runs a service agent (backend and client).
 * The agent reaches the fake, which listens on this process's loopback, at
 * the fake's own URL through a relay in the node namespace (k8sApiRelay.ts).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before } from 'node:test';
import { parseAllDocuments } from 'yaml';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import type { Result100 } from '../../src/cni/index.js';
import { CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import type { ServiceStatus } from '../../src/service/types.js';
import { AgentProcess, tendrilPluginDir } from './agentHarness.js';
import { addOutsideHost, type DatapathNode, type OutsideHost, routerOf, waitRealized } from './datapathNode.js';
import { type Addresses, addressesByVersion, addressIn, type Family, type IpFamily, ipIn, podCidrArgs, podCidrsOf, versionsOf } from './family.js';
import { FakeKubeApi } from './fakeKubeApi.js';
import { splice } from './k8sApiRelay.js';
import { endpointSliceObject as endpointSliceOf, type Labels, namespaceObject, nodeObject, podObject, type PodObject, type SlicePortSpec } from './k8sObjects.js';
import { NetnsPool } from './netns.js';
import { run } from './run.js';
import { ServiceAgentProcess } from './serviceProcess.js';
import { OUTSIDE_CLIENT_IP, OUTSIDE_NODE_IP } from './serviceScene.js';
import { TENDRIL_BIN } from './tendrilBin.js';
import type { K8sResourceStatus, K8sStatus as K8sStatusBody } from '../../src/k8s/index.js';

export { OUTSIDE_CLIENT_IP, OUTSIDE_NODE_IP };
// The e2e files take the object builders from here, beside the scene they create them in.
export { type Labels, networkPolicyObject, serviceObject, type ServicePortSpec, tendrilClusterwidePolicyObject, tendrilPolicyObject } from './k8sObjects.js';

const CRD_DIR = fileURLToPath(new URL('../../../deploy/kubernetes/crds', import.meta.url));
const RELAY_SCRIPT = fileURLToPath(new URL('./k8sApiRelay.js', import.meta.url));

/**
 * Makes the fake API server reachable at its own URL from inside a network
 * namespace (k8sApiRelay.ts): a unix socket here connected to the fake, and
 * the relay process in the namespace listening on the fake's port.
 */
export async function relayIntoNamespace(fake: FakeKubeApi, netnsPath: string, dir: string): Promise<() => Promise<void>> {
  const port = Number(new URL(fake.url).port);
  const unixPath = join(dir, 'kube-api.sock');
  const server: Server = createServer((inbound) => splice(inbound, connect(port, '127.0.0.1')));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(unixPath, () => resolve());
  });
  const child = spawn('nsenter', [`--net=${netnsPath}`, '--', process.execPath, RELAY_SCRIPT, String(port), unixPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the kube API relay did not start in 10 s: ${output}`)), 10_000);
      child.stdout!.on('data', (c: Buffer) => {
        if (c.toString().includes('"ready":true')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the kube API relay exited (${code}): ${output}`));
      });
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return stop;
}

export interface K8sPodSpec {
  name: string;
  namespace: string;
  labels: Labels;
  serviceAccount?: string;
}

/** A pod the scene made: its Pod object in the fake API and its sandbox on the node. */
export interface K8sPod {
  spec: K8sPodSpec;
  /** `namespace/name`. */
  key: string;
  uid: string;
  netns: string;
  netnsPath: string;
  /** The sandbox (infra container) ID kubelet passes as CNI_CONTAINERID and K8S_POD_INFRA_CONTAINER_ID. */
  containerId: string;
  /** The first address of the CNI result (IPv4 on a dual-stack pod). */
  ip: string;
  /** Its addresses by IP version. */
  addresses: Addresses;
  endpointId: number;
}

export interface K8sSceneOptions {
  nodeName: string;
  /** A /24 (the router takes .1): the IPv4 template of the pod CIDRs (family.ts podCidrsOf). */
  podCidr: string;
  /** What the pods carry (default IPv4): the node's podCIDRs, the outside host's addresses and the backends' listeners follow it. */
  family?: Family;
  /** Namespaces created in the API before the agent starts, with their labels. */
  namespaces: Record<string, Labels>;
  /** Ports every pod's service agent serves. */
  tcpPorts?: number[];
  udpPorts?: number[];
  /** An outside host linked to the node (NodePort clients). */
  outside?: boolean;
  extraAgentArgs?: string[];
  bookmarkIntervalMs?: number;
  /** How the agent is pointed at the API server: `--k8s-kubeconfig` (default) or `--k8s-api-server <url>` alone. */
  connect?: 'kubeconfig' | 'api-server';
}

export interface K8sScene {
  fake: FakeKubeApi;
  node: DatapathNode;
  nodeName: string;
  outside?: OutsideHost;
  pods: Map<string, K8sPod>;
  /** Service agents by pod key (`ns/name`), plus `outside` when present. */
  agents: Map<string, ServiceAgentProcess>;
  agent(key: string): ServiceAgentProcess;
  pod(key: string): K8sPod;
  createNamespace(name: string, labels: Labels): void;
  setNamespaceLabels(name: string, labels: Labels): void;
  /**
   * Creates the Pod object, then runs CNI ADD as kubelet does, and starts the
   * pod's service agent. `objectDelayMs`: the object is created that long
   * after ADD starts (the agent's cache lagging behind the kubelet's view).
   */
  addPod(spec: K8sPodSpec, o?: { objectDelayMs?: number }): Promise<K8sPod>;
  setPodLabels(pod: K8sPod, labels: Labels): void;
  /** Deletes the Pod object only (the sandbox stays until `cniDel`, kubelet's part). */
  deletePodObject(pod: K8sPod): void;
  /** CNI DEL for the pod's sandbox, as kubelet does when it tears the pod down. */
  cniDel(pod: K8sPod): Promise<void>;
  endpoint(pod: K8sPod): Promise<Endpoint>;
  /** The endpoint's identity and labels once `pred` holds for them (polled; throws after timeoutMs). */
  waitEndpoint(pod: K8sPod, pred: (e: Endpoint) => boolean, timeoutMs: number, what: string): Promise<{ endpoint: Endpoint; ms: number }>;
  cleanup(): Promise<void>;
}

/** The kubelet's CNI_ARGS for a pod sandbox. */
export function kubeletCniArgs(spec: K8sPodSpec, containerId: string, uid: string): Array<[string, string]> {
  return [
    ['IgnoreUnknown', '1'],
    ['K8S_POD_NAMESPACE', spec.namespace],
    ['K8S_POD_NAME', spec.name],
    ['K8S_POD_INFRA_CONTAINER_ID', containerId],
    ...(uid ? [['K8S_POD_UID', uid] as [string, string]] : []),
  ];
}

/** The CRDs deploy/kubernetes/crds/*.yaml holds (none when there is no deploy/ tree). */
async function deployedCrds(): Promise<object[]> {
  let files: string[] = [];
  try {
    files = (await readdir(CRD_DIR)).filter((f) => f.endsWith('.yaml') || f.endsWith('.yml'));
  } catch {
    return [];
  }
  const out: object[] = [];
  for (const f of files) {
    for (const doc of parseAllDocuments(await readFile(join(CRD_DIR, f), 'utf8'))) {
      const o = doc.toJS() as { kind?: string } | null;
      if (o?.kind === 'CustomResourceDefinition') out.push(o);
    }
  }
  return out;
}

/**
 * One scene for a whole e2e file: `before` starts it on a pool of its own and
 * runs `setup` (the pods, whatever else the tests start from); `after` cleans
 * it up, or only the pool when the start failed (startK8sScene has cleaned up
 * what it made by then). The result gives the scene to the tests.
 */
export function k8sSceneHooks(poolPrefix: string, opts: K8sSceneOptions, setup: (scene: K8sScene) => Promise<void>): () => K8sScene {
  const pool = new NetnsPool(poolPrefix);
  let scene: K8sScene | undefined;
  before(async () => {
    scene = await startK8sScene(pool, opts);
    await setup(scene);
  });
  after(async () => {
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });
  return () => {
    if (!scene) throw new Error('the k8s scene is not started (its before hook did not run or failed)');
    return scene;
  };
}

export async function startK8sScene(pool: NetnsPool, opts: K8sSceneOptions): Promise<K8sScene> {
  const versions = versionsOf(opts.family ?? 4);
  const podCidrs = podCidrsOf(opts.family ?? 4, opts.podCidr);
  const cleanups: Array<() => Promise<void>> = [];
  const agents = new Map<string, ServiceAgentProcess>();
  const cleanup = async () => {
    for (const a of [...agents.values()]) await a.stop().catch(() => undefined);
    agents.clear();
    for (const c of cleanups.splice(0).reverse()) {
      try {
        await c();
      } catch (err) {
        process.stderr.write(`k8s scene cleanup: ${(err as Error).message}\n`);
      }
    }
    await pool.cleanup();
  };
  try {
    // The tendril CRDs as installed from deploy/, else the fake's minimal ones: either way the API serves the kinds.
    const crds = await deployedCrds();
    const fake = await FakeKubeApi.start({ ...(opts.bookmarkIntervalMs !== undefined ? { bookmarkIntervalMs: opts.bookmarkIntervalMs } : {}), ...(crds.length === 0 ? { crds: 'tendril' as const } : {}) });
    cleanups.push(() => fake.stop());
    for (const crd of crds) fake.create('customresourcedefinitions', crd);
    // kube-system as in every cluster: the agent's node Lease (crd mode) lives there.
    if (!('kube-system' in opts.namespaces)) fake.create('namespaces', namespaceObject('kube-system'));
    for (const [name, labels] of Object.entries(opts.namespaces)) fake.create('namespaces', namespaceObject(name, labels));
    // An IPv6 InternalIP (the node's address toward the outside host) where pods have IPv6: IPv6 NodePorts are served there.
    const internal6 = opts.outside && versions.includes(6) ? [{ type: 'InternalIP', address: ipIn(6, OUTSIDE_NODE_IP) }] : [];
    fake.create('nodes', nodeObject(opts.nodeName, podCidrs, [{ type: 'Hostname', address: opts.nodeName }, ...internal6]));
    const connectArgs = opts.connect === 'api-server' ? ['--k8s-api-server', fake.url] : ['--k8s-kubeconfig', await fake.kubeconfig()];

    const nodeNs = await pool.add('node');
    const relayDir = await mkdtemp(join(tmpdir(), 'tdl-kuberelay-'));
    cleanups.push(() => rm(relayDir, { recursive: true, force: true }));
    cleanups.push(await relayIntoNamespace(fake, nodeNs.path, relayDir));
    let outside: OutsideHost | undefined;
    if (opts.outside) {
      outside = await addOutsideHost(pool, nodeNs.name, { gateway: versions.map((v) => ipIn(v, OUTSIDE_NODE_IP)), addresses: versions.map((v) => ipIn(v, OUTSIDE_CLIENT_IP)), podCidr: podCidrs });
    }
    const bpffsRoot = `/sys/fs/bpf/tdl-k8s-${pool.prefix}`;
    cleanups.push(() => rm(bpffsRoot, { recursive: true, force: true }));
    const agentProcess = await AgentProcess.create({
      nodeNetns: nodeNs.name,
      nodeName: opts.nodeName,
      // debug: the per-endpoint 'endpoint regenerated' lines are the only regeneration count the agent gives.
      args: [...podCidrArgs(podCidrs), '--datapath', 'bpf', '--bpffs-root', bpffsRoot, ...connectArgs, '--log-level', 'debug', ...(opts.extraAgentArgs ?? [])],
    });
    cleanups.push(() => agentProcess.cleanup());
    const bin = await tendrilPluginDir();
    cleanups.push(bin.cleanup);
    const cache = await mkdtemp(join(tmpdir(), 'tdl-cache-'));
    cleanups.push(() => rm(cache, { recursive: true, force: true }));
    const runtime = new CniRuntime({ pluginDirs: [bin.dir], cacheDir: cache });
    await agentProcess.start();
    const conflist: NetworkConfigList = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlk8s', plugins: [{ type: 'tendril-cni', socket: agentProcess.socket }] }));
    const node: DatapathNode = {
      node: nodeNs.name,
      nodePath: nodeNs.path,
      agent: agentProcess,
      runtime,
      bpffsRoot,
      podCidr: podCidrs[0]!,
      podCidrs,
      routerIp: routerOf(podCidrs[0]!),
      routerIps: addressesByVersion(podCidrs.map(routerOf)),
      conflist,
      cli: (args, input) => run([TENDRIL_BIN, ...args, '--socket', agentProcess.socket], input === undefined ? {} : { input }),
      cleanup: async () => undefined,
    };
    if (outside) agents.set('outside', await ServiceAgentProcess.start(outside.netnsPath, { name: 'outside', tcpPorts: [], udpPorts: [] }));

    const pods = new Map<string, K8sPod>();
    const runtimeConf = (p: K8sPod): RuntimeConf => ({ containerId: p.containerId, netns: p.netnsPath, ifName: 'eth0', args: kubeletCniArgs(p.spec, p.containerId, p.uid) });
    const podInApi = (key: string) => {
      const [ns, name] = key.split('/') as [string, string];
      const o = fake.get('pods', ns, name) as PodObject | undefined;
      if (!o) throw new Error(`no pod ${key} in the fake API`);
      return o;
    };
    const scene: K8sScene = {
      fake,
      node,
      nodeName: opts.nodeName,
      ...(outside ? { outside } : {}),
      pods,
      agents,
      agent: (key) => {
        const a = agents.get(key);
        if (!a) throw new Error(`no service agent ${key}`);
        return a;
      },
      pod: (key) => {
        const p = pods.get(key);
        if (!p) throw new Error(`no pod ${key}`);
        return p;
      },
      createNamespace: (name, labels) => void fake.create('namespaces', namespaceObject(name, labels)),
      setNamespaceLabels: (name, labels) => {
        const o = fake.get('namespaces', undefined, name) as { metadata: { labels?: Labels } } | undefined;
        if (!o) throw new Error(`no namespace ${name}`);
        fake.update('namespaces', { ...o, metadata: { ...o.metadata, labels: { 'kubernetes.io/metadata.name': name, ...labels } } });
      },
      addPod: async (spec, o = {}) => {
        const key = `${spec.namespace}/${spec.name}`;
        const obj = podObject({ ...spec, nodeName: opts.nodeName });
        // The UID is the API server's to give; with a late object the sandbox is set up before the test can know it.
        const created = o.objectDelayMs === undefined ? fake.create('pods', obj) : undefined;
        const uid = created?.metadata.uid ?? '';
        const ns = await pool.add(`${spec.namespace}-${spec.name}`.replace(/[^A-Za-z0-9-]/g, ''));
        const containerId = `tdl-${pool.prefix}-${spec.namespace}-${spec.name}`;
        const partial = { spec, key, uid, netns: ns.name, netnsPath: ns.path, containerId, ip: '', addresses: {}, endpointId: 0 };
        const late = o.objectDelayMs === undefined ? undefined : setTimeout(() => fake.create('pods', obj), o.objectDelayMs);
        let result: Result100;
        try {
          result = (await runtime.addNetworkList(conflist, runtimeConf(partial))) as Result100;
        } finally {
          clearTimeout(late);
        }
        // ADD answered before the late object was due: the object comes now (the test sees the labels ADD took).
        if (!fake.get('pods', spec.namespace, spec.name)) fake.create('pods', obj);
        const ip = result.ips![0]!.address.split('/')[0]!;
        const endpoint = (await agentProcess.client.getEndpoint(`container-id:${containerId}`)) as Endpoint;
        const addresses = addressesByVersion(result.ips!.map((i) => i.address));
        const pod: K8sPod = { ...partial, ip, addresses, endpointId: endpoint.id };
        pods.set(key, pod);
        // kubelet reports the sandbox's addresses once the network is up.
        const now = podInApi(key);
        fake.update('pods', { ...now, status: { phase: 'Running', podIP: ip, podIPs: result.ips!.map((i) => ({ ip: i.address.split('/')[0]! })) } });
        agents.set(key, await ServiceAgentProcess.start(ns.path, { name: key, tcpPorts: opts.tcpPorts ?? [], udpPorts: opts.udpPorts ?? [], versions }));
        return pod;
      },
      setPodLabels: (pod, labels) => {
        const now = podInApi(pod.key);
        fake.update('pods', { ...now, metadata: { ...now.metadata, labels } });
      },
      deletePodObject: (pod) => fake.delete('pods', pod.spec.namespace, pod.spec.name),
      cniDel: async (pod) => {
        await agents.get(pod.key)?.stop();
        agents.delete(pod.key);
        await runtime.delNetworkList(conflist, runtimeConf(pod));
        pods.delete(pod.key);
      },
      endpoint: async (pod) => (await agentProcess.client.getEndpoint(pod.endpointId)) as Endpoint,
      waitEndpoint: async (pod, pred, timeoutMs, what) => {
        const started = Date.now();
        let last: Endpoint | undefined;
        for (;;) {
          last = (await agentProcess.client.getEndpoint(pod.endpointId)) as Endpoint;
          if (pred(last)) return { endpoint: last, ms: Date.now() - started };
          if (Date.now() - started > timeoutMs) throw new Error(`${what}: not so after ${timeoutMs} ms; endpoint ${pod.endpointId} has identity ${last.identity} labels ${JSON.stringify(last.labels)} state ${last.state}`);
          await new Promise((r) => setTimeout(r, 50));
        }
      },
      cleanup,
    };
    return scene;
  } catch (err) {
    await cleanup();
    throw err;
  }
}

// ---- objects as kubectl would create them (k8sObjects.ts) -----------------

export interface SliceEndpoint {
  pod: K8sPod;
  /** Default: ready and serving, not terminating. */
  conditions?: { ready: boolean; serving: boolean; terminating: boolean };
}

/** An EndpointSlice of a service whose endpoints are the scene's pods, all on `nodeName`: of addressType IPv4, or IPv6 with `v` 6. */
export function endpointSliceObject(namespace: string, name: string, service: string, nodeName: string, endpoints: readonly SliceEndpoint[], ports: readonly SlicePortSpec[], v: IpFamily = 4): object {
  return endpointSliceOf(
    namespace,
    name,
    service,
    endpoints.map((e) => ({ ip: addressIn(`pod ${e.pod.key}`, e.pod.addresses, v), nodeName, pod: { namespace: e.pod.spec.namespace, name: e.pod.spec.name, uid: e.pod.uid }, ...(e.conditions ? { conditions: e.conditions } : {}) })),
    ports,
    v === 6 ? 'IPv6' : 'IPv4',
  );
}

// ---- what the agent holds -------------------------------------------------

/** The agent's services whose frontend is `ip:port/protocol`. */
export async function servicesAt(node: DatapathNode, ip: string, port: number, protocol: 'TCP' | 'UDP' = 'TCP'): Promise<ServiceStatus[]> {
  const list = (await node.agent.client.listServices()) as unknown as ServiceStatus[] | { services: ServiceStatus[] };
  const all = Array.isArray(list) ? list : list.services;
  return all.filter((s) => s['frontend-address'].ip === ip && s['frontend-address'].port === port && s['frontend-address'].protocol === protocol);
}

/** Waits until the one service at a frontend is realized with exactly these backends (`ip:port state`), returns how long it took. */
export async function waitServiceBackends(node: DatapathNode, frontend: { ip: string; port: number; protocol?: 'TCP' | 'UDP' }, want: readonly string[], timeoutMs: number): Promise<number> {
  const started = Date.now();
  const wanted = [...want].sort();
  let seen = '';
  for (;;) {
    const svcs = await servicesAt(node, frontend.ip, frontend.port, frontend.protocol ?? 'TCP');
    const s = svcs[0];
    if (svcs.length === 1 && s && s.realized) {
      const have = s['backend-addresses'].map((b) => `${b.ip}:${b.port} ${b.state}`).sort();
      if (JSON.stringify(have) === JSON.stringify(wanted)) return Date.now() - started;
      seen = JSON.stringify(have);
    } else {
      seen = JSON.stringify(svcs);
    }
    if (Date.now() - started > timeoutMs) throw new Error(`service ${frontend.ip}:${frontend.port}: backends ${JSON.stringify(wanted)} not realized in ${timeoutMs} ms; the agent holds ${seen.slice(0, 1500)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The names of the policies the agent holds. */
export async function policyNames(node: DatapathNode): Promise<string[]> {
  return (await node.agent.client.getPolicy()).policies.map((p) => p.name);
}

/** Waits until every local endpoint realizes the agent's current policy revision (after a policy change from the API). */
export async function waitAllRealized(node: DatapathNode, timeoutMs = 10_000): Promise<void> {
  const { revision } = await node.agent.client.getPolicy();
  const ids = ((await node.agent.client.listEndpoints()) as unknown as Endpoint[]).map((e) => e.id);
  await waitRealized(node, ids, revision, timeoutMs);
}

/** 'endpoint regenerated' debug lines of the agent's log, per endpoint ID. */
export function regenerationsByEndpoint(agent: AgentProcess): Map<number, number> {
  const out = new Map<number, number>();
  for (const line of agent.output.split('\n')) {
    if (!line.includes('"endpoint regenerated"')) continue;
    try {
      const o = JSON.parse(line) as { endpoint?: number };
      if (typeof o.endpoint === 'number') out.set(o.endpoint, (out.get(o.endpoint) ?? 0) + 1);
    } catch {
      // A line cut by a chunk boundary: not counted.
    }
  }
  return out;
}


/** `kubernetes` of GET /status: the agent's watch of the API server. */
export class K8sStatus {
  private constructor(
    readonly apiServer: string,
    readonly connected: boolean,
    readonly synced: boolean,
    readonly resources: K8sResourceStatus[],
  ) {}

  static async of(node: DatapathNode): Promise<K8sStatus> {
    const body = await node.agent.client.request<{ kubernetes?: K8sStatusBody }>('GET', '/status');
    const k = body.kubernetes;
    if (!k) throw new Error(`GET /status has no kubernetes section: ${JSON.stringify(body).slice(0, 500)}`);
    return new K8sStatus(k.apiServer, k.connected, k.synced, k.resources);
  }

  resource(name: string): K8sResourceStatus {
    const r = this.resources.find((x) => x.resource === name);
    if (!r) throw new Error(`GET /status kubernetes has no resource ${name}: ${JSON.stringify(this.resources.map((x) => x.resource))}`);
    return r;
  }

  toJSON(): object {
    return { apiServer: this.apiServer, connected: this.connected, synced: this.synced, resources: this.resources };
  }
}
