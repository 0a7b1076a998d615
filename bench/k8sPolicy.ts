// How long a Kubernetes NetworkPolicy takes from the API server to enforcement
// on a node: the fake API server (in the node namespace, k8sCommon.ts) holds
// 1,000 pods on this node in 20 namespaces, and a client and a server pod in
// namespace bench-k8s, the server in default-deny ingress (a NetworkPolicy
// selecting it with no ingress rule). A tendril agent (eBPF datapath) follows
// the fake with --k8s-kubeconfig; the two pods are networked through its CNI
// API with kubelet's CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME: their labels
// come from the API). Then 100 NetworkPolicy events alternate: create of a
// policy letting the client reach the server's TCP port, delete of it. Each is
// timed from the fake's write (its monotonic clock, in the fake's process)
// (a) to the agent's pinned policy map holding the change (the server's
// ingress entry for the client's identity and port, looked up from here every
// millisecond: what the server's programs look up, what `tendril bpf policy
// get` lists), and (b) to packets: the client opens a new connection every
// millisecond, each abandoned after 50 ms; "enforced" is the start of the
// first attempt from which every attempt has the new outcome.
// The reference: the same policy imported and deleted through the agent's own
// API (PUT/DELETE /policy), timed from the call's start the same two ways.
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AgentClient } from '../src/client/agentClient.js';
import { policyEntry, policyKey } from '../src/datapath/bpf/layout.js';
import { BpfMap } from '../src/datapath/kernel/bpf/index.js';
import { boxTag, errorLine, withCleanup } from './clusterCommon.js';
import { FakeApiProcess, K8sBenchAgent, k8sFleet, k8sNamespace, k8sNetworkPolicy, k8sNode, k8sPod, loadAverage, msBetween } from './k8sCommon.js';
import { BenchNamespaces, netnsPath, runTcpClient, startProbe, startTcpServer } from './policyDatapath.js';
import { percentile } from './stats.js';
import { ProbeLog } from './probeLog.js';

const NODE_NAME = 'tdl-bench-k8s';
const POD_CIDR = '10.200.0.0/18';
const NAMESPACE = 'bench-k8s';
const PORT = 8080;
const ALLOW_NAME = 'k8s-allow-client';
/** The API pods' addresses: the upper half of the pod CIDR, which the agent's IPAM reaches last. */
const apiPodIp = (i: number) => `10.200.${32 + (i >> 8)}.${i & 255}`;

const allowPolicy = (name: string) =>
  k8sNetworkPolicy(NAMESPACE, name, {
    podSelector: { matchLabels: { app: 'k8s-server' } },
    policyTypes: ['Ingress'],
    ingress: [{ from: [{ podSelector: { matchLabels: { app: 'k8s-client' } } }], ports: [{ protocol: 'TCP', port: PORT }] }],
  });

export interface EnforceSample {
  allow: boolean;
  /** ms from the write (or the API call's start) to the policy map holding the change; undefined: not in 3 s. */
  mapMs: number | undefined;
  /** ms from the write to the first attempt of the new outcome (0: an attempt started before it); undefined: not in 3 s. */
  packetMs: number | undefined;
}

