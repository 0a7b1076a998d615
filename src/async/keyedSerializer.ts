/**
 * Runs async operations one at a time per key, in call order, while
 * different keys proceed in parallel. An operation starts once the one
 * before it on its key has settled, succeeded or failed: one failure must
 * not wedge the key, and its caller alone sees it. The keys with an
 * operation queued or running are the "in flight" set (CNI GC must not
 * touch an attachment whose call is still running).
 */
export class KeyedSerializer<K = string> {
  /** Per key: settles (never rejects) when the last operation queued on it has settled. */
  readonly #tails = new Map<K, Promise<void>>();

  run<T>(key: K, op: () => T | Promise<T>): Promise<T> {
    const prev = this.#tails.get(key) ?? Promise.resolve();
    const next = prev.then(op);
    const tail = next.then(settled, settled);
    this.#tails.set(key, tail);
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return next;
  }

  /** Keys with an operation queued or running. */
  held(): Set<K> {
    return new Set(this.#tails.keys());
  }

  /** Resolves when the operations queued so far (on `key`, or on every key) have settled; later ones are not waited for. */
  async settled(key?: K): Promise<void> {
    if (key !== undefined) return this.#tails.get(key);
    await Promise.all([...this.#tails.values()]);
  }

  /** Resolves when no operation is queued on any key, also ones queued while waiting. */
  async idle(): Promise<void> {
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
  }
}

/** One queue: a KeyedSerializer with a single key, for an object whose every write must run alone. */
export class Serializer {
  readonly #keyed = new KeyedSerializer<0>();

  run<T>(op: () => T | Promise<T>): Promise<T> {
    return this.#keyed.run(0, op);
  }

  /** True while an operation is queued or running. */
  get busy(): boolean {
    return this.#keyed.held().size > 0;
  }

  /** Resolves when the operations queued so far have settled (not ones queued later). */
  settled(): Promise<void> {
    return this.#keyed.settled(0);
  }

  /** Resolves when nothing is queued, also operations queued while waiting. */
  idle(): Promise<void> {
    return this.#keyed.idle();
  }
}

function settled(): void {}
