import { createLogger, type Logger } from '../logging/logger.js';
import { parseEmbeddedOptions } from './embedded/embeddedOptions.js';
import { parseEtcdOptions } from './etcd/etcdOptions.js';
import { KVSTORE_OPTION_KEYS } from './optionKeys.js';
import { InvalidOptionError, UnknownBackendError } from './errors.js';
import type { Backend, BackendKind } from './types.js';

export interface OpenBackendRequest {
  /** `--kvstore`; any string is accepted here so the error for a typo is ours. */
  kind: string;
  /** `--kvstore-opt` pairs, already split (see parseKvstoreOpts). */
  options: Record<string, string>;
  /** Directory for durable data (the agent's --lib-dir); the embedded store defaults to <dataDir>/kvstore/tendril.db. */
  dataDir: string;
  logger?: Logger;
}

export { DEFAULT_BACKEND } from './types.js';


const OPTION_KEYS: Record<BackendKind, readonly string[]> = KVSTORE_OPTION_KEYS;

function isBackendKind(kind: string): kind is BackendKind {
  return Object.hasOwn(OPTION_KEYS, kind);
}

/**
 * Splits repeated `key=value` flags (Cilium's `--kvstore-opt`) into a record.
 * The value may itself contain '='; a key given twice is an error rather than
 * a silent last-wins.
 */
export function parseKvstoreOpts(pairs: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new InvalidOptionError(`--kvstore-opt "${pair}" is not key=value`);
    const key = pair.slice(0, eq);
    if (Object.hasOwn(out, key)) throw new InvalidOptionError(`--kvstore-opt ${key} given twice`);
    out[key] = pair.slice(eq + 1);
  }
  return out;
}

/** Opens the selected backend. The embedded store is opened (and locked) now; etcd connects lazily. */
export async function openBackend(req: OpenBackendRequest): Promise<Backend> {
  if (!isBackendKind(req.kind)) throw new UnknownBackendError(req.kind);
  const allowed = OPTION_KEYS[req.kind];
  for (const key of Object.keys(req.options)) {
    if (!allowed.includes(key)) {
      throw new InvalidOptionError(`unknown --kvstore-opt "${key}" for the ${req.kind} backend (known: ${allowed.join(', ')})`);
    }
  }
  const logger = req.logger ?? createLogger('kvstore');
  // Backends are imported on demand: etcd3 pulls in gRPC and protobuf (~0.4 s
  // of start-up), which every `tendril` invocation would otherwise pay.
  switch (req.kind) {
    case 'embedded': {
      const options = parseEmbeddedOptions(req.options, req.dataDir, logger);
      const { EmbeddedBackend } = await import('./embedded/embeddedBackend.js');
      return EmbeddedBackend.open(options);
    }
    case 'etcd': {
      const options = parseEtcdOptions(req.options, logger);
      const { EtcdBackend } = await import('./etcd/etcdBackend.js');
      return new EtcdBackend(options);
    }
  }
}
