/**
 * The agent's side of the Kubernetes watchers: when they start, what they
 * change (endpoints' labels, policies, services), this node's Node object
 * (pod CIDRs for `--ipam kubernetes`, addresses for the node registry), and
 * the pod labels a CNI ADD waits for.
 */
import type { LabelSet } from '../labels/index.js';
import type { Logger } from '../logging/logger.js';
import { formatIp, formatPrefix, tryParseIp, tryParsePrefix } from '../netip/index.js';
import type { NodeAddress } from '../node/index.js';
import { type Policy, type PolicyFilter, refuseNamedPorts } from '../policy/index.js';
import type { ServiceApi, ServiceSpec } from '../service/types.js';
import {
  type K8sEndpointTarget,
  k8sEnabled,
  type K8sPolicyTarget,
  type K8sStatus,
  K8sSyncTimeoutError,
  K8sWatchers,
  type OwnNode,
  type RetryOptions,
} from './index.js';
import { ConfigError } from '../errors/configError.js';

/** The agent settings the watchers and the Node's facts depend on (the agent's configuration has them). */
export interface K8sAgentConfig {
  nodeName: string;
  ipam: string;
  datapath: string;
  routingMode?: string | undefined;
  nodeIp?: string | undefined;
  podCidrs: string[];
  k8sKubeconfig?: string | undefined;
  k8sApiServer?: string | undefined;
  k8sSyncTimeoutSeconds: number;
}

/** How the agent reaches the Kubernetes API server, from its configuration (src/k8s's K8sConnectionOptions). */
export function k8sConnection(config: Pick<K8sAgentConfig, 'k8sKubeconfig' | 'k8sApiServer'>): { kubeconfig?: string; apiServer?: string } {
  return { ...(config.k8sKubeconfig !== undefined ? { kubeconfig: config.k8sKubeconfig } : {}), ...(config.k8sApiServer !== undefined ? { apiServer: config.k8sApiServer } : {}) };
}

/** --ipam kubernetes reads the Node's pod CIDRs: Kubernetes must be on (a flag, or in a pod with a service account). */
export function requireKubernetesForIpam(config: Pick<K8sAgentConfig, 'ipam' | 'k8sKubeconfig' | 'k8sApiServer'>, env: NodeJS.ProcessEnv = process.env): void {
  if (config.ipam !== 'kubernetes' || k8sEnabled(k8sConnection(config), env)) return;
  throw new ConfigError('--ipam kubernetes needs Kubernetes: give --k8s-kubeconfig or --k8s-api-server, or run the agent in a pod with a service account');
}

/** How long a CNI ADD waits for its pod to be in the watchers' cache by default. */
export const DEFAULT_POD_WAIT_MS = 5000;
/** Without --ipam kubernetes the Node is only a source of addresses: start-up waits for it this long at most. */
const OPTIONAL_NODE_WAIT_MS = 5000;

/** What the agent's subsystems offer the watchers once they exist. */
export interface K8sTargets {
  endpoints: {
    list(): Array<{ id: number; podNamespace?: string; podName?: string; labels: readonly string[] }>;
    updateLabels(id: number, labels: LabelSet): Promise<unknown>;
  };
  policy: K8sPolicyTarget;
  services?: ServiceApi;
}

/**
 * The watchers are made before the subsystems they change (IPAM needs the
 * Node's pod CIDRs before anything else starts), so they are handed these
 * forwarders, bound to the subsystems once the agent has them. Nothing
 * calls them before start(), which comes after bind().
 */
class Forwarders {
  private bound: K8sTargets | undefined;

  bind(targets: K8sTargets): void {
    this.bound = targets;
  }

  private get targets(): K8sTargets {
    if (!this.bound) throw new Error('Kubernetes watchers used before the agent bound its subsystems');
    return this.bound;
  }

  readonly endpoints: K8sEndpointTarget = {
    list: () => this.bound?.endpoints.list() ?? [],
    updateLabels: (id, labels) => this.targets.endpoints.updateLabels(id, labels),
  };

  readonly policy: K8sPolicyTarget = {
    upsertPolicies: (policies: readonly Policy[]) => {
      // A named port would resolve to nothing here: the watcher logs the refusal and skips the policy.
      refuseNamedPorts(policies);
      return this.targets.policy.upsertPolicies(policies);
    },
    deletePolicies: (filter: PolicyFilter) => this.targets.policy.deletePolicies(filter),
  };

  private serviceApi(): ServiceApi {
    const s = this.targets.services;
    if (!s) throw new Error('services are not available on this datapath');
    return s;
  }

  readonly services: ServiceApi = {
    upsert: (id: number, spec: ServiceSpec) => this.serviceApi().upsert(id, spec),
    delete: (id: number) => this.serviceApi().delete(id),
    get: (id: number) => this.bound?.services?.get(id),
    list: () => this.bound?.services?.list() ?? [],
  };
}

