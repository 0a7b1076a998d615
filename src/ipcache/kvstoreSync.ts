import type { Logger } from '../logging/logger.js';
import { formatPrefix, tryParseIp } from '../netip/index.js';
import { IPCACHE_PREFIX } from '../kvstore/keys.js';
import { ReservedIdentity } from '../identity/constants.js';
import type { Backend, KeyValue, WatchEvent } from '../kvstore/types.js';
import { KeyedSerializer } from '../async/keyedSerializer.js';
import { ListWatcher, scopeOf, withLease, type LeaseProvider } from '../identity/index.js';
import { decodeValue, encodeValue, parseKeySuffix, prefixKeySuffix } from './codec.js';
import { IpcacheError, IpcacheErrorCode } from './errors.js';
import { parsePrefixInput, type IPCache, type IpcacheEntry, type SourceChange } from './ipcache.js';
import { IpcacheSource } from './source.js';

export interface KvstoreIPCacheSyncOptions {
  backend: Backend;
  ipcache: IPCache;
  nodeName: string;
  /** This node's IP: the tunnel endpoint other nodes use for its endpoints. */
  nodeIP: string;
  /**
   * Its IPv6 InternalIP beside an IPv4 node IP: published too, the endpoint a
   * node whose node IP is IPv6 alone reaches its endpoints at (it has no IPv4
   * underlay). Such a node (nodeIP IPv6) takes a value's hostIP6 when it has one.
   */
  nodeIP6?: string;
  lease: LeaseProvider;
  /** Default `tendril/state/ip/v1/`; tests pass a private prefix. */
  keyPrefix?: string;
  logger?: Logger;
}

export interface SyncStats {
  writes: number;
  deletes: number;
  /** Conditional deletes skipped because another node had taken the address. */
  staleDeletesSkipped: number;
  /** Full re-lists after a failed watch (compaction, lost store). */
  resyncs: number;
}

/** Owner recorded in this node's ipcache for an entry learnt from the kvstore. */
export function kvstoreOwner(node: string): string {
  return `node:${node}`;
}

/**
 * Publishes this node's `local` ipcache entries to the kvstore under the
 * node's lease, and feeds every other node's entries into the ipcache as
 * source `kvstore` (Cilium's kvstore ipcache sync).
 *
 * - Writes are serialised per address. A delete is a transaction comparing
 *   the value this node wrote, so a node that gave an address up never
 *   deletes the key of the node that reuses it (Cilium #19958).
 * - A dead node's keys vanish with its lease; the watch turns that into
 *   deletes everywhere.
 * - A failed watch (compaction) re-lists and reconciles; a renewed lease
 *   re-publishes every local entry.
 */
export class KvstoreIPCacheSync {
  readonly #o: KvstoreIPCacheSyncOptions;
  readonly #prefix: string;
  readonly #serial = new KeyedSerializer();
  /** key → value this node last wrote. */
  readonly #written = new Map<string, string>();
  /** prefix → owner of the kvstore-sourced entry put into the ipcache. */
  readonly #remote = new Map<string, string>();
  readonly #watcher: ListWatcher;
  readonly #unsubscribe: Array<() => void> = [];
  #stopped = false;
  /** This node's node IP is IPv6: it reaches other nodes over an IPv6 underlay (a value's hostIP6 when given). */
  readonly #ipv6Underlay: boolean;
  readonly stats: SyncStats = { writes: 0, deletes: 0, staleDeletesSkipped: 0, resyncs: 0 };

  constructor(options: KvstoreIPCacheSyncOptions) {
    if (tryParseIp(options.nodeIP) === undefined) {
      throw new IpcacheError(IpcacheErrorCode.INVALID_HOST_IP, `node IP ${JSON.stringify(options.nodeIP)} is not an IP address`);
    }
    if (options.nodeIP6 !== undefined && tryParseIp(options.nodeIP6)?.family !== 6) {
      throw new IpcacheError(IpcacheErrorCode.INVALID_HOST_IP, `IPv6 node IP ${JSON.stringify(options.nodeIP6)} is not an IPv6 address`);
    }
    this.#o = options;
    this.#ipv6Underlay = tryParseIp(options.nodeIP)?.family === 6;
    this.#prefix = options.keyPrefix ?? IPCACHE_PREFIX;
    this.#watcher = new ListWatcher(
      options.backend,
      this.#prefix,
      { onReset: (kvs) => this.#reset(kvs), onEvents: (evs) => this.#apply(evs) },
      options.logger === undefined ? {} : { logger: options.logger },
    );
  }

  key(prefixText: string): string {
    return `${this.#prefix}${prefixKeySuffix(parsePrefixInput(prefixText))}`;
  }

  async start(): Promise<void> {
    const { ipcache, lease } = this.#o;
    this.#unsubscribe.push(ipcache.watchSource(IpcacheSource.Local, (c) => this.#onLocal(c)));
    this.#unsubscribe.push(lease.onRenewed(() => this.#republish()));
    for (const entry of ipcache.listSource(IpcacheSource.Local)) this.#onLocal({ type: 'upsert', entry });
    await this.#watcher.start();
  }

