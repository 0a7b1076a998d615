/**
 * Pods on this node and every namespace: a pod's labels, its service account
 * and its namespace's labels are its endpoint's `k8s:` labels. A change of
 * any of them relabels the endpoints of that pod (its identity, hence the
 * policy enforced on it and on its peers, follows). Labels of other sources
 * an endpoint has (`container:`…) are kept.
 */
import { Backoff } from '../async/backoff.js';
import { CoreV1Api, type KubeConfig, type V1Namespace, type V1Pod } from '@kubernetes/client-node';
import { LabelSet, LabelSource } from '../labels/index.js';
import type { Logger } from '../logging/logger.js';
import { k8sPodLabels } from './podLabels.js';
import { ResourceInformer } from './resourceInformer.js';
import { DEFAULT_RETRY, type K8sEndpointTarget, type RetryOptions } from './types.js';

export interface PodWatcherOptions {
  kubeConfig: KubeConfig;
  nodeName: string;
  endpoints: K8sEndpointTarget;
  logger: Logger;
  retry?: RetryOptions;
}

const podKey = (namespace: string, name: string) => `${namespace}/${name}`;

function splitKey(key: string): [string, string] {
  const slash = key.indexOf('/');
  return [key.slice(0, slash), key.slice(slash + 1)];
}

/**
 * The labels an endpoint should have: its labels of other sources, plus the
 * pod's. An endpoint whose stored labels no longer parse gets the pod's alone.
 */
export function endpointTargetLabels(current: readonly string[], pod: LabelSet): LabelSet {
  let kept: LabelSet;
  try {
    kept = LabelSet.parse(current).filter((l) => l.source !== LabelSource.K8s);
  } catch {
    kept = LabelSet.EMPTY;
  }
  return kept.with(pod);
}

function sameLabels(current: readonly string[], target: LabelSet): boolean {
  try {
    return LabelSet.parse(current).equals(target);
  } catch {
    return false;
  }
}

export class PodWatcher {
  readonly pods: ResourceInformer<V1Pod>;
  readonly namespaces: ResourceInformer<V1Namespace>;
  readonly #endpoints: K8sEndpointTarget;
  readonly #log: Logger;
  readonly #retry: RetryOptions;
  /** Pods whose endpoints need a look, and the one pass running per pod. */
  readonly #dirty = new Set<string>();
  readonly #running = new Map<string, Promise<void>>();
  readonly #retryTimers = new Map<string, NodeJS.Timeout>();
  /** podLabels() callers still waiting: answered at stop(). */
  readonly #waiters = new Set<(labels: LabelSet | undefined) => void>();
  readonly #backoffs = new Map<string, Backoff>();
  #ready = false;
  #stopped = false;

