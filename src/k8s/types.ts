/**
 * The shapes the Kubernetes watchers share with the agent: how to reach the
 * API server, what the agent hands them to change (endpoints' labels,
 * policies) and what they report back (status, this node's Node).
 */
import type { BackoffOptions } from '../async/backoff.js';
import type { LabelSet } from '../labels/index.js';
import type { Policy, PolicyFilter } from '../policy/index.js';

export interface K8sConnectionOptions {
  /** A kubeconfig file; without it, the pod's service account (in-cluster). */
  kubeconfig?: string;
  /** Overrides the kubeconfig's (or in-cluster) server URL. */
  apiServer?: string;
}

/** One watched resource, as `tendril status` shows it. */
export interface K8sResourceStatus {
  /** 'pods' | 'namespaces' | 'nodes' | 'networkpolicies' | 'services' | 'endpointslices' | 'tendrilnetworkpolicies' | 'tendrilclusterwidenetworkpolicies' */
  resource: string;
  /** The initial list is done. */
  synced: boolean;
  /** In the cache now. */
  objects: number;
  /** add/update/delete handled since start. */
  events: number;
  /** ISO time of the last add/update/delete. */
  lastEventAt?: string;
  /** Watch restarts after errors. */
  restarts: number;
  lastError?: string;
}

export interface K8sStatus {
  apiServer: string;
  /** false while any informer waits to retry after an error. */
  connected: boolean;
  /** Every informer has listed once. */
  synced: boolean;
  resources: K8sResourceStatus[];
}

/** What the watchers change in the agent (the agent passes its subsystems). */
export interface K8sEndpointTarget {
  list(): Array<{ id: number; podNamespace?: string; podName?: string; labels: readonly string[] }>;
  updateLabels(id: number, labels: LabelSet): Promise<unknown>;
}

/** PolicyRevisions satisfies it. */
export interface K8sPolicyTarget {
  upsertPolicies(policies: readonly Policy[]): unknown;
  deletePolicies(filter: PolicyFilter): unknown;
}

export interface OwnNode {
  name: string;
  /** spec.podCIDRs, or spec.podCIDR alone on clusters that set only it. */
  podCidrs: string[];
  /** status.addresses (InternalIP, ExternalIP, Hostname…). */
  addresses: Array<{ type: string; address: string }>;
}

/** Exponential back-off of an informer restarted after an error. */
export type RetryOptions = BackoffOptions;

export const DEFAULT_RETRY: RetryOptions = Object.freeze({ initialMs: 500, maxMs: 30_000 });
