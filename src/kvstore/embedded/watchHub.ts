import type { Watch, WatchEvent, WatchListener } from '../types.js';

/**
 * In-process fan-out of committed changes to watchers. The embedded store has
 * one writer (this process), and better-sqlite3 runs synchronously, so a
 * watcher that reads its history and registers in the same tick cannot miss a
 * commit: no write can land between the two. Delivery is asynchronous and
 * batched per watcher, and always in commit order, because each watcher has
 * one FIFO queue that both history and live events go through.
 */
export class EmbeddedWatch implements Watch {
  readonly ready = Promise.resolve();
  private queue: WatchEvent[] = [];
  private scheduled = false;
  private closed = false;
  private next: number;

  constructor(
    private readonly hub: WatchHub,
    readonly prefix: string,
    /** Events below this revision are not for this watch (a future start revision). */
    private readonly startRevision: number,
    private readonly listener: WatchListener,
  ) {
    this.next = startRevision;
  }


  get nextRevision(): number {
    return this.next;
  }

  matches(key: string): boolean {
    return key.startsWith(this.prefix);
  }

  enqueue(events: WatchEvent[]): void {
    if (this.closed) return;
    const mine = events.filter((e) => e.modRevision >= this.startRevision && this.matches(e.key));
    if (mine.length === 0) return;
    this.queue.push(...mine);
    this.schedule();
  }

  fail(err: Error): void {
    if (this.closed) return;
    this.hub.remove(this);
    this.closed = true;
    this.queue = [];
    setImmediate(() => this.listener.onError(err));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.queue = [];
    this.hub.remove(this);
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    if (this.closed || this.queue.length === 0) return;
    const batch = this.queue;
    this.queue = [];
    this.next = (batch[batch.length - 1] as WatchEvent).modRevision + 1;
    this.listener.onEvents(batch);
  }
}

export class WatchHub {
  private readonly watches = new Set<EmbeddedWatch>();

  add(w: EmbeddedWatch): void {
    this.watches.add(w);
  }

  remove(w: EmbeddedWatch): void {
    this.watches.delete(w);
  }

  /** Called after a write transaction committed, with its events in order. */
  publish(events: WatchEvent[]): void {
    if (events.length === 0) return;
    for (const w of this.watches) {
      w.enqueue(events);
    }
  }

  closeAll(): void {
    for (const w of [...this.watches]) void w.close();
  }
}
