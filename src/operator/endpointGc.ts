/**
 * Endpoint GC: a TendrilEndpoint whose pod is gone (no pod of the owner
 * reference's name, or one with another uid — the name was reused), or whose
 * node is gone (no TendrilNode and no live `tendril-node-<node>` Lease), is
 * deleted with preconditions on its uid and resourceVersion. The API
 * server's own garbage collector removes the endpoints of deleted pods
 * through their ownerReferences; this catches objects without a valid
 * owner reference, and the endpoints of nodes that vanished.
 *
 * The caches only nominate: every verdict is confirmed by live reads (a pod
 * the pod cache has not seen yet must not cost its endpoint), and the delete
 * is conditional on the endpoint being the one we judged.
 */
import type { KubernetesObject, V1Lease, V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import { describeK8sError, type ResourceInformer } from '../k8s/resourceInformer.js';
import { isGoneOrChanged, nodeLeaseLive, type OperatorApi } from './operatorApi.js';
import type { EndpointGcReason, OperatorMetrics } from './operatorMetrics.js';
import { NODE_LEASE_PREFIX } from '../k8s/nodeLeases.js';
import { readTendrilEndpoint, type OperatorEndpointView } from './tendrilObjectViews.js';

export interface EndpointGcOptions {
  api: OperatorApi;
  endpoints: ResourceInformer<KubernetesObject>;
  pods: ResourceInformer<V1Pod>;
  nodes: ResourceInformer<KubernetesObject>;
  /** Leases of the operator's namespace (the nodes' liveness Leases among them). */
  leases: ResourceInformer<V1Lease>;
  logger: Logger;
  metrics: OperatorMetrics;
}

/** The pod an endpoint belongs to: its Pod owner reference, else the pod of its own name (design27.md: name = the pod's). */
function ownerOf(ep: OperatorEndpointView): { name: string; uid: string | undefined } {
  return ep.ownerPod ?? { name: ep.name, uid: undefined };
}

function podMatches(pod: V1Pod | undefined, owner: { uid: string | undefined }): boolean {
  return pod !== undefined && (owner.uid === undefined || pod.metadata?.uid === owner.uid);
}

export class EndpointGc {
  readonly #o: EndpointGcOptions;
  deleted = 0;

  constructor(o: EndpointGcOptions) {
    this.#o = o;
  }

  /** Why the caches say the endpoint should go, if they do. */
  #suspect(ep: OperatorEndpointView): EndpointGcReason | undefined {
    const owner = ownerOf(ep);
    if (!podMatches(this.#o.pods.get(owner.name, ep.namespace), owner)) return 'pod-gone';
    if (ep.node !== '' && this.#o.nodes.get(ep.node) === undefined && !nodeLeaseLive(this.#o.leases.get(`${NODE_LEASE_PREFIX}${ep.node}`, this.#o.api.namespace))) return 'node-gone';
    return undefined;
  }

  /** The same verdict from live reads. */
  async #confirm(ep: OperatorEndpointView, reason: EndpointGcReason): Promise<boolean> {
    if (reason === 'pod-gone') {
      const owner = ownerOf(ep);
      return !podMatches(await this.#o.api.getPod(ep.namespace, owner.name), owner);
    }
    if ((await this.#o.api.getTendrilNode(ep.node)) !== undefined) return false;
    return !nodeLeaseLive(await this.#o.api.getNodeLease(ep.node));
  }

  async pass(): Promise<void> {
    for (const obj of this.#o.endpoints.list()) {
      const ep = readTendrilEndpoint(obj);
      if (ep === undefined) continue;
      const reason = this.#suspect(ep);
      if (reason === undefined) continue;
      const where = { endpoint: `${ep.namespace}/${ep.name}`, node: ep.node, reason };
      try {
        if (!(await this.#confirm(ep, reason))) continue;
        await this.#o.api.deleteEndpoint(ep.namespace, ep.name, ep.uid, ep.resourceVersion);
        this.deleted++;
        this.#o.metrics.endpointCollected(reason);
        this.#o.logger.info(where, 'deleted a stale endpoint');
      } catch (err) {
        // Gone already, or changed since we judged it: judged again next pass.
        if (isGoneOrChanged(err)) continue;
        this.#o.metrics.apiError('endpoint-gc');
        this.#o.logger.warn({ ...where, error: describeK8sError(err) }, 'collecting a stale endpoint failed');
      }
    }
  }
}
