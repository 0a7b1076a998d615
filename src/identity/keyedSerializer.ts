/**
 * Runs async operations one at a time per key, in call order, while
 * different keys proceed in parallel. Allocation and release of one label set
 * go through it so the local reference count and the node's usage key in the
 * kvstore never disagree.
 */
export class KeyedSerializer {
  readonly #tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, op: () => Promise<T>): Promise<T> {
    const prev = this.#tails.get(key) ?? Promise.resolve();
    // Chain on settlement, not success: one failed op must not block the key.
    const next = prev.then(op, op);
    const tail = next.catch(() => undefined);
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return next;
  }

  /** Resolves when every queued operation has settled. */
  async idle(): Promise<void> {
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
  }
}
