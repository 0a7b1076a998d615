/**
 * MapState: the per-endpoint policy map contents the datapath will hold.
 * Keys are (direction, peer identity with 0 as wildcard, protocol, port
 * prefix); values allow or deny. Changes are journalled so that any mix of
 * incremental edits and full recomputation tells exactly whether the map
 * changed (which endpoints need a regeneration). What to write is not
 * decided here: the datapath's writer diffs the state against what its map
 * holds (src/datapath/bpf/policyMapWriter.ts), the one diff path.
 */
import { formatPortKey, PORT_BITS, portKeyRank, type PortKey } from './ports.js';
import type { RuleOrigin } from './rule.js';
import { Proto, type Direction, type Verdict } from './types.js';

export interface MapKey extends PortKey {
  readonly direction: Direction;
  /** Peer identity; 0 = every peer. */
  readonly identity: number;
}

export interface MapEntry {
  readonly key: MapKey;
  readonly verdict: Verdict;
  /** The rules this entry comes from (for explain); empty for built-in entries. */
  readonly derivedFrom: readonly RuleOrigin[];
  /** Why an entry exists without a rule: 'not-enforced' (allow-all) or 'allow-localhost'. */
  readonly builtin?: 'not-enforced' | 'allow-localhost';
}

export function mapKeyString(k: MapKey): string {
  return `${k.direction === 'ingress' ? 'i' : 'e'}${k.identity}/${k.proto}/${k.port}/${k.prefixLen}`;
}

export function formatMapKey(k: MapKey): string {
  return `${k.direction} identity=${k.identity === 0 ? 'any' : k.identity} ${formatPortKey(k)}`;
}

export class MapState {
  readonly #entries = new Map<string, MapEntry>();
  /** key → entry as it was when the journal started (undefined = absent). */
  #journal = new Map<string, MapEntry | undefined>();

  get size(): number {
    return this.#entries.size;
  }

  get(key: MapKey): MapEntry | undefined {
    return this.#entries.get(mapKeyString(key));
  }

  entries(): IterableIterator<MapEntry> {
    return this.#entries.values();
  }

  set(entry: MapEntry): void {
    const k = mapKeyString(entry.key);
    if (!this.#journal.has(k)) this.#journal.set(k, this.#entries.get(k));
    this.#entries.set(k, entry);
  }

  delete(key: MapKey): void {
    const k = mapKeyString(key);
    if (!this.#entries.has(k)) return;
    if (!this.#journal.has(k)) this.#journal.set(k, this.#entries.get(k));
    this.#entries.delete(k);
  }

  /** Replaces the whole contents, journalling only what differs. */
  replaceAll(entries: Iterable<MapEntry>): void {
    const next = new Map<string, MapEntry>();
    for (const e of entries) next.set(mapKeyString(e.key), e);
    for (const [k, e] of this.#entries) if (!next.has(k)) this.delete(e.key);
    for (const e of next.values()) this.set(e);
  }

  /** Whether a key appeared, went or changed verdict since the last call; then a fresh journal. */
  takeChanged(): boolean {
    let changed = false;
    for (const [k, before] of this.#journal) {
      const now = this.#entries.get(k);
      if (now === undefined ? before !== undefined : before === undefined || before.verdict !== now.verdict) {
        changed = true;
        break;
      }
    }
    this.#journal = new Map();
    return changed;
  }

  /**
   * The entry the datapath picks for a packet: among keys matching the packet
   * (identity exact or 0; protocol exact or any; port inside the prefix) the
   * longest (protocol, port) prefix wins, and on a tie the identity-specific
   * key beats the wildcard. The engine builds states so that this order
   * already reflects deny precedence.
   */
  lookup(direction: Direction, identity: number, proto: number, port: number): MapEntry | undefined {
    const ids = identity === 0 ? [0] : [identity, 0];
    if (proto !== Proto.Any) {
      for (let len = PORT_BITS; len >= 0; len--) {
        const masked = len === 0 ? 0 : (port >> (PORT_BITS - len)) << (PORT_BITS - len);
        for (const id of ids) {
          const e = this.#entries.get(mapKeyString({ direction, identity: id, proto, port: masked, prefixLen: len }));
          if (e !== undefined) return e;
        }
      }
    }
    for (const id of ids) {
      const e = this.#entries.get(mapKeyString({ direction, identity: id, proto: Proto.Any, port: 0, prefixLen: 0 }));
      if (e !== undefined) return e;
    }
    return undefined;
  }

  /** Sorted plain entries (for the API, the datapath and stable test output); `builtin` kept: the datapath's cookie for the entry comes from it. */
  toJSON(): MapEntry[] {
    return [...this.#entries.values()]
      .sort((a, b) => compareKeys(a.key, b.key))
      .map((e) => ({ key: e.key, verdict: e.verdict, derivedFrom: e.derivedFrom, ...(e.builtin !== undefined ? { builtin: e.builtin } : {}) }));
  }
}

export function compareKeys(a: MapKey, b: MapKey): number {
  if (a.direction !== b.direction) return a.direction === 'ingress' ? -1 : 1;
  if (a.identity !== b.identity) return a.identity - b.identity;
  if (portKeyRank(a) !== portKeyRank(b)) return portKeyRank(a) - portKeyRank(b);
  if (a.proto !== b.proto) return a.proto - b.proto;
  return a.port - b.port;
}
