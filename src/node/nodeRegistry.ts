import { Serializer } from '../async/keyedSerializer.js';
import type { Logger } from '../logging/logger.js';
import { NODES_PREFIX } from '../kvstore/keys.js';
import type { Backend, KeyValue, WatchEvent } from '../kvstore/types.js';
import { ListWatcher, withLease, type LeaseProvider } from '../identity/index.js';
import { NodeError, NodeErrorCode, NodeRecordError } from './errors.js';
import { KnownNodes, type KnownNode } from './knownNodes.js';
import { decodeNodeRecord, encodeNodeRecord, isNodeName } from './nodeRecord.js';
import type { NodeChange, NodeRecord, NodeRegistryService } from './types.js';

export interface NodeRegistryOptions {
  backend: Backend;
  /** The node's kvstore session (NodeLease): its record lives and dies with it. Absent: a reader (follow() only). */
  lease?: LeaseProvider;
  nodeName: string;
  logger?: Logger;
  /** Default `tendril/state/nodes/v1/`; tests pass a private prefix. */
  keyPrefix?: string;
}


/**
 * The cluster's nodes as the kvstore holds them (Cilium's node registry over
 * the kvstore). This node publishes its own record under its lease, so a node
 * that dies without a word leaves every other node's view one TTL later; every
 * node follows the prefix with a list-then-watch and tells subscribers what
 * changed.
 *
 * - The own record is written again when the lease is replaced (expired while
 *   the store was unreachable) and when the watch sees the key gone, so a live
 *   node never stays missing from the others' view.
 * - A record that does not decode is logged and treated as absent: one broken
 *   writer must not stop a node from seeing the others.
 * - After a failed watch the state is listed again and the difference is
 *   handed to subscribers as upserts and deletes.
 */
export class NodeRegistry implements NodeRegistryService {
  readonly #backend: Backend;
  readonly #lease: LeaseProvider | undefined;
  readonly #nodeName: string;
  readonly #log: Logger | undefined;
  readonly #prefix: string;
  readonly #watcher: ListWatcher;
  readonly #known: KnownNodes;
  #state: 'new' | 'running' | 'stopped' = 'new';
  #listed = false;
  #own: NodeRecord | undefined;
  #ownText = '';
  /** Store revision of this node's last successful write of its record. */
  #ownRevision = 0;
  /** Own-record writes run one at a time, each writing the newest record. */
  readonly #writes = new Serializer();
  #unsubscribeLease: (() => void) | undefined;

  constructor(o: NodeRegistryOptions) {
    if (!isNodeName(o.nodeName)) throw new NodeRecordError(`node name ${JSON.stringify(o.nodeName)} is not a DNS-style name`);
    this.#backend = o.backend;
    this.#lease = o.lease;
    this.#nodeName = o.nodeName;
    this.#log = o.logger;
    this.#prefix = o.keyPrefix ?? NODES_PREFIX;
    this.#known = new KnownNodes(o.nodeName, o.logger);
    this.#watcher = new ListWatcher(
      this.#backend,
      this.#prefix,
      { onReset: (kvs, revision) => this.#reset(kvs, revision), onEvents: (events) => this.#apply(events) },
      this.#log === undefined ? {} : { logger: this.#log },
    );
  }

  get nodeName(): string {
    return this.#nodeName;
  }

  /** The key of a node's record. */
  key(name: string): string {
    return `${this.#prefix}${name}`;
  }

