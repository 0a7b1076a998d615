import type { BackendKind } from './types.js';

/**
 * `--kvstore-opt` keys each backend understands, in a module of their own so
 * help texts can list them without loading the backends' option parsers.
 * `etcd.config` names a YAML file in the format Cilium's `etcd.config` uses
 * (endpoints, trusted-ca-file, cert-file, key-file, plus username/password);
 * the inline keys override it.
 */
export const KVSTORE_OPTION_KEYS = {
  embedded: ['embedded.path', 'embedded.synchronous', 'embedded.journal', 'embedded.leaseCheckInterval', 'embedded.historyRevisions'],
  etcd: ['etcd.config', 'etcd.endpoints', 'etcd.trustedCAFile', 'etcd.certFile', 'etcd.keyFile', 'etcd.username', 'etcd.password', 'etcd.callTimeout', 'etcd.retryTimeout'],
} as const satisfies Record<BackendKind, readonly string[]>;

/** One line per backend, for `--help`. */
export function describeKvstoreOptions(): string {
  return `embedded: ${KVSTORE_OPTION_KEYS.embedded.join(', ')}; etcd: ${KVSTORE_OPTION_KEYS.etcd.join(', ')}`;
}
