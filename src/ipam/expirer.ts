import type { Backend, KeyValue } from '../kvstore/types.js';

/**
 * Fires the allocator's expiry sweep at the earliest persisted deadline. The
 * deadlines themselves live in the kvstore (`expiry/<host>/<owner>`), so this
 * timer is only a wake-up: after a restart `start` re-arms it from the store,
 * and a sweep that runs late still releases everything past due.
 */
export class Expirer {
  private timer: NodeJS.Timeout | undefined;
  private armedAt = Infinity;
  private running: Promise<void> | undefined;
  private stopped = true;

  constructor(
    /** Releases what is due; returns the next pending deadline (epoch ms) or undefined. */
    private readonly sweep: () => Promise<number | undefined>,
    private readonly now: () => number,
    private readonly onError: (err: unknown) => void,
  ) {}

  start(firstDeadline: number | undefined): void {
    this.stopped = false;
    if (firstDeadline !== undefined) this.arm(firstDeadline);
  }

  /** Makes sure a sweep runs no later than `at`. */
  arm(at: number): void {
    if (this.stopped || at >= this.armedAt) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.armedAt = at;
    // Clamp: setTimeout overflows above 2^31-1 ms; a far deadline re-arms on wake.
    const delay = Math.min(Math.max(0, at - this.now()), 2 ** 31 - 1);
    this.timer = setTimeout(() => this.fire(), delay);
    // An armed deadline must not keep a CLI process or a test alive.
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    this.armedAt = Infinity;
    this.running = (async () => {
      try {
        const next = await this.sweep();
        if (next !== undefined) this.arm(next);
      } catch (err) {
        this.onError(err);
        // Try again shortly: a kvstore blip must not leave deadlines unserved.
        this.arm(this.now() + 1000);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.armedAt = Infinity;
    await this.running;
  }
}

/**
 * The persisted deadlines under a host's expiry prefix: the owners due now
 * and when the next deadline falls (the sweep re-arms its timer for it).
 */
export async function readDeadlines(backend: Backend, prefix: string, now: number): Promise<{ due: Array<{ owner: string; kv: KeyValue }>; next: number | undefined }> {
  const res = await backend.list(prefix);
  const due: Array<{ owner: string; kv: KeyValue }> = [];
  let next: number | undefined;
  for (const kv of res.kvs) {
    const at = Number(kv.value);
    if (at <= now) due.push({ owner: kv.key.slice(prefix.length), kv });
    else if (!Number.isNaN(at)) next = next === undefined ? at : Math.min(next, at);
  }
  return { due, next };
}
