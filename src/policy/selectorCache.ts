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

  constructor(identities: Iterable<Identity> = []) {
    for (const id of identities) this.#identities.set(id.id, id);
  }

  /** Takes a reference on the selector; the first reference computes its selections. */
  acquire(selector: IdentitySelector): CachedSelector {
    let e = this.#entries.get(selector.key);
    if (e === undefined) {
      const selections = new Set<number>();
      for (const id of this.#identities.values()) if (selector.matches(id.labels)) selections.add(id.id);
      e = { selector, selections, users: 0 };
      this.#entries.set(selector.key, e);
    }
    e.users++;
    return e;
  }

  release(selector: IdentitySelector): void {
    const e = this.#entries.get(selector.key);
    if (e === undefined) return;
    if (--e.users <= 0) this.#entries.delete(selector.key);
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
      if (!this.#identities.delete(id)) continue;
      for (const [key, e] of this.#entries) if (e.selections.delete(id)) note(key).removed.push(id);
    }
    for (const id of added) {
      this.#identities.set(id.id, id);
      for (const [key, e] of this.#entries) {
        const match = e.selector.matches(id.labels);
        const had = e.selections.has(id.id);
        if (match && !had) {
          e.selections.add(id.id);
          note(key).added.push(id.id);
        } else if (!match && had) {
          e.selections.delete(id.id);
          note(key).removed.push(id.id);
        }
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