  constructor(o: PodWatcherOptions) {
    this.#endpoints = o.endpoints;
    this.#log = o.logger;
    this.#retry = o.retry ?? DEFAULT_RETRY;
    const core = o.kubeConfig.makeApiClient(CoreV1Api);
    const fieldSelector = `spec.nodeName=${o.nodeName}`;
    const common = { kubeConfig: o.kubeConfig, logger: o.logger, ...(o.retry ? { retry: o.retry } : {}) };
    this.pods = new ResourceInformer<V1Pod>({
      ...common,
      resource: 'pods',
      path: '/api/v1/pods',
      fieldSelector,
      model: 'V1Pod',
      list: () => core.listPodForAllNamespaces({ fieldSelector }),
    });
    this.namespaces = new ResourceInformer<V1Namespace>({
      ...common,
      resource: 'namespaces',
      path: '/api/v1/namespaces',
      model: 'V1Namespace',
      list: () => core.listNamespace(),
    });
    const podChanged = (pod: V1Pod) => {
      if (this.#ready && pod.metadata?.name) this.#request(podKey(pod.metadata.namespace ?? 'default', pod.metadata.name));
    };
    this.pods.on('add', podChanged);
    this.pods.on('update', podChanged);
    const namespaceChanged = (ns: V1Namespace) => {
      if (!this.#ready || !ns.metadata?.name) return;
      for (const pod of this.pods.list(ns.metadata.name)) podChanged(pod);
    };
    this.namespaces.on('add', namespaceChanged);
    this.namespaces.on('update', namespaceChanged);
    this.namespaces.on('delete', namespaceChanged);
    // Until both caches hold their first list a pod's labels are not known
    // (its namespace's may be missing): nothing is relabelled before that.
    const maybeReady = () => {
      if (this.#ready || !this.pods.isSynced || !this.namespaces.isSynced) return;
      this.#ready = true;
      void this.reconcileAll();
    };
    this.pods.onChange(maybeReady);
    this.namespaces.onChange(maybeReady);
  }

  get ready(): boolean {
    return this.#ready;
  }

  start(): void {
    this.#stopped = false;
    this.pods.start();
    this.namespaces.start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    // An ADD waiting for its pod gets its answer (none) now, not at its timeout.
    for (const finish of [...this.#waiters]) finish(undefined);
    for (const t of this.#retryTimers.values()) clearTimeout(t);
    this.#retryTimers.clear();
    await Promise.all([this.pods.stop(), this.namespaces.stop()]);
    await Promise.allSettled([...this.#running.values()]);
  }

  /**
   * The pod's labels from the caches; undefined while either has not listed,
   * or the pod or its namespace is not there yet (the two watches are
   * independent: a new namespace's pod may come first, and labels without
   * the namespace's would slip past namespaceSelector rules).
   */
  labelsOf(namespace: string, name: string): LabelSet | undefined {
    if (!this.#ready) return undefined;
    const pod = this.pods.get(name, namespace);
    const ns = this.namespaces.get(namespace);
    if (pod === undefined || ns === undefined) return undefined;
    return k8sPodLabels(pod, ns, (s) =>
      this.#log.warn({ pod: podKey(namespace, name), label: s.key, reason: s.reason }, 'pod label left out of the endpoint labels'),
    );
  }

  /** Waits up to timeoutMs for the pod in the cache (and both caches listed). */
  podLabels(namespace: string, name: string, timeoutMs: number): Promise<LabelSet | undefined> {
    const now = this.labelsOf(namespace, name);
    if (now !== undefined || this.#stopped) return Promise.resolve(now);
    return new Promise((resolve) => {
      const offs: Array<() => void> = [];
      const finish = (labels: LabelSet | undefined) => {
        clearTimeout(timer);
        for (const off of offs) off();
        this.#waiters.delete(finish);
        resolve(labels);
      };
      this.#waiters.add(finish);
      const check = () => {
        const labels = this.labelsOf(namespace, name);
        if (labels !== undefined) finish(labels);
      };
      const timer = setTimeout(() => finish(undefined), timeoutMs);
      offs.push(this.pods.onChange(check), this.namespaces.onChange(check));
    });
  }

  /** Brings every endpoint of a pod this node knows to the labels the API says; resolves when each has been tried once. */
  async reconcileAll(): Promise<void> {
    if (!this.#ready) return;
    const keys = new Set<string>();
    for (const ep of this.#endpoints.list()) {
      if (ep.podNamespace && ep.podName) keys.add(podKey(ep.podNamespace, ep.podName));
    }
    await Promise.all([...keys].map((k) => this.#request(k)));
  }

  /** One pod's endpoints to the API's labels (after a CNI ADD: a relabel between podLabels() and the endpoint's creation is not lost). */
  reconcilePod(namespace: string, name: string): Promise<void> {
    return this.#ready ? this.#request(podKey(namespace, name)) : Promise.resolve();
  }

  /** Schedules a pass over the pod's endpoints; a request during a pass runs one more pass after it. */
  #request(key: string): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    const running = this.#running.get(key);
    if (running !== undefined) {
      this.#dirty.add(key);
      return running;
    }
    const pass = (async () => {
      try {
        do {
          this.#dirty.delete(key);
          try {
            await this.#syncPod(key);
          } catch (err) {
            this.#log.error({ pod: key, err }, 'pod labels not applied; retrying');
            this.#scheduleRetry(key);
          }
        } while (this.#dirty.has(key) && !this.#stopped);
      } finally {
        this.#running.delete(key);
      }
    })();
    this.#running.set(key, pass);
    return pass;
  }

  async #syncPod(key: string): Promise<void> {
    const [namespace, name] = splitKey(key);
    const desired = this.labelsOf(namespace, name);
    if (desired === undefined) return;
    let failure: unknown;
    for (const ep of this.#endpoints.list()) {
      if (ep.podNamespace !== namespace || ep.podName !== name) continue;
      const target = endpointTargetLabels(ep.labels, desired);
      if (sameLabels(ep.labels, target)) continue;
      try {
        await this.#endpoints.updateLabels(ep.id, target);
        this.#log.info({ endpoint: ep.id, pod: key, labels: target.toStrings() }, 'endpoint relabelled from Kubernetes');
      } catch (err) {
        failure ??= err;
        this.#log.warn({ endpoint: ep.id, pod: key, err }, 'endpoint relabel failed; retrying');
      }
    }
    if (failure === undefined) {
      this.#backoffs.delete(key);
      return;
    }
    this.#scheduleRetry(key);
  }

  /** Retries with back-off; a retry finds the endpoint gone (deleted meanwhile) and stops there. */
  #scheduleRetry(key: string): void {
    if (this.#stopped || this.#retryTimers.has(key)) return;
    let backoff = this.#backoffs.get(key);
    if (!backoff) this.#backoffs.set(key, (backoff = new Backoff(this.#retry)));
    const delay = backoff.next();
    const timer = setTimeout(() => {
      this.#retryTimers.delete(key);
      void this.#request(key);
    }, delay);
    this.#retryTimers.set(key, timer);
  }
}
