// What the Kubernetes benchmarks (k8s-policy, k8s-sync) share: the fake API
// server run inside the bench node's namespace (k8sFakeApiWorker.ts, driven from
// here), the Kubernetes objects a cluster would hold (namespaces, this node's
// pods, NetworkPolicies, Services with their EndpointSlices, the Node), and an
// agent spawned with --k8s-kubeconfig whose start-up and memory are measured.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '../src/client/agentClient.js';
import type { FakeResource } from '../test/support/fakeKubeApi.js';
import { type ContainerPort, endpointSliceObject, type Labels, namespaceObject, networkPolicyObject, nodeObject, podObject, serviceObject } from '../test/support/k8sObjects.js';
import { NetnsAgentChannel } from '../test/support/netnsAgentChannel.js';
import { stopBenchAgent } from './benchProcess.js';
import type { FakeApiReply, FakeApiWorkerConfig } from './k8sFakeApiWorker.js';
import { netnsPath } from './policyDatapath.js';
import { clusterIp } from './serviceCommon.js';

const AGENT = fileURLToPath(new URL('../../bin/tendril-agent', import.meta.url));
const WORKER = fileURLToPath(new URL('./k8sFakeApiWorker.js', import.meta.url));

/**
 * The fake Kubernetes API server, listening on 127.0.0.1 inside the node
 * namespace `nodeNs` (where the agent runs), the tendril CRDs registered as in
 * a cluster tendril is deployed to.
 */
export class FakeApiProcess {
  private constructor(private readonly channel: NetnsAgentChannel<FakeApiReply & { id: number }>) {}

  /** `host`: listen there instead of 127.0.0.1 (an address of `nodeNs`: a box's hub bridge). */
  static async start(nodeNs: string, host?: string): Promise<FakeApiProcess> {
    const config: FakeApiWorkerConfig = { crds: 'tendril', ...(host === undefined ? {} : { host }) };
    return new FakeApiProcess(await NetnsAgentChannel.start<FakeApiReply & { id: number }>(`fake API server in ${nodeNs}`, WORKER, netnsPath(nodeNs), config));
  }

