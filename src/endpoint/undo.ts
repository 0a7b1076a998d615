import type { Logger } from '../logging/logger.js';

/**
 * A transaction's undo steps (containernetworking/plugins' deferred cleanup):
 * each step that changed something pushes its inverse; on failure they run
 * newest first, and a failing undo step is logged while the rest still run.
 */
export class UndoList {
  private readonly steps: Array<{ what: string; fn: () => Promise<unknown> }> = [];

  constructor(
    private readonly log: Logger,
    private readonly context: Record<string, unknown>,
  ) {}

  push(what: string, fn: () => Promise<unknown>): void {
    this.steps.push({ what, fn });
  }

  async rollBack(): Promise<void> {
    for (const step of this.steps.splice(0).reverse()) {
      try {
        await step.fn();
      } catch (undoErr) {
        this.log.error({ ...this.context, err: undoErr, step: step.what }, 'rollback step failed');
      }
    }
  }
}
