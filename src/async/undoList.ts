import type { Logger } from '../logging/logger.js';

/** An undo step that threw, with the label it was added under. */
export interface UndoFailure {
  readonly label: string;
  readonly error: unknown;
}

/**
 * Steps that take back what an operation did so far
 * (containernetworking/plugins' deferred cleanup; a teardown in reverse
 * order of start-up): each step that changed something adds its inverse,
 * and they run newest first. A failing step does not stop the ones before
 * it: a half-done undo leaves less behind than one that gave up at the
 * first error.
 */
export class UndoList {
  readonly #steps: Array<{ label: string; fn: () => unknown }> = [];

  add(fn: () => unknown, label: string): void {
    this.#steps.push({ label, fn });
  }

  get size(): number {
    return this.#steps.length;
  }

  /** Runs every step once, newest first, also after one fails; answers the failures in the order they ran. */
  async runAll(): Promise<UndoFailure[]> {
    const failures: UndoFailure[] = [];
    for (const step of this.#steps.splice(0).reverse()) {
      try {
        await step.fn();
      } catch (error) {
        failures.push({ label: step.label, error });
      }
    }
    return failures;
  }

  /** runAll for a failed operation whose own error is what its caller sees: each failed step is logged with `context`. */
  async rollBack(log: Logger, message: string, context: Record<string, unknown> = {}): Promise<void> {
    for (const f of await this.runAll()) log.error({ ...context, err: f.error, step: f.label }, message);
  }
}
