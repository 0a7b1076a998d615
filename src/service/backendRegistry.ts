/**
 * Backend IDs: one per (address, port, protocol), shared by every service
 * that has that backend, held while any service refers to it and freed with
 * the last reference. IDs are handed out from a cursor that moves forward,
 * so an ID just freed is not handed out again at once (conntrack entries
 * that still name it expire by themselves: the datapath moves their
 * connections, as the ID is no member of their service; and a reader of old
 * dumps is not confused).
 * The services' records persist the IDs; `restore` takes them back.
 */
import type { LbBackendState } from '../datapath/types.js';

/** Backend IDs are u32 in the maps; kept below 2^31 so they stay small integers everywhere. */
export const MAX_BACKEND_ID = 0x7fffffff;

/** The order in which references decide a shared backend's state: a backend some service still serves through is active. */
const STATE_RANK: Record<LbBackendState, number> = { active: 0, terminating: 1, maintenance: 2, quarantined: 3 };

interface BackendRef {
  readonly id: number;
  readonly key: string;
  /** Referring service → the state that service gives the backend. */
  readonly refs: Map<number, LbBackendState>;
}

/** What one service's new set of backends changed, and how to take it back. */
export interface RefChange {
  /** Backends that are new to the registry (IDs just allocated). */
  allocated: number[];
  /** Backends no service refers to any more (their IDs are free). */
  freed: number[];
  /** Puts the registry back as it was before the change. */
  undo(): void;
}

export class BackendRegistry {
  readonly #byKey = new Map<string, BackendRef>();
  readonly #byId = new Map<number, BackendRef>();
  #cursor = 0;

  constructor(private readonly maxId: number = MAX_BACKEND_ID) {}

  get size(): number {
    return this.#byKey.size;
  }

  idOf(key: string): number | undefined {
    return this.#byKey.get(key)?.id;
  }

  keyOf(id: number): string | undefined {
    return this.#byId.get(id)?.key;
  }

  /** Every backend ID in use. */
  ids(): number[] {
    return [...this.#byId.keys()];
  }

  /** The state the datapath holds for a backend: the most serving one any referring service gives it. */
  stateOf(key: string): LbBackendState | undefined {
    const ref = this.#byKey.get(key);
    if (!ref || ref.refs.size === 0) return undefined;
    let best: LbBackendState = 'quarantined';
    for (const s of ref.refs.values()) if (STATE_RANK[s] < STATE_RANK[best]) best = s;
    return best;
  }

  /**
   * Takes a persisted ID back for `key` (at restore). False when the ID is
   * taken by another key or the key already has another ID: the caller
   * allocates a new one.
   */
  claim(key: string, id: number): boolean {
    if (!Number.isInteger(id) || id < 1 || id > this.maxId) return false;
    const byKey = this.#byKey.get(key);
    if (byKey) return byKey.id === id;
    if (this.#byId.has(id)) return false;
    this.#add(key, id);
    this.#cursor = Math.max(this.#cursor, id);
    return true;
  }

  /**
   * Makes service `serviceId` refer to exactly `backends` (key → state),
   * allocating IDs for new keys and freeing those it was the last to refer to.
   */
  setRefs(serviceId: number, backends: ReadonlyMap<string, LbBackendState>): RefChange {
    const previous = new Map<string, LbBackendState>();
    for (const ref of this.#byKey.values()) {
      const s = ref.refs.get(serviceId);
      if (s !== undefined) previous.set(ref.key, s);
    }
    return this.#apply(serviceId, previous, backends);
  }

  /** The backends service `serviceId` refers to (key → state), as setRefs last left them. */
  refsOf(serviceId: number, keys: Iterable<string>): Map<string, LbBackendState> {
    const out = new Map<string, LbBackendState>();
    for (const key of keys) {
      const s = this.#byKey.get(key)?.refs.get(serviceId);
      if (s !== undefined) out.set(key, s);
    }
    return out;
  }

  /**
   * As setRefs, when the caller knows the service's previous keys (no scan
   * of the whole registry: programming 10,000 services stays linear).
   */
  replaceRefs(serviceId: number, previousKeys: Iterable<string>, backends: ReadonlyMap<string, LbBackendState>): RefChange {
    return this.#apply(serviceId, this.refsOf(serviceId, previousKeys), backends);
  }

  #apply(serviceId: number, previous: ReadonlyMap<string, LbBackendState>, next: ReadonlyMap<string, LbBackendState>): RefChange {
    let fresh = 0;
    for (const key of next.keys()) if (!this.#byKey.has(key)) fresh++;
    // Checked before anything changes, so a refusal leaves the registry as it was.
    if (this.#byId.size + fresh > this.maxId) throw new RangeError(`no free backend ID (${this.#byId.size} of ${this.maxId} in use, ${fresh} more needed)`);
    const allocated: number[] = [];
    const freed: BackendRef[] = [];
    for (const [key, state] of next) {
      let ref = this.#byKey.get(key);
      if (!ref) {
        ref = this.#add(key, this.#allocate());
        allocated.push(ref.id);
      }
      ref.refs.set(serviceId, state);
    }
    for (const key of previous.keys()) {
      if (next.has(key)) continue;
      const ref = this.#byKey.get(key);
      if (!ref) continue;
      ref.refs.delete(serviceId);
      if (ref.refs.size === 0) {
        this.#remove(ref);
        freed.push(ref);
      }
    }
    return {
      allocated,
      freed: freed.map((r) => r.id),
      undo: () => {
        for (const r of freed) {
          this.#byKey.set(r.key, r);
          this.#byId.set(r.id, r);
        }
        for (const key of next.keys()) {
          const ref = this.#byKey.get(key);
          if (!ref) continue;
          const before = previous.get(key);
          if (before === undefined) ref.refs.delete(serviceId);
          else ref.refs.set(serviceId, before);
          if (ref.refs.size === 0) this.#remove(ref);
        }
        for (const [key, state] of previous) this.#byKey.get(key)?.refs.set(serviceId, state);
      },
    };
  }

  /** Drops IDs claimed at restore that no service ended up referring to. */
  dropUnreferenced(): number[] {
    const dropped: number[] = [];
    for (const ref of [...this.#byKey.values()]) {
      if (ref.refs.size > 0) continue;
      this.#remove(ref);
      dropped.push(ref.id);
    }
    return dropped;
  }

  #add(key: string, id: number): BackendRef {
    const ref: BackendRef = { id, key, refs: new Map() };
    this.#byKey.set(key, ref);
    this.#byId.set(id, ref);
    return ref;
  }

  #remove(ref: BackendRef): void {
    this.#byKey.delete(ref.key);
    this.#byId.delete(ref.id);
  }

  #allocate(): number {
    for (;;) {
      this.#cursor = this.#cursor >= this.maxId ? 1 : this.#cursor + 1;
      if (!this.#byId.has(this.#cursor)) return this.#cursor;
    }
  }
}
