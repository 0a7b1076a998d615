import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import type { Result100 } from '../../src/cni/index.js';
import { formatIp, nextIp, parsePrefix, prefixFirst } from '../../src/netip/index.js';
import { AgentProcess, tendrilPluginDir } from './agentHarness.js';
import { type Addresses, addressesByVersion, podCidrArgs, versionOf } from './family.js';
import type { NetnsPool } from './netns.js';
import { run, runOk } from './run.js';
import { REFERENCE_PLUGIN_DIR, TENDRIL_BIN } from './tendrilBin.js';

/**
 * One node running the eBPF datapath: an agent in its own namespace with its
 * own bpffs root (`/sys/fs/bpf/tdl-<random>`, removed on cleanup, so pinned
 * maps and links of one test never meet another's), and a libcni runtime
 * that adds pods through tendril-cni.
 */
export interface DatapathNode {
  node: string;
  nodePath: string;
  agent: AgentProcess;
  runtime: CniRuntime;
  bpffsRoot: string;
  /** The first pod CIDR (IPv4 on a dual-stack node). */
  podCidr: string;
  /** Every pod CIDR, one per IP version the node's pods get: IPv4 first. */
  podCidrs: string[];
  /** The pods' gateway: the node's router address (first address of the first pod CIDR). */
  routerIp: string;
  /** The router address of each IP version (first address of that version's pod CIDR). */
  routerIps: Addresses;
  conflist: NetworkConfigList;
  /** `tendril <args> --socket <agent socket>`. */
  cli(args: readonly string[], input?: string): ReturnType<typeof run>;
  cleanup(): Promise<void>;
}

export interface DatapathNodeOptions {
  nodeName: string;
  /** A /24 (the router takes .1); ignored when podCidrs is given. */
  podCidr: string;
  /** The pod CIDRs of a dual-stack or IPv6 node (family.ts podCidrsOf), one `--pod-cidr` each. */
  podCidrs?: string[];
  extraArgs?: string[];
  /** The agent's default map sizes (AgentProcessOptions.defaultMapSizes). */
  defaultMapSizes?: boolean;
  /** Runs in the new node namespace before the agent starts (e.g. links the agent should find). */
  beforeStart?: (node: string) => Promise<void>;
}

