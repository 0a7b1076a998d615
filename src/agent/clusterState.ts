/**
 * Where the cluster-wide state comes from, by identity allocation mode:
 * the kvstore (etcd shared by the nodes) or the Kubernetes API server
 * (`crd`: TendrilIdentity objects; the kvstore then holds node-local state).
 */
import { IdentityAllocator, type LeaseProvider } from '../identity/index.js';
import type { AgentKubernetes } from '../k8s/agentKubernetes.js';
import { isK8sError, K8sErrorCode, KubernetesIdentityAllocator, type RetryOptions } from '../k8s/index.js';
import type { Backend } from '../kvstore/types.js';
import type { Logger } from '../logging/logger.js';
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
