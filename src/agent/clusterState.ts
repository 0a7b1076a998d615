/**
 * Where the cluster-wide state comes from, by identity allocation mode:
 * the kvstore (etcd shared by the nodes) or the Kubernetes API server
 * (`crd`: TendrilIdentity, TendrilNode and TendrilEndpoint objects, node
 * Leases; the kvstore then holds node-local state only).
 */
import { IdentityAllocator, type LeaseProvider } from '../identity/index.js';
import type { IPCache } from '../ipcache/index.js';
import { isK8sError, K8sErrorCode, loadKubernetes, type RetryOptions } from '../k8s/index.js';
import type { AgentKubernetes, EndpointPodLookup, KubernetesIPCacheSync, KubernetesNodeRegistry, PodEndpointFeed } from '../k8s/kubernetes.js';
import type { Backend } from '../kvstore/types.js';
import type { Logger } from '../logging/logger.js';
import type { NodeRecord, NodeRegistryView } from '../node/index.js';
import type { AgentConfig } from './config.js';

export interface ClusterStateDeps {
  backend: Backend;
  lease: LeaseProvider;
  /** Present whenever the mode is `crd` (the agent refuses crd without Kubernetes before this point). */
  kubernetes: AgentKubernetes | undefined;
  retry?: RetryOptions | undefined;
  logger: Logger;
}

/**
 * The identity allocator of the configured mode, started. In crd mode an API
 * server that does not answer within the sync timeout does not stop the
 * start (as with the watchers): the mirror fills once it answers, /healthz
 * failing until then; a missing CRD does stop it (K8S_CRD_MISSING).
 */
export async function startClusterIdentities(config: AgentConfig, d: ClusterStateDeps): Promise<IdentityAllocator> {
  if (config.identityAllocationMode === 'kvstore') {
    const kv = new IdentityAllocator({ backend: d.backend, nodeName: config.nodeName, lease: d.lease, logger: d.logger });
    await kv.start();
    return kv;
  }
  if (d.kubernetes === undefined) throw new Error('identity allocation mode crd without Kubernetes');
  const { KubernetesIdentityAllocator } = await loadKubernetes();
  const crd = new KubernetesIdentityAllocator({
    kubeConfig: d.kubernetes.watchers.kubeConfig,
    nodeName: config.nodeName,
    logger: d.logger,
    syncTimeoutMs: config.k8sSyncTimeoutSeconds * 1000,
    ...(d.retry === undefined ? {} : { retry: d.retry }),
  });
  d.kubernetes.watchers.follow(crd.store.informer);
  try {
    await crd.start();
  } catch (err) {
    if (!isK8sError(err, K8sErrorCode.SYNC_TIMEOUT)) {
      await crd.close();
      throw err;
    }
    d.logger.warn({ err }, 'TendrilIdentities not synced in time: going on, /healthz fails until they are');
  }
  return crd;
}

/** crd mode's node registry (TendrilNode objects, Leases), not started; undefined in kvstore mode (OwnNode makes the kvstore one). */
export async function kubernetesNodeRegistry(config: AgentConfig, d: Pick<ClusterStateDeps, 'kubernetes' | 'retry' | 'logger'>): Promise<KubernetesNodeRegistry | undefined> {
  if (config.identityAllocationMode !== 'crd' || d.kubernetes === undefined) return undefined;
  const { KubernetesNodeRegistry } = await loadKubernetes();
  const registry = new KubernetesNodeRegistry({
    kubeConfig: d.kubernetes.watchers.kubeConfig,
    nodeName: config.nodeName,
    namespace: config.k8sNamespace,
    leaseTtlSeconds: config.leaseTtlSeconds,
    logger: d.logger,
    syncTimeoutMs: config.k8sSyncTimeoutSeconds * 1000,
    ...(d.retry === undefined ? {} : { retry: d.retry }),
  });
  d.kubernetes.watchers.follow(registry.nodeInformer);
  d.kubernetes.watchers.follow(registry.leases.informer);
  return registry;
}

/**
 * crd mode with `--ipam cluster-pool`: tendril-operator hands each TendrilNode
 * its CIDRs. The node's object goes up first (no Lease yet: no other node
 * routes to it), then start-up waits for spec.ipam.podCIDRs and runs the
 * node's IPAM over them as host-scope does. Other configurations pass through.
 */
export async function withOperatorPodCidrs(config: AgentConfig, registry: KubernetesNodeRegistry | undefined, own: NodeRecord, log: Logger): Promise<AgentConfig> {
  if (registry === undefined || config.ipam !== 'cluster-pool') return config;
  await registry.ensureOwnObject(own);
  const podCidrs = await registry.waitForAllocatedPodCidrs(config.k8sSyncTimeoutSeconds * 1000);
  log.info({ podCidrs }, 'cluster-pool CIDRs from tendril-operator');
  return { ...config, podCidrs };
}

/**
 * crd mode's ipcache: this node's pods published as TendrilEndpoints, every
 * other live node's read from them. Made once the endpoints and the node
 * registry exist (liveness is the registry's), started after the registry's
 * first listing.
 */
export async function kubernetesIpcacheSync(
  config: AgentConfig,
  d: Pick<ClusterStateDeps, 'kubernetes' | 'retry' | 'logger'> & { ipcache: IPCache; endpoints: EndpointPodLookup; nodes: NodeRegistryView; nodeIp: string; nodeIp6?: string | undefined },
): Promise<{ feed: PodEndpointFeed; sync: KubernetesIPCacheSync } | undefined> {
  if (config.identityAllocationMode !== 'crd' || d.kubernetes === undefined) return undefined;
  const { PodEndpointFeed, KubernetesIPCacheSync } = await loadKubernetes();
  const feed = new PodEndpointFeed({ ipcache: d.ipcache, endpoints: d.endpoints, pods: d.kubernetes.watchers.podCache, logger: d.logger });
  const sync = new KubernetesIPCacheSync({
    kubeConfig: d.kubernetes.watchers.kubeConfig,
    ipcache: d.ipcache,
    nodeName: config.nodeName,
    nodeIP: d.nodeIp,
    ...(d.nodeIp6 === undefined ? {} : { nodeIP6: d.nodeIp6 }),
    endpoints: feed,
    nodes: d.nodes,
    logger: d.logger,
    syncTimeoutMs: config.k8sSyncTimeoutSeconds * 1000,
    ...(d.retry === undefined ? {} : { retry: d.retry }),
  });
  d.kubernetes.watchers.follow(sync.informer);
  return { feed, sync };
}

/** The node's record before IPAM has pod CIDRs: what cluster-pool's first TendrilNode write says (the full record follows at start). */
export function provisionalOwnRecord(config: AgentConfig, basics: { ip: string | undefined; ip6: string | undefined }): NodeRecord {
  const internal = [basics.ip, basics.ip6 === basics.ip ? undefined : basics.ip6].filter((ip): ip is string => ip !== undefined);
  return {
    name: config.nodeName,
    addresses: internal.map((ip) => ({ type: 'InternalIP' as const, ip })),
    podCidrs: [],
    routingMode: config.routingMode,
    ...(config.routingMode === 'tunnel' ? { tunnel: { protocol: config.tunnelProtocol, port: config.tunnelPort } } : {}),
    health: { status: 'ok' },
    startedAt: new Date().toISOString(),
  };
}
