/**
 * This node's Node object: its pod CIDRs (the `kubernetes` IPAM mode takes
 * them as the node's pod CIDRs) and its addresses (for the node registry).
 */
import { CoreV1Api, type KubeConfig, type V1Node } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import { K8sNodeTimeoutError, K8sStoppedError } from './errors.js';
import { ResourceInformer } from './resourceInformer.js';
import type { OwnNode, RetryOptions } from './types.js';

export interface NodeWatcherOptions {
  kubeConfig: KubeConfig;
  nodeName: string;
  logger: Logger;
  retry?: RetryOptions;
}

/** The parts of a Node the agent uses; spec.podCIDR alone on clusters that predate podCIDRs. */
export function ownNodeOf(node: V1Node): OwnNode {
  const cidrs = node.spec?.podCIDRs?.length ? node.spec.podCIDRs : node.spec?.podCIDR ? [node.spec.podCIDR] : [];
  return {
    name: node.metadata?.name ?? '',
    podCidrs: [...cidrs],
    addresses: (node.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address })),
  };
}

const sameNode = (a: OwnNode, b: OwnNode) => JSON.stringify(a) === JSON.stringify(b);

export class NodeWatcher {
  readonly nodes: ResourceInformer<V1Node>;
  readonly #name: string;
  readonly #log: Logger;
  readonly #listeners = new Set<(node: OwnNode) => void>();
  /** ownNode() callers still waiting: rejected at stop(). */
  readonly #waiters = new Set<() => void>();
  #last: OwnNode | undefined;
  #stopped = false;

  constructor(o: NodeWatcherOptions) {
    this.#name = o.nodeName;
    this.#log = o.logger;
    const core = o.kubeConfig.makeApiClient(CoreV1Api);
    const fieldSelector = `metadata.name=${o.nodeName}`;
    this.nodes = new ResourceInformer<V1Node>({
      resource: 'nodes',
      kubeConfig: o.kubeConfig,
      path: '/api/v1/nodes',
      fieldSelector,
      model: 'V1Node',
      list: () => core.listNode({ fieldSelector }),
      logger: o.logger,
      ...(o.retry ? { retry: o.retry } : {}),
    });
    const changed = (node: V1Node) => {
      if (node.metadata?.name !== this.#name) return;
      const now = ownNodeOf(node);
      const before = this.#last;
      this.#last = now;
      if (before !== undefined && sameNode(before, now)) return;
      this.#log.info({ node: now }, 'own Node changed in Kubernetes');
      for (const l of [...this.#listeners]) {
        try {
          l(now);
        } catch (err) {
          this.#log.error({ err }, 'Node change listener failed');
        }
      }
    };
    this.nodes.on('add', changed);
    this.nodes.on('update', changed);
  }

  /** Starts the informer (again calls do nothing): ownNode() may come before the other watchers start. */
  start(): void {
    this.#stopped = false;
    this.nodes.start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#listeners.clear();
    // A start-up still waiting for the Node is told now, not when its timeout (up to the sync timeout) runs out.
    for (const abort of [...this.#waiters]) abort();
    await this.nodes.stop();
  }

  /** Every later sight of the Node with other pod CIDRs or addresses than before (also its first appearance); returns the unsubscribe. */
  onChange(listener: (node: OwnNode) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  current(): OwnNode | undefined {
    const node = this.nodes.get(this.#name);
    return node === undefined ? undefined : ownNodeOf(node);
  }

  ownNode(timeoutMs: number): Promise<OwnNode> {
    if (this.#stopped) return Promise.reject(new K8sStoppedError(`Node ${this.#name}`));
    this.start();
    const now = this.current();
    if (now !== undefined) return Promise.resolve(now);
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        off();
        this.#waiters.delete(abort);
      };
      const abort = () => {
        done();
        reject(new K8sStoppedError(`Node ${this.#name}`));
      };
      const timer = setTimeout(() => {
        done();
        reject(new K8sNodeTimeoutError(this.#name, timeoutMs, this.nodes.status().lastError));
      }, timeoutMs);
      const off = this.nodes.onChange(() => {
        const node = this.current();
        if (node === undefined) return;
        done();
        resolve(node);
      });
      this.#waiters.add(abort);
    });
  }
}
