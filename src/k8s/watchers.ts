/**
 * Every Kubernetes watcher of the agent behind one object: pods and
 * namespaces (endpoint labels), this node's Node, NetworkPolicies and the
 * tendril policy CRDs, and, when the agent serves services, Services and
 * EndpointSlices. Each resource is an informer of its own; status() is theirs.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { LabelSet } from '../labels/index.js';
import type { Logger } from '../logging/logger.js';
import type { ServiceApi } from '../service/types.js';
import { K8sSyncTimeoutError } from './errors.js';
import { apiServerOf, loadKubeConfig } from './kubeConfig.js';
import { NodeWatcher } from './nodeWatcher.js';
import type { PodCache } from './podEndpointFeed.js';
import { PodWatcher } from './podWatcher.js';
import { PolicyWatcher } from './policyWatcher.js';
import type { ResourceInformer } from './resourceInformer.js';
import { ServiceWatcher } from './serviceWatcher.js';
import type { K8sConnectionOptions, K8sEndpointTarget, K8sPolicyTarget, K8sStatus, OwnNode, RetryOptions } from './types.js';

export interface K8sWatchersOptions {
  connection: K8sConnectionOptions;
  nodeName: string;
  logger: Logger;
  endpoints: K8sEndpointTarget;
  policy: K8sPolicyTarget;
  services?: ServiceApi;
  retry?: RetryOptions;
  /** The node's IPv6 InternalIPs (an IPv6 NodePort's frontends). */
  ipv6NodePortAddresses?: () => readonly string[];
  /** Serve LoadBalancer Services' healthCheckNodePort (ServiceSyncOptions). */
  healthCheckNodePorts?: { host?: string };
}

/** What status and health read of an informer. */
export type FollowedInformer = Pick<ResourceInformer<object>, 'status' | 'isSynced' | 'connected'>;

export class K8sWatchers {
  readonly kubeConfig: KubeConfig;
  readonly #log: Logger;
  readonly #pods: PodWatcher;
  readonly #node: NodeWatcher;
  readonly #policies: PolicyWatcher;
  readonly #services: ServiceWatcher | undefined;
  readonly #informers: readonly ResourceInformer<object>[];
  /** Informers other subsystems own and start (the crd mode's cluster stores): part of status and synced. */
  readonly #followed: FollowedInformer[] = [];
  #started = false;
  #stopped = false;

  /** Reads the connection (throws K8sConfigError); nothing talks to the API server before start() or ownNode(). */
  constructor(o: K8sWatchersOptions) {
    this.kubeConfig = loadKubeConfig(o.connection);
    this.#log = o.logger.child({ component: 'k8s' });
    const common = { kubeConfig: this.kubeConfig, logger: this.#log, ...(o.retry ? { retry: o.retry } : {}) };
    this.#pods = new PodWatcher({ ...common, nodeName: o.nodeName, endpoints: o.endpoints });
    this.#node = new NodeWatcher({ ...common, nodeName: o.nodeName });
    this.#policies = new PolicyWatcher({ ...common, target: o.policy });
    this.#services =
      o.services === undefined
        ? undefined
        : new ServiceWatcher({
            ...common,
            nodeName: o.nodeName,
            services: o.services,
            ...(o.ipv6NodePortAddresses ? { ipv6NodePortAddresses: o.ipv6NodePortAddresses } : {}),
            ...(o.healthCheckNodePorts ? { healthCheckNodePorts: o.healthCheckNodePorts } : {}),
          });
    this.#informers = [
      this.#pods.pods,
      this.#pods.namespaces,
      this.#node.nodes,
      ...this.#policies.informers,
      ...(this.#services?.informers ?? []),
    ] as ResourceInformer<object>[];
  }

  /** Starts every informer; resolves when all have listed once (or rejects after timeoutMs with K8sSyncTimeoutError, informers keep running). */
  async start(o: { timeoutMs?: number } = {}): Promise<void> {
    if (!this.#started) {
      this.#started = true;
      this.#log.info({ apiServer: apiServerOf(this.kubeConfig) }, 'Kubernetes watchers starting');
      this.#pods.start();
      this.#node.start();
      for (const i of this.#policies.informers) i.start();
      this.#services?.start();
    }
    const all = Promise.all(this.#informers.map((i) => i.synced)).then(() => undefined);
    if (o.timeoutMs === undefined) return all;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new K8sSyncTimeoutError(o.timeoutMs!, this.#informers.filter((i) => !i.isSynced).map((i) => i.resource)));
      }, o.timeoutMs);
    });
    try {
      await Promise.race([all, timeout]);
      this.#log.info({ resources: this.#informers.length }, 'Kubernetes watchers synced');
    } finally {
      clearTimeout(timer);
    }
  }

  /** This node's Node object, waited for up to timeoutMs (used before IPAM starts with --ipam kubernetes). May be called before start(). */
  ownNode(timeoutMs: number): Promise<OwnNode> {
    return this.#node.ownNode(timeoutMs);
  }

  /** Later changes of this node's pod CIDRs or addresses (also the Node appearing after it was missing); returns the unsubscribe. */
  onNodeChange(listener: (node: OwnNode) => void): () => void {
    return this.#node.onChange(listener);
  }

  /** The pod's endpoint labels once the pod is in the cache (waits up to timeoutMs; undefined when it does not appear). */
  podLabels(namespace: string, name: string, timeoutMs: number): Promise<LabelSet | undefined> {
    return this.#pods.podLabels(namespace, name, timeoutMs);
  }

  /** This node's pods as cached (PodEndpointFeed takes the pods' uids from here). */
  get podCache(): PodCache {
    return this.#pods.pods;
  }

  /** Brings every endpoint's labels to what the API says (after endpoints are restored). */
  reconcileEndpoints(): Promise<void> {
    return this.#pods.reconcileAll();
  }

  /** One pod's endpoints to the labels the API says (the agent calls it after a CNI ADD, closing the gap between podLabels() and the endpoint's creation). */
  reconcilePod(namespace: string, name: string): Promise<void> {
    return this.#pods.reconcilePod(namespace, name);
  }

  /** Resolves once the policy changes seen so far reached the policy target. */
  policiesSettled(): Promise<void> {
    return this.#policies.settled();
  }

  /** Resolves once Services were handed over in full the first time (immediately without services). */
  servicesSynced(): Promise<void> {
    return this.#services?.initialSyncDone() ?? Promise.resolve();
  }

  /** The Kubernetes Service (`namespace/name`) behind service ID `id`, when a Service holds it. */
  serviceName(id: number): string | undefined {
    return this.#services?.sync.serviceName(id);
  }

  /** Reports an informer another subsystem owns (started and stopped by it) with the watchers' own: health waits for it too. */
  follow(informer: FollowedInformer): void {
    this.#followed.push(informer);
  }

  status(): K8sStatus {
    const all = [...this.#informers, ...this.#followed];
    return {
      apiServer: apiServerOf(this.kubeConfig),
      connected: all.every((i) => i.connected),
      synced: this.synced,
      resources: all.map((i) => i.status()),
    };
  }

  get synced(): boolean {
    return this.#informers.every((i) => i.isSynced) && this.#followed.every((i) => i.isSynced);
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    await Promise.all([this.#pods.stop(), this.#node.stop(), ...this.#policies.informers.map((i) => i.stop()), this.#services?.stop()]);
    await this.#policies.settled();
  }
}
