import type { Logger } from '../logging/logger.js';
import { formatPrefix, tryParseIp, tryParsePrefix, type IpPrefix } from '../netip/index.js';
import { parseIdentityNumber } from '../identity/index.js';
import { IpcacheError, IpcacheErrorCode } from './errors.js';
import { PrefixMap } from './prefixMap.js';
import { isIpcacheSource, sourcePriority, type IpcacheSource } from './source.js';

/**
 * IP/CIDR → security identity (+ the node that hosts it), the map every
 * node's datapath consults for each packet's peer (Cilium's ipcache).
 */

/** Who wrote an entry: the source and, within it, the owner (endpoint, node, policy). */
export interface IpcacheMetadata {
  source: IpcacheSource;
  /** e.g. `endpoint:1234` for a local endpoint, `node:worker-2` for a kvstore entry. */
  owner: string;
}

export interface IpcacheUpsert extends IpcacheMetadata {
  identity: number;
  /** IP of the node hosting the address (tunnel endpoint); absent for local and world entries. */
  hostIP?: string;
}

export interface IpcacheEntry {
  /** Canonical `addr/len`; a single address is `/32` or `/128`. */
  readonly prefix: string;
  readonly identity: number;
  readonly hostIP?: string;
  readonly source: IpcacheSource;
  readonly owner: string;
}

export type UpsertOutcome = 'added' | 'updated' | 'unchanged' | 'shadowed';
export type DeleteOutcome = 'deleted' | 'not-found' | 'owner-mismatch';

/** Effective (winning) entry changes, for the datapath. */
export interface IpcacheListener {
  onUpsert(entry: IpcacheEntry, previous: IpcacheEntry | undefined): void;
  onDelete(previous: IpcacheEntry): void;
}

/** Changes of one source's own entries, for whoever publishes them (KvstoreIPCacheSync). */
export type SourceChange = { type: 'upsert'; entry: IpcacheEntry } | { type: 'delete'; entry: IpcacheEntry };

/**
 * A prefix's entries. Nearly every slot holds one source's entry (a pod's
 * address, written by its node): then `bySource` is undefined and `effective`
 * is that entry — a Map per slot would be most of the memory of 50,000 remote
 * pods (~180 bytes each). Two or more sources: `bySource` holds them all.
 */
interface Slot {
  prefix: IpPrefix;
  /** One entry per source when there are two or more; the effective one is the highest priority. */
  bySource: Map<IpcacheSource, IpcacheEntry> | undefined;
  effective: IpcacheEntry;
}

function sourceEntry(slot: Slot, source: IpcacheSource): IpcacheEntry | undefined {
  if (slot.bySource !== undefined) return slot.bySource.get(source);
  return slot.effective.source === source ? slot.effective : undefined;
}

function slotEntries(slot: Slot): IpcacheEntry[] {
  return slot.bySource === undefined ? [slot.effective] : [...slot.bySource.values()];
}

export function parsePrefixInput(text: string): IpPrefix {
  const p = typeof text === 'string' ? tryParsePrefix(text, { bareAddress: true }) : undefined;
  if (p === undefined) {
    throw new IpcacheError(
      IpcacheErrorCode.INVALID_PREFIX,
      `${JSON.stringify(text)} is not an IP address or a CIDR without host bits (e.g. 10.0.1.5, 10.0.0.0/8, fd00::/64)`,
    );
  }
  return p;
}

function checkMetadata(meta: IpcacheMetadata): void {
  if (!isIpcacheSource(meta.source)) {
    throw new IpcacheError(IpcacheErrorCode.INVALID_METADATA, `unknown ipcache source ${JSON.stringify(meta.source)}`);
  }
  if (typeof meta.owner !== 'string' || meta.owner.length === 0 || meta.owner.length > 256) {
    throw new IpcacheError(IpcacheErrorCode.INVALID_METADATA, 'ipcache owner must be a non-empty string of at most 256 characters');
  }
}

function sameEntry(a: IpcacheEntry, b: IpcacheEntry): boolean {
  return a.identity === b.identity && a.hostIP === b.hostIP && a.source === b.source && a.owner === b.owner;
}

function strongest(entries: Iterable<IpcacheEntry>): IpcacheEntry | undefined {
  let best: IpcacheEntry | undefined;
  for (const e of entries) if (best === undefined || sourcePriority(e.source) > sourcePriority(best.source)) best = e;
  return best;
}

export class IPCache {
  readonly #slots = new PrefixMap<Slot>();
  readonly #listeners = new Set<IpcacheListener>();
  readonly #sourceListeners = new Map<IpcacheSource, Set<(c: SourceChange) => void>>();
  readonly #logger: Logger | undefined;

  constructor(options: { logger?: Logger } = {}) {
    this.#logger = options.logger;
  }

  get size(): number {
    return this.#slots.size;
  }

