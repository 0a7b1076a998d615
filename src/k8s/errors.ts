import { CodedError } from '../errors/codedError.js';

/** Kubernetes watcher error codes with stable names. */
export const K8sErrorCode = {
  /** No usable kubeconfig or in-cluster service account; the message says what is missing. */
  CONFIG: 'K8S_CONFIG',
  /** The informers did not all finish their first list in time. */
  SYNC_TIMEOUT: 'K8S_SYNC_TIMEOUT',
  /** This node's Node object did not appear in time. */
  NODE_TIMEOUT: 'K8S_NODE_TIMEOUT',
  /** The watchers were stopped while a caller waited. */
  STOPPED: 'K8S_STOPPED',
  /** The API server does not serve a tendril custom resource the configured mode needs (its CRD is not installed). */
  CRD_MISSING: 'K8S_CRD_MISSING',
  /** The operator handed this node no cluster-pool CIDRs (TendrilNode spec.ipam.podCIDRs) in time. */
  POD_CIDR_TIMEOUT: 'K8S_POD_CIDR_TIMEOUT',
  /** An object this node must write is held by another writer it may not overwrite (retried). */
  OBJECT_CONFLICT: 'K8S_OBJECT_CONFLICT',
} as const;

export type K8sErrorCode = (typeof K8sErrorCode)[keyof typeof K8sErrorCode];

export class K8sError<C extends K8sErrorCode = K8sErrorCode> extends CodedError<C> {}

/** A one-line message a user can act on (which file, which variable). */
export class K8sConfigError extends K8sError<'K8S_CONFIG'> {
  constructor(message: string, options?: { cause?: unknown }) {
    super(K8sErrorCode.CONFIG, message, options);
  }
}

export class K8sSyncTimeoutError extends K8sError<'K8S_SYNC_TIMEOUT'> {
  /** The resources that had not listed yet. */
  readonly pending: readonly string[];

  constructor(timeoutMs: number, pending: readonly string[]) {
    super(K8sErrorCode.SYNC_TIMEOUT, `Kubernetes resources not synced after ${timeoutMs} ms: ${pending.join(', ')}`);
    this.pending = pending;
  }

  protected override toJSONAt(depth: number) {
    return { ...super.toJSONAt(depth), pending: this.pending };
  }
}

export class K8sNodeTimeoutError extends K8sError<'K8S_NODE_TIMEOUT'> {
  constructor(nodeName: string, timeoutMs: number, lastError?: string) {
    super(
      K8sErrorCode.NODE_TIMEOUT,
      `Node ${JSON.stringify(nodeName)} not found in the Kubernetes API after ${timeoutMs} ms` + (lastError ? ` (last error: ${lastError})` : ''),
    );
  }
}

export class K8sStoppedError extends K8sError<'K8S_STOPPED'> {
  constructor(what: string) {
    super(K8sErrorCode.STOPPED, `Kubernetes watchers stopped while waiting for ${what}`);
  }
}

export class K8sCrdMissingError extends K8sError<'K8S_CRD_MISSING'> {
  constructor(resource: string, why: string) {
    super(K8sErrorCode.CRD_MISSING, `the Kubernetes API server does not serve ${resource} (${why}): install tendril's CRDs (kubectl apply -f deploy/kubernetes/crds/)`);
  }
}

export class K8sPodCidrTimeoutError extends K8sError<'K8S_POD_CIDR_TIMEOUT'> {
  constructor(nodeName: string, timeoutMs: number) {
    super(
      K8sErrorCode.POD_CIDR_TIMEOUT,
      `TendrilNode ${JSON.stringify(nodeName)} has no spec.ipam.podCIDRs after ${timeoutMs} ms: is tendril-operator running with --cluster-pool-cidr?`,
    );
  }
}

export class K8sObjectConflictError extends K8sError<'K8S_OBJECT_CONFLICT'> {
  constructor(message: string) {
    super(K8sErrorCode.OBJECT_CONFLICT, message);
  }
}

export function isK8sError(err: unknown, code?: K8sErrorCode): err is K8sError {
  return err instanceof K8sError && (code === undefined || err.code === code);
}
