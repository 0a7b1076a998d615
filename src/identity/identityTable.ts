import type { Logger } from '../logging/logger.js';
import { LabelError, LabelSet } from '../labels/index.js';
import type { Backend, KeyValue, WatchEvent } from '../kvstore/types.js';
import { makeIdentity, type Identity } from './identity.js';
import type { IdentityKeys } from './keys.js';
import { ListWatcher } from './listWatch.js';

export type IdentityEvent = { type: 'upsert' | 'delete'; identity: Identity };
export type IdentityListener = (events: readonly IdentityEvent[]) => void;

/**
 * Every cluster-wide identity, mirrored from the `id/` keys by list+watch
 * (Cilium's identity cache). Lookups by number or labels never touch the
 * kvstore; the policy engine subscribes to learn of new and deleted identities.
 */
export class IdentityTable {
  readonly #keys: IdentityKeys;
  readonly #logger: Logger | undefined;
  readonly #watcher: ListWatcher;
  readonly #byId = new Map<number, Identity>();
  readonly #byLabels = new Map<string, number>();
  readonly #listeners = new Set<IdentityListener>();

  constructor(backend: Backend, keys: IdentityKeys, logger?: Logger) {
    this.#keys = keys;
    this.#logger = logger;
    this.#watcher = new ListWatcher(
      backend,
      keys.idPrefix,
      { onReset: (kvs) => this.#reset(kvs), onEvents: (evs) => this.#apply(evs) },
      logger === undefined ? {} : { logger },
    );
  }

  start(): Promise<void> {
    return this.#watcher.start();
  }

  stop(): Promise<void> {
    return this.#watcher.stop();
  }

  get resyncs(): number {
    return this.#watcher.resyncs;
  }

  #decode(key: string, value: string): Identity | undefined {
    const id = this.#keys.parseIdKey(key);
    if (id === undefined) return undefined;
    try {
      return makeIdentity(id, LabelSet.fromSortedString(value));
    } catch (err) {
      if (!(err instanceof LabelError)) throw err;
      this.#logger?.error({ key, value, err }, 'identity with unreadable labels in the kvstore; ignored');
      return undefined;
    }
  }

  #reset(kvs: KeyValue[]): void {
    const next = new Map<number, Identity>();
    for (const kv of kvs) {
      const identity = this.#decode(kv.key, kv.value);
      if (identity !== undefined) next.set(identity.id, identity);
    }
    const events: IdentityEvent[] = [];
    for (const [id, old] of this.#byId) if (!next.has(id)) events.push({ type: 'delete', identity: old });
    for (const [id, identity] of next) {
      const old = this.#byId.get(id);
      if (old === undefined || !old.labels.equals(identity.labels)) events.push({ type: 'upsert', identity });
    }
    this.#byId.clear();
    this.#byLabels.clear();
    for (const [id, identity] of next) this.#set(id, identity);
    this.#emit(events);
  }

  #set(id: number, identity: Identity): void {
    this.#byId.set(id, identity);
    this.#byLabels.set(identity.labels.toString(), id);
  }

  #apply(evs: WatchEvent[]): void {
    const events: IdentityEvent[] = [];
    for (const ev of evs) {
      const id = this.#keys.parseIdKey(ev.key);
      if (id === undefined) continue;
      const old = this.#byId.get(id);
      if (ev.type === 'delete') {
        if (old === undefined) continue;
        this.#byId.delete(id);
        if (this.#byLabels.get(old.labels.toString()) === id) this.#byLabels.delete(old.labels.toString());
        events.push({ type: 'delete', identity: old });
        continue;
      }
      const identity = this.#decode(ev.key, ev.value);
      if (identity === undefined) continue;
      if (old !== undefined && old.labels.equals(identity.labels)) continue;
      this.#set(id, identity);
      events.push({ type: 'upsert', identity });
    }
    this.#emit(events);
  }

  #emit(events: IdentityEvent[]): void {
    if (events.length === 0) return;
    for (const l of this.#listeners) {
      try {
        l(events);
      } catch (err) {
        // A listener's bug must not stop the table or the other listeners; it is logged, not hidden.
        this.#logger?.error({ err }, 'identity listener threw');
      }
    }
  }

  subscribe(listener: IdentityListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  get(id: number): Identity | undefined {
    return this.#byId.get(id);
  }

  idOf(labels: LabelSet): number | undefined {
    return this.#byLabels.get(labels.toString());
  }

  /** Same as idOf, for a label set already in its sorted string form. */
  idOfText(sortedLabels: string): number | undefined {
    return this.#byLabels.get(sortedLabels);
  }

  ids(): IterableIterator<number> {
    return this.#byId.keys();
  }

  list(): Identity[] {
    return [...this.#byId.values()];
  }
}
