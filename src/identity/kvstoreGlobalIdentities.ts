import type { Logger } from '../logging/logger.js';
import type { LabelSet } from '../labels/index.js';
import type { Backend } from '../kvstore/types.js';
import type { Identity } from './identity.js';
import type { GlobalIdentityStore, StoreAcquireResult } from './globalIdentityStore.js';
import { IdentityTable, type IdentityListener } from './identityTable.js';
import { IdentityKeys } from './keys.js';
import { KvstoreIdentities, type GcResult } from './kvstoreIdentities.js';
import type { LeaseProvider } from './nodeLease.js';

export interface KvstoreGlobalIdentitiesOptions {
  backend: Backend;
  nodeName: string;
  lease: LeaseProvider;
  keyPrefix?: string;
  maxRetries: number;
  minId: number;
  maxId: number;
  logger?: Logger;
}

/**
 * Cluster-wide identities in the kvstore: the CAS protocol of
 * KvstoreIdentities (usage keys on the node lease, agents collect unused
 * identities) and the list+watch mirror of IdentityTable.
 */
export class KvstoreGlobalIdentities implements GlobalIdentityStore {
  readonly #kv: KvstoreIdentities;
  readonly #table: IdentityTable;
  readonly #lease: LeaseProvider;
  readonly #logger: Logger | undefined;

  constructor(o: KvstoreGlobalIdentitiesOptions) {
    const keys = new IdentityKeys(o.keyPrefix);
    this.#lease = o.lease;
    this.#logger = o.logger;
    this.#table = new IdentityTable(o.backend, keys, o.logger);
    this.#kv = new KvstoreIdentities({
      backend: o.backend,
      keys,
      nodeName: o.nodeName,
      lease: o.lease,
      minId: o.minId,
      maxId: o.maxId,
      maxRetries: o.maxRetries,
      knownIds: () => this.#table.ids(),
      knownIdOf: (labels) => this.#table.idOfText(labels),
      ...(o.logger === undefined ? {} : { logger: o.logger }),
    });
  }

  start(): Promise<void> {
    return this.#table.start();
  }

  stop(): Promise<void> {
    return this.#table.stop();
  }

  async acquire(labels: LabelSet, preferredId?: number): Promise<StoreAcquireResult> {
    const res = await this.#kv.acquire(labels.toString(), preferredId);
    return { id: res.id, conflicts: res.conflicts };
  }

  /** Drops this node's usage key; the identity goes at once when no other node uses it. */
  async release(labels: LabelSet): Promise<void> {
    const key = labels.toString();
    await this.#kv.dropUsage(key);
    const gone = await this.#kv.collectOne(key);
    if (gone !== undefined) this.#logger?.debug({ id: gone, labels: key }, 'identity released cluster-wide');
  }

  get(id: number): Identity | undefined {
    return this.#table.get(id);
  }

  idOf(labels: LabelSet): number | undefined {
    return this.#table.idOf(labels);
  }

  list(): Identity[] {
    return this.#table.list();
  }

  subscribe(listener: IdentityListener): () => void {
    return this.#table.subscribe(listener);
  }

  /** Usage keys live on the node lease: a new lease means they are gone. */
  onUsageLost(listener: (reason: string) => void): () => void {
    return this.#lease.onRenewed(() => listener('node lease renewed'));
  }

  collect(): Promise<GcResult> {
    return this.#kv.collectAll();
  }
}