export interface K8sPolicyReport {
  apiPods: number;
  k8s: EnforceSample[];
  k8sError?: string;
  reference: EnforceSample[];
  referenceError?: string;
  setupMs: number;
  /** Agent start with Kubernetes on: spawn → GET /healthz ok, ms. */
  agentHealthyMs: number;
  /** The machine's load average before and after the series. */
  load: [number, number];
  /** Pods in the agent's cache (GET /healthz) when the series began. */
  cachedPods: number | undefined;
}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** ADD of a pod as kubelet asks for it: no labels in the call, only the pod's namespace and name (its labels are the API's). */
async function kubeletAdd(client: AgentClient, name: string, ns: string): Promise<{ containerId: string; ip: string }> {
  const containerId = `tdl-${name}`;
  const result = (await client.cni({
    command: 'ADD',
    containerId,
    netns: netnsPath(ns),
    ifName: 'eth0',
    args: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NAMESPACE};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${containerId}`,
    path: '/usr/lib/cni',
    config: JSON.stringify({ cniVersion: '1.0.0', name: 'tdlbenchk8s', type: 'tendril-cni' }),
  })) as { ips?: Array<{ address: string }> } | undefined;
  const ip = result?.ips?.[0]?.address.split('/')[0];
  if (!ip) throw new Error(`ADD of ${name} returned no address`);
  return { containerId, ip };
}

/**
 * `trials` toggles, each by `write(allow)` (resolving with the monotonic time
 * its change was made), timed to the map's `allowed()` and the probe's outcome.
 */
async function series(trials: number, write: (allow: boolean) => Promise<bigint>, allowed: () => boolean, probe: ProbeLog, out: EnforceSample[]): Promise<void> {
  let unseen = 0;
  for (let i = 0; i < trials; i++) {
    const allow = i % 2 === 0;
    probe.reset(process.hrtime.bigint());
    // The map is polled from before the write (it holds the old state until then), so a fast change is not seen late.
    let done = false;
    const mapSeen = (async () => {
      while (!done) {
        if (allowed() === allow) return process.hrtime.bigint();
        await sleep(1);
      }
      return undefined;
    })();
    let atNs: bigint;
    try {
      atNs = await write(allow);
    } catch (err) {
      done = true;
      await mapSeen;
      throw err;
    }
    const timer = setTimeout(() => (done = true), 3000);
    const [mapAt, packetAt] = await Promise.all([mapSeen, probe.waitSettled(allow, 3000)]);
    clearTimeout(timer);
    done = true;
    out.push({
      allow,
      mapMs: mapAt === undefined ? undefined : Math.max(0, msBetween(atNs, mapAt)),
      packetMs: packetAt === undefined ? undefined : Math.max(0, msBetween(atNs, packetAt)),
    });
    if (mapAt === undefined && packetAt === undefined) unseen++;
    // Nothing seen at all in the first changes: the path does not work, more trials would only take 3 s each.
    if (i === 3 && unseen === 4) throw new Error('no change enforced in the first 4 events');
  }
}

export async function runK8sPolicyBench(trials = 100, apiPods = 1000): Promise<K8sPolicyReport> {
  return withCleanup(async (onCleanup) => {
    const t0 = performance.now();
    const tag = boxTag('kp');
    const [nodeNs, clientNs, serverNs] = [`${tag}n`, `${tag}c`, `${tag}s`];
    const namespaces = new BenchNamespaces();
    onCleanup(() => namespaces.cleanup());
    const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-k8spol-'));
    onCleanup(() => rm(scratch, { recursive: true, force: true }));
    await namespaces.add(nodeNs, clientNs, serverNs);

    // The API's state before the agent starts: this node, 1,000 pods on it, the two pods to network, the server's default-deny.
    const fake = await FakeApiProcess.start(nodeNs);
    onCleanup(() => fake.stop());
    const fleet = k8sFleet({ nodeName: NODE_NAME, namespaces: 20, pods: apiPods, policies: 0, services: 0, podIp: apiPodIp });
    await fake.create('nodes', [k8sNode(NODE_NAME, POD_CIDR, '10.0.0.1')]);
    // kube-system: crd mode (the default with an API server and no etcd) keeps the node's Lease there.
    await fake.create('namespaces', [...fleet.namespaces, k8sNamespace(NAMESPACE), k8sNamespace('kube-system')]);
    await fake.create('pods', fleet.pods);
    await fake.create('pods', [
      k8sPod({ namespace: NAMESPACE, name: 'k8s-client', nodeName: NODE_NAME, labels: { app: 'k8s-client' } }),
      k8sPod({ namespace: NAMESPACE, name: 'k8s-server', nodeName: NODE_NAME, labels: { app: 'k8s-server' } }),
    ]);
    await fake.create('networkpolicies', [k8sNetworkPolicy(NAMESPACE, 'k8s-server-default-deny', { podSelector: { matchLabels: { app: 'k8s-server' } }, policyTypes: ['Ingress'] })]);

    const agent = await K8sBenchAgent.spawn(
      { nodeNs, stateDir: join(scratch, 'state'), podCidr: POD_CIDR, nodeName: NODE_NAME, args: ['--k8s-kubeconfig', await fake.kubeconfig()] },
      (a) => onCleanup(() => a.stop()),
    );
    const agentHealthyMs = msBetween(agent.spawnedNs, await agent.waitHealthy(120_000));
    const clientPod = await kubeletAdd(agent.client, 'k8s-client', clientNs);
    const serverPod = await kubeletAdd(agent.client, 'k8s-server', serverNs);
    const clientEp = await agent.client.getEndpoint(`container-id:${clientPod.containerId}`);
    const serverEp = await agent.client.getEndpoint(`container-id:${serverPod.containerId}`);
    if (!serverEp.labels.includes('k8s:app=k8s-server') || clientEp.identity === undefined) {
      throw new Error(`the server pod's endpoint does not carry its API labels (${serverEp.labels.join(', ')}) or the client has no identity`);
    }
    const tcp = await startTcpServer(serverNs, serverPod.ip, PORT);
    onCleanup(async () => tcp.stop());
    const map = BpfMap.openPinned(agent.policyMapPath, policyKey, policyEntry);
    onCleanup(async () => map.close());
    // The server's ingress entry for the client's identity on the port: an LPM lookup, so a port range or wildcard port answers too.
    const key = { endpointId: serverEp.id, identity: clientEp.identity, egress: false, proto: 6, port: PORT, portPrefixLen: 16 };
    const allowed = () => {
      const v = map.get(key);
      return v !== undefined && v.deny === 0;
    };
    const setupMs = performance.now() - t0;
    const cachedPods = (await agent.client.health()).kubernetes?.resources.find((x) => x.resource === 'pods')?.objects;
    const report: K8sPolicyReport = { apiPods, k8s: [], reference: [], setupMs, agentHealthyMs, load: [await loadAverage(), 0], cachedPods };

    const reach = (await runTcpClient<{ result: string }>(clientNs, ['check', serverPod.ip, String(PORT), '300'])).result;
    if (reach === 'connected' || allowed()) throw new Error(`the server is not in default-deny before the series (connection: ${reach}, map allows: ${allowed()})`);
    const probe = new ProbeLog();
    const prober = startProbe(clientNs, serverPod.ip, PORT, probe.add);
    onCleanup(() => prober.stop());
    try {
      await series(trials, (allow) => (allow ? fake.create('networkpolicies', [allowPolicy(ALLOW_NAME)]) : fake.delete('networkpolicies', NAMESPACE, ALLOW_NAME)), allowed, probe, report.k8s);
    } catch (err) {
      report.k8sError = errorLine(err);
    }
    try {
      // The same policy through the agent's API (a name of its own: the Kubernetes one is gone after an even number of events).
      const doc = JSON.stringify(allowPolicy(`${ALLOW_NAME}-api`));
      const write = async (allow: boolean) => {
        const at = process.hrtime.bigint();
        if (allow) await agent.client.putPolicy({ text: doc });
        else await agent.client.deletePolicy({ name: `${ALLOW_NAME}-api`, namespace: NAMESPACE });
        return at;
      };
      await series(trials, write, allowed, probe, report.reference);
    } catch (err) {
      report.referenceError = errorLine(err);
    }
    report.load[1] = await loadAverage();
    return report;
  });
}

