/**
 * Whether the agent follows Kubernetes at all, decided without loading the
 * Kubernetes client library (about a second of start-up that an agent on
 * etcd, or with no cluster store, never needs).
 */
import { existsSync } from 'node:fs';
import type { K8sConnectionOptions } from './types.js';

/** Where the kubelet mounts a pod's service account. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export interface InClusterOptions {
  env?: NodeJS.ProcessEnv;
  /** The service account directory (token, ca.crt); tests point it elsewhere. */
  serviceAccountDir?: string;
}

export function inClusterAvailable(env: NodeJS.ProcessEnv, dir: string): boolean {
  return Boolean(env.KUBERNETES_SERVICE_HOST) && Boolean(env.KUBERNETES_SERVICE_PORT) && existsSync(`${dir}/token`);
}

/** Whether Kubernetes is on: a kubeconfig or api server given, or in-cluster env+token. */
export function k8sEnabled(o: K8sConnectionOptions, env: NodeJS.ProcessEnv = process.env, serviceAccountDir = SERVICE_ACCOUNT_DIR): boolean {
  return Boolean(o.kubeconfig) || Boolean(o.apiServer) || inClusterAvailable(env, serviceAccountDir);
}