  /** Publishes `own` under the lease, lists and watches the prefix; resolves after the first listing. */
  async start(own: NodeRecord): Promise<void> {
    if (this.#state !== 'new') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} was started before`);
    if (this.#lease === undefined) throw new NodeError(NodeErrorCode.NOT_RUNNING, 'a node registry without a lease only follows (follow()): it cannot publish a record');
    this.#setOwn(own);
    this.#state = 'running';
    this.#unsubscribeLease = this.#lease.onRenewed(() => this.#rewrite('node lease replaced'));
    try {
      await this.#queueWrite();
      await this.#watcher.start();
    } catch (err) {
      await this.stop().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Lists and watches the prefix without publishing anything (a reader of
   * the cluster's nodes: the relay); resolves after the first listing.
   */
  async follow(): Promise<void> {
    if (this.#state !== 'new') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} was started before`);
    this.#state = 'running';
    try {
      await this.#watcher.start();
    } catch (err) {
      await this.stop().catch(() => undefined);
      throw err;
    }
  }

  /** Publishes a new version of this node's record (pod CIDRs or health changed). */
  async update(own: NodeRecord): Promise<void> {
    if (this.#state !== 'running') throw new NodeError(NodeErrorCode.NOT_RUNNING, `node registry of ${this.#nodeName} is not running`);
    const before = this.#ownText;
    this.#setOwn(own);
    if (this.#ownText === before) return;
    await this.#queueWrite();
  }

  /** Stops following the prefix. The own key stays: the lease's end removes it (revoked on a clean shutdown, expired after a crash). */
  async stop(): Promise<void> {
    this.#state = 'stopped';
    this.#unsubscribeLease?.();
    this.#unsubscribeLease = undefined;
    await this.#watcher.stop();
    await this.#writes.settled();
  }

  list(): NodeRecord[] {
    return this.#known.list(this.#ownIfRunning());
  }

  get(name: string): NodeRecord | undefined {
    return this.#known.get(name, this.#ownIfRunning());
  }

  /** The kvstore revision of the node's record as last seen (own: as last written or seen). */
  revisionOf(name: string): number | undefined {
    return this.#known.revisionOf(name, this.#ownRevision);
  }

  subscribe(listener: (change: NodeChange) => void): () => void {
    return this.#known.subscribe(listener);
  }

  #ownIfRunning(): NodeRecord | undefined {
    return this.#state === 'running' ? this.#own : undefined;
  }

  // ---- own record -------------------------------------------------------------

  #setOwn(own: NodeRecord): void {
    if (own.name !== this.#nodeName) throw new NodeRecordError(`node record names ${JSON.stringify(own.name)}, but this node is ${JSON.stringify(this.#nodeName)}`);
    this.#ownText = encodeNodeRecord(own); // throws NodeRecordError for a record others could not decode
    this.#own = JSON.parse(this.#ownText) as NodeRecord;
  }

  /** Queues a write of the newest own record; the promise fails with the write. */
  #queueWrite(): Promise<void> {
    return this.#writes.run(() => this.#writeOwn());
  }

  async #writeOwn(): Promise<void> {
    if (this.#state !== 'running') return;
    const key = this.key(this.#nodeName);
    const text = this.#ownText;
    const res = await withLease(this.#lease!, (lease) => this.#backend.put(key, text, { lease }));
    this.#ownRevision = Math.max(this.#ownRevision, res.revision);
    this.#log?.debug({ node: this.#nodeName, revision: res.revision }, 'node record written');
  }

  /** Background re-publish: failures are logged (the next lease change or delete tries again). */
  #rewrite(why: string): void {
    // A reader (follow()) has no record of its own to write.
    if (this.#state !== 'running' || this.#own === undefined) return;
    this.#log?.info({ node: this.#nodeName, why }, 'writing the node record again');
    this.#queueWrite().catch((err: unknown) => this.#log?.error({ err, node: this.#nodeName, why }, 'cannot write the node record again'));
  }

  // ---- watch ------------------------------------------------------------------

  #decode(key: string, value: string, revision: number): KnownNode | undefined {
    const name = key.slice(this.#prefix.length);
    if (!isNodeName(name)) {
      this.#log?.error({ key }, 'node key does not end in a node name; ignored');
      return undefined;
    }
    const record = decodeNodeRecord(value, name);
    if (typeof record === 'string') {
      this.#log?.error({ key, reason: record }, 'unusable node record in the kvstore; ignored');
      return undefined;
    }
    return { record, text: JSON.stringify(record), revision };
  }

  #reset(kvs: KeyValue[], revision: number): void {
    const next = new Map<string, KnownNode>();
    for (const kv of kvs) {
      const k = this.#decode(kv.key, kv.value, kv.modRevision);
      if (k !== undefined) next.set(k.record.name, k);
    }
    const previous = new Map(this.#known.nodes);
    this.#known.nodes.clear();
    for (const [name, k] of next) this.#known.nodes.set(name, k);
    if (this.#listed) {
      // A re-list after a failed watch: hand on only what changed meanwhile.
      for (const [name, old] of previous) if (!next.has(name)) this.#known.emit({ type: 'delete', node: old.record });
      for (const [name, k] of next) {
        const old = previous.get(name);
        if (old === undefined) this.#known.emit({ type: 'upsert', node: k.record });
        else if (old.text !== k.text) this.#known.emit({ type: 'upsert', node: k.record, previous: old.record });
      }
    }
    this.#listed = true;
    if (!next.has(this.#nodeName) && revision > this.#ownRevision) this.#rewrite('own record missing from the listing');
  }

  #apply(events: WatchEvent[]): void {
    for (const ev of events) {
      const name = ev.key.slice(this.#prefix.length);
      const old = this.#known.nodes.get(name);
      if (ev.type === 'put') {
        const k = this.#decode(ev.key, ev.value, ev.modRevision);
        if (k === undefined) {
          // The key now says nothing usable: the node's previous record no longer stands.
          if (old !== undefined) {
            this.#known.nodes.delete(name);
            this.#known.emit({ type: 'delete', node: old.record });
          }
          continue;
        }
        this.#known.nodes.set(name, k);
        if (old === undefined) this.#known.emit({ type: 'upsert', node: k.record });
        else if (old.text !== k.text) this.#known.emit({ type: 'upsert', node: k.record, previous: old.record });
        if (name === this.#nodeName && k.text !== this.#ownText && ev.modRevision > this.#ownRevision) {
          this.#log?.warn({ node: name, revision: ev.modRevision }, 'another writer changed this node\'s record (two agents with one node name?)');
        }
        continue;
      }
      if (old !== undefined) {
        this.#known.nodes.delete(name);
        this.#known.emit({ type: 'delete', node: old.record });
      }
      // Our key went with a lease the store lost, or by hand: a live node puts it back.
      if (name === this.#nodeName && ev.modRevision > this.#ownRevision) this.#rewrite('own record deleted');
    }
  }
}
