/**
 * What a test file set up, undone newest first in its `after` hook: every step
 * runs even when one before it fails (a leftover namespace must not keep the
 * agent alive), and the failures are reported together at the end.
 */
export class CleanupStack {
  private readonly steps: Array<{ what: string; fn: () => Promise<unknown> }> = [];

  push(what: string, fn: () => Promise<unknown>): void {
    this.steps.push({ what, fn });
  }

  async run(): Promise<void> {
    const errors: string[] = [];
    for (const step of this.steps.splice(0).reverse()) {
      try {
        await step.fn();
      } catch (e) {
        errors.push(`${step.what}: ${(e as Error).message}`);
      }
    }
    if (errors.length > 0) throw new Error(`cleanup failed: ${errors.join('\n')}`);
  }
}
