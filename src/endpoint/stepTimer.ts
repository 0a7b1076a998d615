import { performance } from 'node:perf_hooks';

/**
 * Wall time of each step of an endpoint's creation, in milliseconds, in the
 * order the steps ran: what `GET /endpoint/{id}` shows as `creationTimings`
 * and what the benchmarks split the agent's ADD by. A step that runs twice
 * (none does today) adds up.
 */
export class StepTimer {
  readonly #timings: Record<string, number> = {};
  #last = performance.now();

  /** Ends the step that started at the previous mark (or at construction). */
  mark(step: string): void {
    const now = performance.now();
    this.#timings[step] = (this.#timings[step] ?? 0) + (now - this.#last);
    this.#last = now;
  }

  /** Rounded to microseconds: finer digits are noise. */
  timings(): Record<string, number> {
    return Object.fromEntries(Object.entries(this.#timings).map(([k, v]) => [k, Math.round(v * 1000) / 1000]));
  }
}