export async function startDatapathNode(pool: NetnsPool, opts: DatapathNodeOptions): Promise<DatapathNode> {
  const nodeNs = await pool.add('node');
  const podCidrs = opts.podCidrs ?? [opts.podCidr];
  const cleanups: Array<() => Promise<void>> = [];
  const cleanup = async () => {
    for (const c of cleanups.splice(0).reverse()) {
      try {
        await c();
      } catch (err) {
        process.stderr.write(`datapath node cleanup: ${(err as Error).message}\n`);
      }
    }
  };
  try {
    if (opts.beforeStart) await opts.beforeStart(nodeNs.name);
    const bpffsRoot = `/sys/fs/bpf/tdl-${randomBytes(4).toString('hex')}`;
    // Pins go after the agent is dead (cleanups run in reverse).
    cleanups.push(() => rm(bpffsRoot, { recursive: true, force: true }));
    const agent = await AgentProcess.create({
      nodeNetns: nodeNs.name,
      nodeName: opts.nodeName,
      args: [...podCidrArgs(podCidrs), '--datapath', 'bpf', '--bpffs-root', bpffsRoot, ...(opts.extraArgs ?? [])],
      ...(opts.defaultMapSizes === true ? { defaultMapSizes: true } : {}),
    });
    cleanups.push(() => agent.cleanup());
    const bin = await tendrilPluginDir();
    cleanups.push(bin.cleanup);
    const cache = await mkdtemp(join(tmpdir(), 'tdl-cache-'));
    cleanups.push(() => rm(cache, { recursive: true, force: true }));
    const runtime = new CniRuntime({ pluginDirs: [bin.dir, REFERENCE_PLUGIN_DIR], cacheDir: cache });
    await agent.start();
    const conflist = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdldatapath', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
    const routerIps = addressesByVersion(podCidrs.map(routerOf));
    const routerIp = routerOf(podCidrs[0]!);
    return {
      node: nodeNs.name,
      nodePath: nodeNs.path,
      agent,
      runtime,
      bpffsRoot,
      podCidr: podCidrs[0]!,
      podCidrs,
      routerIp,
      routerIps,
      conflist,
      cli: (args, input) => run([TENDRIL_BIN, ...args, '--socket', agent.socket], input === undefined ? {} : { input }),
      cleanup,
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** The router address of a pod CIDR: its first address after the network address (10.0.0.1, fd74:…::1). */
export function routerOf(cidr: string): string {
  return formatIp(nextIp(prefixFirst(parsePrefix(cidr)))!);
}

export interface PodSpec {
  /** Short name: the pod name and part of its netns name. */
  name: string;
  /** Kubernetes namespace of the pod. */
  namespace: string;
  labels: Record<string, string>;
  /** Labels of the pod's namespace (namespaceSelector matches these), served by the fake API server (datapathScene.ts): never in CNI_ARGS. */
  namespaceLabels?: Record<string, string>;
}

export interface Pod {
  spec: PodSpec;
  netns: string;
  netnsPath: string;
  containerId: string;
  /** The first address of the CNI result (IPv4 on a dual-stack pod). */
  ip: string;
  /** Its addresses by IP version (family.ts addressIn picks one). */
  addresses: Addresses;
  /** The gateway the CNI result gives for each IP version. */
  gateways: Addresses;
  endpoint: Endpoint;
}

/**
 * The CNI_ARGS of a pod: its namespace, name and labels. Its namespace's
 * labels are not among them: the agent takes those from the API server only
 * (the scene serves them, datapathScene.ts).
 */
export function podRuntimeConf(spec: PodSpec, containerId: string, netnsPath: string): RuntimeConf {
  const labels = Object.entries(spec.labels).map(([k, v]) => `${k}=${v}`);
  return {
    containerId,
    netns: netnsPath,
    ifName: 'eth0',
    args: [
      ['K8S_POD_NAMESPACE', spec.namespace],
      ['K8S_POD_NAME', spec.name],
      ['TENDRIL_LABELS', labels.join(',')],
    ],
  };
}

/** ADD through libcni and tendril-cni; answers once ADD has returned (the datapath is then in force). */
export async function addPod(pool: NetnsPool, node: DatapathNode, spec: PodSpec): Promise<Pod> {
  // Pods of different namespaces may share a name: the netns and container ID carry both.
  const ns = await pool.add(`${spec.namespace}-${spec.name}`.replace(/[^A-Za-z0-9-]/g, ''));
  const containerId = `tdl-${pool.prefix}-${spec.namespace}-${spec.name}`;
  const result = (await node.runtime.addNetworkList(node.conflist, podRuntimeConf(spec, containerId, ns.path))) as Result100;
  const ips = result.ips ?? [];
  const ip = ips[0]!.address.split('/')[0]!;
  const addresses = addressesByVersion(ips.map((i) => i.address));
  const gateways = addressesByVersion(ips.flatMap((i) => (i.gateway ? [i.gateway] : [])));
  const endpoint = (await node.agent.client.getEndpoint(`container-id:${containerId}`)) as Endpoint;
  return { spec, netns: ns.name, netnsPath: ns.path, containerId, ip, addresses, gateways, endpoint };
}

export async function delPod(node: DatapathNode, pod: Pod): Promise<void> {
  await node.runtime.delNetworkList(node.conflist, podRuntimeConf(pod.spec, pod.containerId, pod.netnsPath));
}

/** The endpoint's labels as the agent holds them now (after a label patch too). */
export async function endpointLabels(node: DatapathNode, pod: Pod): Promise<string[]> {
  return ((await node.agent.client.getEndpoint(pod.endpoint.id)) as Endpoint).labels;
}

/**
 * An "outside" host: a namespace that is no pod, linked to the node by a veth
 * pair (node side `tdlout0`, `gateway`/24 or its /120 mirror), holding
 * `addresses` and a route to each pod CIDR through the node's gateway of that
 * IP version. Traffic from it reaches pods as the world (or a CIDR identity) does.
 */
export interface OutsideHost {
  netns: string;
  netnsPath: string;
  /** The first gateway (as given). */
  gateway: string;
  addresses: string[];
}

/** The outside link's prefix length: a /24, or its IPv6 mirror /120 (family.ts). */
const outsideLength = (address: string) => (versionOf(address) === 4 ? 24 : 120);

export async function addOutsideHost(
  pool: NetnsPool,
  node: string,
  opts: { gateway: string | string[]; addresses: string[]; podCidr: string | string[] },
): Promise<OutsideHost> {
  const gateways = typeof opts.gateway === 'string' ? [opts.gateway] : opts.gateway;
  const podCidrs = typeof opts.podCidr === 'string' ? [opts.podCidr] : opts.podCidr;
  // nodad: a fresh IPv6 address is tentative for a second (DAD) and would drop the first probes.
  const addrArgs = (a: string) => ['addr', 'add', `${a}/${outsideLength(a)}`, ...(versionOf(a) === 6 ? ['nodad'] : [])];
  const ns = await pool.add('out');
  await runOk(['ip', '-n', node, 'link', 'add', 'tdlout0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.path]);
  for (const g of gateways) await runOk(['ip', '-n', node, ...addrArgs(g), 'dev', 'tdlout0']);
  await runOk(['ip', '-n', node, 'link', 'set', 'tdlout0', 'up']);
  for (const a of opts.addresses) await runOk(['ip', '-n', ns.name, ...addrArgs(a), 'dev', 'eth0']);
  await runOk(['ip', '-n', ns.name, 'link', 'set', 'eth0', 'up']);
  for (const cidr of podCidrs) {
    const via = gateways.find((g) => versionOf(g) === versionOf(cidr.split('/')[0]!));
    if (via === undefined) throw new Error(`outside host: no gateway of the IP version of pod CIDR ${cidr} (gateways ${gateways.join(', ')})`);
    await runOk(['ip', '-n', ns.name, 'route', 'add', cidr, 'via', via]);
  }
  return { netns: ns.name, netnsPath: ns.path, gateway: gateways[0]!, addresses: opts.addresses };
}

/** `tendril policy import -` of a YAML/JSON text; fails with the CLI's message. */
export async function importPolicy(node: DatapathNode, text: string): Promise<{ revision: number; policies: string[]; regenerated: number[] }> {
  const r = await node.cli(['policy', 'import', '-', '-o', 'json'], text);
  if (r.code !== 0) throw new Error(`policy import failed (${r.code}): ${r.stderr}${r.stdout}`);
  return JSON.parse(r.stdout) as { revision: number; policies: string[]; regenerated: number[] };
}

/** `tendril policy delete <args>`, then waits until the endpoints it regenerated enforce the change. */
export async function deletePolicyAndWait(node: DatapathNode, args: string[]): Promise<string[]> {
  const r = await node.cli(['policy', 'delete', ...args, '-o', 'json']);
  if (r.code !== 0) throw new Error(`policy delete failed (${r.code}): ${r.stderr}${r.stdout}`);
  const body = JSON.parse(r.stdout) as { revision: number; deleted: string[]; regenerated: number[] };
  await waitRealized(node, body.regenerated, body.revision);
  return body.deleted;
}

/** `dport` as the trace takes it: `80/tcp`, `53/udp`, `icmp`. */
export function traceDport(p: { proto: 'tcp' | 'udp' | 'icmp'; port?: number }): string {
  return p.proto === 'icmp' ? 'icmp' : `${p.port}/${p.proto}`;
}

/** The policy engine's verdict for a flow, through the API (POST /policy/trace). */
export async function traceVerdict(node: DatapathNode, src: readonly string[], dst: readonly string[], dport: string): Promise<'allow' | 'deny'> {
  const r = await node.agent.client.tracePolicy({ src: [...src], dst: [...dst], dport });
  return r.verdict;
}

/** Runs `tendril …` and parses its `-o json` output, failing loudly with stderr. */
export async function cliJson<T>(node: DatapathNode, args: readonly string[]): Promise<T> {
  const r = await node.cli([...args, '-o', 'json']);
  if (r.code !== 0) throw new Error(`tendril ${args.join(' ')} exited ${r.code}: ${r.stderr}${r.stdout}`);
  return JSON.parse(r.stdout) as T;
}

/**
 * Waits until each endpoint's datapath realizes policy revision `revision`
 * (GET /endpoint/{id}/policy: realizedPolicyRevision, datapathEnforced):
 * import answers when the engine has computed, the maps may follow.
 */
export async function waitRealized(node: DatapathNode, endpointIds: readonly number[], revision: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (const id of endpointIds) {
    for (;;) {
      const p = await node.agent.client.getEndpointPolicy(id);
      if (p.datapathEnforced && p.realizedPolicyRevision >= revision) break;
      if (Date.now() > deadline) {
        throw new Error(`endpoint ${id}: realized policy revision ${p.realizedPolicyRevision} (datapathEnforced ${p.datapathEnforced}) has not reached ${revision} in ${timeoutMs} ms${p.error ? `: ${p.error}` : ''}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** Imports policy text and waits until every endpoint it regenerated enforces it. */
export async function importPolicyAndWait(node: DatapathNode, text: string): Promise<{ revision: number; policies: string[]; regenerated: number[] }> {
  const r = await importPolicy(node, text);
  await waitRealized(node, r.regenerated, r.revision);
  return r;
}