export function printK8sPolicy(r: K8sPolicyReport): void {
  const f = (x: number | undefined) => (x === undefined ? '    n/a' : x.toFixed(1).padStart(7));
  const q = (xs: number[], p: number) => (xs.length ? percentile(xs, p) : undefined);
  const seen = (xs: EnforceSample[], get: (x: EnforceSample) => number | undefined) => xs.flatMap((x) => (get(x) === undefined ? [] : [get(x)!]));
  const row = (name: string, xs: number[], n: number, extra = '') => console.log(`  ${name.padEnd(44)} ${f(q(xs, 0.5))} ${f(q(xs, 0.9))} ${f(q(xs, 0.99))}   ${String(n - xs.length).padStart(6)}   ${extra}`);
  console.log(`\nNetworkPolicy event → enforcement on one node, ${r.apiPods.toLocaleString('en')} pods on the node in the API (fake API server; tendril agent, eBPF datapath; ms; load average ${r.load[0].toFixed(1)} → ${r.load[1].toFixed(1)} on ${availableParallelism()} CPUs)`);
  console.log(`  ${''.padEnd(44)} ${'p50'.padStart(7)} ${'p90'.padStart(7)} ${'p99'.padStart(7)}   unseen`);
  const series = (label: string, xs: EnforceSample[], err: string | undefined) => {
    row(`${label} → policy map (${xs.length})`, seen(xs, (x) => x.mapMs), xs.length, err ? `FAILED: ${err}` : '');
    row(`${label} → packets (${xs.length})`, seen(xs, (x) => x.packetMs), xs.length);
    const by = (allow: boolean, get: (x: EnforceSample) => number | undefined) => f(q(seen(xs.filter((x) => x.allow === allow), get), 0.5));
    console.log(`    allow p50: map ${by(true, (x) => x.mapMs)}, packets ${by(true, (x) => x.packetMs)}; removal p50: map ${by(false, (x) => x.mapMs)}, packets ${by(false, (x) => x.packetMs)}`);
  };
  series('API server write', r.k8s, r.k8sError);
  series('reference: agent API', r.reference, r.referenceError);
  const ratio = (get: (x: EnforceSample) => number | undefined) => {
    const [a, b] = [q(seen(r.k8s, get), 0.5), q(seen(r.reference, get), 0.5)];
    return a === undefined || b === undefined || b === 0 ? 'n/a' : `${(a / b).toFixed(2)}x`;
  };
  console.log('  (API server write: create/delete of a NetworkPolicy in the fake; reference: the same policy by PUT/DELETE /policy; the map: the server\'s pinned entry for the client)');
  console.log(`  ratio Kubernetes/API (p50): policy map ${ratio((x) => x.mapMs)}, packets ${ratio((x) => x.packetMs)}`);
  console.log(`  (set-up ${(r.setupMs / 1000).toFixed(1)} s, agent spawn → healthz ok ${(r.agentHealthyMs / 1000).toFixed(2)} s, pods in its cache ${r.cachedPods ?? 'n/a'}; "unseen": not within 3 s)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  if (process.getuid?.() !== 0) {
    console.error('bench: needs root (network namespaces, BPF)');
    process.exit(1);
  }
  printK8sPolicy(await runK8sPolicyBench(Number(process.argv[2] ?? 100), Number(process.argv[3] ?? 1000)));
}
