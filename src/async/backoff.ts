/**
 * The one exponential back-off of the agent, from cockatiel (the library the
 * etcd backend's fault handling already uses): every retry loop and retry
 * timer takes its delays from here, so they all grow and cap the same way.
 */
import { ExponentialBackoff, fullJitterGenerator, noJitterGenerator, type GeneratorFn, type IBackoff } from 'cockatiel';

type ExponentialBackoffGenerator = GeneratorFn<unknown>;

export interface BackoffOptions {
  /** The first delay. */
  readonly initialMs: number;
  /** No delay grows past this. */
  readonly maxMs: number;
  /**
   * Spread of the delays: none (initialMs, doubling, capped at maxMs), full
   * (a random part of that: many hosts racing for one key do not retry in
   * step) or decorrelated (cockatiel's default, for reconnects).
   */
  readonly jitter?: 'none' | 'full' | 'decorrelated';
}

/** cockatiel's policy itself, also for a library that takes one (etcd3's watchBackoff). */
export function exponentialBackoff(o: BackoffOptions): ExponentialBackoff<unknown> {
  const delays = { initialDelay: o.initialMs, maxDelay: o.maxMs };
  switch (o.jitter ?? 'none') {
    case 'none':
      return new ExponentialBackoff<unknown>({ ...delays, generator: noJitterGenerator as ExponentialBackoffGenerator });
    case 'full':
      return new ExponentialBackoff<unknown>({ ...delays, generator: fullJitterGenerator as ExponentialBackoffGenerator });
    case 'decorrelated':
      return new ExponentialBackoff<unknown>(delays);
  }
}

/**
 * The delays of one thing retried until it works or its caller gives up.
 * reset() once it worked, so the next failure starts over.
 */
export class Backoff {
  readonly #policy: ExponentialBackoff<unknown>;
  #current: IBackoff<unknown> | undefined;
  #attempts = 0;

  constructor(readonly options: BackoffOptions) {
    this.#policy = exponentialBackoff(options);
  }

  /** The delay before the next attempt (each call is one more attempt). */
  next(): number {
    this.#current = this.#current === undefined ? this.#policy.next() : this.#current.next(undefined);
    this.#attempts++;
    const d = this.#current.duration;
    // initialMs 0 times 2^1024 is NaN: a zero back-off stays zero.
    return Number.isNaN(d) ? 0 : d;
  }

  /** Failed attempts since the last reset. */
  get attempts(): number {
    return this.#attempts;
  }

  reset(): void {
    this.#current = undefined;
    this.#attempts = 0;
  }
}