  /**
   * Sets this source's entry for the prefix (replacing the source's previous
   * entry, whoever owned it: the newest writer of an address wins). Returns
   * 'shadowed' when a stronger source keeps the effective entry.
   */
  upsert(prefixText: string, update: IpcacheUpsert): UpsertOutcome {
    checkMetadata(update);
    const prefix = parsePrefixInput(prefixText);
    let identity: number;
    try {
      identity = parseIdentityNumber(update.identity);
    } catch (err) {
      throw new IpcacheError(IpcacheErrorCode.INVALID_IDENTITY, (err as Error).message);
    }
    if (update.hostIP !== undefined && tryParseIp(update.hostIP) === undefined) {
      throw new IpcacheError(IpcacheErrorCode.INVALID_HOST_IP, `host IP ${JSON.stringify(update.hostIP)} is not an IP address`);
    }
    const entry: IpcacheEntry = Object.freeze({
      prefix: formatPrefix(prefix),
      identity,
      ...(update.hostIP === undefined ? {} : { hostIP: update.hostIP }),
      source: update.source,
      owner: update.owner,
    });
    const slot = this.#slots.get(prefix);
    if (slot === undefined) {
      this.#slots.set(prefix, { prefix, bySource: undefined, effective: entry });
      this.#emitSource({ type: 'upsert', entry });
      this.#emit((l) => l.onUpsert(entry, undefined));
      return 'added';
    }
    const old = sourceEntry(slot, entry.source);
    if (old !== undefined && sameEntry(old, entry)) return 'unchanged';
    const previous = slot.effective;
    let next: IpcacheEntry;
    if (slot.bySource !== undefined) {
      slot.bySource.set(entry.source, entry);
      next = strongest(slot.bySource.values())!;
    } else if (old !== undefined) {
      // The one source's entry replaced: it is the effective one (and what sourceEntry answers from now on).
      next = entry;
      slot.effective = entry;
    } else {
      slot.bySource = new Map([
        [previous.source, previous],
        [entry.source, entry],
      ]);
      next = strongest(slot.bySource.values())!;
    }
    this.#emitSource({ type: 'upsert', entry });
    if (next === previous) return 'shadowed';
    slot.effective = next;
    this.#emit((l) => l.onUpsert(next, previous));
    return 'updated';
  }

  /**
   * Removes the source's entry for the prefix only if it still carries the
   * caller's owner: a late delete from an endpoint that gave the address up
   * must not wipe the entry of the endpoint that reuses it (Cilium #19958).
   */
  delete(prefixText: string, meta: IpcacheMetadata): DeleteOutcome {
    checkMetadata(meta);
    const prefix = parsePrefixInput(prefixText);
    const slot = this.#slots.get(prefix);
    const old = slot === undefined ? undefined : sourceEntry(slot, meta.source);
    if (slot === undefined || old === undefined) return 'not-found';
    if (old.owner !== meta.owner) {
      this.#logger?.debug({ prefix: old.prefix, owner: old.owner, deleter: meta.owner }, 'ipcache delete by a former owner ignored');
      return 'owner-mismatch';
    }
    const previous = slot.effective;
    let next: IpcacheEntry | undefined;
    if (slot.bySource !== undefined) {
      slot.bySource.delete(meta.source);
      next = strongest(slot.bySource.values());
      // Back to one source: the slot's compact form.
      if (slot.bySource.size === 1) slot.bySource = undefined;
    }
    this.#emitSource({ type: 'delete', entry: old });
    if (next === undefined) {
      this.#slots.delete(prefix);
      this.#emit((l) => l.onDelete(previous));
    } else if (next !== previous) {
      slot.effective = next;
      this.#emit((l) => l.onUpsert(next, previous));
    }
    return 'deleted';
  }

  /** Longest-prefix match for an address (the datapath's lookup). */
  lookup(ip: string): IpcacheEntry | undefined {
    return this.#slots.lookup(ip)?.value.effective;
  }

  /** The effective entry of exactly this prefix. */
  get(prefixText: string): IpcacheEntry | undefined {
    return this.#slots.get(parsePrefixInput(prefixText))?.effective;
  }

  /** Every source's entry for the prefix, strongest first (for `ip get` and debugging). */
  candidates(prefixText: string): IpcacheEntry[] {
    const slot = this.#slots.get(parsePrefixInput(prefixText));
    return slot === undefined ? [] : slotEntries(slot).sort((a, b) => sourcePriority(b.source) - sourcePriority(a.source));
  }

  /** Effective entries, IPv4 before IPv6, then by prefix text. */
  list(): IpcacheEntry[] {
    return [...this.#slots.values()]
      .sort((a, b) => a.prefix.family - b.prefix.family || (a.effective.prefix < b.effective.prefix ? -1 : a.effective.prefix > b.effective.prefix ? 1 : 0))
      .map((s) => s.effective);
  }

  /** Entries of one source (e.g. what this node publishes). */
  listSource(source: IpcacheSource): IpcacheEntry[] {
    const out: IpcacheEntry[] = [];
    for (const s of this.#slots.values()) {
      const e = sourceEntry(s, source);
      if (e !== undefined) out.push(e);
    }
    return out;
  }

  /**
   * Effective-entry changes. With `replay`, the listener first gets an
   * onUpsert for every current entry (a datapath filling its map at start).
   */
  subscribe(listener: IpcacheListener, options: { replay?: boolean } = {}): () => void {
    if (options.replay === true) for (const s of this.#slots.values()) listener.onUpsert(s.effective, undefined);
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Changes to one source's own entries, effective or shadowed. */
  watchSource(source: IpcacheSource, listener: (change: SourceChange) => void): () => void {
    let set = this.#sourceListeners.get(source);
    if (set === undefined) {
      set = new Set();
      this.#sourceListeners.set(source, set);
    }
    set.add(listener);
    return () => set.delete(listener);
  }

  #emit(call: (l: IpcacheListener) => void): void {
    for (const l of this.#listeners) {
      try {
        call(l);
      } catch (err) {
        // One listener's failure must not leave the others (or the cache) half-updated; logged, not hidden.
        this.#logger?.error({ err }, 'ipcache listener threw');
      }
    }
  }

  #emitSource(change: SourceChange): void {
    for (const l of this.#sourceListeners.get(change.entry.source) ?? []) {
      try {
        l(change);
      } catch (err) {
        this.#logger?.error({ err }, 'ipcache source listener threw');
      }
    }
  }
}