/** The Node facts the agent takes at start: pod CIDRs (canonical) and addresses by type. */
export interface NodeFacts {
  name: string;
  podCidrs: string[];
  internalIps: string[];
  externalIps: string[];
}

function addressesOfType(node: OwnNode, type: string): string[] {
  const out: string[] = [];
  for (const a of node.addresses) {
    if (a.type !== type) continue;
    const ip = tryParseIp(a.address);
    if (ip !== undefined) out.push(formatIp(ip));
  }
  return out;
}

export function nodeFacts(node: OwnNode): NodeFacts {
  const podCidrs = node.podCidrs.map((c) => {
    const p = tryParsePrefix(c);
    if (p === undefined) throw new ConfigError(`Node ${node.name}: spec.podCIDRs holds ${JSON.stringify(c)}, which is not a CIDR (addr/len without host bits)`);
    return formatPrefix(p);
  });
  return { name: node.name, podCidrs, internalIps: addressesOfType(node, 'InternalIP'), externalIps: addressesOfType(node, 'ExternalIP') };
}

/**
 * The configuration in effect once the Node is known: with `--ipam
 * kubernetes` its pod CIDRs are the node's (none is a start error, there
 * would be nothing to number pods from); without --node-ip its first
 * InternalIP (IPv4 first) is the node IP, as the kubelet registered it.
 */
export function configWithNode<C extends K8sAgentConfig>(config: C, node: NodeFacts | undefined): C {
  let out = config;
  if (config.ipam === 'kubernetes') {
    if (!node) throw new ConfigError(`--ipam kubernetes: no Node ${config.nodeName} in the Kubernetes API (is --node-name the Node's name?)`);
    if (node.podCidrs.length === 0) {
      throw new ConfigError(`--ipam kubernetes: Node ${node.name} has no spec.podCIDRs (the controller manager allocates them with --allocate-node-cidrs; or give the Node spec.podCIDRs)`);
    }
    out = { ...out, podCidrs: node.podCidrs };
  }
  if (config.nodeIp === undefined && node) {
    const internal = [...node.internalIps].sort((a, b) => (tryParseIp(a)!.family - tryParseIp(b)!.family));
    if (internal[0] !== undefined) out = { ...out, nodeIp: internal[0] };
  }
  return out;
}

/**
 * The Node's addresses for the own registry record, after the node IP's
 * InternalIP: its other InternalIPs (an IPv4 one only when the node IP is
 * IPv4 too, since the first IPv4 InternalIP is the tunnel endpoint) and its
 * ExternalIPs.
 */
export function registryAddresses(node: NodeFacts | undefined, nodeIp: string): NodeAddress[] {
  if (!node) return [];
  const nodeIpV4 = tryParseIp(nodeIp)?.family === 4;
  const internal = node.internalIps.filter((ip) => ip !== nodeIp && (nodeIpV4 || tryParseIp(ip)?.family !== 4));
  return [...internal.map((ip) => ({ type: 'InternalIP' as const, ip })), ...node.externalIps.map((ip) => ({ type: 'ExternalIP' as const, ip }))];
}

export interface AgentKubernetesOptions {
  config: K8sAgentConfig;
  log: Logger;
  /** Whether the datapath load-balances: only then are Services and EndpointSlices followed. */
  services: boolean;
  /** How long a CNI ADD waits for its pod (default DEFAULT_POD_WAIT_MS). */
  podWaitMs?: number;
  /** The watchers' back-off after an error (tests shorten it). */
  retry?: RetryOptions;
}

/** The agent's Kubernetes watchers with the agent's policy around them (what to wait for, for how long). */
export class AgentKubernetes {
  readonly watchers: K8sWatchers;
  private readonly forwarders = new Forwarders();
  private readonly log: Logger;
  private readonly syncTimeoutMs: number;
  private readonly podWaitMs: number;
  private node: NodeFacts | undefined;
  private unsubscribeNode: (() => void) | undefined;
  private stopping: Promise<void> | undefined;

  constructor(private readonly o: AgentKubernetesOptions) {
    this.log = o.log.child({ subsys: 'k8s' });
    this.syncTimeoutMs = o.config.k8sSyncTimeoutSeconds * 1000;
    this.podWaitMs = o.podWaitMs ?? DEFAULT_POD_WAIT_MS;
    this.watchers = new K8sWatchers({
      connection: k8sConnection(o.config),
      nodeName: o.config.nodeName,
      logger: this.log,
      endpoints: this.forwarders.endpoints,
      policy: this.forwarders.policy,
      ...(o.services ? { services: this.forwarders.services } : {}),
      // The Node object read at start (this.node): its IPv6 InternalIPs carry IPv6 NodePorts.
      ipv6NodePortAddresses: () => (this.node?.internalIps ?? []).filter((ip) => tryParseIp(ip)?.family === 6),
      ...(o.retry ? { retry: o.retry } : {}),
    });
  }

  /** The Node as start-up found it (undefined: not found and not required). */
  get ownNode(): NodeFacts | undefined {
    return this.node;
  }