  /** Resolves when every queued write has reached the kvstore. */
  flush(): Promise<void> {
    return this.#serial.idle();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const u of this.#unsubscribe.splice(0)) u();
    await this.#serial.idle();
    await this.#watcher.stop();
  }

  #onLocal(change: SourceChange): void {
    if (this.#stopped) return;
    const entry = change.entry;
    // A node-local (CIDR) identity means nothing on other nodes; it is never published.
    if (scopeOf(entry.identity) === 'local') return;
    // The node's own addresses are `host` here only; other nodes know them as a remote node's, never as a pod's.
    if (entry.identity === ReservedIdentity.Host) return;
    const key = this.key(entry.prefix);
    void this.#serial
      .run(key, () => (change.type === 'upsert' ? this.#write(key, entry) : this.#withdraw(key)))
      .catch((err: unknown) => this.#o.logger?.error({ err, key, change: change.type }, 'ipcache kvstore write failed'));
  }

  async #write(key: string, entry: IpcacheEntry): Promise<void> {
    const value = encodeValue({
      identity: entry.identity,
      hostIP: entry.hostIP ?? this.#o.nodeIP,
      ...(entry.hostIP === undefined && this.#o.nodeIP6 !== undefined ? { hostIP6: this.#o.nodeIP6 } : {}),
      node: this.#o.nodeName,
      owner: entry.owner,
    });
    await withLease(this.#o.lease, (lease) => this.#o.backend.put(key, value, { lease }));
    this.#written.set(key, value);
    this.stats.writes++;
  }

  async #withdraw(key: string): Promise<void> {
    const value = this.#written.get(key);
    if (value === undefined) return;
    this.#written.delete(key);
    const res = await this.#o.backend.txn({
      compare: [{ key, target: 'value', value }],
      success: [{ type: 'delete', key }],
    });
    if (res.succeeded) this.stats.deletes++;
    else this.stats.staleDeletesSkipped++;
  }

  /**
   * Deletes keys this node name wrote in an earlier life (before an agent
   * restart) that no restored endpoint re-published; the agent calls it once
   * restore is done, instead of waiting for the old lease to expire.
   * Each delete compares the value seen, so a key re-written meanwhile stays.
   */
  async pruneStale(): Promise<number> {
    await this.flush();
    const listing = await this.#o.backend.list(this.#prefix);
    let pruned = 0;
    for (const kv of listing.kvs) {
      if (this.#written.has(kv.key)) continue;
      const v = decodeValue(kv.value);
      if (typeof v === 'string' || v.node !== this.#o.nodeName) continue;
      const res = await this.#o.backend.txn({
        compare: [{ key: kv.key, target: 'modRevision', value: kv.modRevision }],
        success: [{ type: 'delete', key: kv.key }],
      });
      if (res.succeeded) pruned++;
    }
    return pruned;
  }

  #republish(): void {
    for (const entry of this.#o.ipcache.listSource(IpcacheSource.Local)) this.#onLocal({ type: 'upsert', entry });
  }

  #prefixOf(key: string): string | undefined {
    const p = parseKeySuffix(key.slice(this.#prefix.length));
    return p === undefined ? undefined : formatPrefix(p);
  }

  #upsertRemote(key: string, value: string): void {
    const prefix = this.#prefixOf(key);
    if (prefix === undefined) {
      this.#o.logger?.error({ key }, 'ipcache key is not an IP or CIDR; ignored');
      return;
    }
    const v = decodeValue(value);
    if (typeof v === 'string') {
      this.#o.logger?.error({ key, reason: v }, 'unusable ipcache value in the kvstore; ignored');
      this.#removeRemote(prefix);
      return;
    }
    if (v.node === this.#o.nodeName) {
      // Our own key: the local entry is authoritative; drop what another node said before us.
      this.#removeRemote(prefix);
      return;
    }
    const owner = kvstoreOwner(v.node);
    const hostIP = v.hostIP6 !== undefined && this.#ipv6Underlay ? v.hostIP6 : v.hostIP;
    this.#o.ipcache.upsert(prefix, { source: IpcacheSource.Kvstore, owner, identity: v.identity, hostIP });
    this.#remote.set(prefix, owner);
  }

  #removeRemote(prefix: string): void {
    const owner = this.#remote.get(prefix);
    if (owner === undefined) return;
    this.#remote.delete(prefix);
    this.#o.ipcache.delete(prefix, { source: IpcacheSource.Kvstore, owner });
  }

  #apply(events: WatchEvent[]): void {
    for (const ev of events) {
      if (ev.type === 'put') this.#upsertRemote(ev.key, ev.value);
      else {
        const prefix = this.#prefixOf(ev.key);
        if (prefix !== undefined) this.#removeRemote(prefix);
      }
    }
  }

  #reset(kvs: KeyValue[]): void {
    this.stats.resyncs = this.#watcher.resyncs;
    const present = new Set<string>();
    for (const kv of kvs) {
      const prefix = this.#prefixOf(kv.key);
      if (prefix !== undefined) present.add(prefix);
    }
    for (const prefix of [...this.#remote.keys()]) if (!present.has(prefix)) this.#removeRemote(prefix);
    for (const kv of kvs) this.#upsertRemote(kv.key, kv.value);
  }
}
