export interface Summary {
  n: number;
  median: number;
  p90: number;
  mean: number;
}

/** The q-quantile (0..1) of samples, nearest rank. */
export function percentile(samples: readonly number[], q: number): number {
  if (samples.length === 0) throw new Error('percentile: no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Median and p90 of latency samples; benchmarks report these, never a single run. */
export function summarize(samples: readonly number[]): Summary {
  return { n: samples.length, median: percentile(samples, 0.5), p90: percentile(samples, 0.9), mean: samples.reduce((a, b) => a + b, 0) / samples.length };
}
