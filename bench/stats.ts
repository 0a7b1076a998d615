export interface Summary {
  n: number;
  median: number;
  p90: number;
  mean: number;
}

/** Median and p90 of latency samples; benchmarks report these, never a single run. */
export function summarize(samples: readonly number[]): Summary {
  if (samples.length === 0) throw new Error('summarize: no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { n: sorted.length, median: at(0.5), p90: at(0.9), mean: sorted.reduce((a, b) => a + b, 0) / sorted.length };
}
