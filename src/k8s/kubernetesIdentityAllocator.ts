import type { KubeConfig } from '@kubernetes/client-node';
import { IdentityAllocator } from '../identity/index.js';
import type { Logger } from '../logging/logger.js';
import { KubernetesIdentities } from './kubernetesIdentities.js';
import type { RetryOptions } from './types.js';

export interface KubernetesIdentityAllocatorOptions {
  kubeConfig: KubeConfig;
  nodeName: string;
  logger: Logger;
  minId?: number;
  maxId?: number;
  syncTimeoutMs?: number;
  retry?: RetryOptions;
}

/**
 * The identity allocator of the `crd` mode: IdentityAllocator (reserved and
 * CIDR identities, per-node reference counts) over TendrilIdentity objects.
 * No GC timer: the operator collects unused identities.
 */
export class KubernetesIdentityAllocator extends IdentityAllocator {
  readonly store: KubernetesIdentities;

  constructor(o: KubernetesIdentityAllocatorOptions) {
    const store = new KubernetesIdentities({
      kubeConfig: o.kubeConfig,
      logger: o.logger,
      ...(o.minId === undefined ? {} : { minId: o.minId }),
      ...(o.maxId === undefined ? {} : { maxId: o.maxId }),
      ...(o.syncTimeoutMs === undefined ? {} : { syncTimeoutMs: o.syncTimeoutMs }),
      ...(o.retry === undefined ? {} : { retry: o.retry }),
    });
    super({ store, nodeName: o.nodeName, logger: o.logger, gcIntervalMs: 0 });
    this.store = store;
  }
}
