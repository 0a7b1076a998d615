import { EndpointError, EndpointErrorCode } from './errors.js';

interface Batch<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

function newBatch<T>(): Batch<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // A request nobody awaits (one queued by a policy change) must not crash the
  // process when it fails: the run function records the failure on the
  // endpoint and logs it. Awaiting callers still see the rejection.
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

/**
 * One endpoint's regenerations: one at a time, in order, coalesced. Requests
 * that arrive while a regeneration runs are all served by the single next
 * one, which starts after the running one ends and so sees every change
 * they were made for. A request resolves with what the run that served it
 * returned (the policy revision it realized).
 */
export class RegenerationQueue<T> {
  #running: Promise<void> | undefined;
  #next: Batch<T> | undefined;
  #closed = false;
  #runs = 0;

  constructor(
    private readonly run: () => Promise<T>,
    private readonly name: string,
  ) {}

  /** Queues a regeneration (or joins the one already queued). */
  request(): Promise<T> {
    if (this.#closed) {
      const refused = newBatch<T>();
      refused.reject(new EndpointError(EndpointErrorCode.DISCONNECTING, `${this.name} is being deleted`));
      return refused.promise;
    }
    this.#next ??= newBatch<T>();
    const promise = this.#next.promise;
    // Started on a microtask, so requests made in one synchronous burst share one run.
    this.#running ??= Promise.resolve().then(() => this.#drain());
    return promise;
  }

  async #drain(): Promise<void> {
    while (this.#next !== undefined && !this.#closed) {
      const batch = this.#next;
      this.#next = undefined;
      this.#runs++;
      try {
        batch.resolve(await this.run());
      } catch (err) {
        batch.reject(err);
      }
    }
    this.#running = undefined;
  }

  /** Whether a regeneration runs or is queued. */
  get busy(): boolean {
    return this.#running !== undefined;
  }

  /** Whether a regeneration is queued behind the running one. */
  get pending(): boolean {
    return this.#next !== undefined;
  }

  /** Regenerations started so far. */
  get runs(): number {
    return this.#runs;
  }

  /** Resolves once nothing runs or is queued. */
  async idle(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
  }

  /** No more regenerations: a queued one is rejected, a running one is waited for. */
  async close(): Promise<void> {
    this.#closed = true;
    const queued = this.#next;
    this.#next = undefined;
    queued?.reject(new EndpointError(EndpointErrorCode.DISCONNECTING, `${this.name} is being deleted`));
    await this.idle();
  }
}
