/**
 * NetworkPolicies and tendril's policy CRDs from the API server into the
 * agent's policy engine, with the semantics of `tendril policy import`: an
 * object is one policy named kind/namespace/name; an add or update replaces
 * it, a delete removes it. An object the parser refuses is logged and shown
 * in status; the version in force before it (if any) stays in force.
 */
import { Serializer } from '../async/keyedSerializer.js';
import { CustomObjectsApi, NetworkingV1Api, type KubeConfig, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from '../logging/logger.js';
import { formatPolicyName, parsePolicyDocuments, PolicyKind, PolicyError, PolicyErrorCode, STAGED_ANNOTATION, type Policy, type PolicyFilter } from '../policy/index.js';
import { ResourceInformer, toWireJson } from './resourceInformer.js';
import type { K8sPolicyTarget, RetryOptions } from './types.js';

/** One watched policy kind: where it is served and how its objects are read. */
interface PolicySource {
  resource: string;
  kind: PolicyKind;
  apiVersion: string;
  path: string;
  /** The client's model, for NetworkPolicy; custom resources are JSON. */
  model?: string;
  clusterwide: boolean;
}

export const TENDRIL_POLICY_GROUP = 'tendril.io';
export const TENDRIL_POLICY_VERSION = 'v1';

const SOURCES: readonly PolicySource[] = [
  {
    resource: 'networkpolicies',
    kind: PolicyKind.NetworkPolicy,
    apiVersion: 'networking.k8s.io/v1',
    path: '/apis/networking.k8s.io/v1/networkpolicies',
    model: 'V1NetworkPolicy',
    clusterwide: false,
  },
  {
    resource: 'tendrilnetworkpolicies',
    kind: PolicyKind.TendrilNetworkPolicy,
    apiVersion: `${TENDRIL_POLICY_GROUP}/${TENDRIL_POLICY_VERSION}`,
    path: `/apis/${TENDRIL_POLICY_GROUP}/${TENDRIL_POLICY_VERSION}/tendrilnetworkpolicies`,
    clusterwide: false,
  },
  {
    resource: 'tendrilclusterwidenetworkpolicies',
    kind: PolicyKind.TendrilClusterwideNetworkPolicy,
    apiVersion: `${TENDRIL_POLICY_GROUP}/${TENDRIL_POLICY_VERSION}`,
    path: `/apis/${TENDRIL_POLICY_GROUP}/${TENDRIL_POLICY_VERSION}/tendrilclusterwidenetworkpolicies`,
    clusterwide: true,
  },
];

/**
 * The document the policy parser reads, from an API object: apiVersion and
 * kind set (list items lack them), metadata cut to name, namespace and labels
 * (the parser's metadata is what `tendril policy import` accepts; uid,
 * managedFields and the like mean nothing to it), and `spec`/`specs` as sent.
 */
export function policyDocument(obj: unknown, o: { apiVersion: string; kind: string; model?: string }): Record<string, unknown> {
  const wire = toWireJson(obj, o.model);
  const md = (typeof wire.metadata === 'object' && wire.metadata !== null ? wire.metadata : {}) as Record<string, unknown>;
  const metadata: Record<string, unknown> = { name: md.name };
  if (md.namespace !== undefined && md.namespace !== '') metadata.namespace = md.namespace;
  if (md.labels !== undefined) metadata.labels = md.labels;
  // Of the annotations only the one the policy's meaning depends on (kubectl's last-applied copy would double every document).
  const staged = (md.annotations as Record<string, unknown> | undefined)?.[STAGED_ANNOTATION];
  if (staged !== undefined) metadata.annotations = { [STAGED_ANNOTATION]: staged };
  const doc: Record<string, unknown> = { apiVersion: o.apiVersion, kind: o.kind, metadata };
  if (wire.spec !== undefined) doc.spec = wire.spec;
  if (wire.specs !== undefined) doc.specs = wire.specs;
  return doc;
}

export interface PolicyWatcherOptions {
  kubeConfig: KubeConfig;
  target: K8sPolicyTarget;
  logger: Logger;
  retry?: RetryOptions;
}

export class PolicyWatcher {
  readonly informers: readonly ResourceInformer<KubernetesObject>[];
  readonly #target: K8sPolicyTarget;
  readonly #log: Logger;
  /** Target calls in event order (the target may be asynchronous). */
  readonly #queue = new Serializer();
  /**
   * Policies of each kind's first list, handed over in one call once it is
   * in: an agent starting with a thousand policies computes endpoints' policy
   * once, not once per policy.
   */
  readonly #firstList = new Map<ResourceInformer<KubernetesObject>, Policy[]>();

  constructor(o: PolicyWatcherOptions) {
    this.#target = o.target;
    this.#log = o.logger;
    const networking = o.kubeConfig.makeApiClient(NetworkingV1Api);
    const custom = o.kubeConfig.makeApiClient(CustomObjectsApi);
    this.informers = SOURCES.map((source) => {
      const list =
        source.model !== undefined
          ? () => networking.listNetworkPolicyForAllNamespaces() as Promise<KubernetesListObject<KubernetesObject>>
          : () =>
              custom.listClusterCustomObject({
                group: TENDRIL_POLICY_GROUP,
                version: TENDRIL_POLICY_VERSION,
                plural: source.resource,
              }) as Promise<KubernetesListObject<KubernetesObject>>;
      const informer = new ResourceInformer<KubernetesObject>({
        resource: source.resource,
        kubeConfig: o.kubeConfig,
        path: source.path,
        list,
        ...(source.model !== undefined ? { model: source.model } : { optional: true }),
        logger: o.logger,
        ...(o.retry ? { retry: o.retry } : {}),
      });
      this.#firstList.set(informer, []);
      void informer.synced.then(() => this.#flushFirstList(source, informer));
      informer.on('add', (obj) => this.#upsert(source, informer, obj));
      informer.on('update', (obj) => this.#upsert(source, informer, obj));
      informer.on('delete', (obj) => this.#delete(source, obj));
      return informer;
    });
  }

  /** Resolves once every target call queued so far has run. */
  settled(): Promise<void> {
    return this.#queue.settled();
  }

  #enqueue(what: () => unknown): void {
    void this.#queue.run(async () => {
      await what();
    });
  }

  #upsert(source: PolicySource, informer: ResourceInformer<KubernetesObject>, obj: KubernetesObject): void {
    const ref = { kind: source.kind, namespace: obj.metadata?.namespace, name: obj.metadata?.name };
    let policies: Policy[];
    try {
      policies = parsePolicyDocuments([policyDocument(obj, source)]);
    } catch (err) {
      if (!(err instanceof PolicyError)) throw err;
      const message = `${source.kind} ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name}: ${err.message}`;
      informer.noteError(message);
      this.#log.warn({ policy: ref, error: err.message }, 'Kubernetes policy refused; the version in force before it (if any) stays');
      return;
    }
    const firstList = this.#firstList.get(informer);
    if (firstList !== undefined) {
      firstList.push(...policies);
      return;
    }
    this.#enqueue(async () => {
      try {
        await this.#target.upsertPolicies(policies);
        this.#log.info({ policy: ref }, 'Kubernetes policy applied');
      } catch (err) {
        informer.noteError(`${source.kind} ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name}: ${err instanceof Error ? err.message : String(err)}`);
        this.#log.error({ policy: ref, err }, 'Kubernetes policy not applied');
      }
    });
  }

  #flushFirstList(source: PolicySource, informer: ResourceInformer<KubernetesObject>): void {
    const policies = this.#firstList.get(informer) ?? [];
    this.#firstList.delete(informer);
    if (policies.length === 0) return;
    this.#enqueue(async () => {
      try {
        await this.#target.upsertPolicies(policies);
        this.#log.info({ kind: source.kind, policies: policies.length }, 'Kubernetes policies applied');
        return;
      } catch (err) {
        this.#log.warn({ kind: source.kind, err }, 'Kubernetes policies not applied together; applying one by one');
      }
      // One policy the target refuses must not keep the others out.
      for (const p of policies) {
        try {
          await this.#target.upsertPolicies([p]);
        } catch (err) {
          informer.noteError(`${formatPolicyName(p.name)}: ${err instanceof Error ? err.message : String(err)}`);
          this.#log.error({ policy: p.name, err }, 'Kubernetes policy not applied');
        }
      }
    });
  }

  #delete(source: PolicySource, obj: KubernetesObject): void {
    const filter: PolicyFilter = {
      kind: source.kind,
      namespace: source.clusterwide ? '' : (obj.metadata?.namespace ?? 'default'),
      name: obj.metadata?.name ?? '',
    };
    this.#enqueue(async () => {
      try {
        await this.#target.deletePolicies(filter);
        this.#log.info({ policy: filter }, 'Kubernetes policy deleted');
      } catch (err) {
        // An object the parser refused was never in the engine.
        if (err instanceof PolicyError && err.code === PolicyErrorCode.NOT_FOUND) return;
        this.#log.error({ policy: filter, err }, 'Kubernetes policy not deleted');
      }
    });
  }
}
