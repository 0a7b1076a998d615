/**
 * Where the agent finds the API server: a kubeconfig file, or the service
 * account Kubernetes mounts into the agent's pod; `--k8s-api-server`
 * overrides the server of either.
 */
import { isIPv6 } from 'node:net';
import { KubeConfig, type Cluster, type User } from '@kubernetes/client-node';
import { K8sConfigError } from './errors.js';
import { inClusterAvailable, type InClusterOptions, SERVICE_ACCOUNT_DIR } from './inCluster.js';
import type { K8sConnectionOptions } from './types.js';

function oneLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return (text.split('\n')[0] ?? text).trim();
}

function serverUrl(text: string, from: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new K8sConfigError(`${from} ${JSON.stringify(text)} is not a URL (e.g. https://10.0.0.1:6443)`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new K8sConfigError(`${from} ${JSON.stringify(text)} must be an http:// or https:// URL`);
  }
  return url;
}

/**
 * Plain http has no certificate to verify; the client refuses an http server
 * unless the cluster says skipTLSVerify, so http clusters get it (kubectl
 * talks to them as they are).
 */
function withServer(cluster: Cluster, server: string): Cluster {
  return { ...cluster, server, skipTLSVerify: cluster.skipTLSVerify || server.startsWith('http:') };
}

function fromFile(path: string): KubeConfig {
  const kc = new KubeConfig();
  try {
    kc.loadFromFile(path);
  } catch (err) {
    throw new K8sConfigError(`cannot load kubeconfig ${path}: ${oneLine(err)}`, { cause: err });
  }
  if (kc.getCurrentCluster() === null) {
    const context = kc.getCurrentContext();
    throw new K8sConfigError(
      context
        ? `kubeconfig ${path}: current context ${JSON.stringify(context)} names no cluster of the file`
        : `kubeconfig ${path} has no current-context`,
    );
  }
  return kc;
}

function inCluster(env: NodeJS.ProcessEnv, dir: string): KubeConfig {
  const host = env.KUBERNETES_SERVICE_HOST ?? '';
  const port = env.KUBERNETES_SERVICE_PORT ?? '';
  const cluster: Cluster = {
    name: 'in-cluster',
    server: `https://${isIPv6(host) ? `[${host}]` : host}:${port}`,
    caFile: `${dir}/ca.crt`,
    skipTLSVerify: false,
  };
  // The token file is re-read by the client: projected service account tokens rotate.
  const user: User = { name: 'in-cluster', authProvider: { name: 'tokenFile', config: { tokenFile: `${dir}/token` } } };
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser(cluster, user);
  return kc;
}

/**
 * kubeconfig file, else in-cluster service account; apiServer overrides the
 * server (http:// gets skipTLSVerify). Throws K8sConfigError with a one-line message.
 */
export function loadKubeConfig(o: K8sConnectionOptions, extra: InClusterOptions = {}): KubeConfig {
  const env = extra.env ?? process.env;
  const dir = extra.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const override = o.apiServer ? serverUrl(o.apiServer, '--k8s-api-server').toString().replace(/\/$/, '') : undefined;
  let kc: KubeConfig;
  if (o.kubeconfig) {
    kc = fromFile(o.kubeconfig);
  } else if (inClusterAvailable(env, dir)) {
    kc = inCluster(env, dir);
  } else if (override !== undefined) {
    kc = new KubeConfig();
    kc.loadFromClusterAndUser({ name: 'api-server', server: override, skipTLSVerify: false }, { name: 'api-server' });
  } else {
    throw new K8sConfigError(
      `no Kubernetes API server: give --k8s-kubeconfig or --k8s-api-server, or run in a pod (KUBERNETES_SERVICE_HOST/PORT and ${dir}/token)`,
    );
  }
  const current = kc.getCurrentCluster()!;
  const server = override ?? serverUrl(current.server, `cluster ${JSON.stringify(current.name)} server`).toString().replace(/\/$/, '');
  kc.clusters = kc.clusters.map((c) => (c.name === current.name ? withServer(c, server) : c));
  return kc;
}

/** The server URL the config points at (for status and logs). */
export function apiServerOf(kc: KubeConfig): string {
  return kc.getCurrentCluster()?.server ?? '';
}
