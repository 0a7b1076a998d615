/**
 * Identity GC: a TendrilIdentity no TendrilEndpoint's spec.identity names,
 * for longer than the grace period, is deleted — with preconditions on its
 * uid and resourceVersion, so an object re-created or edited since we judged
 * it stays. The clock starts when this leader first sees the identity unused
 * (a new leader starts every clock afresh: it cannot know for how long an
 * identity has been unused, and starting later only keeps objects longer).
 * An identity used again inside the grace has its clock cleared.
 *
 * The grace also covers the gap between an agent allocating an identity and
 * publishing the TendrilEndpoint that names it, and the lag of our caches.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import { describeK8sError } from '../k8s/resourceInformer.js';
import { identityNumberOfName } from '../k8s/tendrilIdentity.js';
import type { ResourceInformer } from '../k8s/resourceInformer.js';
import { isGoneOrChanged, type OperatorApi } from './operatorApi.js';
import type { OperatorMetrics } from './operatorMetrics.js';
import { readTendrilEndpoint } from './tendrilObjectViews.js';

export interface IdentityGcOptions {
  api: OperatorApi;
  identities: ResourceInformer<KubernetesObject>;
  endpoints: ResourceInformer<KubernetesObject>;
  graceMs: number;
  logger: Logger;
  metrics: OperatorMetrics;
  now?: () => number;
}

export class IdentityGc {
  readonly #o: IdentityGcOptions;
  readonly #now: () => number;
  /** Identity object (name/uid: a re-created number starts afresh) → when this leader first saw it unused. */
  readonly #unusedSince = new Map<string, number>();
  deleted = 0;

  constructor(o: IdentityGcOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
  }

  /** Identity numbers some endpoint names now. */
  #used(): Set<number> {
    const used = new Set<number>();
    for (const obj of this.#o.endpoints.list()) {
      const id = readTendrilEndpoint(obj)?.identity;
      if (id !== undefined) used.add(id);
    }
    return used;
  }

  /** One pass over the cached identities; deletes those unused past the grace. */
  async pass(): Promise<void> {
    const used = this.#used();
    const now = this.#now();
    const seen = new Set<string>();
    for (const obj of this.#o.identities.list()) {
      const name = obj.metadata?.name ?? '';
      // Objects whose name is no identity number are not tendril's to judge.
      const n = identityNumberOfName(name);
      if (n === undefined) continue;
      const key = `${name}/${obj.metadata?.uid ?? ''}`;
      seen.add(key);
      if (used.has(n)) {
        this.#unusedSince.delete(key);
        continue;
      }
      const since = this.#unusedSince.get(key);
      if (since === undefined) {
        this.#unusedSince.set(key, now);
        continue;
      }
      if (now - since < this.#o.graceMs) continue;
      if (await this.#delete(name, obj, now - since)) this.#unusedSince.delete(key);
    }
    for (const key of this.#unusedSince.keys()) if (!seen.has(key)) this.#unusedSince.delete(key);
  }

  async #delete(name: string, obj: KubernetesObject, unusedMs: number): Promise<boolean> {
    const uid = obj.metadata?.uid ?? '';
    const rv = obj.metadata?.resourceVersion ?? '';
    try {
      await this.#o.api.deleteIdentity(name, uid, rv);
      this.deleted++;
      this.#o.metrics.identityCollected();
      this.#o.logger.info({ identity: name, unusedMs }, 'deleted an identity no endpoint uses');
      return true;
    } catch (err) {
      // Gone already, or changed since we judged it: judged again next pass.
      if (isGoneOrChanged(err)) return true;
      this.#o.metrics.apiError('identity-delete');
      this.#o.logger.warn({ identity: name, error: describeK8sError(err) }, 'deleting an unused identity failed');
      return false;
    }
  }
}
