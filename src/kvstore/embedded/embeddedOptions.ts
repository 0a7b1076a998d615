import { KVSTORE_OPTION_KEYS } from '../optionKeys.js';
import { isAbsolute, join } from 'node:path';
import type { Logger } from '../../logging/logger.js';
import { parseDurationMs } from '../duration.js';
import { InvalidOptionError } from '../errors.js';
import type { EmbeddedOptions } from './embeddedBackend.js';

/**
 * WAL with synchronous=FULL: every acknowledged commit is fsynced to the WAL,
 * so it survives power loss, not only a killed process; WAL keeps that to one
 * sequential fsync per commit (see docs/architecture.md for the measurements).
 */
export const EMBEDDED_DEFAULTS = {
  synchronous: 'full',
  journal: 'wal',
  leaseCheckIntervalMs: 250,
  historyRevisions: 100_000,
} as const satisfies Partial<EmbeddedOptions>;

/** `--kvstore-opt` keys the embedded backend understands (see ../optionKeys.ts). */
export const EMBEDDED_OPTION_KEYS = KVSTORE_OPTION_KEYS.embedded;

/** The store lives in the agent's durable data dir (--lib-dir) unless embedded.path says otherwise. */
export function defaultEmbeddedPath(dataDir: string): string {
  return join(dataDir, 'kvstore', 'tendril.db');
}

export function parseEmbeddedOptions(opts: Record<string, string>, dataDir: string, logger: Logger): EmbeddedOptions {
  const path = opts['embedded.path'] ?? defaultEmbeddedPath(dataDir);
  if (!isAbsolute(path)) throw new InvalidOptionError(`embedded.path must be absolute, got "${path}"`);
  const sync = opts['embedded.synchronous'] ?? EMBEDDED_DEFAULTS.synchronous;
  if (sync !== 'full' && sync !== 'normal') {
    throw new InvalidOptionError(`embedded.synchronous must be "full" or "normal", got "${sync}"`);
  }
  const journal = opts['embedded.journal'] ?? EMBEDDED_DEFAULTS.journal;
  if (journal !== 'wal' && journal !== 'delete') {
    throw new InvalidOptionError(`embedded.journal must be "wal" or "delete", got "${journal}"`);
  }
  const interval = opts['embedded.leaseCheckInterval'];
  const history = opts['embedded.historyRevisions'];
  let historyRevisions: number = EMBEDDED_DEFAULTS.historyRevisions;
  if (history !== undefined) {
    historyRevisions = Number(history);
    if (!Number.isSafeInteger(historyRevisions) || historyRevisions < 1) {
      throw new InvalidOptionError(`embedded.historyRevisions must be a positive integer, got "${history}"`);
    }
  }
  return {
    path,
    synchronous: sync,
    journal,
    leaseCheckIntervalMs:
      interval === undefined ? EMBEDDED_DEFAULTS.leaseCheckIntervalMs : parseDurationMs('embedded.leaseCheckInterval', interval),
    historyRevisions,
    logger,
  };
}
