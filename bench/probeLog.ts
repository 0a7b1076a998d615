/**
 * A prober's attempts (one connection every millisecond or so) and when
 * their outcome settled: the propagation benches time a change from its
 * cause to the first attempt of a run of attempts that all saw it.
 */
export /** Probe attempts of the current trial (older ones dropped at each trial's start, so a lookup stays short). */
class ProbeLog {
  #since = 0n;
  #attempts: Array<{ startNs: bigint; ok: boolean }> = [];
  add = (startNs: bigint, ok: boolean) => {
    if (startNs >= this.#since) this.#attempts.push({ startNs, ok });
  };

  reset(since: bigint): void {
    this.#since = since;
    this.#attempts = this.#attempts.filter((a) => a.startNs >= since);
  }

  /** The start of the first attempt from which every attempt started before `finishedBefore` has outcome `ok`, once `stable` of them have it. */
  settled(ok: boolean, finishedBefore: bigint, stable = 30): bigint | undefined {
    const xs = this.#attempts.filter((a) => a.startNs < finishedBefore).sort((a, b) => (a.startNs < b.startNs ? -1 : a.startNs > b.startNs ? 1 : 0));
    let from = 0;
    for (let i = 0; i < xs.length; i++) if (xs[i]!.ok !== ok) from = i + 1;
    return xs.length - from >= stable ? xs[from]!.startNs : undefined;
  }

  /** Waits until the outcome `ok` holds (`settled`), up to `timeoutMs`; its start, or undefined. */
  async waitSettled(ok: boolean, timeoutMs: number): Promise<bigint | undefined> {
    const deadline = process.hrtime.bigint() + BigInt(timeoutMs) * 1_000_000n;
    for (;;) {
      const now = process.hrtime.bigint();
      // Only attempts old enough to have an outcome (a failure reports after its 50 ms timeout).
      const at = this.settled(ok, now - 70_000_000n);
      if (at !== undefined || now > deadline) return at;
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}
