/**
 * SelectorCache: every distinct selector in use, mapped to the identities it
 * selects right now. Rules share entries by selector key (reference counted);
 * identity changes update each entry once and report which selections changed,
 * so the engine touches only the policies that use those selectors.
 */
import type { IdentitySelector } from './selector.js';
import type { Identity } from './types.js';

export interface CachedSelector {
  readonly selector: IdentitySelector;
  /** Identities selected now (a live view; do not mutate). */
  readonly selections: ReadonlySet<number>;
}

interface Entry extends CachedSelector {
  readonly selections: Set<number>;
  users: number;
}

export interface SelectionChange {
  readonly key: string;
  readonly added: readonly number[];
  readonly removed: readonly number[];
}

export class SelectorCache {
  readonly #entries = new Map<string, Entry>();
  readonly #identities = new Map<number, Identity>();
  /** `key=value` → identities carrying that label: candidates for indexed selectors. */
  readonly #identitiesByLabel = new Map<string, Set<number>>();
  /** Selectors by their index label, and the ones without one (tried against every identity). */
  readonly #indexed = new Map<string, Set<Entry>>();
  readonly #unindexed = new Set<Entry>();

  constructor(identities: Iterable<Identity> = []) {
    for (const id of identities) this.#addIdentity(id);
  }

  #addIdentity(id: Identity): void {
    this.#identities.set(id.id, id);
    for (const l of id.labels) {
      const k = `${l.key}=${l.value}`;
      let set = this.#identitiesByLabel.get(k);
      if (set === undefined) this.#identitiesByLabel.set(k, (set = new Set()));
      set.add(id.id);
    }
  }

  #removeIdentity(id: number): boolean {
    const identity = this.#identities.get(id);
    if (identity === undefined) return false;
    this.#identities.delete(id);
    for (const l of identity.labels) this.#identitiesByLabel.get(`${l.key}=${l.value}`)?.delete(id);
    return true;
  }

  /** Selectors that could select an identity with these labels. */
  *#candidates(identity: Identity): Iterable<Entry> {
    yield* this.#unindexed;
    for (const l of identity.labels) {
      const set = this.#indexed.get(`${l.key}=${l.value}`);
      if (set !== undefined) yield* set;
    }
  }

  /** Takes a reference on the selector; the first reference computes its selections. */
  acquire(selector: IdentitySelector): CachedSelector {
    let e = this.#entries.get(selector.key);
    if (e === undefined) {
      const selections = new Set<number>();
      const index = selector.indexLabel;
      const candidates = index === undefined ? this.#identities.keys() : (this.#identitiesByLabel.get(index) ?? []);
      for (const id of candidates) if (selector.matches(this.#identities.get(id)!.labels)) selections.add(id);
      e = { selector, selections, users: 0 };
      this.#entries.set(selector.key, e);
      if (index === undefined) this.#unindexed.add(e);
      else {
        let set = this.#indexed.get(index);
        if (set === undefined) this.#indexed.set(index, (set = new Set()));
        set.add(e);
      }
    }
    e.users++;
    return e;
  }

  release(selector: IdentitySelector): void {
    const e = this.#entries.get(selector.key);
    if (e === undefined) return;
    if (--e.users > 0) return;
    this.#entries.delete(selector.key);
    const index = selector.indexLabel;
    if (index === undefined) this.#unindexed.delete(e);
    else this.#indexed.get(index)?.delete(e);
  }

  get(key: string): CachedSelector | undefined {
    return this.#entries.get(key);
  }

  identity(id: number): Identity | undefined {
    return this.#identities.get(id);
  }

  identities(): IterableIterator<Identity> {
    return this.#identities.values();
  }

  /**
   * Applies identity additions (or label changes of an existing id) and
   * removals; returns the selections that changed, per selector key.
   */
  updateIdentities(added: readonly Identity[], removed: readonly number[]): SelectionChange[] {
    const changes = new Map<string, { added: number[]; removed: number[] }>();
    const note = (key: string) => {
      let c = changes.get(key);
      if (c === undefined) changes.set(key, (c = { added: [], removed: [] }));
      return c;
    };
    for (const id of removed) {
      const identity = this.#identities.get(id);
      if (identity === undefined || !this.#removeIdentity(id)) continue;
      for (const e of this.#candidates(identity)) if (e.selections.delete(id)) note(e.selector.key).removed.push(id);
    }
    for (const id of added) {
      const prev = this.#identities.get(id.id);
      if (prev !== undefined) {
        // Same id, new labels: drop it from what it matched before, then match afresh.
        this.#removeIdentity(id.id);
        for (const e of this.#candidates(prev)) if (!e.selector.matches(id.labels) && e.selections.delete(id.id)) note(e.selector.key).removed.push(id.id);
      }
      this.#addIdentity(id);
      for (const e of new Set(this.#candidates(id))) {
        if (e.selections.has(id.id) || !e.selector.matches(id.labels)) continue;
        e.selections.add(id.id);
        note(e.selector.key).added.push(id.id);
      }
    }
    return [...changes].map(([key, c]) => ({ key, ...c }));
  }

  /** For `GET /policy/selectors`: each selector, its users and its identities. */
  list(): Array<{ selector: string; users: number; identities: number[] }> {
    return [...this.#entries.values()]
      .map((e) => ({ selector: e.selector.key, users: e.users, identities: [...e.selections].sort((a, b) => a - b) }))
      .sort((a, b) => (a.selector < b.selector ? -1 : a.selector > b.selector ? 1 : 0));
  }
}
