import { setTimeout as sleep } from 'node:timers/promises';
import { Backoff } from '../async/backoff.js';
import type { Logger } from '../logging/logger.js';
import { CompactedError } from '../kvstore/errors.js';
import type { Backend, KeyValue, Watch, WatchEvent } from '../kvstore/types.js';

/**
 * List-then-watch of one kvstore prefix, the informer pattern: the handler
 * gets the full state (`onReset`) and then every change in revision order.
 * When the watch fails — history compacted, or the store gone for good — it
 * lists again and hands the handler a fresh full state, so a consumer never
 * misses a delete. Used for the identity table and the ipcache.
 */
export interface ListWatchHandler {
  /** The complete current state under the prefix; replaces everything known before. */
  onReset(kvs: KeyValue[], revision: number): void;
  onEvents(events: WatchEvent[]): void;
}

export interface ListWatchOptions {
  logger?: Logger;
  /** Delay before re-listing after a non-compaction failure (doubles up to 5 s). */
  retryMs?: number;
}

/** Re-listing after failures backs off up to this. */
const MAX_RELIST_DELAY_MS = 5000;

export class ListWatcher {
  readonly #backend: Backend;
  readonly #prefix: string;
  readonly #handler: ListWatchHandler;
  readonly #logger: Logger | undefined;
  readonly #retryMs: number;
  #watch: Watch | undefined;
  #stopped = false;
  #resyncs = 0;
  #revision = 0;

  constructor(backend: Backend, prefix: string, handler: ListWatchHandler, options: ListWatchOptions = {}) {
    this.#backend = backend;
    this.#prefix = prefix;
    this.#handler = handler;
    this.#logger = options.logger;
    this.#retryMs = options.retryMs ?? 200;
  }

  /** How many times the state was re-listed after a watch failure. */
  get resyncs(): number {
    return this.#resyncs;
  }

  /** Revision of the newest state handed to the handler. */
  get revision(): number {
    return this.#revision;
  }

  /** Lists, delivers the state and starts the watch; resolves once the watch is registered. */
  async start(): Promise<void> {
    await this.#listAndWatch();
  }

  async #listAndWatch(): Promise<void> {
    const listing = await this.#backend.list(this.#prefix);
    if (this.#stopped) return;
    this.#revision = listing.revision;
    this.#handler.onReset(listing.kvs, listing.revision);
    const watch = this.#backend.watch(
      this.#prefix,
      { fromRevision: listing.revision + 1 },
      {
        onEvents: (events) => {
          if (this.#stopped || this.#watch !== watch) return;
          const last = events[events.length - 1];
          if (last !== undefined) this.#revision = last.modRevision;
          this.#handler.onEvents(events);
        },
        onError: (err) => {
          if (this.#stopped || this.#watch !== watch) return;
          void this.#recover(watch, err);
        },
      },
    );
    this.#watch = watch;
    await watch.ready;
  }

  async #recover(failed: Watch, err: Error): Promise<void> {
    this.#watch = undefined;
    await failed.close().catch((e: unknown) => this.#logger?.debug({ err: e }, 'closing a failed watch'));
    this.#logger?.warn({ err, prefix: this.#prefix, compacted: err instanceof CompactedError }, 'watch failed; listing again');
    const backoff = new Backoff({ initialMs: this.#retryMs, maxMs: MAX_RELIST_DELAY_MS });
    // A compacted revision is no fault of the store: list again at once.
    let delay = err instanceof CompactedError ? 0 : backoff.next();
    while (!this.#stopped) {
      if (delay > 0) await sleep(delay);
      try {
        this.#resyncs++;
        await this.#listAndWatch();
        return;
      } catch (e) {
        this.#logger?.warn({ err: e, prefix: this.#prefix }, 're-list failed; retrying');
        delay = backoff.next();
      }
    }
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    const w = this.#watch;
    this.#watch = undefined;
    if (w !== undefined) await w.close();
  }
}
