/**
 * Serialises work per key (one attachment's CNI calls, one endpoint's
 * lifecycle changes) while letting different keys run concurrently. The set
 * of held keys doubles as the "in flight" owners GC must not touch.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => (release = r));
    const tail = prev.then(() => mine);
    this.tails.set(key, tail);
    await prev;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }

  held(): Set<string> {
    return new Set(this.tails.keys());
  }
}
