/**
 * Services and EndpointSlices from the API server into ServiceSync: every
 * change of a Service or of one of its slices hands ServiceSync the Service
 * with all its slices (slices name their Service by the label
 * kubernetes.io/service-name). Nothing is handed over before both caches
 * hold their first list, so a restarted agent never sees a Service without
 * its backends for a moment; then every Service once, then initialSyncDone().
 */
import { CoreV1Api, DiscoveryV1Api, type KubeConfig, type V1EndpointSlice, type V1Service } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import type { ServiceApi } from '../service/types.js';
import { ResourceInformer } from './resourceInformer.js';
import { ServiceSync } from './serviceSync.js';
import type { RetryOptions } from './types.js';

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

export interface ServiceWatcherOptions {
  kubeConfig: KubeConfig;
  nodeName: string;
  services: ServiceApi;
  logger: Logger;
  retry?: RetryOptions;
  /** The node's IPv6 InternalIPs (an IPv6 NodePort's frontends). */
  ipv6NodePortAddresses?: () => readonly string[];
  /** Serve LoadBalancer Services' healthCheckNodePort (ServiceSyncOptions). */
  healthCheckNodePorts?: { host?: string };
}

const keyOf = (namespace: string | undefined, name: string) => `${namespace ?? 'default'}/${name}`;

function serviceKeyOfSlice(slice: V1EndpointSlice): string | undefined {
  const svc = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
  return svc ? keyOf(slice.metadata?.namespace, svc) : undefined;
}

export class ServiceWatcher {
  readonly services: ResourceInformer<V1Service>;
  readonly slices: ResourceInformer<V1EndpointSlice>;
  readonly sync: ServiceSync;
  readonly #log: Logger;
  /** Slice (namespace/name) → the Service it named last, so a slice that changes Service updates both. */
  readonly #sliceService = new Map<string, string>();
  #ready = false;
  #initial: Promise<void> | undefined;

  constructor(o: ServiceWatcherOptions) {
    this.#log = o.logger;
    this.sync = new ServiceSync({
      services: o.services,
      nodeName: o.nodeName,
      logger: o.logger,
      ...(o.ipv6NodePortAddresses ? { ipv6NodePortAddresses: o.ipv6NodePortAddresses } : {}),
      ...(o.healthCheckNodePorts ? { healthCheckNodePorts: o.healthCheckNodePorts } : {}),
    });
    const core = o.kubeConfig.makeApiClient(CoreV1Api);
    const discovery = o.kubeConfig.makeApiClient(DiscoveryV1Api);
    const common = { kubeConfig: o.kubeConfig, logger: o.logger, ...(o.retry ? { retry: o.retry } : {}) };
    this.services = new ResourceInformer<V1Service>({
      ...common,
      resource: 'services',
      path: '/api/v1/services',
      model: 'V1Service',
      list: () => core.listServiceForAllNamespaces(),
    });
    this.slices = new ResourceInformer<V1EndpointSlice>({
      ...common,
      resource: 'endpointslices',
      path: '/apis/discovery.k8s.io/v1/endpointslices',
      model: 'V1EndpointSlice',
      list: () => discovery.listEndpointSliceForAllNamespaces(),
    });
    const serviceChanged = (svc: V1Service) => {
      if (this.#ready && svc.metadata?.name) void this.#push(keyOf(svc.metadata.namespace, svc.metadata.name));
    };
    for (const e of ['add', 'update', 'delete'] as const) this.services.on(e, serviceChanged);
    const sliceChanged = (slice: V1EndpointSlice) => {
      const name = slice.metadata?.name ?? '';
      const sliceKey = keyOf(slice.metadata?.namespace, name);
      const before = this.#sliceService.get(sliceKey);
      const named = serviceKeyOfSlice(slice);
      // A delete has already left the cache when its handler runs.
      if (named !== undefined && this.slices.get(name, slice.metadata?.namespace) !== undefined) this.#sliceService.set(sliceKey, named);
      else this.#sliceService.delete(sliceKey);
      if (!this.#ready) return;
      for (const key of new Set([before, named])) if (key !== undefined) void this.#push(key);
    };
    for (const e of ['add', 'update', 'delete'] as const) this.slices.on(e, sliceChanged);
    const maybeReady = () => {
      if (this.#ready || !this.services.isSynced || !this.slices.isSynced) return;
      this.#ready = true;
      this.#initial = this.#initialSync();
    };
    this.services.onChange(maybeReady);
    this.slices.onChange(maybeReady);
  }

  get informers(): ResourceInformer<V1Service | V1EndpointSlice>[] {
    return [this.services as ResourceInformer<V1Service | V1EndpointSlice>, this.slices as ResourceInformer<V1Service | V1EndpointSlice>];
  }

  start(): void {
    this.services.start();
    this.slices.start();
  }

  async stop(): Promise<void> {
    await Promise.all([this.services.stop(), this.slices.stop()]);
    await this.#initial?.catch(() => undefined);
    await this.sync.stop();
  }

  /** Resolves once the first full pass (every Service, then initialSyncDone) has run. */
  initialSyncDone(): Promise<void> {
    return this.#initial ?? Promise.resolve();
  }

  async #initialSync(): Promise<void> {
    const keys = new Set<string>();
    for (const svc of this.services.list()) if (svc.metadata?.name) keys.add(keyOf(svc.metadata.namespace, svc.metadata.name));
    await Promise.all([...keys].map((k) => this.#push(k)));
    try {
      await this.sync.initialSyncDone();
    } catch (err) {
      this.#log.error({ err }, 'Kubernetes services: initial sync cleanup failed');
    }
  }

  /** The Service as the caches have it now, with all its slices (ServiceSync serializes the calls). */
  #push(key: string): Promise<void> {
    const slash = key.indexOf('/');
    const namespace = key.slice(0, slash);
    const name = key.slice(slash + 1);
    const svc = this.services.get(name, namespace);
    const slices = this.slices.list(namespace).filter((s) => s.metadata?.labels?.[SERVICE_NAME_LABEL] === name);
    return this.sync.update(key, svc, slices).catch((err: unknown) => {
      this.#log.error({ service: key, err }, 'Kubernetes service not applied');
    });
  }
}