  async #send(cmd: object): Promise<FakeApiReply> {
    const r = await this.channel.send(cmd);
    if (r.error) throw new Error(`fake API server: ${r.error}`);
    return r;
  }

  /** A kubeconfig for the fake (a path the agent can read; removed when the fake stops). */
  async kubeconfig(): Promise<string> {
    return (await this.#send({ op: 'kubeconfig' })).path!;
  }

  /** Creates `objects` (`perCommand` per message) and answers their uids, in order (for dependents' ownerReferences). */
  async createWithUids(resource: FakeResource, objects: readonly object[], perCommand = 500): Promise<string[]> {
    const uids: string[] = [];
    for (let i = 0; i < objects.length; i += perCommand) uids.push(...((await this.#send({ op: 'create', resource, objects: objects.slice(i, i + perCommand), uids: true })).uids ?? []));
    return uids;
  }

  /**
   * Creates `objects` as a client's POSTs would, `perCommand` per message (a
   * message stays a few MB); resolves with the monotonic time (ns) of the first write.
   */
  async create(resource: FakeResource, objects: readonly object[], perCommand = 500): Promise<bigint> {
    let first: bigint | undefined;
    for (let i = 0; i < objects.length; i += perCommand) {
      const at = BigInt((await this.#send({ op: 'create', resource, objects: objects.slice(i, i + perCommand) })).atNs!);
      first ??= at;
    }
    return first ?? process.hrtime.bigint();
  }

  /** Deletes one object; resolves with the monotonic time (ns) of the write. */
  async delete(resource: FakeResource, namespace: string | undefined, name: string): Promise<bigint> {
    return BigInt((await this.#send({ op: 'delete', resource, ...(namespace === undefined ? {} : { namespace }), name })).atNs!);
  }

  /** Requests the fake has served, by verb and by resource. */
  async requests(): Promise<Record<string, number>> {
    return (await this.#send({ op: 'requests' })).requests ?? {};
  }

  /** Starts the request counts from zero. */
  async resetRequests(): Promise<void> {
    await this.#send({ op: 'resetRequests' });
  }

  /** Stops the fake (its kubeconfig's temp dir goes with it) and its process. */
  stop(): Promise<void> {
    return this.channel.stop();
  }
}

// ---- Kubernetes objects --------------------------------------------------------

// The benches' names for the builders of test/support/k8sObjects.ts.
export { namespaceObject as k8sNamespace, networkPolicyObject as k8sNetworkPolicy };

/** The bench node: its pod CIDR, its address, ready. */
export const k8sNode = (name: string, podCidr: string, ip: string) => nodeObject(name, [podCidr], [{ type: 'InternalIP', address: ip }, { type: 'Hostname', address: name }]);

const APP_PORTS: ContainerPort[] = [{ containerPort: 8080, protocol: 'TCP' }];

/** A pod on `nodeName` serving 8080, running once the kubelet reported it (`ip` omitted: not networked yet). */
export const k8sPod = (p: { namespace: string; name: string; nodeName: string; labels: Labels; ip?: string; serviceAccount?: string }) => podObject({ ...p, ports: APP_PORTS, ...(p.ip ? { hostIP: '10.0.0.1' } : {}) });

/** Objects of a cluster's worth of state for one node, in the order a client would create them. */
export interface K8sFleet {
  namespaces: object[];
  pods: object[];
  policies: object[];
  services: object[];
  slices: object[];
}

/** App labels the fleet's pods carry (app=app-<n>): policies and services select them. */
const APPS = 200;

/**
 * `pods` pods on `nodeName` spread over `namespaces` namespaces (namespace k
 * labelled team=team-<k % 5>), addresses from `podIp(i)`; `policies`
 * NetworkPolicies, each selecting one app of a namespace and allowing TCP from
 * another app (every fourth also from a team's namespaces, every tenth with an
 * egress rule too); `services` ClusterIP services (port 80 → 8080), service k's
 * EndpointSlice holding 2 or 3 of the pods.
 */
export function k8sFleet(o: { nodeName: string; namespaces: number; pods: number; policies: number; services: number; podIp: (i: number) => string }): K8sFleet {
  const nsName = (k: number) => `bench-ns-${k}`;
  const namespaces = Array.from({ length: o.namespaces }, (_, k) => namespaceObject(nsName(k), { team: `team-${k % 5}` }));
  const podRef = (i: number) => ({ namespace: nsName(i % o.namespaces), name: `app-${i % APPS}-${i}`, ip: o.podIp(i), app: `app-${i % APPS}` });
  const pods = Array.from({ length: o.pods }, (_, i) => {
    const p = podRef(i);
    return k8sPod({ namespace: p.namespace, name: p.name, nodeName: o.nodeName, ip: p.ip, labels: { app: p.app, 'pod-template-hash': `h${i % 7}`, version: `v${i % 3}` } });
  });
  const policies = Array.from({ length: o.policies }, (_, j) => {
    const from: object[] = [{ podSelector: { matchLabels: { app: `app-${(j + 1) % APPS}` } } }];
    if (j % 4 === 0) from.push({ namespaceSelector: { matchLabels: { team: `team-${j % 5}` } }, podSelector: { matchLabels: { version: `v${j % 3}` } } });
    const spec: Record<string, unknown> = {
      podSelector: { matchLabels: { app: `app-${j % APPS}` } },
      policyTypes: j % 10 === 0 ? ['Ingress', 'Egress'] : ['Ingress'],
      ingress: [{ from, ports: [{ protocol: 'TCP', port: 8080 + (j % 10) }] }],
    };
    if (j % 10 === 0) spec.egress = [{ to: [{ podSelector: { matchLabels: { app: `app-${(j + 2) % APPS}` } } }], ports: [{ protocol: 'TCP', port: 5432 }] }];
    return networkPolicyObject(nsName(j % o.namespaces), `bench-policy-${j}`, spec);
  });
  const services: object[] = [];
  const slices: object[] = [];
  for (let k = 0; k < o.services; k++) {
    const ns = nsName(k % o.namespaces);
    const name = `bench-svc-${k}`;
    services.push(serviceObject(ns, name, { clusterIP: clusterIp(k + 1), selector: { app: `app-${k % APPS}` }, ports: [{ name: 'http', port: 80, targetPort: 8080 }] }));
    const backends = Array.from({ length: 2 + (k % 2) }, (_, b) => {
      const p = podRef((k * 3 + b) % o.pods);
      return { ip: p.ip, nodeName: o.nodeName, pod: { namespace: ns, name: p.name } };
    });
    // The one slice of the service, named as the controller names it (service name, random suffix); every backend ready.
    slices.push(endpointSliceObject(ns, `${name}-${randomBytes(3).toString('hex').slice(0, 5)}`, name, backends, [{ name: 'http', port: 8080 }]));
  }
  return { namespaces, pods, policies, services, slices };
}

/** Writes a fleet into the fake, namespaces first (as a cluster's objects would have come to be). */
export async function createFleet(fake: FakeApiProcess, fleet: K8sFleet): Promise<void> {
  await fake.create('namespaces', fleet.namespaces);
  await fake.create('pods', fleet.pods);
  await fake.create('networkpolicies', fleet.policies);
  await fake.create('services', fleet.services);
  await fake.create('endpointslices', fleet.slices);
}

// ---- the agent -----------------------------------------------------------------

/** A process's peak and current resident memory (VmHWM, VmRSS of /proc/<pid>/status), bytes. */
export async function processMemory(pid: number): Promise<{ peak: number; rss: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(status);
    if (!m) throw new Error(`no ${field} in /proc/${pid}/status`);
    return Number(m[1]) * 1024;
  };
  return { peak: kb('VmHWM'), rss: kb('VmRSS') };
}

/**
 * A tendril agent (eBPF datapath) spawned in a node namespace, its pins under a
 * bpffs root of its own, its stderr's tail kept for failure messages. Its pid is
 * the agent's node process (nsenter and bin/tendril-agent exec, never fork).
 */
export class K8sBenchAgent {
  #log = '';
  private constructor(
    readonly process: ChildProcess,
    readonly client: AgentClient,
    readonly bpffsRoot: string,
    /** Monotonic time (ns) of the spawn. */
    readonly spawnedNs: bigint,
  ) {
    process.stderr!.on('data', (c: Buffer) => (this.#log = (this.#log + c.toString()).slice(-6000)));
  }

  /** Spawns the agent; `onSpawn` gets it at once so a cleanup during its start-up stops it too. */
  static async spawn(o: { nodeNs: string; stateDir: string; podCidr: string; nodeName: string; args?: string[]; env?: Record<string, string>; cwd?: string }, onSpawn?: (a: K8sBenchAgent) => void): Promise<K8sBenchAgent> {
    const bpffsRoot = `/sys/fs/bpf/tdl-bench-${randomBytes(4).toString('hex')}`;
    await mkdir(bpffsRoot, { recursive: true });
    const argv = [
      '--state-dir', o.stateDir, '--lib-dir', join(o.stateDir, 'lib'), '--node-name', o.nodeName, '--pod-cidr', o.podCidr,
      '--bpffs-root', bpffsRoot, '--datapath', 'bpf', '--log-level', 'warn',
      ...(o.args ?? []),
      ...(process.env.TENDRIL_BENCH_AGENT_ARGS ?? '').split(' ').filter((a) => a !== ''),
    ];
    const spawnedNs = process.hrtime.bigint();
    const proc = spawn('nsenter', [`--net=${netnsPath(o.nodeNs)}`, '--', AGENT, ...argv], {
      stdio: ['ignore', 'ignore', 'pipe'],
      ...(o.env === undefined ? {} : { env: { ...process.env, ...o.env } }),
      ...(o.cwd === undefined ? {} : { cwd: o.cwd }),
    });
    const agent = new K8sBenchAgent(proc, new AgentClient({ socketPath: join(o.stateDir, 'tendril.sock'), timeoutMs: 30_000 }), bpffsRoot, spawnedNs);
    onSpawn?.(agent);
    return agent;
  }

  get pid(): number {
    return this.process.pid!;
  }

  /** The agent's pinned policy map (what `tendril bpf policy get` lists). */
  get policyMapPath(): string {
    return join(this.bpffsRoot, 'tendril', 'tendril_policy');
  }

  /** The last lines of the agent's stderr, one line. */
  get log(): string {
    return this.#log
      .split('\n')
      .filter((l) => l.trim() !== '')
      .slice(-3)
      .join(' | ')
      .slice(-1500);
  }

  /**
   * Polls GET /healthz every `pollMs` until it says ok (with Kubernetes on: every
   * resource listed once); resolves with the monotonic time (ns) of that answer.
   */
  async waitHealthy(timeoutMs: number, pollMs = 20): Promise<bigint> {
    const deadline = Date.now() + timeoutMs;
    let last = 'not listening';
    for (;;) {
      try {
        const h = await this.client.health();
        if (h.status === 'ok') return process.hrtime.bigint();
        last = `degraded${h.kubernetes ? ` (kubernetes synced: ${h.kubernetes.synced}, connected: ${h.kubernetes.connected})` : ''}`;
      } catch (err) {
        last = (err as Error).message;
      }
      if (this.process.exitCode !== null || this.process.signalCode !== null) throw new Error(`the agent exited (${this.process.exitCode ?? this.process.signalCode}) before it was healthy: ${this.log}`);
      if (Date.now() > deadline) throw new Error(`the agent was not healthy in ${timeoutMs} ms (${last}): ${this.log}`);
      await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  memory(): Promise<{ peak: number; rss: number }> {
    return processMemory(this.pid);
  }

  /** SIGTERM (SIGKILL after 10 s), then its bpffs root. */
  async stop(): Promise<void> {
    await stopBenchAgent(this.process);
    await rm(this.bpffsRoot, { recursive: true, force: true });
  }
}

/** Waits until the process used at most 1 clock tick (10 ms) of CPU over 300 ms (its start-up work done), up to `timeoutMs`. */
export async function waitIdle(pid: number, timeoutMs = 30_000): Promise<void> {
  const ticks = async () => {
    const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
    return Number(f[11]) + Number(f[12]);
  };
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const a = await ticks();
    await new Promise((r) => setTimeout(r, 300));
    if ((await ticks()) - a <= 1) return;
  }
}

/** The machine's 1-minute load average (the benches print it: the machine is shared). */
export const loadAverage = async (): Promise<number> => Number((await readFile('/proc/loadavg', 'utf8')).split(' ')[0]);

/** ms between two monotonic times (ns). */
export const msBetween = (fromNs: bigint, toNs: bigint): number => Number(toNs - fromNs) / 1e6;