  /**
   * This node's Node object before IPAM starts: waited for up to the sync
   * timeout with --ipam kubernetes (its pod CIDRs are needed; not found is a
   * start error), a few seconds otherwise (its addresses are a nicety).
   */
  async loadOwnNode(): Promise<NodeFacts | undefined> {
    const required = this.o.config.ipam === 'kubernetes';
    const timeoutMs = required ? this.syncTimeoutMs : Math.min(this.syncTimeoutMs, OPTIONAL_NODE_WAIT_MS);
    try {
      this.node = nodeFacts(await this.watchers.ownNode(timeoutMs));
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      if (required) throw new ConfigError(`--ipam kubernetes: ${(err as Error).message}`, undefined, { cause: err });
      this.log.warn({ err, node: this.o.config.nodeName }, 'this node\'s Node object is not in the Kubernetes API: the node registry gets no Node addresses');
      return undefined;
    }
    this.log.info({ node: this.node.name, podCidrs: this.node.podCidrs, internalIps: this.node.internalIps, externalIps: this.node.externalIps }, 'Node object read');
    return this.node;
  }

  /** The agent's subsystems, before start(). */
  bind(targets: K8sTargets): void {
    this.forwarders.bind(targets);
  }

  /**
   * Starts every watcher and waits for the first sync, bounded by the sync
   * timeout: past it the agent goes on with what it has (the watchers keep
   * trying, /healthz fails until they are synced) instead of leaving pods
   * without a CNI.
   */
  async start(): Promise<void> {
    const started = Date.now();
    try {
      await this.watchers.start({ timeoutMs: this.syncTimeoutMs });
    } catch (err) {
      if (!(err instanceof K8sSyncTimeoutError)) throw err;
      this.log.error({ err: err.toJSON(), apiServer: this.watchers.status().apiServer, timeoutMs: this.syncTimeoutMs }, 'Kubernetes not synced in time: going on with what is known; /healthz fails until the first sync is done');
      return;
    }
    // Listed is not yet applied: the policies and services seen are in force before endpoints regenerate.
    await this.watchers.policiesSettled();
    await this.watchers.servicesSynced();
    const status = this.watchers.status();
    this.log.info(
      { apiServer: status.apiServer, syncMs: Date.now() - started, objects: Object.fromEntries(status.resources.map((r) => [r.resource, r.objects])) },
      'Kubernetes synced',
    );
  }

  /**
   * Follows the Node after start: new addresses go to the registry
   * (`onAddresses`); changed pod CIDRs under --ipam kubernetes are only
   * warned about, since pods are not re-addressed live.
   */
  followOwnNode(onAddresses: () => void): void {
    const seen = (node: OwnNode) => {
      let now: NodeFacts;
      try {
        now = nodeFacts(node);
      } catch (err) {
        this.log.warn({ err }, 'the Node changed to something unusable; kept what was read before');
        return;
      }
      const before = this.node;
      this.node = now;
      if (this.o.config.ipam === 'kubernetes' && before && now.podCidrs.join() !== before.podCidrs.join()) {
        this.log.warn({ node: now.name, was: before.podCidrs, now: now.podCidrs }, 'the Node\'s spec.podCIDRs changed: pods keep being numbered from the CIDRs read at start until the agent restarts');
      }
      if (!before || before.internalIps.join() !== now.internalIps.join() || before.externalIps.join() !== now.externalIps.join()) onAddresses();
    };
    this.unsubscribeNode = this.watchers.onNodeChange(seen);
    // A Node start-up gave up on may be in the cache by now (the watcher tells only of later changes).
    if (!this.node) {
      this.watchers.ownNode(0).then(seen, () => undefined);
    }
  }

  /**
   * A pod's labels as the API server has them, waited for briefly (the
   * kubelet may run the CNI ADD before the watch delivered the pod);
   * undefined when it does not appear.
   */
  podLabels(namespace: string, name: string): Promise<LabelSet | undefined> {
    return this.watchers.podLabels(namespace, name, this.podWaitMs);
  }

  get podWaitSeconds(): number {
    return this.podWaitMs / 1000;
  }

  /**
   * After an ADD made the pod's endpoint: a relabel that came between
   * podLabels() and the endpoint's registration found no endpoint to
   * change, so the pod's endpoints are brought to the API's labels once more
   * (in the background: the ADD's answer does not wait for it).
   */
  endpointCreated(namespace: string, name: string): void {
    this.watchers.reconcilePod(namespace, name).catch((err: unknown) => this.log.error({ err, pod: `${namespace}/${name}` }, 'bringing a new endpoint to its pod\'s labels failed'));
  }

  reconcileEndpoints(): Promise<void> {
    return this.watchers.reconcileEndpoints();
  }

  status(): K8sStatus {
    return this.watchers.status();
  }

  /** Stops polling and the watchers; a second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.unsubscribeNode?.();
      await this.watchers.stop();
    })();
    return this.stopping;
  }
}
