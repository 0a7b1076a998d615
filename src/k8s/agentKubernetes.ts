/**
 * The agent's side of the Kubernetes watchers: when they start, what they
 * change (endpoints' labels, policies, services), this node's Node object
 * (pod CIDRs for `--ipam kubernetes`, addresses for the node registry), and
 * the pod labels a CNI ADD waits for.
 */
import { ConfigError } from '../errors/configError.js';
import type { LabelSet } from '../labels/index.js';
import type { Logger } from '../logging/logger.js';
import { tryParseIp } from '../netip/index.js';
import { type Policy, type PolicyFilter, refuseNamedPorts } from '../policy/index.js';
import type { ServiceApi, ServiceChange, ServiceSpec } from '../service/types.js';
import { type K8sAgentConfig, k8sConnection, type NodeFacts, nodeFacts } from './agentSettings.js';
import { K8sSyncTimeoutError } from './errors.js';
import type { K8sEndpointTarget, K8sPolicyTarget, K8sStatus, OwnNode, RetryOptions } from './types.js';
import { K8sWatchers } from './watchers.js';

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
    apply: (changes: readonly ServiceChange[]) => this.serviceApi().apply(changes),
    get: (id: number) => this.bound?.services?.get(id),
    list: () => this.bound?.services?.list() ?? [],
  };
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
      // As kube-proxy and Cilium: a Local LoadBalancer's cloud load balancer asks each node here.
      ...(o.services ? { healthCheckNodePorts: {} } : {}),
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
